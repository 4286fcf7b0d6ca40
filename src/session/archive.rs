//! A session as one file that travels (`nop sessions export`, `nop sessions import`): JSON
//! lines — a header (format, version, the session and its parent chain), one line per file of
//! each session directory that the conversation needs, and a trailer with the count and a
//! SHA-256 of everything before it, so that a cut or altered archive is refused whole. Paths
//! under the exporting repository's root are written relative to it and put back under the
//! importing one; secrets are scrubbed by the caller's function before they are written.
//!
//! An archive is untrusted input: its ids must be ids, its file names one of the names a
//! session directory holds (no path, no `..`), a session that exists is never overwritten,
//! and the sessions are written to a directory of their own and renamed into place only once
//! every file is read and checked.

use std::io::{BufRead, Write};
use std::path::Path;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::Store;
use crate::protocol::ids::looks_like_id;

/// The archive's format name and the version this build writes and reads.
pub const FORMAT: &str = "nop-session-archive";
pub const VERSION: u32 = 1;

/// What stands for the exporting repository's root in an archive.
const ROOT: &str = "\u{27e8}nop:repository-root\u{27e9}";

/// The largest archive line read (a session.json, a snapshot, a command's whole output).
const MAX_LINE: u64 = 256 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("{0}")]
    Session(#[from] super::SessionError),
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("not a nop session archive ({0})")]
    NotAnArchive(String),
    #[error(
        "the archive was written by a newer nop (format version {found}; this build reads up to {VERSION}); nothing was imported"
    )]
    TooNew { found: u32 },
    #[error("the archive is damaged or cut short ({0}); nothing was imported")]
    Corrupt(String),
    #[error(
        "session {0} exists here already; nothing was imported (delete it first, or import into another clone)"
    )]
    Exists(String),
}

#[derive(Debug, Serialize, Deserialize)]
struct Header {
    format: String,
    version: u32,
    /// The session exported.
    session: String,
    /// It and its parents, the session first.
    sessions: Vec<String>,
    exported_at: DateTime<Utc>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    session: String,
    path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    text: Option<String>,
    /// A file that is not UTF-8, in hexadecimal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    hex: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Trailer {
    end: bool,
    files: usize,
    sha256: String,
}

/// What an export or an import moved: the sessions (the one asked for first) and the files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Moved {
    pub session: String,
    pub sessions: Vec<String>,
    pub files: usize,
    /// Parents that were here already and were left as they are (import only).
    pub kept: Vec<String>,
}

/// Whether `name` is a file of a session directory that travels with it: its state, plan,
/// event log, sealed messages, snapshots and whole command outputs (not locks, queues,
/// summaries or error records, which are this machine's).
fn travels(name: &str) -> bool {
    let plain = !name.is_empty()
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    plain
        && (matches!(name, "session.json" | "plan.xml" | "session.log")
            || (name.starts_with("messages-") && name.ends_with(".json"))
            || (name.starts_with("history-") && name.ends_with(".json"))
            || (name.starts_with("out-") && name.ends_with(".log")))
}

impl Store {
    /// Writes session `id` and its parent chain to `out` (see the module). `root` is the
    /// repository's root; `scrub` takes secrets out of each file's text.
    pub fn export(
        &self,
        id: &str,
        root: &Path,
        scrub: &dyn Fn(&str) -> String,
        out: &mut dyn Write,
    ) -> Result<Moved, ArchiveError> {
        let sessions = self.chain(id)?;
        let mut writer = Hashing::new(out);
        let header = Header {
            format: FORMAT.into(),
            version: VERSION,
            session: id.to_string(),
            sessions: sessions.clone(),
            exported_at: Utc::now(),
        };
        writer.line(&header)?;
        let root = root.display().to_string();
        let mut files = 0;
        for session in &sessions {
            let dir = self.dir(session);
            // A consistent copy: no write of this session lands while it is read.
            let _lock = super::SessionLock::acquire(
                &dir,
                session,
                super::LockKind::Shared,
                self.lock_timeout(),
            )?;
            for (name, bytes) in files_of(&dir)? {
                let entry = match String::from_utf8(bytes) {
                    Ok(text) => Entry {
                        session: session.clone(),
                        path: name,
                        text: Some(scrub(&text).replace(&root, ROOT)),
                        hex: None,
                    },
                    Err(e) => Entry {
                        session: session.clone(),
                        path: name,
                        text: None,
                        hex: Some(e.as_bytes().iter().map(|b| format!("{b:02x}")).collect()),
                    },
                };
                writer.line(&entry)?;
                files += 1;
            }
        }
        let sha256 = writer.digest();
        writer.line(&Trailer {
            end: true,
            files,
            sha256,
        })?;
        Ok(Moved {
            session: id.to_string(),
            sessions,
            files,
            kept: Vec::new(),
        })
    }

