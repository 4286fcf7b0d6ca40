//! [`Store`]: create, read, update, snapshot, fork and check sessions under `.nop/sessions/`.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::atomic::{self, TEMP_PREFIX};
use super::error::{Result, SessionError};
use super::json::{parse_versioned_json, pretty_json};
use super::lock::{LockKind, SessionLock};
use super::run_lock::RunGuard;
use super::sealed;
use super::summary_cache;
use super::summary_cache::SessionSummary;
use super::{PLAN_FILE, SESSION_FILE, SESSION_LOG, snapshot_file_name};
use crate::protocol::ids::looks_like_id;
use crate::protocol::{
    Message, ParentSession, Plan, SESSION_VERSION, SNAPSHOT_VERSION, SealedMessages, SessionFile,
    SessionStatus, Snapshot, new_id,
};

/// A session read whole: its state with every message in `session.messages` (those of the
/// sealed files first; `session.earlier_messages` is empty), and its plan.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionState {
    pub session: SessionFile,
    pub plan: Plan,
    /// The sealed files the messages were read from: what a write may keep.
    sealed: Vec<SealedMessages>,
}

impl SessionState {
    /// The sealed files the conversation's first messages were read from, oldest first.
    pub fn sealed(&self) -> &[SealedMessages] {
        &self.sealed
    }

    /// The messages after the sealed files: those session.json holds.
    pub fn recent_messages(&self) -> &[Message] {
        let earlier: usize = self.sealed.iter().map(|s| s.count).sum();
        self.session.messages.get(earlier..).unwrap_or_default()
    }
}

/// A session as session.json holds it, which is what a change of its state needs, at a cost
/// that does not grow with the conversation: every field, but in `session.messages` only the
/// messages after the sealed files that `session.earlier_messages` names (all of them while
/// the conversation fits in session.json); and the plan. [`Store::update`] gives this;
/// [`Store::update_whole`] reads every message.
#[derive(Debug, Clone, PartialEq)]
pub struct Recent {
    pub session: SessionFile,
    pub plan: Plan,
    dir: PathBuf,
}

impl Recent {
    /// The number of messages in the whole conversation.
    pub fn message_count(&self) -> usize {
        earlier_count(&self.session) + self.session.messages.len()
    }

    /// The messages of the last sealed file (none while there is none): with
    /// `session.messages`, where a message stored by one of the last writes may be.
    pub fn last_sealed(&self) -> Result<Vec<Message>> {
        let Some(last) = self.session.earlier_messages.last() else {
            return Ok(Vec::new());
        };
        let first = earlier_count(&self.session) - last.count;
        sealed::read(&self.dir, last, first)
    }
}

fn earlier_count(session: &SessionFile) -> usize {
    session.earlier_messages.iter().map(|n| n.count).sum()
}

/// Something `nop sessions check` found wrong, with the file it is in.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Problem {
    pub path: PathBuf,
    pub message: String,
}

/// Records the working files for a snapshot (the file checkpoint store, `crate::checkpoint`):
/// a tree id, or `None` when that cannot be done (said in the log).
pub trait Checkpointer: Send + Sync + std::fmt::Debug {
    fn checkpoint(&self) -> Option<String>;
}

/// The session store rooted at a `.nop/sessions` directory.
#[derive(Debug, Clone)]
pub struct Store {
    sessions_dir: PathBuf,
    lock_timeout: Duration,
    /// Set once this store (and its clones) swept the temporary directories of killed creates
    /// and forks: the first write of a process does it.
    swept: Arc<std::sync::Once>,
    /// What records the working files each new snapshot goes with.
    checkpointer: Option<Arc<dyn Checkpointer>>,
    /// When session.json's messages pass this many bytes of JSON, they are sealed into a file
    /// of their own (`session.seal_kb`).
    seal_bytes: usize,
    /// The sealed files this store (and its clones) read, parsed.
    pub(super) sealed_cache: Arc<sealed::Cache>,
    /// How many times this store (and its clones) wrote each session's session.json.
    writes: Arc<std::sync::Mutex<std::collections::HashMap<PathBuf, u64>>>,
}

/// `session.seal_kb`'s default, in bytes.
const SEAL_BYTES: usize = 256 * 1024;

impl Store {
    pub fn new(sessions_dir: impl Into<PathBuf>, lock_timeout: Duration) -> Store {
        Store {
            sessions_dir: sessions_dir.into(),
            lock_timeout,
            swept: Arc::new(std::sync::Once::new()),
            checkpointer: None,
            seal_bytes: SEAL_BYTES,
            sealed_cache: Arc::default(),
            writes: Arc::default(),
        }
    }

    /// How many times this store and its clones have written session `id` (other processes'
    /// writes are not counted): what was read of it is still what it holds while the count
    /// stays the same.
    pub fn writes(&self, id: &str) -> u64 {
        let writes = self.writes.lock().unwrap_or_else(|e| e.into_inner());
        writes.get(&self.dir(id)).copied().unwrap_or(0)
    }

