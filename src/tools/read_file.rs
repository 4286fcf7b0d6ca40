//! `read-file`: a text file's contents, whole or a range of lines.

use schemars::JsonSchema;
use serde::Deserialize;

use super::{ToolContext, ToolError, ToolOutput, TypedTool, paths};
use crate::permissions::Access;

pub struct ReadFile;

/// Lines returned when no `limit` is given.
const DEFAULT_LINES: usize = 2000;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFileArgs {
    /// Path of the file, relative to the repository root.
    path: String,
    /// First line to return, counting from 1 (default 1).
    #[serde(default)]
    offset: Option<usize>,
    /// How many lines to return (default 2000).
    #[serde(default)]
    limit: Option<usize>,
}

impl TypedTool for ReadFile {
    type Args = ReadFileArgs;
    const NAME: &'static str = "read-file";
    const DESCRIPTION: &'static str = "Read a text file of the repository. Returns its contents exactly (no line numbers), or a range of lines with offset/limit; says how many lines were left out.";

    async fn run(&self, args: ReadFileArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let path = paths::resolve(ctx, Self::NAME, &args.path, Access::Read).await?;
        let bytes = paths::read_verified(ctx, &path)?;
        if bytes.iter().take(8192).any(|b| *b == 0) {
            return Err(ToolError::model(
                "BinaryFile",
                format!("{} is a binary file", args.path),
            ));
        }
        let text = String::from_utf8_lossy(&bytes);
        let offset = args.offset.unwrap_or(1).max(1);
        let limit = args.limit.unwrap_or(DEFAULT_LINES).max(1);
        let total = text.lines().count();
        if offset == 1 && total <= limit {
            return Ok(ToolOutput::text(text.into_owned()));
        }
        let selected: Vec<&str> = text.lines().skip(offset - 1).take(limit).collect();
        let last = offset - 1 + selected.len();
        let mut content = selected.join("\n");
        content.push_str(&format!(
            "\n[lines {offset}-{last} of {total}; use offset/limit to read more]"
        ));
        Ok(ToolOutput::text(content))
    }
}
