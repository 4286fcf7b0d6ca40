//! The conversation of one session as the agent sees it (seed 003): the messages are read from
//! and appended to the store, never kept apart from it, but for a run's final answer, which
//! may wait (a few milliseconds, in this process) to be written with the run's closing write
//! ([`HeldAnswer`]), and a run's first write, made while its first request goes out
//! ([`FirstWrite`]).

use chrono::Utc;

use crate::protocol::{Message, TokenUsage};
use crate::session::Store;
use crate::tools::ToolError;

/// The conversation of one session as the agent sees it: read from and appended to the store,
/// so what the model is sent is always what session.json holds.
pub struct Conversation {
    store: Store,
    session_id: String,
    /// Where the final answer waits, when the run writes it with its end.
    held: Option<HeldAnswer>,
    /// The run's first write, until it is waited for.
    first: std::sync::Mutex<Option<FirstWrite>>,
}

/// A run's first write, made on a thread of its own while the first request goes out: it
/// holds the session's write lock from before the run goes on, so whatever reads or writes the
/// session next (in this process or another) comes after it. The first request is sent the
/// conversation as the write leaves it, from memory, unless something wrote the session in
/// between.
pub struct FirstWrite {
    /// The conversation as the write leaves it, and the store's count of the session's writes
    /// once it is made.
    known: Option<(Vec<Message>, u64)>,
    task: tokio::task::JoinHandle<Result<(), crate::session::SessionError>>,
}

impl FirstWrite {
    /// Starts writing `messages` (and `status`) to session `id` on a thread of its own;
    /// returns once the write holds the session's lock. The first request is sent `messages`
    /// from memory when the session held nothing before them.
    pub async fn start(
        store: &Store,
        id: &str,
        messages: Vec<Message>,
        status: crate::protocol::SessionStatus,
    ) -> Result<FirstWrite, crate::session::SessionError> {
        let (locked, is_locked) = tokio::sync::oneshot::channel();
        let (writer, session, written) = (store.clone(), id.to_string(), messages.clone());
        let task = tokio::task::spawn_blocking(move || {
            writer.update(&session, Utc::now(), |state| {
                // Whether the session holds nothing else (another process may have appended
                // to it since it was made), and the count of writes before this one, under
                // the lock: none can come in between.
                let alone =
                    state.session.messages.is_empty() && state.session.earlier_messages.is_empty();
                let _ = locked.send((alone, writer.writes(&session)));
                state.session.status = status;
                state.session.messages.extend(written);
                Ok(())
            })
        });
        let Ok((alone, writes)) = is_locked.await else {
            // It ended before it took the lock: its error is the run's.
            return Err(match crate::session::joined(task).await {
                Err(e) => e,
                Ok(()) => crate::session::SessionError::Io {
                    path: store.dir(id),
                    source: std::io::Error::other("the first write ended without writing"),
                },
            });
        };
        Ok(FirstWrite {
            known: alone.then(|| (messages, writes + 1)),
            task,
        })
    }
}

impl Conversation {
    pub fn new(store: Store, session_id: String) -> Conversation {
        Conversation {
            store,
            session_id,
            held: None,
            first: Default::default(),
        }
    }

    /// A conversation whose final answer (a reply without tool calls) is kept in `held`, for
    /// the caller to write with what comes next ([`HeldAnswer::flush`], [`HeldAnswer::apply`]).
    pub fn holding_answer(store: Store, session_id: String, held: HeldAnswer) -> Conversation {
        Conversation {
            store,
            session_id,
            held: Some(held),
            first: Default::default(),
        }
    }

    /// A conversation whose first write is still being made ([`Conversation::settle`]).
    pub fn after(mut self, first: Option<FirstWrite>) -> Conversation {
        self.first = std::sync::Mutex::new(first);
        self
    }

    /// Waits for the run's first write: an error writing it is the run's.
    pub async fn settle(&self) -> Result<(), ToolError> {
        let task = self
            .first
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .map(|f| f.task);
        if let Some(task) = task {
            crate::session::joined(task).await?;
        }
        Ok(())
    }

    /// Records the agent's final answer: kept for the caller when it holds answers, written
    /// now otherwise.
    pub async fn push_answer(
        &self,
        answer: Message,
        usage: (TokenUsage, Option<f64>),
    ) -> Result<(), ToolError> {
        match &self.held {
            Some(held) => {
                held.put(Held {
                    message: answer,
                    usage,
                });
                Ok(())
            }
            None => self.push(vec![answer], Some(usage)).await,
        }
    }

    pub async fn messages(&self) -> Result<Vec<Message>, ToolError> {
        if let Some(known) = self.known() {
            return Ok(known);
        }
        Ok(self
            .store
            .read_session_async(&self.session_id)
            .await?
            .messages)
    }

