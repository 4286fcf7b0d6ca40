//! A turn's tool calls: run in batches (what may run at once runs together), each recorded
//! before it is shown, a failed one retried or given up on the retry-advisor's word, the turn
//! ended by a question, an interrupt, a checkpoint between calls or the advisor.

use chrono::Utc;
use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use serde_json::Value;
use tracing::Instrument;

use super::watch::Watch;
use super::{EventSink, ModelAgent, TurnStats, answer};
use crate::advisors::RetryAction;
use crate::agent::conversation::Conversation;
use crate::agent::{AgentResponse, AgentStatus, Interrupted};
use crate::protocol::events::Event;
use crate::protocol::{Message, Role, ToolCall};
use crate::tools::orchestrator::{self, Executed};
use crate::tools::{ToolContext, ToolEffect, ToolError, ToolErrorKind};

impl ModelAgent {
    pub(super) async fn run_calls(
        &self,
        calls: &[ToolCall],
        conversation: &Conversation,
        ctx: &ToolContext,
        events: &EventSink,
        stats: &mut TurnStats,
        watch: &mut Watch,
    ) -> Result<CallsOutcome, ToolError> {
        // The run's first file checkpoint, recorded while the model answered, comes first.
        ctx.ready.wait().await;
        let mut left = Left {
            question: None,
            watch,
        };
        let mut i = 0;
        while i < calls.len() {
            if ctx.cancel.is_cancelled() {
                conversation
                    .push(
                        aborted(&calls[i..], "aborted by user before it started"),
                        None,
                    )
                    .await?;
                return Ok(CallsOutcome::Interrupted);
            }
            if left.question.is_some() {
                self.skip_after_question(&calls[i], conversation, ctx)
                    .await?;
                i += 1;
                continue;
            }
            // Calls that may run at once (reads, searches, call-agent) run together, at most
            // `agent.max_parallel` at a time; their results are recorded in the order of the
            // calls. Any other call runs alone.
            let end = self.batch_end(calls, i);
            let (interrupted, stop) = self
                .run_batch(&calls[i..end], conversation, ctx, events, stats, &mut left)
                .await?;
            i = end;
            if let Some(outcome) = self
                .after_batch(&calls[i..], interrupted, stop, conversation, ctx)
                .await?
            {
                return Ok(outcome);
            }
            if let Some(why) = left.watch.repeated.take() {
                let not_run = "not run: the run ended, the same call was made again and again";
                conversation
                    .push(aborted(&calls[i..], not_run), None)
                    .await?;
                return Ok(CallsOutcome::Repeated(why));
            }
        }
        Ok(match left.question {
            Some(q) => CallsOutcome::Question(q),
            None => CallsOutcome::Continue,
        })
    }

    /// Records `call` as not run: the agent asked the user a question before it.
    async fn skip_after_question(
        &self,
        call: &ToolCall,
        conversation: &Conversation,
        ctx: &ToolContext,
    ) -> Result<(), ToolError> {
        let skipped = record(
            ctx,
            call,
            Executed {
                result: Err(ToolError::model(
                    ToolErrorKind::Skipped,
                    "not run: the agent asked the user a question first; call it again after the answer",
                )),
                duration: Default::default(),
            },
            self.output_max_bytes,
        )
        .await?;
        conversation
            .push(skipped.into_iter().map(|r| r.message).collect(), None)
            .await
    }

