//! The lifecycle of a run (seed 003: the adapter, not the agent, owns it), in phases on the
//! [`Runtime`]: [`Runtime::admit`] (`admit.rs`) → [`Runtime::open`] (`open.rs`) →
//! [`Runtime::drive`] (here: the one loop and the run's behaviours) → [`Runtime::finish`]
//! (`finish.rs`). [`Runtime::run`] is the four in order.

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use super::around::{Around, Drive};
use super::engine::Engine;
use super::error::RunError;
use super::runtime::{RunRequest, Runtime};
use super::turn::{EventSink, TurnStats};
use super::{AgentResponse, Interrupted};
use crate::protocol::events::{RunOutcome, RunStatus};
use crate::providers::Provider;
use crate::tools::{ToolContext, ToolError};

/// What the agent's turns came to.
pub(super) type Answer = Result<Result<AgentResponse, Interrupted>, ToolError>;

/// A run that may start: its session, agent, priority and run lock.
pub(super) struct Admitted {
    pub session_id: String,
    /// How its commands are confined (`namespaces`, `landlock`, `none`, `off`), known by the
    /// time the run ends.
    pub sandbox: Confinement,
    pub resumed: bool,
    pub agent_name: String,
    pub def: Option<crate::config::AgentDef>,
    pub priority: Option<u8>,
    /// Why seed 000's emergency boost applies, when it does.
    pub emergency: Option<String>,
    pub coordinator: Option<crate::queue::priority::Coordinator>,
    pub provider: Provider,
    pub now: DateTime<Utc>,
    /// A new session being written, with its run lock: awaited by whatever writes to it first
    /// ([`Admitted::created`]).
    creating: Option<Creating>,
    /// Held until the run is finished.
    guard: Option<crate::queue::RunGuard>,
}

/// How a run's commands are confined, as the probe beside the run finds it.
type Confinement = tokio::task::JoinHandle<&'static str>;

/// A new session's directory being written, on a thread of its own.
type Creating = tokio::task::JoinHandle<
    Result<(crate::protocol::SessionFile, crate::queue::RunGuard), crate::session::SessionError>,
>;

/// Waits for a new session to be written; its run lock, or `None` when there was nothing to
/// wait for.
async fn settle(
    creating: &mut Option<Creating>,
) -> Result<Option<crate::queue::RunGuard>, RunError> {
    let Some(task) = creating.take() else {
        return Ok(None);
    };
    let (_, guard) = task
        .await
        .map_err(|e| RunError::Agent(format!("creating the session: {e}")))??;
    Ok(Some(guard))
}

/// Removes session `id`, made for this run only (the run was refused), once it is written.
async fn discard(store: &crate::session::Store, id: &str, creating: &mut Option<Creating>) {
    if settle(creating).await.is_ok() {
        let dir = store.dir(id);
        let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(dir)).await;
    }
}

impl Admitted {
    /// Waits until a new session is written (its first write must follow it); a session
    /// continued is there already.
    pub(super) async fn created(&mut self) -> Result<(), RunError> {
        if let Some(guard) = settle(&mut self.creating).await? {
            self.guard = Some(guard);
        }
        Ok(())
    }

    /// Removes the session when it was made for this run only (the run was refused).
    pub(super) async fn discard(&mut self, store: &crate::session::Store) {
        if !self.resumed {
            discard(store, &self.session_id, &mut self.creating).await;
        }
    }
}

/// A run under way: the engine, the top-level tool context and the run's behaviours.
pub(super) struct Opened {
    pub engine: Engine,
    pub ctx: ToolContext,
    /// Told as the run opened, asked as the agent answers, told as the run closes.
    pub behaviours: Vec<Box<dyn Around>>,
    /// The run's final answer, written with the run's closing write (or before whatever the
    /// run writes next).
    pub held: super::conversation::HeldAnswer,
    /// A new session's first write, made while the first request goes out.
    pub first: Option<super::conversation::FirstWrite>,
}

mod admit;
mod finish;
mod open;

impl Runtime {
    /// Runs the request to its end, sending events as it goes. A cancelled token stops it at
    /// once; the session is left well-formed (every tool call has a result) and resumable.
    ///
    /// The one place the session's queue is drained (seed 004): the drive phase takes what is
    /// queued while the agent works, one message at a time; then, while the run completes and
    /// messages are waiting that the last run did not leave there itself, one more run for them
    /// (a message queued just as a run ended, after its last look at the queue, would otherwise
    /// wait for the next `nop run`).
    pub async fn run(
        &self,
        request: RunRequest,
        events: EventSink,
        cancel: CancellationToken,
    ) -> Result<RunOutcome, RunError> {
        let runtime = self;
        let mut outcome = runtime
            .run_once(request, events.clone(), cancel.clone())
            .await?;
        let mut last_seen: Vec<String> = Vec::new();
        while outcome.status == RunStatus::Completed {
            let dir = runtime.store().dir(&outcome.session_id);
            let waiting: Vec<String> = crate::queue::Inbox::new(&dir)
                .list_async()
                .await
                .messages
                .into_iter()
                .map(|(_, m)| m.id)
                .collect();
            if waiting.is_empty() {
                break;
            }
            if waiting == last_seen {
                // The last run left them where they were: running again would only repeat it (and
                // pay for it).
                tracing::error!(session = %outcome.session_id, op = "queue", result = "stuck", "queued messages were not taken by the last run; not running again");
                break;
            }
            last_seen = waiting;
            let Ok(Some(guard)) = crate::queue::RunGuard::try_acquire(&dir) else {
                break;
            };
            let again = RunRequest {
                session: Some(outcome.session_id.clone()),
                agent: None,
                input: None,
                max_turns: None,
                emergency: false,
                guard: Some(guard),
                goal: None,
            };
            outcome = runtime
                .run_once(again, events.clone(), cancel.clone())
                .await?;
        }
        Ok(outcome)
    }

    /// Drives the agent until it answers, then asks the run's behaviours whether it goes on
    /// ([`Runtime::behaviours`]): what is still queued (seed 004), the `stop` hooks, the
    /// session's goal.
    pub(super) async fn drive(
        &self,
        opened: &mut Opened,
        max_turns: Option<u32>,
        events: &EventSink,
        stats: &mut TurnStats,
    ) -> Answer {
        let first = opened.first.take();
        let Opened {
            engine,
            ctx,
            held,
            behaviours,
            ..
        } = opened;
        Drive {
            engine,
            ctx,
            events,
            stats,
            held: Some(held.clone()),
            max_turns: max_turns.unwrap_or(self.config.agent.max_turns),
            first,
            behaviours,
        }
        .run()
        .await
    }
}
