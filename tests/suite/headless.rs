//! nop in CI as the anchors are used (issue 42): `--output-format json` and the last line of
//! `stream-json` carry Claude Code's result fields beside nop's own, so that a step written
//! for `claude -p --output-format json` reads a nop run unchanged; a run that fails before it
//! can report still ends with a result object, and `is_error` agrees with the exit code.

use serde_json::{Value, json};

use crate::support::Repo;
use crate::support::mock::{MockServer, openai};

/// `nop ARGS` against `server`: exit code and the JSON lines of stdout.
fn run(repo: &Repo, server: &MockServer, args: &[&str]) -> (i32, Vec<Value>) {
    let output = repo
        .nop_model(server, "openai")
        .args(args)
        .output()
        .expect("run nop");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let lines = stdout
        .lines()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|e| {
                panic!(
                    "not JSON ({e}): {line}\n{}",
                    String::from_utf8_lossy(&output.stderr)
                )
            })
        })
        .collect();
    (output.status.code().unwrap_or(-1), lines)
}

/// What a `claude -p --output-format json` result has, with its JSON type: a jq filter written
/// for it finds each.
fn has_claude_codes_fields(result: &Value) {
    for (field, is) in [
        ("type", Value::is_string as fn(&Value) -> bool),
        ("subtype", Value::is_string),
        ("is_error", Value::is_boolean),
        ("result", Value::is_string),
        ("num_turns", Value::is_u64),
        ("duration_ms", Value::is_u64),
        ("duration_api_ms", Value::is_u64),
        ("session_id", Value::is_string),
        ("usage", Value::is_object),
        ("permission_denials", Value::is_array),
    ] {
        assert!(is(&result[field]), "{field} in {result}");
    }
    assert_eq!(result["type"], "result");
    for field in [
        "input_tokens",
        "output_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
    ] {
        assert!(result["usage"][field].is_u64(), "usage.{field} in {result}");
    }
    // `total_cost_usd` is there: a number, or null when the model has no price.
    assert!(
        result.as_object().unwrap().contains_key("total_cost_usd"),
        "{result}"
    );
}

#[test]
fn a_successful_run_reads_as_claude_codes_success_and_keeps_nops_fields() {
    let repo = Repo::new();
    let server = MockServer::start(vec![openai::reply_text("all done")]);
    let (code, lines) = run(&repo, &server, &["-p", "--output-format", "json", "hi"]);
    assert_eq!(code, 0);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let result = &lines[0];
    has_claude_codes_fields(result);
    assert_eq!(result["subtype"], "success");
    assert_eq!(result["is_error"], false);
    assert_eq!(result["result"], "all done");
    assert_eq!(result["num_turns"], 1);
    // nop's own contract is unchanged.
    assert_eq!(result["status"], "completed");
    assert_eq!(result["final_message"], "all done");
    assert_eq!(result["turns"], 1);
    assert!(result.get("continue_with").is_none(), "{result}");
    let id = result["session_id"].as_str().expect("id");
    assert!(repo.path().join(".nop/sessions").join(id).is_dir());
}

#[test]
fn a_run_at_its_max_turns_is_error_max_turns_in_both_json_formats() {
    let repo = Repo::new();
    std::fs::write(repo.path().join("a.txt"), "a\n").expect("write");
    let call = || openai::reply_tool_calls(&[("c1", "read-file", json!({"path": "a.txt"}))]);
    let server = MockServer::start(vec![call(), call()]);
    for format in ["json", "stream-json"] {
        let (code, lines) = run(
            &repo,
            &server,
            &[
                "exec",
                "--max-turns",
                "1",
                "--output-format",
                format,
                "read it",
            ],
        );
        assert_eq!(code, 1, "{format}");
        let result = lines.last().expect("a result line");
        has_claude_codes_fields(result);
        assert_eq!(result["subtype"], "error_max_turns", "{format}");
        assert_eq!(result["is_error"], true);
        assert_eq!(result["status"], "error");
        assert_eq!(result["limit"], "max_turns");
    }
}

#[test]
fn a_run_that_cannot_start_still_ends_with_an_error_result() {
    let repo = Repo::new();
    let server = MockServer::start(vec![]);
    let (code, lines) = run(
        &repo,
        &server,
        &[
            "run",
            "--session",
            "no-such-session",
            "--output-format",
            "json",
            "go on",
        ],
    );
    assert_eq!(code, 1);
    let result = lines.last().expect("a result line");
    assert_eq!(result["type"], "result");
    assert_eq!(result["is_error"], true);
    assert_eq!(result["subtype"], "error_during_execution");
    assert_eq!(result["status"], "error");
    assert!(
        result["result"]
            .as_str()
            .is_some_and(|r| r.contains("no-such-session")),
        "{result}"
    );
    assert!(server.requests().is_empty(), "nothing ran");
}

