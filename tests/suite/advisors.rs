//! Advisors, subagents and compaction end to end: the mock model scripts the advisors' replies
//! too (they are ordinary agents making ordinary model requests, in order).

use std::fs;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::Repo;
use crate::support::mock::{MockResponse, MockServer, RecordedRequest, openai};

/// `nop run --output-format json` with advisors on and no pause between retries. A missing
/// file is what these tests fail a call with: like every failed call, it goes to retry-advisor.
fn run(
    repo: &Repo,
    server: &MockServer,
    env: &[(&str, &str)],
    args: &[&str],
) -> (i32, Value, String) {
    let mut cmd = repo.nop_model(server, "openai");
    cmd.env("NOP_ADVISORS_ENABLED", "true")
        .env("NOP_ADVISORS_RETRY_DELAY_S", "0");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let output = cmd
        .args(["run", "--output-format", "json"])
        .args(args)
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let result = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    (output.status.code().unwrap_or(-1), result, stderr)
}

fn reply(value: Value) -> MockResponse {
    openai::reply_text(&value.to_string())
}

fn system_prompt(request: &RecordedRequest) -> String {
    request.body["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Every session of the repository as JSON, oldest first.
fn sessions(repo: &Repo) -> Vec<Value> {
    let list: Value =
        serde_json::from_str(&repo.run(&["sessions", "list", "--json", "--all"])).expect("json");
    let mut all: Vec<Value> = list
        .as_array()
        .expect("array")
        .iter()
        .map(|s| repo.session_json(s["id"].as_str().expect("id")))
        .collect();
    all.sort_by_key(|s| s["sessionId"].as_str().unwrap_or_default().to_string());
    all
}

#[test]
fn retry_advisor_modified_params_succeed_on_the_second_try() {
    let repo = Repo::new();
    fs::write(repo.path().join("present.txt"), "found it\n").expect("write");
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("c1", "read-file", json!({"path": "presnt.txt"}))]),
        reply(
            json!({"shouldRetry": true, "reason": "typo in the path", "suggestedAction": "modify_params", "modifiedParams": {"path": "present.txt"}}),
        ),
        openai::reply_text("done"),
    ]);
    let (code, result, stderr) = run(&repo, &server, &[], &["read it"]);
    assert_eq!(code, 0, "{stderr}");
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    assert!(system_prompt(&requests[1]).contains("retry advisor"));
    let question = requests[1].body["messages"][1]["content"]
        .as_str()
        .unwrap_or_default();
    assert!(
        question.contains("\"errorType\": \"NotFound\"") && question.contains("\"retryCount\": 0"),
        "{question}"
    );
    let retried = server.result_of("c1");
    assert!(
        retried.starts_with("[succeeded after 1 retry advised by retry-advisor with arguments"),
        "{retried}"
    );
    assert!(retried.ends_with("found it\n"));
    // The advisor ran in its own session that records its caller.
    let advisor = sessions(&repo)
        .into_iter()
        .find(|s| s["agent"] == "retry-advisor")
        .expect("advisor session");
    assert_eq!(advisor["caller"]["sessionId"], result["session_id"]);
    assert_eq!(advisor["status"], "completed");
    assert!(advisor["metrics"]["durationMs"].is_u64());
}

/// An advisor is nop's machinery: off the screen of a text run, marked in stream-json.
#[test]
fn advisors_at_work_are_not_on_the_screen_and_are_marked_in_the_stream() {
    let repo = Repo::new();
    fs::write(repo.path().join("present.txt"), "found it\n").expect("write");
    let script = || {
        vec![
            openai::reply_tool_calls(&[("c1", "read-file", json!({"path": "presnt.txt"}))]),
            reply(
                json!({"shouldRetry": true, "reason": "typo", "suggestedAction": "modify_params", "modifiedParams": {"path": "present.txt"}}),
            ),
            openai::reply_text("done"),
        ]
    };
    let server = MockServer::start(script());
    let output = repo
        .nop_model(&server, "openai")
        .env("NOP_ADVISORS_ENABLED", "true")
        .env("NOP_ADVISORS_RETRY_DELAY_S", "0")
        .args(["run", "read it"])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(server.requests().len(), 3, "the advisor was asked");
    // No start and end lines; the retry it advised is what the user should know.
    assert!(!stderr.contains("↳"), "{stderr}");
    assert!(!stderr.contains("retry-advisor started"), "{stderr}");
    assert!(
        stderr.contains("succeeded after 1 retry advised by retry-advisor"),
        "{stderr}"
    );
    let server = MockServer::start(script());
    let output = repo
        .nop_model(&server, "openai")
        .env("NOP_ADVISORS_ENABLED", "true")
        .env("NOP_ADVISORS_RETRY_DELAY_S", "0")
        .args(["run", "--output-format", "stream-json", "read it"])
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let started: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "subagent_started")
        .collect();
    assert_eq!(started.len(), 1, "{stdout}");
    assert_eq!(started[0]["agent"], "retry-advisor");
    assert_eq!(started[0]["advisor"], true);
}

