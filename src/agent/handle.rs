//! The session handle: the one way a front end drives a run (the lifecycle seen from the
//! outside). Operations go in with [`SessionHandle::submit`]; everything that happens comes out
//! of [`SessionHandle::next_event`], approval questions included; [`SessionHandle::finish`]
//! gives how it ended.

use std::collections::HashMap;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::error::RunError;
use super::runtime::{RunRequest, Runtime};
use super::task::{self, CompactTask, Done, RunTask, Task, Work};
use crate::permissions::{ApprovalAnswer, ApprovalRequest};
use crate::protocol::events::{Event, RunOutcome};

/// What a front end can ask of a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// What the user typed. An open handle with nothing running runs it (a new session for the
    /// first one); while a run is going it is queued for its next checkpoint, as [`Op::Queue`]
    /// at high priority.
    UserInput { text: String },
    /// Set the session's goal and work toward it (`/goal TEXT`): run like an input (a new
    /// session for the first one); refused with a warning while a run is going.
    Goal { spec: super::goal::GoalSpec },
    /// Stop the run at once (Ctrl-C, Esc): tools are stopped, the session is kept.
    Interrupt,
    /// Stop the run at its next checkpoint, as a stop word or `nop stop` does.
    Stop,
    /// Compact the session now (an open handle with nothing running).
    Compact,
    /// The answer to an [`Event::ApprovalRequested`] with this `id`.
    Approval { id: u64, answer: ApprovalAnswer },
    /// A message for the running session (typed while it works): queued for its next
    /// checkpoint, or a stop word that stops it there. Answered by a `queued` event.
    Queue {
        text: String,
        priority: crate::protocol::QueuePriority,
    },
    /// Leave: a run still going is interrupted, then the handle ends.
    Shutdown,
}

/// An open handle's session: it runs each [`Op::UserInput`] until [`Op::Shutdown`].
#[derive(Debug, Clone, Default)]
pub struct Open {
    /// Continue this session; `None`: the first input makes one.
    pub session: Option<String>,
    /// The agent of a new session (default: `agent.default`).
    pub agent: Option<String>,
    pub max_turns: Option<u32>,
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

/// A session as its front end holds it: operations go in, events come out, and `T` says how
/// it ended.
pub struct Handle<T> {
    ops: mpsc::UnboundedSender<Op>,
    events: mpsc::UnboundedReceiver<Event>,
    task: JoinHandle<Result<T, RunError>>,
}

/// A session of runs ([`Handle::start`], [`Handle::open`]); it ends with its last run's outcome.
pub type SessionHandle = Handle<RunOutcome>;

impl<T: Send + 'static> Handle<T> {
    /// A handle whose task is `serve` of its operations and events.
    pub(super) fn spawn<F>(
        serve: impl FnOnce(mpsc::UnboundedReceiver<Op>, mpsc::UnboundedSender<Event>) -> F,
    ) -> Handle<T>
    where
        F: std::future::Future<Output = Result<T, RunError>> + Send + 'static,
    {
        let (ops, op_rx) = mpsc::unbounded_channel();
        let (event_tx, events) = mpsc::unbounded_channel();
        let task = tokio::spawn(serve(op_rx, event_tx));
        Handle { ops, events, task }
    }

    /// Sends an operation; after the session has ended it is ignored.
    pub fn submit(&self, op: Op) {
        let _ = self.ops.send(op);
    }

    /// A sender of operations that can live elsewhere (a signal handler, a terminal reader).
    pub fn submitter(&self) -> Submitter {
        Submitter(self.ops.clone())
    }

    /// The next event; `None` once the session has ended and every event was taken.
    pub async fn next_event(&mut self) -> Option<Event> {
        self.events.recv().await
    }

    /// How the session ended, or why it could not go on.
    pub async fn finish(self) -> Result<T, RunError> {
        match self.task.await {
            Ok(result) => result,
            Err(e) => Err(RunError::Agent(format!("the session's task failed: {e}"))),
        }
    }
}

impl SessionHandle {
    /// Starts `request` on `runtime`; the handle ends with the run. `approvals` are the
    /// questions of the runtime's approver (`None` when nobody can answer them): each becomes
    /// an `approval_requested` event, and the run waits for the matching [`Op::Approval`].
    pub fn start(
        runtime: Runtime,
        approvals: Option<Approvals>,
        request: RunRequest,
    ) -> SessionHandle {
        Handle::spawn(|ops, events| serve(runtime, approvals, Plan::Once(request), ops, events))
    }

    /// Opens a session for a person at a terminal: each [`Op::UserInput`] runs on it, an `idle`
    /// event says when the handle waits for the next one, and [`Op::Shutdown`] ends it.
    pub fn open(runtime: Runtime, approvals: Option<Approvals>, open: Open) -> SessionHandle {
        let runtime = runtime.watching_files();
        Handle::spawn(|ops, events| serve(runtime, approvals, Plan::Open(open), ops, events))
    }
}

