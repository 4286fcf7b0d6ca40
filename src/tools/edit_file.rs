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
        let path = paths::resolve(ctx, Self::NAME, &args.path, Access::Write).await?;
        if args.old_string.is_empty() {
            return Err(ToolError::model(
                ToolErrorKind::InvalidArguments,
                "old_string is empty; use write-file to create a file",
            ));
        }
        if args.old_string == args.new_string {
            return Err(ToolError::model(
                ToolErrorKind::InvalidArguments,
                "old_string and new_string are the same",
            ));
        }
        let bytes = paths::read_verified_async(ctx, &path).await?;
        let text = String::from_utf8(bytes).map_err(|_| {
            ToolError::model(
                ToolErrorKind::BinaryFile,
                format!("{} is not UTF-8 text", args.path),
            )
        })?;
        let count = text.matches(&args.old_string).count();
        let updated = match (count, args.replace_all) {
            (0, _) => {
                return Err(ToolError::model(
                    ToolErrorKind::NotFound,
                    format!(
                        "old_string does not occur in {}; read the file and copy the text exactly",
                        args.path
                    ),
                ));
            }
            (1, _) | (_, true) => text.replace(&args.old_string, &args.new_string),
            (n, false) => {
                return Err(ToolError::model(
                    ToolErrorKind::NotUnique,
                    format!(
                        "old_string occurs {n} times in {}; include more surrounding text or set replace_all",
                        args.path
                    ),
                ));
            }
        };
        // Through the directory's descriptor, re-checked, as write-file does.
        paths::write_verified_async(ctx, &path, updated.clone().into_bytes()).await?;
        let shown = paths::display(&ctx.root, &path);
        Ok(ToolOutput {
            content: format!(
                "edited {shown}: {count} replacement{}",
                if count == 1 { "" } else { "s" }
            ),
            effect: ToolEffect::FileChanged(FileChange {
                path: shown,
                before: Some(text),
                after: updated,
            }),
        })
    }
}
