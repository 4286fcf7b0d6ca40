//! The conversation of one session as the agent sees it (seed 003): the messages are read from
//! and appended to the store, never kept apart from it, but for a run's final answer, which
//! may wait (a few milliseconds, in this process) to be written with the run's closing write
//! ([`HeldAnswer`]).

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
}

impl Conversation {
    pub fn new(store: Store, session_id: String) -> Conversation {
        Conversation {
            store,
            session_id,
            held: None,
        }
    }

    /// A conversation whose final answer (a reply without tool calls) is kept in `held`, for
    /// the caller to write with what comes next ([`HeldAnswer::flush`], [`HeldAnswer::apply`]).
    pub fn holding_answer(store: Store, session_id: String, held: HeldAnswer) -> Conversation {
        Conversation {
            store,
            session_id,
            held: Some(held),
        }
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
        Ok(self
            .store
            .read_session_async(&self.session_id)
            .await?
            .messages)
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
