//! The run lock: "this session is being run", an exclusive `flock` on `<session>/run.lock` held
//! by the process running it (seed 004: a message for a session nobody runs is processed at once,
//! otherwise queued). The store takes it before deleting a session; `queue` re-exports it.

use std::fs::{File, OpenOptions};
use std::path::Path;

/// Held while a process runs a session; dropping it (or the process dying) releases it.
#[derive(Debug)]
pub struct RunGuard {
    _file: File,
}

impl RunGuard {
    /// Takes the run lock of the session in `dir` if no process holds it.
    pub fn try_acquire(dir: &Path) -> std::io::Result<Option<RunGuard>> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join("run.lock"))?;
        match file.try_lock() {
            Ok(()) => Ok(Some(RunGuard { _file: file })),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(e)) => Err(e),
        }
    }

    /// Whether some process runs the session in `dir` right now.
    pub fn is_busy(dir: &Path) -> bool {
        matches!(RunGuard::try_acquire(dir), Ok(None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_lock_is_exclusive() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let guard = RunGuard::try_acquire(dir.path())?;
        assert!(guard.is_some());
        assert!(RunGuard::is_busy(dir.path()));
        drop(guard);
        assert!(!RunGuard::is_busy(dir.path()));
        Ok(())
    }

    #[test]
    fn a_session_created_to_be_run_comes_locked_and_its_id_cannot_be_made_twice()
    -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let store = crate::session::Store::new(dir.path(), std::time::Duration::from_secs(5));
        let id = store.unused_id();
        let (session, guard) = store.create_running(&id, "coder", chrono::Utc::now())?;
        assert_eq!(session.session_id, id);
        // Another process asking to run it (or to delete it) finds it taken.
        assert!(RunGuard::is_busy(&store.dir(&id)));
        assert!(
            store
                .create_running(&id, "coder", chrono::Utc::now())
                .is_err()
        );
        drop(guard);
        assert!(!RunGuard::is_busy(&store.dir(&id)));
        Ok(())
    }
}
