//! Claude Code's hook shapes: its tool names and `tool_input` fields made from nop's, its
//! JSON on standard input made from nop's event, and the decisions its standard output may
//! carry (which nop's own hooks may use too).

use std::path::Path;

use serde_json::{Map, Value, json};

use super::{Hook, HookEvent};

/// nop's built-in tools and Claude Code's names for them.
const TOOL_NAMES: &[(&str, &str)] = &[
    ("shell", "Bash"),
    ("read-file", "Read"),
    ("write-file", "Write"),
    ("edit-file", "Edit"),
    ("list-files", "Glob"),
    ("search-files", "Grep"),
    ("call-agent", "Task"),
    ("update-plan", "TodoWrite"),
];

/// Claude Code's name of nop's tool `tool`: `Bash` for `shell`, `mcp__github__search` for a
/// plugin's `github.search`; a tool Claude Code has no name for keeps nop's.
pub fn claude_tool_name(tool: &str) -> String {
    if let Some((_, claude)) = TOOL_NAMES.iter().find(|(nop, _)| *nop == tool) {
        return (*claude).to_string();
    }
    match tool.split_once('.') {
        Some((plugin, name)) => format!("mcp__{plugin}__{name}"),
        None => tool.to_string(),
    }
}

/// How the session started, as Claude Code's `SessionStart` says it.
pub(super) fn session_source(resumed: bool) -> &'static str {
    if resumed { "resume" } else { "startup" }
}

/// What started a compaction, as Claude Code's `PreCompact` says it: `manual` when the user
/// or the agent asked for it (`nop compact`, `/compact`, the `compact` tool), else `auto`.
pub(super) fn compact_trigger(manual: bool) -> &'static str {
    if manual { "manual" } else { "auto" }
}

/// Claude Code's JSON for `event`: the one place nop's events are mapped to its shapes.
pub(super) fn input(event: &HookEvent<'_>, root: &Path) -> Value {
    let hook = event.hook();
    let session_id = event.about().session_id;
    let mut out = Map::new();
    out.insert("session_id".into(), json!(session_id));
    out.insert(
        "transcript_path".into(),
        json!(
            root.join(".nop/sessions")
                .join(session_id)
                .join("session.json")
        ),
    );
    out.insert("cwd".into(), json!(root));
    out.insert("hook_event_name".into(), json!(claude_event(hook)));
    if let Some((tool, arguments)) = event.tool() {
        out.insert("tool_name".into(), json!(claude_tool_name(tool)));
        out.insert("tool_input".into(), tool_input(tool, arguments, root));
    }
    // PreToolUse and PostToolUse say which call they are about, as Claude Code's do.
    if let Some(id) = event.call_id() {
        out.insert("tool_use_id".into(), json!(id));
    }
    match event {
        HookEvent::AfterTool {
            tool,
            arguments,
            ok,
            output,
            ..
        } => {
            let output = crate::protocol::hook_event::what_hooks_read(*ok, output);
            let mut response = json!({"success": ok, "output": output});
            if let Some(path) = arguments.get("path").and_then(Value::as_str) {
                response["filePath"] = json!(absolute(root, path));
            }
            if *tool == "shell" {
                response["stdout"] = json!(output);
            }
            out.insert("tool_response".into(), response);
        }
        HookEvent::UserPromptSubmit { prompt, .. } => {
            out.insert("prompt".into(), json!(prompt));
        }
        HookEvent::Stop { active, .. } | HookEvent::SubagentStop { active, .. } => {
            out.insert("stop_hook_active".into(), json!(active));
        }
        HookEvent::Notification { message, .. } => {
            out.insert("message".into(), json!(message));
        }
        HookEvent::BeforeCompact { manual, .. } => {
            out.insert("trigger".into(), json!(compact_trigger(*manual)));
            out.insert("custom_instructions".into(), json!(""));
        }
        HookEvent::SessionStart { resumed, .. } => {
            out.insert("source".into(), json!(session_source(*resumed)));
        }
        HookEvent::SessionEnd { .. } => {
            out.insert("reason".into(), json!("other"));
        }
        HookEvent::BeforeTool { .. } | HookEvent::PermissionRequest { .. } => {}
    }
    Value::Object(out)
}

