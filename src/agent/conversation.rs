//! The conversation of one session as the agent sees it (seed 003): the messages are read from
//! and appended to the store, never kept apart from it.

use chrono::Utc;

use crate::protocol::{Message, TokenUsage};
use crate::session::Store;
use crate::tools::ToolError;

/// The conversation of one session as the agent sees it: read from and appended to the store,
/// so what the model is sent is always what session.json holds.
pub struct Conversation {
    store: Store,
    session_id: String,
}

impl Conversation {
    pub fn new(store: Store, session_id: String) -> Conversation {
        Conversation { store, session_id }
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
