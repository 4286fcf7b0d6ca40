//! The runtime ("adapter", seed 003): creates or loads the session, records the user's input,
//! hands the conversation to the agent, records what it did, and moves the session through its
//! lifecycle (running → completed | waiting_input | error | cancelled).

use std::collections::BTreeMap;

use chrono::Utc;
use tokio_util::sync::CancellationToken;

use super::engine::Engine;
use super::error::RunError;
use super::prompt;
use super::turn::{EventSink, TurnStats, aborted};
use super::{AgentStatus, Interrupted};
use crate::config::Config;
use crate::hooks::{self, Hook};
use crate::permissions::{Approver, load_policy};
use crate::protocol::events::{Event, RunOutcome, RunSpent, RunStatus, RunUsage};
use crate::protocol::{Message, Role, SessionFile, SessionStatus};
use crate::providers::{Provider, ProviderError};
use crate::session::Store;
use crate::workspace::Workspace;

/// What `nop run` asks for.
#[derive(Debug, Default)]
pub struct RunRequest {
    /// Continue this session (full id) instead of creating one.
    pub session: Option<String>,
    /// The agent of a new session (default: `agent.default`).
    pub agent: Option<String>,
    /// The prompt, or the answer to the agent's question; `None` to process what is queued.
    pub input: Option<String>,
    pub max_turns: Option<u32>,
    /// Seed 000's dynamic priority: +20 for this session.
    pub emergency: bool,
    /// The session's run lock, when the caller already holds it.
    pub guard: Option<crate::queue::RunGuard>,
}

#[derive(Clone)]
pub struct Runtime {
    ws: Workspace,
    config: Config,
    env: BTreeMap<String, String>,
    store: Store,
    approver: Approver,
    queue: RunnerIdentity,
    /// The user's working directory (canonical): project instructions are read from the root
    /// down to it, and `@path` mentions are taken from it. The root unless [`Runtime::with_cwd`].
    cwd: std::path::PathBuf,
}

/// Who is running: the user of seed 000's per-user stack.
#[derive(Debug, Clone, Default)]
pub struct RunnerIdentity {
    pub user: String,
}

impl Runtime {
    pub fn new(
        ws: Workspace,
        config: Config,
        env: BTreeMap<String, String>,
        approver: Approver,
        user: String,
    ) -> Runtime {
        let store = ws.store(&config);
        Runtime {
            cwd: ws.root.clone(),
            ws,
            config,
            env,
            store,
            approver,
            queue: RunnerIdentity { user },
        }
    }

    /// The same runtime for a user working in `cwd` (where `nop` was started, the repository
    /// root or a directory inside it).
    pub fn with_cwd(mut self, cwd: &std::path::Path) -> Runtime {
        self.cwd = std::fs::canonicalize(cwd).unwrap_or_else(|_| cwd.to_path_buf());
        self
    }

    /// The user's working directory.
    pub fn cwd(&self) -> &std::path::Path {
        &self.cwd
    }

    pub fn user(&self) -> &str {
        &self.queue.user
    }