fn claude_event(hook: Hook) -> &'static str {
    crate::config::CLAUDE_EVENTS
        .iter()
        .find(|(_, nop)| *nop == hook.name())
        .map_or("", |(claude, _)| claude)
}

fn absolute(root: &Path, path: &str) -> String {
    root.join(path).to_string_lossy().into_owned()
}

/// Claude Code's `tool_input` for a call of nop's `tool` with `arguments`: its field names,
/// paths made absolute. A tool Claude Code has no name for keeps nop's arguments.
fn tool_input(tool: &str, arguments: &Value, root: &Path) -> Value {
    let mut out = Map::new();
    let copy = |from: &str, to: &str, out: &mut Map<String, Value>| {
        if let Some(v) = arguments.get(from).filter(|v| !v.is_null()) {
            out.insert(to.to_string(), v.clone());
        }
    };
    let path = arguments.get("path").and_then(Value::as_str);
    match tool {
        "shell" => {
            copy("command", "command", &mut out);
            if let Some(s) = arguments.get("timeout_s").and_then(Value::as_f64) {
                out.insert("timeout".into(), json!((s * 1000.0).round() as u64));
            }
            copy("workdir", "workdir", &mut out);
        }
        "read-file" | "write-file" | "edit-file" => {
            if let Some(path) = path {
                out.insert("file_path".into(), json!(absolute(root, path)));
            }
            for key in [
                "content",
                "old_string",
                "new_string",
                "replace_all",
                "offset",
                "limit",
            ] {
                copy(key, key, &mut out);
            }
        }
        "list-files" => {
            copy("glob", "pattern", &mut out);
            if let Some(path) = path {
                out.insert("path".into(), json!(absolute(root, path)));
            }
        }
        "search-files" => {
            copy("pattern", "pattern", &mut out);
            if let Some(path) = path {
                out.insert("path".into(), json!(absolute(root, path)));
            }
            copy("glob", "glob", &mut out);
            copy("limit", "head_limit", &mut out);
        }
        "call-agent" => {
            copy("agent", "subagent_type", &mut out);
            let prompt = match arguments.get("arguments") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Object(o)) => match o.get("input").and_then(Value::as_str) {
                    Some(s) => s.to_string(),
                    None => Value::Object(o.clone()).to_string(),
                },
                Some(other) => other.to_string(),
                None => String::new(),
            };
            out.insert("description".into(), json!(""));
            out.insert("prompt".into(), json!(prompt));
        }
        "update-plan" => copy("tasks", "todos", &mut out),
        _ => return arguments.clone(),
    }
    Value::Object(out)
}

/// What a hook that exited with 0 said on standard output.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Decision {
    None,
    /// Block the call, the prompt or the stop, with the reason given.
    Block(Option<String>),
    /// `continue: false`: stop here (a stop may not be kept going, anything else is blocked).
    Halt(String),
    /// `permission-request`: approved.
    Allow,
    /// `user-prompt-submit`: context for the model.
    Context(String),
}

