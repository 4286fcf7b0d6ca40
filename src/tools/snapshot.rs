//! `snapshot`: an immutable snapshot of the session as it is now.

use chrono::Utc;
use schemars::JsonSchema;
use serde::Deserialize;

use super::{ToolContext, ToolError, ToolOutput, TypedTool};

pub struct Snapshot;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SnapshotArgs {}

impl TypedTool for Snapshot {
    type Args = SnapshotArgs;
    const NAME: &'static str = "snapshot";
    const MUTATING: bool = false;
    const DESCRIPTION: &'static str = "Save an immutable snapshot of this session (messages and plan) that the user can fork from later, e.g. before a risky change.";

    async fn run(&self, _args: SnapshotArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let snapshot = ctx
            .store
            .snapshot_async(&ctx.session_id, Utc::now())
            .await?;
        Ok(ToolOutput::text(format!(
            "snapshot {snapshot} saved; fork from it with `nop fork {} --snapshot {snapshot}`",
            ctx.session_id
        )))
    }
}
