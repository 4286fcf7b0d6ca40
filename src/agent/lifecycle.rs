//! The lifecycle of a run (seed 003: the adapter, not the agent, owns it), in phases on the
//! [`Runtime`]: [`Runtime::admit`] → [`Runtime::open`] → [`Runtime::drive`] →
//! [`Runtime::finish`]. [`Runtime::run`] is the four in order.

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use super::around::{Around, Drive, GoalCheck, QueueDrain, StopHooks};
use super::engine::Engine;
use super::error::RunError;
use super::prompt;
use super::runtime::{RunRequest, Runtime, resume_messages};
use super::turn::{EventSink, TurnStats};
use super::{AgentResponse, AgentStatus, Interrupted};
use crate::hooks::{self, About, Hook, HookEvent, Mode};
use crate::permissions::load_policy;
use crate::protocol::events::{Event, RunOutcome, RunSpent, RunStatus, RunUsage};
use crate::protocol::session::ConsistencyChecked;
use crate::protocol::{Message, Role, SessionStatus};
use crate::providers::Provider;
use crate::tools::{ToolContext, ToolError};

/// What the agent's turns came to.
pub(super) type Answer = Result<Result<AgentResponse, Interrupted>, ToolError>;

/// A run that may start: its session, agent, priority and run lock.
pub(super) struct Admitted {
    pub session_id: String,
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
        let _ = std::fs::remove_dir_all(store.dir(id));
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

/// The session a run is admitted to: one to continue, or one being created under the id it
/// was given.
enum Target {
    Resume(String),
    Create(String, Creating),
}

/// A run under way: the engine, the top-level tool context and the open file checkpoint.
pub(super) struct Opened {
    pub engine: Engine,
    pub ctx: ToolContext,
    pub checkpoints: Option<crate::checkpoint::Checkpoints>,
    pub turn: Option<super::file_checkpoint::TurnStart>,
    /// The consistency check on load found the plan and the conversation in agreement (or
    /// repaired them, or they were as the last checked run left them): the run's end records
    /// what it leaves, so that the next load with nothing changed skips the check.
    pub consistent: bool,
    /// The run's final answer, written with the run's closing write (or before whatever the
    /// run writes next).
    pub held: super::conversation::HeldAnswer,
    /// A new session's first write, made while the first request goes out.
    pub first: Option<super::conversation::FirstWrite>,
}

/// How a run that did not fail ended: its status for the caller and for session.json, its
/// final message, or the question it waits on.
struct Ending {
    status: RunStatus,
    session_status: SessionStatus,
    message: String,
    question: Option<String>,
}

impl Ending {
    fn of(answer: Result<AgentResponse, Interrupted>, engine: &Engine) -> Ending {
        let (status, session_status, message, question) = match answer {
            Ok(response) => match response.status {
                AgentStatus::Completed => (
                    RunStatus::Completed,
                    SessionStatus::Completed,
                    response.message,
                    None,
                ),
                AgentStatus::WaitingInput => (
                    RunStatus::WaitingInput,
                    SessionStatus::WaitingInput,
                    String::new(),
                    Some(response.message),
                ),
                AgentStatus::Error => (
                    RunStatus::Error,
                    SessionStatus::Error,
                    response.message,
                    None,
                ),
                AgentStatus::GoalNotMet => (
                    RunStatus::GoalNotMet,
                    SessionStatus::Idle,
                    response.message,
                    None,
                ),
                // Nothing failed: the session waits for more budget (`nop run --session ID`).
                AgentStatus::OverBudget => (
                    RunStatus::BudgetExceeded,
                    SessionStatus::Idle,
                    format!(
                        "{}; raise --max-budget-usd (agent.max_budget_usd) to go on",
                        response.message
                    ),
                    None,
                ),
            },
            Err(Interrupted) => {
                let why = match engine.stopped_by() {
                    Some(word) => format!("stopped by the message \"{}\"", word.trim()),
                    None => "cancelled by user".to_string(),
                };
                (RunStatus::Cancelled, SessionStatus::Cancelled, why, None)
            }
        };
        Ending {
            status,
            session_status,
            message,
            question,
        }
    }
}

/// The session a run is admitted for, and its agent.
struct Seat<'a> {
    session_id: &'a str,
    agent_name: &'a str,
    def: Option<&'a crate::config::AgentDef>,
    resumed: bool,
}

