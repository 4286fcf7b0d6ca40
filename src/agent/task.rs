//! What a session handle does at a time (codex's `SessionTask`): a run of model turns (with
//! what is queued behind it) or a compaction. The handle starts each from one place
//! ([`start`]) and is told how it ended ([`Done`]); a new kind of work is one [`Task`].

use futures_util::future::BoxFuture;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::error::RunError;
use super::runtime::{RunRequest, Runtime};
use crate::protocol::events::{Event, RunOutcome};

/// A task under way, as the handle awaits it.
pub(super) type Work = BoxFuture<'static, Done>;

/// How a task ended.
pub(super) enum Done {
    Run(Box<Result<RunOutcome, RunError>>),
    Compact(Result<Option<String>, RunError>),
}

/// Work a handle gives its session.
pub(super) trait Task: Send + 'static {
    /// What it is, for the log.
    fn kind(&self) -> &'static str;
    /// Does it on `runtime`, sending its events, until it ends or `cancel` stops it.
    fn run(
        self: Box<Self>,
        runtime: Runtime,
        events: mpsc::UnboundedSender<Event>,
        cancel: CancellationToken,
    ) -> Work;
}

/// Starts `task`: the one place a handle's work begins.
pub(super) fn start(
    task: Box<dyn Task>,
    runtime: &Runtime,
    events: &mpsc::UnboundedSender<Event>,
    cancel: &CancellationToken,
) -> Work {
    tracing::debug!(op = "task", kind = task.kind(), "started");
    task.run(runtime.clone(), events.clone(), cancel.clone())
}

/// A run of the request, and of what is queued behind it ([`Runtime::run`]).
pub(super) struct RunTask(pub RunRequest);

impl Task for RunTask {
    fn kind(&self) -> &'static str {
        "run"
    }

    fn run(
        self: Box<Self>,
        runtime: Runtime,
        events: mpsc::UnboundedSender<Event>,
        cancel: CancellationToken,
    ) -> Work {
        Box::pin(async move { Done::Run(Box::new(runtime.run(self.0, events, cancel).await)) })
    }
}

/// A compaction of the session now ([`Runtime::compact`]).
pub(super) struct CompactTask {
    pub session: String,
    pub reason: &'static str,
}

impl Task for CompactTask {
    fn kind(&self) -> &'static str {
        "compact"
    }

    fn run(
        self: Box<Self>,
        runtime: Runtime,
        events: mpsc::UnboundedSender<Event>,
        cancel: CancellationToken,
    ) -> Work {
        Box::pin(async move {
            Done::Compact(
                runtime
                    .compact(&self.session, self.reason, events, cancel)
                    .await,
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A task that reports what it was given: its events and whether it was cancelled.
    struct Probe;

    impl Task for Probe {
        fn kind(&self) -> &'static str {
            "probe"
        }

        fn run(
            self: Box<Self>,
            _runtime: Runtime,
            events: mpsc::UnboundedSender<Event>,
            cancel: CancellationToken,
        ) -> Work {
            Box::pin(async move {
                cancel.cancelled().await;
                let _ = events.send(Event::Warning {
                    message: "stopped".into(),
                });
                Done::Compact(Ok(None))
            })
        }
    }

    #[tokio::test]
    async fn a_task_runs_with_the_handles_events_and_stops_with_its_token() {
        let dir = tempfile::tempdir().expect("temp");
        std::fs::create_dir(dir.path().join(".nop")).expect("mkdir");
        let ws = crate::workspace::Workspace::discover(dir.path(), None).expect("workspace");
        let runtime = Runtime::new(
            ws,
            crate::config::Config::default(),
            Default::default(),
            crate::permissions::Approver::headless(crate::permissions::ApprovalMode::Never, false),
            "me".into(),
        );
        let (events, mut rx) = mpsc::unbounded_channel();
        let cancel = CancellationToken::new();
        let work = start(Box::new(Probe), &runtime, &events, &cancel);
        cancel.cancel();
        assert!(matches!(work.await, Done::Compact(Ok(None))));
        assert!(matches!(rx.try_recv(), Ok(Event::Warning { message }) if message == "stopped"));
    }
}
