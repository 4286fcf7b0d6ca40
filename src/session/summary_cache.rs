//! What `nop sessions list`, the resume picker and `--continue` read of a session: its summary,
//! kept beside session.json in `summary.json` by every write of the store, so that listing a
//! thousand sessions reads a thousand small files, not a gigabyte of conversations.
//!
//! The summary names the session.json it was made from (its length, modification time and
//! inode): one that does not match (a write by an older nop, a crash between the two renames, a
//! hand edit) is stale, and the reader falls back to session.json and writes a fresh summary.
//! It is derived data, never the only copy of anything: it is written without fsync, and a
//! summary that cannot be read or parsed is only a reason to read session.json.

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::SESSION_FILE;
use super::atomic::TEMP_PREFIX;
use crate::protocol::{Message, Role, SessionFile, SessionStatus};
use chrono::{DateTime, Utc};

/// One line of `nop sessions list`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionSummary {
    pub id: String,
    pub agent: String,
    pub status: SessionStatus,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub messages: usize,
    pub parent: Option<String>,
    /// The first thing the user asked, on one line (none yet: empty); for a fork, the first
    /// thing asked after the fork (none yet: the parent's, marked `(fork)`).
    pub title: String,
    /// The model answered at least once (a run that failed at once did not).
    #[serde(skip)]
    pub answered: bool,
    /// A subagent's or advisor's session (called by another session), not one a person started.
    pub called: bool,
}

pub const SUMMARY_FILE: &str = "summary.json";

/// The largest summary read: a title is one line, so anything bigger is not one of ours.
const MAX_BYTES: u64 = 64 * 1024;

/// Which session.json a summary was made from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Key {
    len: u64,
    mtime_ns: i128,
    ino: u64,
}

impl Key {
    /// The key of the session.json in `dir` as it is now.
    pub(super) fn now(dir: &Path) -> Option<Key> {
        Key::of(&dir.join(SESSION_FILE))
    }

    fn of(session_json: &Path) -> Option<Key> {
        let meta = fs::metadata(session_json).ok()?;
        Some(Key {
            len: meta.len(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            ino: meta.ino(),
        })
    }
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Cached {
    key: Key,
    summary: Stored,
    /// Absent in a summary written before it was kept: then a write reads the messages.
    #[serde(default)]
    facts: Option<Facts>,
}

/// What a listing shows that depends on the messages, learnt by reading them from the first
/// until it is known. Kept beside the summary, so that a write that only appends messages
/// goes on from it instead of reading the sealed files again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Facts {
    /// The first line of the first thing the user asked (empty for an empty one).
    first_prompt: Option<String>,
    /// For a fork: when it was forked, and the first line of the first thing asked after.
    forked_at: Option<chrono::DateTime<chrono::Utc>>,
    own_prompt: Option<String>,
    /// The model answered at least once.
    answered: bool,
}

impl Facts {
    /// Nothing read yet of `session`'s messages.
    pub(super) fn new(session: &SessionFile) -> Facts {
        Facts {
            first_prompt: None,
            forked_at: session.parent_session.as_ref().map(|p| p.timestamp),
            own_prompt: None,
            answered: false,
        }
    }

    /// Read from every message of `session` (read whole).
    pub(super) fn of(session: &SessionFile) -> Facts {
        let mut facts = Facts::new(session);
        for m in &session.messages {
            facts.feed(m);
        }
        facts
    }

    /// Takes in the next message of the conversation.
    pub(super) fn feed(&mut self, m: &Message) {
        match m.role {
            Role::Assistant => self.answered = true,
            Role::User => {
                if self.first_prompt.is_none() {
                    self.first_prompt = Some(first_line(m));
                }
                // A fork copies its parent's messages, each with its time: what came after is
                // its own.
                if let Some(forked_at) = self.forked_at
                    && self.own_prompt.is_none()
                    && m.timestamp.is_some_and(|t| t > forked_at)
                {
                    self.own_prompt = Some(first_line(m));
                }
            }
            Role::System | Role::Tool => {}
        }
    }

