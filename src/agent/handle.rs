//! The session handle: the one way a front end drives a run (seed 003's adapter seen from the
//! outside). Operations go in with [`SessionHandle::submit`]; everything that happens comes out
//! of [`SessionHandle::next_event`], approval questions included; [`SessionHandle::finish`]
//! gives how it ended. The handle also owns what happens around a run: a message queued just
//! as the run ended is taken by another run of the same session, never by the front end.

use std::collections::HashMap;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::runtime::{RunError, RunRequest, Runtime};
use crate::permissions::{ApprovalAnswer, ApprovalRequest};
use crate::protocol::events::{Event, RunOutcome, RunStatus};

/// What a front end can ask of a running session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Stop the run at once (Ctrl-C): tools are stopped, the session is kept.
    Interrupt,
    /// The answer to an [`Event::ApprovalRequested`] with this `id`.
    Approval { id: u64, answer: ApprovalAnswer },
    /// A message for the running session (typed while it works): queued for its next
    /// checkpoint, or a stop word that stops it there. Answered by a `queued` event.
    Queue {
        text: String,
        priority: crate::protocol::QueuePriority,
    },
}

/// The questions of a runtime's approver (`Approver::interactive`). An approver has one
/// receiver for its questions, so the handles of one front end share it, in turn. (An "always"
/// answer holds across them because the approver's memory of it is shared by its clones.)
pub type Approvals = std::sync::Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<ApprovalRequest>>>;

/// Makes [`Approvals`] of a receiver.
pub fn approvals(rx: mpsc::UnboundedReceiver<ApprovalRequest>) -> Approvals {
    std::sync::Arc::new(tokio::sync::Mutex::new(rx))
}

/// Submits operations to a session from anywhere (see [`SessionHandle::submitter`]).
#[derive(Debug, Clone)]
pub struct Submitter(mpsc::UnboundedSender<Op>);

impl Submitter {
    /// `false` when the session has already ended: nothing took the operation.
    pub fn submit(&self, op: Op) -> bool {
        self.0.send(op).is_ok()
    }
}

/// A running session, as its front end holds it.
pub struct SessionHandle {
    ops: mpsc::UnboundedSender<Op>,
    events: mpsc::UnboundedReceiver<Event>,
    task: JoinHandle<Result<RunOutcome, RunError>>,
}

impl SessionHandle {
    /// Starts `request` on `runtime`. `approvals` are the questions of the runtime's approver
    /// (`None` when nobody can answer them): each becomes an `approval_requested` event, and
    /// the run waits for the matching [`Op::Approval`].
    pub fn start(
        runtime: Runtime,
        approvals: Option<Approvals>,
        request: RunRequest,
    ) -> SessionHandle {
        let (ops, op_rx) = mpsc::unbounded_channel();
        let (event_tx, events) = mpsc::unbounded_channel();
        let task = tokio::spawn(serve(runtime, approvals, request, op_rx, event_tx));
        SessionHandle { ops, events, task }
    }

    /// Sends an operation; after the session has ended it is ignored.
    pub fn submit(&self, op: Op) {
        let _ = self.ops.send(op);
    }

    /// A sender of operations that can live elsewhere (a signal handler).
    pub fn submitter(&self) -> Submitter {
        Submitter(self.ops.clone())
    }

    /// The next event; `None` once the session has ended and every event was taken.
    pub async fn next_event(&mut self) -> Option<Event> {
        self.events.recv().await
    }

    /// How the session ended: the outcome of its last run, or why it could not run.
    pub async fn finish(self) -> Result<RunOutcome, RunError> {
        match self.task.await {
            Ok(result) => result,
            Err(e) => Err(RunError::Agent(format!("the session's task failed: {e}"))),
        }
    }
}

