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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::fixture::Fixture;
    use crate::protocol::Role;
    use pretty_assertions::assert_eq;

    fn stopped<'a>(f: &'a Fixture, ctx: &'a crate::tools::ToolContext) -> Stopped<'a> {
        Stopped {
            engine: &f.engine,
            ctx,
            events: &f.events,
            held: None,
            answer: "done",
            max_turns: 10,
            turns_left: 4,
        }
    }

    #[tokio::test]
    async fn nothing_queued_passes_and_a_queued_message_is_the_next_task() {
        let f = Fixture::new();
        let ctx = f.session(&[(Role::User, "fix it"), (Role::Assistant, "done")]);
        let next = QueueDrain.on_stop(&stopped(&f, &ctx)).await.expect("asked");
        assert!(matches!(next, Next::Pass), "{next:?}");
        f.queue(&ctx.session_id, "now the docs");
        f.queue(&ctx.session_id, "and the changelog");
        let next = QueueDrain.on_stop(&stopped(&f, &ctx)).await.expect("asked");
        assert!(matches!(next, Next::NewTask), "{next:?}");
        // One message at a time, after the answer.
        let messages = f.messages(&ctx.session_id);
        assert_eq!(
            messages.last(),
            Some(&(Role::User, "now the docs".to_string()))
        );
        assert_eq!(messages.len(), 3);
    }

    #[tokio::test]
    async fn a_queued_stop_word_is_confirmed_and_ends_the_run() {
        let f = Fixture::new();
        let ctx = f.session(&[(Role::User, "fix it"), (Role::Assistant, "done")]);
        let stop = f.runtime.config().queue.stop_words[0].clone();
        f.queue(&ctx.session_id, &stop);
        let next = QueueDrain.on_stop(&stopped(&f, &ctx)).await.expect("asked");
        assert!(matches!(next, Next::Pass), "{next:?}");
        let messages = f.messages(&ctx.session_id);
        assert_eq!(messages[2], (Role::User, stop.clone()));
        assert!(
            messages[3].1.starts_with("Stopped, as you asked"),
            "{messages:?}"
        );
        assert!(f.engine.queued(&ctx).await.is_empty());
    }
}
