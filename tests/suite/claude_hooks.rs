//! Claude Code's hooks run unchanged: `.claude/settings.json` read as it is, its scripts given
//! Claude Code's JSON (tool names, `tool_input` fields) and their answers read by its rules;
//! nop's new events with nop's own shape; and a model that plants a hook gets nothing.

use std::fs;
use std::path::Path;

use serde_json::{Value, json};

use crate::support::Repo;
use crate::support::mock::{MockServer, openai};

/// A repository with Claude Code's `settings` and hook scripts in `.claude/hooks/`, written by
/// the user and trusted (`nop trust --yes`).
fn with_claude(settings: Value, scripts: &[(&str, &str)]) -> Repo {
    let repo = Repo::new();
    let dir = repo.path().join(".claude/hooks");
    fs::create_dir_all(&dir).expect("mkdir");
    for (name, text) in scripts {
        let path = dir.join(name);
        fs::write(&path, text).expect("write script");
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    fs::write(
        repo.path().join(".claude/settings.json"),
        serde_json::to_string_pretty(&settings).expect("json"),
    )
    .expect("write settings");
    fs::create_dir_all(repo.path().join("work")).expect("mkdir");
    repo.trust();
    repo
}

fn command(script: &str) -> Value {
    json!({"type": "command", "command": format!("\"$CLAUDE_PROJECT_DIR\"/.claude/hooks/{script}"), "timeout": 30})
}

/// A PreToolUse script as Claude Code's documentation writes them: jq on stdin, exit 2 and a
/// message on stderr.
const BLOCK_RM: &str = r#"#!/bin/bash
input=$(cat)
cmd=$(printf '%s' "$input" | jq -r '.tool_input.command // empty')
if [[ "$cmd" == *"rm -rf"* ]]; then
  echo "Blocked: rm -rf is not allowed ($(printf '%s' "$input" | jq -r .hook_event_name))" >&2
  exit 2
fi
exit 0
"#;

/// A PostToolUse logger in Python.
const LOG_WRITES: &str = r#"#!/usr/bin/env python3
import json, os, sys
data = json.load(sys.stdin)
with open(os.path.join(os.environ["CLAUDE_PROJECT_DIR"], "work", "post.log"), "a") as f:
    f.write(json.dumps({"tool_name": data["tool_name"], "file_path": data["tool_input"].get("file_path"),
                        "event": data["hook_event_name"], "cwd": data["cwd"],
                        "transcript": data["transcript_path"], "success": data["tool_response"]["success"]}) + "\n")
"#;

#[test]
fn a_claude_code_hook_script_runs_unchanged_and_sees_claude_codes_names() {
    let repo = with_claude(
        json!({"permissions": {"allow": ["Bash(ls:*)"]}, "hooks": {
            "PreToolUse": [{"matcher": "Bash", "hooks": [command("block-rm.sh")]}],
            "PostToolUse": [{"matcher": "Write|Edit|MultiEdit", "hooks": [command("log-writes.py")]}],
        }}),
        &[("block-rm.sh", BLOCK_RM), ("log-writes.py", LOG_WRITES)],
    );
    fs::write(repo.path().join("work/keep.txt"), "keep").expect("write");
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[
            ("c1", "shell", json!({"command": "rm -rf work"})),
            (
                "c2",
                "write-file",
                json!({"path": "work/new.txt", "content": "hi"}),
            ),
            ("c3", "shell", json!({"command": "echo fine"})),
        ]),
        openai::reply_text("ok"),
    ]);
    repo.model_ok(&server, &["run", "clean up"]);
    let results = server.results_of(&["c1", "c2", "c3"]);
    assert!(
        results[0]
            .starts_with("error (BlockedByHook): Blocked: rm -rf is not allowed (PreToolUse)"),
        "{results:?}"
    );
    assert!(results[2].contains("fine"), "{results:?}");
    assert!(repo.path().join("work/keep.txt").exists());
    let log = fs::read_to_string(repo.path().join("work/post.log")).expect("post.log");
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    // The matcher leaves out the two Bash calls.
    assert_eq!(lines.len(), 1, "{log}");
    let root = repo.path().canonicalize().expect("root");
    let session = repo.first_session()["sessionId"]
        .as_str()
        .expect("id")
        .to_string();
    assert_eq!(
        lines[0],
        json!({
            "tool_name": "Write",
            "file_path": root.join("work/new.txt"),
            "event": "PostToolUse",
            "cwd": root,
            "transcript": root.join(".nop/sessions").join(&session).join("session.json"),
            "success": true,
        })
    );
}

