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

pub use crate::protocol::QueuePriority;

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

/// What a look at the queue found.
#[derive(Debug, Clone, Default)]
pub struct Listing {
    /// Every readable message in order, with its file name.
    pub messages: Vec<(String, QueuedMessage)>,
    /// Files that could not be read as a message: moved to `inbox/bad/` (or left where they are
    /// if even that failed) and never counted as waiting.
    pub set_aside: Vec<SetAside>,
}

/// A queue file that is not a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetAside {
    pub file: PathBuf,
    pub reason: String,
    /// Where it is now, if it could be moved.
    pub moved_to: Option<PathBuf>,
}

impl std::fmt::Display for SetAside {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "queue file {} is not a message ({}); ",
            self.file.display(),
            self.reason
        )?;
        match &self.moved_to {
            Some(to) => write!(f, "moved to {}", to.display()),
            None => f.write_str("it could not be moved aside and is ignored"),
        }
    }
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
        // Not `create_dir_all`: a session deleted meanwhile must not come back as a directory
        // holding only an inbox (`sessions list` would show it as broken).
        match std::fs::create_dir(&self.dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let session = self
                    .dir
                    .parent()
                    .and_then(|p| p.file_name())
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                return Err(crate::session::SessionError::NotFound(session));
            }
            Err(e) => {
                return Err(crate::session::SessionError::Io {
                    path: self.dir.clone(),
                    source: e,
                });
            }
        }
        // rank-nanos-pid-sequence: sorts by priority, then arrival; unique across processes.
        let nanos = message.queued_at.timestamp_nanos_opt().unwrap_or_default();
        let name = format!(
            "{}-{nanos:020}-{:010}-{:06}.json",
            message.priority.rank(),
            std::process::id(),
            SEQUENCE.fetch_add(1, Ordering::Relaxed)
        );
        let bytes = crate::session::to_json(message, "a queued message")?;
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
            .filter(|n| queued_name(n))
            .collect();
        names.sort();
        names
    }

    /// Whether a message may be waiting: the first file named like one.
    fn any(&self) -> bool {
        std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| queued_name(&e.file_name().to_string_lossy()))
    }

    /// Every queued message in order. A file that is not a message (a half-written one cannot
    /// exist: files appear by rename, so this is damage or a hand-made file) is moved to
    /// `inbox/bad/` and reported, once, in the listing and the log: it is never a message
    /// waiting, which would make a run look at the queue again and again.
    pub fn list(&self) -> Listing {
        let mut listing = Listing::default();
        for name in self.names() {
            let file = self.dir.join(&name);
            let bytes = match std::fs::read(&file) {
                Ok(bytes) => bytes,
                // Taken by the runner between the listing and the read.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                // Unreadable now (permissions, I/O): reported, left where it is, not waiting.
                Err(e) => {
                    let set_aside = SetAside {
                        file,
                        reason: e.to_string(),
                        moved_to: None,
                    };
                    tracing::warn!(op = "queue", result = "unreadable", "{set_aside}");
                    listing.set_aside.push(set_aside);
                    continue;
                }
            };
            match serde_json::from_slice::<QueuedMessage>(&bytes) {
                Ok(message) => listing.messages.push((name, message)),
                Err(e) => {
                    let reason = e.to_string();
                    let bad = self.dir.join("bad");
                    let moved_to = std::fs::create_dir_all(&bad)
                        .and_then(|()| std::fs::rename(&file, bad.join(&name)))
                        .map(|()| bad.join(&name))
                        .ok();
                    let set_aside = SetAside {
                        file,
                        reason,
                        moved_to,
                    };
                    tracing::warn!(op = "queue", result = "set-aside", "{set_aside}");
                    listing.set_aside.push(set_aside);
                }
            }
        }
        listing
    }

    /// [`Inbox::list`] off the async threads (it reads and may move files): what a run's
    /// checkpoints call. Nothing is listed if the runtime is shutting down.
    pub async fn list_async(&self) -> Listing {
        // Most checkpoints find nothing queued: one look at the directory says so without
        // handing the work to another thread.
        if !self.any() {
            return Listing::default();
        }
        let inbox = self.clone();
        crate::session::off_thread(move || inbox.list())
            .await
            .unwrap_or_default()
    }

    /// [`Inbox::remove`], off the async threads.
    pub async fn remove_async(
        &self,
        names: Vec<String>,
    ) -> Result<(), crate::session::SessionError> {
        let inbox = self.clone();
        crate::session::off_thread(move || inbox.remove(&names))
            .await
            .unwrap_or_else(|| {
                Err(crate::session::SessionError::Io {
                    path: self.dir.clone(),
                    source: std::io::Error::other("removing queued messages was cancelled"),
                })
            })
    }

    /// Whether no readable message waits.
    pub fn is_empty(&self) -> bool {
        self.list().messages.is_empty()
    }

    /// Removes messages (after they are safely in session.json). A message that is already gone
    /// is fine; one that cannot be removed is an error (it would be taken again).
    pub fn remove(&self, names: &[String]) -> Result<(), crate::session::SessionError> {
        for name in names {
            let path = self.dir.join(name);
            match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(crate::session::SessionError::Io { path, source: e });
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// A queued message's file name (a temporary one starts with a dot).
fn queued_name(name: &str) -> bool {
    name.ends_with(".json") && !name.starts_with('.')
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

    #[tokio::test]
    async fn the_async_list_and_remove_are_the_blocking_ones() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let inbox = Inbox::new(dir.path());
        inbox.push(&message("a", QueuePriority::Normal))?;
        inbox.push(&message("b", QueuePriority::Urgent))?;
        let listed = inbox.list_async().await;
        let texts = |l: &Listing| {
            l.messages
                .iter()
                .map(|(_, m)| m.text.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(texts(&listed), texts(&inbox.list()));
        let first = listed.messages[0].0.clone();
        inbox.remove_async(vec![first]).await?;
        assert_eq!(inbox.list().messages.len(), 1);
        Ok(())
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
        let texts = |inbox: &Inbox| -> Vec<String> {
            inbox
                .list()
                .messages
                .into_iter()
                .map(|(_, m)| m.text)
                .collect()
        };
        assert_eq!(texts(&inbox), vec!["u1", "h1", "h2", "n1", "n2"]);
        let names: Vec<String> = inbox
            .list()
            .messages
            .into_iter()
            .take(2)
            .map(|(n, _)| n)
            .collect();
        inbox.remove(&names)?;
        assert_eq!(texts(&inbox), vec!["h2", "n1", "n2"]);
        // Removing what is already gone is fine.
        inbox.remove(&names)?;
        Ok(())
    }

    #[test]
    fn a_deleted_session_is_not_brought_back_by_a_message() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let session = dir.path().join("01m80av2t5-e1m9");
        let err = Inbox::new(&session)
            .push(&message("hello", QueuePriority::High))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("no session matches `01m80av2t5-e1m9`"),
            "{err}"
        );
        assert!(!session.exists());
        Ok(())
    }

    #[test]
    fn a_file_that_is_not_a_message_is_set_aside_once_and_never_waits() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let inbox = Inbox::new(dir.path());
        inbox.push(&message("real", QueuePriority::High))?;
        std::fs::write(dir.path().join("inbox/0-garbage.json"), b"\xff{not json")?;
        std::fs::write(dir.path().join("inbox/1-shape.json"), br#"{"text": 3}"#)?;
        let listing = inbox.list();
        assert_eq!(listing.messages.len(), 1);
        assert_eq!(listing.messages[0].1.text, "real");
        assert_eq!(listing.set_aside.len(), 2);
        assert!(dir.path().join("inbox/bad/0-garbage.json").is_file());
        assert!(dir.path().join("inbox/bad/1-shape.json").is_file());
        assert!(!dir.path().join("inbox/0-garbage.json").exists());
        // Reported once: the next look finds only the message.
        assert!(inbox.list().set_aside.is_empty());
        inbox.remove(&[listing.messages[0].0.clone()])?;
        assert!(inbox.is_empty());
        Ok(())
    }
}
