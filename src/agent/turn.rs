//! The turn loop of the model-driven agent: send the conversation and tool specs, stream the
//! reply, run its tool calls, feed the results back, until the model answers without tools
//! (COMPLETED), asks the user (WAITING_INPUT), fails (ERROR) or runs out of turns.

use chrono::Utc;
use serde_json::Value;
use tracing::Instrument;

use super::runtime::Conversation;
use super::{AgentResponse, AgentStatus, Interrupted};
use crate::protocol::events::Event;
use crate::protocol::{Message, Role, ToolCall};
use crate::providers::{ChatRequest, Provider, ProviderError, StreamEvent, ToolSpec};
use crate::tools::orchestrator::{self, Executed};
use crate::tools::{Registry, ToolContext, ToolEffect, ToolError};

/// Totals the runtime reports.
#[derive(Debug, Default, Clone, Copy)]
pub struct TurnStats {
    pub turns: u32,
    pub tool_calls: u32,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

pub struct ModelAgent {
    pub provider: Provider,
    pub registry: Registry,
    pub max_turns: u32,
    pub output_max_bytes: usize,
}

/// Where events go; a closed receiver is not an error (the front end may have gone).
pub type EventSink = tokio::sync::mpsc::UnboundedSender<Event>;

impl ModelAgent {
    /// Works on the conversation until the agent has an answer.
    pub async fn respond(
        &self,
        conversation: &Conversation,
        ctx: &ToolContext,
        events: &EventSink,
        stats: &mut TurnStats,
    ) -> Result<Result<AgentResponse, Interrupted>, ToolError> {
        let specs: Vec<ToolSpec> = self.registry.specs();
        for turn in 1..=self.max_turns {
            let messages = conversation.messages().await?;
            let _ = events.send(Event::TurnStarted { turn });
            stats.turns = turn;
            let mut on_event = |event: StreamEvent| {
                let event = match event {
                    StreamEvent::Text(delta) => Event::Text { delta },
                    StreamEvent::Retrying {
                        attempt,
                        delay,
                        error,
                    } => Event::Retrying {
                        attempt,
                        delay_ms: delay.as_millis() as u64,
                        error,
                    },
                };
                let _ = events.send(event);
            };
            let request = ChatRequest {
                messages: &messages,
                tools: &specs,
            };
            let reply = match self
                .provider
                .complete(request, &ctx.cancel, &mut on_event)
                .await
            {
                Ok(reply) => reply,
                Err(ProviderError::Cancelled) => return Ok(Err(Interrupted)),
                Err(e) => {
                    tracing::error!(op = "model", result = "error", "{e}");
                    return Ok(Ok(AgentResponse {
                        status: AgentStatus::Error,
                        message: e.to_string(),
                    }));
                }
            };
            stats.input_tokens += reply.input_tokens;
            stats.output_tokens += reply.output_tokens;
            let now = Utc::now();
            let mut assistant = Message::new(Role::Assistant, reply.text.clone(), now);
            assistant.tool_calls = reply.tool_calls.clone();
            conversation
                .push(
                    vec![assistant],
                    Some((reply.input_tokens, reply.output_tokens)),
                )
                .await?;
            if reply.tool_calls.is_empty() {
                return Ok(Ok(AgentResponse {
                    status: AgentStatus::Completed,
                    message: reply.text,
                }));
            }
            match self
                .run_calls(&reply.tool_calls, conversation, ctx, events, stats)
                .await?
            {
                CallsOutcome::Continue => {}
                CallsOutcome::Question(question) => {
                    return Ok(Ok(AgentResponse {
                        status: AgentStatus::WaitingInput,
                        message: question,
                    }));
                }
                CallsOutcome::Interrupted => return Ok(Err(Interrupted)),
            }
        }
        Ok(Ok(AgentResponse {
            status: AgentStatus::Error,
            message: format!(
                "stopped after {} model requests without finishing (--max-turns / agent.max_turns); continue with `nop run --session ID`",
                self.max_turns
            ),
        }))
    }

    async fn run_calls(
        &self,
        calls: &[ToolCall],
        conversation: &Conversation,
        ctx: &ToolContext,
        events: &EventSink,
        stats: &mut TurnStats,
    ) -> Result<CallsOutcome, ToolError> {
        let mut question = None;
        for (i, call) in calls.iter().enumerate() {
            if ctx.cancel.is_cancelled() {
                conversation
                    .push(
                        aborted(&calls[i..], "aborted by user before it started"),
                        None,
                    )
                    .await?;
                return Ok(CallsOutcome::Interrupted);
            }
            if question.is_some() {
                let skipped = orchestrator::record(
                    ctx,
                    call,
                    Executed {
                        result: Err(ToolError::model(
                            "Skipped",
                            "not run: the agent asked the user a question first; call it again after the answer",
                        )),
                        duration: Default::default(),
                    },
                    self.output_max_bytes,
                )?;
                conversation
                    .push(skipped.into_iter().collect(), None)
                    .await?;
                continue;
            }
            let _ = events.send(Event::ToolCall {
                id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            });
            stats.tool_calls += 1;
            let span = tracing::info_span!("tool", session = %ctx.session_id, tool = %call.name, call = %call.id);
            let executed = orchestrator::execute(&self.registry, call, ctx)
                .instrument(span)
                .await;
            let was_aborted = matches!(executed.result, Err(ToolError::Aborted));
            if let Ok(output) = &executed.result
                && let ToolEffect::AskUser(q) = &output.effect
            {
                question = Some(q.clone());
            }
            let ok = executed.result.is_ok();
            let duration_ms = executed.duration.as_millis() as u64;
            tracing::info!(session = %ctx.session_id, op = "tool", tool = %call.name, result = if ok { "ok" } else { "error" }, duration_ms, "tool call");
            let message = orchestrator::record(ctx, call, executed, self.output_max_bytes)?;
            if let Some(message) = message {
                let _ = events.send(Event::ToolResult {
                    id: call.id.clone(),
                    name: call.name.clone(),
                    ok,
                    duration_ms,
                    output: message.content.chars().take(2000).collect(),
                });
                conversation.push(vec![message], None).await?;
            }
            if was_aborted {
                conversation
                    .push(
                        aborted(&calls[i + 1..], "aborted by user before it started"),
                        None,
                    )
                    .await?;
                return Ok(CallsOutcome::Interrupted);
            }
        }
        Ok(match question {
            Some(q) => CallsOutcome::Question(q),
            None => CallsOutcome::Continue,
        })
    }
}

enum CallsOutcome {
    Continue,
    Question(String),
    Interrupted,
}

/// Tool messages that close calls which will never run, so the transcript stays well-formed.
pub fn aborted(calls: &[ToolCall], why: &str) -> Vec<Message> {
    let now = Utc::now();
    calls
        .iter()
        .map(|call| {
            let mut m = Message::new(Role::Tool, format!("error (Aborted): {why}"), now);
            m.tool_call = Some(call.clone());
            m.extra.insert("isError".into(), Value::Bool(true));
            m.extra.insert("errorType".into(), Value::from("Aborted"));
            m
        })
        .collect()
}