/// Logs `hook_event_name tool_name tool_use_id` to work/calls.log, and blocks `rm -rf`.
const LOG_CALLS: &str = r#"#!/usr/bin/env python3
import json, os, sys
data = json.load(sys.stdin)
with open(os.path.join(os.environ["CLAUDE_PROJECT_DIR"], "work", "calls.log"), "a") as f:
    f.write("%s %s %s\n" % (data["hook_event_name"], data["tool_name"], data.get("tool_use_id")))
if "rm -rf" in data["tool_input"].get("command", "") and data["hook_event_name"] == "PreToolUse":
    print("no rm -rf", file=sys.stderr)
    sys.exit(2)
"#;

/// As Claude Code: PreToolUse and PostToolUse get the call's `tool_use_id`, and a call a
/// PreToolUse hook blocked never ran, so no PostToolUse fires for it.
#[test]
fn tool_hooks_get_the_call_id_and_a_blocked_call_has_no_post_tool_use() {
    let repo = with_claude(
        json!({"hooks": {
            "PreToolUse": [{"matcher": "Bash", "hooks": [command("log-calls.py")]}],
            "PostToolUse": [{"matcher": "Bash", "hooks": [command("log-calls.py")]}],
        }}),
        &[("log-calls.py", LOG_CALLS)],
    );
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[
            ("call_rm", "shell", json!({"command": "rm -rf work"})),
            ("call_echo", "shell", json!({"command": "echo fine"})),
        ]),
        openai::reply_text("ok"),
    ]);
    repo.model_ok(&server, &["run", "clean up"]);
    let results = server.results_of(&["call_rm", "call_echo"]);
    assert!(results[0].contains("no rm -rf"), "{results:?}");
    assert!(results[1].contains("fine"), "{results:?}");
    let log = fs::read_to_string(repo.path().join("work/calls.log")).expect("calls.log");
    let mut lines: Vec<&str> = log.lines().collect();
    // The two calls may run side by side: their order is not fixed, each call's is.
    lines.sort_unstable();
    assert_eq!(
        lines,
        [
            "PostToolUse Bash call_echo",
            "PreToolUse Bash call_echo",
            "PreToolUse Bash call_rm",
        ],
        "{log}"
    );
}

#[test]
fn a_user_prompt_submit_hook_adds_context_or_blocks_the_prompt() {
    let script = r#"#!/bin/bash
prompt=$(jq -r .prompt)
if [[ "$prompt" == *secret* ]]; then echo "prompts about secrets are not allowed" >&2; exit 2; fi
echo "Context: the release branch is frozen"
"#;
    let repo = with_claude(
        json!({"hooks": {"UserPromptSubmit": [{"hooks": [command("prompt.sh")]}]}}),
        &[("prompt.sh", script)],
    );
    let server = MockServer::start(vec![openai::reply_text("noted")]);
    repo.model_ok(&server, &["run", "fix the build"]);
    let users = server.requests()[0].user_messages();
    assert!(
        users.last().is_some_and(|u| u.starts_with("fix the build")
            && u.contains("Context: the release branch is frozen")),
        "{users:?}"
    );

    let before = fs::read_dir(repo.sessions_dir()).expect("sessions").count();
    let out = repo
        .nop_model(&server, "openai")
        .args(["run", "print the secret"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(4));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "a user-prompt-submit hook blocked the prompt: prompts about secrets are not allowed"
        ),
        "{stderr}"
    );
    // The model never saw it, and no session was left for it.
    assert_eq!(server.requests().len(), 1);
    assert_eq!(
        fs::read_dir(repo.sessions_dir()).expect("sessions").count(),
        before
    );
}

