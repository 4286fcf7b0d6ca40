//! The turn loop of the model-driven agent: send the conversation and tool specs, stream the
//! reply, run its tool calls, feed the results back, until the model answers without tools
//! (COMPLETED), asks the user (WAITING_INPUT), fails (ERROR) or runs out of turns. A turn's
//! request is here; how its reply is taken in `reply.rs` (tool calls a small model wrote as
//! text in `text_calls.rs`, what the loop watches for over a drive in `watch.rs`); its tool
//! calls are in `calls.rs`.

use futures_util::future::BoxFuture;

mod calls;
mod reply;
mod text_calls;
mod watch;

pub use calls::aborted;

use super::conversation::Conversation;
use super::{AgentResponse, AgentStatus, Interrupted};

use crate::advisors::RetryDecision;
use crate::protocol::events::Event;
use crate::protocol::{Message, Spent, TokenUsage, ToolCall};
use crate::providers::{ChatRequest, Provider, ProviderError, StreamEvent, ToolSpec};
use crate::tools::{Registry, ToolContext, ToolError, ToolErrorKind};

/// Totals the runtime reports.
#[derive(Debug, Default, Clone, Copy)]
pub struct TurnStats {
    pub turns: u32,
    pub tool_calls: u32,
    /// The model requests of this agent's own turns.
    pub spent: Spent,
    /// Milliseconds spent waiting for the model (each request until its reply was whole).
    pub api_ms: u64,
}

pub struct ModelAgent {
    pub provider: Provider,
    pub registry: Registry,
    pub max_turns: u32,
    /// How many calls of one turn may run at once (`agent.max_parallel`).
    pub max_parallel: usize,
    pub output_max_bytes: usize,
    /// Whether a reply that is a tool call written as text is run as that call, and an answer
    /// that only describes a change after a failure is nudged (`provider.text_tool_calls`).
    pub text_tool_calls: bool,
    /// The run around the loop: checkpoints, compaction, retry advice.
    pub run: std::sync::Arc<dyn RunServices>,
}

/// What a checkpoint found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checkpoint {
    Continue,
    /// A stop word arrived: the task ends here.
    Stop(String),
}