/// What a message for a session came to ([`deliver`]).
pub enum Delivery {
    /// No process was running the session: this handle runs the message.
    Running(SessionHandle),
    /// A stop word for a session no process runs: there is nothing to stop.
    NothingToStop,
    /// Queued for the process running the session, at `position` (1-based). `then`: that
    /// process ended before it read the queue, so this handle took the session over to run it.
    Queued {
        position: usize,
        priority: crate::protocol::QueuePriority,
        stop: bool,
        then: Option<SessionHandle>,
    },
}

/// A message for session `id` from outside it (`nop send`, `nop run --session` while another
/// process runs it): run now if no process runs the session, otherwise queue it for the one
/// that does (seed 004). Stop words are stops.
pub fn deliver(
    runtime: Runtime,
    approvals: Option<Approvals>,
    id: &str,
    text: String,
    priority: crate::protocol::QueuePriority,
    max_turns: Option<u32>,
    emergency: bool,
) -> Result<Delivery, RunError> {
    let dir = runtime.store().dir(id);
    let locked = |e| crate::session::SessionError::Io {
        path: dir.join("run.lock"),
        source: e,
    };
    let request = |input, guard| RunRequest {
        session: Some(id.to_string()),
        agent: None,
        input,
        max_turns,
        emergency,
        guard: Some(guard),
        goal: None,
    };
    let stop = crate::queue::is_stop_word(&text, runtime.stop_words());
    if let Some(guard) = crate::queue::RunGuard::try_acquire(&dir).map_err(locked)? {
        if stop {
            return Ok(Delivery::NothingToStop);
        }
        let request = request(Some(text), guard);
        return Ok(Delivery::Running(SessionHandle::start(
            runtime, approvals, request,
        )));
    }
    let posted = crate::queue::post(
        &dir,
        id,
        runtime.user(),
        &text,
        priority,
        runtime.stop_words(),
    )?;
    // The runner may have ended between the look and the queueing: then nobody would read the
    // queue, so this process takes the session over and runs what is queued.
    let then = match crate::queue::RunGuard::try_acquire(&dir).map_err(locked)? {
        Some(guard) if !crate::queue::Inbox::new(&dir).is_empty() => {
            let request = request(None, guard);
            Some(SessionHandle::start(runtime, approvals, request))
        }
        _ => None,
    };
    Ok(Delivery::Queued {
        position: posted.position,
        priority: posted.message.priority,
        stop: posted.message.stop,
        then,
    })
}

/// How a handle was started.
enum Plan {
    /// One request; the handle ends with it.
    Once(RunRequest),
    /// Runs each input until it is told to shut down.
    Open(Open),
}

/// The handle's task: runs what it is given, answers operations, turns approval questions into
/// events, and takes what was queued as a run ended.
async fn serve(
    runtime: Runtime,
    approvals: Option<Approvals>,
    plan: Plan,
    mut ops: mpsc::UnboundedReceiver<Op>,
    events: mpsc::UnboundedSender<Event>,
) -> Result<RunOutcome, RunError> {
    // Held for the whole session: one handle at a time answers a front end's questions.
    let mut approvals = match &approvals {
        Some(shared) => Some(shared.lock().await),
        None => None,
    };
    // The runtime's events pass through here, so the handle knows its session.
    let (inner, mut from_runs) = mpsc::unbounded_channel();
    let mut serving = Serving {
        session: None,
        runtime,
        events,
        inner,
        cancel: CancellationToken::new(),
        waiting: HashMap::new(),
        next_id: 0,
        work: None,
        open: None,
        last: None,
        leaving: false,
        queued_here: Vec::new(),
    };
    match plan {
        Plan::Once(request) => serving.start_task(Box::new(RunTask(request))),
        Plan::Open(open) => {
            serving.session = open.session.clone();
            serving.open = Some(open);
        }
    }
    loop {
        tokio::select! {
            // In order: what the run said comes before an approval question it asks after it.
            biased;
            Some(event) = from_runs.recv() => serving.forward(event),
            done = until_done(&mut serving.work) => {
                serving.work = None;
                // Every event the work sent is in the channel before it returns.
                while let Ok(event) = from_runs.try_recv() {
                    serving.forward(event);
                }
                if let Some(result) = serving.done(done, &mut ops) {
                    return result;
                }
            }
            Some(op) = ops.recv() => {
                if let Some(result) = serving.op(op) {
                    return result;
                }
            }
            Some(question) = next_question(&mut approvals) => serving.ask(question),
        }
    }
}

