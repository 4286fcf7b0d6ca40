//! `load-skill`: brings a skill's instructions (its SKILL.md, found by the `name:` of its front
//! matter in the folders [`crate::skills`] looks in) into the conversation, with the list of files
//! beside it.

use schemars::JsonSchema;
use serde::Deserialize;

use super::{ToolContext, ToolError, ToolOutput, TypedTool};
use crate::tools::ToolErrorKind;

pub struct LoadSkill;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LoadSkillArgs {
    /// The skill's name, as listed in the system prompt.
    name: String,
}

/// The skills the agent of `ctx` may read (links resolved).
fn skills(ctx: &ToolContext) -> crate::skills::Discovery {
    let readable = |real: &std::path::Path| {
        ctx.policy
            .check_resolved(real, crate::permissions::Access::Read)
            .is_allowed()
    };
    crate::skills::discover(&ctx.root, &readable)
}

/// How many of a skill's files `load-skill` lists.
const MAX_FILES: usize = 200;

impl TypedTool for LoadSkill {
    type Args = LoadSkillArgs;
    const NAME: &'static str = "load-skill";
    const MUTATING: bool = false;
    const PARALLEL: bool = true;
    const DESCRIPTION: &'static str =
        "Load a skill's full instructions by name (skills are listed in the system prompt).";

    /// Offered only when the agent can read a skill.
    fn has_work(ctx: &ToolContext) -> bool {
        !skills(ctx).skills.is_empty()
    }

    async fn run(&self, args: LoadSkillArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let found = skills(ctx);
        let Some(skill) = found.get(args.name.trim()) else {
            let known: Vec<&str> = found.skills.iter().map(|s| s.name.as_str()).collect();
            return Err(ToolError::model(
                ToolErrorKind::NotFound,
                format!(
                    "no skill `{}` (available: {})",
                    args.name,
                    if known.is_empty() {
                        "none".into()
                    } else {
                        known.join(", ")
                    }
                ),
            ));
        };
        let file = skill.dir.join("SKILL.md");
        // Read only what read-file could read: the agent's rules for a repository skill, the
        // user's skill folders for theirs (links resolved).
        let readable = std::fs::canonicalize(&file).is_ok_and(|real| {
            ctx.policy
                .check_resolved(&real, crate::permissions::Access::Read)
                .is_allowed()
        });
        if !readable {
            return Err(ToolError::model(
                ToolErrorKind::PermissionDenied,
                format!(
                    "skill `{}`: {} is not readable under this agent's rules",
                    skill.name,
                    file.display()
                ),
            ));
        }
        let (body, cut) = crate::front_matter::read_capped(&file).map_err(|e| {
            ToolError::model(
                ToolErrorKind::NotFound,
                format!("skill `{}`: {}: {e}", skill.name, file.display()),
            )
        })?;
        let mut content = body;
        if cut {
            content.push_str(&format!(
                "\n\n[SKILL.md is longer than {} KB: the rest is left out; read it with read-file]",
                crate::front_matter::MAX_FILE_BYTES / 1024
            ));
        }
        let (files, more) = crate::skills::files(&skill.dir, MAX_FILES);
        if !files.is_empty() {
            let dir = std::fs::canonicalize(&skill.dir).unwrap_or_else(|_| skill.dir.clone());
            content.push_str(&format!(
                "\n\n[files of this skill, in {}: {}{}]",
                dir.display(),
                files.join(", "),
                if more { ", …" } else { "" }
            ));
        }
        Ok(ToolOutput::text(content))
    }
}
