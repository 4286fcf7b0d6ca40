//! The store from async code: each call runs on tokio's blocking pool, since the store takes
//! `flock`s (and may wait for another process), fsyncs and renames. Async callers (the engine,
//! the runtime, tools) use these instead of wrapping every call in `spawn_blocking`.

use chrono::{DateTime, Utc};

use super::error::{Result, SessionError};
use super::store::{Recent, SessionState, Store};
use crate::protocol::{SessionFile, SessionStatus};

impl Store {
    /// [`Store::read`], off the async threads.
    pub async fn read_async(&self, id: &str) -> Result<SessionState> {
        let (store, id) = (self.clone(), id.to_string());
        blocking(move || store.read(&id)).await
    }

    /// [`Store::read_session`], off the async threads.
    pub async fn read_session_async(&self, id: &str) -> Result<SessionFile> {
        let (store, id) = (self.clone(), id.to_string());
        blocking(move || store.read_session(&id)).await
    }

    /// [`Store::read_recent`], off the async threads.
    pub async fn read_recent_async(&self, id: &str) -> Result<Recent> {
        let (store, id) = (self.clone(), id.to_string());
        blocking(move || store.read_recent(&id)).await
    }

    /// [`Store::update`], off the async threads.
    pub async fn update_async<T, F>(&self, id: &str, now: DateTime<Utc>, change: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Recent) -> Result<T> + Send + 'static,
    {
        let (store, id) = (self.clone(), id.to_string());
        blocking(move || store.update(&id, now, change)).await
    }

    /// [`Store::update_whole`], off the async threads.
    pub async fn update_whole_async<T, F>(
        &self,
        id: &str,
        now: DateTime<Utc>,
        change: F,
    ) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut SessionState) -> Result<T> + Send + 'static,
    {
        let (store, id) = (self.clone(), id.to_string());
        blocking(move || store.update_whole(&id, now, change)).await
    }

    /// [`Store::snapshot`], off the async threads.
    pub async fn snapshot_async(&self, id: &str, now: DateTime<Utc>) -> Result<String> {
        let (store, id) = (self.clone(), id.to_string());
        blocking(move || store.snapshot(&id, now)).await
    }

    /// [`Store::snapshot_of`], off the async threads: `state` is handed back.
    pub async fn snapshot_of_async(
        &self,
        id: &str,
        state: SessionState,
        now: DateTime<Utc>,
    ) -> Result<(String, SessionState)> {
        let (store, id) = (self.clone(), id.to_string());
        blocking(move || {
            let snapshot = store.snapshot_of(&id, &state, now)?;
            Ok((snapshot, state))
        })
        .await
    }

    /// Writes session `id`'s status and nothing else, off the async threads.
    pub async fn set_status_async(&self, id: &str, status: SessionStatus) -> Result<()> {
        self.update_async(id, Utc::now(), move |state| {
            state.session.status = status;
            Ok(())
        })
        .await
    }
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    joined(tokio::task::spawn_blocking(work)).await
}

/// What store work on tokio's blocking pool came to (a panic there goes on as the panic it was).
pub(crate) async fn joined<T>(task: tokio::task::JoinHandle<Result<T>>) -> Result<T> {
    finished(task).await.unwrap_or_else(|| {
        Err(SessionError::Io {
            path: std::path::PathBuf::new(),
            source: std::io::Error::other("a store task was cancelled"),
        })
    })
}

/// Runs `work` on tokio's blocking pool (file reads and `flock`s from async code). A panic there
/// is a bug: it goes on as the panic it was. `None` when the task was cancelled (the runtime is
/// shutting down).
pub(crate) async fn off_thread<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    finished(tokio::task::spawn_blocking(work)).await
}

/// A task's outcome; a panic goes on as the panic it was, `None` when it was cancelled.
async fn finished<T>(task: tokio::task::JoinHandle<T>) -> Option<T> {
    match task.await {
        Ok(result) => Some(result),
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use pretty_assertions::assert_eq;

    use super::*;
    use crate::protocol::{Message, Role};

    #[tokio::test]
    async fn set_status_async_writes_the_status_and_nothing_else() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let store = Store::new(dir.path(), Duration::from_secs(1));
        let id = store.create("coder", Utc::now())?.session_id;
        store.append(
            &id,
            vec![Message::new(Role::User, "hi", Utc::now())],
            Utc::now(),
        )?;
        let before = store.read(&id)?;

        store.set_status_async(&id, SessionStatus::Paused).await?;

        let mut after = store.read(&id)?;
        assert_eq!(after.session.status, SessionStatus::Paused);
        after.session.status = before.session.status;
        after.session.updated_at = before.session.updated_at;
        assert_eq!(after, before);
        Ok(())
    }
}
