//! The engine shared by a run, its subagents and its advisors: one provider, one store, one
//! approver. It runs agents on sessions for the lifecycle. The queue checkpoints (seed 004) with
//! pause and resume (seed 000) are in `interrupts.rs`, subagents in `subagent.rs`; advisor
//! consultation and compaction are `crate::advisors`', which the engine serves as their
//! [`advisors::Host`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::turn::{Checkpoint, EventSink, ModelAgent, RunServices, TurnStats};
use super::{AgentResponse, Interrupted};
use crate::advisors::{self, AdvisorAnswer, RetryDecision};
use crate::config::Config;
use crate::protocol::events::Event;
use crate::protocol::{Message, ToolCall};
use crate::providers::Provider;
use crate::session::Store;
use crate::tools::{Registry, SandboxSettings, ToolContext, ToolError};
use crate::workspace::Workspace;

#[derive(Clone)]
pub struct Engine(pub(super) Arc<Inner>);

pub(super) struct Inner {
    pub(super) ws: Workspace,
    /// The user's working directory (see `Runtime::with_cwd`).
    pub(super) cwd: std::path::PathBuf,
    pub(super) config: Config,
    pub(super) store: Store,
    pub(super) provider: Provider,
    pub(super) approver: crate::permissions::Approver,
    /// The run's event sink: subagent, advisor and compaction events go here.
    pub(super) events: EventSink,
    /// Advisor decisions by (session, advisor, arguments): identical questions are not paid twice.
    pub(super) cache: Mutex<HashMap<String, Value>>,
    pub(super) queue: QueueSettings,
    /// The tools plugins added (loaded once per process, see `plugins::Loaded`).
    pub(super) plugin_tools: Mutex<Vec<Arc<dyn crate::tools::Tool>>>,
    /// Set when a stop word ended the task: the message that did it.
    pub(super) stopped_by: Mutex<Option<String>>,
    /// Set once the priority stack could not be read at a checkpoint (warned about once).
    pub(super) priority_unreadable: std::sync::atomic::AtomicBool,
    /// What the run spends, and its budget.
    pub(super) meter: super::meter::Meter,
}

/// The user's session stack and the stop words (seeds 000, 004).
#[derive(Debug, Clone, Default)]
pub struct QueueSettings {
    pub coordinator: Option<crate::queue::priority::Coordinator>,
    pub stop_words: Vec<String>,
    /// The agent's `interrupt_enabled` (agents.yml, read once when the run starts).
    pub interrupt_enabled: bool,
}