#[test]
fn invalid_advisor_answers_take_the_safe_default_and_identical_questions_are_asked_once() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("c1", "read-file", json!({"path": "nope.txt"}))]),
        openai::reply_text("You should definitely retry this!"),
        openai::reply_tool_calls(&[("c2", "read-file", json!({"path": "nope.txt"}))]),
        reply(json!({"shouldRetry": "maybe"})),
        openai::reply_tool_calls(&[("c3", "read-file", json!({"path": "gone.txt"}))]),
        reply(
            json!({"shouldRetry": false, "reason": "the file does not exist", "suggestedAction": "skip"}),
        ),
        openai::reply_tool_calls(&[("c4", "read-file", json!({"path": "gone.txt"}))]),
        openai::reply_text("gave up"),
    ]);
    let (code, result, stderr) = run(&repo, &server, &[], &["read"]);
    assert_eq!(code, 0, "{stderr} {result}");
    assert_eq!(result["final_message"], "gave up");
    // Requests: 4 main turns + 3 advisor calls (the 4th, identical to the 3rd, came from the cache).
    assert_eq!(
        server.requests().len(),
        8,
        "{:?}",
        server
            .requests()
            .iter()
            .map(system_prompt)
            .map(|s| s.chars().take(30).collect::<String>())
            .collect::<Vec<_>>()
    );
    let advisor_calls = server
        .requests()
        .iter()
        .filter(|r| system_prompt(r).contains("retry advisor"))
        .count();
    assert_eq!(advisor_calls, 3);
    let log = repo.run(&["log", result["session_id"].as_str().expect("id")]);
    assert!(
        log.contains("WARN") && log.contains("did not answer with a JSON object"),
        "{log}"
    );
    assert!(log.contains("does not match its schema"), "{log}");
}

#[test]
fn an_advisor_that_does_not_answer_in_time_gets_the_default() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("c1", "read-file", json!({"path": "nope.txt"}))]),
        MockResponse::Stall {
            chunks: vec![openai::text("thinking")],
            hold: Duration::from_secs(30),
        },
        openai::reply_text("moved on"),
    ]);
    let started = Instant::now();
    let (code, result, stderr) = run(
        &repo,
        &server,
        &[("NOP_ADVISORS_TIMEOUT_S", "0.5")],
        &["read"],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(result["final_message"], "moved on");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    let advisor = sessions(&repo)
        .into_iter()
        .find(|s| s["agent"] == "retry-advisor")
        .expect("advisor session");
    assert_eq!(advisor["status"], "error");
}

#[test]
fn abort_stops_the_run() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[
            ("c1", "read-file", json!({"path": "config/prod.yml"})),
            ("c2", "shell", json!({"command": "echo never"})),
        ]),
        reply(
            json!({"shouldRetry": false, "reason": "production config is missing; cannot continue", "suggestedAction": "abort"}),
        ),
    ]);
    // The mock is a local server: its advisor's abort is followed only with full judgement.
    let (code, result, stderr) = run(
        &repo,
        &server,
        &[("NOP_ADVISORS_JUDGEMENT", "full")],
        &["deploy"],
    );
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(result["status"], "error");
    assert!(
        result["final_message"]
            .as_str()
            .is_some_and(|m| m.contains("retry-advisor") && m.contains("production config"))
    );
    let session = repo.session_json(result["session_id"].as_str().expect("id"));
    let last = session["messages"]
        .as_array()
        .and_then(|m| m.last())
        .expect("message");
    assert!(
        last["content"]
            .as_str()
            .is_some_and(|c| c.contains("not run")),
        "{last}"
    );
    assert_eq!(server.requests().len(), 2);
}

