//! The hook commands a configuration names: nop's own (`hooks:` in config.yml, a command line
//! or `{matcher, command, timeout_s}`), and Claude Code's, read as they are from
//! `.claude/settings.json`, `.claude/settings.local.json` and `~/.claude/settings.json`
//! (`hooks` key only). A settings file that cannot be read or parsed is set aside with a
//! warning; it never stops a run. Whether a hook of the repository's may run is decided as it
//! is about to (`crate::trust`), not here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One hook command in nop's configuration: a command line, or a command with a matcher (a
/// regular expression over nop's tool names, whole name) and its own time limit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum HookCommand {
    Plain(String),
    Matched(MatchedHook),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatchedHook {
    /// A regular expression over the tool's name (`shell`, `write-file|edit-file`,
    /// `github\..*`); empty or `*` matches every tool.
    #[serde(default)]
    pub matcher: String,
    pub command: String,
    /// Seconds this command may run (instead of `hooks.timeout_s`).
    #[serde(default)]
    pub timeout_s: Option<f64>,
}

impl HookCommand {
    pub fn command(&self) -> &str {
        match self {
            HookCommand::Plain(c) => c,
            HookCommand::Matched(m) => &m.command,
        }
    }

    pub fn matcher(&self) -> &str {
        match self {
            HookCommand::Plain(_) => "",
            HookCommand::Matched(m) => &m.matcher,
        }
    }

    pub fn timeout_s(&self) -> Option<f64> {
        match self {
            HookCommand::Plain(_) => None,
            HookCommand::Matched(m) => m.timeout_s,
        }
    }
}

impl From<&str> for HookCommand {
    fn from(command: &str) -> HookCommand {
        HookCommand::Plain(command.to_string())
    }
}

impl From<String> for HookCommand {
    fn from(command: String) -> HookCommand {
        HookCommand::Plain(command)
    }
}

/// A hook from one of Claude Code's settings files: it gets Claude Code's JSON and its output
/// is read by Claude Code's rules.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaudeHook {
    /// nop's name of the event (`before-tool` for `PreToolUse`, …).
    pub event: &'static str,
    /// Claude Code's matcher: a regular expression over Claude Code's tool names.
    pub matcher: String,
    pub command: String,
    pub timeout_s: Option<f64>,
    /// The settings file it came from.
    pub origin: PathBuf,
}

/// Claude Code's event names and nop's.
pub const CLAUDE_EVENTS: &[(&str, &str)] = &[
    ("PreToolUse", "before-tool"),
    ("PostToolUse", "after-tool"),
    ("UserPromptSubmit", "user-prompt-submit"),
    ("Stop", "stop"),
    ("SubagentStop", "subagent-stop"),
    ("Notification", "notification"),
    ("PreCompact", "before-compact"),
    ("SessionStart", "session-start"),
    ("SessionEnd", "session-end"),
    ("PermissionRequest", "permission-request"),
];

/// The largest settings file read: they are a few kilobytes.
const MAX_SETTINGS_BYTES: u64 = 1024 * 1024;

/// The settings files Claude Code's hooks are read from, user's first: `~/.claude/settings.json`
/// (HOME from `env`, never the process's), then the project's `.claude/settings.json` and
/// `.claude/settings.local.json`.
pub fn claude_settings_files(root: &Path, env: &BTreeMap<String, String>) -> Vec<PathBuf> {
    let mut files = Vec::new();
    if let Some(home) = env.get("HOME").filter(|h| !h.is_empty()) {
        files.push(Path::new(home).join(".claude/settings.json"));
    }
    files.push(root.join(".claude/settings.json"));
    files.push(root.join(".claude/settings.local.json"));
    files.dedup();
    files
}

/// The project's settings files that may name hooks: read-only to the agent (nop's floor).
pub fn claude_project_files(root: &Path) -> [PathBuf; 2] {
    [
        root.join(".claude/settings.json"),
        root.join(".claude/settings.local.json"),
    ]
}

/// The hooks of Claude Code's settings files, and a warning for each file or entry set aside.
pub fn claude_hooks(root: &Path, env: &BTreeMap<String, String>) -> (Vec<ClaudeHook>, Vec<String>) {
    let mut hooks = Vec::new();
    let mut warnings = Vec::new();
    let mut seen: Vec<PathBuf> = Vec::new();
    for path in claude_settings_files(root, env) {
        // HOME may be the repository itself: one file is read once.
        let real = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        if seen.contains(&real) {
            continue;
        }
        seen.push(real);
        match read_settings(&path) {
            Ok(Some(value)) => parse_settings(&path, &value, &mut hooks, &mut warnings),
            Ok(None) => {}
            Err(why) => warnings.push(format!(
                "{}: {why}; its hooks and permission rules are not used by nop",
                path.display()
            )),
        }
    }
    (hooks, warnings)
}

fn read_settings(path: &Path) -> Result<Option<Value>, String> {
    let Some(text) = read_text(path)? else {
        return Ok(None);
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| format!("is not valid JSON ({e})"))
}

fn read_text(path: &Path) -> Result<Option<String>, String> {
    use crate::capped_file::{CappedError, read};
    match read(path, MAX_SETTINGS_BYTES) {
        Ok(None) => Ok(None),
        Ok(Some(bytes)) => String::from_utf8(bytes)
            .map(Some)
            .map_err(|e| format!("is not UTF-8 text ({e})")),
        Err(CappedError::TooLarge(..)) => {
            Err(format!("is larger than {} KiB", MAX_SETTINGS_BYTES / 1024))
        }
        Err(e) => Err(format!("cannot be read: {e}")),
    }
}