    /// Runs the calls of `batch` together and records each in order; whether the user
    /// interrupted one, and the retry-advisor's reason to stop, if it gave one. A question a
    /// call asked goes to `left`.
    async fn run_batch(
        &self,
        batch: &[ToolCall],
        conversation: &Conversation,
        ctx: &ToolContext,
        events: &EventSink,
        stats: &mut TurnStats,
        left: &mut Left<'_>,
    ) -> Result<(bool, Option<String>), ToolError> {
        for call in batch {
            let _ = events.send(Event::ToolCall {
                id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            });
            stats.tool_calls += 1;
        }
        let pending: Vec<BoxFuture<'_, Ran>> = batch
            .iter()
            .map(|call| Box::pin(self.execute(call, ctx)) as BoxFuture<'_, _>)
            .collect();
        let mut runs = futures_util::stream::iter(pending).buffered(self.max_parallel.max(1));
        let (mut interrupted, mut stop) = (false, None);
        for call in batch {
            let Some(ran) = runs.next().await else { break };
            let (executed, abort) = ran?;
            interrupted |= matches!(executed.result, Err(ToolError::Aborted { .. }));
            stop = stop.or(abort);
            self.record_one(call, executed, conversation, ctx, events, left)
                .await?;
        }
        Ok((interrupted, stop))
    }

    /// Records one call's result, then shows it (what the user saw is in session.json even if
    /// nop is killed right then); a question it asked goes to `left`, and a call made again
    /// and again with the same result is named in it (`left.watch`).
    async fn record_one(
        &self,
        call: &ToolCall,
        mut executed: Executed,
        conversation: &Conversation,
        ctx: &ToolContext,
        events: &EventSink,
        left: &mut Left<'_>,
    ) -> Result<(), ToolError> {
        name_a_repeat(call, &mut executed, left.watch);
        let question = &mut left.question;
        // What the front end shows is taken out, not copied (a file's text twice); a question
        // stays, since recording the call looks at it.
        let (mut change, mut plan_changed) = (None, None);
        if let Ok(output) = &mut executed.result {
            match std::mem::replace(&mut output.effect, ToolEffect::None) {
                ToolEffect::AskUser(q) => {
                    *question = Some(q.clone());
                    output.effect = ToolEffect::AskUser(q);
                }
                ToolEffect::FileChanged(c) => change = Some(c),
                ToolEffect::PlanChanged(plan) => plan_changed = Some(plan),
                ToolEffect::None => {}
            }
        }
        let ok = executed.result.is_ok();
        let duration_ms = executed.duration.as_millis() as u64;
        tracing::info!(session = %ctx.session_id, op = "tool", tool = %call.name, result = if ok { "ok" } else { "error" }, duration_ms, "tool call");
        let recorded = record(ctx, call, executed, self.output_max_bytes).await?;
        if let Some(orchestrator::Recorded { message, outcome }) = recorded {
            let output = shown_output(&message.content);
            conversation.push(vec![message], None).await?;
            let _ = events.send(Event::ToolResult {
                id: call.id.clone(),
                name: call.name.clone(),
                ok,
                duration_ms,
                output,
                change,
                outcome,
            });
            if let Some(plan) = plan_changed {
                let _ = events.send(Event::PlanUpdated { plan });
            }
        }
        Ok(())
    }

    /// After a batch: the calls not yet run (`rest`) closed and the turn ended when the user
    /// interrupted, when a checkpoint between calls wants the turn (a stop word, a
    /// high-priority message, a pause: the next turn's checkpoint acts on it), or when the
    /// retry-advisor said to stop; `None` to go on.
    async fn after_batch(
        &self,
        rest: &[ToolCall],
        interrupted: bool,
        stop: Option<String>,
        conversation: &Conversation,
        ctx: &ToolContext,
    ) -> Result<Option<CallsOutcome>, ToolError> {
        let (why, outcome) = if interrupted {
            (
                "aborted by user before it started",
                CallsOutcome::Interrupted,
            )
        } else if !rest.is_empty() && self.run.wants_checkpoint(ctx).await {
            (
                "not run: interrupted by a user message; call it again if still needed",
                CallsOutcome::Continue,
            )
        } else if let Some(reason) = stop {
            (
                "not run: the task was stopped on the advice of retry-advisor",
                CallsOutcome::Aborted(reason),
            )
        } else {
            return Ok(None);
        };
        conversation.push(aborted(rest, why), None).await?;
        Ok(Some(outcome))
    }

    /// The end of the batch of calls that starts at `from`: the calls after it that may run at
    /// once with it, or itself alone.
    fn batch_end(&self, calls: &[ToolCall], from: usize) -> usize {
        let parallel = |call: &ToolCall| {
            self.registry
                .get(&call.name)
                .is_some_and(|tool| tool.runs_in_parallel())
        };
        if !parallel(&calls[from]) {
            return from + 1;
        }
        from + calls[from..].iter().take_while(|c| parallel(c)).count()
    }

    /// Runs one call through the orchestrator, then retry-advisor's retries.
    async fn execute(&self, call: &ToolCall, ctx: &ToolContext) -> Ran {
        let span = tracing::info_span!("tool", session = %ctx.session_id, tool = %call.name, call = %call.id);
        let executed = orchestrator::execute(&self.registry, call, ctx)
            .instrument(span)
            .await;
        self.retry(call, executed, ctx).await
    }
}

/// What the calls of a turn leave: a question one asked, and what the drive watches.
pub(super) struct Left<'w> {
    question: Option<String>,
    watch: &'w mut Watch,
}