#[test]
fn a_stop_hook_keeps_the_run_going_once_with_its_reason() {
    // Claude Code's documented pattern: block the first stop, let the second through.
    let script = r#"#!/usr/bin/env python3
import json, os, sys
data = json.load(sys.stdin)
with open(os.path.join(os.environ["CLAUDE_PROJECT_DIR"], "work", "stops.log"), "a") as f:
    f.write(str(data["stop_hook_active"]) + "\n")
if not data["stop_hook_active"]:
    print(json.dumps({"decision": "block", "reason": "run the tests first"}))
"#;
    let repo = with_claude(
        json!({"hooks": {"Stop": [{"hooks": [command("stop.py")]}]}}),
        &[("stop.py", script)],
    );
    let server = MockServer::start(vec![
        openai::reply_text("done, I think"),
        openai::reply_tool_calls(&[("c1", "shell", json!({"command": "echo tests pass"}))]),
        openai::reply_text("tests pass; done"),
    ]);
    let out = repo.model_json(&server, &["run", "--output-format", "json", "fix it"]);
    assert_eq!(out["final_message"], "tests pass; done", "{out}");
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(
        requests[1].user_messages().last().map(String::as_str),
        Some("run the tests first")
    );
    let stops = fs::read_to_string(repo.path().join("work/stops.log")).expect("stops");
    assert_eq!(stops, "False\nTrue\n");
    // The first answer is in the conversation before the hook's reason, in the request that
    // followed and in session.json.
    assert!(requests[1].raw_body.contains("done, I think"));
    let id = out["session_id"].as_str().expect("id");
    let conversation = repo.conversation(id);
    let at = |line: &str| conversation.iter().position(|l| l == line);
    assert!(
        at("assistant: done, I think") < at("user: run the tests first")
            && at("user: run the tests first") < at("assistant: tests pass; done")
            && at("assistant: done, I think").is_some(),
        "{conversation:#?}"
    );
}

#[test]
fn a_stop_hook_that_always_blocks_is_bounded() {
    let repo = Repo::new();
    let config = repo.path().join(".nop/config.yml");
    let text = fs::read_to_string(&config).expect("config");
    let base = text.split("\nhooks:").next().unwrap_or(&text).to_string();
    fs::write(
        &config,
        format!(
            "{base}\nhooks:\n  max_stop_continuations: 2\n  stop:\n    - 'echo \"keep going\" >&2; exit 2'\n"
        ),
    )
    .expect("write");
    repo.trust();
    let server = MockServer::start(vec![
        openai::reply_text("one"),
        openai::reply_text("two"),
        openai::reply_text("three"),
        openai::reply_text("four"),
    ]);
    let out = repo.model_json(&server, &["run", "--output-format", "json", "go"]);
    assert_eq!(out["final_message"], "three", "{out}");
    assert_eq!(server.requests().len(), 3);
    // And never past --max-turns.
    let server = MockServer::start(vec![
        openai::reply_text("one"),
        openai::reply_text("two"),
        openai::reply_text("three"),
    ]);
    let out = repo
        .nop_model(&server, "openai")
        .args(["run", "--max-turns", "2", "go"])
        .output()
        .expect("run");
    assert_eq!(server.requests().len(), 2, "{out:?}");
}

#[test]
fn a_permission_request_hook_answers_for_the_person() {
    let script = r#"#!/bin/bash
input=$(cat)
if [[ "$(printf '%s' "$input" | jq -r .tool_input.command)" == *deploy* ]]; then
  echo '{"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": {"behavior": "deny", "message": "no deploys from an agent"}}}'
else
  echo '{"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": {"behavior": "allow"}}}'
fi
"#;
    let repo = with_claude(
        json!({"hooks": {"PermissionRequest": [{"matcher": "Bash", "hooks": [command("perm.sh")]}]}}),
        &[("perm.sh", script)],
    );
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[
            ("c1", "shell", json!({"command": "echo deploy now"})),
            ("c2", "shell", json!({"command": "echo allowed"})),
        ]),
        openai::reply_text("ok"),
    ]);
    repo.model_ok(&server, &["run", "--approval", "always", "go"]);
    let results = server.results_of(&["c1", "c2"]);
    assert!(
        results[0].contains("a permission-request hook refused it: no deploys from an agent"),
        "{results:?}"
    );
    // Headless with nobody to ask: only the hook's yes let this one run.
    assert!(results[1].contains("allowed"), "{results:?}");
    assert!(!results[1].starts_with("error"), "{results:?}");
}

