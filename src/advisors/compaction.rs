//! Compaction (seed 002 §3.4): the cheap local pre-check that decides whether the
//! compression-advisor is asked at all, and the new message list a compaction produces.
//!
//! The compacted conversation keeps the earliest system message, the earliest user prompt, a
//! summary written by the stateless CompactAgent together with the status of every plan task,
//! and the last N messages, moved earlier when needed so that a tool call and its result are
//! never split.

use chrono::Utc;

use crate::config::CompactionConfig;
use crate::protocol::{Message, Plan, Role};
pub use crate::providers::meter::estimate_tokens;

/// The prompt of the CompactAgent: a single model call with no tools, so it cannot compact,
/// call agents, or touch the session.
pub const COMPACT_PROMPT: &str = "You compress the earlier part of a coding agent's conversation so the agent can continue the task without it. Write a faithful, dense summary: the user's goal and constraints, decisions made and why, files read and changed (with paths), commands run and their outcomes, errors met and how they were handled, and what remains to be done. Keep exact names, paths, identifiers and numbers. Do not invent anything. Answer with the summary only.";

/// Whether the conversation is long enough to be worth asking the advisor about.
pub fn needs_check(messages: &[Message], config: &CompactionConfig) -> bool {
    let tokens = estimate_tokens(messages);
    tokens as f64 >= config.threshold * config.context_window as f64
        || messages.len() >= config.max_messages
}

/// The part of `messages` a compaction would replace: indices `[from, to)`. `None` when there
/// is nothing worth replacing.
pub fn replaceable(messages: &[Message], keep_last: usize) -> Option<(usize, usize)> {
    let first_user = messages.iter().position(|m| m.role == Role::User)?;
    let mut tail = messages.len().saturating_sub(keep_last.max(1));
    // Never start the kept tail with tool results whose call would be summarised away.
    while tail > 0 && messages[tail].role == Role::Tool {
        tail -= 1;
    }
    let from = first_user + 1;
    // Replacing fewer than two messages with a summary would not make anything shorter.
    (tail >= from + 2).then_some((from, tail))
}

/// [`replaceable`] for a compaction nop starts (the context is nearly full or overflowed): the
/// largest `keep` up to `keep_last` whose kept tail fits in `max_tail_tokens`, down to one
/// message, so a conversation of few long messages (a small context) is compacted too.
pub fn replaceable_to_fit(
    messages: &[Message],
    keep_last: usize,
    max_tail_tokens: u64,
) -> Option<(usize, usize)> {
    (1..=keep_last.max(1)).rev().find_map(|keep| {
        let range = replaceable(messages, keep)?;
        (keep == 1 || estimate_tokens(&messages[range.1..]) <= max_tail_tokens).then_some(range)
    })
}

/// The messages `[from, to)` as text for the CompactAgent.
pub fn render(messages: &[Message]) -> String {
    render_within(messages, usize::MAX)
}

/// The messages as text for the CompactAgent in at most about `max_bytes`: when they are longer
/// (a model server with a small context), each message keeps the start of its text, an equal
/// share of the room each.
pub fn render_within(messages: &[Message], max_bytes: usize) -> String {
    let total: usize = messages.iter().map(|m| m.content.len()).sum();
    let share = if total > max_bytes {
        (max_bytes / messages.len().max(1)).max(200)
    } else {
        usize::MAX
    };
    let mut out = String::new();
    for m in messages {
        out.push_str(&format!("[{}] ", m.role.as_str()));
        if let Some(call) = &m.tool_call {
            out.push_str(&format!("(result of {} {}) ", call.name, call.arguments));
        }
        if m.content.len() > share {
            let mut end = share;
            while !m.content.is_char_boundary(end) {
                end -= 1;
            }
            out.push_str(&m.content[..end]);
            out.push_str(&format!(" … [{} more bytes]", m.content.len() - end));
        } else {
            out.push_str(&m.content);
        }
        for call in &m.tool_calls {
            out.push_str(&format!("\n  → calls {} {}", call.name, call.arguments));
        }
        out.push('\n');
    }
    out
}

/// The session as JSON for an advisor, in about `max_bytes` of messages: its most recent ones
/// that fit (the last one always), and how many earlier ones were left out. The messages are
/// put back as they were.
pub fn session_within(
    state: &mut crate::session::SessionState,
    max_bytes: usize,
) -> (String, usize) {
    let messages = std::mem::take(&mut state.session.messages);
    let mut from = messages.len();
    let mut size = 0usize;
    while from > 0 {
        let m = &messages[from - 1];
        // The text, and room for the fields and the calls around it.
        let cost = m.content.len()
            + 256
            + m.tool_calls
                .iter()
                .chain(&m.tool_call)
                .map(|c| c.arguments.to_string().len() + 64)
                .sum::<usize>();
        if size + cost > max_bytes && from < messages.len() {
            break;
        }
        size += cost;
        from -= 1;
    }
    state.session.messages = messages[from..].to_vec();
    let json = serde_json::to_string(&state.session).unwrap_or_default();
    state.session.messages = messages;
    (json, from)
}

