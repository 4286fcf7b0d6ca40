//! `write-file`: creates or replaces a file, atomically.

use schemars::JsonSchema;
use serde::Deserialize;

use super::{ToolContext, ToolError, ToolOutput, TypedTool, paths};

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
    const DESCRIPTION: &'static str = "Create a file or replace its whole contents. For a change to part of an existing file use edit-file instead.";

    async fn run(&self, args: WriteFileArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let path = paths::resolve(&ctx.root, &args.path, paths::Access::Write)?;
        if let Some(parent) = path.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(|e| ToolError::model("WriteFailed", format!("{}: {e}", args.path)))?;
        }
        let existed = path.exists();
        let bytes = args.content.into_bytes();
        let len = bytes.len();
        let target = path.clone();
        tokio::task::spawn_blocking(move || crate::session::write_atomic(&target, &bytes))
            .await
            .map_err(|e| ToolError::Fatal(e.to_string()))?
            .map_err(|e| ToolError::model("WriteFailed", e.to_string()))?;
        let verb = if existed { "replaced" } else { "created" };
        Ok(ToolOutput::text(format!(
            "{verb} {} ({len} bytes)",
            paths::display(&ctx.root, &path)
        )))
    }
}