#[test]
fn nops_own_hooks_take_matchers_and_the_new_events() {
    let repo = Repo::new();
    let config = repo.path().join(".nop/config.yml");
    let text = fs::read_to_string(&config).expect("config");
    let base = text.split("\nhooks:").next().unwrap_or(&text).to_string();
    fs::create_dir_all(repo.path().join("work")).expect("mkdir");
    fs::write(
        &config,
        format!(
            "{base}\nhooks:\n  before-tool:\n    - matcher: write-file|edit-file\n      command: 'cat >> work/before.jsonl; echo >> work/before.jsonl'\n  user-prompt-submit:\n    - 'cat > work/prompt.json'\n  notification:\n    - 'cat > work/notification.json'\n  stop:\n    - 'cat > work/stop.json'\n"
        ),
    )
    .expect("write");
    repo.trust();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[
            ("c1", "shell", json!({"command": "echo hi"})),
            (
                "c2",
                "write-file",
                json!({"path": "work/a.txt", "content": "a"}),
            ),
        ]),
        openai::reply_text("bye"),
    ]);
    repo.model_ok(&server, &["run", "say hi"]);
    let read = |name: &str| -> Value {
        serde_json::from_str(
            fs::read_to_string(repo.path().join("work").join(name))
                .expect(name)
                .trim(),
        )
        .expect("json")
    };
    let before = fs::read_to_string(repo.path().join("work/before.jsonl")).expect("before");
    assert_eq!(before.lines().count(), 1, "{before}");
    assert_eq!(read("before.jsonl")["tool"], "write-file");
    assert_eq!(read("before.jsonl")["arguments"]["path"], "work/a.txt");
    let prompt = read("prompt.json");
    assert_eq!(
        (prompt["event"].clone(), prompt["prompt"].clone()),
        (json!("user-prompt-submit"), json!("say hi"))
    );
    let stop = read("stop.json");
    assert_eq!(
        (
            stop["event"].clone(),
            stop["final_message"].clone(),
            stop["stop_hook_active"].clone()
        ),
        (json!("stop"), json!("bye"), json!(false))
    );
    let done = read("notification.json");
    assert_eq!(
        (done["event"].clone(), done["kind"].clone()),
        (json!("notification"), json!("done"))
    );
}

#[test]
fn a_bad_matcher_in_nops_config_is_an_error_naming_the_key() {
    let repo = Repo::new();
    let config = repo.path().join(".nop/config.yml");
    let text = fs::read_to_string(&config).expect("config");
    let base = text.split("\nhooks:").next().unwrap_or(&text).to_string();
    fs::write(
        &config,
        format!("{base}\nhooks:\n  before-tool:\n    - {{matcher: '(', command: 'true'}}\n"),
    )
    .expect("write");
    let out = repo.nop().args(["config", "show"]).output().expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        stderr.contains("hooks.before-tool") && stderr.contains("not a regular expression"),
        "{stderr}"
    );
}

#[test]
fn a_broken_claude_settings_file_is_a_warning_and_the_run_goes_on() {
    let repo = Repo::new();
    fs::create_dir_all(repo.path().join(".claude")).expect("mkdir");
    fs::write(repo.path().join(".claude/settings.json"), "{\"hooks\": [").expect("write");
    fs::write(
        repo.path().join(".claude/settings.local.json"),
        r#"{"hooks": {"Stop": [{"hooks": [{"type": "prompt", "prompt": "done?"}]}]}}"#,
    )
    .expect("write");
    let server = MockServer::start(vec![openai::reply_text("ok")]);
    let out = repo.model_ok(&server, &["run", "go"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(".claude/settings.json: is not valid JSON"),
        "{stderr}"
    );
    assert!(
        stderr.contains("nop runs only `type: \"command\"` hooks, not `prompt`"),
        "{stderr}"
    );
}

/// Changed by design: a settings file written between runs is no longer trusted for having been
/// written while no run was working; a headless run leaves its hooks out until the user trusts
/// it (`nop trust --yes`), and runs them from then on.
#[test]
fn a_settings_file_the_user_writes_between_runs_is_trusted() {
    let repo = Repo::new();
    fs::create_dir_all(repo.path().join("work")).expect("mkdir");
    let server = MockServer::start(vec![
        openai::reply_text("one"),
        openai::reply_text("two"),
        openai::reply_text("three"),
    ]);
    repo.model_ok(&server, &["run", "first"]);
    fs::create_dir_all(repo.path().join(".claude")).expect("mkdir");
    fs::write(
        repo.path().join(".claude/settings.local.json"),
        json!({"hooks": {"SessionStart": [{"hooks": [{"type": "command", "command": "touch work/started"}]}]}}).to_string(),
    )
    .expect("write");
    let out = repo.model_ok(&server, &["run", "second"]);
    assert!(!repo.path().join("work/started").exists());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("not trusted") && stderr.contains(".claude/settings.local.json"),
        "{stderr}"
    );
    repo.trust();
    repo.model_ok(&server, &["run", "third"]);
    assert!(repo.path().join("work/started").exists());
}

