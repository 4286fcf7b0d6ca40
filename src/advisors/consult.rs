//! Advisor consultation (seed 002 §2): each advisor is asked through `call-agent`'s permission
//! check, answers in its own session, and any failure gives the safe default. The run around
//! the advisors is a [`Host`] (the engine), so this module needs nothing from the agent loop.

use std::time::Duration;

use chrono::Utc;
use futures_util::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::{AdvisorError, ConsistencyDecision, Refusal, RetryAction, RetryDecision};
use crate::config::{Config, Judgement};
use crate::protocol::events::Event;
use crate::protocol::{SessionStatus, ToolCall};
use crate::providers::Provider;
use crate::session::{SessionError, SessionState, Store};
use crate::tools::{ToolContext, ToolError};

/// The advisor agents' names (seed 002 §2.2).
pub const CONSISTENCY_CHECKER: &str = "consistency-checker";
pub const RETRY_ADVISOR: &str = "retry-advisor";
pub const COMPRESSION_ADVISOR: &str = "compression-advisor";
pub const GOAL_CHECKER: &str = "goal-checker";

/// What the advisors and the compaction need from the run they serve (the engine implements
/// it): its configuration, store and model, where its events go, its answer cache, and a way to
/// run an advisor agent.
pub trait Host: Send + Sync {
    fn config(&self) -> &Config;
    fn store(&self) -> &Store;
    /// The model the stateless CompactAgent asks.
    fn provider(&self) -> &Provider;
    /// An event for whoever watches the run.
    fn emit(&self, event: Event);
    /// An advisor's earlier answer to the same question (see [`consult`] for the key).
    fn cached_answer(&self, key: &str) -> Option<Value>;
    fn cache_answer(&self, key: String, value: Value);
    /// Runs `advisor` as an agent of the session in `ctx`, in a session of its own, with
    /// `input` as its prompt, for at most `timeout`.
    fn run_advisor<'a>(
        &'a self,
        ctx: &'a ToolContext,
        advisor: &'a str,
        input: String,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<AdvisorAnswer, ToolError>>;
    /// Charges a request the CompactAgent made to the run; its cost, `None` when unknown.
    fn charge_advisor(
        &self,
        ctx: &ToolContext,
        tokens: &crate::protocol::TokenUsage,
    ) -> Option<f64>;
    /// Whether the run's budget allows a request estimated at `next`.
    fn afford(&self, next: &crate::protocol::TokenUsage) -> bool;
}

/// How an advisor's session ended, and its last answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdvisorAnswer {
    pub status: SessionStatus,
    pub message: String,
}

/// What a consistency check found, and what an automatic repair changed.
#[derive(Debug, Clone)]
pub struct Checked {
    pub decision: ConsistencyDecision,
    /// One line per change made to plan.xml (`consistency.auto_repair`); empty otherwise.
    pub repairs: Vec<String>,
}

/// Asks `advisor` (with `arguments`, seed 002 §2.3) for a decision of type `T`. `Err` says why
/// the caller must fall back to its safe default; it is also logged as a WARN. A valid answer is
/// kept for the run: the same question (the same arguments) is not asked twice.
pub async fn consult<T: DeserializeOwned>(
    host: &dyn Host,
    ctx: &ToolContext,
    advisor: &str,
    arguments: Value,
) -> Result<T, AdvisorError> {
    let question = arguments.to_string();
    ask(host, ctx, advisor, arguments, &question, |_: &T| true).await
}

