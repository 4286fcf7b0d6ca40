//! `nop memory summarize`: the `summarizer` agent turns one day of an agent's sessions into a
//! summary for its prompt history and the knowledge index (seed 001 §2.1, §2.3).

use chrono::{Local, NaiveDate, Utc};
use tokio_util::sync::CancellationToken;

use super::RunError;
use crate::memory::{Entry, MemoryStore, SummaryOutput};
use crate::protocol::{Message, Role, SessionFile};
use crate::providers::{ChatRequest, Provider};
use crate::workspace::Workspace;

const SUMMARIZER_PROMPT: &str = include_str!("../../.nop/.system/agents/summarizer.md");
/// Characters of conversation sent to the summarizer at most.
const MAX_INPUT: usize = 60_000;

/// The local calendar day a session was created on.
pub fn local_day(session: &SessionFile) -> NaiveDate {
    session.created_at.with_timezone(&Local).date_naive()
}

/// A summary, and the sessions that could not be read and so are not in it.
#[derive(Debug)]
pub struct Summary {
    /// `None` when the agent had no (readable) sessions that day.
    pub entry: Option<Entry>,
    /// One line per session left out: its id and why.
    pub left_out: Vec<String>,
    /// What the summarizer's request used (none when nothing was asked).
    pub tokens: Option<crate::protocol::TokenUsage>,
}

/// Every session of the store that reads, and one line (id and error) per one that does not.
fn readable_sessions(
    ws: &Workspace,
    config: &crate::config::Config,
) -> Result<(Vec<SessionFile>, Vec<String>), RunError> {
    let store = ws.store(config);
    let mut sessions = Vec::new();
    let mut unreadable = Vec::new();
    for id in store.ids()? {
        match store.read_session(&id) {
            Ok(s) => sessions.push(s),
            Err(e) => unreadable.push(format!("session {id} could not be read: {e}")),
        }
    }
    Ok((sessions, unreadable))
}

/// The top-level sessions of `agent` created on `date` (local time), oldest first, and the
/// sessions that could not be read (which may have been of that day).
pub fn sessions_of_day(
    ws: &Workspace,
    config: &crate::config::Config,
    agent: &str,
    date: NaiveDate,
) -> Result<(Vec<SessionFile>, Vec<String>), RunError> {
    let (sessions, unreadable) = readable_sessions(ws, config)?;
    let of_day = sessions
        .into_iter()
        .filter(|s| s.agent == agent && s.caller.is_none() && local_day(s) == date)
        .collect();
    Ok((of_day, unreadable))
}

/// The agent's prompt as configured, the base of its prompt history.
pub fn initial_prompt(ws: &Workspace, agent: &str) -> String {
    super::prompt::configured_prompt(ws, agent, super::prompt::BUILTIN_CODER)
}

fn render(sessions: &[SessionFile]) -> (String, usize, usize) {
    let mut out = String::new();
    let (mut messages, mut user) = (0, 0);
    for s in sessions {
        out.push_str(&format!(
            "## Session {} ({})\n",
            s.session_id,
            s.created_at.with_timezone(&Local).format("%H:%M")
        ));
        for m in &s.messages {
            messages += 1;
            match m.role {
                Role::System => continue,
                Role::User => user += 1,
                _ => {}
            }
            let text: String = m.content.chars().take(1500).collect();
            out.push_str(&format!("[{}] {text}\n", m.role.as_str()));
            for call in &m.tool_calls {
                out.push_str(&format!(
                    "  → {} {}\n",
                    call.name,
                    call.arguments
                        .to_string()
                        .chars()
                        .take(200)
                        .collect::<String>()
                ));
            }
        }
    }
    if out.len() > MAX_INPUT {
        let mut end = MAX_INPUT;
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        out.truncate(end);
        out.push_str("\n[… cut]");
    }
    (out, messages, user)
}

/// Summarises `date` for `agent` (no entry when it had no sessions that day). Sessions that
/// cannot be read are left out, logged, and listed in the result for the caller to show.
pub async fn summarize_day(
    ws: &Workspace,
    config: &crate::config::Config,
    provider: &Provider,
    agent: &str,
    date: NaiveDate,
    cancel: &CancellationToken,
) -> Result<Summary, RunError> {
    let store = MemoryStore::new(&ws.nop_dir());
    // Refuse before paying for a model call.
    not_summarized(&store, agent, date)?;
    let (sessions, left_out) = sessions_of_day(ws, config, agent, date)?;
    for line in &left_out {
        tracing::warn!(agent, op = "memory", date = %date, "left out of the summary: {line}");
    }
    if sessions.is_empty() {
        return Ok(Summary {
            entry: None,
            left_out,
            tokens: None,
        });
    }
    let (text, messages, user) = render(&sessions);
    ws.agents()?; // a broken agents.yml is an error, not a silent fallback
    let prompt = super::prompt::configured_prompt(ws, "summarizer", SUMMARIZER_PROMPT);
    let request = [
        Message::new(Role::System, prompt, Utc::now()),
        Message::new(
            Role::User,
            format!("Agent: {agent}\nDay: {date}\n\n{text}"),
            Utc::now(),
        ),
    ];
    let mut ignore = |_| {};
    let reply = provider
        .complete(
            ChatRequest {
                messages: &request,
                tools: &[],
                cache_key: None,
            },
            cancel,
            &mut ignore,
        )
        .await?;
    let output: SummaryOutput = crate::advisors::parse_decision(&reply.text).map_err(|e| {
        RunError::Agent(format!(
            "the summarizer's answer was not usable ({e}); nothing was stored"
        ))
    })?;
    let entry = store
        .append(
            agent,
            &initial_prompt(ws, agent),
            date,
            output,
            (messages, user),
            Utc::now(),
        )
        .map_err(|e| RunError::Agent(e.to_string()))?;
    tracing::info!(agent, op = "memory", result = "summarized", date = %date, entry = %entry.id, "day summarised");
    Ok(Summary {
        entry: Some(entry),
        left_out,
        tokens: Some(reply.usage),
    })
}

/// Refuses a day that already has a summary of `agent`'s (naming it).
fn not_summarized(store: &MemoryStore, agent: &str, date: NaiveDate) -> Result<(), RunError> {
    let existing = store
        .load(agent)
        .map_err(|e| RunError::Agent(e.to_string()))?
        .and_then(|m| {
            m.remaining()
                .find(|e| e.summary_date == date)
                .map(|e| e.id.clone())
        });
    match existing {
        None => Ok(()),
        Some(id) => Err(RunError::Agent(
            crate::memory::MemoryError::AlreadySummarized {
                agent: agent.to_string(),
                date,
                id,
            }
            .to_string(),
        )),
    }
}

/// The most recent earlier day with sessions of `agent` and no summary (removed ones count as
/// summarised: a person removed them on purpose).
pub fn pending_day(
    ws: &Workspace,
    config: &crate::config::Config,
    agent: &str,
    today: NaiveDate,
) -> Option<NaiveDate> {
    let memory = MemoryStore::new(&ws.nop_dir()).load(agent).ok().flatten();
    let done: Vec<NaiveDate> = memory
        .map(|m| m.entries.iter().map(|e| e.summary_date).collect())
        .unwrap_or_default();
    // Unreadable sessions are reported by the summary itself.
    let (sessions, _) = readable_sessions(ws, config).ok()?;
    let mut days: Vec<NaiveDate> = sessions
        .into_iter()
        .filter(|s| s.agent == agent && s.caller.is_none())
        .map(|s| local_day(&s))
        .filter(|d| *d < today && !done.contains(d))
        .collect();
    days.sort();
    days.pop()
}