/// A local server's advisor (the same small model) neither ends the run nor forces an edit
/// through with `replace_all`: the failures go back to the model, which goes on.
#[test]
fn a_local_advisor_neither_aborts_the_run_nor_widens_an_edit() {
    let repo = Repo::new();
    fs::write(repo.path().join("a.txt"), "x = 1\nx = 1\n").expect("write");
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[(
            "c1",
            "edit-file",
            json!({"path": "a.txt", "old_string": "x = 1", "new_string": "x = 2"}),
        )]),
        reply(
            json!({"shouldRetry": true, "reason": "replace them all", "suggestedAction": "modify_params", "modifiedParams": {"replace_all": true}}),
        ),
        openai::reply_tool_calls(&[("c2", "read-file", json!({"path": "config/prod.yml"}))]),
        reply(
            json!({"shouldRetry": false, "reason": "cannot continue", "suggestedAction": "abort"}),
        ),
        openai::reply_tool_calls(&[("c3", "shell", json!({"command": "echo still here"}))]),
        openai::reply_text("done"),
    ]);
    let (code, result, stderr) = run(&repo, &server, &[], &["edit it"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(result["status"], "completed");
    assert_eq!(
        fs::read_to_string(repo.path().join("a.txt")).expect("read"),
        "x = 1\nx = 1\n",
        "the edit was not widened"
    );
    assert!(
        server.result_of("c1").starts_with("error (NotUnique)"),
        "{}",
        server.result_of("c1")
    );
    assert!(server.result_of("c2").starts_with("error (NotFound)"));
    assert!(server.result_of("c3").contains("still here"));
    let log = fs::read_to_string(repo.path().join(".nop/logs/system.log")).unwrap_or_default();
    assert!(
        log.contains("abort not followed: advisors.judgement is limited"),
        "{log}"
    );
}

#[test]
fn compaction_keeps_the_four_parts_snapshots_the_full_history_and_the_session_goes_on() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[(
            "c1",
            "update-plan",
            json!({"tasks": [{"id": "1", "title": "Build", "status": "completed"}, {"id": "2", "title": "Test", "status": "in_progress"}]}),
        )]),
        openai::reply_tool_calls(&[("c2", "shell", json!({"command": "echo step two"}))]),
        openai::reply_tool_calls(&[("c3", "shell", json!({"command": "echo step three"}))]),
        // Before turn 4 the pre-check fires (8 messages): the advisor, the consistency check
        // (seed 002 §2.2), then the CompactAgent.
        reply(
            json!({"shouldCompress": true, "reason": "long enough", "priority": "medium", "suggestions": []}),
        ),
        reply(json!({"consistent": true, "inconsistencies": [], "summary": "agrees"})),
        openai::reply_text("SUMMARY: built, tests half done."),
        openai::reply_text("finished"),
    ]);
    let env = [
        ("NOP_COMPACTION_MAX_MESSAGES", "8"),
        ("NOP_COMPACTION_KEEP_LAST", "2"),
    ];
    let (code, result, stderr) = run(&repo, &server, &env, &["build and test"]);
    assert_eq!(code, 0, "{stderr}");
    let requests = server.requests();
    assert_eq!(requests.len(), 7);
    assert!(system_prompt(&requests[3]).contains("context-management advisor"));
    assert!(system_prompt(&requests[4]).contains("consistency checker"));
    assert!(system_prompt(&requests[5]).contains("You compress the earlier part"));
    assert!(
        requests[5].body.get("tools").is_none(),
        "the CompactAgent has no tools, so it cannot compact"
    );
    // The compacted conversation the model saw next.
    let messages = requests[6].body["messages"].as_array().expect("messages");
    assert_eq!(messages[0]["role"], "system");
    assert_eq!(messages[1]["content"], "build and test");
    let summary = messages[2]["content"].as_str().expect("summary");
    assert!(
        summary.contains("SUMMARY: built")
            && summary.contains("[completed] 1: Build")
            && summary.contains("[in_progress] 2: Test")
            && summary.contains("Consistency check: the plan agrees"),
        "{summary}"
    );
    assert_eq!(
        messages[3]["tool_calls"][0]["id"], "c3",
        "the kept tail starts with the call, not its result"
    );
    assert_eq!(messages[4]["tool_call_id"], "c3");
    assert_eq!(messages.len(), 5);

    let id = result["session_id"].as_str().expect("id").to_string();
    let session = repo.session_json(&id);
    let record = &session["compressions"][0];
    assert_eq!(record["messagesBefore"], 8);
    let snapshot = record["snapshotId"].as_str().expect("snapshot").to_string();
    let full: Value = serde_json::from_str(
        &fs::read_to_string(
            repo.session_dir(&id)
                .join(format!("history-{snapshot}.json")),
        )
        .expect("snapshot"),
    )
    .expect("json");
    assert_eq!(
        full["session"]["messages"].as_array().map(Vec::len),
        Some(8)
    );
    // A fork from the pre-compaction snapshot has the whole history back.
    let child = repo
        .run(&["fork", &id, "--snapshot", &snapshot])
        .trim()
        .to_string();
    assert_eq!(
        repo.session_json(&child)["messages"]
            .as_array()
            .map(Vec::len),
        Some(8)
    );
    // And the compacted session continues.
    server.push(openai::reply_text("still here"));
    let (code, result, _) = run(
        &repo,
        &server,
        &[("NOP_ADVISORS_ENABLED", "false")],
        &["--session", &id, "anything else?"],
    );
    assert_eq!(code, 0);
    assert_eq!(result["final_message"], "still here");
    repo.assert_session_shape(&id, "compaction.json");
    repo.assert_session_shape(&child, "forked.json");
}