    /// The conversation the first write leaves, once, while nothing else wrote the session.
    fn known(&self) -> Option<Vec<Message>> {
        let mut first = self.first.lock().unwrap_or_else(|e| e.into_inner());
        let (messages, writes) = first.as_mut()?.known.take()?;
        (self.store.writes(&self.session_id) <= writes).then_some(messages)
    }

    /// Appends messages (and a model request's tokens and cost) in one write.
    pub async fn push(
        &self,
        messages: Vec<Message>,
        usage: Option<(TokenUsage, Option<f64>)>,
    ) -> Result<(), ToolError> {
        if messages.is_empty() && usage.is_none() {
            return Ok(());
        }
        self.store
            .update_async(&self.session_id, Utc::now(), move |state| {
                state.session.messages.extend(messages);
                if let Some((tokens, cost)) = usage {
                    state.session.usage.own.record(&tokens, cost);
                }
                Ok(())
            })
            .await?;
        Ok(())
    }
}

/// A run's final answer and its request's tokens and cost, not yet written.
#[derive(Debug)]
pub struct Held {
    message: Message,
    usage: (TokenUsage, Option<f64>),
}

/// Where a run's final answer waits to be written with the run's closing write (one fsynced
/// write instead of two as the run ends). Whatever writes the session next writes it first:
/// the run flushes it before a queued message, a `stop` hook or a goal's check.
#[derive(Debug, Clone, Default)]
pub struct HeldAnswer(std::sync::Arc<std::sync::Mutex<Option<Held>>>);

impl HeldAnswer {
    fn put(&self, held: Held) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(held);
    }

    /// The answer, taken to be written by the caller's own write ([`HeldAnswer::apply`]).
    pub fn take(&self) -> Option<Held> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// Adds a taken answer to the session being written.
    pub fn apply(held: Held, session: &mut crate::protocol::SessionFile) {
        let (tokens, cost) = held.usage;
        session.messages.push(held.message);
        session.usage.own.record(&tokens, cost);
    }

    /// Writes the answer now, if one waits.
    pub async fn flush(&self, store: &Store, session_id: &str) -> Result<(), ToolError> {
        let Some(held) = self.take() else {
            return Ok(());
        };
        store
            .update_async(session_id, Utc::now(), move |state| {
                HeldAnswer::apply(held, &mut state.session);
                Ok(())
            })
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::protocol::{Role, SessionStatus};

    fn store() -> (tempfile::TempDir, Store, String) {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Store::new(
            dir.path().join("sessions"),
            std::time::Duration::from_secs(5),
        );
        let id = store
            .create("coder", Utc::now())
            .expect("create")
            .session_id;
        (dir, store, id)
    }

    async fn first_write(store: &Store, id: &str, messages: Vec<Message>) -> FirstWrite {
        FirstWrite::start(store, id, messages, SessionStatus::Running)
            .await
            .expect("the write takes the lock")
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn the_first_request_is_sent_the_first_write_from_memory_once() {
        let (_dir, store, id) = store();
        let first = vec![Message::new(Role::User, "hello", Utc::now())];
        let written = first_write(&store, &id, first.clone()).await;
        let conversation = Conversation::new(store.clone(), id.clone()).after(Some(written));
        assert_eq!(conversation.messages().await.unwrap(), first);
        conversation.settle().await.unwrap();
        // Written, and read from the store from then on.
        store
            .append(
                &id,
                vec![Message::new(Role::Assistant, "hi", Utc::now())],
                Utc::now(),
            )
            .unwrap();
        assert_eq!(conversation.messages().await.unwrap().len(), 2);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_write_after_the_first_one_is_read_from_the_store() {
        let (_dir, store, id) = store();
        let first = vec![Message::new(Role::User, "hello", Utc::now())];
        let written = first_write(&store, &id, first).await;
        let conversation = Conversation::new(store.clone(), id.clone()).after(Some(written));
        // A message queued for the session goes in before the first request: it waits for the
        // first write's lock, and the request must carry it.
        let (s, i) = (store.clone(), id.clone());
        tokio::task::spawn_blocking(move || {
            s.append(
                &i,
                vec![Message::new(Role::User, "queued", Utc::now())],
                Utc::now(),
            )
        })
        .await
        .unwrap()
        .unwrap();
        let sent = conversation.messages().await.unwrap();
        let texts: Vec<_> = sent.iter().map(|m| m.content.as_str()).collect();
        assert_eq!(texts, ["hello", "queued"]);
        conversation.settle().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_first_write_that_failed_fails_the_run() {
        let (_dir, store, id) = store();
        let task = tokio::task::spawn_blocking(|| {
            Err(crate::session::SessionError::NotFound("gone".into()))
        });
        let written = FirstWrite { known: None, task };
        let conversation = Conversation::new(store, id).after(Some(written));
        let error = conversation.settle().await.expect_err("the write's error");
        assert!(error.to_string().contains("gone"), "{error}");
        // Said once: waiting again has nothing left to wait for.
        conversation.settle().await.unwrap();
    }
}