    /// Session `id` and the sessions it was forked from, nearest first (a parent that is gone
    /// ends the chain: a fork keeps its own copy of the snapshot it came from).
    fn chain(&self, id: &str) -> Result<Vec<String>, ArchiveError> {
        let mut chain = vec![id.to_string()];
        let mut session = self.read_session(id)?;
        while let Some(parent) = session.parent_session.as_ref().map(|p| p.id.clone()) {
            if chain.contains(&parent) || !looks_like_id(&parent) || !self.dir(&parent).is_dir() {
                break;
            }
            session = self.read_session(&parent)?;
            chain.push(parent);
        }
        Ok(chain)
    }

    /// Reads an archive from `input` and makes its sessions resumable here, under `root` (see
    /// the module): the session asked for must not exist; parents that exist are kept as they
    /// are.
    pub fn import(&self, input: &mut dyn BufRead, root: &Path) -> Result<Moved, ArchiveError> {
        let read = read_archive(input)?;
        let header = read.header;
        if self.dir(&header.session).exists() {
            return Err(ArchiveError::Exists(header.session));
        }
        let (new, kept): (Vec<String>, Vec<String>) = header
            .sessions
            .iter()
            .cloned()
            .partition(|s| !self.dir(s).exists());
        let root = root.display().to_string();
        let staging = tempfile::Builder::new()
            .prefix(".import-")
            .tempdir_in(self.ensure_dir()?)
            .map_err(io(self.sessions_dir()))?;
        let mut files = 0;
        for entry in read
            .entries
            .into_iter()
            .filter(|e| new.contains(&e.session))
        {
            let dir = staging.path().join(&entry.session);
            std::fs::create_dir_all(&dir).map_err(io(&dir))?;
            let bytes = match (entry.text, entry.hex) {
                (Some(text), None) => text.replace(ROOT, &root).into_bytes(),
                (None, Some(hex)) => unhex(&hex).ok_or_else(|| {
                    ArchiveError::Corrupt(format!("{}: not hexadecimal", entry.path))
                })?,
                _ => {
                    return Err(ArchiveError::Corrupt(format!(
                        "{}: neither text nor bytes",
                        entry.path
                    )));
                }
            };
            let path = dir.join(&entry.path);
            super::write_atomic(&path, &bytes)?;
            files += 1;
        }
        for session in &new {
            let from = staging.path().join(session);
            if !from.join("session.json").is_file() {
                return Err(ArchiveError::Corrupt(format!(
                    "session {session} has no session.json"
                )));
            }
            // The store reads it as it would any session: its id, its version, its messages.
            Store::new(staging.path(), self.lock_timeout()).read(session)?;
        }
        for session in &new {
            let (from, to) = (staging.path().join(session), self.dir(session));
            std::fs::rename(&from, &to).map_err(io(&to))?;
        }
        super::sync_dir(self.sessions_dir())?;
        Ok(Moved {
            session: header.session,
            sessions: new,
            files,
            kept,
        })
    }