#[test]
fn the_compact_command_forces_compaction() {
    let repo = Repo::new();
    let id = repo
        .session()
        .alternating(12, |i| format!("message {i}"))
        .write();
    let server = MockServer::start(vec![openai::reply_text("the gist")]);
    let output = repo
        .nop_model(&server, "openai")
        .env("NOP_COMPACTION_KEEP_LAST", "4")
        .args(["compact", &id])
        .output()
        .expect("run");
    crate::support::assert_ok(&output);
    let session = repo.session_json(&id);
    let messages = session["messages"].as_array().expect("messages");
    assert!(messages.len() < 12);
    assert_eq!(messages[0]["content"], "message 0");
    assert!(
        messages[1]["content"]
            .as_str()
            .is_some_and(|c| c.contains("the gist"))
    );
    assert_eq!(session["compressions"].as_array().map(Vec::len), Some(1));
}

#[test]
fn a_subagent_that_runs_too_long_is_stopped() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[(
            "c1",
            "call-agent",
            json!({"agent": "coder", "arguments": "investigate", "timeout": 0.5}),
        )]),
        MockResponse::Stall {
            chunks: vec![openai::text("hmm")],
            hold: Duration::from_secs(30),
        },
        // The failed call goes to retry-advisor, which says not to retry.
        reply(
            json!({"shouldRetry": false, "reason": "the subagent is too slow", "suggestedAction": "skip"}),
        ),
        openai::reply_text("handled"),
    ]);
    let started = Instant::now();
    let (code, result, stderr) = run(&repo, &server, &[], &["delegate"]);
    assert_eq!(code, 0, "{stderr} {result}");
    assert!(started.elapsed() < Duration::from_secs(15));
    let timed_out = server.result_of("c1");
    assert!(
        timed_out.starts_with("error (Timeout)") && timed_out.contains("timed out"),
        "{timed_out}"
    );
    let child = sessions(&repo)
        .into_iter()
        .find(|s| s["caller"]["sessionId"] == result["session_id"])
        .expect("child");
    assert_eq!(child["status"], "error");
    assert_eq!(child["caller"]["depth"], 1);
}

/// agent-helper.yml: every tool, every file of the repository.
fn helper_may_do_anything(repo: &Repo) {
    fs::write(
        repo.path().join(".nop/.permissions/agent-helper.yml"),
        "tools:\n  allowed: [\"*\"]\nfile-access:\n  - pattern: \"**\"\n    access: read\n",
    )
    .expect("write");
}

#[test]
fn a_subagent_cannot_exceed_its_callers_permissions() {
    let repo = Repo::new();
    let agents = fs::read_to_string(repo.path().join(".nop/agents.yml")).expect("agents");
    fs::write(
        repo.path().join(".nop/agents.yml"),
        format!("{agents}\n  - name: narrow\n    description: reads only\n  - name: helper\n    description: writes\n"),
    )
    .expect("write");
    fs::write(
        repo.path().join(".nop/.permissions/agent-narrow.yml"),
        "tools:\n  allowed: [call-agent, \"call-agent:helper\", read-file, write-file]\nfile-access:\n  - pattern: \"**\"\n    access: read-only\n",
    )
    .expect("write");
    helper_may_do_anything(&repo);
    // The user wrote the agents and their rules by hand: used once the user trusts them.
    repo.trust();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[(
            "c1",
            "call-agent",
            json!({"agent": "helper", "arguments": {"task": "write x.txt"}}),
        )]),
        openai::reply_tool_calls(&[
            ("h1", "write-file", json!({"path": "x.txt", "content": "x"})),
            ("h2", "shell", json!({"command": "echo hi"})),
        ]),
        openai::reply_text("I could not write it"),
        openai::reply_text("the helper could not"),
    ]);
    let (code, _, stderr) = run(
        &repo,
        &server,
        &[],
        &["--agent", "narrow", "get x.txt written"],
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(!repo.path().join("x.txt").exists());
    let helper_results = server.results_of(&["h1", "h2"]);
    assert!(
        helper_results[0].contains("PermissionDenied") && helper_results[0].contains("read-only"),
        "{helper_results:?}"
    );
    assert!(
        helper_results[1].contains("PermissionDenied") && helper_results[1].contains("shell"),
        "{helper_results:?}"
    );
    let main_result = server.result_of("c1");
    assert!(
        main_result.contains("agent helper (session")
            && main_result.contains("I could not write it"),
        "{main_result}"
    );
    // Only the tools both may call were offered to the helper.
    let offered = tool_names(&server.requests()[1]);
    assert!(
        offered.contains(&"write-file".to_string()) && !offered.contains(&"shell".to_string()),
        "{offered:?}"
    );
    let helper = sessions(&repo)
        .into_iter()
        .find(|s| s.get("caller").is_some())
        .expect("the helper's session");
    repo.assert_session_shape(helper["sessionId"].as_str().expect("id"), "subagent.json");
}

