//! `read-file`: a text file's contents, whole or a range of lines.

use schemars::JsonSchema;
use serde::Deserialize;

use super::{ToolContext, ToolError, ToolOutput, TypedTool, paths};
use crate::permissions::Access;
use crate::tools::ToolErrorKind;

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
    const MUTATING: bool = false;
    const PARALLEL: bool = true;
    const DESCRIPTION: &'static str = "Read a text file of the repository. Returns its contents exactly (no line numbers), or a range of lines with offset/limit; says how many lines were left out.";

    async fn run(&self, args: ReadFileArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let path = paths::resolve(ctx, Self::NAME, &args.path, Access::Read).await?;
        let file = paths::open_verified(ctx, &path)?;
        let offset = args.offset.unwrap_or(1).max(1);
        let limit = args.limit.unwrap_or(DEFAULT_LINES).max(1);
        let shown = args.path.clone();
        // Blocking reads off the runtime's threads, so that the call's time limit holds.
        tokio::task::spawn_blocking(move || read_lines(file, &shown, offset, limit))
            .await
            .map_err(ToolError::fatal_from)?
    }
}

/// Lines `offset..offset+limit` of `file`, streamed: memory stays bounded by what is returned,
/// however large the file, and the rest is only counted.
fn read_lines(
    file: std::fs::File,
    shown: &str,
    offset: usize,
    limit: usize,
) -> Result<ToolOutput, ToolError> {
    use std::io::BufRead as _;
    let failed = |e: std::io::Error| {
        ToolError::model(
            ToolErrorKind::of_io(&e, ToolErrorKind::ReadFailed),
            format!("{shown}: {e}"),
        )
    };
    let mut reader = std::io::BufReader::with_capacity(64 * 1024, file);
    if reader
        .fill_buf()
        .map_err(failed)?
        .iter()
        .take(8192)
        .any(|b| *b == 0)
    {
        return Err(ToolError::model(
            ToolErrorKind::BinaryFile,
            format!("{shown} is a binary file"),
        ));
    }
    let mut selected: Vec<u8> = Vec::new();
    let mut total = 0usize;
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = reader.read_until(b'\n', &mut line).map_err(failed)?;
        if n == 0 {
            break;
        }
        total += 1;
        if total >= offset && total < offset + limit {
            selected.extend_from_slice(&line);
        }
    }
    let text = String::from_utf8_lossy(&selected);
    if offset == 1 && total <= limit {
        return Ok(ToolOutput::text(text.into_owned()));
    }
    let mut content = text.trim_end_matches('\n').to_string();
    let last = total.min(offset + limit - 1);
    content.push_str(&format!(
        "\n[lines {offset}-{last} of {total}; use offset/limit to read more]"
    ));
    Ok(ToolOutput::text(content))
}
