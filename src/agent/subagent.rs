//! Subagents (seed 002 §4): `call-agent` runs another agent in a session of its own that
//! records its caller and where its permissions come from, narrowed by every caller's, under a
//! time limit, with metrics.

use std::time::{Duration, Instant};

use chrono::Utc;
use futures_util::future::BoxFuture;

use super::around::{self, Around, Closing, Drive, Opening, OwnWorktree, RunOpening, StopHooks};
use super::engine::Engine;
use super::meter::Spender;
use super::turn::TurnStats;
use super::{AgentStatus, Interrupted, prompt};
use crate::checkpoint::Isolated;
use crate::config::Isolation;
use crate::protocol::events::Event;
use crate::protocol::session::{PermissionSet, PermissionSource};
use crate::protocol::{CallMetrics, Caller, Message, Role, SessionStatus, Spent};
use crate::tools::{AgentCaller, ToolContext, ToolError, ToolErrorKind};

/// The agents nop runs itself (the advisors, `nop memory summarize`'s summarizer, the chat's
/// splitter): not work a model delegates, so they do not make `call-agent` worth offering.
const NOPS_OWN: [&str; 6] = [
    crate::advisors::CONSISTENCY_CHECKER,
    crate::advisors::RETRY_ADVISOR,
    crate::advisors::COMPRESSION_ADVISOR,
    crate::advisors::GOAL_CHECKER,
    "summarizer",
    "splitter",
];

/// How one subagent call went.
#[derive(Debug)]
pub struct SubagentOutcome {
    pub session_id: String,
    pub status: SessionStatus,
    pub message: String,
    pub metrics: CallMetrics,
    /// Stopped at its time limit (`status` is then `error`).
    pub timed_out: bool,
    /// For an `isolation: worktree` subagent: its branch and changed files, or that it changed
    /// nothing.
    pub isolation: Option<String>,
}

/// Who a subagent is: its agent, where it sits in the chain of callers, and what it was asked.
struct Child<'a> {
    parent: &'a ToolContext,
    target: &'a str,
    def: Option<crate::config::AgentDef>,
    ancestors: Vec<String>,
    depth: u32,
    /// An advisor: it only reads, no `subagent-stop` hooks keep it going.
    advisor: bool,
}

impl Engine {
    /// Runs `target` as a subagent of the session in `parent` (seed 002 §4.1–4.2): a new session
    /// recording its caller, permissions narrowed by the caller's, a time limit, metrics. The
    /// child session is admitted ([`Engine::admit_child`]), run by the one loop with its
    /// behaviours, and closed ([`Engine::close_child`]).
    pub async fn run_subagent(
        &self,
        parent: &ToolContext,
        target: &str,
        input: String,
        timeout: Duration,
        advisor: bool,
    ) -> Result<SubagentOutcome, ToolError> {
        let who = self.child(parent, target, advisor)?;
        let (child, isolated) = self.admit_child(&who, input).await?;
        let cancel = parent.cancel.child_token();
        let (mut ctx, isolated) = self
            .child_context(&who, &child, cancel.clone(), isolated)
            .await?;
        self.started(&who, &child);
        // The child's own stream is not the user's: its events are dropped, its session keeps all.
        let (sink, _) = tokio::sync::mpsc::unbounded_channel();
        let mut stats = TurnStats::default();
        let started = Instant::now();
        let (mut behaviours, isolation) = self.child_behaviours(&who, isolated);
        let mut opening = Opening {
            session_id: &child,
            agent: target,
            resumed: false,
            mode: crate::hooks::Mode::Run(None),
            events: &sink,
            run: Some(RunOpening {
                engine: self,
                ctx: &mut ctx,
                messages_before: 0,
                unchanged: false,
            }),
        };
        around::opened(&mut behaviours, &mut opening).await;
        let run = Drive {
            engine: self,
            ctx: &ctx,
            events: &sink,
            stats: &mut stats,
            held: None,
            max_turns: self.0.config.agent.max_turns,
            first: None,
            behaviours: &mut behaviours,
        }
        .run();
        let result = tokio::time::timeout(timeout, run).await;
        let timed_out = result.is_err();
        if timed_out {
            cancel.cancel();
        }
        let metrics = CallMetrics {
            duration_ms: started.elapsed().as_millis() as u64,
            tool_calls: stats.tool_calls,
            input_tokens: stats.spent.input_tokens,
            output_tokens: stats.spent.output_tokens,
        };
        let (status, message) = ended(result, timeout);
        let ending = ChildEnd {
            status,
            metrics,
            counted: stats.spent,
        };
        self.close_child(&who, &child, ending, &mut behaviours)
            .await;
        let isolation = isolation.and_then(|report| report.lock().ok().and_then(|mut r| r.take()));
        Ok(SubagentOutcome {
            session_id: child,
            status,
            message,
            metrics,
            timed_out,
            isolation,
        })
    }

