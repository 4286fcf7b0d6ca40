//! A long conversation's earlier messages, in files of their own beside session.json
//! (`messages-<first>-<id>.json`): once session.json's messages pass the store's limit
//! (`session.seal_kb`) they are sealed into one, which is written once, made read-only and never
//! changed, and session.json names it in `earlierMessages`. A write of the session then costs
//! what session.json holds (its state and the messages since the last seal), however long the
//! conversation.
//!
//! The order of a write keeps every crash guarantee of a single file: the new sealed files are
//! created first (each atomically), then session.json is replaced (the commit: from then on it
//! names them), then the files it no longer names are removed. A process killed in between
//! leaves files that session.json does not name: they are never read, and the next seal or
//! rewrite removes them. A name in session.json is used only if it has the shape of one of
//! ours, so a hand-edited `earlierMessages` cannot make the store read or remove another file.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::atomic;
use super::error::{Result, SessionError};
use super::json::parse_versioned_json;
use crate::protocol::{Message, SEALED_VERSION, SealedFile, SealedMessages, new_id};

const PREFIX: &str = "messages-";
const SUFFIX: &str = ".json";

/// Whether `name` has the shape of a sealed file's name: `messages-<digits>-<id>.json`, one
/// path component.
pub(super) fn is_sealed_name(name: &str) -> bool {
    let Some(rest) = name
        .strip_prefix(PREFIX)
        .and_then(|r| r.strip_suffix(SUFFIX))
    else {
        return false;
    };
    let Some((first, id)) = rest.split_once('-') else {
        return false;
    };
    !first.is_empty()
        && first.bytes().all(|b| b.is_ascii_digit())
        && !id.is_empty()
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// Cuts `messages` into runs of about `limit` bytes of JSON each (the last may be shorter), in
/// order.
pub(super) fn cut(messages: Vec<Message>, limit: usize) -> Vec<Vec<Message>> {
    let mut runs = Vec::new();
    let mut run = Vec::new();
    let mut bytes = 0;
    for message in messages {
        bytes += json_len(&message);
        run.push(message);
        if bytes >= limit {
            runs.push(std::mem::take(&mut run));
            bytes = 0;
        }
    }
    if !run.is_empty() {
        runs.push(run);
    }
    runs
}

/// The size of `messages` as JSON (compact: what the limit is measured in).
pub(super) fn json_size(messages: &[Message]) -> usize {
    messages.iter().map(json_len).sum()
}

fn json_len(message: &Message) -> usize {
    serde_json::to_vec(message).map_or(0, |v| v.len())
}

/// A sealed file about to be written.
#[derive(Debug)]
pub(super) struct NewSealed {
    /// The index of its first message in the conversation.
    first: usize,
    pub(super) messages: Vec<Message>,
    /// What session.json is to name it by.
    pub(super) named: SealedMessages,
}

impl NewSealed {
    /// The file's bytes.
    pub(super) fn bytes(&self) -> Result<Vec<u8>> {
        #[derive(serde::Serialize)]
        struct Borrowed<'a> {
            version: u32,
            first: usize,
            messages: &'a [Message],
        }
        super::json::pretty_json(
            &Borrowed {
                version: SEALED_VERSION,
                first: self.first,
                messages: &self.messages,
            },
            "a sealed messages file",
        )
    }
}

/// The sealed files `runs` make, the first of them starting at message `first`, each under a
/// new name.
pub(super) fn prepare(mut first: usize, runs: Vec<Vec<Message>>) -> Vec<NewSealed> {
    let mut files = Vec::with_capacity(runs.len());
    for messages in runs {
        let count = messages.len();
        files.push(NewSealed {
            first,
            messages,
            named: SealedMessages {
                file: file_name(first),
                count,
            },
        });
        first += count;
    }
    files
}

fn file_name(first: usize) -> String {
    format!("{PREFIX}{first:08}-{}{SUFFIX}", new_id())
}

/// Writes `file` in `dir` (read-only, created atomically); what session.json is to name it by:
/// the name it was prepared with, or another on the rare clash of ids.
pub(super) fn write(dir: &Path, mut file: NewSealed) -> Result<SealedMessages> {
    let bytes = file.bytes()?;
    // An id is unique across processes only with a retry on a clash (`new_id`).
    let mut attempts = 0;
    while let Err(e) = atomic::create_new_atomic(&dir.join(&file.named.file), &bytes, true) {
        attempts += 1;
        if attempts == 8 || !dir.join(&file.named.file).exists() {
            return Err(e);
        }
        file.named.file = file_name(file.first);
    }
    Ok(file.named)
}