/// Reads `hooks` of one settings file: `{Event: [{matcher, hooks: [{type, command, timeout}]}]}`.
/// What nop cannot run (an unknown event, a `type` other than `command`) is named in a warning;
/// the rest of the file is used.
fn parse_settings(
    path: &Path,
    settings: &Value,
    hooks: &mut Vec<ClaudeHook>,
    warnings: &mut Vec<String>,
) {
    let file = path.display();
    let Some(section) = settings.get("hooks") else {
        return;
    };
    let Some(events) = section.as_object() else {
        warnings.push(format!(
            "{file}: `hooks` is not an object; its hooks are not used"
        ));
        return;
    };
    for (event, groups) in events {
        let Some(&(_, nop_event)) = CLAUDE_EVENTS.iter().find(|(name, _)| name == event) else {
            warnings.push(format!(
                "{file}: hooks.{event}: nop has no such event (it knows {}); set aside",
                CLAUDE_EVENTS
                    .iter()
                    .map(|(n, _)| *n)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            continue;
        };
        let Some(groups) = groups.as_array() else {
            warnings.push(format!("{file}: hooks.{event} is not a list; set aside"));
            continue;
        };
        for (i, group) in groups.iter().enumerate() {
            let at = format!("{file}: hooks.{event}[{i}]");
            let matcher = match group.get("matcher") {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(m)) => m.clone(),
                Some(_) => {
                    warnings.push(format!("{at}.matcher is not a string; set aside"));
                    continue;
                }
            };
            if let Err(e) = regex::Regex::new(&pattern(&matcher)) {
                warnings.push(format!(
                    "{at}.matcher `{matcher}` is not a regular expression ({e}); set aside"
                ));
                continue;
            }
            let Some(commands) = group.get("hooks").and_then(Value::as_array) else {
                warnings.push(format!("{at}.hooks is not a list; set aside"));
                continue;
            };
            for (j, hook) in commands.iter().enumerate() {
                let at = format!("{at}.hooks[{j}]");
                match hook.get("type").and_then(Value::as_str) {
                    Some("command") => {}
                    Some(other) => {
                        warnings.push(format!(
                            "{at}: nop runs only `type: \"command\"` hooks, not `{other}`; set aside"
                        ));
                        continue;
                    }
                    None => {
                        warnings.push(format!("{at}: no `type`; set aside"));
                        continue;
                    }
                }
                let Some(command) = hook
                    .get("command")
                    .and_then(Value::as_str)
                    .filter(|c| !c.trim().is_empty())
                else {
                    warnings.push(format!("{at}: no `command`; set aside"));
                    continue;
                };
                let timeout_s = match hook.get("timeout") {
                    None | Some(Value::Null) => None,
                    Some(t) => match t.as_f64().filter(|t| t.is_finite() && *t > 0.0) {
                        Some(t) => Some(t),
                        None => {
                            warnings.push(format!(
                                "{at}.timeout must be a positive number of seconds; set aside"
                            ));
                            continue;
                        }
                    },
                };
                hooks.push(ClaudeHook {
                    event: nop_event,
                    matcher: matcher.clone(),
                    command: command.to_string(),
                    timeout_s,
                    origin: path.to_path_buf(),
                });
            }
        }
    }
}

/// A matcher as an anchored regular expression: empty and `*` match everything.
pub fn pattern(matcher: &str) -> String {
    match matcher.trim() {
        "" | "*" => ".*".to_string(),
        m => format!("^(?:{m})$"),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn claude_settings_give_their_command_hooks_and_name_what_is_set_aside() {
        let path = Path::new("/r/.claude/settings.json");
        let settings = json!({"permissions": {"allow": []}, "hooks": {
            "PreToolUse": [{"matcher": "Bash|Write", "hooks": [
                {"type": "command", "command": "./check.sh", "timeout": 5},
                {"type": "prompt", "prompt": "is it safe?"}]}],
            "Stop": [{"hooks": [{"type": "command", "command": "stop.sh"}]}],
            "PostToolUse": [{"matcher": "(", "hooks": [{"type": "command", "command": "x"}]}],
            "Teleport": [],
        }});
        let (mut hooks, mut warnings) = (Vec::new(), Vec::new());
        parse_settings(path, &settings, &mut hooks, &mut warnings);
        assert_eq!(
            hooks,
            vec![
                ClaudeHook {
                    event: "before-tool",
                    matcher: "Bash|Write".into(),
                    command: "./check.sh".into(),
                    timeout_s: Some(5.0),
                    origin: path.into(),
                },
                ClaudeHook {
                    event: "stop",
                    matcher: String::new(),
                    command: "stop.sh".into(),
                    timeout_s: None,
                    origin: path.into(),
                },
            ]
        );
        assert_eq!(warnings.len(), 3, "{warnings:?}");
        assert!(warnings[0].contains("hooks.PreToolUse[0].hooks[1]: nop runs only"));
        assert!(
            warnings[1].contains("hooks.PostToolUse[0].matcher `(` is not a regular expression")
        );
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("hooks.Teleport: nop has no such event"))
        );
    }

    #[test]
    fn a_broken_settings_file_is_set_aside_with_a_warning() -> anyhow::Result<()> {
        let root = tempfile::tempdir()?;
        std::fs::create_dir_all(root.path().join(".claude"))?;
        std::fs::write(root.path().join(".claude/settings.json"), "{not json")?;
        std::fs::write(
            root.path().join(".claude/settings.local.json"),
            r#"{"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "ok"}]}]}}"#,
        )?;
        let (hooks, warnings) = claude_hooks(root.path(), &BTreeMap::new());
        assert_eq!(hooks.len(), 1);
        assert_eq!(warnings.len(), 1);
        assert!(
            warnings[0].contains(".claude/settings.json: is not valid JSON"),
            "{warnings:?}"
        );
        Ok(())
    }
}