    /// Says that the child session `child` started.
    fn started(&self, who: &Child<'_>, child: &str) {
        let (parent, target) = (who.parent, who.target);
        tracing::info!(session = %child, agent = %target, op = "subagent", result = "started", caller = %parent.session_id, depth = who.depth, "subagent started");
        self.emit(Event::SubagentStarted {
            session_id: child.to_string(),
            agent: target.to_string(),
            caller_session_id: parent.session_id.clone(),
            depth: who.depth,
            advisor: who.advisor,
        });
    }

    /// The behaviours of a child session: the `subagent-stop` hooks, which may keep a subagent
    /// (never an advisor) going; a worktree of its own, finished as it closes (where what
    /// became of it is left).
    fn child_behaviours(
        &self,
        who: &Child<'_>,
        isolated: Option<Isolated>,
    ) -> (Vec<Box<dyn Around>>, Option<Report>) {
        let mut behaviours: Vec<Box<dyn Around>> = Vec::new();
        if !who.advisor {
            behaviours.push(Box::new(StopHooks::new(
                self.0.config.hooks.clone(),
                self.0.ws.root.clone(),
                Some(who.parent.session_id.clone()),
            )));
        }
        let isolation = isolated.map(|isolated| {
            let behaviour = OwnWorktree::new(isolated, who.parent.session_id.clone());
            let report = behaviour.report();
            behaviours.push(Box::new(behaviour));
            report
        });
        (behaviours, isolation)
    }