/// A status line for every plan task.
pub fn plan_summary(plan: &Plan) -> String {
    if plan.tasks.is_empty() {
        return "Plan: no tasks.".to_string();
    }
    let mut out = String::from("Plan status:");
    for t in &plan.tasks {
        out.push_str(&format!("\n- [{}] {}: {}", t.status, t.id, t.title));
    }
    out
}

/// What the consistency check before a compaction found (seed 002 §2.2), for the summary: the
/// plan status it keeps is the checked one.
pub fn consistency_note(decision: &super::ConsistencyDecision, repairs: &[String]) -> String {
    if decision.consistent {
        return "Consistency check: the plan agrees with the conversation.".to_string();
    }
    let mut out = String::new();
    if !repairs.is_empty() {
        out.push_str(&format!(
            "Consistency check: the plan above was repaired to match the conversation ({}).",
            repairs.join("; ")
        ));
    } else {
        out.push_str(
            "Consistency check: the plan above is out of step with the conversation; where they \
             differ, the conversation is right:",
        );
        for i in &decision.inconsistencies {
            let expected = i
                .expected_status
                .map(|s| format!(" (the conversation shows {s})"))
                .unwrap_or_default();
            out.push_str(&format!(
                "\n- task {}: {}{expected}",
                i.task_id,
                i.description.trim()
            ));
        }
    }
    out
}

/// What a compaction keeps of the conversation besides its summary: the first system
/// message, the first user prompt, and the tail after the replaced range. Taken before the
/// CompactAgent is asked, so the whole conversation need not stay in memory meanwhile.
#[derive(Debug)]
pub struct Kept {
    system: Option<Message>,
    first: Option<Message>,
    replaced: usize,
    tail: Vec<Message>,
}

impl Kept {
    pub fn of(messages: &[Message], range: (usize, usize)) -> Kept {
        let (from, to) = range;
        Kept {
            system: messages.iter().find(|m| m.role == Role::System).cloned(),
            first: messages[..from]
                .iter()
                .rfind(|m| m.role == Role::User)
                .cloned(),
            replaced: to - from,
            tail: messages[to..].to_vec(),
        }
    }

    /// The compacted conversation: first system message, first user prompt, summary with the
    /// plan's status (and the consistency check's note on it) and the session's goal, then the
    /// kept tail.
    pub fn compacted(
        self,
        summary: &str,
        plan: &Plan,
        consistency: Option<&str>,
        goal: Option<&crate::protocol::Goal>,
    ) -> Vec<Message> {
        let mut out = Vec::with_capacity(self.tail.len() + 3);
        out.extend(self.system);
        out.extend(self.first);
        let mut note = Message::new(
            Role::User,
            format!(
                "[Summary of {} earlier messages, compacted by nop; the full history is in the session's snapshots]\n{}\n\n{}{}{}",
                self.replaced,
                summary.trim(),
                plan_summary(plan),
                consistency.map(|c| format!("\n{c}")).unwrap_or_default(),
                goal.filter(|g| g.status == crate::protocol::GoalStatus::Active
                    || g.status == crate::protocol::GoalStatus::NotMet)
                    .map(|g| format!("\n\n{}", goal_note(g)))
                    .unwrap_or_default()
            ),
            Utc::now(),
        );
        note.compaction_summary = Some(true);
        out.push(note);
        out.extend(self.tail);
        out
    }
}

