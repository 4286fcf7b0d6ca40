//! Seed 004: what is still queued when the task ends is processed, one message at a time, each
//! as a new task. The one place a run drains its session's queue.

use futures_util::future::BoxFuture;

use super::{Around, Next, Stopped};
use crate::tools::ToolError;

/// Takes the next queued message, if any, once the agent has answered.
pub(in crate::agent) struct QueueDrain;

impl Around for QueueDrain {
    fn on_stop<'a>(
        &'a mut self,
        stopped: &'a Stopped<'a>,
    ) -> BoxFuture<'a, Result<Next, ToolError>> {
        Box::pin(async move {
            // A queued message comes after the answer.
            if stopped.engine.queued(stopped.ctx).await.is_empty() {
                return Ok(Next::Pass);
            }
            stopped.flush().await?;
            Ok(match stopped.engine.take_next(stopped.ctx).await? {
                Some(()) => Next::NewTask,
                None => Next::Pass,
            })
        })
    }
}
