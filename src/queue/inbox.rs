//! A session's message queue (seed 004): one JSON file per message in
//! `.nop/sessions/<id>/inbox/`, named so that a directory listing sorts by priority (URGENT >
//! HIGH > NORMAL) and then by arrival. Files are written atomically; a message is deleted only
//! after it is in session.json, and one already there (a crash between the two) is recognised by
//! its id and not injected twice.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::session::create_new_atomic;

#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    Default,
    clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum QueuePriority {
    /// Waits until the current task is done.
    Normal,
    /// Put into the conversation at the next checkpoint (between tool calls).
    #[default]
    High,
    /// Like high, ahead of it.
    Urgent,
}

impl QueuePriority {
    fn rank(self) -> u8 {
        match self {
            QueuePriority::Urgent => 0,
            QueuePriority::High => 1,
            QueuePriority::Normal => 2,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            QueuePriority::Urgent => "urgent",
            QueuePriority::High => "high",
            QueuePriority::Normal => "normal",
        }
    }
}

/// One queued message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueuedMessage {
    pub id: String,
    pub text: String,
    pub priority: QueuePriority,
    /// `{channel}:{chat_id}:{user_id}`.
    pub session_key: String,
    pub queued_at: DateTime<Utc>,
    /// A stop word: cancels the current task at the next checkpoint.
    #[serde(default)]
    pub stop: bool,
}

/// The queue of one session.
#[derive(Debug, Clone)]
pub struct Inbox {
    dir: PathBuf,
}

static SEQUENCE: AtomicU64 = AtomicU64::new(0);

impl Inbox {
    pub fn new(session_dir: &Path) -> Inbox {
        Inbox {
            dir: session_dir.join("inbox"),
        }
    }

    /// Queues `message`; returns its position (1 = next).
    pub fn push(&self, message: &QueuedMessage) -> Result<usize, crate::session::SessionError> {
        std::fs::create_dir_all(&self.dir).map_err(|e| crate::session::SessionError::Io {
            path: self.dir.clone(),
            source: e,
        })?;
        // rank-nanos-pid-sequence: sorts by priority, then arrival; unique across processes.
        let nanos = message.queued_at.timestamp_nanos_opt().unwrap_or_default();
        let name = format!(
            "{}-{nanos:020}-{:010}-{:06}.json",
            message.priority.rank(),
            std::process::id(),
            SEQUENCE.fetch_add(1, Ordering::Relaxed)
        );
        let bytes = serde_json::to_vec_pretty(message).unwrap_or_default();
        create_new_atomic(&self.dir.join(&name), &bytes, false)?;
        Ok(self
            .names()
            .iter()
            .position(|n| *n == name)
            .map_or(1, |i| i + 1))
    }

    fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| n.ends_with(".json") && !n.starts_with('.'))
            .collect();
        names.sort();
        names
    }

    /// Every queued message in order, with its file name. Unreadable files are skipped (a
    /// half-written one cannot exist: files appear by rename).
    pub fn list(&self) -> Vec<(String, QueuedMessage)> {
        self.names()
            .into_iter()
            .filter_map(|name| {
                let text = std::fs::read(self.dir.join(&name)).ok()?;
                let message = serde_json::from_slice(&text).ok()?;
                Some((name, message))
            })
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.names().is_empty()
    }

    /// Removes messages (after they are safely in session.json).
    pub fn remove(&self, names: &[String]) {
        for name in names {
            let _ = std::fs::remove_file(self.dir.join(name));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(text: &str, priority: QueuePriority) -> QueuedMessage {
        QueuedMessage {
            id: crate::protocol::new_id(),
            text: text.into(),
            priority,
            session_key: "cli:s:u".into(),
            queued_at: Utc::now(),
            stop: false,
        }
    }

    #[test]
    fn urgent_before_high_before_normal_fifo_within_a_level() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let inbox = Inbox::new(dir.path());
        assert_eq!(inbox.push(&message("n1", QueuePriority::Normal))?, 1);
        assert_eq!(inbox.push(&message("h1", QueuePriority::High))?, 1);
        inbox.push(&message("n2", QueuePriority::Normal))?;
        assert_eq!(inbox.push(&message("h2", QueuePriority::High))?, 2);
        assert_eq!(inbox.push(&message("u1", QueuePriority::Urgent))?, 1);
        let order: Vec<String> = inbox.list().into_iter().map(|(_, m)| m.text).collect();
        assert_eq!(order, vec!["u1", "h1", "h2", "n1", "n2"]);
        let names: Vec<String> = inbox.list().into_iter().take(2).map(|(n, _)| n).collect();
        inbox.remove(&names);
        let order: Vec<String> = inbox.list().into_iter().map(|(_, m)| m.text).collect();
        assert_eq!(order, vec!["h2", "n1", "n2"]);
        Ok(())
    }
}