    /// Whether later messages can change nothing.
    pub(super) fn complete(&self) -> bool {
        self.answered
            && self.first_prompt.is_some()
            && (self.forked_at.is_none() || self.own_prompt.is_some())
    }

    /// A session's title: the first line of the first thing the user asked; for a fork, of the
    /// first thing asked after the fork (before any: the parent's, marked as the fork's).
    fn title(&self) -> String {
        let inherited = self.first_prompt.clone().unwrap_or_default();
        let whole = match (&self.forked_at, &self.own_prompt) {
            (None, _) => inherited,
            (Some(_), Some(own)) if !own.is_empty() => own.clone(),
            (Some(_), _) if inherited.is_empty() => inherited,
            (Some(_), _) => format!("(fork) {inherited}"),
        };
        match whole.char_indices().nth(TITLE_CHARS) {
            Some((end, _)) => format!("{}…", &whole[..end]),
            None => whole,
        }
    }
}

/// The longest title kept: the first line of a prompt can be a whole pasted file.
const TITLE_CHARS: usize = 500;

/// The first line of `m` that is not blank, trimmed, and no longer than a title needs (one
/// character more than it keeps, to know it was cut).
fn first_line(m: &Message) -> String {
    m.content
        .lines()
        .find(|l| !l.trim().is_empty())
        .map(|l| l.trim().chars().take(TITLE_CHARS + 1).collect())
        .unwrap_or_default()
}

/// What a listing shows of `session` (its state), which has `messages` messages in all and
/// whose messages gave `facts`.
pub(super) fn summarize(session: &SessionFile, messages: usize, facts: &Facts) -> SessionSummary {
    SessionSummary {
        id: session.session_id.clone(),
        agent: session.agent.clone(),
        status: session.status,
        created_at: session.created_at,
        updated_at: session.updated_at,
        messages,
        parent: session.parent_session.as_ref().map(|p| p.id.clone()),
        title: facts.title(),
        answered: facts.answered,
        called: session.caller.is_some(),
    }
}

/// [`SessionSummary`] with every field, `answered` included.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Stored {
    id: String,
    agent: String,
    status: crate::protocol::SessionStatus,
    created_at: chrono::DateTime<chrono::Utc>,
    updated_at: chrono::DateTime<chrono::Utc>,
    messages: usize,
    parent: Option<String>,
    title: String,
    answered: bool,
    called: bool,
}

/// The summary of the session in `dir`, if `summary.json` was made from its session.json as it
/// is now.
pub(super) fn read(dir: &Path) -> Option<SessionSummary> {
    let s = read_cached(dir)?.summary;
    Some(SessionSummary {
        id: s.id,
        agent: s.agent,
        status: s.status,
        created_at: s.created_at,
        updated_at: s.updated_at,
        messages: s.messages,
        parent: s.parent,
        title: s.title,
        answered: s.answered,
        called: s.called,
    })
}

/// What the messages of the session in `dir` gave, if `summary.json` was made from its
/// session.json as it is now and kept them.
pub(super) fn read_facts(dir: &Path) -> Option<Facts> {
    read_cached(dir)?.facts
}

fn read_cached(dir: &Path) -> Option<Cached> {
    let key = Key::of(&dir.join(SESSION_FILE))?;
    let mut text = String::new();
    fs::File::open(dir.join(SUMMARY_FILE))
        .ok()?
        .take(MAX_BYTES)
        .read_to_string(&mut text)
        .ok()?;
    let cached: Cached = serde_json::from_str(&text).ok()?;
    (cached.key == key).then_some(cached)
}

/// Writes `summary` as the summary of the session.json whose key was `key` when the summary was
/// made (taken under the session's write lock, or before and after reading it: a key taken
/// later could name a newer file than the summary's). A failure is only logged: the next
/// listing reads session.json instead.
pub(super) fn write(dir: &Path, key: Option<Key>, summary: &SessionSummary, facts: &Facts) {
    let Some(key) = key else { return };
    if let Err(e) = try_write(dir, key, summary, facts) {
        tracing::debug!(op = "session", result = "summary not written", dir = %dir.display(), "{e}");
    }
}