/// The tool names a request offered the model.
fn offered(request: &crate::support::mock::RecordedRequest) -> Vec<String> {
    request.body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn claude_codes_tool_flags_narrow_the_run_and_never_widen_it() {
    let repo = Repo::new();
    // The model calls a tool it was not offered: refused all the same.
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[(
            "c1",
            "write-file",
            json!({"path": "out.txt", "content": "x\n"}),
        )]),
        openai::reply_text("could not write"),
    ]);
    let (code, lines) = run(
        &repo,
        &server,
        &[
            "-p",
            "--allowedTools",
            "Read,Bash(npm test:*)",
            "--disallowedTools",
            "Bash",
            "--output-format",
            "json",
            "write out.txt",
        ],
    );
    assert_eq!(code, 0);
    let tools = offered(&server.requests()[0]);
    assert!(tools.contains(&"read-file".to_string()), "{tools:?}");
    for gone in ["write-file", "edit-file", "shell", "call-agent"] {
        assert!(!tools.contains(&gone.to_string()), "{gone} in {tools:?}");
    }
    assert!(!repo.path().join("out.txt").exists());
    let refused = server.result_of("c1");
    assert!(refused.contains("--allowedTools"), "{refused}");
    let result = &lines[0];
    assert_eq!(result["permission_denials"][0]["tool_name"], "write-file");
}

#[test]
fn claude_codes_permission_mode_maps_to_an_approval_mode_and_bypass_is_refused() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[(
            "c1",
            "write-file",
            json!({"path": "out.txt", "content": "x\n"}),
        )]),
        openai::reply_text("planned"),
    ]);
    let (code, _) = run(
        &repo,
        &server,
        &[
            "-p",
            "--permission-mode",
            "plan",
            "--output-format",
            "json",
            "write out.txt",
        ],
    );
    assert_eq!(code, 0);
    assert!(
        !repo.path().join("out.txt").exists(),
        "plan mode changes nothing"
    );
    let out = repo
        .nop_model(&server, "openai")
        .args(["-p", "--permission-mode", "bypassPermissions", "go"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--permission-mode bypassPermissions"),
        "{stderr}"
    );
    assert_eq!(server.requests().len(), 2, "the refused run asked nothing");
}

/// A run that writes a file, runs a command and answers.
fn a_small_task() -> MockServer {
    MockServer::start(vec![
        openai::reply_tool_calls(&[(
            "c1",
            "write-file",
            json!({"path": "notes.txt", "content": "hello\n"}),
        )]),
        openai::reply_tool_calls(&[("c2", "shell", json!({"command": "cat notes.txt"}))]),
        openai::reply_text("wrote and read it"),
    ])
}

#[test]
fn stream_json_speaks_claude_codes_shapes_when_asked() {
    let repo = Repo::new();
    let server = a_small_task();
    let (code, lines) = run(
        &repo,
        &server,
        &[
            "-p",
            "--output-format",
            "stream-json",
            "--events",
            "claude",
            "--verbose",
            "do it",
        ],
    );
    assert_eq!(code, 0);
    let kinds: Vec<String> = lines
        .iter()
        .map(|l| match l["subtype"].as_str() {
            Some(sub) => format!("{}/{sub}", l["type"].as_str().unwrap()),
            None => l["type"].as_str().unwrap().to_string(),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "system/init",
            "assistant",
            "user",
            "assistant",
            "user",
            "assistant",
            "result/success"
        ],
        "{lines:#?}"
    );
    let id = lines[0]["session_id"].as_str().expect("id");
    assert!(lines.iter().all(|l| l["session_id"] == id), "{lines:#?}");
    let tool_use = &lines[1]["message"]["content"][0];
    assert_eq!(tool_use["type"], "tool_use");
    assert_eq!(tool_use["id"], "c1");
    assert_eq!(tool_use["name"], "write-file");
    assert_eq!(tool_use["input"]["path"], "notes.txt");
    let result = &lines[4]["message"]["content"][0];
    assert_eq!(result["type"], "tool_result");
    assert_eq!(result["tool_use_id"], "c2");
    assert_eq!(result["is_error"], false);
    assert!(
        result["content"].as_str().unwrap().contains("hello"),
        "{result}"
    );
    assert_eq!(
        lines[5]["message"]["content"][0]["text"],
        "wrote and read it"
    );
    has_claude_codes_fields(&lines[6]);
}

