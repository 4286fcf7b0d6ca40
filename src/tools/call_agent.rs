//! `call-agent`: runs another agent as a subagent (seed 002 §4): its own session recording the
//! caller, permissions narrowed by the caller's, a time limit, and metrics. Its answer or its
//! error comes back to the calling model to judge.

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::{ToolContext, ToolError, ToolOutput, TypedTool};
use crate::tools::ToolErrorKind;

pub struct CallAgent;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CallAgentArgs {
    /// The agent to call, as named in .nop/agents.yml.
    agent: String,
    /// The task for it: a text, or an object of named arguments (sent as JSON).
    arguments: Value,
    /// Seconds before the subagent is stopped (default: subagents.timeout_s, 300).
    #[serde(default)]
    timeout: Option<f64>,
}

impl TypedTool for CallAgent {
    type Args = CallAgentArgs;
    const NAME: &'static str = "call-agent";
    const MUTATING: bool = false;
    const PARALLEL: bool = true;
    const DESCRIPTION: &'static str = "Delegate a task to another agent of this repository (see .nop/agents.yml). It works in its own session with at most your permissions and returns its answer, or an error for you to judge.";

    /// Offered only when there is another agent to call.
    fn has_work(ctx: &ToolContext) -> bool {
        ctx.agents
            .as_ref()
            .is_some_and(|agents| !agents.callable(ctx).is_empty())
    }

    /// The subagent's run keeps its own limits (`timeout`, `subagents.timeout_s`).
    fn time_limit(_args: &Value, configured: Duration) -> super::TimeLimit {
        super::TimeLimit::Own(configured)
    }

    async fn run(&self, args: CallAgentArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let Some(agents) = ctx.agents.clone() else {
            return Err(ToolError::model(
                ToolErrorKind::NotAvailable,
                "agents cannot be called from here",
            ));
        };
        let input = match args.arguments {
            Value::String(text) => text,
            other => format!(
                "Arguments:\n```json\n{}\n```",
                serde_json::to_string_pretty(&other).unwrap_or_default()
            ),
        };
        let timeout = match args.timeout {
            Some(t) if t.is_finite() && t > 0.0 => Some(Duration::from_secs_f64(t.min(86_400.0))),
            Some(t) => {
                return Err(ToolError::model(
                    ToolErrorKind::InvalidArguments,
                    format!("timeout must be positive, not {t}"),
                ));
            }
            None => None,
        };
        let answer = agents.call_agent(ctx, &args.agent, input, timeout).await?;
        Ok(ToolOutput::text(answer))
    }
}
