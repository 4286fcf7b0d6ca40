//! Messages to a busy session (seed 004) and who may run (seed 000), across processes.
//!
//! - [`inbox`]: each session's priority queue, as files in `.nop/sessions/<id>/inbox/`, so a
//!   `nop send` from another terminal reaches the process running the session, and nothing is
//!   lost if that process dies.
//! - [`RunGuard`]: "this session is being run": an exclusive lock on `run.lock` held by the process
//!   running it. A message for a session nobody runs is processed at once; otherwise it is queued.
//!   Defined by the store (`session`), which takes it before deleting a session.
//! - [`priority`]: the per-user stack of active sessions of agents that declare a priority.

pub mod inbox;
pub mod priority;

use std::path::Path;

pub use crate::session::RunGuard;
pub use inbox::{Inbox, Listing, QueuePriority, QueuedMessage, SetAside};

/// A message put into a session's queue, and where it stands.
#[derive(Debug, Clone)]
pub struct Posted {
    pub message: QueuedMessage,
    /// 1-based position in the queue.
    pub position: usize,
}

/// Queues `text` for the process running session `session_id` (in `dir`), as `user`: a stop
/// word becomes an urgent stop, anything else keeps `priority` (seed 004).
pub fn post(
    dir: &Path,
    session_id: &str,
    user: &str,
    text: &str,
    priority: QueuePriority,
    stop_words: &[String],
) -> Result<Posted, crate::session::SessionError> {
    let stop = is_stop_word(text, stop_words);
    let message = QueuedMessage {
        id: crate::protocol::new_id(),
        text: text.to_string(),
        priority: if stop {
            QueuePriority::Urgent
        } else {
            priority
        },
        session_key: session_key(session_id, user),
        queued_at: chrono::Utc::now(),
        stop,
    };
    let position = Inbox::new(dir).push(&message)?;
    tracing::info!(session = %session_id, op = "queue", result = "queued", priority = message.priority.as_str(), position, stop, "message queued for a busy session");
    Ok(Posted { message, position })
}

/// Asks the process running session `session_id` (in `dir`) to stop at its next checkpoint, as
/// `user` (`nop stop`, a front end's stop): an urgent stop message in its queue. `None` when no
/// process runs it, so nothing would read the stop.
pub fn request_stop(
    dir: &Path,
    session_id: &str,
    user: &str,
) -> Result<Option<Posted>, crate::session::SessionError> {
    if !RunGuard::is_busy(dir) {
        return Ok(None);
    }
    let message = QueuedMessage {
        id: crate::protocol::new_id(),
        text: "stop".into(),
        priority: QueuePriority::Urgent,
        session_key: session_key(session_id, user),
        queued_at: chrono::Utc::now(),
        stop: true,
    };
    let position = Inbox::new(dir).push(&message)?;
    tracing::info!(session = %session_id, op = "queue", result = "stop_requested", "stop requested");
    Ok(Some(Posted { message, position }))
}

/// Whether `text` is a stop word: the whole message, case-insensitive, trimmed (seed 004).
pub fn is_stop_word(text: &str, stop_words: &[String]) -> bool {
    let text = text
        .trim()
        .trim_end_matches(['!', '！', '.', '。'])
        .to_lowercase();
    stop_words.iter().any(|w| w.to_lowercase() == text)
}

/// The queue key of a session (seed 004's `{channel}:{chat_id}:{user_id}`): for the command line
/// the channel is `cli` and the chat is the session.
pub fn session_key(session_id: &str, user: &str) -> String {
    format!("cli:{session_id}:{user}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_words_match_whole_messages_only() {
        let words: Vec<String> = ["停止", "停", "stop", "停止执行", "取消"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        for yes in ["stop", "STOP", " Stop! ", "停", "停止执行", "取消。"] {
            assert!(is_stop_word(yes, &words), "{yes}");
        }
        for no in ["stop the music", "don't stop", "停一下吧", "cancel"] {
            assert!(!is_stop_word(no, &words), "{no}");
        }
    }
}
