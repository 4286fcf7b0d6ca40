//! The store from async code: each call runs on tokio's blocking pool, since the store takes
//! `flock`s (and may wait for another process), fsyncs and renames. Async callers (the engine,
//! the runtime, tools) use these instead of wrapping every call in `spawn_blocking`.

use chrono::{DateTime, Utc};

use super::error::{Result, SessionError};
use super::store::{SessionState, Store};
use crate::protocol::SessionFile;

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

    /// [`Store::update`], off the async threads.
    pub async fn update_async<T, F>(&self, id: &str, now: DateTime<Utc>, change: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut SessionState) -> Result<T> + Send + 'static,
    {
        let (store, id) = (self.clone(), id.to_string());
        blocking(move || store.update(&id, now, change)).await
    }

    /// [`Store::snapshot`], off the async threads.
    pub async fn snapshot_async(&self, id: &str, now: DateTime<Utc>) -> Result<String> {
        let (store, id) = (self.clone(), id.to_string());
        blocking(move || store.snapshot(&id, now)).await
    }

    /// [`Store::create`], off the async threads.
    pub async fn create_async(&self, agent: &str, now: DateTime<Utc>) -> Result<SessionFile> {
        let (store, agent) = (self.clone(), agent.to_string());
        blocking(move || store.create(&agent, now)).await
    }
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result,
        // A panic in the store is a bug: it goes on as the panic it was.
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(SessionError::Io {
            path: std::path::PathBuf::new(),
            source: std::io::Error::other(format!("a store task was cancelled: {e}")),
        }),
    }
}