    /// The subagent `target` of `parent`, if it may run: a known, enabled agent within
    /// `subagents.max_depth` (advisors are not counted against it).
    fn child<'a>(
        &self,
        parent: &'a ToolContext,
        target: &'a str,
        advisor: bool,
    ) -> Result<Child<'a>, ToolError> {
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
        let mut ancestors = vec![parent.agent.clone()];
        ancestors.extend(parent.ancestors.iter().cloned());
        Ok(Child {
            parent,
            target,
            def: def.cloned(),
            ancestors,
            depth,
            advisor,
        })
    }

    /// Creates the child session: its caller, where its permissions come from, its system
    /// prompt and `input`; for `isolation: worktree`, its worktree (named after the session, so
    /// made once the session exists). Returns its id and worktree.
    async fn admit_child(
        &self,
        who: &Child<'_>,
        input: String,
    ) -> Result<(String, Option<Isolated>), ToolError> {
        let (inner, target) = (&self.0, who.target);
        let now = Utc::now();
        let system = prompt::subagent_prompt(
            &inner.ws,
            &inner.cwd,
            target,
            &who.ancestors,
            who.def.as_ref(),
            now,
        )
        .map_err(|e| ToolError::model(ToolErrorKind::ConfigError, e.to_string()))?;
        let caller = Caller {
            session_id: who.parent.session_id.clone(),
            agent: who.parent.agent.clone(),
            depth: who.depth,
            advisor: who.advisor,
        };
        // Seed 002 §5.4: the session records where its permissions come from.
        let policy = crate::permissions::load_chain(&inner.ws.root, target, &who.ancestors)
            .map_err(|e| ToolError::model(ToolErrorKind::PermissionDenied, e.to_string()))?;
        let source = permission_source(&policy, &inner.ws.root, &who.parent.session_id);
        let store = inner.store.clone();
        let name = target.to_string();
        // `isolation: worktree` (for `call-agent`; an advisor only reads).
        let worktree = who
            .def
            .as_ref()
            .is_some_and(|d| d.isolation == Isolation::Worktree);
        let isolate = (!who.advisor && worktree).then(|| {
            let caller = crate::checkpoint::Checkpoints::new(
                &who.parent.root,
                &who.parent.root.join(".nop"),
                inner.config.checkpoints.max_file_mb,
            );
            (caller, who.ancestors.clone())
        });
        let first = FirstMessages {
            system,
            caller,
            source,
            input,
        };
        let (child, isolated) =
            tokio::task::spawn_blocking(move || create_child(&store, &name, now, isolate, first))
                .await
                .map_err(ToolError::fatal_from)??;
        match isolated {
            None => Ok((child, None)),
            Some(Ok(isolated)) => {
                tracing::info!(session = %child, agent = %target, op = "isolation", branch = %isolated.branch, path = %isolated.path.display(), skipped = isolated.skipped.len(), "subagent works in its own worktree");
                Ok((child, Some(isolated)))
            }
            Some(Err(why)) => {
                tracing::warn!(session = %child, agent = %target, op = "isolation", result = "refused", "{why}");
                Err(ToolError::model(
                    ToolErrorKind::NotAvailable,
                    format!("agent `{target}` (session {child}) did not start: {why}"),
                ))
            }
        }
    }

    /// The child's tools: it works where its caller does (an isolated caller's worktree), or in
    /// a worktree of its own (`isolated`, given back); its rules apply there, read from that
    /// root's `.nop/`, and its caller's callers in other roots confine it too. A child whose
    /// rules cannot be read does not start: its worktree is removed.
    async fn child_context(
        &self,
        who: &Child<'_>,
        child: &str,
        cancel: tokio_util::sync::CancellationToken,
        isolated: Option<Isolated>,
    ) -> Result<(ToolContext, Option<Isolated>), ToolError> {
        match self.rooted_context(who, child, cancel, isolated.as_ref()) {
            Ok(ctx) => Ok((ctx, isolated)),
            Err(e) => {
                if let Some(isolated) = isolated {
                    let _ = tokio::task::spawn_blocking(move || isolated.remove()).await;
                }
                Err(ToolError::model(
                    ToolErrorKind::PermissionDenied,
                    e.to_string(),
                ))
            }
        }
    }

    /// [`Engine::child_context`]'s context, in the root the child works in.
    fn rooted_context(
        &self,
        who: &Child<'_>,
        child: &str,
        cancel: tokio_util::sync::CancellationToken,
        isolated: Option<&Isolated>,
    ) -> Result<ToolContext, crate::permissions::PermissionError> {
        let mut ctx = self.tool_context(
            child,
            who.target,
            who.ancestors.clone(),
            who.depth,
            cancel,
            !who.advisor,
        )?;
        let root = isolated.map_or_else(|| who.parent.root.clone(), |i| i.path.clone());
        ctx.outer = who.parent.outer.clone();
        if root != ctx.root {
            // Its own root's rules, and its caller's wherever they reach (the caller's
            // repository by its path beside the worktree).
            ctx.outer.insert(
                0,
                crate::tools::Outer {
                    root: ctx.root.clone(),
                    agent: who.target.to_string(),
                    ancestors: ctx.ancestors.clone(),
                },
            );
            ctx.root = root;
            ctx.policy = ctx.load_policy()?;
        }
        Ok(ctx)
    }

    /// Closes the child session: its final status and metrics recorded (with what its
    /// behaviours add), what it spent charged to its caller, its behaviours told (an isolated
    /// child's work committed), `subagent_finished` sent.
    async fn close_child(
        &self,
        who: &Child<'_>,
        child: &str,
        end: ChildEnd,
        behaviours: &mut [Box<dyn Around>],
    ) {
        let (parent, target) = (who.parent, who.target);
        let ChildEnd {
            status,
            metrics,
            counted,
        } = end;
        let (sink, _) = tokio::sync::mpsc::unbounded_channel();
        let closing = Closing {
            session_id: child,
            agent: target,
            mode: crate::hooks::Mode::Run(None),
            status,
            question: None,
            failed: false,
            tool_calls: metrics.tool_calls,
            events: &sink,
        };
        // Its behaviours are told before its caller is charged: an isolated child's work is
        // committed first.
        let recorded = around::close(&self.0.store, &closing, behaviours, move |state| {
            state.session.metrics = Some(metrics);
            state.session.usage.total()
        })
        .await;
        match &recorded {
            Ok(spent) => self.charge_caller(parent, who.advisor, spent).await,
            // What the child spent is still the caller's: from what its turns counted.
            Err(_) => self.charge_caller(parent, who.advisor, &counted).await,
        }
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
            session_id: child.to_string(),
            agent: target.to_string(),
            status: status.as_str().to_string(),
            duration_ms: metrics.duration_ms,
            tool_calls: metrics.tool_calls,
            input_tokens: metrics.input_tokens,
            output_tokens: metrics.output_tokens,
            advisor: who.advisor,
        });
    }
}