#[test]
fn user_level_claude_hooks_run_and_never_get_the_provider_key() {
    let repo = Repo::new();
    let home = crate::support::repo_dir();
    fs::create_dir_all(home.path().join(".claude")).expect("mkdir");
    fs::create_dir_all(repo.path().join("work")).expect("mkdir");
    let settings = json!({"hooks": {
        "SessionStart": [{"hooks": [{"type": "command", "command": "env > \"$CLAUDE_PROJECT_DIR\"/work/start.env"}]}],
        "PreToolUse": [{"matcher": "*", "hooks": [{"type": "command", "command": "env > \"$NOP_PROJECT_DIR\"/work/pre.env"}]}],
    }});
    fs::write(
        home.path().join(".claude/settings.json"),
        settings.to_string(),
    )
    .expect("write");
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("c1", "shell", json!({"command": "echo ran"}))]),
        openai::reply_text("ok"),
    ]);
    let out = repo
        .nop_model(&server, "openai")
        .env("HOME", home.path())
        .env("NOP_API_KEY", "sk-claude-hook-canary-1")
        .env("MY_LLM_KEY_VAR", "sk-claude-hook-canary-2")
        .env("NOP_PROVIDER_API_KEY_ENV", "MY_LLM_KEY_VAR")
        .env("HOOK_VISIBLE", "yes")
        .args(["run", "go"])
        .output()
        .expect("run");
    crate::support::assert_ok(&out);
    for name in ["start.env", "pre.env"] {
        let env = fs::read_to_string(repo.path().join("work").join(name)).expect(name);
        assert!(env.contains("HOOK_VISIBLE=yes"), "{env}");
        assert!(!env.contains("sk-claude-hook-canary"), "{name}: {env}");
    }
}

/// What a planted hook would do: leave a canary file outside the repository.
fn planted_settings(canary: &Path) -> String {
    json!({"hooks": {
        "SessionStart": [{"hooks": [{"type": "command", "command": format!("touch {}", canary.display())}]}],
        "PreToolUse": [{"hooks": [{"type": "command", "command": format!("touch {}", canary.display())}]}],
    }})
    .to_string()
}

