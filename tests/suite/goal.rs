//! A goal that outlives one prompt (issue 30): `nop run --goal … [--until CMD]`, checked by the
//! goal-checker advisor whenever the agent stops, the run going on with its reason; kept by
//! compaction and resume; exit codes for met, not met and budget.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::support::Repo;
use crate::support::mock::{MockResponse, MockServer, RecordedRequest, openai};

fn system(request: &RecordedRequest) -> String {
    request.body["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn is_checker(request: &RecordedRequest) -> bool {
    system(request).contains("You are a goal checker")
}

fn is_compact_agent(request: &RecordedRequest) -> bool {
    system(request).starts_with("You compress the earlier part")
}

/// `nop run --output-format json ARGS`: exit code and result.
fn run_json(repo: &Repo, server: &MockServer, args: &[&str]) -> (i32, Value) {
    let output = repo
        .nop_model(server, "openai")
        .arg("run")
        .args(["--output-format", "json"])
        .args(args)
        .output()
        .expect("run nop");
    let result = serde_json::from_slice(&output.stdout).unwrap_or_else(|_| {
        panic!(
            "no JSON result: {}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output.status.code().unwrap_or(-1), result)
}

#[test]
fn a_goal_not_met_at_the_first_check_is_met_at_the_second() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_text("Done, I believe."),
        openai::reply_text(r#"{"met": false, "reason": "hello.txt does not exist yet"}"#),
        openai::reply_tool_calls(&[(
            "w",
            "write-file",
            json!({"path": "hello.txt", "content": "hi\n"}),
        )]),
        openai::reply_text("Wrote hello.txt."),
        openai::reply_text(r#"{"met": true, "reason": "hello.txt exists and the command passed"}"#),
    ]);
    let (code, result) = run_json(
        &repo,
        &server,
        &["--goal", "hello.txt exists", "--until", "test -f hello.txt"],
    );
    assert_eq!(code, 0, "{result}");
    assert_eq!(result["status"], "completed");
    assert_eq!(result["final_message"], "Wrote hello.txt.");
    let requests = server.requests();
    assert_eq!(requests.len(), 5);
    // The goal was told with the input; each check read the command's exit code.
    assert!(requests[0].user_messages()[0].contains("Goal: hello.txt exists"));
    assert!(is_checker(&requests[1]) && is_checker(&requests[4]));
    assert!(
        requests[1].raw_body.contains(r#"\"exitCode\": 1"#),
        "{}",
        requests[1].raw_body
    );
    assert!(requests[4].raw_body.contains(r#"\"exitCode\": 0"#));
    // The checker's reason was the agent's next input.
    assert!(
        requests[2]
            .user_messages()
            .iter()
            .any(|m| m.contains("The goal is not met yet: hello.txt does not exist yet")),
        "{:?}",
        requests[2].user_messages()
    );
    // The answer the checker judged is in the conversation before its reason.
    assert!(requests[2].raw_body.contains("Done, I believe."));
    let id = result["session_id"].as_str().expect("id");
    let conversation = repo.conversation(id);
    assert_eq!(conversation.len(), 6, "{conversation:#?}");
    assert_eq!(conversation[1], "assistant: Done, I believe.");
    assert!(conversation[2].starts_with("user: The goal is not met yet"));
    assert_eq!(conversation[3], "assistant: calls write-file");
    assert_eq!(conversation[5], "assistant: Wrote hello.txt.");
    let goal = &repo.session_json(id)["goal"];
    assert_eq!(goal["status"], "met", "{goal}");
    assert_eq!(goal["until"], "test -f hello.txt");
    let checks = goal["checks"].as_array().expect("checks");
    assert_eq!(checks.len(), 2);
    assert_eq!(
        (checks[0]["met"].clone(), checks[0]["exitCode"].clone()),
        (json!(false), json!(1))
    );
    assert_eq!(
        (checks[1]["met"].clone(), checks[1]["exitCode"].clone()),
        (json!(true), json!(0))
    );
    let shown = repo.run(&["sessions", "show", id]);
    assert!(
        shown.contains("goal      hello.txt exists (met)") && shown.contains("check 2"),
        "{shown}"
    );
}

#[test]
fn a_failing_until_command_is_not_met_whatever_the_checker_says() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_text("All green."),
        openai::reply_text(r#"{"met": true, "reason": "the agent says so"}"#),
    ]);
    let (code, result) = run_json(
        &repo,
        &server,
        &[
            "--max-turns",
            "1",
            "--goal",
            "tests pass",
            "--until",
            "exit 3",
        ],
    );
    assert_eq!(code, 6, "{result}");
    assert_eq!(result["status"], "goal_not_met");
    let message = result["final_message"].as_str().unwrap_or_default();
    assert!(
        message.contains("`exit 3` exited 3") && message.contains("--max-turns"),
        "{message}"
    );
    let id = result["session_id"].as_str().expect("id");
    assert_eq!(repo.session_json(id)["goal"]["status"], "not-met");
}

/// A model that never finishes: every answer claims done, every check says not yet.
fn never_met() -> MockServer {
    MockServer::start_with(Box::new(|request: &RecordedRequest| {
        if is_checker(request) {
            openai::reply_text(r#"{"met": false, "reason": "the report is still missing"}"#)
        } else if is_compact_agent(request) {
            openai::reply_text("The agent answered three times; the report is still missing.")
        } else {
            openai::reply_text("Done.")
        }
    }))
}

#[test]
fn a_goal_never_met_stops_at_the_budget() {
    let repo = Repo::new();
    let path = repo.path().join(".nop/config.yml");
    let mut config = std::fs::read_to_string(&path).expect("config.yml");
    config.push_str("\npricing:\n  mock-model: {input: 1000, output: 1000}\n");
    std::fs::write(&path, config).expect("write config.yml");
    let server = never_met();
    // Usage as the prompt's real size: each request costs a few dollars.
    server.simulate_prompt_cache();
    let (code, result) = run_json(
        &repo,
        &server,
        &["--max-budget-usd", "12", "--goal", "write the report"],
    );
    assert_eq!(code, 5, "{result}");
    assert_eq!(result["status"], "budget_exceeded");
    let spent = result["total_cost_usd"].as_f64().expect("cost");
    assert!(spent <= 12.0, "spent {spent}");
    let id = result["session_id"].as_str().expect("id");
    let goal = &repo.session_json(id)["goal"];
    assert!(
        !goal["checks"].as_array().expect("checks").is_empty(),
        "{goal}"
    );
    // The goal waits for the next run with more budget.
    assert_eq!(goal["status"], "active");
}

#[test]
fn a_goal_is_kept_by_compaction_and_taken_up_again_on_resume() {
    let repo = Repo::new();
    let server = never_met();
    let (code, result) = run_json(
        &repo,
        &server,
        &["--max-turns", "3", "--goal", "write the report"],
    );
    assert_eq!(code, 6, "{result}");
    let id = result["session_id"].as_str().expect("id").to_string();
    assert_eq!(repo.session_json(&id)["goal"]["status"], "not-met");
    // Compacted: the summary carries the goal and its last check.
    let out = repo
        .nop_model(&server, "openai")
        .args(["--set", "compaction.keep_last=1", "compact", &id])
        .output()
        .expect("compact");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let session = repo.session_json(&id);
    let summary = session["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .find(|m| m["compactionSummary"] == true)
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(
        summary.contains("Goal (kept by every compaction): write the report")
            && summary.contains("the report is still missing"),
        "{summary}"
    );
    // Resumed: the goal is active again and checked when the agent stops.
    let checks_before = session["goal"]["checks"].as_array().map_or(0, Vec::len);
    let met = Arc::new(Mutex::new(false));
    let server = {
        let met = Arc::clone(&met);
        MockServer::start_with(Box::new(move |request: &RecordedRequest| {
            if is_checker(request) {
                *met.lock().expect("lock") = true;
                openai::reply_text(r#"{"met": true, "reason": "the report is written"}"#)
            } else {
                MockResponse::sse(vec![
                    openai::text("Report written."),
                    openai::finish("stop"),
                    openai::usage(10, 5),
                    openai::done(),
                ])
            }
        }))
    };
    let (code, result) = run_json(&repo, &server, &["--session", &id, "go on"]);
    assert_eq!(code, 0, "{result}");
    assert!(
        *met.lock().expect("lock"),
        "the resumed run checked the goal"
    );
    let goal = &repo.session_json(&id)["goal"];
    assert_eq!(goal["status"], "met");
    assert_eq!(
        goal["checks"].as_array().map(Vec::len),
        Some(checks_before + 1)
    );
}
