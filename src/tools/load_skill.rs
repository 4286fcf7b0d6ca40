//! `load-skill`: brings a skill's instructions (`.nop/.system/skills/<name>/SKILL.md`) into the
//! conversation, with the list of files beside it.

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

/// Where skills live: the repository's `.nop/.system/skills/`, then your own `~/.nop/skills/`
/// (the same SKILL.md layout other agents use); on a name clash the repository's wins.
pub fn skill_dirs(root: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut dirs = vec![root.join(".nop/.system/skills")];
    if let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        dirs.push(std::path::PathBuf::from(home).join(".nop/skills"));
    }
    dirs
}

/// The folder of skill `name`, if there is one.
fn skill_dir(root: &std::path::Path, name: &str) -> Option<std::path::PathBuf> {
    skill_dirs(root)
        .into_iter()
        .map(|d| d.join(name))
        .find(|d| d.join("SKILL.md").is_file())
}

/// `(name, description)` of every skill, from the front matter of each SKILL.md.
pub fn list_skills(root: &std::path::Path) -> Vec<(String, String)> {
    let mut skills: Vec<(String, String)> = Vec::new();
    for dir in skill_dirs(root) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Ok(text) = std::fs::read_to_string(e.path().join("SKILL.md")) else {
                continue;
            };
            let description = front_matter(&text, "description").unwrap_or_default();
            let name = front_matter(&text, "name").unwrap_or(name);
            if !skills.iter().any(|(n, _)| *n == name) {
                skills.push((name, description));
            }
        }
    }
    skills.sort();
    skills
}

/// A one-line `key: value` of the `---` front matter.
fn front_matter(text: &str, key: &str) -> Option<String> {
    let body = text.strip_prefix("---")?;
    let end = body.find("\n---")?;
    body[..end].lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        (k.trim() == key).then(|| v.trim().trim_matches(['"', '\'']).to_string())
    })
}

impl TypedTool for LoadSkill {
    type Args = LoadSkillArgs;
    const NAME: &'static str = "load-skill";
    const MUTATING: bool = false;
    const PARALLEL: bool = true;
    const DESCRIPTION: &'static str =
        "Load a skill's full instructions by name (skills are listed in the system prompt).";

    async fn run(&self, args: LoadSkillArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let valid = !args.name.is_empty()
            && args
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
            && !args.name.starts_with('.');
        if !valid {
            return Err(ToolError::model(
                ToolErrorKind::InvalidArguments,
                format!("`{}` is not a skill name", args.name),
            ));
        }
        let dir = skill_dir(&ctx.root, &args.name).unwrap_or_default();
        let body = tokio::fs::read_to_string(dir.join("SKILL.md"))
            .await
            .map_err(|_| {
                let known: Vec<String> =
                    list_skills(&ctx.root).into_iter().map(|(n, _)| n).collect();
                ToolError::model(
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
                )
            })?;
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n != "SKILL.md")
            .collect();
        files.sort();
        let mut content = body;
        if !files.is_empty() {
            content.push_str(&format!(
                "\n\n[files of this skill, in {}: {}]",
                dir.display(),
                files.join(", ")
            ));
        }
        Ok(ToolOutput::text(content))
    }
}
