//! What real model servers were seen to do (issue 29, MISSION R3), played by the mock, against
//! the request shapes nop really sends: llama-cpp-python's empty stream to a prompt over its
//! context (a context `/props` names is compacted before: `small_windows.rs`), servers without usage, a stream cut and retried, LiteLLM's
//! `/v1/messages` failing on a `system` block array.

use std::fs;

use serde_json::{Value, json};

use crate::support::Repo;
use crate::support::mock::{MockResponse, MockServer, anthropic, openai};

/// The bytes of the first request nop sends for a one-line prompt in a repository like the
/// test's: the system prompt and the tools' schemas, which every later request repeats.
fn base_request_bytes() -> usize {
    let repo = Repo::new();
    let server = MockServer::start(vec![openai::reply_text("hi")]);
    repo.model_ok(&server, &["run", "hi"]);
    server.requests()[0].raw_body.len()
}

/// A run that reads three 2 KB files, one a turn, on a server whose context ends after the
/// second: the fourth request is over it.
fn overflowing_run(repo: &Repo, server: &MockServer, extra: &[&str]) -> std::process::Output {
    for name in ["a", "b", "c"] {
        fs::write(repo.path().join(format!("{name}.txt")), name.repeat(2000)).expect("write");
    }
    for (i, name) in ["a", "b", "c"].iter().enumerate() {
        server.push(openai::reply_tool_calls(&[(
            &format!("r{i}"),
            "read-file",
            json!({"path": format!("{name}.txt")}),
        )]));
    }
    // The CompactAgent's summary, then the answer.
    server.push(openai::reply_text("Read a.txt and b.txt: letters."));
    server.push(openai::reply_text("done reading"));
    let mut args = vec![
        "run",
        "--output-format",
        "text",
        "--set",
        "compaction.keep_last=1",
    ];
    args.extend_from_slice(extra);
    args.push("read a, b and c");
    repo.nop_model(server, "openai")
        .args(&args)
        .output()
        .expect("run nop")
}

fn empty_answers(server: &MockServer) -> usize {
    // The mock answers a request over its context with an empty stream; the script is not
    // consumed, so these are the requests between the third read and the compaction.
    server
        .requests()
        .iter()
        .filter(|r| r.body["messages"].to_string().contains(&"c".repeat(2000)))
        .count()
}

#[test]
fn an_empty_stream_twice_to_a_grown_prompt_is_an_overflow_on_a_server_that_says_nothing() {
    let repo = Repo::new();
    let base = base_request_bytes();
    // llama-cpp-python: no `/props`, no size in `/v1/models`; an empty stream over n_ctx.
    let server = MockServer::start(Vec::new());
    server.empty_stream_over((base / 4 + 1200) as u64);
    let out = overflowing_run(&repo, &server, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "done reading\n");
    // Two empty answers (the second to the same, longer-than-ever prompt), then compaction.
    assert_eq!(empty_answers(&server), 3, "{stderr}");
    assert!(stderr.contains("longer than any it answered"), "{stderr}");
    assert_eq!(
        repo.first_session()["compressions"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
}

#[test]
fn an_overflow_that_compaction_cannot_fix_says_so() {
    let repo = Repo::new();
    let base = base_request_bytes();
    let n_ctx = (base / 4 + 200) as u64;
    let server = MockServer::start(Vec::new());
    server.serve_props(n_ctx);
    server.empty_stream_over(n_ctx);
    let prompt = "x".repeat(4000);
    let out = repo
        .nop_model(&server, "openai")
        .args(["run", "--output-format", "json", &prompt])
        .output()
        .expect("run nop");
    let result: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(result["status"], "error", "{result}");
    let message = result["final_message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!(
            "over the model server's context of {n_ctx} tokens"
        )) && message.contains("too short to compact"),
        "{message}"
    );
    assert_eq!(
        server.requests().len(),
        1,
        "no retry of a prompt that cannot fit"
    );
}

#[test]
fn a_server_without_usage_is_counted_at_an_estimate_marked_as_one() {
    let repo = Repo::new();
    let server = MockServer::start(vec![openai::reply_text("fine")]);
    server.omit_usage();
    let result = repo.model_json(&server, &["run", "--output-format", "json", "how are you"]);
    assert_eq!(result["final_message"], "fine");
    let usage = &result["usage"];
    assert_eq!(usage["estimated_requests"], 1, "{result}");
    assert!(
        usage["input_tokens"].as_u64().unwrap_or(0) > 100,
        "{result}"
    );
    let session = repo.first_session();
    assert_eq!(
        session["usage"]["estimatedRequests"], 1,
        "{}",
        session["usage"]
    );
    assert!(session["usage"]["inputTokens"].as_u64().unwrap_or(0) > 100);
    let shown = repo.run(&[
        "sessions",
        "show",
        result["session_id"].as_str().unwrap_or_default(),
    ]);
    assert!(shown.contains("estimated"), "{shown}");
}

#[test]
fn text_output_never_holds_an_attempt_that_was_cut_and_retried() {
    let repo = Repo::new();
    let cut = MockResponse::sse(vec![openai::role(), openai::text("The answer is 4")]);
    let server = MockServer::start(vec![cut, openai::reply_text("The answer is 42.")]);
    let out = repo.model_ok(&server, &["run", "--output-format", "text", "what is it"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "The answer is 42.\n");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("retrying"),
        "the retry is named on stderr"
    );
}

#[test]
fn an_anthropic_gateway_that_fails_on_a_system_block_array_gets_a_plain_string() {
    let repo = Repo::new();
    let server = MockServer::start(vec![anthropic::reply_text("through the gateway")]);
    server.refuse_system_blocks();
    let out = repo
        .nop_model(&server, "anthropic")
        .args(["run", "--output-format", "json", "hello"])
        .output()
        .expect("run nop");
    let result: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(result["final_message"], "through the gateway", "{result}");
    let requests = server.requests();
    // With prompt caching on (the default) the first request is marked; the gateway's 500
    // makes nop send it again unmarked, once, not five times.
    assert_eq!(requests.len(), 2);
    assert!(requests[0].body["system"].is_array());
    assert!(requests[1].body["system"].is_string());
    // Caching off: a plain string from the start.
    let server = MockServer::start(vec![anthropic::reply_text("plain")]);
    server.refuse_system_blocks();
    let out = repo
        .nop_model(&server, "anthropic")
        .args(["run", "--set", "provider.prompt_cache=false", "hello"])
        .output()
        .expect("run nop");
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(server.requests().len(), 1);
    assert!(server.requests()[0].body["system"].is_string());
}
