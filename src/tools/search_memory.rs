//! `search-memory`: the agent looks things up in its long-term memory (seed 001 §2.3).

use schemars::JsonSchema;
use serde::Deserialize;

use super::{ToolContext, ToolError, ToolOutput, TypedTool};
use crate::tools::ToolErrorKind;

pub struct SearchMemory;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchMemoryArgs {
    /// Keywords and/or a date expression: "权限 上周", "sandbox last week", "2026-11-03", "昨天".
    query: String,
    /// Search every agent's memory instead of only your own.
    #[serde(default)]
    all_agents: bool,
}

impl TypedTool for SearchMemory {
    type Args = SearchMemoryArgs;
    const NAME: &'static str = "search-memory";
    const MUTATING: bool = false;
    const PARALLEL: bool = true;
    const DESCRIPTION: &'static str = "Search the summaries of earlier days' sessions of this repository (long-term memory) by keywords and dates (Chinese or English). Returns matching days with their summaries, best first.";

    /// Offered only when some agent has a memory (`nop memory summarize` made one).
    fn has_work(ctx: &ToolContext) -> bool {
        !crate::memory::MemoryStore::new(&ctx.nop_dir())
            .agents()
            .is_empty()
    }

    async fn run(
        &self,
        args: SearchMemoryArgs,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let store = crate::memory::MemoryStore::new(&ctx.nop_dir());
        let today = chrono::Local::now().date_naive();
        let agent = (!args.all_agents).then_some(ctx.agent.as_str());
        let hits = store
            .search(agent, &args.query, today)
            .map_err(|e| ToolError::model(ToolErrorKind::MemoryError, e.to_string()))?;
        if hits.is_empty() {
            return Ok(ToolOutput::text("no memory matches"));
        }
        Ok(ToolOutput::text(crate::memory::context(
            &hits.into_iter().take(10).collect::<Vec<_>>(),
        )))
    }
}
