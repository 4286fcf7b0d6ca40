//! The engine shared by a run, its subagents and its advisors: one provider, one store, one
//! approver. It runs agents on sessions (the seed-003 adapter's work below the command line),
//! calls subagents (seed 002 §4) and consults the advisors (§2) with their safe defaults.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::Utc;
use futures_util::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::prompt;
use super::turn::{Checkpoint, EventSink, ModelAgent, RunServices, TurnStats};
use super::{AgentResponse, AgentStatus, Interrupted};
use crate::advisors::{
    self, AdvisorError, CompressionDecision, ConsistencyDecision, RetryDecision, compaction,
};
use crate::config::Config;
use crate::protocol::events::Event;
use crate::protocol::{
    CallMetrics, Caller, CompressionRecord, Message, Role, SessionStatus, ToolCall,
};
use crate::providers::{ChatRequest, Provider};
use crate::session::Store;
use crate::tools::ToolErrorKind;
use crate::tools::{AgentCaller, Registry, SandboxSettings, ToolContext, ToolError};
use crate::workspace::Workspace;

/// The advisor agents' names (seed 002 §2.2).
pub const CONSISTENCY_CHECKER: &str = "consistency-checker";
pub const RETRY_ADVISOR: &str = "retry-advisor";
pub const COMPRESSION_ADVISOR: &str = "compression-advisor";

#[derive(Clone)]
pub struct Engine(Arc<Inner>);

struct Inner {
    ws: Workspace,
    config: Config,
    store: Store,
    provider: Provider,
    approver: crate::permissions::Approver,
    /// The run's event sink: subagent, advisor and compaction events go here.
    events: EventSink,
    /// Advisor decisions by (session, advisor, arguments): identical questions are not paid twice.
    cache: Mutex<HashMap<String, Value>>,
    queue: QueueSettings,
    /// The tools plugins added (loaded once per run).
    plugin_tools: Mutex<Vec<Arc<dyn crate::tools::Tool>>>,
    /// Set when a stop word ended the task: the message that did it.
    stopped_by: Mutex<Option<String>>,
    /// Set once the priority stack could not be read at a checkpoint (warned about once).
    priority_unreadable: std::sync::atomic::AtomicBool,
}

/// Who runs (the user), their session stack, and the stop words (seeds 000, 004).
#[derive(Debug, Clone, Default)]
pub struct QueueSettings {
    pub user: String,
    pub coordinator: Option<crate::queue::priority::Coordinator>,
    pub stop_words: Vec<String>,
    /// The agent's `interrupt_enabled` (agents.yml, read once when the run starts).
    pub interrupt_enabled: bool,
}

/// What a consistency check found, and what an automatic repair changed.
#[derive(Debug, Clone)]
pub struct Checked {
    pub decision: ConsistencyDecision,
    /// One line per change made to plan.xml (`consistency.auto_repair`); empty otherwise.
    pub repairs: Vec<String>,
}

/// How one subagent call went.
#[derive(Debug)]
pub struct SubagentOutcome {
    pub session_id: String,
    pub status: SessionStatus,
    pub message: String,
    pub metrics: CallMetrics,
    /// Stopped at its time limit (`status` is then `error`).
    pub timed_out: bool,
}

