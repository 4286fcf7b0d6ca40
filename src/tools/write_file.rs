//! `write-file`: creates or replaces a file, atomically.

use schemars::JsonSchema;
use serde::Deserialize;

use super::{FileChange, ToolContext, ToolEffect, ToolError, ToolOutput, TypedTool, paths};
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
        let preview = TypedTool::preview(self, &args, ctx);
        let path =
            paths::resolve_previewing(ctx, Self::NAME, &args.path, Access::Write, preview).await?;
        let existed = path.exists();
        // What it held, for the diff a front end shows: as the approval preview reads it (none
        // for a file the rules keep from reading, over 1 MiB, or not text).
        let before = if existed {
            paths::current_text(ctx, &args.path)
                .await
                .and_then(|(_, text)| text)
        } else {
            None
        };
        let len = args.content.len();
        paths::write_verified_async(ctx, &path, args.content.clone().into_bytes()).await?;
        let verb = if existed { "replaced" } else { "created" };
        let shown = paths::display(&ctx.root, &path);
        Ok(ToolOutput {
            content: format!("{verb} {shown} ({len} bytes)"),
            outcome: super::ToolOutcome {
                paths_written: vec![shown.clone()],
                ..Default::default()
            },
            effect: ToolEffect::FileChanged(FileChange {
                path: shown,
                before,
                after: args.content,
            }),
        })
    }

    async fn preview(&self, args: &WriteFileArgs, ctx: &ToolContext) -> Option<FileChange> {
        let (path, before) = paths::current_text(ctx, &args.path).await?;
        Some(FileChange {
            path: paths::display(&ctx.root, &path),
            before,
            after: args.content.clone(),
        })
    }
}