/// The handle's task: runs the request, answers operations, turns approval questions into
/// events, and takes what was queued as the run ended.
async fn serve(
    runtime: Runtime,
    approvals: Option<Approvals>,
    request: RunRequest,
    mut ops: mpsc::UnboundedReceiver<Op>,
    events: mpsc::UnboundedSender<Event>,
) -> Result<RunOutcome, RunError> {
    let cancel = CancellationToken::new();
    // Held for the whole session: one handle at a time answers a front end's questions.
    let mut approvals = match &approvals {
        Some(shared) => Some(shared.lock().await),
        None => None,
    };
    let mut waiting: HashMap<u64, oneshot::Sender<ApprovalAnswer>> = HashMap::new();
    let mut next_id = 0u64;
    // The runtime's events pass through here, so the handle knows its session.
    let (inner, mut from_runs) = mpsc::unbounded_channel();
    let mut session: Option<String> = request.session.clone();
    let work = runs(&runtime, request, inner, &cancel);
    tokio::pin!(work);
    loop {
        tokio::select! {
            done = &mut work => {
                // Every event a run sent is in the channel before it returns.
                while let Ok(event) = from_runs.try_recv() {
                    let _ = events.send(event);
                }
                // A message typed as the run ended still goes to the session's queue, where the
                // next run takes it.
                let ended = done.as_ref().ok().map(|o| o.session_id.as_str());
                while let Ok(op) = ops.try_recv() {
                    if let Op::Queue { text, priority } = op {
                        let id = ended.or(session.as_deref());
                        let _ = events.send(queue(&runtime, id, &text, priority));
                    }
                }
                return done;
            }
            Some(event) = from_runs.recv() => {
                if let Event::SessionStarted { session_id, .. } = &event {
                    session = Some(session_id.clone());
                }
                let _ = events.send(event);
            }
            Some(op) = ops.recv() => match op {
                Op::Interrupt => {
                    cancel.cancel();
                    // Nobody waits for a yes to a call that is being stopped.
                    for (_, respond) in waiting.drain() {
                        let _ = respond.send(ApprovalAnswer::No);
                    }
                }
                Op::Approval { id, answer } => {
                    if let Some(respond) = waiting.remove(&id) {
                        let _ = respond.send(answer);
                    }
                }
                Op::Queue { text, priority } => {
                    let event = queue(&runtime, session.as_deref(), &text, priority);
                    let _ = events.send(event);
                }
            },
            Some(question) = next_question(&mut approvals) => {
                next_id += 1;
                waiting.insert(next_id, question.respond);
                let _ = events.send(Event::ApprovalRequested {
                    id: next_id,
                    tool: question.tool,
                    detail: question.detail,
                    reason: question.reason,
                });
            }
        }
    }
}

/// Queues `text` for `session`; the event that says how it went.
fn queue(
    runtime: &Runtime,
    session: Option<&str>,
    text: &str,
    priority: crate::protocol::QueuePriority,
) -> Event {
    let Some(id) = session else {
        return Event::Warning {
            message: "the session is starting; say it again in a moment".into(),
        };
    };
    let dir = runtime.store().dir(id);
    match crate::queue::post(
        &dir,
        id,
        runtime.user(),
        text,
        priority,
        runtime.stop_words(),
    ) {
        Ok(posted) => Event::Queued {
            session_id: id.to_string(),
            position: posted.position,
            priority: posted.message.priority,
            stop: posted.message.stop,
        },
        Err(e) => Event::Warning {
            message: format!("could not queue it: {e}"),
        },
    }
}

async fn next_question(
    approvals: &mut Option<tokio::sync::MutexGuard<'_, mpsc::UnboundedReceiver<ApprovalRequest>>>,
) -> Option<ApprovalRequest> {
    match approvals {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// The request, then, while it completes and messages are waiting in the session's queue that
/// the last run did not leave there itself, one more run for them (a message queued just as a
/// run ended, after its last look at the queue, would otherwise wait for the next `nop run`).
async fn runs(
    runtime: &Runtime,
    request: RunRequest,
    events: mpsc::UnboundedSender<Event>,
    cancel: &CancellationToken,
) -> Result<RunOutcome, RunError> {
    let mut outcome = runtime.run(request, events.clone(), cancel.clone()).await?;
    let mut last_seen: Vec<String> = Vec::new();
    while outcome.status == RunStatus::Completed {
        let dir = runtime.store().dir(&outcome.session_id);
        let waiting: Vec<String> = crate::queue::Inbox::new(&dir)
            .list()
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
        };
        outcome = runtime.run(again, events.clone(), cancel.clone()).await?;
    }
    Ok(outcome)
}