#[test]
fn a_subagents_session_records_where_its_permissions_come_from() {
    let repo = Repo::new();
    let agents = fs::read_to_string(repo.path().join(".nop/agents.yml")).expect("agents");
    fs::write(
        repo.path().join(".nop/agents.yml"),
        format!(
            "{agents}
  - name: helper
    description: writes
"
        ),
    )
    .expect("write");
    helper_may_do_anything(&repo);
    // The user wrote the agents and their rules by hand: used once the user trusts them.
    repo.trust();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[(
            "c1",
            "call-agent",
            json!({"agent": "helper", "arguments": "go"}),
        )]),
        openai::reply_text("done below"),
        openai::reply_text("done above"),
    ]);
    let (code, result, stderr) = run(&repo, &server, &[], &["delegate"]);
    assert_eq!(code, 0, "{stderr}");
    let helper = sessions(&repo)
        .into_iter()
        .find(|s| s["agent"] == "helper")
        .expect("helper session");
    assert_eq!(
        helper["permissions"],
        json!({
            "agent": "helper",
            "files": [".nop/.permissions/agent-helper.yml", ".nop/.permissions/agent-default.yml"],
            "narrowedBy": [{
                "agent": "coder",
                "sessionId": result["session_id"],
                "files": [".nop/.permissions/agent-default.yml"]
            }]
        })
    );
}

#[test]
fn recursion_stops_at_the_depth_limit() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[(
            "c1",
            "call-agent",
            json!({"agent": "coder", "arguments": "level one"}),
        )]),
        openai::reply_tool_calls(&[(
            "c2",
            "call-agent",
            json!({"agent": "coder", "arguments": "level two"}),
        )]),
        // Level one's failed call goes to retry-advisor, like every failed call.
        reply(json!({"shouldRetry": false, "reason": "too deep", "suggestedAction": "skip"})),
        openai::reply_text("level one could not go deeper"),
        openai::reply_text("top done"),
    ]);
    let (code, result, stderr) = run(
        &repo,
        &server,
        &[("NOP_SUBAGENTS_MAX_DEPTH", "1")],
        &["recurse"],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(result["final_message"], "top done");
    let inner = server.result_of("c2");
    assert!(
        inner.contains("DepthLimit") && inner.contains("subagents.max_depth"),
        "{inner}"
    );
}

#[test]
fn consistency_is_checked_when_a_session_is_loaded() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[(
            "c1",
            "update-plan",
            json!({"tasks": [{"id": "1", "title": "Write docs", "status": "completed"}]}),
        )]),
        openai::reply_text("planned"),
    ]);
    let (code, result, _) = run(&repo, &server, &[], &["plan it"]);
    assert_eq!(code, 0);
    let id = result["session_id"].as_str().expect("id").to_string();
    server.push(reply(json!({"consistent": false, "inconsistencies": [{"type": "missing_in_chat", "taskId": "1", "description": "docs marked completed but never written", "severity": "high", "suggestion": "set task 1 to pending"}], "summary": "one problem"})));
    server.push(openai::reply_text("continuing"));
    let output = repo
        .nop_model(&server, "openai")
        .env("NOP_ADVISORS_ENABLED", "true")
        .args(["run", "--session", &id, "go on"])
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("warning: plan and conversation disagree on task 1")
            && stderr.contains("never written"),
        "{stderr}"
    );
    let question = &server.requests()[2];
    assert!(system_prompt(question).contains("consistency checker"));
    assert!(
        question.body["messages"][1]["content"]
            .as_str()
            .is_some_and(|c| c.contains("Write docs"))
    );
    assert!(
        repo.run(&["log", &id])
            .contains("op=consistency result=inconsistent")
    );
}