    /// The sessions directory, made when missing.
    fn ensure_dir(&self) -> Result<&Path, ArchiveError> {
        let dir = self.sessions_dir();
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        Ok(dir)
    }
}

/// The files of a session directory that travel, by name, with their bytes.
fn files_of(dir: &Path) -> Result<Vec<(String, Vec<u8>)>, ArchiveError> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(io(dir))?
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| travels(name))
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|name| {
            let path = dir.join(&name);
            let bytes = std::fs::read(&path).map_err(io(&path))?;
            Ok((name, bytes))
        })
        .collect()
}

/// An archive read and checked whole.
struct Read {
    header: Header,
    entries: Vec<Entry>,
}

/// Reads and checks an archive: its header, every entry (ids and names), its trailer's count
/// and digest.
fn read_archive(input: &mut dyn BufRead) -> Result<Read, ArchiveError> {
    let mut context = ring::digest::Context::new(&ring::digest::SHA256);
    let mut lines = 0usize;
    let first = next_line(input, &mut lines)?
        .ok_or_else(|| ArchiveError::NotAnArchive("it is empty".into()))?;
    let header: serde_json::Value = serde_json::from_str(&first)
        .map_err(|_| ArchiveError::NotAnArchive("its first line is not JSON".into()))?;
    if header["format"] != FORMAT {
        return Err(ArchiveError::NotAnArchive(format!(
            "no `\"format\": \"{FORMAT}\"` on its first line"
        )));
    }
    let found = header["version"].as_u64().unwrap_or(0);
    if found > u64::from(VERSION) {
        return Err(ArchiveError::TooNew {
            found: u32::try_from(found).unwrap_or(u32::MAX),
        });
    }
    let header: Header =
        serde_json::from_value(header).map_err(|e| ArchiveError::Corrupt(e.to_string()))?;
    if !header.sessions.iter().all(|s| looks_like_id(s))
        || header.sessions.first() != Some(&header.session)
    {
        return Err(ArchiveError::Corrupt(
            "its header names no valid session".into(),
        ));
    }
    context.update(first.as_bytes());
    let mut entries = Vec::new();
    loop {
        let line = next_line(input, &mut lines)?
            .ok_or_else(|| ArchiveError::Corrupt("it has no end".into()))?;
        if let Ok(trailer) = serde_json::from_str::<Trailer>(&line) {
            let digest: String = context
                .finish()
                .as_ref()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            if !trailer.end || trailer.files != entries.len() || trailer.sha256 != digest {
                return Err(ArchiveError::Corrupt(
                    "its content does not match its checksum".into(),
                ));
            }
            return Ok(Read { header, entries });
        }
        let entry: Entry = serde_json::from_str(&line)
            .map_err(|e| ArchiveError::Corrupt(format!("line {lines}: {e}")))?;
        if !header.sessions.contains(&entry.session) || !travels(&entry.path) {
            return Err(ArchiveError::Corrupt(format!(
                "line {lines} names {}/{}, which is not a session file",
                entry.session, entry.path
            )));
        }
        context.update(line.as_bytes());
        entries.push(entry);
    }
}

/// The next line of the archive (`None` at its end), counted in `lines`.
fn next_line(input: &mut dyn BufRead, lines: &mut usize) -> Result<Option<String>, ArchiveError> {
    let mut line = String::new();
    let n = std::io::Read::take(&mut *input, MAX_LINE)
        .read_line(&mut line)
        .map_err(|e| ArchiveError::Corrupt(e.to_string()))?;
    if n == 0 {
        return Ok(None);
    }
    if !line.ends_with('\n') {
        return Err(ArchiveError::Corrupt(format!(
            "line {} is cut short or longer than {} MiB",
            *lines + 1,
            MAX_LINE >> 20
        )));
    }
    *lines += 1;
    Ok(Some(line))
}

/// Writes JSON lines while hashing them.
struct Hashing<'a> {
    out: &'a mut dyn Write,
    context: Option<ring::digest::Context>,
}