/// Adds to a call's result, when the same call gave the same result several times in a row
/// of recent calls, a note that says so ([`Watch::repeat`]).
fn name_a_repeat(call: &ToolCall, executed: &mut Executed, watch: &mut Watch) {
    let content = match &mut executed.result {
        Ok(output) => &mut output.content,
        Err(ToolError::Model { message, .. }) => message,
        Err(_) => return,
    };
    if let Some(note) = watch.repeat(call, content) {
        content.push_str(&note);
    }
}

/// A call as it ran, with retry-advisor's retries, and the reason of an advised abort.
type Ran = Result<(Executed, Option<String>), ToolError>;

pub(super) enum CallsOutcome {
    Continue,
    Question(String),
    Interrupted,
    Aborted(String),
    /// The same call gave the same result too many times: what to say.
    Repeated(String),
}

impl CallsOutcome {
    /// How the run's answer ends here, unless the turns go on.
    pub(super) fn ends_the_turns(self) -> Option<Result<AgentResponse, Interrupted>> {
        match self {
            CallsOutcome::Continue => None,
            CallsOutcome::Question(question) => {
                Some(Ok(answer(AgentStatus::WaitingInput, question)))
            }
            CallsOutcome::Interrupted => Some(Err(Interrupted)),
            CallsOutcome::Aborted(reason) => Some(Ok(answer(
                AgentStatus::Error,
                format!("stopped on the advice of retry-advisor: {reason}"),
            ))),
            CallsOutcome::Repeated(why) => Some(Ok(answer(AgentStatus::RepeatedCall, why))),
        }
    }
}

/// Whether retry-advisor is asked about a failure: a failure of a kind `advisors.retry_on`
/// names (by default every kind but a call not run and an MCP tool's own answer, see
/// [`crate::config::RetryOn`]); never the user's stop or "no", nor a failure that ends the turn.
fn worth_asking(error: &ToolError, asked_about: impl Fn(ToolErrorKind) -> bool) -> bool {
    match error {
        ToolError::Model {
            kind: ToolErrorKind::Declined,
            ..
        } => false,
        ToolError::Model { kind, .. } => asked_about(*kind),
        ToolError::Aborted { .. } | ToolError::Fatal { .. } | ToolError::FatalMessage(_) => false,
    }
}

/// A refused call made again as it was would be refused again, or put the same question to a
/// person who said no: retry-advisor's `retry` of it is not obeyed (its `modify_params` is: the
/// new call is checked afresh).
fn refused(error: &ToolError) -> bool {
    matches!(
        error,
        ToolError::Model {
            kind: ToolErrorKind::PermissionDenied
                | ToolErrorKind::BlockedByHook
                | ToolErrorKind::Declined,
            ..
        }
    )
}

/// `modifiedParams` over the original arguments (a shallow merge of objects, else a replacement).
fn merge_params(original: &Value, modified: Option<&Value>) -> Value {
    match (original, modified) {
        (Value::Object(base), Some(Value::Object(changes))) => {
            let mut merged = base.clone();
            for (k, v) in changes {
                merged.insert(k.clone(), v.clone());
            }
            Value::Object(merged)
        }
        (_, Some(other)) if !other.is_null() => other.clone(),
        (original, _) => original.clone(),
    }
}