/// [`consult`] with the caller's idea of what makes two questions the same (`question`, within
/// the session and advisor), and of which answers may be reused for such a question (`keep`).
async fn ask<T: DeserializeOwned>(
    host: &dyn Host,
    ctx: &ToolContext,
    advisor: &str,
    arguments: Value,
    question: &str,
    keep: impl Fn(&T) -> bool,
) -> Result<T, AdvisorError> {
    if !ctx.advisors {
        return Err(AdvisorError::Off);
    }
    // An advisor is consulted through `call-agent` (seed 002 §2.1): the caller's permissions
    // decide, as for the tool, and a refusal is recorded like the tool's.
    if let Err(reason) = may_call(ctx, advisor) {
        ctx.approver
            .record_denial("call-agent", &reason.to_string());
        let why = AdvisorError::Denied {
            advisor: advisor.to_string(),
            reason,
        };
        tracing::warn!(session = %ctx.session_id, op = "advisor", advisor, result = "denied", "{why}; using the safe default");
        host.emit(Event::AdvisorFallback {
            advisor: advisor.to_string(),
            message: format!("{why}; using the safe default"),
        });
        return Err(why);
    }
    let key = format!("{}\u{0}{advisor}\u{0}{question}", ctx.session_id);
    let result = match host.cached_answer(&key) {
        Some(value) => {
            tracing::info!(session = %ctx.session_id, op = "advisor", advisor, result = "cached", "the answer to the same question earlier in the run");
            serde_json::from_value(value).map_err(|e| AdvisorError::Schema {
                advisor: advisor.to_string(),
                detail: e.to_string(),
            })
        }
        None => {
            let input = format!(
                "Arguments:\n```json\n{}\n```\nAnswer with the JSON object only.",
                serde_json::to_string_pretty(&arguments).unwrap_or_default()
            );
            let timeout = Duration::from_secs_f64(host.config().advisors.timeout_s);
            match host.run_advisor(ctx, advisor, input, timeout).await {
                Ok(answer) if answer.status == SessionStatus::Completed => {
                    match super::extract_json(&answer.message) {
                        Some(value) => {
                            let parsed = serde_json::from_value::<T>(value.clone()).map_err(|e| {
                                AdvisorError::Schema {
                                    advisor: advisor.to_string(),
                                    detail: e.to_string(),
                                }
                            });
                            if parsed.as_ref().is_ok_and(&keep) {
                                host.cache_answer(key, value);
                            }
                            parsed
                        }
                        None => Err(AdvisorError::NotJson {
                            advisor: advisor.to_string(),
                        }),
                    }
                }
                Ok(answer) => Err(AdvisorError::Ended {
                    advisor: advisor.to_string(),
                    status: answer.status,
                    message: answer.message,
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
        host.emit(Event::AdvisorFallback {
            advisor: advisor.to_string(),
            message: format!("{why}; using the safe default"),
        });
    }
    result
}

/// Whether the agent of `ctx` may call `target` with `call-agent`: the tool itself and
/// `call-agent:<target>`, under its permission files as they are now. A rule that asks a
/// person counts as a refusal here: nobody is asked about an advisor.
fn may_call(ctx: &ToolContext, target: &str) -> Result<(), Refusal> {
    let policy = crate::permissions::load_chain(&ctx.root, &ctx.agent, &ctx.ancestors)
        .map_err(Refusal::Unreadable)?;
    for tool in ["call-agent".to_string(), format!("call-agent:{target}")] {
        match policy.check_tool(&tool) {
            crate::permissions::Decision::Allow { .. } => {}
            crate::permissions::Decision::Deny { reason, source } => {
                return Err(Refusal::Denied {
                    reason,
                    rule: source,
                });
            }
            crate::permissions::Decision::Ask { source } => {
                return Err(Refusal::NeedsApproval { tool, rule: source });
            }
        }
    }
    Ok(())
}

/// Asks retry-advisor about a failed call (seed 002 §4.3); the default is not to retry.
///
/// The advisor sees the whole failure (message, arguments), but its decision holds for the
/// same tool failing the same way at the same retry count for the rest of the run: two missing
/// files cost one request (seed 002 §10.1's caching, at run scope). Only decisions that do not
/// depend on the arguments are reused: `retry` (bounded by `advisors.max_retries`) and `skip`.
/// `modify_params` names arguments for one call, and `abort` ends a run: both are asked afresh.
pub async fn advise_retry(
    host: &dyn Host,
    ctx: &ToolContext,
    call: &ToolCall,
    error: &ToolError,
    retries: u32,
) -> RetryDecision {
    let arguments = json!({
        "errorType": error.kind(),
        "errorMessage": error.to_string(),
        // No real stack exists for a tool call; what failed where is the useful part.
        "stackTrace": format!("{} failed with {}", call.name, error.kind()),
        "toolName": call.name,
        "arguments": call.arguments,
        "retryCount": retries,
    });
    let decision = ask(
        host,
        ctx,
        RETRY_ADVISOR,
        arguments,
        &same_failure(call, error, retries),
        |decision: &RetryDecision| {
            matches!(
                decision.suggested_action,
                RetryAction::Retry | RetryAction::Skip
            )
        },
    )
    .await
    .unwrap_or_else(|why| RetryDecision::default_no_retry(&why.to_string()));
    if judgement_trusted(host.config()) {
        decision
    } else {
        within_limits(decision, &call.arguments)
    }
}

/// Whether retry-advisor's own judgement may end a run or widen a call (`advisors.judgement`):
/// under `auto`, when the run's model is OpenAI's or Anthropic's own API (Azure's OpenAI too:
/// [`crate::config::is_vendor_api`], as `provider.text_tool_calls` decides). Any other server —
/// a local one, a gateway, an unknown compatible one — may be serving a small model, which was
/// seen to answer `abort` after one recoverable error.
pub fn judgement_trusted(config: &Config) -> bool {
    match config.advisors.judgement {
        Judgement::Full => true,
        Judgement::Limited => false,
        Judgement::Auto => config
            .provider
            .base_url
            .as_deref()
            .is_none_or(crate::config::is_vendor_api),
    }
}

/// A decision of an advisor whose judgement is limited: `abort` becomes `skip` (the failure
/// goes back to the model, which may try otherwise); `modify_params` keeps only corrected
/// values of arguments the call already had, of the same type, never a flag (a boolean: set
/// or cleared, `replace_all` or `outside_sandbox` is the model's choice, not the advisor's);
/// with nothing left it becomes `skip`. The reason says what was not followed.
fn within_limits(mut decision: RetryDecision, original: &Value) -> RetryDecision {
    let skip = |decision: RetryDecision, what: &str| RetryDecision {
        should_retry: false,
        reason: format!(
            "{} ({what} not followed: advisors.judgement is limited for this model)",
            decision.reason
        ),
        suggested_action: RetryAction::Skip,
        modified_params: None,
    };
    match decision.suggested_action {
        RetryAction::Abort => skip(decision, "abort"),
        RetryAction::ModifyParams => {
            let corrected: serde_json::Map<String, Value> = match &decision.modified_params {
                Some(Value::Object(changes)) => changes
                    .iter()
                    .filter(|(key, value)| {
                        original.get(key.as_str()).is_some_and(|before| {
                            !before.is_boolean() && same_type(before, value) && before != *value
                        })
                    })
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                _ => serde_json::Map::new(),
            };
            if corrected.is_empty() {
                return skip(decision, "modified parameters that widen the call");
            }
            decision.modified_params = Some(Value::Object(corrected));
            decision
        }
        RetryAction::Retry | RetryAction::Skip => decision,
    }
}

/// Whether two JSON values are of the same type (a string for a string, a number for a number).
fn same_type(a: &Value, b: &Value) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b)
}

/// What makes two failures the same question for retry-advisor: the tool (for `call-agent`,
/// the agent called), the error kind and the retry count.
fn same_failure(call: &ToolCall, error: &ToolError, retries: u32) -> String {
    let tool = match call.arguments.get("agent").and_then(Value::as_str) {
        Some(agent) if call.name == "call-agent" => format!("call-agent:{agent}"),
        _ => call.name.clone(),
    };
    json!({"toolName": tool, "errorType": error.kind(), "retryCount": retries}).to_string()
}

/// Asks consistency-checker whether plan.xml and the messages agree (seed 002 §3.3); `None`
/// when the plan is empty (nothing to check) or the advisor gave no valid answer. Each finding
/// is a warning; with `consistency.auto_repair` the findings are applied to plan.xml after a
/// snapshot, and session.json records what changed (`consistencyRepairs`).
///
/// `state`: the session as the caller read it whole, if it did (it is not read again). The
/// advisor gets the session with its most recent messages that fit in its context (see
/// [`context_room`]) and how many earlier ones were left out (`messagesLeftOut`).
pub async fn check_consistency(
    host: &dyn Host,
    ctx: &ToolContext,
    state: Option<&mut SessionState>,
) -> Option<Checked> {
    let plan = host
        .store()
        .read_recent_async(&ctx.session_id)
        .await
        .ok()?
        .plan;
    if plan.tasks.is_empty() {
        return None;
    }
    let mut read;
    let state = match state {
        Some(state) => state,
        None => {
            read = host.store().read_async(&ctx.session_id).await.ok()?;
            &mut read
        }
    };
    let (session, left_out) = super::compaction::session_within(state, context_room(host));
    let mut arguments = json!({
        "plan": state.plan.to_xml(),
        "session": session,
        "sessionId": ctx.session_id,
    });
    if left_out > 0 {
        arguments["messagesLeftOut"] = json!(left_out);
    }
    let decision: ConsistencyDecision = consult(host, ctx, CONSISTENCY_CHECKER, arguments)
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
        host.emit(Event::Warning { message });
    }
    if host.config().consistency.auto_repair {
        match repair_plan(host, ctx, &checked.decision).await {
            Ok(repairs) => checked.repairs = repairs,
            Err(e) => {
                let message = format!("the plan could not be repaired: {e}");
                tracing::warn!(session = %ctx.session_id, op = "consistency", result = "error", "{message}");
                host.emit(Event::Warning { message });
            }
        }
    }
    Some(checked)
}

/// How many bytes of conversation a request to the model may carry: half its context, at four
/// bytes a token (the configuration's window, or a smaller one the server told).
pub fn context_room(host: &dyn Host) -> usize {
    let window = host
        .provider()
        .learned_context_window()
        .map_or(host.config().compaction.context_window, |w| {
            w.min(host.config().compaction.context_window)
        });
    usize::try_from(window.saturating_mul(2)).unwrap_or(usize::MAX)
}

/// Applies `decision` to plan.xml under the session lock, after a snapshot of the session as it
/// was; records the changes in session.json. Returns them (none: nothing written).
async fn repair_plan(
    host: &dyn Host,
    ctx: &ToolContext,
    decision: &ConsistencyDecision,
) -> Result<Vec<String>, SessionError> {
    let store = host.store().clone();
    let id = ctx.session_id.clone();
    let decision = decision.clone();
    let repaired = tokio::task::spawn_blocking(move || -> Result<_, SessionError> {
        let mut probe = store.read_recent(&id)?.plan;
        if super::repair(&mut probe, &decision).is_empty() {
            return Ok((Vec::new(), None));
        }
        let snapshot = store.snapshot(&id, Utc::now())?;
        let changes = store.update(&id, Utc::now(), |state| {
            let changes = super::repair(&mut state.plan, &decision);
            if !changes.is_empty() {
                state.session.consistency_repairs.push(
                    crate::protocol::session::ConsistencyRepair {
                        timestamp: Utc::now(),
                        snapshot_id: snapshot.clone(),
                        changes: changes.clone(),
                        extra: Default::default(),
                    },
                );
            }
            Ok(changes)
        })?;
        Ok((changes, Some(snapshot)))
    })
    .await
    .map_err(|e| SessionError::Io {
        path: host.store().dir(&ctx.session_id),
        source: std::io::Error::other(e.to_string()),
    })??;
    let (changes, snapshot) = repaired;
    if !changes.is_empty() {
        let snapshot = snapshot.unwrap_or_default();
        tracing::info!(session = %ctx.session_id, op = "consistency", result = "repaired", snapshot = %snapshot, "plan repaired: {}", changes.join("; "));
        host.emit(Event::Warning {
            message: format!(
                "plan.xml repaired from the consistency check (snapshot {snapshot} holds it as it was): {}",
                changes.join("; ")
            ),
        });
    }
    Ok(changes)
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use pretty_assertions::assert_eq;
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::config::ProviderConfig;
    use crate::permissions::ApprovalMode;

    /// A run whose advisor always gives `answer`; it counts the questions and keeps the events.
    struct FakeHost {
        config: Config,
        store: Store,
        provider: Provider,
        answer: String,
        asked: AtomicUsize,
        events: Mutex<Vec<Event>>,
        cache: Mutex<HashMap<String, Value>>,
    }

    impl FakeHost {
        fn new(store: Store, answer: &str) -> FakeHost {
            let provider = ProviderConfig {
                base_url: Some("http://127.0.0.1:9".into()),
                model: Some("never-asked".into()),
                ..Default::default()
            };
            FakeHost {
                config: Config::default(),
                store,
                provider: Provider::from_config(&provider, &BTreeMap::new()).expect("provider"),
                answer: answer.to_string(),
                asked: AtomicUsize::new(0),
                events: Mutex::new(Vec::new()),
                cache: Mutex::new(HashMap::new()),
            }
        }

        fn events(&self) -> Vec<Event> {
            self.events.lock().expect("events").clone()
        }
    }

    impl Host for FakeHost {
        fn config(&self) -> &Config {
            &self.config
        }

        fn store(&self) -> &Store {
            &self.store
        }

        fn provider(&self) -> &Provider {
            &self.provider
        }

        fn emit(&self, event: Event) {
            self.events.lock().expect("events").push(event);
        }

        fn cached_answer(&self, key: &str) -> Option<Value> {
            self.cache.lock().expect("cache").get(key).cloned()
        }

        fn cache_answer(&self, key: String, value: Value) {
            self.cache.lock().expect("cache").insert(key, value);
        }

        fn run_advisor<'a>(
            &'a self,
            _ctx: &'a ToolContext,
            _advisor: &'a str,
            _input: String,
            _timeout: Duration,
        ) -> BoxFuture<'a, Result<AdvisorAnswer, ToolError>> {
            self.asked.fetch_add(1, Ordering::SeqCst);
            let message = self.answer.clone();
            Box::pin(async move {
                Ok(AdvisorAnswer {
                    status: SessionStatus::Completed,
                    message,
                })
            })
        }

        fn charge_advisor(
            &self,
            _ctx: &ToolContext,
            _tokens: &crate::protocol::TokenUsage,
        ) -> Option<f64> {
            None
        }

        fn afford(&self, _next: &crate::protocol::TokenUsage) -> bool {
            true
        }
    }

    /// A new repository with one `coder` session, its tool context (advisors as given), and a
    /// host whose advisor answers `answer`.
    fn setup(
        dir: &std::path::Path,
        advisors: bool,
        answer: &str,
    ) -> anyhow::Result<(ToolContext, FakeHost)> {
        let root = std::fs::canonicalize(dir)?;
        crate::workspace::init(&root, false, Utc::now())?;
        let store = Store::new(root.join(".nop/sessions"), Duration::from_secs(5));
        let session = store.create("coder", Utc::now())?;
        let ctx = ToolContext {
            policy: crate::permissions::load_policy(&root, "coder")?,
            root,
            session_id: session.session_id,
            store: store.clone(),
            cancel: CancellationToken::new(),
            timeout: Duration::from_secs(10),
            agent: "coder".into(),
            approver: crate::permissions::Approver::headless(ApprovalMode::Never, false),
            sandbox: crate::tools::SandboxSettings::from_config(&Default::default()),
            ancestors: Vec::new(),
            depth: 0,
            agents: None,
            advisors,
            hooks: Default::default(),
            ready: Default::default(),
            output_max_bytes: 30_000,
            events: None,
            outer: Vec::new(),
            run_tools: Default::default(),
        };
        Ok((ctx, FakeHost::new(store, answer)))
    }

    fn failure() -> Value {
        json!({"errorType": "timeout", "toolName": "shell"})
    }

    #[tokio::test]
    async fn with_advisors_off_nobody_is_asked_and_nothing_is_said() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let (ctx, host) = setup(dir.path(), false, "{}")?;
        let result = consult::<RetryDecision>(&host, &ctx, RETRY_ADVISOR, failure()).await;
        assert!(matches!(result, Err(AdvisorError::Off)), "{result:?}");
        assert_eq!(host.asked.load(Ordering::SeqCst), 0);
        assert_eq!(host.events(), Vec::new());
        Ok(())
    }

    #[tokio::test]
    async fn an_answer_that_is_not_json_gives_the_safe_default_and_a_warning() -> anyhow::Result<()>
    {
        let dir = tempfile::tempdir()?;
        let (ctx, host) = setup(dir.path(), true, "I would retry it, yes.")?;
        let result = consult::<RetryDecision>(&host, &ctx, RETRY_ADVISOR, failure()).await;
        assert!(
            matches!(&result, Err(AdvisorError::NotJson { advisor }) if advisor == RETRY_ADVISOR),
            "{result:?}"
        );
        let warning = Event::AdvisorFallback {
            advisor: RETRY_ADVISOR.into(),
            message: "retry-advisor did not answer with a JSON object; using the safe default"
                .into(),
        };
        assert_eq!(host.events(), vec![warning]);
        // Nothing invalid is cached: the same question is asked again.
        let call = ToolCall {
            id: "c1".into(),
            name: "shell".into(),
            arguments: json!({"command": "make"}),
            extra: Default::default(),
        };
        let error = ToolError::model(crate::tools::ToolErrorKind::Timeout, "timed out");
        let decision = advise_retry(&host, &ctx, &call, &error, 0).await;
        assert_eq!(
            decision,
            RetryDecision::default_no_retry("retry-advisor did not answer with a JSON object")
        );
        assert_eq!(host.asked.load(Ordering::SeqCst), 2);
        Ok(())
    }

    #[tokio::test]
    async fn a_valid_answer_is_cached_and_the_same_question_not_asked_twice() -> anyhow::Result<()>
    {
        let dir = tempfile::tempdir()?;
        let answer =
            r#"Sure: {"shouldRetry": true, "reason": "flaky", "suggestedAction": "retry"}"#;
        let (ctx, host) = setup(dir.path(), true, answer)?;
        let first: RetryDecision = consult(&host, &ctx, RETRY_ADVISOR, failure()).await?;
        let second: RetryDecision = consult(&host, &ctx, RETRY_ADVISOR, failure()).await?;
        assert_eq!(first, second);
        assert_eq!(first.suggested_action, RetryAction::Retry);
        assert_eq!(host.asked.load(Ordering::SeqCst), 1);
        // Another question is another call.
        let _: RetryDecision =
            consult(&host, &ctx, RETRY_ADVISOR, json!({"errorType": "other"})).await?;
        assert_eq!(host.asked.load(Ordering::SeqCst), 2);
        assert_eq!(host.events(), Vec::new());
        Ok(())
    }

    fn tool_call(name: &str, arguments: Value) -> ToolCall {
        ToolCall {
            id: "c1".into(),
            name: name.into(),
            arguments,
            extra: Default::default(),
        }
    }

    #[tokio::test]
    async fn a_retry_decision_holds_for_the_same_tool_failing_the_same_way() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let answer =
            r#"{"shouldRetry": false, "reason": "it is not there", "suggestedAction": "skip"}"#;
        let (ctx, host) = setup(dir.path(), true, answer)?;
        let missing = |path: &str| {
            (
                tool_call("read-file", json!({ "path": path })),
                ToolError::model(
                    crate::tools::ToolErrorKind::NotFound,
                    format!("{path}: no such file"),
                ),
            )
        };
        let (call, error) = missing("a.rs");
        let first = advise_retry(&host, &ctx, &call, &error, 0).await;
        assert_eq!(first.suggested_action, RetryAction::Skip);
        // Another path, another message: the same failure of the same tool, not asked again.
        let (call, error) = missing("b.rs");
        assert_eq!(advise_retry(&host, &ctx, &call, &error, 0).await, first);
        assert_eq!(host.asked.load(Ordering::SeqCst), 1);
        // Another kind, another tool, another retry count, another agent called: asked.
        let timeout = ToolError::model(crate::tools::ToolErrorKind::Timeout, "too slow");
        advise_retry(&host, &ctx, &call, &timeout, 0).await;
        let (_, error) = missing("c.rs");
        advise_retry(&host, &ctx, &tool_call("list-files", json!({})), &error, 0).await;
        advise_retry(&host, &ctx, &call, &error, 1).await;
        let failed = ToolError::model(crate::tools::ToolErrorKind::SubagentFailed, "it failed");
        for agent in ["helper", "tester", "helper"] {
            let call = tool_call("call-agent", json!({ "agent": agent, "arguments": {} }));
            advise_retry(&host, &ctx, &call, &failed, 0).await;
        }
        assert_eq!(host.asked.load(Ordering::SeqCst), 6);
        assert_eq!(host.events(), Vec::new());
        Ok(())
    }

    #[tokio::test]
    async fn modified_arguments_and_an_abort_are_never_reused_for_another_call()
    -> anyhow::Result<()> {
        for answer in [
            r#"{"shouldRetry": true, "reason": "typo", "suggestedAction": "modify_params", "modifiedParams": {"path": "a.rs"}}"#,
            r#"{"shouldRetry": false, "reason": "hopeless", "suggestedAction": "abort"}"#,
        ] {
            let dir = tempfile::tempdir()?;
            let (ctx, host) = setup(dir.path(), true, answer)?;
            let error = ToolError::model(crate::tools::ToolErrorKind::NotFound, "no such file");
            for path in ["a.r", "b.r"] {
                let call = tool_call("read-file", json!({ "path": path }));
                advise_retry(&host, &ctx, &call, &error, 0).await;
            }
            assert_eq!(host.asked.load(Ordering::SeqCst), 2, "{answer}");
        }
        Ok(())
    }

    #[tokio::test]
    async fn a_local_models_advisor_never_aborts_nor_widens_a_call() -> anyhow::Result<()> {
        let edit = || {
            tool_call(
                "edit-file",
                json!({"path": "a.rs", "old_string": "x", "new_string": "y", "replace_all": false}),
            )
        };
        let not_unique = ToolError::model(crate::tools::ToolErrorKind::NotUnique, "2 matches");
        // What the advisor answers, and what is followed with the model on a local server.
        let cases = [
            (
                r#"{"shouldRetry": false, "reason": "hopeless", "suggestedAction": "abort"}"#,
                RetryAction::Skip,
                None,
            ),
            (
                r#"{"shouldRetry": true, "reason": "x", "suggestedAction": "modify_params", "modifiedParams": {"replace_all": true}}"#,
                RetryAction::Skip,
                None,
            ),
            (
                r#"{"shouldRetry": true, "reason": "x", "suggestedAction": "modify_params", "modifiedParams": {"old_string": "x;", "count": 3, "replace_all": true, "path": 7}}"#,
                RetryAction::ModifyParams,
                Some(json!({"old_string": "x;"})),
            ),
            (
                r#"{"shouldRetry": true, "reason": "x", "suggestedAction": "modify_params", "modifiedParams": "raw"}"#,
                RetryAction::Skip,
                None,
            ),
            (
                r#"{"shouldRetry": true, "reason": "flaky", "suggestedAction": "retry"}"#,
                RetryAction::Retry,
                None,
            ),
        ];
        for (answer, action, params) in cases.clone() {
            let dir = tempfile::tempdir()?;
            let (ctx, mut host) = setup(dir.path(), true, answer)?;
            host.config.provider.base_url = Some("http://127.0.0.1:8091/v1".into());
            let decision = advise_retry(&host, &ctx, &edit(), &not_unique, 0).await;
            assert_eq!(decision.suggested_action, action, "{answer}");
            assert_eq!(decision.modified_params, params, "{answer}");
            if action == RetryAction::Skip {
                assert!(
                    decision.reason.contains("advisors.judgement"),
                    "{decision:?}"
                );
            }
            // Trusted (`full`, or OpenAI's own API): followed as answered.
            for (judgement, url) in [
                (Judgement::Full, Some("http://127.0.0.1:8091/v1")),
                (Judgement::Auto, None),
                (Judgement::Auto, Some("https://api.anthropic.com")),
            ] {
                let dir = tempfile::tempdir()?;
                let (ctx, mut host) = setup(dir.path(), true, answer)?;
                host.config.advisors.judgement = judgement;
                host.config.provider.base_url = url.map(str::to_string);
                let decision = advise_retry(&host, &ctx, &edit(), &not_unique, 0).await;
                let answered: RetryDecision = crate::advisors::parse_decision(answer)?;
                assert_eq!(decision, answered, "{answer} {judgement:?} {url:?}");
            }
        }
        // `limited` holds on OpenAI's API too.
        let dir = tempfile::tempdir()?;
        let (ctx, mut host) = setup(dir.path(), true, cases[0].0)?;
        host.config.advisors.judgement = Judgement::Limited;
        let decision = advise_retry(&host, &ctx, &edit(), &not_unique, 0).await;
        assert_eq!(decision.suggested_action, RetryAction::Skip);
        Ok(())
    }

    #[tokio::test]
    async fn an_advisor_the_agent_may_not_call_is_not_asked() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let (ctx, host) = setup(dir.path(), true, "{}")?;
        std::fs::write(
            ctx.root.join(".nop/.permissions/agent-coder.yml"),
            "agent: coder\ntools:\n  allowed: [\"*\"]\n  denied: [\"call-agent:retry-advisor\"]\nfile-access:\n  - pattern: \"**\"\n    access: read\n",
        )?;
        let result = consult::<RetryDecision>(&host, &ctx, RETRY_ADVISOR, failure()).await;
        let Err(error) = &result else {
            panic!("{result:?}")
        };
        let AdvisorError::Denied {
            reason:
                Refusal::Denied {
                    reason,
                    rule: Some(rule),
                },
            ..
        } = error
        else {
            panic!("{error:?}")
        };
        assert_eq!(
            error.to_string(),
            format!("retry-advisor was not consulted: {reason} ({rule})")
        );
        let ask = Refusal::NeedsApproval {
            tool: "call-agent".into(),
            rule: crate::permissions::Source::Floor,
        };
        assert_eq!(
            ask.to_string(),
            "calling `call-agent` needs approval (nop's built-in floor)"
        );
        assert_eq!(host.asked.load(Ordering::SeqCst), 0);
        assert_eq!(ctx.approver.denials().len(), 1);
        let events = host.events();
        assert!(
            matches!(events.as_slice(), [Event::AdvisorFallback { message, .. }]
                if message.starts_with("retry-advisor was not consulted: ")
                    && message.ends_with("; using the safe default")),
            "{events:?}"
        );
        Ok(())
    }
}