/// All the turn loop needs from the run around it (the engine implements it): the loop sees
/// no session bookkeeping, queue or advisor beyond these calls.
pub trait RunServices: Send + Sync {
    /// Between tool calls and before each model request: wait out a pause, then stop on a stop
    /// word or put urgent messages into the conversation.
    fn checkpoint<'a>(
        &'a self,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<Checkpoint, ToolError>>;
    /// Whether something waits that should end the current batch of tool calls.
    fn wants_checkpoint<'a>(&'a self, ctx: &'a ToolContext) -> BoxFuture<'a, bool>;
    /// Whether the conversation needs compacting (the pre-check, then compression-advisor):
    /// the reason, when it does.
    fn wants_compaction<'a>(
        &'a self,
        ctx: &'a ToolContext,
        messages: &'a [Message],
    ) -> BoxFuture<'a, Result<Option<String>, ToolError>>;
    /// Compacts the conversation now: compression-advisor said so, or the model server refused
    /// the prompt as too long. The snapshot id, `None` when nothing could be compacted.
    fn compact_now<'a>(
        &'a self,
        ctx: &'a ToolContext,
        reason: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, ToolError>>;
    /// retry-advisor's decision on a failed call (its safe default when it cannot be asked).
    fn advise_retry<'a>(
        &'a self,
        ctx: &'a ToolContext,
        call: &'a ToolCall,
        error: &'a ToolError,
        retries: u32,
    ) -> BoxFuture<'a, RetryDecision>;
    /// How many retries retry-advisor may ask for, and the pause before each.
    fn retry_limits(&self) -> (u32, std::time::Duration);
    /// Whether retry-advisor is asked about a failure of this kind (`advisors.retry_on`).
    fn worth_a_retry(&self, kind: ToolErrorKind) -> bool;
    /// Adds a request's tokens to the run's total; their cost, `None` when the price is unknown.
    fn charge(&self, tokens: &TokenUsage) -> Option<f64>;
    /// Whether the run's budget allows a request estimated at `next`.
    fn afford(&self, next: &TokenUsage) -> Result<(), super::meter::OverBudget>;
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
        let specs = self.offered(ctx);
        let at = reply::At {
            conversation,
            ctx,
            events,
            specs: &specs,
        };
        let mut watch = watch::Watch::default();
        let mut previous: Option<super::meter::Previous> = None;
        // Whether the last request overflowed the server's context and a compaction followed:
        // a second overflow in a row is the end.
        let mut compacted_for_overflow = false;
        for turn in 1..=self.max_turns {
            if let Checkpoint::Stop(_) = self.run.checkpoint(ctx).await? {
                return Ok(Err(Interrupted));
            }
            let messages = self.compacted(conversation, ctx).await?;
            watch.input(&messages);
            let _ = events.send(Event::TurnStarted { turn });
            stats.turns += 1;
            let estimate = super::meter::estimate_next(previous, &messages, &specs);
            if let Err(over) = self.run.afford(&estimate) {
                tracing::warn!(session = %ctx.session_id, op = "model", result = "over_budget", "{over}");
                return Ok(Ok(answer(AgentStatus::OverBudget, over.to_string())));
            }
            let asked = std::time::Instant::now();
            let sent = self.send(ctx, events, &messages, &specs).await;
            stats.api_ms += asked.elapsed().as_millis() as u64;
            // The run's first write, made while the request went out, is in before anything
            // that follows.
            conversation.settle().await?;
            let mut reply = match sent {
                Ok(reply) => reply,
                Err(ProviderError::Cancelled) => return Ok(Err(Interrupted)),
                Err(e @ ProviderError::ContextOverflow { .. }) if !compacted_for_overflow => {
                    if let Err(ended) = self.after_overflow(ctx, events, &e).await {
                        return Ok(Ok(ended));
                    }
                    compacted_for_overflow = true;
                    previous = None;
                    continue;
                }
                Err(e) => {
                    tracing::error!(op = "model", result = "error", "{e}");
                    return Ok(Ok(answer(AgentStatus::Error, e.to_string())));
                }
            };
            compacted_for_overflow = false;
            self.read_text_calls(&mut reply, &at, &mut watch);
            let cost = self.account(&mut reply, &messages, &specs, stats, events);
            previous = Some(super::meter::Previous {
                tokens: reply.usage,
                messages: messages.len(),
            });
            if let Some(ended) = self
                .take_reply(reply, cost, &messages, &at, stats, &mut watch)
                .await?
            {
                return Ok(ended);
            }
        }
        Ok(Ok(answer(
            AgentStatus::MaxTurns,
            format!(
                "stopped after {} model requests without finishing (--max-turns / agent.max_turns)",
                self.max_turns
            ),
        )))
    }

    /// The tools this agent may call and that have something to act on: only those are
    /// offered (an advisor's permission file names few or none): a denied tool, or one with no
    /// agent, skill or memory to work on, costs tokens and invites a failed call.
    fn offered(&self, ctx: &ToolContext) -> Vec<ToolSpec> {
        self.registry
            .specs_with_work(ctx)
            .into_iter()
            .filter(|spec| {
                !matches!(
                    ctx.policy.check_tool(&spec.name),
                    crate::permissions::Decision::Deny { .. }
                )
            })
            .collect()
    }

    /// The conversation for the next request, compacted first when the cheap pre-check and
    /// then the advisor say so (after load and after every turn).
    async fn compacted(
        &self,
        conversation: &Conversation,
        ctx: &ToolContext,
    ) -> Result<Vec<Message>, ToolError> {
        let messages = conversation.messages().await?;
        match self.run.wants_compaction(ctx, &messages).await {
            Ok(Some(reason)) => {
                // The compaction reads the conversation itself: a long one is in memory once,
                // not twice.
                drop(messages);
                if let Err(e) = self.run.compact_now(ctx, &reason).await {
                    tracing::warn!(session = %ctx.session_id, op = "compact", result = "error", "{e}")
                }
                conversation.messages().await
            }
            Ok(None) => Ok(messages),
            Err(e) => {
                tracing::warn!(session = %ctx.session_id, op = "compact", result = "error", "{e}");
                Ok(messages)
            }
        }
    }

    /// Sends one request, its stream's text and retries told as events.
    async fn send(
        &self,
        ctx: &ToolContext,
        events: &EventSink,
        messages: &[Message],
        specs: &[ToolSpec],
    ) -> Result<crate::providers::ModelResponse, ProviderError> {
        let mut on_event = |event: StreamEvent| {
            let event = match event {
                // What waits for the first request to go out (the run's first file checkpoint)
                // may start: it is recorded while the model thinks.
                StreamEvent::Sending => return ctx.ready.requested(),
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
            messages,
            tools: specs,
            cache_key: Some(&ctx.session_id),
        };
        let reply = self
            .provider
            .complete(request, &ctx.cancel, &mut on_event)
            .await;
        if let Ok(cut) = reply.as_ref().map(crate::providers::ModelResponse::cut)
            && let Some(warning) = cut.map(cut_warning)
        {
            let _ = events.send(Event::Warning { message: warning });
        }
        reply
    }

    /// After the server's context overflowed (`e`): the conversation compacted so the request
    /// can be sent again, or the run's answer saying why it cannot.
    async fn after_overflow(
        &self,
        ctx: &ToolContext,
        events: &EventSink,
        e: &ProviderError,
    ) -> Result<(), AgentResponse> {
        tracing::warn!(session = %ctx.session_id, op = "model", result = "context_overflow", "{e}");
        let compacted = self
            .run
            .compact_now(ctx, "the model server's context overflowed")
            .await;
        let message = match compacted {
            Ok(Some(_)) => {
                let _ = events.send(Event::Warning {
                    message: format!(
                        "{e}; the conversation was compacted and the request is sent again"
                    ),
                });
                return Ok(());
            }
            Ok(None) => format!(
                "{e}; the conversation is too short to compact: shorten the prompt, or use a model with a larger context"
            ),
            Err(why) => format!("{e}; compacting the conversation failed: {why}"),
        };
        Err(answer(AgentStatus::Error, message))
    }

    /// Counts what a reply cost (at nop's estimate, marked so, for a server that reports no
    /// usage: some local ones), charges it to the run and tells it; its cost.
    fn account(
        &self,
        reply: &mut crate::providers::ModelResponse,
        messages: &[Message],
        specs: &[ToolSpec],
        stats: &mut TurnStats,
        events: &EventSink,
    ) -> Option<f64> {
        if reply.usage.input_tokens == 0 && reply.usage.output_tokens == 0 {
            reply.usage = estimated_usage(messages, specs, reply);
        }
        let cost = self.run.charge(&reply.usage);
        stats.spent.record(&reply.usage, cost);
        let _ = events.send(Event::Usage {
            input_tokens: reply.usage.input_tokens,
            output_tokens: reply.usage.output_tokens,
            cache_read_tokens: reply.usage.cache_read_tokens,
            cache_write_tokens: reply.usage.cache_write_tokens,
            estimated: reply.usage.estimated,
            cost_usd: cost,
            run_input_tokens: stats.spent.input_tokens,
            run_output_tokens: stats.spent.output_tokens,
            run_cost_usd: stats.spent.cost_usd,
        });
        cost
    }
}

