//! The runtime: what a run needs from the workspace (configuration, store, approver, the user
//! and where they work), the errors that stop a run, and the helpers the lifecycle's phases
//! (`lifecycle.rs`, seed 003's adapter) use to record the session's messages and status.

use std::collections::BTreeMap;

use chrono::Utc;
use tokio_util::sync::CancellationToken;

use super::engine::Engine;
use super::error::RunError;
use super::turn::{EventSink, TurnStats, aborted};
use crate::config::Config;
use crate::permissions::Approver;
use crate::protocol::events::RunOutcome;
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
    /// A goal to set on the session (`--goal`, `--until`), replacing any it had.
    pub goal: Option<super::goal::GoalSpec>,
}

#[derive(Clone)]
pub struct Runtime {
    pub(super) ws: Workspace,
    pub(super) config: Config,
    pub(super) env: BTreeMap<String, String>,
    pub(super) store: Store,
    pub(super) approver: Approver,
    pub(super) queue: RunnerIdentity,
    /// The user's working directory (canonical): project instructions are read from the root
    /// down to it, and `@path` mentions are taken from it. The root unless [`Runtime::with_cwd`].
    pub(super) cwd: std::path::PathBuf,
    /// The plugins, started once for every run of this runtime and its clones.
    pub(super) plugins: std::sync::Arc<crate::plugins::Loaded>,
    /// The watch on the working files kept between its runs (an open handle's), so that a run
    /// that finds them as the last one left them records nothing anew.
    pub(super) watch: Option<crate::checkpoint::Watch>,
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
            plugins: Default::default(),
            watch: None,
        }
    }

    /// The same runtime for a user working in `cwd` (where `nop` was started, the repository
    /// root or a directory inside it).
    pub fn with_cwd(mut self, cwd: &std::path::Path) -> Runtime {
        self.cwd = std::fs::canonicalize(cwd).unwrap_or_else(|_| cwd.to_path_buf());
        self
    }

    /// The same runtime, keeping a watch on the working files between its runs (for a session
    /// that runs prompt after prompt: [`super::SessionHandle::open`]).
    pub(super) fn watching_files(mut self) -> Runtime {
        self.watch = Some(crate::checkpoint::Watch::default());
        self
    }

    /// The file checkpoint store of the run's root, with the runtime's watch.
    pub(super) fn checkpoints(&self) -> Option<crate::checkpoint::Checkpoints> {
        let checkpoints = self.ws.checkpoints(&self.config)?;
        Some(match &self.watch {
            Some(watch) => checkpoints.watched(watch),
            None => checkpoints,
        })
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

    /// Who answers approval questions, and the approval mode (shared by every clone).
    pub fn approver(&self) -> &Approver {
        &self.approver
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

    /// The same runtime with the run's own narrowing of its agent's tools.
    pub fn with_run_tools(mut self, tools: crate::config::RunTools) -> Runtime {
        self.config.agent.run_tools = tools;
        self
    }

    /// The model client of the configuration.
    pub(super) fn provider(&self) -> Result<Provider, ProviderError> {
        Ok(Provider::from_config(&self.config.provider, &self.env)?
            .with_context_window(self.config.compaction.context_window))
    }

    /// Runs the request to its end, sending events as it goes. A cancelled token stops it at
    /// once; the session is left well-formed (every tool call has a result) and resumable.
    /// One run of the request, in the lifecycle's phases (`lifecycle.rs`): admit (the agent,
    /// its rules, the session, priority, the run lock), open (the file checkpoint, the engine,
    /// the input, the session-start hooks and checks), drive (the agent's turns, then what is
    /// still queued), finish (status, checkpoint, hooks, the outcome).
    pub(super) async fn run_once(
        &self,
        mut request: RunRequest,
        events: EventSink,
        cancel: CancellationToken,
    ) -> Result<RunOutcome, RunError> {
        let started = std::time::Instant::now();
        let mut admitted = self.admit(&mut request).await?;
        self.submit_prompt(&mut admitted, &mut request).await?;
        let mut opened = self.open(&mut admitted, &request, &events, &cancel).await?;
        let mut stats = TurnStats::default();
        let answer = self
            .drive(&mut opened, request.max_turns, &events, &mut stats)
            .await;
        self.finish(admitted, opened, answer, stats, started, &events)
            .await
    }

    /// Seed 001 §2.3.5: a question about the past brings the matching memory into the
    /// conversation, as a system message just before it.
    pub(super) fn recall(&self, agent: &str, input: Option<&str>) -> Option<Message> {
        let today = chrono::Local::now().date_naive();
        super::recall::recall_message(&self.ws, &self.config, agent, &[input?], today)
    }

    /// `memory.auto_summarize`: the most recent earlier day without a summary, at most one per
    /// run and within the advisors' time limit, so a run is never held up for long.
    pub(super) async fn auto_summarize(
        &self,
        engine: &Engine,
        agent: &str,
        cancel: &CancellationToken,
    ) {
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
        let agent = self.agent_of(id).await?;
        let provider = self.provider()?;
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
        let ctx = engine.tool_context(id, &agent, Vec::new(), 0, cancel, true)?;
        Ok(engine.compact(&ctx, reason).await?)
    }

    /// The agent of session `id`, from session.json alone (a long conversation is not read).
    pub(super) async fn agent_of(&self, id: &str) -> Result<String, RunError> {
        Ok(self.store.read_recent_async(id).await?.session.agent)
    }

    /// Changes session.json of `id` (not its messages) under its lock.
    pub(super) async fn record(
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

    pub(super) async fn update_status(
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
pub(super) fn resume_messages(
    session: &SessionFile,
    input: Option<&str>,
) -> (Vec<Message>, Vec<Message>) {
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