impl ModelAgent {
    /// Seed 002 §4.3: on a failed call, ask retry-advisor and obey it (retry, retry with
    /// modified parameters, skip, abort), at most `advisors.max_retries` times, pausing
    /// `advisors.retry_delay_s` between attempts. Every failed attempt is in the error log; the
    /// last outcome is what the model sees. Returns it and, for `abort`, the reason.
    async fn retry(
        &self,
        call: &ToolCall,
        mut executed: Executed,
        ctx: &ToolContext,
    ) -> Result<(Executed, Option<String>), ToolError> {
        if !ctx.advisors {
            return Ok((executed, None));
        }
        let (max_retries, delay) = self.run.retry_limits();
        let mut attempt = call.clone();
        let mut retries = 0;
        while let Err(error) = &executed.result {
            if !worth_asking(error, |kind| self.run.worth_a_retry(kind))
                || retries >= max_retries
                || ctx.cancel.is_cancelled()
            {
                break;
            }
            let decision = self.run.advise_retry(ctx, &attempt, error, retries).await;
            tracing::info!(session = %ctx.session_id, op = "retry", tool = %call.name, action = ?decision.suggested_action, "{}", decision.reason);
            match decision.suggested_action {
                RetryAction::Retry if decision.should_retry && !refused(error) => {}
                RetryAction::ModifyParams
                    if decision.should_retry || decision.modified_params.is_some() =>
                {
                    attempt.arguments =
                        merge_params(&attempt.arguments, decision.modified_params.as_ref());
                }
                RetryAction::Abort => return Ok((executed, Some(decision.reason))),
                _ => break,
            }
            // The failed attempt goes to the blocking pool to be logged and comes back: it stays
            // the outcome if the pause below is cut short.
            let (logged_ctx, logged_call) = (ctx.clone(), attempt.clone());
            executed = tokio::task::spawn_blocking(move || {
                if let Err(error) = &executed.result {
                    orchestrator::log_failure(&logged_ctx, &logged_call, error, executed.duration)?;
                }
                Ok::<_, ToolError>(executed)
            })
            .await
            .map_err(ToolError::fatal("logging a failed call failed"))??;
            // Ctrl-C ends the pause at once; the failure stands.
            tokio::select! {
                () = ctx.cancel.cancelled() => break,
                () = tokio::time::sleep(delay) => {}
            }
            retries += 1;
            executed = orchestrator::execute(&self.registry, &attempt, ctx).await;
        }
        if retries > 0
            && let Ok(output) = &mut executed.result
        {
            let changed = if attempt.arguments != call.arguments {
                format!(" with arguments {}", attempt.arguments)
            } else {
                String::new()
            };
            output.content = format!(
                "[succeeded after {retries} retr{} advised by retry-advisor{changed}]\n{}",
                if retries == 1 { "y" } else { "ies" },
                output.content
            );
        }
        Ok((executed, None))
    }
}

/// [`orchestrator::record`] (it writes the output and error logs) off the async threads.
async fn record(
    ctx: &ToolContext,
    call: &ToolCall,
    executed: Executed,
    output_max_bytes: usize,
) -> Result<Option<orchestrator::Recorded>, ToolError> {
    let (ctx, call) = (ctx.clone(), call.clone());
    tokio::task::spawn_blocking(move || {
        orchestrator::record(&ctx, &call, executed, output_max_bytes)
    })
    .await
    .map_err(ToolError::fatal("recording a tool call failed"))?
}

/// Tool messages that close calls which will never run, so the transcript stays well-formed.
pub fn aborted(calls: &[ToolCall], why: &str) -> Vec<Message> {
    let now = Utc::now();
    calls
        .iter()
        .map(|call| {
            let mut m = Message::new(Role::Tool, format!("error (Aborted): {why}"), now);
            m.tool_call = Some(call.clone());
            m.is_error = Some(true);
            m.error_type = Some("Aborted".to_string());
            m
        })
        .collect()
}