/// Reads a hook's standard output by Claude Code's rules: a JSON object may say `continue:
/// false` (with `stopReason`), `decision: "block"` (with `reason`), and under
/// `hookSpecificOutput` a `permissionDecision` (`allow`, `deny`, `ask`) or, for a permission
/// request, `decision.behavior`, and `additionalContext`; for `user-prompt-submit` plain
/// text is context. nop also reads `decision: "allow" | "deny"` for a permission request.
pub(super) fn decision(hook: Hook, stdout: &str) -> Decision {
    let text = stdout.trim();
    let Ok(Value::Object(out)) = serde_json::from_str::<Value>(text) else {
        if hook == Hook::UserPromptSubmit && !text.is_empty() {
            return Decision::Context(text.to_string());
        }
        return Decision::None;
    };
    let string = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
    if out.get("continue").and_then(Value::as_bool) == Some(false) {
        let reason = string(out.get("stopReason"))
            .or_else(|| string(out.get("reason")))
            .unwrap_or_else(|| "a hook said not to continue".to_string());
        return Decision::Halt(reason);
    }
    let specific = out.get("hookSpecificOutput");
    let reason = string(out.get("reason"));
    let permission = specific.and_then(|s| {
        let behavior = s
            .get("permissionDecision")
            .or_else(|| s.get("decision").and_then(|d| d.get("behavior")))?
            .as_str()?;
        let why = string(s.get("permissionDecisionReason"))
            .or_else(|| string(s.get("decision").and_then(|d| d.get("message"))));
        Some((behavior.to_string(), why))
    });
    let asks_permission = matches!(hook, Hook::BeforeTool | Hook::PermissionRequest);
    if asks_permission && let Some((behavior, why)) = &permission {
        match behavior.as_str() {
            "deny" => return Decision::Block(why.clone().or(reason)),
            "allow" if hook == Hook::PermissionRequest => return Decision::Allow,
            _ => {}
        }
    }
    match out.get("decision").and_then(Value::as_str) {
        Some("block") if hook.can_block() => return Decision::Block(reason),
        Some("deny") if hook == Hook::PermissionRequest => return Decision::Block(reason),
        Some("allow" | "approve") if hook == Hook::PermissionRequest => return Decision::Allow,
        _ => {}
    }
    if hook == Hook::UserPromptSubmit
        && let Some(context) = specific.and_then(|s| string(s.get("additionalContext")))
    {
        return Decision::Context(context);
    }
    Decision::None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nop_tools_get_claude_code_names_and_fields() {
        assert_eq!(claude_tool_name("shell"), "Bash");
        assert_eq!(claude_tool_name("edit-file"), "Edit");
        assert_eq!(claude_tool_name("github.search"), "mcp__github__search");
        assert_eq!(claude_tool_name("ask-user"), "ask-user");
        let root = Path::new("/r");
        assert_eq!(
            tool_input(
                "edit-file",
                &json!({"path": "src/a.rs", "old_string": "a", "new_string": "b"}),
                root
            ),
            json!({"file_path": "/r/src/a.rs", "old_string": "a", "new_string": "b"})
        );
        assert_eq!(
            tool_input("shell", &json!({"command": "ls", "timeout_s": 2.5}), root),
            json!({"command": "ls", "timeout": 2500})
        );
    }

    #[test]
    fn a_compaction_says_what_started_it() {
        let root = Path::new("/r");
        let about = crate::protocol::About {
            session_id: "s1",
            agent: "coder",
        };
        let compaction = |manual| HookEvent::BeforeCompact {
            about,
            reason: "requested",
            manual,
            messages: 3,
        };
        let manual = input(&compaction(true), root);
        assert_eq!(
            (manual["trigger"].clone(), manual["transcript_path"].clone()),
            (json!("manual"), json!("/r/.nop/sessions/s1/session.json"))
        );
        assert_eq!(input(&compaction(false), root)["trigger"], "auto");
    }

    #[test]
    fn standard_output_decides_by_claude_codes_rules() {
        let deny = r#"{"hookSpecificOutput": {"hookEventName": "PreToolUse",
            "permissionDecision": "deny", "permissionDecisionReason": "no"}}"#;
        assert_eq!(
            decision(Hook::BeforeTool, deny),
            Decision::Block(Some("no".into()))
        );
        let allow = r#"{"hookSpecificOutput": {"hookEventName": "PermissionRequest",
            "decision": {"behavior": "allow"}}}"#;
        assert_eq!(decision(Hook::PermissionRequest, allow), Decision::Allow);
        assert_eq!(decision(Hook::BeforeTool, allow), Decision::None);
        assert_eq!(
            decision(Hook::Stop, r#"{"decision": "block", "reason": "tests"}"#),
            Decision::Block(Some("tests".into()))
        );
        assert_eq!(
            decision(Hook::AfterTool, r#"{"decision": "block", "reason": "x"}"#),
            Decision::None
        );
        assert_eq!(
            decision(Hook::Stop, r#"{"continue": false, "stopReason": "done"}"#),
            Decision::Halt("done".into())
        );
        assert_eq!(
            decision(Hook::UserPromptSubmit, "the branch is main\n"),
            Decision::Context("the branch is main".into())
        );
        assert_eq!(decision(Hook::BeforeTool, "hello"), Decision::None);
        let context = r#"{"hookSpecificOutput": {"additionalContext": "ctx"}}"#;
        assert_eq!(
            decision(Hook::UserPromptSubmit, context),
            Decision::Context("ctx".into())
        );
    }
}
