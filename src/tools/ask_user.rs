//! `ask-user`: puts a question to the user; the run stops and waits for the answer
//! (`nop run --session ID "answer"`, or the next line in interactive mode).

use schemars::JsonSchema;
use serde::Deserialize;

use super::{ToolContext, ToolEffect, ToolError, ToolOutput, TypedTool};
use crate::tools::ToolErrorKind;

pub struct AskUser;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AskUserArgs {
    /// The question, complete enough to answer without reading the conversation.
    question: String,
}

impl TypedTool for AskUser {
    type Args = AskUserArgs;
    const NAME: &'static str = "ask-user";
    const MUTATING: bool = false;
    const DESCRIPTION: &'static str = "Ask the user a question when you need a decision or information only they have. The run pauses until they answer; the answer comes back as this tool's result.";

    async fn run(&self, args: AskUserArgs, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        if args.question.trim().is_empty() {
            return Err(ToolError::model(
                ToolErrorKind::InvalidArguments,
                "the question is empty",
            ));
        }
        Ok(ToolOutput {
            content: String::new(),
            effect: ToolEffect::AskUser(args.question),
            outcome: super::ToolOutcome::default(),
        })
    }
}