impl<'a> Hashing<'a> {
    fn new(out: &'a mut dyn Write) -> Hashing<'a> {
        Hashing {
            out,
            context: Some(ring::digest::Context::new(&ring::digest::SHA256)),
        }
    }

    fn line(&mut self, value: &impl Serialize) -> Result<(), ArchiveError> {
        let mut line = serde_json::to_string(value).map_err(|e| {
            ArchiveError::Session(super::SessionError::Serialize {
                what: "the archive".into(),
                message: e.to_string(),
            })
        })?;
        line.push('\n');
        if let Some(context) = &mut self.context {
            context.update(line.as_bytes());
        }
        self.out
            .write_all(line.as_bytes())
            .map_err(|e| ArchiveError::Io {
                path: "the archive".into(),
                source: e,
            })
    }

    /// The digest of what was written so far; later lines are not hashed.
    fn digest(&mut self) -> String {
        self.context
            .take()
            .map(|c| {
                c.finish()
                    .as_ref()
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn unhex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> ArchiveError + '_ {
    move |source| ArchiveError::Io {
        path: path.display().to_string(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Message, Role};
    use pretty_assertions::assert_eq;

    fn store(dir: &Path) -> Store {
        Store::new(dir.join("sessions"), std::time::Duration::from_secs(5))
    }

    #[test]
    fn only_a_session_directorys_own_files_travel() {
        for name in [
            "session.json",
            "plan.xml",
            "session.log",
            "messages-1-x.json",
            "history-01m.json",
            "out-1.log",
        ] {
            assert!(travels(name), "{name}");
        }
        for name in [
            "run.lock",
            "session.lock",
            "summary.json",
            "error-1.log",
            "../session.json",
            "a/session.json",
            ".history-x.json",
            "inbox",
            "out-1.log/x",
        ] {
            assert!(!travels(name), "{name}");
        }
        assert_eq!(unhex("00ff7f"), Some(vec![0, 255, 127]));
        assert_eq!(unhex("0"), None);
        assert_eq!(unhex("zz"), None);
    }

    #[test]
    fn a_fork_travels_with_its_parent_and_a_parent_already_there_is_kept() {
        let (from, to) = (
            tempfile::tempdir().expect("temp"),
            tempfile::tempdir().expect("temp"),
        );
        let (a, b) = (store(from.path()), store(to.path()));
        let now = Utc::now();
        let parent = a.create("coder", now).expect("create").session_id;
        a.append(
            &parent,
            vec![Message::new(
                Role::User,
                format!("fix {}/x.rs", from.path().display()),
                now,
            )],
            now,
        )
        .expect("append");
        let fork = a.fork(&parent, None, now).expect("fork").session_id;
        let mut archive = Vec::new();
        let moved = a
            .export(&fork, from.path(), &|t| t.to_string(), &mut archive)
            .expect("export");
        assert_eq!(moved.sessions, [fork.clone(), parent.clone()]);
        // The parent is here already (imported before): it is kept as it is.
        let mut only_parent = Vec::new();
        a.export(&parent, from.path(), &|t| t.to_string(), &mut only_parent)
            .expect("export");
        b.import(&mut only_parent.as_slice(), to.path())
            .expect("import");
        let moved = b
            .import(&mut archive.as_slice(), to.path())
            .expect("import");
        assert_eq!(moved.sessions, std::slice::from_ref(&fork));
        assert_eq!(moved.kept, std::slice::from_ref(&parent));
        let messages = b.read(&fork).expect("read").session.messages;
        assert_eq!(
            messages[0].content,
            format!("fix {}/x.rs", to.path().display())
        );
        assert!(matches!(
            b.import(&mut archive.as_slice(), to.path()),
            Err(ArchiveError::Exists(id)) if id == fork
        ));
        // Nothing of the staging directory is left behind.
        let names: Vec<String> = std::fs::read_dir(b.sessions_dir())
            .expect("dir")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| looks_like_id(n)), "{names:?}");
    }
}