#[test]
fn the_compact_tool_compacts_mid_run_and_the_call_keeps_its_result() {
    let repo = Repo::new();
    let id = repo
        .session()
        .system("be useful")
        .alternating(12, |i| format!("message {i}"))
        .write();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("k1", "compact", json!({}))]),
        openai::reply_text("summary of messages 1 to 8"),
        openai::reply_text("carrying on"),
    ]);
    let output = repo
        .nop_model(&server, "openai")
        .env("NOP_COMPACTION_KEEP_LAST", "3")
        .args([
            "run",
            "--output-format",
            "json",
            "--session",
            &id,
            "please compact",
        ])
        .output()
        .expect("run");
    crate::support::assert_ok(&output);
    let requests = server.requests();
    assert!(system_prompt(&requests[1]).contains("You compress the earlier part"));
    let after = server.request_with_result("k1");
    let last = after.body["messages"].as_array().expect("messages");
    assert_eq!(last[0]["content"], "be useful");
    assert_eq!(last[1]["content"], "message 0");
    assert!(
        last[2]["content"]
            .as_str()
            .is_some_and(|c| c.contains("summary of messages"))
    );
    let n = last.len();
    assert_eq!(
        last[n - 2]["tool_calls"][0]["function"]["name"],
        "compact",
        "the calling message survives"
    );
    assert!(
        last[n - 1]["content"]
            .as_str()
            .is_some_and(|c| c.starts_with("compacted; the full history is in snapshot"))
    );
}

/// A permission file for coder: every tool but those in `denied`, every file of the repository.
fn coder_permissions(repo: &Repo, denied: &[&str]) {
    let denied: Vec<String> = denied.iter().map(|d| format!("\"{d}\"")).collect();
    fs::write(
        repo.path().join(".nop/.permissions/agent-coder.yml"),
        format!(
            "agent: coder\ntools:\n  allowed: [\"*\"]\n  denied: [{}]\nfile-access:\n  - pattern: \"**\"\n    access: read\n",
            denied.join(", ")
        ),
    )
    .expect("write");
}

fn tool_names(request: &RecordedRequest) -> Vec<String> {
    request.body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn an_advisor_the_agent_may_not_call_is_not_consulted_and_the_refusal_is_recorded() {
    for denied in ["call-agent", "call-agent:retry-advisor"] {
        let repo = Repo::new();
        coder_permissions(&repo, &[denied]);
        let server = MockServer::start(vec![
            openai::reply_tool_calls(&[("c1", "read-file", json!({"path": "nope.txt"}))]),
            openai::reply_text("gave up"),
        ]);
        let (code, result, stderr) = run(&repo, &server, &[], &["read it"]);
        assert_eq!(code, 0, "{stderr}");
        // No request went to retry-advisor: the safe default (no retry) was taken.
        let requests = server.requests();
        assert_eq!(requests.len(), 2, "{denied}");
        assert!(
            requests
                .iter()
                .all(|r| !system_prompt(r).contains("retry advisor"))
        );
        let id = result["session_id"].as_str().expect("id");
        let log = repo.run(&["log", id]);
        assert!(
            log.contains("op=advisor")
                && log.contains("result=denied")
                && log.contains(&format!("tool `{denied}` is denied for agent `coder`")),
            "{log}"
        );
        let denials = result["permission_denials"].as_array().expect("denials");
        assert!(
            denials.iter().any(|d| d["tool"] == "call-agent"),
            "{denials:?}"
        );
        assert!(
            sessions(&repo)
                .iter()
                .all(|s| s["agent"] != "retry-advisor")
        );
    }
}

#[test]
fn requests_offer_only_the_tools_the_agent_may_call_and_advisors_only_their_own() {
    let repo = Repo::new();
    coder_permissions(&repo, &["shell", "write-file"]);
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("c1", "read-file", json!({"path": "nope.txt"}))]),
        reply(
            json!({"shouldRetry": false, "reason": "the file does not exist", "suggestedAction": "skip"}),
        ),
        openai::reply_text("gave up"),
    ]);
    let (code, _, stderr) = run(&repo, &server, &[], &["read it"]);
    assert_eq!(code, 0, "{stderr}");
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    let coder = tool_names(&requests[0]);
    assert!(coder.contains(&"read-file".to_string()), "{coder:?}");
    assert!(
        !coder.contains(&"shell".to_string()) && !coder.contains(&"write-file".to_string()),
        "{coder:?}"
    );
    // retry-advisor's question holds all it needs: its permission file allows no tool, and its
    // request offers none.
    assert!(system_prompt(&requests[1]).contains("retry advisor"));
    assert_eq!(requests[1].body.get("tools"), None, "{}", requests[1].body);
    // The figure in docs/advisors.md.
    let size = |r: &RecordedRequest| r.body.to_string().len();
    println!(
        "retry-advisor request {} bytes, coder's first request {} bytes",
        size(&requests[1]),
        size(&requests[0])
    );
    assert!(size(&requests[1]) * 3 < size(&requests[0]));
}

