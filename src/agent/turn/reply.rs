//! A model's reply taken: its tool calls run (or the calls it wrote as text, recovered), a
//! failed call written as text answered with one correction, an answer that only describes a
//! change after a failure answered with one nudge, or the answer that ends the turns.

use chrono::Utc;

use super::text_calls::{self, TextCalls};
use super::watch::{self, Watch};
use super::{EventSink, ModelAgent, TurnStats, answer};
use crate::agent::conversation::Conversation;
use crate::agent::{AgentResponse, AgentStatus, Interrupted};
use crate::protocol::events::Event;
use crate::protocol::{Message, Role, TokenUsage};
use crate::providers::{ModelResponse, ToolSpec};
use crate::tools::{ToolContext, ToolError};

/// Where a drive's replies go: its conversation, context, events and the tools on offer.
pub(super) struct At<'a> {
    pub conversation: &'a Conversation,
    pub ctx: &'a ToolContext,
    pub events: &'a EventSink,
    pub specs: &'a [ToolSpec],
}

impl ModelAgent {
    /// Takes `reply` (to the conversation `sent`, which cost `cost`): the run's answer when
    /// the turns end here, `None` to go on.
    pub(super) async fn take_reply(
        &self,
        reply: ModelResponse,
        cost: Option<f64>,
        sent: &[Message],
        at: &At<'_>,
        stats: &mut TurnStats,
        watch: &mut Watch,
    ) -> Result<Option<Result<AgentResponse, Interrupted>>, ToolError> {
        let usage = (reply.usage, cost);
        let recovered = std::mem::take(&mut watch.recovered);
        if let Some(why) = watch.failed.take()
            && !watch.corrected
        {
            watch.corrected = true;
            let told = format!(
                "[nop] Your reply looks like a tool call written as text, but it cannot be run: {why}. Call the tool again with the tool-calling format, or reply with only {{\"name\": \"TOOL\", \"arguments\": {{…}}}} (arguments as its parameters say). If you meant to give your final answer, write it as plain text."
            );
            let said = "a reply looked like a failed tool call";
            self.again(reply, usage, told, at, said).await?;
            return Ok(None);
        }
        watch.corrected = false;
        let mut assistant = Message::new(Role::Assistant, reply.text.clone(), Utc::now());
        assistant.tool_calls = reply.tool_calls.clone();
        assistant.recovered_from_text = recovered.then_some(true);
        if reply.tool_calls.is_empty() {
            if let Some((told, why)) = self.nudge_for(&reply.text, sent, at.specs, watch) {
                self.again(reply, usage, format!("[nop] {told}"), at, why)
                    .await?;
                return Ok(None);
            }
            at.conversation.push_answer(assistant, usage).await?;
            return Ok(Some(Ok(answer(AgentStatus::Completed, reply.text))));
        }
        at.conversation.push(vec![assistant], Some(usage)).await?;
        let outcome = self
            .run_calls(
                &reply.tool_calls,
                at.conversation,
                at.ctx,
                at.events,
                stats,
                watch,
            )
            .await?;
        Ok(outcome.ends_the_turns())
    }

    /// The nudge (what the model is told, why for the user) an answer with no tool calls gets
    /// when a small model's habit makes it no answer (`provider.text_tool_calls`): empty (once
    /// in a drive), or, once in a drive for either, a change described right after a failure,
    /// or a change claimed or described when the tools changed nothing since the user asked
    /// (for an agent offered a tool that can change something: not an advisor that reads).
    fn nudge_for(
        &self,
        text: &str,
        sent: &[Message],
        specs: &[ToolSpec],
        watch: &mut Watch,
    ) -> Option<(&'static str, &'static str)> {
        if !self.text_tool_calls {
            return None;
        }
        if text.trim().is_empty() {
            if watch.told_empty {
                return None;
            }
            watch.told_empty = true;
            return Some((watch::EMPTY, "the model's reply was empty"));
        }
        if watch.nudged {
            return None;
        }
        let told = if watch::after_a_failure(sent) && watch::describes_a_change(text) {
            let why = "the answer described a change after a failure without making it";
            (watch::NUDGE, why)
        } else if !specs.iter().any(|spec| self.may_change(&spec.name))
            || !watch::changed_nothing(sent, |name| self.may_change(name))
        {
            return None;
        } else if watch::claims_a_change(text) {
            let why = "the answer claimed a change the tools did not make";
            (watch::UNCHANGED, why)
        } else if watch::describes_a_change(text) {
            let why = "the answer described a change without making it";
            (watch::DESCRIBED, why)
        } else {
            return None;
        };
        watch.nudged = true;
        Some(told)
    }

    /// Whether a call of the tool `name` may change files: a mutating tool (an unknown one
    /// too), or `call-agent`, whose subagent's own calls make the changes.
    fn may_change(&self, name: &str) -> bool {
        name == "call-agent"
            || self
                .registry
                .get(name)
                .is_none_or(|tool| tool.is_mutating())
    }

    /// Before `reply` is counted (a front end shows a reply's text when it is): a reply that is
    /// tool calls written as text made those calls (the text void, told as `TextWasCalls`), or
    /// one that looks like a call that cannot run noted in `watch`.
    pub(super) fn read_text_calls(
        &self,
        reply: &mut ModelResponse,
        at: &At<'_>,
        watch: &mut Watch,
    ) {
        if !reply.tool_calls.is_empty() || !self.text_tool_calls {
            return;
        }
        match text_calls::recover(&reply.text, at.specs) {
            TextCalls::Calls(calls) => {
                tracing::info!(session = %at.ctx.session_id, op = "model", result = "text_tool_calls", calls = calls.len(), "the reply's text was taken as tool calls");
                let _ = at.events.send(Event::TextWasCalls {
                    calls: calls.len() as u32,
                });
                (reply.tool_calls, watch.recovered) = (calls, true);
                reply.text.clear();
            }
            TextCalls::Failed(why) => watch.failed = Some(why),
            TextCalls::Answer => {}
        }
    }

    /// Records `reply` as the model gave it and `told` as the next input (the user sees `why`
    /// as a warning): the turns go on.
    async fn again(
        &self,
        reply: ModelResponse,
        usage: (TokenUsage, Option<f64>),
        told: String,
        at: &At<'_>,
        why: &str,
    ) -> Result<(), ToolError> {
        tracing::info!(session = %at.ctx.session_id, op = "model", result = "told_again", "{why}");
        let _ = at.events.send(Event::Warning {
            message: format!("{why}: the model is told and the run goes on"),
        });
        let now = Utc::now();
        let messages = vec![
            Message::new(Role::Assistant, reply.text, now),
            Message::new(Role::User, told, now),
        ];
        at.conversation.push(messages, Some(usage)).await
    }
}