/// What taking a place on the session stack gave: the priority, why it is an emergency, the
/// stack, and the run lock a new session came with.
type Taken = (
    Option<u8>,
    Option<String>,
    Option<crate::queue::priority::Coordinator>,
    Option<crate::queue::RunGuard>,
);

/// What opening wrote of the session.
struct Written {
    turn: Option<super::file_checkpoint::TurnStart>,
    /// The plan and conversation are as the last checked run left them.
    unchanged: bool,
    /// The session's goal was not met by the last run: this one takes it up again.
    reactivate: bool,
    /// A new session's first write, made while the first request goes out.
    first: Option<super::conversation::FirstWrite>,
}

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

    /// Admits a run: its provider and budget, the agent and its rules (a broken permission
    /// file stops it here), the session (created, or the one to continue), seed 000's priority
    /// (pausing or refusing), and the session's run lock.
    pub(super) async fn admit(&self, request: &mut RunRequest) -> Result<Admitted, RunError> {
        let provider = self.provider()?;
        // A budget nop cannot count against stops the run before anything happens.
        super::meter::Meter::new(&self.config, provider.model())
            .check_priced()
            .map_err(RunError::Agent)?;
        let now = Utc::now();
        let target = self.target(request, now);
        let checked = self.check_agent(&target, request).await;
        let (session_id, resumed, mut creating) = match target {
            Target::Resume(id) => (id, true, None),
            Target::Create(id, task) => (id, false, Some(task)),
        };
        let (agents, agent_name) = match checked {
            Ok(checked) => checked,
            Err(e) => {
                if !resumed {
                    // Made a moment ago for this run only.
                    discard(&self.store, &session_id, &mut creating).await;
                }
                return Err(e);
            }
        };
        let def = agents.get(&agent_name).cloned();
        let seat = Seat {
            session_id: &session_id,
            agent_name: &agent_name,
            def: def.as_ref(),
            resumed,
        };
        let (priority, emergency, coordinator, guard) = self
            .take_priority(&seat, &agents, request, &mut creating)
            .await?;
        let guard = match (request.guard.take(), resumed) {
            (Some(taken), _) => Some(taken),
            (None, true) => match crate::queue::RunGuard::try_acquire(&self.store.dir(&session_id))
            {
                Ok(Some(guard)) => Some(guard),
                Ok(None) => return Err(RunError::Busy(session_id)),
                Err(e) => return Err(RunError::Agent(e.to_string())),
            },
            // A new session's run lock comes with it.
            (None, false) => guard,
        };
        Ok(Admitted {
            session_id,
            resumed,
            agent_name,
            def,
            priority,
            emergency,
            coordinator,
            provider,
            now,
            creating,
            guard,
        })
    }

    /// The session the run is for: the one it names, or a new one, written (four fsyncs) while
    /// the run is checked and opened, on a thread of its own at once (a spawned task would wait
    /// for this one to yield); its first write waits for it, and a run refused removes it again.
    fn target(&self, request: &RunRequest, now: DateTime<Utc>) -> Target {
        match &request.session {
            Some(id) => Target::Resume(id.clone()),
            None => {
                let (store, agent) = (self.store.clone(), self.new_agent(request));
                let id = store.unused_id();
                let named = id.clone();
                Target::Create(
                    id,
                    tokio::task::spawn_blocking(move || store.create_running(&named, &agent, now)),
                )
            }
        }
    }

    /// The agent a new session gets: the one asked for, else `agent.default`.
    fn new_agent(&self, request: &RunRequest) -> String {
        request
            .agent
            .clone()
            .unwrap_or_else(|| self.config.agent.default.clone())
    }

    /// The agents, and the run's agent, if it may run: its permission files load (a broken one
    /// stops the run before anything happens: fail closed) and a new session may use it.
    async fn check_agent(
        &self,
        target: &Target,
        request: &RunRequest,
    ) -> Result<(crate::config::AgentsFile, String), RunError> {
        let agents = self.ws.agents()?;
        let agent_name = match target {
            Target::Resume(id) => self.agent_of(id).await?,
            Target::Create(..) => self.new_agent(request),
        };
        load_policy(&self.ws.root, &agent_name)?;
        if let Target::Create(..) = target {
            agents
                .for_new_session(&agent_name, &self.ws.agents_path())
                .map_err(RunError::Agent)?;
        }
        Ok((agents, agent_name))
    }

    /// Seed 000: an agent with a priority takes its place on the user's session stack (its
    /// dynamic priority from `--emergency` or an emergency keyword of the prompt), which may
    /// pause a lower one or refuse this run; the others never wait. Returns the priority, why
    /// it is an emergency, the stack, and the run lock a new session came with.
    async fn take_priority(
        &self,
        seat: &Seat<'_>,
        agents: &crate::config::AgentsFile,
        request: &RunRequest,
        creating: &mut Option<Creating>,
    ) -> Result<Taken, RunError> {
        let minute = {
            use chrono::Timelike;
            let local = chrono::Local::now();
            local.hour() * 60 + local.minute()
        };
        let emergency = if request.emergency {
            Some("--emergency".to_string())
        } else {
            seat.def
                .zip(request.input.as_deref())
                .and_then(|(d, input)| d.emergency_keyword(input))
                .map(|k| format!("keyword \"{k}\""))
        };
        let priority = agents.effective_priority(
            seat.agent_name,
            &self.queue.user,
            minute,
            emergency.is_some(),
        );
        let emergency = emergency.filter(|_| priority.is_some());
        let coordinator = priority.map(|_| {
            crate::queue::priority::Coordinator::new(
                &self.ws.nop_dir(),
                &self.queue.user,
                std::time::Duration::from_secs_f64(self.config.queue.idle_timeout_s),
            )
        });
        let mut guard = None;
        if let (Some(coordinator), Some(priority)) = (&coordinator, priority) {
            let interruptible = seat.def.is_none_or(|d| d.interruptible);
            let session_id = seat.session_id;
            match coordinator.admit(session_id, seat.agent_name, priority, interruptible)? {
                crate::queue::priority::Admission::Admitted { paused } => {
                    // Seed 000 §3: the session stores the priority it runs with.
                    guard = settle(creating).await?;
                    let why = emergency.clone();
                    self.record(session_id, move |s| {
                        s.priority = Some(priority);
                        s.interruptible = Some(interruptible);
                        s.emergency = why;
                    })
                    .await?;
                    if let Some(p) = paused {
                        self.note_paused(&p, seat.agent_name).await;
                    }
                }
                crate::queue::priority::Admission::Refused { reason } => {
                    tracing::info!(agent = %seat.agent_name, op = "priority", result = "refused", "{reason}");
                    if !seat.resumed {
                        // The session was created a moment ago for this run only.
                        discard(&self.store, session_id, creating).await;
                    }
                    return Err(RunError::Refused(reason));
                }
            }
        }
        Ok((priority, emergency, coordinator, guard))
    }

    /// A session this run paused says so at once (its own run also records it at its next
    /// checkpoint, and `running` when it resumes).
    async fn note_paused(&self, paused: &crate::queue::priority::Entry, by: &str) {
        tracing::info!(session = %paused.session_id, agent = %paused.agent, op = "priority", result = "paused", by = %by, "paused for a higher-priority session");
        if let Err(e) = self
            .store
            .set_status_async(&paused.session_id, SessionStatus::Paused)
            .await
        {
            tracing::warn!(session = %paused.session_id, op = "priority", error = %e, "could not record the pause in its session.json");
        }
    }

    /// The `user-prompt-submit` hooks on the user's prompt: they may refuse it (the session made
    /// for it is removed, nothing is stored) or add context, given to the model after it.
    pub(super) async fn submit_prompt(
        &self,
        admitted: &mut Admitted,
        request: &mut RunRequest,
    ) -> Result<(), RunError> {
        let Some(prompt) = request.input.clone() else {
            return Ok(());
        };
        if !hooks::configured(&self.config.hooks, Hook::UserPromptSubmit) {
            return Ok(());
        }
        // A hook may look at the session it is given.
        admitted.created().await?;
        let event = HookEvent::UserPromptSubmit {
            about: About {
                session_id: &admitted.session_id,
                agent: &admitted.agent_name,
            },
            prompt: &prompt,
        };
        let outcome = hooks::fire(&self.config.hooks, &self.ws.root, &event).await;
        match outcome {
            hooks::HookOutcome::Blocked(reason) => {
                if let Some(c) = &admitted.coordinator {
                    let _ = c.finish(&admitted.session_id);
                }
                // The session was created a moment ago for this prompt only.
                admitted.discard(&self.store).await;
                tracing::info!(session = %admitted.session_id, op = "hook", event = "user-prompt-submit", result = "blocked", "{reason}");
                Err(RunError::Refused(format!(
                    "a user-prompt-submit hook blocked the prompt: {reason}"
                )))
            }
            hooks::HookOutcome::Context(context) => {
                request.input = Some(format!("{prompt}\n\n{context}"));
                Ok(())
            }
            hooks::HookOutcome::Continue | hooks::HookOutcome::Allowed => Ok(()),
        }
    }

    /// Opens a run's session: the engine and the tools' context, the input (mentions attached,
    /// a goal announced), the session written (a new one's first messages, or a resumed one's
    /// closing of what a killed process left and its queue), the run's file checkpoint begun,
    /// `session_started` sent, the session-start hooks, and the checks on load.
    pub(super) async fn open(
        &self,
        admitted: &mut Admitted,
        request: &RunRequest,
        events: &EventSink,
        cancel: &CancellationToken,
    ) -> Result<Opened, RunError> {
        let engine = self.engine_for(admitted, events, cancel).await;
        let mut ctx = engine.tool_context(
            &admitted.session_id,
            &admitted.agent_name,
            Vec::new(),
            0,
            cancel.clone(),
            true,
        )?;
        let input = self.input_of(admitted, request, &ctx, events).await?;
        // A goal set now is told to the agent with the input (or as the input).
        let goal = request
            .goal
            .clone()
            .map(|spec| spec.into_goal(admitted.now));
        let input = match (&goal, input) {
            (Some(goal), Some(text)) => Some(format!("{text}\n\n{}", super::goal::announce(goal))),
            (Some(goal), None) => Some(super::goal::announce(goal)),
            (None, input) => input,
        };
        let checkpoints = self.checkpoints();
        let written = if admitted.resumed {
            self.write_resumed(
                admitted,
                request,
                &engine,
                &mut ctx,
                input,
                checkpoints.as_ref(),
                events,
            )
            .await?
        } else {
            self.write_new(
                admitted,
                request,
                &engine,
                &mut ctx,
                input,
                checkpoints.as_ref(),
                events,
            )
            .await?
        };
        self.set_goal(&admitted.session_id, admitted.now, goal, written.reactivate)
            .await?;
        self.announce(admitted, request, &engine, checkpoints.as_ref(), events)
            .await;
        let consistent = self
            .checks_on_load(admitted, &engine, &ctx, written.unchanged, events)
            .await;
        Ok(Opened {
            engine,
            ctx,
            checkpoints,
            turn: written.turn,
            consistent,
            held: Default::default(),
            first: written.first,
        })
    }

    /// The run's engine: its provider, approver, queue settings and plugins; memory's daily
    /// summaries brought up to date first when configured.
    async fn engine_for(
        &self,
        admitted: &Admitted,
        events: &EventSink,
        cancel: &CancellationToken,
    ) -> Engine {
        let def = admitted.def.as_ref();
        let engine = Engine::new(
            self.ws.clone(),
            self.cwd.clone(),
            self.config.clone(),
            self.store.clone(),
            admitted.provider.clone(),
            self.approver.clone(),
            events.clone(),
            super::engine::QueueSettings {
                coordinator: admitted.coordinator.clone(),
                stop_words: self.config.queue.stop_words.clone(),
                interrupt_enabled: def.is_none_or(|d| d.interrupt_enabled),
            },
        );
        engine.load_plugins(&self.plugins, &self.env).await;
        if self.config.memory.auto_summarize {
            self.auto_summarize(&engine, &admitted.agent_name, cancel)
                .await;
        }
        engine
    }

    /// The run's input with its `@path` mentions attached: session.json holds what the model
    /// is sent.
    async fn input_of(
        &self,
        admitted: &mut Admitted,
        request: &RunRequest,
        ctx: &ToolContext,
        events: &EventSink,
    ) -> Result<Option<String>, RunError> {
        let Some(text) = &request.input else {
            return Ok(None);
        };
        if text.contains('@') {
            // What attaches a file may ask, log or run a hook about the session.
            admitted.created().await?;
        }
        let expanded = super::mentions::expand(ctx, &self.cwd, text).await;
        for message in expanded.warnings {
            let _ = events.send(Event::Warning { message });
        }
        Ok(Some(expanded.text))
    }

    /// A resumed session: what a killed process left open closed (or the agent's question
    /// answered), then the messages queued while nobody ran it (they came first), then the
    /// input; the run's file checkpoint begun as the run finds the files.
    #[allow(clippy::too_many_arguments)]
    async fn write_resumed(
        &self,
        admitted: &Admitted,
        request: &RunRequest,
        engine: &Engine,
        ctx: &mut ToolContext,
        input: Option<String>,
        checkpoints: Option<&crate::checkpoint::Checkpoints>,
        events: &EventSink,
    ) -> Result<Written, RunError> {
        let session_id = &admitted.session_id;
        let state = self.store.read_async(session_id).await?;
        // The files as the run finds them, before anything it does (`nop undo`).
        let turn;
        (turn, ctx.ready) = self.begin_turn(
            session_id,
            checkpoints,
            request.input.as_deref(),
            events,
            state.session.messages.len(),
        );
        // The plan and the conversation are as the last checked run left them.
        let unchanged = state
            .session
            .consistency_checked
            .as_ref()
            .is_some_and(|c| c.covers(&state.plan, state.sealed(), state.recent_messages()));
        let session = state.session;
        // A goal the last run did not meet, taken up again by this one.
        let reactivate = session
            .goal
            .as_ref()
            .is_some_and(|g| g.status == crate::protocol::GoalStatus::NotMet);
        let (before, mut after) = resume_messages(&session, input.as_deref());
        if let Some(recall) = self.recall(&admitted.agent_name, request.input.as_deref()) {
            after.insert(0, recall);
        }
        self.update_status(session_id, SessionStatus::Running, before)
            .await?;
        let pending = engine.queued(ctx).await;
        engine.inject(ctx, pending).await?;
        self.update_status(session_id, SessionStatus::Running, after)
            .await?;
        Ok(Written {
            turn,
            unchanged,
            reactivate,
            first: None,
        })
    }

    /// A new session's first messages (system prompt, recalled memory, input), written while
    /// the first request goes out unless a session-start hook must read them first; the run's
    /// file checkpoint begun.
    #[allow(clippy::too_many_arguments)]
    async fn write_new(
        &self,
        admitted: &mut Admitted,
        request: &RunRequest,
        engine: &Engine,
        ctx: &mut ToolContext,
        input: Option<String>,
        checkpoints: Option<&crate::checkpoint::Checkpoints>,
        events: &EventSink,
    ) -> Result<Written, RunError> {
        let (session_id, now) = (admitted.session_id.clone(), admitted.now);
        let turn;
        (turn, ctx.ready) = self.begin_turn(
            &session_id,
            checkpoints,
            request.input.as_deref(),
            events,
            0,
        );
        let (system, warnings) = prompt::system_prompt_noting(
            &self.ws,
            &self.cwd,
            &admitted.agent_name,
            admitted.def.as_ref(),
            now,
        )?;
        for message in warnings {
            let _ = events.send(Event::Warning { message });
        }
        let mut first = vec![Message::new(Role::System, system, now)];
        if let Some(recall) = self.recall(&admitted.agent_name, request.input.as_deref()) {
            first.push(recall);
        }
        if let Some(input) = input {
            first.push(Message::new(Role::User, input, now));
        }
        // The tools' schemas the first request carries are made (once per process) while the
        // new session is still being written.
        let _ = engine.registry().specs();
        admitted.created().await?;
        let mut first_write = None;
        if hooks::configured(&self.config.hooks, Hook::SessionStart) {
            // Its hooks may read the session.
            self.update_status(&session_id, SessionStatus::Running, first)
                .await?;
        } else {
            // Written while the first request goes out, which is sent them from memory.
            first_write = Some(
                super::conversation::FirstWrite::start(
                    &self.store,
                    &session_id,
                    first,
                    SessionStatus::Running,
                )
                .await?,
            );
        }
        Ok(Written {
            turn,
            unchanged: false,
            reactivate: false,
            first: first_write,
        })
    }

    /// The session's goal: the one set now, or the one it had, taken up again by this run (a
    /// write only when there is one: most runs have none).
    async fn set_goal(
        &self,
        session_id: &str,
        now: DateTime<Utc>,
        goal: Option<crate::protocol::Goal>,
        reactivate: bool,
    ) -> Result<(), RunError> {
        if goal.is_none() && !reactivate {
            return Ok(());
        }
        self.store
            .update_async(session_id, now, move |state| {
                match goal {
                    Some(goal) => state.session.goal = Some(goal),
                    None => {
                        if let Some(g) = state.session.goal.as_mut()
                            && g.status == crate::protocol::GoalStatus::NotMet
                        {
                            g.status = crate::protocol::GoalStatus::Active;
                        }
                    }
                }
                Ok(())
            })
            .await?;
        Ok(())
    }

    /// Tells that the run started: `session_started`, what is untrusted, worktrees of
    /// subagents whose nop was killed, hook settings set aside; then the session-start hooks.
    async fn announce(
        &self,
        admitted: &Admitted,
        request: &RunRequest,
        engine: &Engine,
        checkpoints: Option<&crate::checkpoint::Checkpoints>,
        events: &EventSink,
    ) {
        let (session_id, agent_name) = (&admitted.session_id, &admitted.agent_name);
        tracing::info!(session = %session_id, agent = %agent_name, op = "run", result = "started", resumed = admitted.resumed, model = engine.provider().model(), "run started");
        let _ = events.send(Event::SessionStarted {
            session_id: session_id.clone(),
            agent: agent_name.clone(),
            model: engine.provider().model().to_string(),
            resumed: admitted.resumed,
            priority: admitted.priority,
            emergency: admitted.emergency.clone(),
        });
        super::untrusted::report(&self.ws, &self.env, events);
        // Worktrees of subagents whose nop was killed while they worked: named, once.
        if let Some(c) = checkpoints {
            for message in crate::checkpoint::left_behind(c) {
                tracing::warn!(op = "isolation", result = "left behind", "{message}");
                let _ = events.send(Event::Warning { message });
            }
        }
        for message in &self.config.hooks.warnings {
            tracing::warn!(session = %session_id, op = "hook", result = "set aside", "{message}");
            let _ = events.send(Event::Warning {
                message: message.clone(),
            });
        }
        let event = HookEvent::SessionStart {
            about: About {
                session_id,
                agent: agent_name,
            },
            resumed: admitted.resumed,
            mode: Mode::Run(request.input.as_deref()),
        };
        hooks::fire(&self.config.hooks, &self.ws.root, &event).await;
    }

    /// Seed 002 §3.3, on loading a session: its parent reference followed (a fork), and plan.xml
    /// checked against the messages unless nothing changed since the last check (`unchanged`).
    /// Whether the session is consistent as the run leaves it.
    async fn checks_on_load(
        &self,
        admitted: &Admitted,
        engine: &Engine,
        ctx: &ToolContext,
        unchanged: bool,
        events: &EventSink,
    ) -> bool {
        if !admitted.resumed {
            return false;
        }
        self.check_parent(&admitted.session_id, events).await;
        if !ctx.advisors {
            return false;
        }
        if unchanged {
            // Nobody changed the session since a check: asking again would cost a model round
            // trip for the same answer.
            tracing::info!(session = %admitted.session_id, op = "consistency", result = "skipped", "unchanged since the last check");
            return true;
        }
        // Warnings only.
        crate::advisors::check_consistency(engine, ctx, None)
            .await
            .is_some_and(|checked| checked.decision.consistent || !checked.repairs.is_empty())
    }

    /// Drives the agent until it answers, then asks the run's behaviours whether it goes on
    /// (`around`): what is still queued (seed 004), the `stop` hooks, the session's goal.
    pub(super) async fn drive(
        &self,
        opened: &mut Opened,
        max_turns: Option<u32>,
        events: &EventSink,
        stats: &mut TurnStats,
    ) -> Answer {
        let first = opened.first.take();
        let Opened {
            engine, ctx, held, ..
        } = &*opened;
        let mut behaviours: Vec<Box<dyn Around + '_>> = vec![
            Box::new(QueueDrain),
            Box::new(StopHooks::new(
                self.config.hooks.clone(),
                self.ws.root.clone(),
                None,
            )),
            Box::new(GoalCheck::new(self.config.agent.goal_timeout_s)),
        ];
        Drive {
            engine,
            ctx,
            events,
            stats,
            held: Some(held.clone()),
            max_turns: max_turns.unwrap_or(self.config.agent.max_turns),
            first,
            behaviours: &mut behaviours,
        }
        .run()
        .await
    }

    /// Finishes a run: its status from the agent's answer, the closing file checkpoint, the
    /// priority stack told, the session-end hooks, and the outcome sent as `result`.
    pub(super) async fn finish(
        &self,
        admitted: Admitted,
        opened: Opened,
        answer: Answer,
        stats: TurnStats,
        events: &EventSink,
    ) -> Result<RunOutcome, RunError> {
        let answer = match answer {
            Ok(answer) => answer,
            Err(fatal) => return Err(self.fail(&admitted, opened, fatal, &stats, events).await),
        };
        let ending = Ending::of(answer, &opened.engine);
        let Opened {
            engine,
            checkpoints,
            turn,
            consistent,
            held,
            ..
        } = opened;
        let session_id = &admitted.session_id;
        // The closing checkpoint and the final answer, when the run held it, are written with
        // the status: one write of session.json.
        let closing = self
            .close_files(
                session_id,
                checkpoints.as_ref(),
                turn,
                events,
                stats.tool_calls,
            )
            .await;
        let answer = held.take();
        let session_status = ending.session_status;
        self.store
            .update_async(session_id, Utc::now(), move |state| {
                if let Some(answer) = answer {
                    super::conversation::HeldAnswer::apply(answer, &mut state.session);
                }
                if let Some(closing) = closing {
                    closing.apply(&mut state.session, Utc::now());
                }
                state.session.status = session_status;
                if consistent {
                    state.session.consistency_checked = Some(ConsistencyChecked::of(
                        &state.plan,
                        &state.session.earlier_messages,
                        &state.session.messages,
                        Utc::now(),
                    ));
                }
                Ok(())
            })
            .await?;
        if let Some(c) = &admitted.coordinator {
            if session_status == SessionStatus::WaitingInput {
                c.set_waiting(session_id)?;
            } else {
                c.finish(session_id)?;
            }
        }
        self.end_hooks(&admitted, &ending).await;
        tracing::info!(session = %session_id, agent = %admitted.agent_name, op = "run", result = session_status.as_str(), turns = stats.turns, tool_calls = stats.tool_calls, "run ended");
        let outcome = self.outcome(admitted.session_id, ending, &engine, &stats);
        let _ = events.send(Event::Result(outcome.clone()));
        Ok(outcome)
    }

    /// Ends a run that failed: the session marked so as far as it can be (it may be
    /// unwritable), the priority stack told, the file checkpoint closed; the real failure
    /// reported.
    async fn fail(
        &self,
        admitted: &Admitted,
        opened: Opened,
        fatal: ToolError,
        stats: &TurnStats,
        events: &EventSink,
    ) -> RunError {
        let session_id = &admitted.session_id;
        let _ = opened.held.flush(&self.store, session_id).await;
        let _ = self
            .store
            .set_status_async(session_id, SessionStatus::Error)
            .await;
        if let Some(c) = &admitted.coordinator {
            let _ = c.finish(session_id);
        }
        self.end_turn(
            session_id,
            opened.checkpoints.as_ref(),
            opened.turn,
            events,
            stats.tool_calls,
        )
        .await;
        tracing::error!(session = %session_id, agent = %admitted.agent_name, op = "run", result = "error", "{fatal}");
        fatal.into()
    }

    /// The `notification` hooks (a question waits, or the task is done) and the session-end
    /// hooks.
    async fn end_hooks(&self, admitted: &Admitted, ending: &Ending) {
        let waiting = match (&ending.question, ending.session_status) {
            (Some(q), _) => Some(("question", format!("nop is waiting for your answer: {q}"))),
            (None, SessionStatus::Completed) => Some(("done", "nop finished the task".to_string())),
            _ => None,
        };
        let about = About {
            session_id: &admitted.session_id,
            agent: &admitted.agent_name,
        };
        if let Some((kind, text)) = waiting {
            let event = HookEvent::Notification {
                about,
                kind,
                message: text.into(),
            };
            hooks::fire(&self.config.hooks, &self.ws.root, &event).await;
        }
        let event = HookEvent::SessionEnd {
            about,
            status: ending.session_status.as_str(),
            mode: Mode::Run(Some(&ending.message)),
        };
        hooks::fire(&self.config.hooks, &self.ws.root, &event).await;
    }

    /// The run's outcome (`result`): how it ended, what it and its subagents and advisors
    /// spent, what was refused.
    fn outcome(
        &self,
        session_id: String,
        ending: Ending,
        engine: &Engine,
        stats: &TurnStats,
    ) -> RunOutcome {
        let called = engine.meter().called();
        let usage = RunUsage {
            own: stats.spent.into(),
            subagents: called.subagents.into(),
            advisors: called.advisors.into(),
        };
        let total: RunSpent = crate::protocol::Usage {
            own: stats.spent,
            ..called
        }
        .total()
        .into();
        RunOutcome {
            session_id,
            status: ending.status,
            final_message: ending.message,
            question: ending.question,
            usage,
            total_cost_usd: total.cost_usd,
            turns: stats.turns,
            tool_calls: stats.tool_calls,
            permission_denials: self.approver.denials(),
        }
    }
}