    /// Seals session.json's messages into a file of their own once they pass `bytes` of JSON.
    pub fn with_seal_bytes(mut self, bytes: usize) -> Store {
        self.seal_bytes = bytes.max(1);
        self
    }

    /// Every snapshot this store takes from now on records the working files with `c`.
    pub fn with_checkpointer(mut self, c: Arc<dyn Checkpointer>) -> Store {
        self.checkpointer = Some(c);
        self
    }

    /// The working files now, for a new snapshot (taken before the session's lock: it may
    /// take a while in a large repository).
    fn working_files(&self) -> Option<String> {
        self.checkpointer.as_ref().and_then(|c| c.checkpoint())
    }

    pub fn sessions_dir(&self) -> &Path {
        &self.sessions_dir
    }

    /// How long a lock is waited for (`session.lock_timeout_s`).
    pub fn lock_timeout(&self) -> Duration {
        self.lock_timeout
    }

    /// The directory of session `id` (which need not exist).
    pub fn dir(&self, id: &str) -> PathBuf {
        self.sessions_dir.join(id)
    }

    pub fn session_log(&self, id: &str) -> PathBuf {
        self.dir(id).join(SESSION_LOG)
    }

    /// All session ids, oldest first.
    pub fn ids(&self) -> Result<Vec<String>> {
        let entries = match fs::read_dir(&self.sessions_dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(SessionError::io(&self.sessions_dir)(e)),
        };
        let mut ids: Vec<String> = entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|name| looks_like_id(name))
            .collect();
        ids.sort();
        Ok(ids)
    }

    /// The full id of the one session whose id starts with `prefix`.
    pub fn resolve(&self, prefix: &str) -> Result<String> {
        let ids = self.ids()?;
        unique_prefix(prefix, &ids).map_err(|candidates| match candidates {
            None => SessionError::NotFound(prefix.to_string()),
            Some(candidates) => SessionError::Ambiguous {
                prefix: prefix.to_string(),
                candidates,
            },
        })
    }

    /// Creates a new, empty session for `agent`.
    pub fn create(&self, agent: &str, now: DateTime<Utc>) -> Result<SessionFile> {
        let mut last_err = None;
        for _ in 0..8 {
            match self.create_running(&new_id(), agent, now) {
                Ok((session, _)) => {
                    self.sweep();
                    return Ok(session);
                }
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or_else(|| SessionError::NotFound("new session".into())))
    }

    /// An id no session has yet, to name a session before it is written
    /// ([`Store::create_running`]).
    pub fn unused_id(&self) -> String {
        let mut id = new_id();
        for _ in 0..8 {
            if !self.dir(&id).exists() {
                break;
            }
            id = new_id();
        }
        id
    }

    /// Creates the new, empty session `id` for `agent` to be run: its run lock is taken before
    /// the session can be seen, so no other process runs it in between. An id taken meanwhile
    /// is an error (ids are unique but for a clash in the same millisecond). What killed
    /// creates left is swept by the run's first write, not here.
    pub fn create_running(
        &self,
        id: &str,
        agent: &str,
        now: DateTime<Utc>,
    ) -> Result<(SessionFile, RunGuard)> {
        fs::create_dir_all(&self.sessions_dir).map_err(SessionError::io(&self.sessions_dir))?;
        let session = SessionFile::new(id.to_string(), agent.to_string(), now);
        let files = [
            NewFile::new(SESSION_FILE, session_bytes(&session)?),
            NewFile::new(PLAN_FILE, Plan::default().to_xml().into_bytes()),
        ];
        let guard = self.publish_new_dir(id, &files, None)?;
        let dir = self.dir(id);
        let key = summary_cache::Key::now(&dir);
        let facts = summary_cache::Facts::of(&session);
        let summary = summary_cache::summarize(&session, 0, &facts);
        summary_cache::write(&dir, key, &summary, &facts);
        Ok((session, guard))
    }

    /// Reads the whole session (every message, the sealed files' too) and plan.xml under a
    /// shared lock.
    pub fn read(&self, id: &str) -> Result<SessionState> {
        let dir = self.existing_dir(id)?;
        let _lock = self.read_lock(&dir, id)?;
        self.read_state(&dir, id)
    }

    /// Reads the whole of session.json's state and every message under a shared lock.
    pub fn read_session(&self, id: &str) -> Result<SessionFile> {
        let dir = self.existing_dir(id)?;
        let _lock = self.read_lock(&dir, id)?;
        self.read_whole_session(&dir, id)
            .map(|(session, _)| session)
    }

    /// Reads session.json as it is (the sealed files named, not read) and plan.xml under a
    /// shared lock: the state, at a cost that does not grow with the conversation.
    pub fn read_recent(&self, id: &str) -> Result<Recent> {
        let dir = self.existing_dir(id)?;
        let _lock = self.read_lock(&dir, id)?;
        Ok(Recent {
            session: read_session_json(&dir, id)?,
            plan: read_plan_file(&dir)?,
            dir,
        })
    }

    /// Changes a session under its write lock, at a cost that does not grow with the
    /// conversation: `change` gets session.json as it is ([`Recent`]: the messages after the
    /// sealed files). session.json (with `updatedAt = now`) and, when `change` altered it,
    /// plan.xml are replaced together or not at all; when its messages then pass
    /// `session.seal_kb`, they are sealed first. A change of `earlierMessages` is ignored: the
    /// sealed files are the store's.
    pub fn update<T>(
        &self,
        id: &str,
        now: DateTime<Utc>,
        change: impl FnOnce(&mut Recent) -> Result<T>,
    ) -> Result<T> {
        let value = self.update_locked(id, now, change);
        // What killed creates and forks left in the sessions directory (once per process):
        // after the write, so that it never holds up the lock or whoever waits for the write
        // (a run's first write, which a new run's first request waits to see locked).
        self.sweep();
        value
    }

    fn update_locked<T>(
        &self,
        id: &str,
        now: DateTime<Utc>,
        change: impl FnOnce(&mut Recent) -> Result<T>,
    ) -> Result<T> {
        let dir = self.existing_dir(id)?;
        let _lock = SessionLock::acquire(&dir, id, LockKind::Exclusive, self.lock_timeout)?;
        atomic::recover(&dir)?;
        // Read under the lock: it describes the session.json about to be read, or nothing.
        let prior = summary_cache::read_facts(&dir);
        let mut recent = Recent {
            session: read_session_json(&dir, id)?,
            plan: read_plan_file(&dir)?,
            dir: dir.clone(),
        };
        let earlier = recent.session.earlier_messages.clone();
        let plan_before = recent.plan.clone();
        let tail_before = recent.session.messages.clone();
        let value = change(&mut recent)?;
        recent.session.earlier_messages = earlier;
        recent.session.updated_at = now;
        // What a listing shows, carried on from the last write when the change only appended.
        let facts = match prior {
            Some(mut facts) if recent.session.messages.starts_with(&tail_before) => {
                for m in &recent.session.messages[tail_before.len()..] {
                    facts.feed(m);
                }
                facts
            }
            _ => self.scan_facts(&dir, &recent.session)?,
        };
        let summary = summary_cache::summarize(&recent.session, recent.message_count(), &facts);
        let Recent {
            mut session, plan, ..
        } = recent;
        let plan = (plan != plan_before).then_some(plan);
        self.commit(&dir, &mut session, plan.as_ref(), false)?;
        // Still under the write lock: the key names the file just written.
        let key = summary_cache::Key::now(&dir);
        summary_cache::write(&dir, key, &summary, &facts);
        Ok(value)
    }

    /// Changes a session under its write lock with every message read ([`SessionState`]):
    /// for what rewrites the conversation (compaction, rewind). Costs what the conversation
    /// costs to read and write; the sealed files whose messages did not change are kept.
    pub fn update_whole<T>(
        &self,
        id: &str,
        now: DateTime<Utc>,
        change: impl FnOnce(&mut SessionState) -> Result<T>,
    ) -> Result<T> {
        let dir = self.existing_dir(id)?;
        self.sweep();
        let _lock = SessionLock::acquire(&dir, id, LockKind::Exclusive, self.lock_timeout)?;
        atomic::recover(&dir)?;
        let mut state = self.read_state(&dir, id)?;
        let plan_before = state.plan.clone();
        let value = change(&mut state)?;
        state.session.updated_at = now;
        let facts = summary_cache::Facts::of(&state.session);
        let summary =
            summary_cache::summarize(&state.session, state.session.messages.len(), &facts);
        let SessionState {
            mut session,
            plan,
            sealed: was_sealed,
        } = state;
        // Keep the sealed files whose messages are still the conversation's first ones.
        let mut all = std::mem::take(&mut session.messages);
        let mut kept = Vec::new();
        let mut at = 0;
        for named in &was_sealed {
            let end = at + named.count;
            if end > all.len() {
                break;
            }
            match sealed::read(&dir, named, at) {
                Ok(old) if old[..] == all[at..end] => {
                    kept.push(named.clone());
                    at = end;
                }
                _ => break,
            }
        }
        session.messages = all.split_off(at);
        drop(all);
        session.earlier_messages = kept;
        let plan = (plan != plan_before).then_some(plan);
        let replaced = session.earlier_messages != was_sealed;
        self.commit(&dir, &mut session, plan.as_ref(), replaced)?;
        let key = summary_cache::Key::now(&dir);
        summary_cache::write(&dir, key, &summary, &facts);
        Ok(value)
    }

    /// Appends messages in one write, at a cost that does not grow with the conversation;
    /// returns the session's message count afterwards.
    pub fn append(&self, id: &str, messages: Vec<Message>, now: DateTime<Utc>) -> Result<usize> {
        self.update(id, now, |state| {
            state.session.messages.extend(messages);
            Ok(state.message_count())
        })
    }

    /// Moves every message of `session` after its sealed files into new sealed files (runs of
    /// about the seal size), named in `earlier_messages` but not written yet.
    fn seal_all(&self, session: &mut SessionFile) -> Vec<sealed::NewSealed> {
        let first = earlier_count(session);
        let runs = sealed::cut(std::mem::take(&mut session.messages), self.seal_bytes);
        let files = sealed::prepare(first, runs);
        session
            .earlier_messages
            .extend(files.iter().map(|f| f.named.clone()));
        files
    }

    /// Writes `session` (as session.json holds it) and `plan` when given, together, under the
    /// write lock the caller holds. When its messages pass the seal size, they are sealed first
    /// (each sealed file created before the session.json that names it). Then, when files were
    /// sealed or `replaced` says some are no longer named, the sealed files session.json does
    /// not name are removed (those a rewrite replaced, or a killed write left).
    fn commit(
        &self,
        dir: &Path,
        session: &mut SessionFile,
        plan: Option<&Plan>,
        replaced: bool,
    ) -> Result<()> {
        // Counted before it is made: a write that fails halfway may have changed the files.
        *self
            .writes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(dir.to_path_buf())
            .or_default() += 1;
        let mut bytes = session_bytes(session)?;
        let mut to_seal = Vec::new();
        if bytes.len() > self.seal_bytes && !session.messages.is_empty() {
            // What the messages take of the file, the rest written without them.
            let messages = std::mem::take(&mut session.messages);
            let without = session_bytes(session)?.len();
            session.messages = messages;
            if bytes.len() - without >= self.seal_bytes {
                to_seal = self.seal_all(session);
            }
        }
        let sealed_now = !to_seal.is_empty();
        let mut renamed = false;
        for file in to_seal {
            let planned = file.named.file.clone();
            let written = sealed::write(dir, file)?;
            if written.file != planned
                && let Some(n) = session
                    .earlier_messages
                    .iter_mut()
                    .find(|n| n.file == planned)
            {
                *n = written;
                renamed = true;
            }
        }
        if sealed_now || renamed {
            bytes = session_bytes(session)?;
        }
        match plan {
            None => atomic::write_atomic(&dir.join(SESSION_FILE), &bytes)?,
            Some(plan) => {
                let plan = plan.to_xml();
                atomic::commit_files(dir, &[(SESSION_FILE, &bytes), (PLAN_FILE, plan.as_bytes())])?;
            }
        }
        if (sealed_now || replaced)
            && let Err(e) = sealed::remove_unnamed(dir, &session.earlier_messages)
        {
            tracing::warn!(session = %session.session_id, error = %e, "could not remove messages files session.json no longer names");
        }
        Ok(())
    }

    /// What a listing shows of the session whose session.json is `session`, read from its
    /// messages, the sealed files only as far as needed.
    fn scan_facts(&self, dir: &Path, session: &SessionFile) -> Result<summary_cache::Facts> {
        let mut facts = summary_cache::Facts::new(session);
        let mut first = 0;
        for named in &session.earlier_messages {
            if facts.complete() {
                return Ok(facts);
            }
            for m in &sealed::read(dir, named, first)? {
                facts.feed(m);
            }
            first += named.count;
        }
        for m in &session.messages {
            facts.feed(m);
        }
        Ok(facts)
    }

    /// Takes an immutable snapshot of the session as it is now and returns its id.
    pub fn snapshot(&self, id: &str, now: DateTime<Utc>) -> Result<String> {
        let dir = self.existing_dir(id)?;
        let checkpoint = self.working_files();
        let _lock = self.read_lock(&dir, id)?;
        let state = self.read_state(&dir, id)?;
        write_snapshot(&dir, &state, now, checkpoint.as_deref())
    }

    /// Snapshots `state`, read whole from session `id` (a consistent state: under its lock),
    /// without reading it again; its id.
    pub fn snapshot_of(
        &self,
        id: &str,
        state: &SessionState,
        now: DateTime<Utc>,
    ) -> Result<String> {
        let dir = self.existing_dir(id)?;
        write_snapshot(&dir, state, now, self.working_files().as_deref())
    }

    /// Snapshot ids of a session, oldest first.
    pub fn snapshots(&self, id: &str) -> Result<Vec<String>> {
        let dir = self.existing_dir(id)?;
        snapshot_ids(&dir)
    }

    /// The checkpoint (tree id) each snapshot of session `id` records, oldest first; only that
    /// field is kept as each file is read, so a long session's snapshots cost no memory. A
    /// snapshot that cannot be read is an error naming it.
    pub fn snapshot_checkpoints(&self, id: &str) -> Result<Vec<(String, Option<String>)>> {
        #[derive(serde::Deserialize)]
        struct Only {
            #[serde(default)]
            checkpoint: Option<String>,
        }
        let dir = self.existing_dir(id)?;
        snapshot_ids(&dir)?
            .into_iter()
            .map(|snapshot| {
                let path = dir.join(snapshot_file_name(&snapshot));
                let file = fs::File::open(&path).map_err(SessionError::io(&path))?;
                let only: Only =
                    serde_json::from_reader(std::io::BufReader::new(file)).map_err(|e| {
                        SessionError::Corrupt {
                            path: path.clone(),
                            pos: None,
                            message: e.to_string(),
                        }
                    })?;
                Ok((snapshot, only.checkpoint))
            })
            .collect()
    }

    /// Reads snapshot `snapshot` (an id or a unique prefix) of session `id`.
    pub fn read_snapshot(&self, id: &str, snapshot: &str) -> Result<Snapshot> {
        let dir = self.existing_dir(id)?;
        let snapshot = self.resolve_snapshot(&dir, id, snapshot)?;
        read_snapshot_file(&dir.join(snapshot_file_name(&snapshot)))
    }

    /// The snapshot a forked session was made from: its own hard link first, then the parent's
    /// directory. `Ok(None)` for a session that was not forked.
    pub fn parent_snapshot(&self, session: &SessionFile) -> Result<Option<Snapshot>> {
        let Some(parent) = &session.parent_session else {
            return Ok(None);
        };
        let name = snapshot_file_name(&parent.snapshot_id);
        for dir in [self.dir(&session.session_id), self.dir(&parent.id)] {
            let path = dir.join(&name);
            if path.exists() {
                return read_snapshot_file(&path).map(Some);
            }
        }
        Err(SessionError::SnapshotNotFound {
            session: parent.id.clone(),
            snapshot: parent.snapshot_id.clone(),
        })
    }

    /// Forks session `id`: snapshots it (or uses snapshot `from`), then creates a child that
    /// holds a copy of the state (the file checkpoints of its runs included) and a one-way
    /// reference to the snapshot.
    pub fn fork(&self, id: &str, from: Option<&str>, now: DateTime<Utc>) -> Result<SessionFile> {
        self.fork_into(id, from, now, self, None)
            .map(|(child, _)| child)
    }

    /// [`Store::fork`] with the child in `target` (another repository root's store: a fork's
    /// worktree), under `child_id` if given. Also returns the snapshot forked from.
    pub fn fork_into(
        &self,
        id: &str,
        from: Option<&str>,
        now: DateTime<Utc>,
        target: &Store,
        child_id: Option<&str>,
    ) -> Result<(SessionFile, Snapshot)> {
        let dir = self.existing_dir(id)?;
        let checkpoint = if from.is_none() {
            self.working_files()
        } else {
            None
        };
        // Held until the child is in place: a `sessions delete` of the parent waits for it, and
        // then sees the new fork referring to it.
        let _lock = self.read_lock(&dir, id)?;
        let snapshot = match from {
            Some(prefix) => {
                let snap = self.resolve_snapshot(&dir, id, prefix)?;
                read_snapshot_file(&dir.join(snapshot_file_name(&snap)))?
            }
            None => {
                let state = self.read_state(&dir, id)?;
                let snapshot_id = write_snapshot(&dir, &state, now, checkpoint.as_deref())?;
                Snapshot {
                    version: SNAPSHOT_VERSION,
                    snapshot_id,
                    session_id: state.session.session_id.clone(),
                    created_at: now,
                    session: state.session,
                    plan: state.plan,
                    checkpoint,
                }
            }
        };
        let snapshot_path = dir.join(snapshot_file_name(&snapshot.snapshot_id));
        let plan = snapshot.plan.to_xml();
        let mut last_err = None;
        for _ in 0..8 {
            let mut child = snapshot.session.clone();
            child.session_id = child_id.map_or_else(new_id, str::to_string);
            child.created_at = now;
            child.updated_at = now;
            child.usage = Default::default();
            // In the same repository the parent's runs changed the files the child works on, so
            // the child can undo them (`nop undo` right after `nop fork`). In another one (a
            // fork's worktree) they changed the parent's files: the child undoes only its own.
            if target.sessions_dir != self.sessions_dir {
                child.checkpoints = Vec::new();
            }
            child.status = match child.status {
                SessionStatus::Running | SessionStatus::Paused => SessionStatus::Idle,
                other => other,
            };
            child.parent_session = Some(ParentSession {
                id: id.to_string(),
                snapshot_id: snapshot.snapshot_id.clone(),
                timestamp: now,
            });
            let facts = summary_cache::Facts::of(&child);
            let summary = summary_cache::summarize(&child, child.messages.len(), &facts);
            let files = self.new_session_files(child.clone(), &plan)?;
            let link = (snapshot_path.as_path(), snapshot.snapshot_id.as_str());
            match target.publish_new_dir(&child.session_id, &files, Some(link)) {
                Ok(_) => {
                    let dir = target.dir(&child.session_id);
                    let key = summary_cache::Key::now(&dir);
                    summary_cache::write(&dir, key, &summary, &facts);
                    target.sweep();
                    return Ok((child, snapshot));
                }
                Err(e) if child_id.is_some() => return Err(e),
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or_else(|| SessionError::NotFound(id.to_string())))
    }

    /// Summaries of every session, oldest first, and the sessions that could not be read.
    pub fn summaries(&self) -> Result<(Vec<SessionSummary>, Vec<SessionError>)> {
        let mut ok = Vec::new();
        let mut failed = Vec::new();
        for id in self.ids()? {
            let dir = self.dir(&id);
            // The summary kept beside session.json, when it was made from the file as it is.
            if let Some(summary) = summary_cache::read(&dir).filter(|s| s.id == id) {
                ok.push(summary);
                continue;
            }
            // The file read is the one of these keys only if it did not change meanwhile.
            let before = summary_cache::Key::now(&dir);
            match self.summarize_now(&id) {
                Ok((summary, facts)) => {
                    let after = summary_cache::Key::now(&dir);
                    if before == after {
                        summary_cache::write(&dir, after, &summary, &facts);
                    }
                    ok.push(summary);
                }
                Err(e) => failed.push(e),
            }
        }
        Ok((ok, failed))
    }

    /// What a listing shows of session `id`, read from session.json (and from the sealed files
    /// only as far as the title needs) under a shared lock.
    fn summarize_now(&self, id: &str) -> Result<(SessionSummary, summary_cache::Facts)> {
        let dir = self.existing_dir(id)?;
        let _lock = self.read_lock(&dir, id)?;
        let session = read_session_json(&dir, id)?;
        let facts = self.scan_facts(&dir, &session)?;
        let count = earlier_count(&session) + session.messages.len();
        Ok((summary_cache::summarize(&session, count, &facts), facts))
    }

    /// Validates every file of session `id`, changing nothing.
    pub fn check(&self, id: &str) -> Result<Vec<Problem>> {
        let dir = self.existing_dir(id)?;
        // A write a killed process left half done is completed first, as any read does: it is
        // not a problem of the session's, and the check says nothing of it then. A journal that
        // cannot be read is one, named below.
        let _lock = match self.read_lock(&dir, id) {
            Ok(lock) => lock,
            Err(SessionError::Corrupt { .. }) => {
                SessionLock::acquire(&dir, id, LockKind::Shared, self.lock_timeout)?
            }
            Err(e) => return Err(e),
        };
        let mut problems = Vec::new();
        let mut note = |e: SessionError| {
            let path = match &e {
                SessionError::Corrupt { path, .. }
                | SessionError::TooNew { path, .. }
                | SessionError::Io { path, .. } => path.clone(),
                _ => dir.clone(),
            };
            problems.push(Problem {
                path,
                message: e.to_string(),
            });
        };
        if atomic::has_pending_commit(&dir) {
            note(SessionError::Corrupt {
                path: dir.join(atomic::JOURNAL),
                pos: None,
                message: "a write was interrupted and could not be completed".into(),
            });
        }
        match read_session_json(&dir, id) {
            Ok(session) => {
                if let Err(e) = self.parent_snapshot(&session) {
                    note(e);
                }
                let mut first = 0;
                for named in &session.earlier_messages {
                    if let Err(e) = sealed::read(&dir, named, first) {
                        note(e);
                    }
                    first += named.count;
                }
            }
            Err(e) => note(e),
        }
        if let Err(e) = read_plan_file(&dir) {
            note(e);
        }
        for snap in snapshot_ids(&dir)? {
            let path = dir.join(snapshot_file_name(&snap));
            match read_snapshot_file(&path) {
                Ok(s) if s.snapshot_id != snap => note(SessionError::Corrupt {
                    path,
                    pos: None,
                    message: format!(
                        "snapshotId `{}` does not match the file name",
                        s.snapshot_id
                    ),
                }),
                Ok(_) => {}
                Err(e) => note(e),
            }
        }
        Ok(problems)
    }

    pub(super) fn existing_dir(&self, id: &str) -> Result<PathBuf> {
        let dir = self.dir(id);
        if looks_like_id(id) && dir.join(SESSION_FILE).exists() {
            Ok(dir)
        } else {
            Err(SessionError::NotFound(id.to_string()))
        }
    }

    /// A shared lock, after completing any write a killed process left half done.
    fn read_lock(&self, dir: &Path, id: &str) -> Result<SessionLock> {
        let lock = SessionLock::acquire(dir, id, LockKind::Shared, self.lock_timeout)?;
        if !atomic::has_pending_commit(dir) {
            return Ok(lock);
        }
        drop(lock);
        let lock = SessionLock::acquire(dir, id, LockKind::Exclusive, self.lock_timeout)?;
        atomic::recover(dir)?;
        Ok(lock)
    }

    fn resolve_snapshot(&self, dir: &Path, id: &str, prefix: &str) -> Result<String> {
        let ids = snapshot_ids(dir)?;
        unique_prefix(prefix, &ids).map_err(|candidates| match candidates {
            None => SessionError::SnapshotNotFound {
                session: id.to_string(),
                snapshot: prefix.to_string(),
            },
            Some(candidates) => SessionError::Ambiguous {
                prefix: prefix.to_string(),
                candidates,
            },
        })
    }

    /// Removes what a killed create or fork left in the sessions directory, once per process:
    /// the first write does it. A failure is logged; the write goes on.
    pub(super) fn sweep(&self) {
        self.swept.call_once(|| {
            if let Err(e) = atomic::remove_abandoned(&self.sessions_dir) {
                tracing::warn!(error = %e, "could not sweep the sessions directory");
            }
        });
    }

    /// Builds a session directory under a temporary name and renames it into place, so that a
    /// session appears whole or not at all. Fails if `id` exists (a non-empty directory is never
    /// replaced by rename).
    fn publish_new_dir(
        &self,
        id: &str,
        files: &[NewFile],
        snapshot: Option<(&Path, &str)>,
    ) -> Result<RunGuard> {
        let (temp, _hold) = loop {
            let temp = tempfile::Builder::new()
                .prefix(TEMP_PREFIX)
                .tempdir_in(&self.sessions_dir)
                .map_err(SessionError::io(&self.sessions_dir))?;
            let hold = fs::File::open(temp.path()).map_err(SessionError::io(temp.path()))?;
            if atomic::claim(temp.path(), &hold).map_err(SessionError::io(temp.path()))? {
                break (temp, hold);
            }
        };
        // All written before any is synced: the first fsync's journal commit then carries the
        // others' entries too.
        let mut written = Vec::with_capacity(files.len());
        for file in files {
            let path = temp.path().join(&file.name);
            let opened = fs::File::create_new(&path)
                .and_then(|mut opened| {
                    std::io::Write::write_all(&mut opened, &file.bytes)?;
                    if file.read_only {
                        let mut perms = opened.metadata()?.permissions();
                        perms.set_readonly(true);
                        opened.set_permissions(perms)?;
                    }
                    Ok(opened)
                })
                .map_err(SessionError::io(&path))?;
            written.push((path, opened));
        }
        for (path, opened) in written {
            opened.sync_all().map_err(SessionError::io(&path))?;
        }
        if let Some((source, snapshot_id)) = snapshot {
            let target = temp.path().join(snapshot_file_name(snapshot_id));
            if fs::hard_link(source, &target).is_err() {
                let contents = fs::read(source).map_err(SessionError::io(source))?;
                atomic::create_new_atomic(&target, &contents, true)?;
            }
        }
        // Taken inside the directory before it has its name (the lock's file goes with it): no
        // other process can run the new session before its maker lets go.
        let guard = RunGuard::try_acquire(temp.path())
            .and_then(|guard| guard.ok_or_else(|| std::io::ErrorKind::WouldBlock.into()))
            .map_err(SessionError::io(temp.path()))?;
        atomic::sync_dir(temp.path())?;
        let target = self.dir(id);
        if target.exists() {
            return Err(SessionError::Io {
                path: target,
                source: std::io::ErrorKind::AlreadyExists.into(),
            });
        }
        let temp_path = temp.keep();
        fs::rename(&temp_path, &target).map_err(|e| {
            let _ = fs::remove_dir_all(&temp_path);
            SessionError::io(&target)(e)
        })?;
        atomic::sync_dir(&self.sessions_dir)?;
        Ok(guard)
    }
}

/// A file of a session directory being made.
struct NewFile {
    name: String,
    bytes: Vec<u8>,
    /// A sealed file: read-only, as every sealed file is.
    read_only: bool,
}

impl NewFile {
    fn new(name: &str, bytes: Vec<u8>) -> NewFile {
        NewFile {
            name: name.to_string(),
            bytes,
            read_only: false,
        }
    }
}

impl Store {
    fn read_state(&self, dir: &Path, id: &str) -> Result<SessionState> {
        let (session, sealed) = self.read_whole_session(dir, id)?;
        Ok(SessionState {
            session,
            plan: read_plan_file(dir)?,
            sealed,
        })
    }

    /// session.json with every message: those of the sealed files it names first (its
    /// `earlier_messages` emptied), and the sealed files read. A sealed file is parsed once per
    /// process: it never changes.
    fn read_whole_session(
        &self,
        dir: &Path,
        id: &str,
    ) -> Result<(SessionFile, Vec<SealedMessages>)> {
        let mut session = read_session_json(dir, id)?;
        let named = std::mem::take(&mut session.earlier_messages);
        if !named.is_empty() || self.sealed_cache.holds(dir) {
            let mut messages = self.sealed_cache.read_all(dir, &named)?;
            messages.append(&mut session.messages);
            session.messages = messages;
        }
        Ok((session, named))
    }

    /// The files of a new session directory holding `session` (read whole) and `plan`: its
    /// messages past the seal size in sealed files, the rest in session.json.
    fn new_session_files(&self, mut session: SessionFile, plan: &str) -> Result<Vec<NewFile>> {
        let mut files = Vec::new();
        if sealed::json_size(&session.messages) >= self.seal_bytes {
            for file in self.seal_all(&mut session) {
                files.push(NewFile {
                    name: file.named.file.clone(),
                    bytes: file.bytes()?,
                    read_only: true,
                });
            }
        }
        files.push(NewFile::new(SESSION_FILE, session_bytes(&session)?));
        files.push(NewFile::new(PLAN_FILE, plan.as_bytes().to_vec()));
        Ok(files)
    }
}

/// `Ok(id)` if exactly one of `ids` starts with `prefix` (or equals it); otherwise `Err(None)`
/// for no match and `Err(Some(candidates))` for several.
fn unique_prefix(prefix: &str, ids: &[String]) -> Result<String, Option<Vec<String>>> {
    if prefix.is_empty() {
        return Err(None);
    }
    if let Some(exact) = ids.iter().find(|id| *id == prefix) {
        return Ok(exact.clone());
    }
    let matches: Vec<String> = ids
        .iter()
        .filter(|id| id.starts_with(prefix))
        .cloned()
        .collect();
    match matches.len() {
        0 => Err(None),
        1 => Ok(matches.into_iter().next().unwrap_or_default()),
        _ => Err(Some(matches)),
    }
}

/// Writes `state` as a new snapshot of its session, streamed to its file; its id.
fn write_snapshot(
    dir: &Path,
    state: &SessionState,
    now: DateTime<Utc>,
    checkpoint: Option<&str>,
) -> Result<String> {
    /// What a [`Snapshot`] file holds, borrowed from the state rather than copied.
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Out<'a> {
        version: u32,
        snapshot_id: &'a str,
        session_id: &'a str,
        created_at: DateTime<Utc>,
        session: &'a SessionFile,
        plan: &'a Plan,
        #[serde(skip_serializing_if = "Option::is_none")]
        checkpoint: Option<&'a str>,
    }
    let mut last_err = None;
    for _ in 0..8 {
        let snapshot_id = new_id();
        let out = Out {
            version: SNAPSHOT_VERSION,
            snapshot_id: &snapshot_id,
            session_id: &state.session.session_id,
            created_at: now,
            session: &state.session,
            plan: &state.plan,
            checkpoint,
        };
        let path = dir.join(snapshot_file_name(&snapshot_id));
        let written = atomic::create_new_atomic_with(&path, true, |w| {
            serde_json::to_writer_pretty(&mut *w, &out)?;
            w.write_all(b"\n")
        });
        match written {
            Ok(()) => return Ok(snapshot_id),
            Err(e) => last_err = Some(e),
        }
    }
    Err(last_err.unwrap_or_else(|| SessionError::NotFound("snapshot".into())))
}