/// Where an isolated child's worktree says what became of it.
type Report = std::sync::Arc<std::sync::Mutex<Option<String>>>;

/// How a child session's run ended: its status, metrics and what its turns counted.
struct ChildEnd {
    status: SessionStatus,
    metrics: CallMetrics,
    counted: Spent,
}

/// The child session's final status and message from how its run ended (`Err`: at its time
/// limit `timeout`).
fn ended(
    result: Result<super::around::Answer, tokio::time::error::Elapsed>,
    timeout: Duration,
) -> (SessionStatus, String) {
    match result {
        Err(_) => (
            SessionStatus::Error,
            format!(
                "timed out after {:.1} s and was stopped",
                timeout.as_secs_f64()
            ),
        ),
        Ok(Err(fatal)) => (SessionStatus::Error, fatal.to_string()),
        Ok(Ok(Err(Interrupted))) => (SessionStatus::Cancelled, "cancelled".to_string()),
        Ok(Ok(Ok(response))) => match response.status {
            AgentStatus::Completed => (SessionStatus::Completed, response.message),
            AgentStatus::WaitingInput => (SessionStatus::WaitingInput, response.message),
            AgentStatus::Error
            | AgentStatus::OverBudget
            | AgentStatus::MaxTurns
            | AgentStatus::RepeatedCall
            | AgentStatus::GoalNotMet => (SessionStatus::Error, response.message),
        },
    }
}

/// What a child session starts with: its system prompt, its caller, where its permissions
/// come from, and what it is asked.
struct FirstMessages {
    system: String,
    caller: Caller,
    source: PermissionSource,
    input: String,
}

/// Creates the child session `name` and, when `isolate` says so, its worktree from the caller's
/// checkpoint; writes its opening (a session whose worktree could not be made is left as an
/// error). Returns its id and its worktree, or why it has none.
fn create_child(
    store: &crate::session::Store,
    name: &str,
    now: chrono::DateTime<Utc>,
    isolate: Option<(crate::checkpoint::Checkpoints, Vec<String>)>,
    first: FirstMessages,
) -> Result<(String, Option<Result<Isolated, String>>), crate::session::SessionError> {
    let FirstMessages {
        system,
        caller,
        source,
        input,
    } = first;
    let session = store.create(name, now)?;
    let id = session.session_id;
    let isolated = isolate.map(|(caller, ancestors)| {
        let policy = crate::permissions::load_chain(caller.root(), name, &ancestors)
            .map_err(|e| e.to_string())?;
        crate::checkpoint::isolate(&caller, &format!("{name}-{id}"), &policy)
            .map_err(|e| e.to_string())
    });
    let system = match &isolated {
        Some(Ok(i)) => format!("{system}{}", isolation_section(i, caller.agent.as_str())),
        _ => system,
    };
    let recorded = store.update(&id, now, |state| {
        state.session.caller = Some(caller);
        state.session.permissions = Some(source);
        state.session.status = match &isolated {
            Some(Err(_)) => SessionStatus::Error,
            _ => SessionStatus::Running,
        };
        state.session.messages = vec![
            Message::new(Role::System, system, now),
            Message::new(Role::User, input, now),
        ];
        Ok(())
    });
    if let (Err(_), Some(Ok(isolated))) = (&recorded, &isolated) {
        isolated.remove();
    }
    recorded?;
    Ok((id, isolated))
}

