//! Per-session read/write lock that holds across processes and across threads of one process.
//!
//! An advisory `flock` on the sidecar file `<session>/session.lock`: a second `nop` in another
//! terminal or CI step, and a second task in this process (each acquisition opens the file anew,
//! so it is its own open file description), are kept out alike. The lock file is a sidecar
//! because session.json itself is replaced by rename on every write, which would swap the inode
//! under the lock. A writer records its pid in the file so a timeout can name the holder.
//!
//! Locks of two sessions are never nested on one thread (seed 002 §3.2): asking for a second
//! session's lock while holding one is an error, not a wait, so it cannot deadlock.

use std::cell::RefCell;
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use super::error::{Result, SessionError};

pub(crate) const LOCK_FILE: &str = "session.lock";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockKind {
    Shared,
    Exclusive,
}

thread_local! {
    static HELD: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// A held session lock; dropping it releases the lock.
#[derive(Debug)]
pub struct SessionLock {
    file: File,
    session: String,
    kind: LockKind,
}

impl SessionLock {
    pub fn kind(&self) -> LockKind {
        self.kind
    }

    /// Acquires the lock of the session whose directory is `dir`, waiting at most `timeout`.
    pub fn acquire(dir: &Path, session: &str, kind: LockKind, timeout: Duration) -> Result<Self> {
        if let Some(held) = HELD.with(|h| h.borrow().first().cloned()) {
            return Err(SessionError::NestedLock {
                held,
                requested: session.to_string(),
            });
        }
        let mut file = match lock_file(&dir.join(LOCK_FILE), kind, timeout, session) {
            Ok(file) => file,
            Err(Waited::TimedOut {
                what,
                waited,
                mut file,
            }) => {
                return Err(SessionError::LockTimeout {
                    session: what,
                    waited,
                    holder: read_holder(&mut file),
                });
            }
            Err(Waited::Failed(e)) => return Err(e),
        };
        if kind == LockKind::Exclusive {
            // Best effort: only used to name the holder in another process's timeout error.
            let _ = file
                .set_len(0)
                .and_then(|()| file.seek(SeekFrom::Start(0)))
                .and_then(|_| write!(file, "{}", std::process::id()));
        }
        HELD.with(|h| h.borrow_mut().push(session.to_string()));
        Ok(SessionLock {
            file,
            session: session.to_string(),
            kind,
        })
    }
}

/// Why [`lock_file`] returned without the lock.
#[derive(Debug)]
pub enum Waited {
    /// Someone else held it for all of the timeout; `file` is open, for naming the holder.
    TimedOut {
        what: String,
        waited: Duration,
        file: File,
    },
    Failed(SessionError),
}

impl From<Waited> for SessionError {
    fn from(w: Waited) -> SessionError {
        match w {
            Waited::TimedOut { what, waited, .. } => SessionError::LockTimeout {
                session: what,
                waited,
                holder: None,
            },
            Waited::Failed(e) => e,
        }
    }
}

/// The one way nop takes a cross-process lock: opens (creating) the sidecar file `path` and
/// takes an advisory `flock` on it, waiting at most `timeout` with a short backoff (1 ms
/// doubling to 25 ms). `what` names the locked thing in a timeout error. The lock is released
/// when the returned file is closed.
pub fn lock_file(
    path: &Path,
    kind: LockKind,
    timeout: Duration,
    what: &str,
) -> Result<File, Waited> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| Waited::Failed(SessionError::io(path)(e)))?;
    let started = Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        let attempt = match kind {
            LockKind::Shared => file.try_lock_shared(),
            LockKind::Exclusive => file.try_lock(),
        };
        match attempt {
            Ok(()) => return Ok(file),
            Err(TryLockError::WouldBlock) => {
                let waited = started.elapsed();
                if waited >= timeout {
                    return Err(Waited::TimedOut {
                        what: what.to_string(),
                        waited,
                        file,
                    });
                }
                std::thread::sleep(pause.min(timeout - waited));
                pause = (pause * 2).min(Duration::from_millis(25));
            }
            Err(TryLockError::Error(e)) => return Err(Waited::Failed(SessionError::io(path)(e))),
        }
    }
}

impl Drop for SessionLock {
    fn drop(&mut self) {
        if self.kind == LockKind::Exclusive {
            let _ = self.file.set_len(0);
        }
        let _ = self.file.unlock();
        HELD.with(|h| {
            let mut held = h.borrow_mut();
            if let Some(i) = held.iter().position(|s| *s == self.session) {
                held.remove(i);
            }
        });
    }
}

fn read_holder(file: &mut File) -> Option<u32> {
    let mut text = String::new();
    file.seek(SeekFrom::Start(0)).ok()?;
    file.read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHORT: Duration = Duration::from_millis(50);

    #[test]
    fn readers_share_writers_exclude() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().to_path_buf();
        let reader = SessionLock::acquire(&path, "s", LockKind::Shared, SHORT)?;
        // Other threads: another reader gets in, a writer times out.
        let p = path.clone();
        let second_reader = std::thread::spawn(move || {
            SessionLock::acquire(&p, "s", LockKind::Shared, SHORT).map(drop)
        });
        assert!(second_reader.join().is_ok_and(|r| r.is_ok()));
        let p = path.clone();
        let writer = std::thread::spawn(move || {
            SessionLock::acquire(&p, "s", LockKind::Exclusive, SHORT).map(drop)
        });
        let result = writer.join();
        assert!(
            matches!(result, Ok(Err(SessionError::LockTimeout { .. }))),
            "{result:?}"
        );
        drop(reader);
        SessionLock::acquire(&path, "s", LockKind::Exclusive, SHORT)?;
        Ok(())
    }

    #[test]
    fn timeout_names_the_writer_pid() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().to_path_buf();
        let _writer = SessionLock::acquire(&path, "s", LockKind::Exclusive, SHORT)?;
        let p = path.clone();
        let result = std::thread::spawn(move || {
            SessionLock::acquire(&p, "s", LockKind::Shared, SHORT).map(drop)
        })
        .join();
        match result {
            Ok(Err(SessionError::LockTimeout {
                holder, session, ..
            })) => {
                assert_eq!(holder, Some(std::process::id()));
                assert_eq!(session, "s");
            }
            other => panic!("expected a timeout, got {other:?}"),
        }
        Ok(())
    }

    #[test]
    fn nesting_across_sessions_is_refused() -> anyhow::Result<()> {
        let a = tempfile::tempdir()?;
        let b = tempfile::tempdir()?;
        let _held = SessionLock::acquire(a.path(), "a", LockKind::Shared, SHORT)?;
        let nested = SessionLock::acquire(b.path(), "b", LockKind::Shared, SHORT);
        assert!(
            matches!(nested, Err(SessionError::NestedLock { .. })),
            "{nested:?}"
        );
        Ok(())
    }
}
