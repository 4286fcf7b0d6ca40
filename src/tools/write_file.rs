//! `write-file`: creates or replaces a file, atomically.

use schemars::JsonSchema;
use serde::Deserialize;

use super::{ToolContext, ToolError, ToolOutput, TypedTool, paths};
use crate::permissions::Access;

pub struct WriteFile;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteFileArgs {
    /// Path of the file, relative to the repository root; missing directories are created.
    path: String,
    /// The whole new contents of the file.
    content: String,
}

impl TypedTool for WriteFile {
    type Args = WriteFileArgs;
    const NAME: &'static str = "write-file";
    const MUTATING: bool = true;
    const DESCRIPTION: &'static str = "Create a file or replace its whole contents. For a change to part of an existing file use edit-file instead.";

    async fn run(&self, args: WriteFileArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let path = paths::resolve(ctx, Self::NAME, &args.path, Access::Write).await?;
        let existed = path.exists();
        let bytes = args.content.into_bytes();
        let len = bytes.len();
        paths::write_verified_async(ctx, &path, bytes).await?;
        let verb = if existed { "replaced" } else { "created" };
        Ok(ToolOutput::text(format!(
            "{verb} {} ({len} bytes)",
            paths::display(&ctx.root, &path)
        )))
    }
}