/// A handle's state while it serves: its runtime and streams, what runs, the approval
/// questions waiting for an answer.
struct Serving {
    runtime: Runtime,
    /// To the front end.
    events: mpsc::UnboundedSender<Event>,
    /// From the runs (forwarded to `events`).
    inner: mpsc::UnboundedSender<Event>,
    cancel: CancellationToken,
    waiting: HashMap<u64, oneshot::Sender<ApprovalAnswer>>,
    next_id: u64,
    work: Option<Work>,
    /// For an open session (the interactive one): what each input runs with.
    open: Option<Open>,
    session: Option<String>,
    last: Option<Result<RunOutcome, RunError>>,
    leaving: bool,
    /// The ids of the messages typed for the present work and queued: an interrupt takes back
    /// those not read yet.
    queued_here: Vec<String>,
}

impl Serving {
    /// Starts `task` as the handle's work (the one place it does).
    fn start_task(&mut self, task: Box<dyn Task>) {
        self.work = Some(task::start(task, &self.runtime, &self.inner, &self.cancel));
    }

    fn forward(&mut self, event: Event) {
        forward(event, &mut self.session, &self.events);
    }

    fn send(&self, event: Event) {
        let _ = self.events.send(event);
    }

    fn warn(&self, message: &str) {
        self.send(Event::Warning {
            message: message.into(),
        });
    }

    /// The work ended; `Some` when the handle ends with it.
    fn done(
        &mut self,
        done: Done,
        ops: &mut mpsc::UnboundedReceiver<Op>,
    ) -> Option<Result<RunOutcome, RunError>> {
        match done {
            Done::Run(result) => {
                let result = *result;
                if let Ok(outcome) = &result {
                    self.session = Some(outcome.session_id.clone());
                }
                let queued = std::mem::take(&mut self.queued_here);
                if self.open.is_some() && self.cancel.is_cancelled() {
                    self.take_back(&queued);
                }
                if self.open.is_none() {
                    // A message typed as the run ended still goes to the session's queue,
                    // where the next run takes it.
                    while let Ok(op) = ops.try_recv() {
                        let (text, priority) = match op {
                            Op::Queue { text, priority } => (text, priority),
                            Op::UserInput { text } => (text, crate::protocol::QueuePriority::High),
                            _ => continue,
                        };
                        self.send(queue(
                            &self.runtime,
                            self.session.as_deref(),
                            &text,
                            priority,
                        ));
                    }
                    return Some(result);
                }
                if let Err(e) = &result {
                    self.send(Event::Error {
                        message: e.to_string(),
                    });
                }
                self.last = Some(result);
            }
            Done::Compact(Ok(Some(_))) => {}
            Done::Compact(Ok(None)) => {
                self.warn("nothing to compact: the conversation is short");
            }
            Done::Compact(Err(e)) => self.send(Event::Error {
                message: e.to_string(),
            }),
        }
        if self.leaving {
            return Some(ended(self.last.take()));
        }
        self.cancel = CancellationToken::new();
        self.send(Event::Idle {
            session_id: self.session.clone(),
        });
        None
    }

    /// An operation from the front end; `Some` when the handle ends.
    fn op(&mut self, op: Op) -> Option<Result<RunOutcome, RunError>> {
        match op {
            Op::UserInput { text } => {
                if !self.start(Some(text.clone()), None) {
                    let high = crate::protocol::QueuePriority::High;
                    let (event, id) =
                        queue_here(&self.runtime, self.session.as_deref(), &text, high);
                    self.queued_here.extend(id);
                    self.send(event);
                }
            }
            Op::Goal { spec } => {
                if !self.start(None, Some(spec)) {
                    self.warn("a goal is set when the agent is idle: /goal again once it stops");
                }
            }
            Op::Interrupt => self.interrupt(),
            Op::Stop => self.send(stop(
                &self.runtime,
                self.work.is_some(),
                self.session.as_deref(),
            )),
            Op::Compact => self.compact(),
            Op::Approval { id, answer } => {
                if let Some(respond) = self.waiting.remove(&id) {
                    let _ = respond.send(answer);
                }
            }
            Op::Queue { text, priority } => {
                let (event, id) =
                    queue_here(&self.runtime, self.session.as_deref(), &text, priority);
                self.queued_here.extend(id);
                self.send(event);
            }
            Op::Shutdown => {
                if self.work.is_none() {
                    return Some(ended(self.last.take()));
                }
                self.leaving = true;
                self.interrupt();
            }
        }
        None
    }

    /// Starts a run of the open session with `input` or `goal`, when it is idle; whether it did.
    fn start(&mut self, input: Option<String>, goal: Option<super::goal::GoalSpec>) -> bool {
        let (None, Some(open)) = (&self.work, &self.open) else {
            return false;
        };
        let request = RunRequest {
            session: self.session.clone(),
            agent: open.agent.clone(),
            input,
            max_turns: open.max_turns,
            emergency: false,
            guard: None,
            goal,
        };
        self.start_task(Box::new(RunTask(request)));
        true
    }

