//! The engine shared by a run, its subagents and its advisors: one provider, one store, one
//! approver. It runs agents on sessions for the lifecycle and holds the queue checkpoints (seed
//! 004) with pause and resume (seed 000). Subagents are in
//! `subagent.rs`; advisor consultation and compaction are `crate::advisors`', which the engine
//! serves as their [`advisors::Host`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use futures_util::future::BoxFuture;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::turn::{Checkpoint, EventSink, ModelAgent, RunServices, TurnStats};
use super::{AgentResponse, Interrupted};
use crate::advisors::{self, AdvisorAnswer, RetryDecision};
use crate::config::Config;
use crate::protocol::events::Event;
use crate::protocol::{Message, Role, SessionStatus, ToolCall};
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
    /// The tools plugins added (loaded once per run).
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

    /// Loads the plugins of the repository; each one that fails is reported once (a warning event
    /// and the log) and the run goes on without it.
    pub async fn load_plugins(&self) {
        let (tools, statuses) = crate::plugins::load_all(
            &self.0.ws.root,
            &SandboxSettings::from_config(&self.0.config),
        )
        .await;
        for status in statuses.iter().filter(|s| s.state != "loaded") {
            self.emit(Event::Warning {
                message: format!("plugin {} {}", status.name, status.state),
            });
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

    pub(super) fn inbox(&self, session_id: &str) -> crate::queue::Inbox {
        crate::queue::Inbox::new(&self.0.store.dir(session_id))
    }

    /// The messages queued for the session of `ctx`, in order; a file that is not a message is
    /// set aside (see [`crate::queue::Inbox::list`]) with a warning event. Read off the async
    /// threads.
    pub async fn queued(&self, ctx: &ToolContext) -> Vec<(String, crate::queue::QueuedMessage)> {
        let listing = self.inbox(&ctx.session_id).list_async().await;
        for bad in &listing.set_aside {
            self.emit(Event::Warning {
                message: bad.to_string(),
            });
        }
        listing.messages
    }

    fn interrupts_enabled(&self) -> bool {
        self.0.queue.interrupt_enabled
    }

    /// Whether a message is waiting that should end the current batch of tool calls: a stop word,
    /// or (when this agent takes interrupts) a high or urgent message. Only the top-level run
    /// reads the queue; subagents and advisors never do.
    pub async fn wants_checkpoint(&self, ctx: &ToolContext) -> bool {
        if ctx.depth > 0 {
            return false;
        }
        let interrupts = self.interrupts_enabled();
        if self.is_paused(ctx).await {
            return true;
        }
        self.queued(ctx).await.iter().any(|(_, m)| {
            m.stop || (interrupts && m.priority != crate::queue::QueuePriority::Normal)
        })
    }

    /// Writes the session's status (paused while a higher-priority session runs, running again
    /// after).
    /// A status that cannot be written is a warning: the pause itself is the stack's, and the
    /// run goes on (as the newcomer's write of it does).
    async fn record_status(&self, ctx: &ToolContext, status: SessionStatus) {
        let written = self.0.store.set_status_async(&ctx.session_id, status).await;
        if let Err(e) = written {
            tracing::warn!(session = %ctx.session_id, op = "priority", error = %e, "could not record the status {}", status.as_str());
            self.emit(Event::Warning {
                message: format!("session.json could not record `{}`: {e}", status.as_str()),
            });
        }
    }

    /// Whether a higher-priority session paused this one. A priority stack that cannot be read
    /// cannot pause anything: the run goes on, and says so once (a warning event and the log).
    pub(super) async fn is_paused(&self, ctx: &ToolContext) -> bool {
        let Some(coordinator) = self.0.queue.coordinator.as_ref() else {
            return false;
        };
        match coordinator.state_of_async(&ctx.session_id).await {
            Ok(state) => state == Some(crate::queue::priority::EntryState::Paused),
            Err(e) => {
                if !self
                    .0
                    .priority_unreadable
                    .swap(true, std::sync::atomic::Ordering::Relaxed)
                {
                    tracing::warn!(session = %ctx.session_id, op = "priority", error = %e, "the priority stack cannot be read; this run is not paused by it");
                    self.emit(Event::Warning {
                        message: format!(
                            "the priority stack cannot be read, so no session can pause this one: {e}"
                        ),
                    });
                }
                false
            }
        }
    }

    /// A checkpoint (between tool calls and before each model request; never inside a tool):
    /// wait while a higher-priority session has paused this one, then stop on a stop word or
    /// put high and urgent messages into the conversation (seed 004).
    pub async fn checkpoint(&self, ctx: &ToolContext) -> Result<Checkpoint, ToolError> {
        if ctx.depth > 0 {
            return Ok(Checkpoint::Continue);
        }
        if self.is_paused(ctx).await {
            tracing::info!(session = %ctx.session_id, op = "priority", result = "paused", "paused by a higher-priority session");
            self.record_status(ctx, SessionStatus::Paused).await;
            self.emit(Event::Paused {
                session_id: ctx.session_id.clone(),
            });
            // Woken when the stack changes; at least once a second for a newcomer killed with
            // -9, which changes nothing on disk (its entry is dropped when the stack is read).
            let watch = self.0.queue.coordinator.as_ref().and_then(|c| c.watch());
            while self.is_paused(ctx).await {
                let changed = async {
                    match &watch {
                        Some(w) => w.changed(Duration::from_secs(1)).await,
                        None => tokio::time::sleep(Duration::from_millis(100)).await,
                    }
                };
                tokio::select! {
                    () = ctx.cancel.cancelled() => return Ok(Checkpoint::Continue),
                    () = changed => {}
                }
            }
            tracing::info!(session = %ctx.session_id, op = "priority", result = "resumed", "resumed");
            self.record_status(ctx, SessionStatus::Running).await;
            self.emit(Event::Resumed {
                session_id: ctx.session_id.clone(),
            });
        }
        let queued = self.queued(ctx).await;
        if let Some((name, stop)) = queued
            .iter()
            .find(|(_, m)| m.stop || crate::queue::is_stop_word(&m.text, &self.0.queue.stop_words))
        {
            self.record_stop(ctx, name, stop).await?;
            return Ok(Checkpoint::Stop(stop.text.clone()));
        }
        if self.interrupts_enabled() {
            let urgent: Vec<(String, crate::queue::QueuedMessage)> = queued
                .into_iter()
                .filter(|(_, m)| m.priority != crate::queue::QueuePriority::Normal)
                .collect();
            self.inject(ctx, urgent).await?;
        }
        Ok(Checkpoint::Continue)
    }

    /// Puts queued messages into the conversation as user messages marked as interrupts, then
    /// removes them from the queue. A message already in session.json (a crash between the two
    /// steps) is not added twice.
    pub async fn inject(
        &self,
        ctx: &ToolContext,
        messages: Vec<(String, crate::queue::QueuedMessage)>,
    ) -> Result<usize, ToolError> {
        if messages.is_empty() {
            return Ok(0);
        }
        let now = Utc::now();
        let names: Vec<String> = messages.iter().map(|(n, _)| n.clone()).collect();
        // `@path` mentions, from this process's working directory, before the message is stored.
        let mut queued: Vec<crate::queue::QueuedMessage> = Vec::with_capacity(messages.len());
        for (_, q) in &messages {
            let expanded = super::mentions::expand(ctx, &self.0.cwd, &q.text).await;
            for message in expanded.warnings {
                self.emit(Event::Warning { message });
            }
            queued.push(crate::queue::QueuedMessage {
                text: expanded.text,
                ..q.clone()
            });
        }
        let count = self
            .0
            .store
            .update_async(&ctx.session_id, now, move |state| {
                let present: std::collections::HashSet<String> = state
                    .session
                    .messages
                    .iter()
                    .filter_map(|m| m.inbox_id.clone())
                    .collect();
                let mut added = 0;
                for q in &queued {
                    if present.contains(&q.id) {
                        continue;
                    }
                    state.session.messages.push(queued_message(q, now));
                    added += 1;
                }
                Ok(added)
            })
            .await?;
        self.inbox(&ctx.session_id).remove_async(names).await?;
        if count > 0 {
            let latency: Vec<i64> = messages
                .iter()
                .map(|(_, q)| (now - q.queued_at).num_milliseconds())
                .collect();
            tracing::info!(session = %ctx.session_id, op = "queue", result = "injected", count, latency_ms = ?latency, "queued messages put into the conversation");
            self.emit(Event::MessagesInjected { count });
        }
        Ok(count)
    }

    /// The next queued message (any priority), for processing after the task: `None` when the
    /// queue is empty. A stop word found here is confirmed and dropped (nothing is running).
    pub async fn take_next(&self, ctx: &ToolContext) -> Result<Option<()>, ToolError> {
        loop {
            let Some((name, next)) = self.queued(ctx).await.into_iter().next() else {
                return Ok(None);
            };
            if next.stop || crate::queue::is_stop_word(&next.text, &self.0.queue.stop_words) {
                self.record_stop(ctx, &name, &next).await?;
                continue;
            }
            self.inject(ctx, vec![(name, next)]).await?;
            return Ok(Some(()));
        }
    }

    async fn record_stop(
        &self,
        ctx: &ToolContext,
        name: &str,
        stop: &crate::queue::QueuedMessage,
    ) -> Result<(), ToolError> {
        let now = Utc::now();
        let reply = format!(
            "Stopped, as you asked (\"{}\"). The session is kept; continue with `nop run --session {}`.",
            stop.text.trim(),
            ctx.session_id
        );
        let (stopped, asked) = (queued_message(stop, now), stop.text.trim().to_string());
        self.0
            .store
            .update_async(&ctx.session_id, now, move |state| {
                state.session.messages.push(stopped);
                state
                    .session
                    .messages
                    .push(Message::new(Role::Assistant, reply, now));
                state.session.stop_reason =
                    Some(format!("stop word \"{asked}\" at {}", now.to_rfc3339()));
                Ok(())
            })
            .await?;
        self.inbox(&ctx.session_id)
            .remove_async(vec![name.to_string()])
            .await?;
        if let Ok(mut s) = self.0.stopped_by.lock() {
            *s = Some(stop.text.clone());
        }
        tracing::info!(session = %ctx.session_id, op = "queue", result = "stopped", "stop word received");
        Ok(())
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
        advisors::compact(self, ctx, reason).await
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
            policy: crate::permissions::load_chain(&inner.ws.root, agent, &ancestors)?,
            approver: inner.approver.clone(),
            sandbox: SandboxSettings::from_config(&inner.config),
            ancestors,
            depth,
            agents: Some(Arc::new(self.clone())),
            advisors: advisors && inner.config.advisors.enabled,
            hooks: inner.config.hooks.clone(),
            ready: Default::default(),
            output_max_bytes: inner.config.tools.output_max_bytes,
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
        Box::pin(async move {
            let agent = ModelAgent {
                provider: self.0.provider.clone(),
                registry: self.registry(),
                max_turns: max_turns.max(1),
                output_max_bytes: self.0.config.tools.output_max_bytes,
                run: std::sync::Arc::new(self.clone()),
            };
            let conversation = super::conversation::Conversation::new(
                self.0.store.clone(),
                ctx.session_id.clone(),
            );
            agent.respond(&conversation, ctx, events, stats).await
        })
    }
}

/// A queued message as it enters the conversation (seed 004: marked as an interrupt).
fn queued_message(q: &crate::queue::QueuedMessage, now: chrono::DateTime<Utc>) -> Message {
    let mut m = Message::new(Role::User, q.text.clone(), now);
    m.is_interrupt = Some(true);
    m.inbox_id = Some(q.id.clone());
    m.priority = Some(q.priority);
    m.queued_at = Some(q.queued_at);
    m.session_key = Some(q.session_key.clone());
    m
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

    fn maybe_compact<'a>(
        &'a self,
        ctx: &'a ToolContext,
        messages: &'a [Message],
    ) -> BoxFuture<'a, Result<Option<String>, ToolError>> {
        Box::pin(advisors::maybe_compact(self, ctx, messages))
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
