//! `compact`: compacts this session's conversation now (snapshot first), without asking the
//! compression advisor.

use schemars::JsonSchema;
use serde::Deserialize;

use super::{ToolContext, ToolError, ToolOutput, TypedTool};
use crate::tools::ToolErrorKind;

pub struct Compact;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CompactArgs {}

impl TypedTool for Compact {
    type Args = CompactArgs;
    const NAME: &'static str = "compact";
    const MUTATING: bool = false;
    const DESCRIPTION: &'static str = "Compact this conversation now: the full history is kept in a snapshot, and the context keeps the first system message, the first prompt, a summary with the plan's status, and the latest messages.";

    async fn run(&self, _args: CompactArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let Some(agents) = ctx.agents.clone() else {
            return Err(ToolError::model(
                ToolErrorKind::NotAvailable,
                "compaction is not available here",
            ));
        };
        Ok(ToolOutput::text(agents.compact(ctx).await?))
    }
}
