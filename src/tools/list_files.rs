//! `list-files`: the repository's files, .gitignore respected.

use ignore::WalkBuilder;
use ignore::overrides::OverrideBuilder;
use schemars::JsonSchema;
use serde::Deserialize;

use super::{ToolContext, ToolError, ToolOutput, TypedTool, paths};
use crate::permissions::Access;
use crate::tools::ToolErrorKind;

pub struct ListFiles;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListFilesArgs {
    /// Directory to list, relative to the repository root (default: the root).
    #[serde(default)]
    path: Option<String>,
    /// Only files matching this glob, e.g. `**/*.rs`.
    #[serde(default)]
    glob: Option<String>,
    /// At most this many paths (default 500).
    #[serde(default)]
    limit: Option<usize>,
}

/// A walker over `dir` that respects .gitignore (also outside git repositories), shows hidden
/// files but never `.git/` or nop's own sessions and logs, and applies an optional glob.
pub(super) fn walker(
    ctx: &ToolContext,
    dir: &std::path::Path,
    glob: Option<&str>,
) -> Result<ignore::Walk, ToolError> {
    let mut builder = WalkBuilder::new(dir);
    builder
        .hidden(false)
        .require_git(false)
        .sort_by_file_name(|a, b| a.cmp(b));
    let mut overrides = OverrideBuilder::new(&ctx.root);
    for never in [
        "!.git/",
        "!.nop/sessions/",
        "!.nop/logs/",
        "!.nop/.permissions/",
    ] {
        overrides.add(never).map_err(ToolError::fatal_from)?;
    }
    if let Some(glob) = glob {
        overrides.add(glob).map_err(|e| {
            ToolError::model(
                ToolErrorKind::InvalidArguments,
                format!("glob `{glob}`: {e}"),
            )
        })?;
    }
    builder.overrides(
        overrides
            .build()
            .map_err(|e| ToolError::model(ToolErrorKind::InvalidArguments, e.to_string()))?,
    );
    // Never show what the agent may not read (denied, or needing approval).
    let policy = ctx.policy.clone();
    builder.filter_entry(move |entry| {
        policy
            .check_resolved(entry.path(), Access::Read)
            .is_allowed()
    });
    Ok(builder.build())
}

impl TypedTool for ListFiles {
    type Args = ListFilesArgs;
    const NAME: &'static str = "list-files";
    const MUTATING: bool = false;
    const PARALLEL: bool = true;
    const DESCRIPTION: &'static str = "List the repository's files (recursively, .gitignore respected), optionally under a directory and matching a glob.";

    async fn run(&self, args: ListFilesArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let dir = paths::resolve(
            ctx,
            Self::NAME,
            args.path.as_deref().unwrap_or("."),
            crate::permissions::Access::Read,
        )
        .await?;
        let limit = args.limit.unwrap_or(500).max(1);
        let mut found = Vec::new();
        let mut more = 0usize;
        for entry in walker(ctx, &dir, args.glob.as_deref())?.flatten() {
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                continue;
            }
            if found.len() < limit {
                found.push(paths::display(&ctx.root, entry.path()));
            } else {
                more += 1;
            }
        }
        if found.is_empty() {
            return Ok(ToolOutput::text("no files"));
        }
        let mut content = found.join("\n");
        if more > 0 {
            content.push_str(&format!("\n[{more} more files not shown]"));
        }
        Ok(ToolOutput::text(content))
    }
}