impl Engine {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        ws: Workspace,
        cwd: std::path::PathBuf,
        config: Config,
        store: Store,
        provider: Provider,
        approver: crate::permissions::Approver,
        events: EventSink,
        queue: QueueSettings,
    ) -> Engine {
        let meter = super::meter::Meter::new(&config, provider.model());
        Engine(Arc::new(Inner {
            meter,
            ws,
            cwd,
            config,
            store,
            provider,
            approver,
            events,
            cache: Mutex::new(HashMap::new()),
            queue,
            plugin_tools: Mutex::new(Vec::new()),
            stopped_by: Mutex::new(None),
            priority_unreadable: std::sync::atomic::AtomicBool::new(false),
        }))
    }

    /// Takes the plugins of the repository, started by the first run of the process; each one
    /// that failed is reported once (a warning event and the log) and the run goes on without it.
    pub async fn load_plugins(
        &self,
        plugins: &crate::plugins::Loaded,
        env: &std::collections::BTreeMap<String, String>,
    ) {
        let (tools, statuses, fresh) = plugins
            .get(
                &self.0.ws.root,
                &SandboxSettings::from_config(&self.0.config),
                env,
            )
            .await;
        for status in statuses.iter().filter(|_| fresh) {
            if status.failed() {
                self.emit(Event::Warning {
                    message: format!("plugin {} {}", status.name, status.state),
                });
            }
            for note in &status.notes {
                self.emit(Event::Warning {
                    message: format!("plugin {}: {note}", status.name),
                });
            }
        }
        if let Ok(mut t) = self.0.plugin_tools.lock() {
            *t = tools;
        }
    }

    pub(super) fn registry(&self) -> Registry {
        let tools = self
            .0
            .plugin_tools
            .lock()
            .map(|t| t.clone())
            .unwrap_or_default();
        Registry::with(&tools)
    }

    /// What the run spends, and its budget.
    pub fn meter(&self) -> &super::meter::Meter {
        &self.0.meter
    }

    /// The stop word that ended the task, if one did.
    pub fn stopped_by(&self) -> Option<String> {
        self.0.stopped_by.lock().ok().and_then(|s| s.clone())
    }

    pub fn provider(&self) -> &Provider {
        &self.0.provider
    }

    /// Compacts the session of `ctx` now (see [`advisors::compact`]); the snapshot id, `None`
    /// when the conversation is too short to compact.
    pub async fn compact(
        &self,
        ctx: &ToolContext,
        reason: &str,
    ) -> Result<Option<String>, ToolError> {
        advisors::compact(self, ctx, reason, false).await
    }

    /// A warning event for whoever watches this run (the log line is the caller's).
    pub fn warn(&self, message: String) {
        self.emit(Event::Warning { message });
    }

    pub(super) fn emit(&self, event: Event) {
        let _ = self.0.events.send(event);
    }

    /// The tool context of `agent` working on `session_id`.
    pub fn tool_context(
        &self,
        session_id: &str,
        agent: &str,
        ancestors: Vec<String>,
        depth: u32,
        cancel: CancellationToken,
        advisors: bool,
    ) -> Result<ToolContext, crate::permissions::PermissionError> {
        let inner = &self.0;
        Ok(ToolContext {
            root: inner.ws.root.clone(),
            session_id: session_id.to_string(),
            store: inner.store.clone(),
            cancel,
            timeout: Duration::from_secs_f64(inner.config.tools.timeout_s),
            agent: agent.to_string(),
            policy: crate::permissions::load_chain(&inner.ws.root, agent, &ancestors)?
                .with_run_tools(&inner.config.agent.run_tools),
            approver: inner.approver.clone(),
            sandbox: SandboxSettings::from_config(&inner.config),
            ancestors,
            depth,
            agents: Some(Arc::new(self.clone())),
            advisors: advisors && inner.config.advisors.enabled,
            hooks: inner.config.hooks.clone(),
            ready: Default::default(),
            output_max_bytes: inner.config.tools.output_max_bytes,
            events: Some(inner.events.clone()),
            outer: Vec::new(),
            run_tools: inner.config.agent.run_tools.clone(),
        })
    }

    /// Runs the agent of `ctx` on its session until it answers. Boxed: an agent's run may call
    /// agents (subagents, advisors) that run the same way.
    pub fn drive<'a>(
        &'a self,
        ctx: &'a ToolContext,
        max_turns: u32,
        events: &'a EventSink,
        stats: &'a mut TurnStats,
    ) -> BoxFuture<'a, Result<Result<AgentResponse, Interrupted>, ToolError>> {
        self.drive_holding(ctx, max_turns, events, stats, None, None)
    }

    /// [`Engine::drive`], the final answer kept in `held` when given (a run writes it with
    /// its closing write).
    pub fn drive_holding<'a>(
        &'a self,
        ctx: &'a ToolContext,
        max_turns: u32,
        events: &'a EventSink,
        stats: &'a mut TurnStats,
        held: Option<super::conversation::HeldAnswer>,
        first: Option<super::conversation::FirstWrite>,
    ) -> BoxFuture<'a, Result<Result<AgentResponse, Interrupted>, ToolError>> {
        Box::pin(async move {
            let agent = ModelAgent {
                provider: self.0.provider.clone(),
                registry: self.registry(),
                max_turns: max_turns.max(1),
                max_parallel: self.0.config.agent.max_parallel.max(1) as usize,
                output_max_bytes: self.0.config.tools.output_max_bytes,
                text_tool_calls: self.0.config.provider.recovers_text_tool_calls(),
                run: std::sync::Arc::new(self.clone()),
            };
            let (store, id) = (self.0.store.clone(), ctx.session_id.clone());
            let conversation = match held {
                Some(held) => super::conversation::Conversation::holding_answer(store, id, held),
                None => super::conversation::Conversation::new(store, id),
            }
            .after(first);
            let answer = agent.respond(&conversation, ctx, events, stats).await;
            // Answered before the first request went out (stopped, over budget): the first
            // write is in before the run ends.
            conversation.settle().await?;
            answer
        })
    }
}