/// What an isolated subagent's system prompt adds: where it works, and that its caller's tree
/// is not there.
fn isolation_section(isolated: &Isolated, caller: &str) -> String {
    format!(
        "\n\n# Your worktree\nYou work in a git worktree of your own: {} (branch {}), holding \
         the files of `{caller}`, who called you, as they were when you started. It is your \
         root in place of the repository root named above, which is `{caller}`'s and not yours \
         to change: your tools work in the worktree (paths are relative to it, commands start \
         there). Do not commit: when you finish, nop commits your changes on {} for the caller.\n",
        isolated.path.display(),
        isolated.branch,
        isolated.branch
    )
}

impl Engine {
    /// Adds what a subagent or advisor spent (its own requests and its callees') to its
    /// caller's session, apart from the caller's own (`usage.subagents`, `usage.advisors`), and
    /// to the run's outcome when the caller is the top-level session. A caller whose
    /// session.json cannot record it gets a warning; the run goes on.
    async fn charge_caller(&self, parent: &ToolContext, advisor: bool, spent: &Spent) {
        if spent.is_empty() {
            return;
        }
        let who = if advisor {
            Spender::Advisor
        } else {
            Spender::Subagent
        };
        if parent.depth == 0 {
            self.0.meter.add_called(who, spent);
        }
        let spent = *spent;
        let recorded = self
            .0
            .store
            .update_async(&parent.session_id, Utc::now(), move |state| {
                match who {
                    Spender::Advisor => state.session.usage.advisors.add(&spent),
                    Spender::Subagent => state.session.usage.subagents.add(&spent),
                }
                Ok(())
            })
            .await;
        if let Err(e) = recorded {
            tracing::warn!(session = %parent.session_id, op = "usage", error = %e, "what a called agent spent could not be recorded");
            self.emit(Event::Warning {
                message: format!(
                    "session {} could not record what an agent it called spent: {e}",
                    parent.session_id
                ),
            });
        }
    }
}

/// Where a subagent's permissions come from (seed 002 §5.4), for its session.json: its own
/// files, and each caller whose rules narrow them (nearest first; the first is the session in
/// `caller`). Paths are relative to the repository.
fn permission_source(
    policy: &crate::permissions::Policy,
    root: &std::path::Path,
    caller_session: &str,
) -> PermissionSource {
    let files = |set: &crate::permissions::RuleSet| -> Vec<String> {
        set.files
            .iter()
            .map(|f| f.strip_prefix(root).unwrap_or(f).display().to_string())
            .collect()
    };
    let mut sets = policy.sets().iter();
    let own = sets.next();
    let narrowed_by = sets
        .enumerate()
        .map(|(i, set)| PermissionSet {
            agent: set.agent.clone(),
            files: files(set),
            session_id: (i == 0).then(|| caller_session.to_string()),
            extra: Default::default(),
        })
        .collect();
    PermissionSource {
        agent: own.map(|s| s.agent.clone()),
        files: own.map(files).unwrap_or_default(),
        narrowed_by,
        extra: Default::default(),
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
            let mut summary = format!(
                "agent {agent} (session {}) {} in {:.1} s, {} tool calls, {} input / {} output tokens",
                outcome.session_id,
                outcome.status,
                m.duration_ms as f64 / 1000.0,
                m.tool_calls,
                m.input_tokens,
                m.output_tokens
            );
            if let Some(isolation) = &outcome.isolation {
                summary.push_str(&format!("; {isolation}"));
            }
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

    fn callable(&self, ctx: &ToolContext) -> Vec<String> {
        if ctx.depth + 1 > self.0.config.subagents.max_depth {
            return Vec::new();
        }
        let Ok(file) = self.0.ws.agents() else {
            // A broken agents.yml is said when an agent is called; the tool stays offered.
            return vec!["?".to_string()];
        };
        let mut names: Vec<&str> = file
            .agents
            .iter()
            .filter(|a| a.enabled)
            .map(|a| a.name.as_str())
            .collect();
        if file.get("coder").is_none() {
            names.push("coder");
        }
        names
            .into_iter()
            .filter(|name| *name != ctx.agent && !NOPS_OWN.contains(name))
            .filter(|name| {
                !matches!(
                    ctx.policy.check_tool(&format!("call-agent:{name}")),
                    crate::permissions::Decision::Deny { .. }
                )
            })
            .map(str::to_string)
            .collect()
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
