//! `edit-file`: replaces an exact string in a file; refuses when it is missing or not unique.

use schemars::JsonSchema;
use serde::Deserialize;

use super::{FileChange, ToolContext, ToolEffect, ToolError, ToolOutput, TypedTool, paths};
use crate::permissions::Access;
use crate::tools::ToolErrorKind;

pub struct EditFile;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditFileArgs {
    /// Path of the file, relative to the repository root.
    path: String,
    /// The exact text to replace, whitespace included. It must occur exactly once unless
    /// replace_all is true.
    old_string: String,
    /// The text to put in its place.
    new_string: String,
    /// Replace every occurrence instead of requiring a unique one.
    #[serde(default)]
    replace_all: bool,
}

impl TypedTool for EditFile {
    type Args = EditFileArgs;
    const NAME: &'static str = "edit-file";
    const MUTATING: bool = true;
    const DESCRIPTION: &'static str = "Edit a file in place by replacing an exact string with another. Fails if the string is not found, or is found more than once (give more context to make it unique, or set replace_all).";

    async fn run(&self, args: EditFileArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let preview = TypedTool::preview(self, &args, ctx);
        let path =
            paths::resolve_previewing(ctx, Self::NAME, &args.path, Access::Write, preview).await?;
        args.check()?;
        let bytes = paths::read_verified_async(ctx, &path).await?;
        let text = String::from_utf8(bytes).map_err(|_| {
            ToolError::model(
                ToolErrorKind::BinaryFile,
                format!("{} is not UTF-8 text", args.path),
            )
        })?;
        let (updated, count) = args
            .apply(&text)
            .map_err(|e| args.showing_the_file(e, &text, ctx, &path))?;
        // Through the directory's descriptor, re-checked, as write-file does.
        paths::write_verified_async(ctx, &path, updated.clone().into_bytes()).await?;
        let shown = paths::display(&ctx.root, &path);
        Ok(ToolOutput {
            content: format!(
                "edited {shown}: {count} replacement{}",
                if count == 1 { "" } else { "s" }
            ),
            outcome: super::ToolOutcome {
                paths_written: vec![shown.clone()],
                ..Default::default()
            },
            effect: ToolEffect::FileChanged(FileChange {
                path: shown,
                before: Some(text),
                after: updated,
            }),
        })
    }

    /// The edit as `run` would make it, on the file as it is now (none for a file the rules
    /// deny reading or over [`paths::DIFF_MAX_BYTES`], or an edit that would fail).
    async fn preview(&self, args: &EditFileArgs, ctx: &ToolContext) -> Option<FileChange> {
        args.check().ok()?;
        let (path, before) = paths::current_text(ctx, &args.path).await?;
        let before = before?;
        let (after, _) = args.apply(&before).ok()?;
        Some(FileChange {
            path: paths::display(&ctx.root, &path),
            before: Some(before),
            after,
        })
    }
}

/// Up to this size a file whose text an edit did not find is shown in the error: a small
/// model that guessed old_string without reading the file copies it from there.
const SHOWN_MAX_BYTES: usize = 4096;

impl EditFileArgs {
    /// `error` with the file's `text` after it when old_string was not found, the file is
    /// small and the rules let the agent read it (a write-only path shows nothing).
    fn showing_the_file(
        &self,
        error: ToolError,
        text: &str,
        ctx: &ToolContext,
        path: &std::path::Path,
    ) -> ToolError {
        let readable = matches!(
            ctx.policy.check_resolved(path, Access::Read),
            crate::permissions::Decision::Allow { .. }
        );
        let ToolError::Model {
            kind: ToolErrorKind::NotFound,
            message,
        } = &error
        else {
            return error;
        };
        if !readable || text.len() > SHOWN_MAX_BYTES {
            return error;
        }
        let fence = if text.contains("```") { "~~~~" } else { "```" };
        ToolError::model(
            ToolErrorKind::NotFound,
            format!(
                "{}. Its text now ({} lines):\n{fence}\n{}{}{fence}",
                message,
                text.lines().count(),
                text,
                if text.ends_with('\n') { "" } else { "\n" },
            ),
        )
    }

    /// Refuses arguments that cannot describe an edit.
    fn check(&self) -> Result<(), ToolError> {
        if self.old_string.is_empty() {
            return Err(ToolError::model(
                ToolErrorKind::InvalidArguments,
                "old_string is empty; use write-file to create a file",
            ));
        }
        if self.old_string == self.new_string {
            return Err(ToolError::model(
                ToolErrorKind::InvalidArguments,
                "old_string and new_string are the same",
            ));
        }
        Ok(())
    }

    /// `text` with the replacement made, and how many occurrences were replaced.
    fn apply(&self, text: &str) -> Result<(String, usize), ToolError> {
        let count = text.matches(&self.old_string).count();
        match (count, self.replace_all) {
            (0, _) => Err(ToolError::model(
                ToolErrorKind::NotFound,
                format!(
                    "old_string does not occur in {}; copy the text exactly from the file",
                    self.path
                ),
            )),
            (1, _) | (_, true) => Ok((text.replace(&self.old_string, &self.new_string), count)),
            (n, false) => Err(ToolError::model(
                ToolErrorKind::NotUnique,
                format!(
                    "old_string occurs {n} times in {}; include more surrounding text or set replace_all",
                    self.path
                ),
            )),
        }
    }
}