/// A session of 12 messages whose plan.xml says task 1 is pending while the chat finished it.
fn session_with_stale_plan(repo: &Repo) -> String {
    let id = repo
        .session()
        .alternating(12, |i| match i {
            5 => "Docs written (task 1 done).".to_string(),
            _ => format!("message {i}"),
        })
        .write();
    fs::write(
        repo.session_dir(&id).join("plan.xml"),
        "<tasks>\n  <task id=\"1\" title=\"Write docs\" status=\"pending\"/>\n</tasks>\n",
    )
    .expect("plan");
    id
}

fn stale_plan_finding() -> MockResponse {
    reply(json!({
        "consistent": false,
        "summary": "task 1 is done in the chat",
        "inconsistencies": [
            {"type": "status_mismatch", "taskId": "1", "description": "the docs were written",
             "severity": "high", "suggestion": "mark task 1 completed", "expectedStatus": "completed"},
            {"type": "missing_in_plan", "taskId": "2", "description": "tests were started",
             "severity": "medium", "suggestion": "add it", "expectedStatus": "in_progress", "title": "Write tests"}
        ]
    }))
}

fn compact(repo: &Repo, server: &MockServer, id: &str, env: &[(&str, &str)]) {
    let mut cmd = repo.nop_model(server, "openai");
    cmd.env("NOP_COMPACTION_KEEP_LAST", "4")
        .env("NOP_ADVISORS_ENABLED", "true");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let output = cmd.args(["compact", id]).output().expect("run");
    crate::support::assert_ok(&output);
}

