//! What a run's course says in words, the same in plain text (`output/text.rs`) and in the
//! transcript on a terminal (`transcript.rs`): the part of a tool call's arguments worth a
//! glance, and the line each note-worthy event is shown as.

use nop::protocol::events::Event;

use super::style::{one_line, visible};

/// Whether `event` is nop's own machinery at work (an advisor consulted): not on the screen
/// unless asked for (`--verbose`, `/verbose`); `/status` lists them.
pub fn internal(event: &Event) -> bool {
    matches!(
        event,
        Event::SubagentStarted { advisor: true, .. }
            | Event::SubagentFinished { advisor: true, .. }
    )
}

/// The part of a call's arguments worth a glance: the command, the path, or compact JSON.
pub fn brief_arguments(name: &str, arguments: &serde_json::Value) -> String {
    let pick = |key: &str| {
        arguments
            .get(key)
            .and_then(|v| v.as_str())
            .map(str::to_string)
    };
    if name == "update-plan"
        && let Some(tasks) = arguments.get("tasks").and_then(|t| t.as_array())
    {
        return format!(
            "{} task{}",
            tasks.len(),
            if tasks.len() == 1 { "" } else { "s" }
        );
    }
    let text = match name {
        "shell" => pick("command"),
        "search-files" => pick("pattern"),
        "ask-user" => pick("question"),
        "load-skill" => pick("name"),
        _ => pick("path"),
    }
    .unwrap_or_else(|| arguments.to_string());
    let text = one_line(&text);
    if text.chars().count() > 120 {
        format!("{}…", text.chars().take(120).collect::<String>())
    } else {
        text
    }
}

/// The line an event of the run's course is shown as (on stderr), the same plain or live, and what the
/// status line says after it (live).
pub fn note(event: &Event) -> Option<(String, Option<String>)> {
    // Agent names, statuses and models may come from the model's calls.
    note_text(event).map(|(line, doing)| (visible(&line).into_owned(), doing))
}

fn note_text(event: &Event) -> Option<(String, Option<String>)> {
    let thinking = Some("thinking".to_string());
    Some(match event {
        Event::SessionStarted {
            session_id,
            agent,
            model,
            resumed,
            priority,
            emergency,
        } => {
            let verb = if *resumed { "continuing" } else { "session" };
            let priority = match (priority, emergency) {
                (Some(p), Some(why)) => format!(" · priority {p} (emergency: {why})"),
                (Some(p), None) => format!(" · priority {p}"),
                _ => String::new(),
            };
            (
                format!("{verb} {session_id} · {agent} · {model}{priority}"),
                None,
            )
        }
        Event::Queued { stop: true, .. } => (
            "  ■ stopping at the next checkpoint".into(),
            Some("working".into()),
        ),
        Event::Queued { position, .. } => (
            format!("  ✉ queued (position {position}); the agent reads it between tool calls"),
            Some("working".into()),
        ),
        Event::SubagentStarted {
            agent, session_id, ..
        } => (
            format!("  ↳ {agent} started (session {session_id})"),
            Some(format!("{agent} working")),
        ),
        Event::SubagentFinished {
            agent,
            status,
            duration_ms,
            ..
        } => (
            format!(
                "  ↳ {agent} {status} ({:.1} s)",
                *duration_ms as f64 / 1000.0
            ),
            thinking,
        ),
        Event::GoalChecked {
            met,
            reason,
            checks,
        } => (
            if *met {
                format!("  ◎ goal met (check {checks}): {reason}")
            } else {
                format!("  ◎ goal not met yet (check {checks}): {reason}")
            },
            thinking.clone(),
        ),
        Event::Paused { .. } => (
            "  ⏸ paused: a higher-priority session is running; waiting for it to end".into(),
            Some("paused".into()),
        ),
        Event::Resumed { .. } => ("  ▶ resumed".into(), thinking),
        Event::Unqueued { .. } => (
            "  ✉ not read yet: what you queued is back in the prompt".into(),
            None,
        ),
        Event::MessagesInjected { count } => (
            format!(
                "  ✉ {count} queued message{} taken into the conversation",
                if *count == 1 { "" } else { "s" }
            ),
            thinking,
        ),
        Event::Compacted {
            snapshot_id,
            messages_before,
            messages_after,
        } => (
            format!(
                "  ⇣ compacted {messages_before} → {messages_after} messages (full history in snapshot {snapshot_id})"
            ),
            None,
        ),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_is_shown_by_the_argument_that_says_most_on_one_line() {
        let shell = serde_json::json!({"command": "cargo test\n  --all", "timeout_s": 60});
        assert_eq!(brief_arguments("shell", &shell), "cargo test⏎  --all");
        let read = serde_json::json!({"path": "src/main.rs", "offset": 3});
        assert_eq!(brief_arguments("read-file", &read), "src/main.rs");
        let other = serde_json::json!({"a": 1});
        assert_eq!(brief_arguments("demo.add", &other), r#"{"a":1}"#);
        let long = serde_json::json!({"command": "x".repeat(300)});
        let shown = brief_arguments("shell", &long);
        assert_eq!(shown.chars().count(), 121);
        assert!(shown.ends_with('…'));
    }
}