fn snapshot_ids(dir: &Path) -> Result<Vec<String>> {
    let entries = fs::read_dir(dir).map_err(SessionError::io(dir))?;
    let mut ids: Vec<String> = entries
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter_map(|name| {
            name.strip_prefix("history-")
                .and_then(|rest| rest.strip_suffix(".json"))
                .map(str::to_string)
        })
        .collect();
    ids.sort();
    Ok(ids)
}

fn session_bytes(session: &SessionFile) -> Result<Vec<u8>> {
    pretty_json(session, SESSION_FILE)
}

/// session.json as it is: its state, the sealed files it names, the messages after them.
pub(super) fn read_session_json(dir: &Path, id: &str) -> Result<SessionFile> {
    let path = dir.join(SESSION_FILE);
    let bytes = fs::read(&path).map_err(SessionError::io(&path))?;
    let session: SessionFile = parse_versioned_json(&path, &bytes, SESSION_VERSION)?;
    if session.session_id != id {
        return Err(SessionError::Corrupt {
            path,
            pos: None,
            message: format!(
                "sessionId is `{}` but the directory is `{id}` (copy sessions with `nop fork`)",
                session.session_id
            ),
        });
    }
    Ok(session)
}

fn read_plan_file(dir: &Path) -> Result<Plan> {
    let path = dir.join(PLAN_FILE);
    let bytes = match fs::read(&path) {
        Ok(bytes) => bytes,
        // A session made by hand without a plan simply has no tasks.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Plan::default()),
        Err(e) => return Err(SessionError::io(path)(e)),
    };
    let text =
        crate::protocol::decode_utf8(bytes).map_err(|(pos, message)| SessionError::Corrupt {
            path: path.clone(),
            pos: Some(pos),
            message,
        })?;
    Plan::from_xml(&text).map_err(|e| SessionError::Corrupt {
        path,
        pos: Some(e.pos),
        message: e.message,
    })
}

fn read_snapshot_file(path: &Path) -> Result<Snapshot> {
    let bytes = fs::read(path).map_err(SessionError::io(path))?;
    parse_versioned_json(path, &bytes, SNAPSHOT_VERSION)
}