#[test]
fn exec_json_speaks_codexs_jsonl() {
    let repo = Repo::new();
    let server = a_small_task();
    let (code, lines) = run(&repo, &server, &["exec", "--json", "do it"]);
    assert_eq!(code, 0);
    let kinds: Vec<String> = lines
        .iter()
        .map(|l| match l["item"]["type"].as_str() {
            Some(item) => format!("{} {item}", l["type"].as_str().unwrap()),
            None => l["type"].as_str().unwrap().to_string(),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "thread.started",
            "turn.started",
            "item.completed file_change",
            "item.started command_execution",
            "item.completed command_execution",
            "item.completed agent_message",
            "turn.completed"
        ],
        "{lines:#?}"
    );
    let change = &lines[2]["item"];
    assert_eq!(
        change["changes"][0],
        json!({"path": "notes.txt", "kind": "add"})
    );
    assert_eq!(change["status"], "completed");
    let command = &lines[4]["item"];
    assert_eq!(command["id"], lines[3]["item"]["id"]);
    assert_eq!(command["command"], "cat notes.txt");
    assert_eq!(command["exit_code"], 0);
    assert_eq!(command["status"], "completed");
    assert!(
        command["aggregated_output"]
            .as_str()
            .unwrap()
            .contains("hello")
    );
    assert_eq!(lines[5]["item"]["text"], "wrote and read it");
    assert!(lines[6]["usage"]["input_tokens"].is_u64(), "{}", lines[6]);
    // The thread id is the session to go on with.
    let id = lines[0]["thread_id"].as_str().expect("id");
    assert!(repo.path().join(".nop/sessions").join(id).is_dir());
    // A failure before the run is Codex's error line.
    let (code, lines) = run(
        &repo,
        &server,
        &["exec", "--json", "--session", "nope", "go on"],
    );
    assert_eq!(code, 1);
    assert_eq!(lines.last().expect("a line")["type"], "error");
}

/// `nop ARGS` against `server` where unprivileged user namespaces are refused, as on a hosted
/// Ubuntu 24.04 runner: exit code and the JSON lines of stdout.
fn run_without_namespaces(repo: &Repo, server: &MockServer, args: &[&str]) -> (i32, Vec<Value>) {
    let output = std::process::Command::new("unshare")
        .args(["--user", "--map-root-user", "sh", "-c"])
        .arg("echo 0 > /proc/sys/user/max_user_namespaces && exec \"$@\"")
        .arg("sh")
        .arg(assert_cmd::cargo::cargo_bin("nop"))
        .args(args)
        .current_dir(repo.path())
        .env_clear()
        .env("HOME", repo.path())
        .env("XDG_STATE_HOME", repo.state.path())
        .env("PATH", "/usr/bin:/bin")
        .envs(crate::support::model_env(server, "openai"))
        .output()
        .expect("unshare");
    let lines = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    (output.status.code().unwrap_or(-1), lines)
}

#[test]
fn a_runner_without_user_namespaces_says_what_confines_and_required_never_goes_green() {
    let repo = Repo::new();
    let server = MockServer::start(vec![openai::reply_text("done")]);
    // Best effort: Landlock alone, and the result says so.
    let (code, lines) =
        run_without_namespaces(&repo, &server, &["-p", "--output-format", "json", "hi"]);
    assert_eq!(code, 0, "{lines:?}");
    assert_eq!(lines[0]["sandbox"], "landlock", "{}", lines[0]);
    // Required: the run does not start, no model request is made, and the result says why.
    let (code, lines) = run_without_namespaces(
        &repo,
        &server,
        &[
            "--set",
            "sandbox=required",
            "-p",
            "--output-format",
            "json",
            "hi",
        ],
    );
    assert_eq!(code, 1);
    let result = lines.last().expect("a result");
    assert_eq!(result["is_error"], true);
    assert!(
        result["result"]
            .as_str()
            .is_some_and(|r| r.contains("sandbox: required") && r.contains("did not start")),
        "{result}"
    );
    assert_eq!(
        server.requests().len(),
        1,
        "only the best-effort run asked the model"
    );
    // Where namespaces work, the result names them.
    let (_, lines) = run(
        &repo,
        &MockServer::start(vec![openai::reply_text("ok")]),
        &["-p", "--output-format", "json", "hi"],
    );
    assert_eq!(lines[0]["sandbox"], "namespaces");
}