#[test]
fn hostile_a_model_cannot_plant_a_claude_code_hook() {
    let outside = crate::support::repo_dir();
    // The third: HOME is the repository under another name (a symbolic link), so
    // `~/.claude/settings.json` is the project's file too.
    for (name, existing, linked_home) in [
        ("settings.json", true, false),
        ("settings.local.json", false, false),
        ("settings.json", false, true),
    ] {
        let repo = Repo::new();
        let home = outside.path().join(format!("home-{name}-{existing}"));
        if linked_home {
            std::os::unix::fs::symlink(repo.path(), &home).expect("symlink");
        }
        let run = |server: &MockServer, prompt: &str| {
            let mut nop = repo.nop_model(server, "openai");
            if linked_home {
                nop.env("HOME", &home);
            }
            let out = nop.args(["run", prompt]).output().expect("run");
            crate::support::assert_ok(&out);
            out
        };
        fs::create_dir_all(repo.path().join(".claude")).expect("mkdir");
        if existing {
            fs::write(repo.path().join(".claude").join(name), "{}").expect("write");
        }
        let canary = outside.path().join(format!("fired-{name}-{existing}"));
        let settings = planted_settings(&canary);
        let path = format!(".claude/{name}");
        let quoted = settings.replace('\'', "'\\''");
        let server = MockServer::start(vec![
            openai::reply_tool_calls(&[
                (
                    "c1",
                    "write-file",
                    json!({"path": path, "content": settings}),
                ),
                (
                    "c2",
                    "shell",
                    json!({"command": format!("printf '%s' '{quoted}' > {path}")}),
                ),
            ]),
            openai::reply_text("planted"),
            openai::reply_tool_calls(&[("c3", "shell", json!({"command": "echo next"}))]),
            openai::reply_text("ok"),
        ]);
        run(&server, "plant");
        let results = server.results_of(&["c1", "c2"]);
        assert!(results[0].starts_with("error"), "{name}: {results:?}");
        let text = fs::read_to_string(repo.path().join(&path)).unwrap_or_default();
        if existing {
            // An existing file is read-only to commands too.
            assert!(results[1].contains("read-only"), "{name}: {results:?}");
            assert!(!text.contains("touch"), "{name}: {text}");
        } else {
            // A file that does not exist yet cannot be mounted read-only: the command makes
            // it, and nop leaves its hooks out because the user never trusted them.
            assert!(text.contains("touch"), "{name}: {results:?}");
        }
        // The next run runs no hook of it, and says why. (Changed by design: the warning was
        // "its hooks are not run: it changed while nop's agent was running"; now what the user
        // never trusted is left out, whoever wrote it, and the warning names the file.)
        let out = run(&server, "next");
        assert!(!canary.exists(), "{name}: a planted hook ran");
        if !existing {
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                stderr.contains("not trusted") && stderr.contains(&path),
                "{stderr}"
            );
        }
    }
}

#[test]
fn a_subagent_stop_hook_keeps_a_subagent_going_once() {
    let script = r#"#!/bin/bash
input=$(cat)
printf '%s\n' "$input" >> "$CLAUDE_PROJECT_DIR"/work/subagent-stop.jsonl
if [ "$(printf '%s' "$input" | jq -r .stop_hook_active)" = "false" ]; then
  echo '{"decision": "block", "reason": "check your answer"}'
fi
"#;
    let repo = with_claude(
        json!({"hooks": {"SubagentStop": [{"hooks": [command("subagent-stop.sh")]}]}}),
        &[("subagent-stop.sh", script)],
    );
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[(
            "c1",
            "call-agent",
            json!({"agent": "coder", "arguments": "investigate"}),
        )]),
        openai::reply_text("found it"),
        openai::reply_text("found it, checked"),
        openai::reply_text("ok"),
    ]);
    repo.model_ok(&server, &["run", "delegate"]);
    let requests = server.requests();
    assert_eq!(requests.len(), 4);
    assert_eq!(
        requests[2].user_messages().last().map(String::as_str),
        Some("check your answer")
    );
    let result = server.result_of("c1");
    assert!(result.contains("found it, checked"), "{result}");
    let log = fs::read_to_string(repo.path().join("work/subagent-stop.jsonl")).expect("log");
    let events: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    assert_eq!(
        events
            .iter()
            .map(|e| (e["hook_event_name"].clone(), e["stop_hook_active"].clone()))
            .collect::<Vec<_>>(),
        vec![
            (json!("SubagentStop"), json!(false)),
            (json!("SubagentStop"), json!(true))
        ]
    );
}

#[test]
fn a_notification_hook_is_told_when_the_agent_asks_the_user() {
    let repo = with_claude(
        json!({"hooks": {"Notification": [{"hooks": [{"type": "command", "command": "jq -r .message > work/notified.txt"}]}]}}),
        &[],
    );
    let server = MockServer::start(vec![openai::reply_tool_calls(&[(
        "c1",
        "ask-user",
        json!({"question": "Which file should I change?"}),
    )])]);
    let out = repo
        .nop_model(&server, "openai")
        .args(["run", "fix it"])
        .output()
        .expect("run");
    assert!(out.status.code().is_some(), "{out:?}");
    let notified = fs::read_to_string(repo.path().join("work/notified.txt")).expect("notified");
    assert_eq!(
        notified.trim(),
        "nop is waiting for your answer: Which file should I change?"
    );
}