impl RunServices for Engine {
    fn checkpoint<'a>(
        &'a self,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<Checkpoint, ToolError>> {
        Box::pin(Engine::checkpoint(self, ctx))
    }

    fn wants_checkpoint<'a>(&'a self, ctx: &'a ToolContext) -> BoxFuture<'a, bool> {
        Box::pin(Engine::wants_checkpoint(self, ctx))
    }

    fn wants_compaction<'a>(
        &'a self,
        ctx: &'a ToolContext,
        messages: &'a [Message],
    ) -> BoxFuture<'a, Result<Option<String>, ToolError>> {
        Box::pin(advisors::wants_compaction(self, ctx, messages))
    }

    fn compact_now<'a>(
        &'a self,
        ctx: &'a ToolContext,
        reason: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, ToolError>> {
        Box::pin(advisors::compact(self, ctx, reason, true))
    }

    fn advise_retry<'a>(
        &'a self,
        ctx: &'a ToolContext,
        call: &'a ToolCall,
        error: &'a ToolError,
        retries: u32,
    ) -> BoxFuture<'a, RetryDecision> {
        Box::pin(advisors::advise_retry(self, ctx, call, error, retries))
    }

    fn retry_limits(&self) -> (u32, Duration) {
        let advisors = &self.0.config.advisors;
        (
            advisors.max_retries,
            Duration::from_secs_f64(advisors.retry_delay_s),
        )
    }

    fn worth_a_retry(&self, kind: crate::tools::ToolErrorKind) -> bool {
        self.0.config.advisors.retries(kind)
    }

    fn charge(&self, tokens: &crate::protocol::TokenUsage) -> Option<f64> {
        self.0.meter.charge(tokens)
    }

    fn afford(&self, next: &crate::protocol::TokenUsage) -> Result<(), super::meter::OverBudget> {
        self.0.meter.afford(next)
    }
}

impl advisors::Host for Engine {
    fn config(&self) -> &Config {
        &self.0.config
    }

    fn store(&self) -> &Store {
        &self.0.store
    }

    fn provider(&self) -> &Provider {
        &self.0.provider
    }

    fn emit(&self, event: Event) {
        Engine::emit(self, event);
    }

    fn cached_answer(&self, key: &str) -> Option<Value> {
        self.0.cache.lock().ok().and_then(|c| c.get(key).cloned())
    }

    fn charge_advisor(
        &self,
        ctx: &ToolContext,
        tokens: &crate::protocol::TokenUsage,
    ) -> Option<f64> {
        let cost = self.0.meter.charge(tokens);
        if ctx.depth == 0 {
            let mut spent = crate::protocol::Spent::default();
            spent.record(tokens, cost);
            self.0
                .meter
                .add_called(super::meter::Spender::Advisor, &spent);
        }
        cost
    }

    fn afford(&self, next: &crate::protocol::TokenUsage) -> bool {
        self.0.meter.afford(next).is_ok()
    }

    fn cache_answer(&self, key: String, value: Value) {
        if let Ok(mut cache) = self.0.cache.lock() {
            cache.insert(key, value);
        }
    }

    fn run_advisor<'a>(
        &'a self,
        ctx: &'a ToolContext,
        advisor: &'a str,
        input: String,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<AdvisorAnswer, ToolError>> {
        Box::pin(async move {
            let outcome = self
                .run_subagent(ctx, advisor, input, timeout, true)
                .await?;
            Ok(AdvisorAnswer {
                status: outcome.status,
                message: outcome.message,
            })
        })
    }
}