fn try_write(dir: &Path, key: Key, summary: &SessionSummary, facts: &Facts) -> std::io::Result<()> {
    let cached = Cached {
        key,
        facts: Some(facts.clone()),
        summary: Stored {
            id: summary.id.clone(),
            agent: summary.agent.clone(),
            status: summary.status,
            created_at: summary.created_at,
            updated_at: summary.updated_at,
            messages: summary.messages,
            parent: summary.parent.clone(),
            title: summary.title.clone(),
            answered: summary.answered,
            called: summary.called,
        },
    };
    let bytes = serde_json::to_vec(&cached).map_err(std::io::Error::other)?;
    let mut temp = tempfile::Builder::new()
        .prefix(TEMP_PREFIX)
        .tempfile_in(dir)?;
    temp.write_all(&bytes)?;
    temp.persist(dir.join(SUMMARY_FILE)).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use chrono::Utc;

    use super::*;
    use crate::protocol::{Message, Role};
    use crate::session::Store;

    fn store() -> anyhow::Result<(tempfile::TempDir, Store)> {
        let dir = tempfile::tempdir()?;
        let store = Store::new(dir.path().join("sessions"), Duration::from_secs(5));
        Ok((dir, store))
    }

    #[test]
    fn a_listing_reads_the_summary_not_the_conversation() -> anyhow::Result<()> {
        let (_dir, store) = store()?;
        let s = store.create("coder", Utc::now())?;
        let id = s.session_id;
        store.append(
            &id,
            vec![Message::new(Role::User, "fix the flaky test", Utc::now())],
            Utc::now(),
        )?;
        // Overwrite the conversation in place with bytes that do not parse, keeping its length,
        // inode and modification time: the listing never notices, so it did not read it.
        let path = store.dir(&id).join(SESSION_FILE);
        let meta = fs::metadata(&path)?;
        let len = usize::try_from(meta.len())?;
        fs::OpenOptions::new()
            .write(true)
            .open(&path)?
            .write_all(&vec![b'x'; len])?;
        let atime = nix::sys::time::TimeSpec::new(meta.atime(), meta.atime_nsec());
        let mtime = nix::sys::time::TimeSpec::new(meta.mtime(), meta.mtime_nsec());
        nix::sys::stat::utimensat(
            nix::fcntl::AT_FDCWD,
            &path,
            &atime,
            &mtime,
            nix::sys::stat::UtimensatFlags::FollowSymlink,
        )?;
        let (listed, failed) = store.summaries()?;
        assert!(failed.is_empty());
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].title, "fix the flaky test");
        assert_eq!(listed[0].messages, 1);
        Ok(())
    }

    #[test]
    fn a_stale_or_broken_summary_is_made_again_from_the_conversation() -> anyhow::Result<()> {
        let (_dir, store) = store()?;
        let id = store.create("coder", Utc::now())?.session_id;
        store.append(
            &id,
            vec![Message::new(Role::User, "first", Utc::now())],
            Utc::now(),
        )?;
        let dir = store.dir(&id);
        // A change nop did not make (another tool, an older nop): the summary is stale.
        let path = dir.join(SESSION_FILE);
        let text = fs::read_to_string(&path)?.replace("\"first\"", "\"edited by hand\"");
        fs::write(&path, text)?;
        let (listed, _) = store.summaries()?;
        assert_eq!(listed[0].title, "edited by hand");
        // A summary that is not one: set aside, the conversation read instead.
        fs::write(dir.join(SUMMARY_FILE), "{not json")?;
        let (listed, failed) = store.summaries()?;
        assert!(failed.is_empty());
        assert_eq!(listed[0].title, "edited by hand");
        // And it was written afresh.
        assert!(read(&dir).is_some());
        Ok(())
    }
}