/// A result as a `tool_result` event carries it: whole up to 8,000 bytes; a longer one keeps
/// its first 2,000 and last 4,000 (a command's error and summary are at its end) and, from
/// between, what says why a command failed and how many lines the rest are
/// ([`crate::head_tail::excerpt`]).
fn shown_output(content: &str) -> String {
    crate::head_tail::excerpt(content, 8_000, 2_000, 4_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_result_keeps_its_start_and_its_end() {
        assert_eq!(shown_output("short"), "short");
        let long = format!("{}{}", "a".repeat(5_000), "z".repeat(5_000));
        let shown = shown_output(&long);
        assert!(shown.starts_with(&"a".repeat(2_000)));
        assert!(shown.ends_with(&"z".repeat(4_000)), "{shown}");
        assert!(shown.contains("[… 1 line (4000 bytes) omitted from this view …]"));
    }

    #[test]
    fn modified_params_are_laid_over_the_original_arguments() {
        let original = serde_json::json!({"path": "presnt.txt", "limit": 10});
        let merged = merge_params(&original, Some(&serde_json::json!({"path": "present.txt"})));
        assert_eq!(
            merged,
            serde_json::json!({"path": "present.txt", "limit": 10})
        );
        // Not an object: it replaces the arguments; null or nothing keeps them.
        assert_eq!(
            merge_params(&original, Some(&serde_json::json!("raw"))),
            serde_json::json!("raw")
        );
        assert_eq!(merge_params(&original, Some(&Value::Null)), original);
        assert_eq!(merge_params(&original, None), original);
    }

    #[test]
    fn by_default_every_failed_call_is_worth_asking_retry_advisor_about() {
        let config = crate::config::AdvisorsConfig::default();
        let asked = |kind: ToolErrorKind| config.retries(kind);
        for kind in [
            ToolErrorKind::NotFound,
            ToolErrorKind::InvalidArguments,
            ToolErrorKind::InvalidPath,
            ToolErrorKind::NotUnique,
            ToolErrorKind::PermissionDenied,
            ToolErrorKind::BlockedByHook,
            ToolErrorKind::NotAvailable,
            ToolErrorKind::UnknownTool,
            ToolErrorKind::SandboxUnavailable,
            ToolErrorKind::DepthLimit,
            ToolErrorKind::BinaryFile,
            ToolErrorKind::SubagentFailed,
            ToolErrorKind::Timeout,
            ToolErrorKind::SpawnFailed,
            ToolErrorKind::PluginError,
        ] {
            assert!(
                worth_asking(&ToolError::model(kind, "no"), asked),
                "{kind:?}"
            );
        }
        // Not a failure to judge: a call not run, an MCP tool's own answer (for the model).
        for kind in [ToolErrorKind::Skipped, ToolErrorKind::ToolReportedError] {
            assert!(
                !worth_asking(&ToolError::model(kind, "no"), asked),
                "{kind:?}"
            );
        }
        // The user's stop or "no" (even where `retry_on` names it), and what ends the turn.
        assert!(!worth_asking(&ToolError::aborted(), asked));
        let declined = ToolError::model(ToolErrorKind::Declined, "the user said no");
        assert!(!worth_asking(&declined, asked));
        assert!(!worth_asking(&declined, |_| true));
        assert!(!worth_asking(
            &ToolError::FatalMessage("disk full".into()),
            asked
        ));
        let disk_full = std::io::Error::from(std::io::ErrorKind::StorageFull);
        let unrecorded = ToolError::fatal("recording a tool call failed")(disk_full);
        assert!(!worth_asking(&unrecorded, asked));
    }

    #[test]
    fn retry_on_a_list_asks_only_about_the_kinds_it_names() {
        let config = crate::config::AdvisorsConfig {
            retry_on: crate::config::RetryOn::Kinds(vec!["Timeout".into(), "PluginError".into()]),
            ..Default::default()
        };
        let asked = |kind: ToolErrorKind| config.retries(kind);
        for kind in [ToolErrorKind::Timeout, ToolErrorKind::PluginError] {
            assert!(worth_asking(&ToolError::model(kind, "maybe"), asked));
        }
        for kind in [
            ToolErrorKind::NotFound,
            ToolErrorKind::PermissionDenied,
            ToolErrorKind::InvalidArguments,
        ] {
            assert!(!worth_asking(&ToolError::model(kind, "no"), asked));
        }
    }

    #[test]
    fn a_refused_call_is_never_made_again_unchanged() {
        for kind in [
            ToolErrorKind::PermissionDenied,
            ToolErrorKind::BlockedByHook,
        ] {
            assert!(refused(&ToolError::model(kind, "no")));
        }
        for kind in [ToolErrorKind::NotFound, ToolErrorKind::Timeout] {
            assert!(!refused(&ToolError::model(kind, "no")));
        }
    }

    #[test]
    fn aborted_closes_every_call_with_an_error_result() {
        let calls = vec![
            ToolCall {
                id: "a".into(),
                name: "shell".into(),
                arguments: serde_json::json!({}),
                extra: Default::default(),
            },
            ToolCall {
                id: "b".into(),
                name: "read-file".into(),
                arguments: serde_json::json!({}),
                extra: Default::default(),
            },
        ];
        let closed = aborted(&calls, "stopped");
        assert_eq!(closed.len(), 2);
        for (m, c) in closed.iter().zip(&calls) {
            assert_eq!(m.role, Role::Tool);
            assert_eq!(
                m.tool_call.as_ref().map(|t| t.id.as_str()),
                Some(c.id.as_str())
            );
            assert_eq!(m.error_type.as_deref(), Some("Aborted"));
            assert!(m.content.contains("stopped"));
        }
    }
}
