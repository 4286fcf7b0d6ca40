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