/// The messages of sealed file `named`, which session.json places at index `first`.
pub(super) fn read(dir: &Path, named: &SealedMessages, first: usize) -> Result<Vec<Message>> {
    let path = dir.join(&named.file);
    let corrupt = |message: String| SessionError::Corrupt {
        path: path.clone(),
        pos: None,
        message,
    };
    if !is_sealed_name(&named.file) {
        return Err(SessionError::Corrupt {
            path: dir.join(super::SESSION_FILE),
            pos: None,
            message: format!(
                "earlierMessages names `{}`, which is not a messages-*.json file of this session",
                named.file
            ),
        });
    }
    let bytes = read_regular(&path)?;
    let sealed: SealedFile = parse_versioned_json(&path, &bytes, SEALED_VERSION)?;
    if sealed.first != first {
        return Err(corrupt(format!(
            "it starts at message {} but session.json places it at {first}",
            sealed.first
        )));
    }
    if sealed.messages.len() != named.count {
        return Err(corrupt(format!(
            "it holds {} messages but session.json says {}",
            sealed.messages.len(),
            named.count
        )));
    }
    Ok(sealed.messages)
}

/// The bytes of the regular file at `path`: a symbolic link or a named pipe in a sealed file's
/// place is an error, never followed or waited on.
fn read_regular(path: &Path) -> Result<Vec<u8>> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = fs::OpenOptions::new()
        .read(true)
        .custom_flags((nix::fcntl::OFlag::O_NONBLOCK | nix::fcntl::OFlag::O_NOFOLLOW).bits())
        .open(path)
        .map_err(SessionError::io(path))?;
    if !file.metadata().map_err(SessionError::io(path))?.is_file() {
        return Err(SessionError::Corrupt {
            path: path.to_path_buf(),
            pos: None,
            message: "a sealed messages file must be a regular file".into(),
        });
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(SessionError::io(path))?;
    Ok(bytes)
}

/// A sealed file as read: the index of its first message, its messages, its size on disk.
type Run = (usize, Arc<Vec<Message>>, u64);

/// At most this many bytes of sealed files (their size on disk) are held parsed, all sessions
/// together. A longer conversation is parsed at each read instead: held, it would be in memory
/// twice (the files held and the messages read from them).
const MAX_HELD_BYTES: u64 = if cfg!(test) { 16 << 10 } else { 48 << 20 };

/// The sealed files a process read, parsed: a run reads the whole conversation at every turn,
/// and what is sealed never changes, so each file is parsed once (up to [`MAX_HELD_BYTES`]).
/// What a session's session.json no longer names is dropped at its next read.
#[derive(Debug, Default)]
pub(super) struct Cache {
    files: Mutex<HashMap<PathBuf, Run>>,
}

impl Cache {
    /// Whether files of the session in `dir` are held (to drop them once none is named).
    pub(super) fn holds(&self, dir: &Path) -> bool {
        self.files
            .lock()
            .is_ok_and(|files| files.keys().any(|p| p.parent() == Some(dir)))
    }

    /// Every message of the sealed files `named` of the session in `dir`, in order.
    pub(super) fn read_all(&self, dir: &Path, named: &[SealedMessages]) -> Result<Vec<Message>> {
        let sizes: Vec<u64> = named
            .iter()
            .map(|n| fs::symlink_metadata(dir.join(&n.file)).map_or(0, |m| m.len()))
            .collect();
        let keep = sizes.iter().sum::<u64>() <= MAX_HELD_BYTES;
        let mut messages = Vec::with_capacity(named.iter().map(|n| n.count).sum());
        let mut held = Vec::with_capacity(if keep { named.len() } else { 0 });
        for (n, size) in named.iter().zip(sizes) {
            let path = dir.join(&n.file);
            let first = messages.len();
            let cached = self
                .files
                .lock()
                .ok()
                .and_then(|files| files.get(&path).cloned())
                .filter(|(at, m, _)| *at == first && m.len() == n.count);
            let run = match cached {
                Some((_, run, _)) => run,
                None if keep => Arc::new(read(dir, n, first)?),
                None => {
                    messages.extend(read(dir, n, first)?);
                    continue;
                }
            };
            messages.extend(run.iter().cloned());
            if keep {
                held.push((path, (first, run, size)));
            }
        }
        if let Ok(mut files) = self.files.lock() {
            files.retain(|p, _| p.parent() != Some(dir));
            let others: u64 = files.values().map(|(_, _, size)| size).sum();
            let mine: u64 = held.iter().map(|(_, (_, _, size))| size).sum();
            if others + mine > MAX_HELD_BYTES {
                files.clear();
            }
            files.extend(held);
        }
        Ok(messages)
    }
}