    /// Stops what runs; nobody waits for a yes to a call that is being stopped.
    /// After an interrupt: the messages queued through this handle and not read yet come out
    /// of the queue and go back to the front end (an `unqueued` event), oldest first.
    fn take_back(&self, ids: &[String]) {
        let Some(session) = self.session.as_deref() else {
            return;
        };
        if ids.is_empty() {
            return;
        }
        let inbox = crate::queue::Inbox::new(&self.runtime.store().dir(session));
        let (names, texts): (Vec<String>, Vec<String>) = inbox
            .list()
            .messages
            .into_iter()
            .filter(|(_, m)| ids.contains(&m.id) && !m.stop)
            .map(|(name, m)| (name, m.text))
            .unzip();
        if names.is_empty() {
            return;
        }
        match inbox.remove(&names) {
            Ok(()) => self.send(Event::Unqueued {
                text: texts.join("\n"),
            }),
            Err(e) => self.warn(&format!("the messages you queued stay queued: {e}")),
        }
    }

    fn interrupt(&mut self) {
        self.cancel.cancel();
        for (_, respond) in self.waiting.drain() {
            let _ = respond.send(ApprovalAnswer::No);
        }
    }

    fn compact(&mut self) {
        match (&self.work, &self.session) {
            (None, Some(id)) => {
                let task = CompactTask {
                    session: id.clone(),
                    reason: "requested by the user",
                };
                self.start_task(Box::new(task));
            }
            (Some(_), _) => self.warn("the agent is working: compact once it has answered"),
            (None, None) => {
                self.warn("no session yet: there is nothing to compact");
                // Whoever asked waits for the handle to be idle again.
                self.send(Event::Idle { session_id: None });
            }
        }
    }

    /// An approval question of a run, for the front end to answer.
    fn ask(&mut self, question: ApprovalRequest) {
        self.next_id += 1;
        self.waiting.insert(self.next_id, question.respond);
        self.send(Event::ApprovalRequested {
            id: self.next_id,
            tool: question.tool,
            detail: question.detail,
            reason: question.reason,
            scope: question.scope,
            preview: question.preview,
        });
    }
}

async fn until_done(work: &mut Option<Work>) -> Done {
    match work {
        Some(work) => work.await,
        None => std::future::pending().await,
    }
}

/// Passes a run's event on, noting the session it made.
fn forward(event: Event, session: &mut Option<String>, events: &mpsc::UnboundedSender<Event>) {
    if let Event::SessionStarted { session_id, .. } = &event {
        *session = Some(session_id.clone());
    }
    let _ = events.send(event);
}

/// How an open handle ended: its last run's outcome.
fn ended(last: Option<Result<RunOutcome, RunError>>) -> Result<RunOutcome, RunError> {
    last.unwrap_or_else(|| Err(RunError::Agent("nothing was run in this session".into())))
}

/// A stop for the session's run, at its next checkpoint; the event that says how it went.
fn stop(runtime: &Runtime, running: bool, session: Option<&str>) -> Event {
    let (true, Some(id)) = (running, session) else {
        return Event::Warning {
            message: "nothing is running: there is nothing to stop".into(),
        };
    };
    match crate::queue::request_stop(&runtime.store().dir(id), id, runtime.user()) {
        Ok(Some(posted)) => Event::Queued {
            session_id: id.to_string(),
            position: posted.position,
            priority: posted.message.priority,
            stop: true,
        },
        Ok(None) => Event::Warning {
            message: "the run has just ended: there is nothing to stop".into(),
        },
        Err(e) => Event::Warning {
            message: format!("could not ask the run to stop: {e}"),
        },
    }
}

/// Queues `text` for `session`; the event that says how it went.
fn queue(
    runtime: &Runtime,
    session: Option<&str>,
    text: &str,
    priority: crate::protocol::QueuePriority,
) -> Event {
    queue_here(runtime, session, text, priority).0
}

/// [`queue`], and the id of the message queued, if it was.
fn queue_here(
    runtime: &Runtime,
    session: Option<&str>,
    text: &str,
    priority: crate::protocol::QueuePriority,
) -> (Event, Option<String>) {
    let Some(id) = session else {
        let message = "the session is starting; say it again in a moment".into();
        return (Event::Warning { message }, None);
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
        Ok(posted) => (
            Event::Queued {
                session_id: id.to_string(),
                position: posted.position,
                priority: posted.message.priority,
                stop: posted.message.stop,
            },
            Some(posted.message.id),
        ),
        Err(e) => (
            Event::Warning {
                message: format!("could not queue it: {e}"),
            },
            None,
        ),
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