    pub fn stop_words(&self) -> &[String] {
        &self.config.queue.stop_words
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn workspace(&self) -> &Workspace {
        &self.ws
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The same runtime with the model `model` (`/model NAME`).
    pub fn with_model(mut self, model: &str) -> Runtime {
        self.config.provider.model = Some(model.to_string());
        self
    }

    /// The most this run may spend, in US dollars (`--max-budget-usd`, over
    /// `agent.max_budget_usd`).
    pub fn with_budget(mut self, usd: f64) -> Runtime {
        self.config.agent.max_budget_usd = usd;
        self
    }

    /// The model client of the configuration.
    pub(super) fn provider(&self) -> Result<Provider, ProviderError> {
        Provider::from_config(&self.config.provider, &self.env)
    }

    /// Runs the request to its end, sending events as it goes. A cancelled token stops it at
    /// once; the session is left well-formed (every tool call has a result) and resumable.
    pub async fn run(
        &self,
        request: RunRequest,
        events: EventSink,
        cancel: CancellationToken,
    ) -> Result<RunOutcome, RunError> {
        let provider = Provider::from_config(&self.config.provider, &self.env)?;
        // A budget nop cannot count against stops the run before anything happens.
        super::meter::Meter::new(&self.config, provider.model())
            .check_priced()
            .map_err(RunError::Agent)?;
        let agents = self.ws.agents()?;
        let agent_name = match &request.session {
            Some(id) => self.blocking_read(id).await?.agent,
            None => request
                .agent
                .clone()
                .unwrap_or_else(|| self.config.agent.default.clone()),
        };
        // A broken permission file stops the run before anything happens (fail closed).
        load_policy(&self.ws.root, &agent_name)?;
        let def = agents.get(&agent_name);
        if request.session.is_none() {
            agents
                .for_new_session(&agent_name, &self.ws.agents_path())
                .map_err(RunError::Agent)?;
        }
        let now = Utc::now();
        let (session_id, resumed) = match &request.session {
            Some(id) => (id.clone(), true),
            None => {
                let session = self.store.create_async(&agent_name, now).await?;
                (session.session_id, false)
            }
        };
        // Seed 000: agents with a priority take part in preemption; the others never wait.
        let minute = {
            use chrono::Timelike;
            let local = chrono::Local::now();
            local.hour() * 60 + local.minute()
        };
        // Seed 000's dynamic priority: `--emergency`, or a prompt with one of the agent's
        // emergency keywords.
        let emergency = if request.emergency {
            Some("--emergency".to_string())
        } else {
            def.zip(request.input.as_deref())
                .and_then(|(d, input)| d.emergency_keyword(input))
                .map(|k| format!("keyword \"{k}\""))
        };
        let priority =
            agents.effective_priority(&agent_name, &self.queue.user, minute, emergency.is_some());
        let emergency = emergency.filter(|_| priority.is_some());
        let coordinator = priority.map(|_| {
            crate::queue::priority::Coordinator::new(
                &self.ws.nop_dir(),
                &self.queue.user,
                std::time::Duration::from_secs_f64(self.config.queue.idle_timeout_s),
            )
        });
        if let (Some(coordinator), Some(priority)) = (&coordinator, priority) {
            let interruptible = def.is_none_or(|d| d.interruptible);
            match coordinator.admit(&session_id, &agent_name, priority, interruptible)? {
                crate::queue::priority::Admission::Admitted { paused } => {
                    // Seed 000 §3: the session stores the priority it runs with.
                    let why = emergency.clone();
                    self.record(&session_id, move |s| {
                        s.extra
                            .insert("priority".into(), serde_json::json!(priority));
                        s.extra
                            .insert("interruptible".into(), serde_json::json!(interruptible));
                        match why {
                            Some(why) => s.extra.insert("emergency".into(), serde_json::json!(why)),
                            None => s.extra.remove("emergency"),
                        };
                    })
                    .await?;
                    if let Some(p) = paused {
                        tracing::info!(session = %p.session_id, agent = %p.agent, op = "priority", result = "paused", by = %agent_name, "paused for a higher-priority session");
                        // The paused session says so at once (its own run also records it at
                        // its next checkpoint, and `running` when it resumes).
                        if let Err(e) = self
                            .store
                            .set_status_async(&p.session_id, SessionStatus::Paused)
                            .await
                        {
                            tracing::warn!(session = %p.session_id, op = "priority", error = %e, "could not record the pause in its session.json");
                        }
                    }
                }
                crate::queue::priority::Admission::Refused { reason } => {
                    tracing::info!(agent = %agent_name, op = "priority", result = "refused", "{reason}");
                    if !resumed {
                        // The session was created a moment ago for this run only.
                        let _ = std::fs::remove_dir_all(self.store.dir(&session_id));
                    }
                    return Err(RunError::Refused(reason));
                }
            }
        }
        let _guard = match request.guard {
            Some(guard) => guard,
            None => match crate::queue::RunGuard::try_acquire(&self.store.dir(&session_id)) {
                Ok(Some(guard)) => guard,
                Ok(None) => return Err(RunError::Busy(session_id)),
                Err(e) => return Err(RunError::Agent(e.to_string())),
            },
        };

        // The files as the run finds them, before anything it does (`nop undo`).
        let checkpoints = self.ws.checkpoints(&self.config);
        let (turn, ready) = self
            .begin_turn(
                &session_id,
                checkpoints.as_ref(),
                request.input.as_deref(),
                &events,
            )
            .await;

        let engine = Engine::new(
            self.ws.clone(),
            self.cwd.clone(),
            self.config.clone(),
            self.store.clone(),
            provider,
            self.approver.clone(),
            events.clone(),
            super::engine::QueueSettings {
                coordinator: coordinator.clone(),
                stop_words: self.config.queue.stop_words.clone(),
                interrupt_enabled: def.is_none_or(|d| d.interrupt_enabled),
            },
        );
        engine.load_plugins().await;
        if self.config.memory.auto_summarize {
            self.auto_summarize(&engine, &agent_name, &cancel).await;
        }
        let mut ctx = engine.tool_context(
            &session_id,
            &agent_name,
            Vec::new(),
            0,
            cancel.clone(),
            true,
        )?;
        ctx.ready = ready;
        // `@path` mentions attach files before the input is stored: session.json holds what the
        // model is sent.
        let input = match &request.input {
            Some(text) => {
                let expanded = super::mentions::expand(&ctx, &self.cwd, text).await;
                for message in expanded.warnings {
                    let _ = events.send(Event::Warning { message });
                }
                Some(expanded.text)
            }
            None => None,
        };
        if resumed {
            // Close what a killed process left open (or answer the agent's question), then the
            // messages queued while nobody ran the session (they came first), then the input.
            let session = self.blocking_read(&session_id).await?;
            let (before, mut after) = resume_messages(&session, input.as_deref());
            if let Some(recall) = self.recall(&agent_name, request.input.as_deref()) {
                after.insert(0, recall);
            }
            self.update_status(&session_id, SessionStatus::Running, before)
                .await?;
            let pending = engine.queued(&ctx);
            engine.inject(&ctx, pending).await?;
            self.update_status(&session_id, SessionStatus::Running, after)
                .await?;
        } else {
            let (system, warnings) =
                prompt::system_prompt_noting(&self.ws, &self.cwd, &agent_name, def, now)?;
            for message in warnings {
                let _ = events.send(Event::Warning { message });
            }
            let mut first = vec![Message::new(Role::System, system, now)];
            if let Some(recall) = self.recall(&agent_name, request.input.as_deref()) {
                first.push(recall);
            }
            if let Some(input) = input {
                first.push(Message::new(Role::User, input, now));
            }
            self.update_status(&session_id, SessionStatus::Running, first)
                .await?;
        }
        tracing::info!(session = %session_id, agent = %agent_name, op = "run", result = "started", resumed, model = engine.provider().model(), "run started");
        let _ = events.send(Event::SessionStarted {
            session_id: session_id.clone(),
            agent: agent_name.clone(),
            model: engine.provider().model().to_string(),
            resumed,
            priority,
            emergency: emergency.clone(),
        });
        hooks::fire(&self.config.hooks, Hook::SessionStart, &self.ws.root, || {
            serde_json::json!({"session_id": session_id, "agent": agent_name, "resumed": resumed, "input": request.input})
        })
        .await;
        if resumed {
            // Seed 002 §3.3 step 2: on load, follow the parent reference of a fork.
            self.check_parent(&session_id, &events).await;
        }
        if resumed && ctx.advisors {
            // Seed 002 §3.3: on load, check plan.xml against the messages (warnings only).
            crate::advisors::check_consistency(&engine, &ctx).await;
        }
        let max_turns = request.max_turns.unwrap_or(self.config.agent.max_turns);
        let mut stats = TurnStats::default();
        let mut answer = engine.drive(&ctx, max_turns, &events, &mut stats).await;
        // Seed 004: what is still queued when the task ends is processed, one message at a time.
        while matches!(&answer, Ok(Ok(r)) if r.status == AgentStatus::Completed) {
            match engine.take_next(&ctx).await {
                Ok(Some(())) => answer = engine.drive(&ctx, max_turns, &events, &mut stats).await,
                Ok(None) => break,
                Err(e) => {
                    answer = Err(e);
                    break;
                }
            }
        }
        let (status, session_status, message, question) = match answer {
            Ok(Ok(response)) => match response.status {
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
                // Nothing failed: the session waits for more budget (`nop run --session ID`).
                AgentStatus::OverBudget => (
                    RunStatus::BudgetExceeded,
                    SessionStatus::Idle,
                    format!(
                        "{}; raise --max-budget-usd (agent.max_budget_usd) and continue with `nop run --session {session_id}`",
                        response.message
                    ),
                    None,
                ),
            },
            Ok(Err(Interrupted)) => {
                let why = match engine.stopped_by() {
                    Some(word) => format!("stopped by the message \"{}\"", word.trim()),
                    None => "cancelled by user".to_string(),
                };
                (RunStatus::Cancelled, SessionStatus::Cancelled, why, None)
            }
            Err(fatal) => {
                // The session may be unwritable; try to mark it, but report the real failure.
                let _ = self
                    .store
                    .set_status_async(&session_id, SessionStatus::Error)
                    .await;
                if let Some(c) = &coordinator {
                    let _ = c.finish(&session_id);
                }
                self.end_turn(&session_id, checkpoints.as_ref(), turn, &events)
                    .await;
                tracing::error!(session = %session_id, agent = %agent_name, op = "run", result = "error", "{fatal}");
                return Err(fatal.into());
            }
        };
        self.end_turn(&session_id, checkpoints.as_ref(), turn, &events)
            .await;
        self.store
            .set_status_async(&session_id, session_status)
            .await?;
        if let Some(c) = &coordinator {
            if session_status == SessionStatus::WaitingInput {
                c.set_waiting(&session_id)?;
            } else {
                c.finish(&session_id)?;
            }
        }
        hooks::fire(&self.config.hooks, Hook::SessionEnd, &self.ws.root, || {
            serde_json::json!({"session_id": session_id, "agent": agent_name, "status": session_status.as_str(), "final_message": message})
        })
        .await;
        tracing::info!(session = %session_id, agent = %agent_name, op = "run", result = session_status.as_str(), turns = stats.turns, tool_calls = stats.tool_calls, "run ended");
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
        let outcome = RunOutcome {
            session_id,
            status,
            final_message: message,
            question,
            usage,
            total_cost_usd: total.cost_usd,
            turns: stats.turns,
            tool_calls: stats.tool_calls,
            permission_denials: self.approver.denials(),
        };
        let _ = events.send(Event::Result(outcome.clone()));
        Ok(outcome)
    }

    /// Records the working files as the run begins, in a new turn of session.json's
    /// `checkpoints`, in the background: the first model request does not wait for it, the
    /// first tool call does (`ready`, opened when it is done). Returns what [`Runtime::end_turn`]
    /// waits for: the nested repositories found, or `None` when there is no checkpoint (a
    /// failure is a warning: the run goes on without one).
    async fn begin_turn(
        &self,
        session_id: &str,
        checkpoints: Option<&crate::checkpoint::Checkpoints>,
        input: Option<&str>,
        events: &EventSink,
    ) -> (Option<TurnStart>, crate::tools::Ready) {
        let Some(checkpoints) = checkpoints.cloned() else {
            return (None, crate::tools::Ready::default());
        };
        let started_at = Utc::now();
        let messages_before = match self.store.read_session_async(session_id).await {
            Ok(session) => session.messages.len(),
            Err(e) => {
                tracing::warn!(session = %session_id, op = "checkpoint", result = "error", "{e}");
                return (None, crate::tools::Ready::default());
            }
        };
        let prompt: String = match input {
            Some(text) => {
                let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
                let mut cut: String = line.chars().take(80).collect();
                if line.chars().count() > 80 {
                    cut.push('…');
                }
                cut
            }
            None => "(queued messages)".to_string(),
        };
        let (open, ready) = crate::tools::Ready::new();
        let store = self.store.clone();
        let id = session_id.to_string();
        let events = events.clone();
        let task = tokio::spawn(async move {
            let recorded = tokio::task::spawn_blocking(move || checkpoints.record_full()).await;
            let recorded = match recorded {
                Ok(Ok(recorded)) => recorded,
                Ok(Err(e)) => {
                    tracing::warn!(session = %id, op = "checkpoint", result = "error", "{e}");
                    let _ = events.send(Event::Warning {
                        message: format!(
                            "no file checkpoint for this run (`nop undo` cannot undo it): {e}"
                        ),
                    });
                    return None;
                }
                Err(_) => return None,
            };
            let before = recorded.tree;
            let written = store
                .update_async(&id, started_at, move |state| {
                    state
                        .session
                        .checkpoints
                        .push(crate::protocol::TurnCheckpoint {
                            before,
                            after: None,
                            started_at,
                            ended_at: None,
                            messages_before,
                            prompt,
                            undone_at: None,
                        });
                    Ok(())
                })
                .await;
            drop(open);
            match written {
                Ok(_) => Some(recorded.nested),
                Err(e) => {
                    tracing::warn!(session = %id, op = "checkpoint", result = "error", "{e}");
                    None
                }
            }
        });
        (Some(TurnStart(task)), ready)
    }

    /// Records the working files as the run ends, closing the turn [`Runtime::begin_turn`]
    /// opened, and names the git repositories the run created.
    async fn end_turn(
        &self,
        session_id: &str,
        checkpoints: Option<&crate::checkpoint::Checkpoints>,
        begun: Option<TurnStart>,
        events: &EventSink,
    ) {
        let Some(TurnStart(task)) = begun else {
            return;
        };
        let Ok(Some(nested_before)) = task.await else {
            return;
        };
        let Some(checkpoints) = checkpoints.cloned() else {
            return;
        };
        let recorded = match tokio::task::spawn_blocking(move || checkpoints.record_full()).await {
            Ok(Ok(recorded)) => recorded,
            Ok(Err(e)) => {
                tracing::warn!(session = %session_id, op = "checkpoint", result = "error", "{e}");
                return;
            }
            Err(_) => return,
        };
        let created: Vec<&String> = recorded
            .nested
            .iter()
            .filter(|n| !nested_before.contains(n))
            .collect();
        if !created.is_empty() {
            let names: Vec<String> = created.iter().map(|n| format!("{n}/")).collect();
            let message = format!(
                "this run created a git repository at {}: git commands run there (yours too) \
                 read its own configuration and hooks, which the agent wrote and nop does not \
                 check; look at its .git/config and .git/hooks before you run git in it",
                names.join(", ")
            );
            tracing::warn!(session = %session_id, op = "checkpoint", result = "nested-repository", "{message}");
            let _ = events.send(Event::Warning { message });
        }
        let after = recorded.tree;
        let now = Utc::now();
        let closed = self
            .store
            .update_async(session_id, now, move |state| {
                if let Some(turn) = state.session.checkpoints.last_mut()
                    && turn.after.is_none()
                {
                    turn.after = Some(after);
                    turn.ended_at = Some(now);
                }
                Ok(())
            })
            .await;
        if let Err(e) = closed {
            tracing::warn!(session = %session_id, op = "checkpoint", result = "error", "{e}");
        }
    }

    /// Seed 001 §2.3.5: a question about the past brings the matching memory into the
    /// conversation, as a system message just before it.
    fn recall(&self, agent: &str, input: Option<&str>) -> Option<Message> {
        let today = chrono::Local::now().date_naive();
        super::recall::recall_message(&self.ws, &self.config, agent, &[input?], today)
    }

    /// `memory.auto_summarize`: the most recent earlier day without a summary, at most one per
    /// run and within the advisors' time limit, so a run is never held up for long.
    async fn auto_summarize(&self, engine: &Engine, agent: &str, cancel: &CancellationToken) {
        let today = chrono::Local::now().date_naive();
        let Some(day) = super::summarize::pending_day(&self.ws, &self.config, agent, today) else {
            return;
        };
        let limit = std::time::Duration::from_secs_f64(self.config.advisors.timeout_s);
        let work = super::summarize::summarize_day(
            &self.ws,
            &self.config,
            engine.provider(),
            agent,
            day,
            cancel,
        );
        match tokio::time::timeout(limit, work).await {
            Ok(Ok(summary)) => {
                // The summarizer is one of nop's own agents: counted with the advisors.
                if let Some(tokens) = &summary.tokens {
                    let mut spent = crate::protocol::Spent::default();
                    spent.record(tokens, engine.meter().charge(tokens));
                    engine
                        .meter()
                        .add_called(super::meter::Spender::Advisor, &spent);
                }
                for line in summary.left_out {
                    engine.warn(format!(
                        "the automatic summary of {day} left out a session: {line}"
                    ));
                }
            }
            Ok(Err(e)) => {
                tracing::warn!(agent, op = "memory", result = "error", date = %day, "automatic summary failed: {e}")
            }
            Err(_) => {
                tracing::warn!(agent, op = "memory", result = "timeout", date = %day, "automatic summary took too long; skipped")
            }
        }
    }

    /// Compacts session `id` now (`nop compact`, `/compact`): the consistency check, a snapshot,
    /// the CompactAgent's summary in place of the older messages (seed 002 §3.4). The compression
    /// advisor is not asked: the compaction was asked for. `None`: the conversation is too short.
    /// The session is not locked against a run: the compaction commits only against the
    /// conversation it read.
    pub async fn compact(
        &self,
        id: &str,
        reason: &str,
        events: EventSink,
        cancel: CancellationToken,
    ) -> Result<Option<String>, RunError> {
        let session = self.blocking_read(id).await?;
        let provider = Provider::from_config(&self.config.provider, &self.env)?;
        let engine = Engine::new(
            self.ws.clone(),
            self.cwd.clone(),
            self.config.clone(),
            self.store.clone(),
            provider,
            // Nothing is asked: the CompactAgent and the advisors run no tools.
            Approver::headless(crate::permissions::ApprovalMode::Never, false),
            events,
            super::engine::QueueSettings::default(),
        );
        let ctx = engine.tool_context(id, &session.agent, Vec::new(), 0, cancel, true)?;
        Ok(engine.compact(&ctx, reason).await?)
    }

    async fn blocking_read(&self, id: &str) -> Result<SessionFile, RunError> {
        Ok(self.store.read_session_async(id).await?)
    }

    /// Follows a forked session's `parentSession` reference to the snapshot it came from (its
    /// own copy first, then the parent's directory). A snapshot that is gone, or that is not of
    /// the session it names, is a warning: the session's own conversation is what runs.
    async fn check_parent(&self, session_id: &str, events: &EventSink) {
        let store = self.store.clone();
        let id = session_id.to_string();
        let checked = tokio::task::spawn_blocking(move || {
            let session = store.read_session(&id)?;
            let found = store.parent_snapshot(&session)?;
            Ok::<_, crate::session::SessionError>(session.parent_session.zip(found))
        })
        .await;
        let problem = match checked {
            Ok(Ok(Some((parent, snapshot)))) if snapshot.session_id != parent.id => Some(format!(
                "snapshot {} that session {session_id} was forked from belongs to session {}, not to its parent {}",
                parent.snapshot_id, snapshot.session_id, parent.id
            )),
            Ok(Ok(_)) => None,
            Ok(Err(e)) => Some(format!(
                "session {session_id}'s parent reference cannot be followed: {e}"
            )),
            Err(e) => Some(e.to_string()),
        };
        if let Some(problem) = problem {
            let message = format!("{problem}; the session's own copy of the conversation runs");
            tracing::warn!(session = %session_id, op = "load", result = "parent-missing", "{message}");
            let _ = events.send(Event::Warning { message });
        }
    }

    /// Changes session.json of `id` (not its messages) under its lock.
    async fn record(
        &self,
        id: &str,
        change: impl FnOnce(&mut SessionFile) + Send + 'static,
    ) -> Result<(), RunError> {
        self.store
            .update_async(id, Utc::now(), move |state| {
                change(&mut state.session);
                Ok(())
            })
            .await?;
        Ok(())
    }

    async fn update_status(
        &self,
        id: &str,
        status: SessionStatus,
        messages: Vec<Message>,
    ) -> Result<(), RunError> {
        self.store
            .update_async(id, Utc::now(), move |state| {
                state.session.status = status;
                state.session.messages.extend(messages);
                Ok(())
            })
            .await?;
        Ok(())
    }
}

/// The messages that continue `session` with the user's `input`: the answer to a pending
/// ask-user call, after closing any call that a killed process left without a result; or a plain
/// user message.
fn resume_messages(session: &SessionFile, input: Option<&str>) -> (Vec<Message>, Vec<Message>) {
    let now = Utc::now();
    let answered: std::collections::HashSet<&str> = session
        .messages
        .iter()
        .filter_map(|m| m.tool_call.as_ref().map(|c| c.id.as_str()))
        .collect();
    let pending: Vec<_> = session
        .messages
        .iter()
        .rev()
        .find(|m| m.role == Role::Assistant)
        .map(|m| {
            m.tool_calls
                .iter()
                .filter(|c| !answered.contains(c.id.as_str()))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    let (questions, others): (Vec<_>, Vec<_>) =
        pending.into_iter().partition(|c| c.name == "ask-user");
    let mut before = aborted(&others, "nop stopped before this call finished");
    let mut after = Vec::new();
    match (questions.split_first(), input) {
        (Some((question, rest)), Some(input)) => {
            let mut answer = Message::new(Role::Tool, input, now);
            answer.tool_call = Some(question.clone());
            before.push(answer);
            before.extend(aborted(rest, "only the first question was answered"));
        }
        (Some(_), None) => before.extend(aborted(&questions, "the question was not answered")),
        (None, Some(input)) => after.push(Message::new(Role::User, input, now)),
        (None, None) => {}
    }
    (before, after)
}

/// The run's first file checkpoint, being recorded: the nested repositories it found, or
/// `None` when it failed ([`Runtime::begin_turn`]).
struct TurnStart(tokio::task::JoinHandle<Option<Vec<String>>>);