/// Removes the sealed files of `dir` that `named` does not name: what a rewrite replaced, or a
/// killed write left. Call under the session's write lock.
pub(super) fn remove_unnamed(dir: &Path, named: &[SealedMessages]) -> Result<()> {
    let entries = fs::read_dir(dir).map_err(SessionError::io(dir))?;
    let mut removed = false;
    for entry in entries.flatten() {
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if is_sealed_name(&name) && !named.iter().any(|n| n.file == name) {
            let path = entry.path();
            match fs::remove_file(&path) {
                Ok(()) => removed = true,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(SessionError::io(path)(e)),
            }
        }
    }
    if removed {
        atomic::sync_dir(dir)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use chrono::Utc;
    use pretty_assertions::assert_eq;

    use super::*;
    use crate::protocol::{Role, SessionFile};
    use crate::session::{SESSION_FILE, Store};

    #[test]
    fn names_of_ours_and_others() {
        assert!(is_sealed_name("messages-00001000-01kaq3m7x2-4hzc.json"));
        for other in [
            "messages-.json",
            "messages-12.json",
            "messages-x1-01kaq3m7x2.json",
            "messages-1-../../x.json",
            "messages-1-a/b.json",
            "session.json",
            "history-01kaq3m7x2-4hzc.json",
        ] {
            assert!(!is_sealed_name(other), "{other}");
        }
    }

    #[test]
    fn runs_are_cut_at_the_limit_in_order() {
        let messages: Vec<Message> = (0..10)
            .map(|i| Message::new(Role::User, "x".repeat(100 + i), Utc::now()))
            .collect();
        let one = json_len(&messages[0]);
        let runs = cut(messages.clone(), one * 3);
        assert_eq!(runs.iter().map(Vec::len).collect::<Vec<_>>(), [3, 3, 3, 1]);
        assert_eq!(runs.concat(), messages);
        assert_eq!(cut(Vec::new(), 10), Vec::<Vec<Message>>::new());
    }

    /// A store that seals every 2 KiB, and a session in it.
    fn sealing() -> (tempfile::TempDir, Store, String) {
        let dir = tempfile::tempdir().expect("temp");
        let store =
            Store::new(dir.path().join("sessions"), Duration::from_secs(5)).with_seal_bytes(2048);
        let id = store
            .create("coder", Utc::now())
            .expect("create")
            .session_id;
        (dir, store, id)
    }

    fn say(store: &Store, id: &str, n: usize) -> usize {
        let now = Utc::now();
        let role = if n.is_multiple_of(2) {
            Role::User
        } else {
            Role::Assistant
        };
        store
            .append(
                id,
                vec![Message::new(role, format!("{n}: {}", "x".repeat(200)), now)],
                now,
            )
            .expect("append")
    }

    fn on_disk(store: &Store, id: &str) -> SessionFile {
        let text = fs::read_to_string(store.dir(id).join(SESSION_FILE)).expect("read");
        serde_json::from_str(&text).expect("parse")
    }

    fn sealed_files(store: &Store, id: &str) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(store.dir(id))
            .expect("dir")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| is_sealed_name(n))
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_long_conversation_is_parsed_at_each_read_rather_than_held_twice() {
        let (_dir, store, id) = sealing();
        let read = |store: &Store| -> Vec<String> {
            let whole = store.read_session(&id).expect("read");
            whole.messages.into_iter().map(|m| m.content).collect()
        };
        for n in 0..20 {
            say(&store, &id, n);
        }
        let short = read(&store);
        assert_eq!(short.len(), 20);
        assert!(
            store.sealed_cache.holds(&store.dir(&id)),
            "a short one is held"
        );
        // Past the limit (16 KiB of sealed files in tests): none of its files is held, and the
        // messages read are the same.
        for n in 20..120 {
            say(&store, &id, n);
        }
        let sealed: u64 = sealed_files(&store, &id)
            .iter()
            .map(|n| fs::metadata(store.dir(&id).join(n)).expect("meta").len())
            .sum();
        assert!(sealed > MAX_HELD_BYTES, "{sealed}");
        let long = read(&store);
        assert!(
            !store.sealed_cache.holds(&store.dir(&id)),
            "a long one is not held"
        );
        assert_eq!(long.len(), 120);
        assert_eq!(long[..20], short[..]);
        let fresh = Store::new(store.sessions_dir(), Duration::from_secs(5));
        assert_eq!(read(&fresh), long);
    }

    #[test]
    fn a_snapshot_streamed_to_its_file_is_the_whole_session_as_a_snapshot_is_written() {
        let (_dir, store, id) = sealing();
        for n in 0..30 {
            say(&store, &id, n);
        }
        let state = store.read(&id).expect("read");
        let snapshot = store
            .snapshot_of(&id, &state, Utc::now())
            .expect("snapshot");
        let path = store.dir(&id).join(format!("history-{snapshot}.json"));
        let written = fs::read(&path).expect("the snapshot file");
        let read = store.read_snapshot(&id, &snapshot).expect("read back");
        assert_eq!(read.session, state.session);
        assert_eq!(read.session.messages.len(), 30);
        let expected = crate::session::json::pretty_json(&read, "a snapshot").expect("serialise");
        assert_eq!(
            String::from_utf8_lossy(&written),
            String::from_utf8_lossy(&expected)
        );
        assert!(fs::metadata(&path).expect("meta").permissions().readonly());
    }

    #[test]
    fn messages_past_the_limit_are_sealed_and_read_back_whole_in_order() {
        let (_dir, store, id) = sealing();
        for n in 0..40 {
            assert_eq!(say(&store, &id, n), n + 1);
        }
        let file = on_disk(&store, &id);
        assert!(
            file.earlier_messages.len() >= 3,
            "{:?}",
            file.earlier_messages
        );
        let mut named: Vec<String> = file
            .earlier_messages
            .iter()
            .map(|n| n.file.clone())
            .collect();
        named.sort();
        assert_eq!(named, sealed_files(&store, &id));
        // session.json holds less than the limit and one write's worth of messages.
        assert!(
            fs::metadata(store.dir(&id).join(SESSION_FILE))
                .expect("meta")
                .len()
                < 4096
        );
        let whole = store.read_session(&id).expect("read");
        let texts: Vec<String> = whole
            .messages
            .iter()
            .map(|m| m.content.split(':').next().unwrap_or_default().to_string())
            .collect();
        let expected: Vec<String> = (0..40).map(|n| n.to_string()).collect();
        assert_eq!(texts, expected);
        assert!(whole.earlier_messages.is_empty());
        assert_eq!(store.read_recent(&id).expect("recent").message_count(), 40);
        assert_eq!(store.check(&id).expect("check"), Vec::new());
        // Sealed files are read-only.
        for name in sealed_files(&store, &id) {
            let meta = fs::metadata(store.dir(&id).join(name)).expect("meta");
            assert!(meta.permissions().readonly());
        }
        // The listing counts every message and takes the title from the first sealed file.
        let (listed, failed) = store.summaries().expect("list");
        assert!(failed.is_empty());
        assert_eq!(listed[0].messages, 40);
        assert!(listed[0].title.starts_with("0: x"), "{}", listed[0].title);
        assert!(listed[0].answered);
        // The same listing made afresh from the files (no summary.json) says the same.
        fs::remove_file(
            store
                .dir(&id)
                .join(super::super::summary_cache::SUMMARY_FILE),
        )
        .expect("remove");
        assert_eq!(store.summaries().expect("list").0, listed);
    }

    #[test]
    fn an_append_reads_no_sealed_file() {
        let (_dir, store, id) = sealing();
        for n in 0..30 {
            say(&store, &id, n);
        }
        // Every sealed file made unreadable as JSON: appending and changing the state go on,
        // reading the whole conversation says which file is broken.
        for name in sealed_files(&store, &id) {
            let path = store.dir(&id).join(name);
            let mut perms = fs::metadata(&path).expect("meta").permissions();
            #[allow(clippy::permissions_set_readonly_false)]
            perms.set_readonly(false);
            fs::set_permissions(&path, perms).expect("chmod");
            fs::write(&path, "not json").expect("write");
        }
        assert_eq!(say(&store, &id, 30), 31);
        store
            .update(&id, Utc::now(), |s| {
                s.session.status = crate::protocol::SessionStatus::Running;
                Ok(())
            })
            .expect("update");
        let err = store.read(&id).expect_err("broken sealed file");
        assert!(err.to_string().contains("messages-"), "{err}");
    }

    #[test]
    fn a_rewrite_keeps_the_sealed_files_it_did_not_change_and_removes_the_others() {
        let (_dir, store, id) = sealing();
        for n in 0..40 {
            say(&store, &id, n);
        }
        let before = on_disk(&store, &id).earlier_messages;
        assert!(before.len() >= 3);
        // Cut the conversation back into the second sealed file.
        let keep = before[0].count + 1;
        store
            .update_whole(&id, Utc::now(), |s| {
                s.session.messages.truncate(keep);
                Ok(())
            })
            .expect("rewrite");
        let after = on_disk(&store, &id);
        assert_eq!(after.earlier_messages, before[..1].to_vec());
        assert_eq!(after.messages.len(), 1);
        assert_eq!(sealed_files(&store, &id), vec![before[0].file.clone()]);
        assert_eq!(store.read_session(&id).expect("read").messages.len(), keep);
        // A rewrite that changes the first message seals afresh, from the start.
        store
            .update_whole(&id, Utc::now(), |s| {
                s.session.messages[0].content = "changed".into();
                for n in 0..20 {
                    s.session.messages.push(Message::new(
                        Role::User,
                        "y".repeat(200 + n),
                        Utc::now(),
                    ));
                }
                Ok(())
            })
            .expect("rewrite");
        let again = on_disk(&store, &id);
        assert!(!again.earlier_messages.is_empty());
        assert!(
            again
                .earlier_messages
                .iter()
                .all(|n| n.file != before[0].file)
        );
        let whole = store.read_session(&id).expect("read");
        assert_eq!(whole.messages.len(), keep + 20);
        assert_eq!(whole.messages[0].content, "changed");
        assert_eq!(store.check(&id).expect("check"), Vec::new());
    }

    #[test]
    fn snapshots_and_forks_of_a_sealed_session_stand_alone() {
        let (_dir, store, id) = sealing();
        for n in 0..30 {
            say(&store, &id, n);
        }
        let snap = store.snapshot(&id, Utc::now()).expect("snapshot");
        let snapshot = store.read_snapshot(&id, &snap).expect("read");
        assert_eq!(snapshot.session.messages.len(), 30);
        assert!(snapshot.session.earlier_messages.is_empty());
        let child = store.fork(&id, Some(&snap), Utc::now()).expect("fork");
        let child_id = child.session_id;
        assert!(!on_disk(&store, &child_id).earlier_messages.is_empty());
        store.delete(&id, true).expect("delete parent");
        let whole = store.read_session(&child_id).expect("read child");
        assert_eq!(whole.messages.len(), 30);
        assert_eq!(say(&store, &child_id, 30), 31);
        assert_eq!(store.check(&child_id).expect("check"), Vec::new());
    }

    #[test]
    fn a_sealed_file_named_by_hand_is_checked_never_followed() {
        let (_dir, store, id) = sealing();
        for n in 0..20 {
            say(&store, &id, n);
        }
        let path = store.dir(&id).join(SESSION_FILE);
        let text = fs::read_to_string(&path).expect("read");
        let first = on_disk(&store, &id).earlier_messages[0].file.clone();
        // Another file of the directory, or one outside it, named instead of a sealed file.
        for name in ["../../secret.json", "plan.xml", "history-x.json"] {
            fs::write(&path, text.replace(&first, name)).expect("write");
            let err = store.read(&id).expect_err("refused");
            assert!(
                err.to_string().contains("not a messages-*.json file"),
                "{name}: {err}"
            );
        }
        // A count that does not match the file.
        let file = on_disk(&store, &id);
        let wrong = text.replacen(
            &format!("\"count\": {}", file.earlier_messages[0].count),
            "\"count\": 1",
            1,
        );
        fs::write(&path, wrong).expect("write");
        let err = store.read(&id).expect_err("refused");
        assert!(err.to_string().contains(&first), "{err}");
        assert!(!store.check(&id).expect("check").is_empty());
        fs::write(&path, &text).expect("write");

        // A named pipe or a symbolic link in a sealed file's place: an error, never a wait.
        let sealed = store.dir(&id).join(&first);
        fs::remove_file(&sealed).expect("remove");
        nix::unistd::mkfifo(&sealed, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
        let err = store.read(&id).expect_err("a pipe");
        assert!(err.to_string().contains("regular file"), "{err}");
        fs::remove_file(&sealed).expect("remove");
        std::os::unix::fs::symlink(store.dir(&id).join("plan.xml"), &sealed).expect("link");
        assert!(store.read(&id).is_err());
    }
}