/// A fingerprint of `messages` (of their JSON, hashed as it is written, never held): equal
/// for the same conversation, so a compaction can tell that the part it read is unchanged
/// without keeping a copy of it. `None` if they could not be written (never for plain data).
pub fn fingerprint(messages: &[Message]) -> Option<u64> {
    use std::hash::Hasher;
    struct Hashing(std::hash::DefaultHasher);
    impl std::io::Write for Hashing {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.write(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, Hashing(Default::default()));
    serde_json::to_writer(&mut out, messages).ok()?;
    let mut hashing = out.into_inner().ok()?;
    hashing.0.write_usize(messages.len());
    Some(hashing.0.finish())
}

/// The goal as a compaction keeps it: the objective, how it is checked, and the last check.
fn goal_note(goal: &crate::protocol::Goal) -> String {
    let mut out = format!("Goal (kept by every compaction): {}", goal.objective);
    if let Some(cmd) = &goal.until {
        out.push_str(&format!(
            "\nIt is met when `{cmd}` exits 0 and goal-checker agrees."
        ));
    }
    if let Some(last) = goal.checks.last() {
        out.push_str(&format!(
            "\nLast check ({} so far): {}",
            goal.checks.len(),
            last.reason
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ToolCall;

    fn msg(role: Role, text: &str) -> Message {
        Message::new(role, text, Utc::now())
    }

    #[test]
    fn keeps_the_four_parts_and_never_splits_a_call_from_its_result() {
        let call = ToolCall {
            id: "c".into(),
            name: "shell".into(),
            arguments: serde_json::json!({}),
            extra: Default::default(),
        };
        let mut messages = vec![msg(Role::System, "sys"), msg(Role::User, "task")];
        for i in 0..20 {
            messages.push(msg(Role::Assistant, &format!("a{i}")));
        }
        let mut with_call = msg(Role::Assistant, "calling");
        with_call.tool_calls.push(call.clone());
        messages.push(with_call);
        let mut result = msg(Role::Tool, "out");
        result.tool_call = Some(call);
        messages.push(result);
        messages.push(msg(Role::Assistant, "last"));
        // keep_last 2 would start at the tool result: the tail moves back to its call.
        let range = replaceable(&messages, 2).expect("range");
        assert_eq!(messages[range.1].content, "calling");
        let plan = Plan::default();
        let out = Kept::of(&messages, range).compacted("S", &plan, None, None);
        let texts: Vec<&str> = out.iter().map(|m| m.content.as_str()).collect();
        assert_eq!(texts[0], "sys");
        assert_eq!(texts[1], "task");
        assert!(texts[2].contains("S") && texts[2].contains("Plan: no tasks."));
        assert_eq!(&texts[3..], &["calling", "out", "last"]);
        assert!(replaceable(&messages[..4], 10).is_none());
        // A compaction nop starts keeps fewer when keep_last leaves nothing to replace, or keeps
        // a tail too long for the context.
        assert_eq!(
            replaceable_to_fit(&messages[..4], 10, u64::MAX),
            replaceable(&messages[..4], 1)
        );
        assert!(replaceable_to_fit(&messages, 10, 0).is_some());
    }

    #[test]
    fn an_advisor_gets_the_most_recent_messages_that_fit_and_the_state_is_put_back() {
        let dir = tempfile::tempdir().expect("temp");
        let store = crate::session::Store::new(dir.path(), std::time::Duration::from_secs(5));
        let id = store
            .create("coder", Utc::now())
            .expect("create")
            .session_id;
        let messages: Vec<Message> = (0..50)
            .map(|n| msg(Role::User, &format!("m{n} {}", "x".repeat(1000))))
            .collect();
        store.append(&id, messages, Utc::now()).expect("append");
        let mut state = store.read(&id).expect("read");
        let before = state.session.clone();
        let (json, left_out) = session_within(&mut state, 10_000);
        assert_eq!(state.session, before, "put back as it was");
        let sent: crate::protocol::SessionFile = serde_json::from_str(&json).expect("JSON");
        let texts: Vec<&str> = sent
            .messages
            .iter()
            .filter_map(|m| m.content.split(' ').next())
            .collect();
        assert!((5..=10).contains(&texts.len()), "{texts:?}");
        assert_eq!(left_out + texts.len(), 50);
        assert_eq!(texts.last(), Some(&"m49"));
        assert!(json.len() < 12_000, "{}", json.len());
        // Room for everything: everything, nothing left out.
        let (json, left_out) = session_within(&mut state, usize::MAX);
        assert_eq!(left_out, 0);
        assert_eq!(
            serde_json::from_str::<crate::protocol::SessionFile>(&json).expect("JSON"),
            before
        );
        // A last message larger than the room is sent all the same.
        let (_, left_out) = session_within(&mut state, 10);
        assert_eq!(left_out, 49);
    }

    #[test]
    fn a_fingerprint_tells_a_changed_conversation_from_the_same_one() {
        let messages: Vec<Message> = (0..20).map(|n| msg(Role::User, &format!("m{n}"))).collect();
        let same = messages.clone();
        assert!(fingerprint(&messages).is_some());
        assert_eq!(fingerprint(&messages), fingerprint(&same));
        let mut changed = messages.clone();
        changed[3].content.push('!');
        assert_ne!(fingerprint(&messages), fingerprint(&changed));
        assert_ne!(fingerprint(&messages), fingerprint(&messages[..19]));
    }
}
