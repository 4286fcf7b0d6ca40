//! `search-files`: a regular expression over the repository's text files, .gitignore respected.

use schemars::JsonSchema;
use serde::Deserialize;

use super::{ToolContext, ToolError, ToolOutput, TypedTool, paths};
use crate::tools::ToolErrorKind;

pub struct SearchFiles;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchFilesArgs {
    /// A regular expression (Rust regex syntax), matched against each line.
    pattern: String,
    /// Directory or file to search, relative to the repository root (default: the root).
    #[serde(default)]
    path: Option<String>,
    /// Only files matching this glob, e.g. `*.rs`.
    #[serde(default)]
    glob: Option<String>,
    /// At most this many matching lines (default 200).
    #[serde(default)]
    limit: Option<usize>,
}

impl TypedTool for SearchFiles {
    type Args = SearchFilesArgs;
    const NAME: &'static str = "search-files";
    const MUTATING: bool = false;
    const PARALLEL: bool = true;
    const DESCRIPTION: &'static str = "Search the repository's files for a regular expression; returns `path:line: text` for each matching line.";

    async fn run(&self, args: SearchFilesArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let regex = regex::Regex::new(&args.pattern).map_err(|e| {
            ToolError::model(ToolErrorKind::InvalidArguments, format!("pattern: {e}"))
        })?;
        let dir = paths::resolve(
            ctx,
            Self::NAME,
            args.path.as_deref().unwrap_or("."),
            crate::permissions::Access::Read,
        )
        .await?;
        let limit = args.limit.unwrap_or(200).max(1);
        let walk = super::list_files::walker(ctx, &dir, args.glob.as_deref())?;
        let root = ctx.root.clone();
        let cancel = ctx.cancel.clone();
        let (hits, more) = tokio::task::spawn_blocking(move || {
            let mut hits = Vec::new();
            let mut more = 0usize;
            for entry in walk.flatten() {
                if cancel.is_cancelled() {
                    break;
                }
                if !entry.file_type().is_some_and(|t| t.is_file()) {
                    continue;
                }
                let Ok(bytes) = std::fs::read(entry.path()) else {
                    continue;
                };
                if bytes.iter().take(8192).any(|b| *b == 0) {
                    continue;
                }
                let text = String::from_utf8_lossy(&bytes);
                for (n, line) in text.lines().enumerate() {
                    if regex.is_match(line) {
                        if hits.len() < limit {
                            let line: String = line.chars().take(300).collect();
                            hits.push(format!(
                                "{}:{}: {line}",
                                paths::display(&root, entry.path()),
                                n + 1
                            ));
                        } else {
                            more += 1;
                        }
                    }
                }
            }
            (hits, more)
        })
        .await
        .map_err(ToolError::fatal_from)?;
        if ctx.cancel.is_cancelled() {
            return Err(ToolError::aborted());
        }
        if hits.is_empty() {
            return Ok(ToolOutput::text("no matches"));
        }
        let mut content = hits.join("\n");
        if more > 0 {
            content.push_str(&format!(
                "\n[{more} more matches not shown; narrow the pattern, path or glob]"
            ));
        }
        Ok(ToolOutput::text(content))
    }
}