fn compaction_summary(session: &Value) -> String {
    session["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .find(|m| m["compactionSummary"] == true)
        .and_then(|m| m["content"].as_str())
        .expect("a compaction summary")
        .to_string()
}

#[test]
fn the_consistency_check_runs_before_compression_and_the_summary_keeps_the_checked_plan() {
    let repo = Repo::new();
    let id = session_with_stale_plan(&repo);
    let server = MockServer::start(vec![stale_plan_finding(), openai::reply_text("the gist")]);
    compact(&repo, &server, &id, &[]);
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert!(system_prompt(&requests[0]).contains("consistency checker"));
    assert!(!system_prompt(&requests[1]).contains("consistency checker"));
    let session = repo.session_json(&id);
    let summary = compaction_summary(&session);
    assert!(summary.contains("the gist"), "{summary}");
    assert!(
        summary.contains("out of step with the conversation")
            && summary.contains("task 1: the docs were written (the conversation shows completed)"),
        "{summary}"
    );
    // Off by default: plan.xml is not changed by the check.
    let plan = fs::read_to_string(repo.session_dir(&id).join("plan.xml")).expect("plan");
    assert!(
        plan.contains("status=\"pending\"") && !plan.contains("Write tests"),
        "{plan}"
    );
    assert!(session.get("consistencyRepairs").is_none());
}

#[test]
fn auto_repair_applies_the_checkers_findings_to_the_plan_after_a_snapshot_and_records_them() {
    let repo = Repo::new();
    let id = session_with_stale_plan(&repo);
    let server = MockServer::start(vec![stale_plan_finding(), openai::reply_text("the gist")]);
    compact(
        &repo,
        &server,
        &id,
        &[("NOP_CONSISTENCY_AUTO_REPAIR", "true")],
    );
    let plan = fs::read_to_string(repo.session_dir(&id).join("plan.xml")).expect("plan");
    assert!(
        plan.contains("id=\"1\" title=\"Write docs\" status=\"completed\"")
            && plan.contains("id=\"2\" title=\"Write tests\" status=\"in_progress\""),
        "{plan}"
    );
    let session = repo.session_json(&id);
    let repairs = session["consistencyRepairs"].as_array().expect("recorded");
    assert_eq!(repairs.len(), 1);
    assert_eq!(
        repairs[0]["changes"],
        json!([
            "task 1: status pending -> completed",
            "task 2: added \"Write tests\" (in_progress)"
        ])
    );
    // The snapshot taken first holds the plan as it was.
    let snapshot = repairs[0]["snapshotId"].as_str().expect("snapshot");
    let before: Value = serde_json::from_str(
        &fs::read_to_string(
            repo.session_dir(&id)
                .join(format!("history-{snapshot}.json")),
        )
        .expect("snapshot file"),
    )
    .expect("json");
    assert_eq!(before["plan"]["tasks"][0]["status"], "pending");
    // The compaction's summary keeps the repaired plan.
    let summary = compaction_summary(&session);
    assert!(
        summary.contains("[completed] 1: Write docs") && summary.contains("was repaired"),
        "{summary}"
    );
    repo.assert_session_shape(&id, "consistency-repairs.json");
}

/// `nop run --session ID PROMPT` with advisors on: the model requests it made are the server's
/// new requests.
fn resume(repo: &Repo, server: &MockServer, id: &str, prompt: &str) -> Vec<RecordedRequest> {
    let before = server.requests().len();
    let output = repo
        .nop_model(server, "openai")
        .env("NOP_ADVISORS_ENABLED", "true")
        .args(["run", "--session", id, prompt])
        .output()
        .expect("run");
    crate::support::assert_ok(&output);
    server.requests().split_off(before)
}

fn asks_the_checker(requests: &[RecordedRequest]) -> bool {
    requests
        .iter()
        .any(|r| system_prompt(r).contains("consistency checker"))
}

#[test]
fn a_resume_with_nothing_changed_since_the_last_check_asks_no_consistency_checker() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[(
            "c1",
            "update-plan",
            json!({"tasks": [{"id": "1", "title": "Write docs", "status": "in_progress"}]}),
        )]),
        openai::reply_text("planned"),
    ]);
    let (code, result, _) = run(&repo, &server, &[], &["plan it"]);
    assert_eq!(code, 0);
    let id = result["session_id"].as_str().expect("id").to_string();
    let consistent =
        || reply(json!({"consistent": true, "inconsistencies": [], "summary": "fine"}));

    // The first load checks; its run records what it leaves.
    server.push(consistent());
    server.push(openai::reply_text("continuing"));
    let first = resume(&repo, &server, &id, "go on");
    assert!(asks_the_checker(&first) && first.len() == 2, "{first:?}");
    assert!(repo.session_json(&id)["consistencyChecked"]["fingerprint"].is_string());

    // Nothing changed since: no checker, only the run's own request.
    server.push(openai::reply_text("still going"));
    let second = resume(&repo, &server, &id, "and more");
    assert_eq!(second.len(), 1);
    assert!(!asks_the_checker(&second));
    assert!(
        repo.run(&["log", &id])
            .contains("op=consistency result=skipped")
    );

    // Someone else changed the plan: checked again (seed 002 §3.3).
    let plan = repo.session_dir(&id).join("plan.xml");
    let text = fs::read_to_string(&plan).expect("plan");
    fs::write(&plan, text.replace("Write docs", "Write the docs")).expect("edit");
    server.push(consistent());
    server.push(openai::reply_text("checked again"));
    let third = resume(&repo, &server, &id, "once more");
    assert!(asks_the_checker(&third) && third.len() == 2, "{third:?}");

    // And the conversation, edited by hand, too.
    let session = repo.session_dir(&id).join("session.json");
    let text = fs::read_to_string(&session).expect("session");
    fs::write(&session, text.replace("and more", "and more, please")).expect("edit");
    server.push(consistent());
    server.push(openai::reply_text("checked once more"));
    let fourth = resume(&repo, &server, &id, "last");
    assert!(asks_the_checker(&fourth) && fourth.len() == 2, "{fourth:?}");
    repo.assert_session_shape(&id, "consistency-checked.json");
}

#[test]
fn a_refused_call_goes_to_retry_advisor_but_is_never_made_again_unchanged() {
    let repo = Repo::new();
    coder_permissions(&repo, &["shell"]);
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("c1", "shell", json!({"command": "make deploy"}))]),
        // A wrong answer (the prompt says never to): the refused call is not made again.
        reply(json!({"shouldRetry": true, "reason": "try again", "suggestedAction": "retry"})),
        openai::reply_text("I may not run commands"),
    ]);
    let (code, result, stderr) = run(&repo, &server, &[], &["deploy"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(result["final_message"], "I may not run commands");
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    let question = requests[1].body["messages"][1]["content"]
        .as_str()
        .unwrap_or_default();
    assert!(
        question.contains("\"errorType\": \"PermissionDenied\""),
        "{question}"
    );
    let refusal = server.result_of("c1");
    assert!(refusal.starts_with("error (PermissionDenied)"), "{refusal}");
    // One refusal: the call was not tried twice.
    assert_eq!(
        result["permission_denials"].as_array().map(Vec::len),
        Some(1),
        "{result}"
    );
}