/// What the user is told of a reply that is not whole.
fn cut_warning(cut: crate::providers::Cut) -> String {
    match cut {
        crate::providers::Cut::Cap => "the model's reply was cut by the output limit (provider.max_tokens, at most an eighth of the server's context) even after it was asked to continue: it is not whole".into(),
        crate::providers::Cut::Repetition => "the model's reply repeated the same text over and over: it was cut after the first copy and is not whole".into(),
    }
}

/// The agent's answer: `status` and its message.
fn answer(status: AgentStatus, message: String) -> AgentResponse {
    AgentResponse { status, message }
}

/// The tokens of a request whose server reported none: the prompt and the answer at four
/// characters a token, nothing cached.
fn estimated_usage(
    messages: &[Message],
    specs: &[ToolSpec],
    reply: &crate::providers::ModelResponse,
) -> TokenUsage {
    let prompt = super::meter::estimate_next(None, messages, specs);
    let calls: usize = reply
        .tool_calls
        .iter()
        .map(|c| c.name.len() + c.arguments.to_string().len())
        .sum();
    TokenUsage {
        input_tokens: prompt.input_tokens,
        output_tokens: ((reply.text.len() + calls) / 4).max(1) as u64,
        cache_read_tokens: 0,
        cache_write_tokens: 0,
        estimated: true,
    }
}