impl Engine {
    pub fn new(
        ws: Workspace,
        config: Config,
        store: Store,
        provider: Provider,
        approver: crate::permissions::Approver,
        events: EventSink,
        queue: QueueSettings,
    ) -> Engine {
        Engine(Arc::new(Inner {
            ws,
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
        let (tools, statuses) = crate::plugins::load_all(&self.0.ws.root).await;
        for status in statuses.iter().filter(|s| s.state != "loaded") {
            self.emit(Event::Warning {
                message: format!("plugin {} {}", status.name, status.state),
            });
        }
        if let Ok(mut t) = self.0.plugin_tools.lock() {
            *t = tools;
        }
    }

    fn registry(&self) -> Registry {
        let tools = self
            .0
            .plugin_tools
            .lock()
            .map(|t| t.clone())
            .unwrap_or_default();
        Registry::with(&tools)
    }

    /// The stop word that ended the task, if one did.
    pub fn stopped_by(&self) -> Option<String> {
        self.0.stopped_by.lock().ok().and_then(|s| s.clone())
    }

    fn inbox(&self, session_id: &str) -> crate::queue::Inbox {
        crate::queue::Inbox::new(&self.0.store.dir(session_id))
    }

    /// The messages queued for the session of `ctx`, in order; a file that is not a message is
    /// set aside (see [`crate::queue::Inbox::list`]) with a warning event.
    pub fn queued(&self, ctx: &ToolContext) -> Vec<(String, crate::queue::QueuedMessage)> {
        let listing = self.inbox(&ctx.session_id).list();
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
    pub fn wants_checkpoint(&self, ctx: &ToolContext) -> bool {
        if ctx.depth > 0 {
            return false;
        }
        let interrupts = self.interrupts_enabled();
        let paused = self.is_paused(ctx);
        paused
            || self.queued(ctx).iter().any(|(_, m)| {
                m.stop || (interrupts && m.priority != crate::queue::QueuePriority::Normal)
            })
    }

    /// Writes the session's status (paused while a higher-priority session runs, running again
    /// after).
    async fn record_status(
        &self,
        ctx: &ToolContext,
        status: SessionStatus,
    ) -> Result<(), ToolError> {
        self.0
            .store
            .update_async(&ctx.session_id, Utc::now(), move |state| {
                state.session.status = status;
                Ok(())
            })
            .await?;
        Ok(())
    }

    /// Whether a higher-priority session paused this one. A priority stack that cannot be read
    /// cannot pause anything: the run goes on, and says so once (a warning event and the log).
    fn is_paused(&self, ctx: &ToolContext) -> bool {
        let Some(coordinator) = self.0.queue.coordinator.as_ref() else {
            return false;
        };
        match coordinator.state_of(&ctx.session_id) {
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
        if self.is_paused(ctx) {
            tracing::info!(session = %ctx.session_id, op = "priority", result = "paused", "paused by a higher-priority session");
            self.record_status(ctx, SessionStatus::Paused).await?;
            self.emit(Event::Paused {
                session_id: ctx.session_id.clone(),
            });
            // Woken when the stack changes; at least once a second for a newcomer killed with
            // -9, which changes nothing on disk (its entry is dropped when the stack is read).
            let watch = self.0.queue.coordinator.as_ref().and_then(|c| c.watch());
            while self.is_paused(ctx) {
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
            self.record_status(ctx, SessionStatus::Running).await?;
            self.emit(Event::Resumed {
                session_id: ctx.session_id.clone(),
            });
        }
        let queued = self.queued(ctx);
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
        let queued: Vec<crate::queue::QueuedMessage> =
            messages.iter().map(|(_, q)| q.clone()).collect();
        let count = self
            .0
            .store
            .update_async(&ctx.session_id, now, move |state| {
                let present: std::collections::HashSet<String> = state
                    .session
                    .messages
                    .iter()
                    .filter_map(|m| {
                        m.extra
                            .get("inboxId")
                            .and_then(Value::as_str)
                            .map(str::to_string)
                    })
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
        self.inbox(&ctx.session_id).remove(&names)?;
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
            let Some((name, next)) = self.queued(ctx).into_iter().next() else {
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
                state.session.extra.insert(
                    "stopReason".into(),
                    json!(format!("stop word \"{asked}\" at {}", now.to_rfc3339())),
                );
                Ok(())
            })
            .await?;
        self.inbox(&ctx.session_id).remove(&[name.to_string()])?;
        if let Ok(mut s) = self.0.stopped_by.lock() {
            *s = Some(stop.text.clone());
        }
        tracing::info!(session = %ctx.session_id, op = "queue", result = "stopped", "stop word received");
        Ok(())
    }

    pub fn config(&self) -> &Config {
        &self.0.config
    }

    pub fn provider(&self) -> &Provider {
        &self.0.provider
    }

    /// A warning event for whoever watches this run (the log line is the caller's).
    pub fn warn(&self, message: String) {
        self.emit(Event::Warning { message });
    }

    fn emit(&self, event: Event) {
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

    /// Runs `target` as a subagent of the session in `parent` (seed 002 §4.1–4.2): a new session
    /// recording its caller, permissions narrowed by the caller's, a time limit, metrics.
    pub async fn run_subagent(
        &self,
        parent: &ToolContext,
        target: &str,
        input: String,
        timeout: Duration,
        advisor: bool,
    ) -> Result<SubagentOutcome, ToolError> {
        let inner = &self.0;
        let agents = inner
            .ws
            .agents()
            .map_err(|e| ToolError::model(ToolErrorKind::ConfigError, e.to_string()))?;
        let def = agents.get(target);
        match def {
            Some(d) if !d.enabled => {
                return Err(ToolError::model(
                    ToolErrorKind::UnknownAgent,
                    format!("agent `{target}` is disabled"),
                ));
            }
            None if target != "coder" => {
                let known: Vec<&str> = agents
                    .agents
                    .iter()
                    .filter(|a| a.enabled)
                    .map(|a| a.name.as_str())
                    .collect();
                return Err(ToolError::model(
                    ToolErrorKind::UnknownAgent,
                    format!("no agent `{target}`; the agents are: {}", known.join(", ")),
                ));
            }
            _ => {}
        }
        let depth = parent.depth + 1;
        if !advisor && depth > inner.config.subagents.max_depth {
            return Err(ToolError::model(
                ToolErrorKind::DepthLimit,
                format!(
                    "`{target}` would run at depth {depth}, beyond subagents.max_depth ({}); do the work yourself",
                    inner.config.subagents.max_depth
                ),
            ));
        }
        let now = Utc::now();
        let system = prompt::system_prompt(&inner.ws, target, def, now)
            .map_err(|e| ToolError::model(ToolErrorKind::ConfigError, e.to_string()))?;
        let caller = Caller {
            session_id: parent.session_id.clone(),
            agent: parent.agent.clone(),
            depth,
        };
        let mut ancestors = vec![parent.agent.clone()];
        ancestors.extend(parent.ancestors.iter().cloned());
        // Seed 002 §5.4: the session records where its permissions come from.
        let policy = crate::permissions::load_chain(&inner.ws.root, target, &ancestors)
            .map_err(|e| ToolError::model(ToolErrorKind::PermissionDenied, e.to_string()))?;
        let source = permission_source(&policy, &inner.ws.root, &parent.session_id);
        let store = inner.store.clone();
        let name = target.to_string();
        let child =
            tokio::task::spawn_blocking(move || -> Result<String, crate::session::SessionError> {
                let session = store.create(&name, now)?;
                store.update(&session.session_id, now, |state| {
                    state.session.caller = Some(caller);
                    state.session.extra.insert("permissions".into(), source);
                    state.session.status = SessionStatus::Running;
                    state.session.messages = vec![
                        Message::new(Role::System, system, now),
                        Message::new(Role::User, input, now),
                    ];
                    Ok(())
                })?;
                Ok(session.session_id)
            })
            .await
            .map_err(|e| ToolError::Fatal(e.to_string()))??;
        let cancel = parent.cancel.child_token();
        let ctx = self
            .tool_context(&child, target, ancestors, depth, cancel.clone(), !advisor)
            .map_err(|e| ToolError::model(ToolErrorKind::PermissionDenied, e.to_string()))?;
        tracing::info!(session = %child, agent = %target, op = "subagent", result = "started", caller = %parent.session_id, depth, "subagent started");
        self.emit(Event::SubagentStarted {
            session_id: child.clone(),
            agent: target.to_string(),
            caller_session_id: parent.session_id.clone(),
            depth,
        });
        // The child's own stream is not the user's: its events are dropped, its session keeps all.
        let (sink, _) = tokio::sync::mpsc::unbounded_channel();
        let mut stats = TurnStats::default();
        let started = Instant::now();
        let run = self.drive(&ctx, inner.config.agent.max_turns, &sink, &mut stats);
        let result = tokio::time::timeout(timeout, run).await;
        let metrics = CallMetrics {
            duration_ms: started.elapsed().as_millis() as u64,
            tool_calls: stats.tool_calls,
            input_tokens: stats.input_tokens,
            output_tokens: stats.output_tokens,
        };
        let timed_out = result.is_err();
        let (status, message) = match result {
            Err(_) => {
                cancel.cancel();
                (
                    SessionStatus::Error,
                    format!(
                        "timed out after {:.1} s and was stopped",
                        timeout.as_secs_f64()
                    ),
                )
            }
            Ok(Err(fatal)) => (SessionStatus::Error, fatal.to_string()),
            Ok(Ok(Err(Interrupted))) => (SessionStatus::Cancelled, "cancelled".to_string()),
            Ok(Ok(Ok(response))) => match response.status {
                AgentStatus::Completed => (SessionStatus::Completed, response.message),
                AgentStatus::WaitingInput => (SessionStatus::WaitingInput, response.message),
                AgentStatus::Error => (SessionStatus::Error, response.message),
            },
        };
        let store = inner.store.clone();
        let id = child.clone();
        let recorded = store
            .update_async(&id, Utc::now(), move |state| {
                state.session.status = status;
                state.session.metrics = Some(metrics);
                state.session.usage.input_tokens = metrics.input_tokens;
                state.session.usage.output_tokens = metrics.output_tokens;
                Ok(())
            })
            .await;
        if let Err(e) = recorded {
            tracing::error!(session = %child, agent = %target, op = "subagent", error = %e, "the subagent's final status could not be recorded");
            self.emit(Event::Warning {
                message: format!(
                    "subagent session {child} ended {} but its session.json could not record it: {e}",
                    status.as_str()
                ),
            });
        }
        tracing::info!(session = %child, agent = %target, op = "subagent", result = status.as_str(), duration_ms = metrics.duration_ms, tool_calls = metrics.tool_calls, output_tokens = metrics.output_tokens, "subagent ended");
        self.emit(Event::SubagentFinished {
            session_id: child.clone(),
            agent: target.to_string(),
            status: status.as_str().to_string(),
            duration_ms: metrics.duration_ms,
            tool_calls: metrics.tool_calls,
            input_tokens: metrics.input_tokens,
            output_tokens: metrics.output_tokens,
        });
        Ok(SubagentOutcome {
            session_id: child,
            status,
            message,
            metrics,
            timed_out,
        })
    }

    /// Asks `advisor` (with `arguments`, seed 002 §2.3) for a decision of type `T`. `Err` says why
    /// the caller must fall back to its safe default; it is also logged as a WARN.
    pub async fn consult<T: DeserializeOwned>(
        &self,
        ctx: &ToolContext,
        advisor: &str,
        arguments: Value,
    ) -> Result<T, AdvisorError> {
        if !ctx.advisors {
            return Err(AdvisorError::Off);
        }
        // An advisor is consulted through `call-agent` (seed 002 §2.1): the caller's permissions
        // decide, as for the tool, and a refusal is recorded like the tool's.
        if let Err(reason) = self.may_call(ctx, advisor) {
            ctx.approver.record_denial("call-agent", &reason);
            let why = AdvisorError::Denied {
                advisor: advisor.to_string(),
                reason,
            };
            tracing::warn!(session = %ctx.session_id, op = "advisor", advisor, result = "denied", "{why}; using the safe default");
            self.emit(Event::Warning {
                message: format!("{why}; using the safe default"),
            });
            return Err(why);
        }
        let key = format!("{}\u{0}{advisor}\u{0}{arguments}", ctx.session_id);
        let cached = self.0.cache.lock().ok().and_then(|c| c.get(&key).cloned());
        let result =
            match cached {
                Some(value) => serde_json::from_value(value).map_err(|e| AdvisorError::Schema {
                    advisor: advisor.to_string(),
                    detail: e.to_string(),
                }),
                None => {
                    let input = format!(
                        "Arguments:\n```json\n{}\n```\nAnswer with the JSON object only.",
                        serde_json::to_string_pretty(&arguments).unwrap_or_default()
                    );
                    let timeout = Duration::from_secs_f64(self.0.config.advisors.timeout_s);
                    match self.run_subagent(ctx, advisor, input, timeout, true).await {
                        Ok(outcome) if outcome.status == SessionStatus::Completed => {
                            match advisors::extract_json(&outcome.message) {
                                Some(value) => {
                                    let parsed = serde_json::from_value::<T>(value.clone())
                                        .map_err(|e| AdvisorError::Schema {
                                            advisor: advisor.to_string(),
                                            detail: e.to_string(),
                                        });
                                    if parsed.is_ok()
                                        && let Ok(mut cache) = self.0.cache.lock()
                                    {
                                        cache.insert(key, value);
                                    }
                                    parsed
                                }
                                None => Err(AdvisorError::NotJson {
                                    advisor: advisor.to_string(),
                                }),
                            }
                        }
                        Ok(outcome) => Err(AdvisorError::Ended {
                            advisor: advisor.to_string(),
                            status: outcome.status,
                            message: outcome.message,
                        }),
                        Err(source) => Err(AdvisorError::Call {
                            advisor: advisor.to_string(),
                            source,
                        }),
                    }
                }
            };
        if let Err(why) = &result {
            tracing::warn!(session = %ctx.session_id, op = "advisor", advisor, result = "default", "{why}; using the safe default");
            self.emit(Event::Warning {
                message: format!("{why}; using the safe default"),
            });
        }
        result
    }

    /// Whether the agent of `ctx` may call `target` with `call-agent`: the tool itself and
    /// `call-agent:<target>`, under its permission files as they are now. A rule that asks a
    /// person counts as a refusal here: nobody is asked about an advisor.
    fn may_call(&self, ctx: &ToolContext, target: &str) -> Result<(), String> {
        let policy = crate::permissions::load_chain(&ctx.root, &ctx.agent, &ctx.ancestors)
            .map_err(|e| format!("the permission files cannot be read: {e}"))?;
        for tool in ["call-agent".to_string(), format!("call-agent:{target}")] {
            match policy.check_tool(&tool) {
                crate::permissions::Decision::Allow { .. } => {}
                crate::permissions::Decision::Deny { reason, source } => {
                    let rule = source.map(|s| format!(" ({s})")).unwrap_or_default();
                    return Err(format!("{reason}{rule}"));
                }
                crate::permissions::Decision::Ask { source } => {
                    return Err(format!("calling `{tool}` needs approval ({source})"));
                }
            }
        }
        Ok(())
    }

    /// Asks retry-advisor about a failed call (seed 002 §4.3); the default is not to retry.
    pub async fn advise_retry(
        &self,
        ctx: &ToolContext,
        call: &ToolCall,
        error: &ToolError,
        retries: u32,
    ) -> RetryDecision {
        let arguments = json!({
            "errorType": error.kind(),
            "errorMessage": error.to_string(),
            // No real stack exists for a tool call; what failed where is the useful part, and leaving
            // the call id out lets identical failures share one decision.
            "stackTrace": format!("{} failed with {}", call.name, error.kind()),
            "toolName": call.name,
            "arguments": call.arguments,
            "retryCount": retries,
        });
        self.consult(ctx, RETRY_ADVISOR, arguments)
            .await
            .unwrap_or_else(|why| RetryDecision::default_no_retry(&why.to_string()))
    }

    /// Asks consistency-checker whether plan.xml and the messages agree (seed 002 §3.3); `None`
    /// when the plan is empty (nothing to check) or the advisor gave no valid answer. Each
    /// finding is a warning; with `consistency.auto_repair` the findings are applied to plan.xml
    /// after a snapshot, and session.json records what changed (`consistencyRepairs`).
    pub async fn check_consistency(&self, ctx: &ToolContext) -> Option<Checked> {
        let state = self.0.store.read_async(&ctx.session_id).await.ok()?;
        if state.plan.tasks.is_empty() {
            return None;
        }
        let arguments = json!({
            "plan": state.plan.to_xml(),
            "session": serde_json::to_string(&state.session).unwrap_or_default(),
            "sessionId": ctx.session_id,
        });
        let decision: ConsistencyDecision = self
            .consult(ctx, CONSISTENCY_CHECKER, arguments)
            .await
            .ok()?;
        let mut checked = Checked {
            decision,
            repairs: Vec::new(),
        };
        if checked.decision.consistent {
            return Some(checked);
        }
        for i in &checked.decision.inconsistencies {
            let message = format!(
                "plan and conversation disagree on task {} ({:?}, {:?}): {} — {}",
                i.task_id, i.kind, i.severity, i.description, i.suggestion
            );
            tracing::warn!(session = %ctx.session_id, op = "consistency", result = "inconsistent", "{message}");
            self.emit(Event::Warning { message });
        }
        if self.0.config.consistency.auto_repair {
            match self.repair_plan(ctx, &checked.decision).await {
                Ok(repairs) => checked.repairs = repairs,
                Err(e) => {
                    let message = format!("the plan could not be repaired: {e}");
                    tracing::warn!(session = %ctx.session_id, op = "consistency", result = "error", "{message}");
                    self.emit(Event::Warning { message });
                }
            }
        }
        Some(checked)
    }

    /// Applies `decision` to plan.xml under the session lock, after a snapshot of the session as
    /// it was; records the changes in session.json. Returns them (none: nothing written).
    async fn repair_plan(
        &self,
        ctx: &ToolContext,
        decision: &ConsistencyDecision,
    ) -> Result<Vec<String>, crate::session::SessionError> {
        let store = self.0.store.clone();
        let id = ctx.session_id.clone();
        let decision = decision.clone();
        let repaired =
            tokio::task::spawn_blocking(move || -> Result<_, crate::session::SessionError> {
                let mut probe = store.read(&id)?.plan;
                if advisors::repair(&mut probe, &decision).is_empty() {
                    return Ok((Vec::new(), None));
                }
                let snapshot = store.snapshot(&id, Utc::now())?;
                let changes = store.update(&id, Utc::now(), |state| {
                    let changes = advisors::repair(&mut state.plan, &decision);
                    if !changes.is_empty() {
                        let record = json!({
                            "timestamp": Utc::now().to_rfc3339(),
                            "snapshotId": snapshot,
                            "changes": changes,
                        });
                        match state.session.extra.get_mut("consistencyRepairs") {
                            Some(Value::Array(records)) => records.push(record),
                            _ => {
                                state
                                    .session
                                    .extra
                                    .insert("consistencyRepairs".into(), json!([record]));
                            }
                        }
                    }
                    Ok(changes)
                })?;
                Ok((changes, Some(snapshot)))
            })
            .await
            .map_err(|e| crate::session::SessionError::Io {
                path: self.0.store.dir(&ctx.session_id),
                source: std::io::Error::other(e.to_string()),
            })??;
        let (changes, snapshot) = repaired;
        if !changes.is_empty() {
            let snapshot = snapshot.unwrap_or_default();
            tracing::info!(session = %ctx.session_id, op = "consistency", result = "repaired", snapshot = %snapshot, "plan repaired: {}", changes.join("; "));
            self.emit(Event::Warning {
                message: format!(
                    "plan.xml repaired from the consistency check (snapshot {snapshot} holds it as it was): {}",
                    changes.join("; ")
                ),
            });
        }
        Ok(changes)
    }

    /// The compression check (seed 002 §3.4): the local pre-check, then compression-advisor, then
    /// compaction if it says so. Returns the snapshot id of a compaction that happened.
    /// `messages` are the session's as the turn loop just read them; the rest of the state is
    /// read only when the pre-check fires.
    pub async fn maybe_compact(
        &self,
        ctx: &ToolContext,
        messages: &[Message],
    ) -> Result<Option<String>, ToolError> {
        if !ctx.advisors || !compaction::needs_check(messages, &self.0.config.compaction) {
            return Ok(None);
        }
        let state = self.0.store.read_async(&ctx.session_id).await?;
        let recent: Vec<&Message> = messages.iter().rev().take(10).rev().collect();
        let arguments = json!({
            "sessionId": ctx.session_id,
            "agentType": ctx.agent,
            "messageCount": messages.len(),
            "tokenCount": compaction::estimate_tokens(messages),
            "recentMessages": recent,
            "plan": state.plan.to_xml(),
            "compressionCount": state.session.compressions.len(),
            "lastCompressionTime": state.session.compressions.last().map(|c| c.timestamp.to_rfc3339()),
        });
        match self
            .consult::<CompressionDecision>(ctx, COMPRESSION_ADVISOR, arguments)
            .await
        {
            Ok(decision) if decision.should_compress => self.compact(ctx, &decision.reason).await,
            _ => Ok(None),
        }
    }

    /// Compacts the session now: snapshot, CompactAgent summary, new messages, record.
    pub async fn compact(
        &self,
        ctx: &ToolContext,
        reason: &str,
    ) -> Result<Option<String>, ToolError> {
        let store = &self.0.store;
        let state = store.read_async(&ctx.session_id).await?;
        let messages = state.session.messages.clone();
        let Some(range) = compaction::replaceable(&messages, self.0.config.compaction.keep_last)
        else {
            return Ok(None);
        };
        // Seed 002 §2.2: the consistency check runs before compression, and the summary keeps
        // the plan as checked (repaired, with `consistency.auto_repair`).
        let checked = self.check_consistency(ctx).await;
        let plan = match &checked {
            Some(c) if !c.repairs.is_empty() => store.read_async(&ctx.session_id).await?.plan,
            _ => state.plan.clone(),
        };
        let consistency = checked
            .as_ref()
            .map(|c| compaction::consistency_note(&c.decision, &c.repairs));
        if !ctx.hooks.before_compact.is_empty() {
            let payload = json!({"session_id": ctx.session_id, "agent": ctx.agent, "reason": reason, "messages": messages.len()});
            let timeout = ctx.hooks.timeout();
            crate::hooks::run(
                "before-compact",
                &ctx.hooks.before_compact,
                &payload,
                &ctx.root,
                timeout,
            )
            .await;
        }
        let snapshot = store.snapshot_async(&ctx.session_id, Utc::now()).await?;
        // The stateless CompactAgent: one model call, no tools, no session of its own.
        let request = [
            Message::new(Role::System, compaction::COMPACT_PROMPT, Utc::now()),
            Message::new(
                Role::User,
                compaction::render(&messages[range.0..range.1]),
                Utc::now(),
            ),
        ];
        let mut ignore = |_| {};
        let reply = self
            .0
            .provider
            .complete(
                ChatRequest {
                    messages: &request,
                    tools: &[],
                },
                &ctx.cancel,
                &mut ignore,
            )
            .await
            .map_err(|e| {
                ToolError::model(
                    ToolErrorKind::CompactionFailed,
                    format!("the CompactAgent failed: {e}"),
                )
            })?;
        let before = messages.len();
        let new_messages =
            compaction::compacted(&messages, range, &reply.text, &plan, consistency.as_deref());
        let after = new_messages.len();
        let record = CompressionRecord {
            snapshot_id: snapshot.clone(),
            timestamp: Utc::now(),
            extra: [
                ("messagesBefore".to_string(), json!(before)),
                ("messagesAfter".to_string(), json!(after)),
                ("reason".to_string(), json!(reason)),
            ]
            .into_iter()
            .collect(),
        };
        // Committed under the session's lock against the conversation it read: anything appended
        // since stays after the compacted part; if the part it read has changed (another
        // compaction finished first), nothing is replaced.
        let read = messages.clone();
        let (input_tokens, output_tokens) = (reply.input_tokens, reply.output_tokens);
        let applied = store
            .update_async(&ctx.session_id, Utc::now(), move |s| {
                let unchanged =
                    s.session.messages.len() >= before && s.session.messages[..before] == read[..];
                if !unchanged {
                    return Ok(false);
                }
                let appended: Vec<Message> = s.session.messages.split_off(before);
                s.session.messages = new_messages;
                s.session.messages.extend(appended);
                s.session.compressions.push(record);
                s.session.usage.input_tokens += input_tokens;
                s.session.usage.output_tokens += output_tokens;
                Ok(true)
            })
            .await?;
        if !applied {
            tracing::warn!(session = %ctx.session_id, op = "compact", result = "conflict", snapshot = %snapshot, "the conversation changed during the compaction; nothing replaced");
            return Err(ToolError::model(
                ToolErrorKind::CompactionConflict,
                format!(
                    "the conversation changed while it was being compacted (another compaction \
                     finished first); nothing was replaced or lost (snapshot {snapshot} is kept)"
                ),
            ));
        }
        tracing::info!(session = %ctx.session_id, op = "compact", result = "ok", snapshot = %snapshot, before, after, "{reason}");
        self.emit(Event::Compacted {
            snapshot_id: snapshot.clone(),
            messages_before: before,
            messages_after: after,
        });
        Ok(Some(snapshot))
    }
}

/// Where a subagent's permissions come from (seed 002 §5.4), for its session.json: its own
/// files, and each caller whose rules narrow them (nearest first; the first is the session in
/// `caller`). Paths are relative to the repository.
fn permission_source(
    policy: &crate::permissions::Policy,
    root: &std::path::Path,
    caller_session: &str,
) -> Value {
    let files = |set: &crate::permissions::RuleSet| -> Vec<String> {
        set.files
            .iter()
            .map(|f| f.strip_prefix(root).unwrap_or(f).display().to_string())
            .collect()
    };
    let mut sets = policy.sets().iter();
    let own = sets.next();
    let narrowed: Vec<Value> = sets
        .enumerate()
        .map(|(i, set)| {
            let mut entry = json!({"agent": set.agent, "files": files(set)});
            if i == 0 {
                entry["sessionId"] = json!(caller_session);
            }
            entry
        })
        .collect();
    json!({
        "agent": own.map(|s| s.agent.clone()),
        "files": own.map(files).unwrap_or_default(),
        "narrowedBy": narrowed,
    })
}

/// A queued message as it enters the conversation (seed 004: marked as an interrupt).
fn queued_message(q: &crate::queue::QueuedMessage, now: chrono::DateTime<Utc>) -> Message {
    let mut m = Message::new(Role::User, q.text.clone(), now);
    m.extra.insert("isInterrupt".into(), Value::Bool(true));
    m.extra.insert("inboxId".into(), json!(q.id));
    m.extra
        .insert("priority".into(), json!(q.priority.as_str()));
    m.extra
        .insert("queuedAt".into(), json!(q.queued_at.to_rfc3339()));
    m.extra.insert("sessionKey".into(), json!(q.session_key));
    m
}

impl RunServices for Engine {
    fn checkpoint<'a>(
        &'a self,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<Checkpoint, ToolError>> {
        Box::pin(Engine::checkpoint(self, ctx))
    }

    fn wants_checkpoint(&self, ctx: &ToolContext) -> bool {
        Engine::wants_checkpoint(self, ctx)
    }

    fn maybe_compact<'a>(
        &'a self,
        ctx: &'a ToolContext,
        messages: &'a [Message],
    ) -> BoxFuture<'a, Result<Option<String>, ToolError>> {
        Box::pin(Engine::maybe_compact(self, ctx, messages))
    }

    fn advise_retry<'a>(
        &'a self,
        ctx: &'a ToolContext,
        call: &'a ToolCall,
        error: &'a ToolError,
        retries: u32,
    ) -> BoxFuture<'a, RetryDecision> {
        Box::pin(Engine::advise_retry(self, ctx, call, error, retries))
    }

    fn retry_limits(&self) -> (u32, Duration) {
        let advisors = &self.0.config.advisors;
        (
            advisors.max_retries,
            Duration::from_secs_f64(advisors.retry_delay_s),
        )
    }
}

impl AgentCaller for Engine {
    fn call_agent<'a>(
        &'a self,
        ctx: &'a ToolContext,
        agent: &'a str,
        input: String,
        timeout: Option<Duration>,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            // The caller may call the target (seed 002 §5.4): `call-agent:<name>` in its tool rules.
            let decision = ctx.policy.check_tool(&format!("call-agent:{agent}"));
            if !decision.is_allowed() {
                let reason = match decision {
                    crate::permissions::Decision::Deny { reason, .. } => reason,
                    _ => format!("calling `{agent}` needs approval"),
                };
                ctx.approver.record_denial("call-agent", &reason);
                return Err(ToolError::model(ToolErrorKind::PermissionDenied, reason));
            }
            let timeout =
                timeout.unwrap_or(Duration::from_secs_f64(self.0.config.subagents.timeout_s));
            let outcome = self.run_subagent(ctx, agent, input, timeout, false).await?;
            let m = outcome.metrics;
            let summary = format!(
                "agent {agent} (session {}) {} in {:.1} s, {} tool calls, {} input / {} output tokens",
                outcome.session_id,
                outcome.status,
                m.duration_ms as f64 / 1000.0,
                m.tool_calls,
                m.input_tokens,
                m.output_tokens
            );
            match outcome.status {
                SessionStatus::Completed => Ok(format!("{summary}:\n{}", outcome.message)),
                SessionStatus::WaitingInput => {
                    Ok(format!("{summary}; it asks: {}", outcome.message))
                }
                _ if outcome.timed_out => Err(ToolError::model(
                    ToolErrorKind::Timeout,
                    format!("{summary}: {}", outcome.message),
                )),
                _ => Err(ToolError::model(
                    ToolErrorKind::SubagentFailed,
                    format!("{summary}: {}", outcome.message),
                )),
            }
        })
    }

    fn compact<'a>(&'a self, ctx: &'a ToolContext) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            match Engine::compact(self, ctx, "requested with the compact tool").await? {
                Some(snapshot) => Ok(format!(
                    "compacted; the full history is in snapshot {snapshot}"
                )),
                None => Ok("nothing to compact yet: the conversation is short".to_string()),
            }
        })
    }
}
