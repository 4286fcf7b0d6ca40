//! Output caps and small contexts (issue 44): every request carries `max_tokens`; a reply the
//! cap cut is continued or reported; a reply that repeats itself is cut; the context a server
//! says (llama.cpp `/props`, vLLM `/v1/models`) or names in an error (vLLM's 400) or shows by
//! its counts (Ollama dropping the start) leads to compaction, at the default `keep_last`.

use std::fs;

use serde_json::{Value, json};

use crate::support::Repo;
use crate::support::mock::{MockResponse, MockServer, RecordedRequest, anthropic, openai};

/// The text nop asks the model to continue a cut reply with.
const CONTINUE: &str = "Your reply was cut off by the output limit";

/// The files a reading run reads, one a turn.
const FILES: [&str; 4] = ["a", "b", "c", "d"];

/// A model that reads each of [`FILES`] in turn, then answers "done reading"; the CompactAgent's
/// request gets a summary. Answers by what the request holds, so a compaction may come at any
/// point.
fn reading_model(request: &RecordedRequest) -> MockResponse {
    let messages = request.body["messages"].to_string();
    if messages.contains("You compress the earlier part") {
        return openai::reply_text("Read the files one by one: only letters so far.");
    }
    let last = request.body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .cloned()
        .unwrap_or(Value::Null);
    let last_read = FILES.iter().position(|f| {
        last["role"] == "tool" && last["content"].to_string().contains(&f.repeat(50))
    });
    let next = match last_read {
        None if last["role"] == "user" && !messages.contains(&"a".repeat(50)) => Some(0),
        None => None,
        Some(i) => Some(i + 1),
    };
    match next.filter(|i| *i < FILES.len()) {
        Some(i) => openai::reply_tool_calls(&[(
            &format!("r{i}"),
            "read-file",
            json!({"path": format!("{}.txt", FILES[i])}),
        )]),
        None => openai::reply_text("done reading"),
    }
}

fn write_files(repo: &Repo, bytes: usize) {
    for name in FILES {
        fs::write(repo.path().join(format!("{name}.txt")), name.repeat(bytes)).expect("write");
    }
}

fn read_all(repo: &Repo, server: &MockServer) -> std::process::Output {
    repo.nop_model(server, "openai")
        .args(["run", "--output-format", "text", "read a, b, c and d"])
        .output()
        .expect("run nop")
}

/// [`read_all`], which must end well with the model's "done reading": its stderr.
fn read_all_done(repo: &Repo, server: &MockServer) -> String {
    let out = read_all(repo, server);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "done reading\n");
    stderr
}

/// The bytes of the first request nop sends for a one-line prompt.
fn base_request_bytes() -> u64 {
    let repo = Repo::new();
    let server = MockServer::start(vec![openai::reply_text("hi")]);
    repo.model_ok(&server, &["run", "hi"]);
    server.requests()[0].raw_body.len() as u64
}

fn compressions(repo: &Repo) -> usize {
    repo.first_session()["compressions"]
        .as_array()
        .map_or(0, Vec::len)
}

#[test]
fn every_request_carries_an_output_cap_openai_and_anthropic() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("c1", "read-file", json!({"path": "x.txt"}))]),
        openai::reply_text("read it"),
    ]);
    fs::write(repo.path().join("x.txt"), "x").expect("write");
    repo.model_ok(&server, &["run", "read x"]);
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    for r in &requests {
        assert_eq!(r.body["max_tokens"], 8192, "{}", r.raw_body);
        assert!(r.body.get("max_completion_tokens").is_none());
    }
    // A server that says its context (llama.cpp's /props): at most an eighth of it.
    let server = MockServer::start(vec![openai::reply_text("small")]);
    server.serve_props(4096);
    repo.model_ok(&server, &["run", "hi"]);
    assert_eq!(server.requests()[0].body["max_tokens"], 512);
    assert!(server.probes().iter().any(|p| p.path == "/props"));
    // Configured.
    let server = MockServer::start(vec![openai::reply_text("capped")]);
    repo.model_ok(&server, &["run", "--set", "provider.max_tokens=300", "hi"]);
    assert_eq!(server.requests()[0].body["max_tokens"], 300);
    let server = MockServer::start(vec![anthropic::reply_text("claude")]);
    let out = repo
        .nop_model(&server, "anthropic")
        .args(["run", "--set", "provider.max_tokens=500", "hi"])
        .output()
        .expect("run nop");
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(server.requests()[0].body["max_tokens"], 500);
}

#[test]
fn a_reply_cut_by_the_cap_is_continued_and_joined() {
    let repo = Repo::new();
    let cut = MockResponse::sse(vec![
        openai::role(),
        openai::text("The fix: change the loop "),
        openai::finish("length"),
        openai::usage(10, 5),
        openai::done(),
    ]);
    let server = MockServer::start(vec![cut, openai::reply_text("to stop at len - 1.")]);
    let out = repo.model_ok(&server, &["run", "--output-format", "text", "explain"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "The fix: change the loop to stop at len - 1.\n"
    );
    let second = &server.requests()[1];
    let messages = second.body["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let n = messages.len();
    assert_eq!(messages[n - 2]["role"], "assistant");
    assert_eq!(messages[n - 2]["content"], "The fix: change the loop ");
    assert!(
        second
            .user_messages()
            .last()
            .is_some_and(|m| m.starts_with(CONTINUE)),
        "{:?}",
        second.user_messages()
    );
    let session = repo.first_session();
    let answer = session["messages"]
        .as_array()
        .and_then(|m| m.last())
        .cloned()
        .unwrap_or(Value::Null);
    assert_eq!(
        answer["content"],
        "The fix: change the loop to stop at len - 1."
    );
}

#[test]
fn a_reply_still_cut_after_continuing_is_reported_not_taken_as_whole() {
    let repo = Repo::new();
    let cut = |text: &str| {
        MockResponse::sse(vec![
            openai::text(text),
            openai::finish("length"),
            openai::done(),
        ])
    };
    let server = MockServer::start(vec![cut("one "), cut("two ")]);
    let out = repo.model_ok(&server, &["run", "--output-format", "text", "go on"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cut by the output limit"), "{stderr}");
    assert_eq!(server.requests().len(), 2, "one continuation, not more");
}

#[test]
fn a_reply_that_repeats_itself_is_cut_after_one_copy() {
    let repo = Repo::new();
    let mut chunks = vec![openai::role(), openai::text("The test fails. ")];
    chunks.extend((0..300).map(|_| openai::text("I will run the test again.\n")));
    chunks.extend([openai::finish("stop"), openai::done()]);
    let server = MockServer::start(vec![MockResponse::sse(chunks.clone())]);
    let result = repo.model_json(&server, &["run", "--output-format", "json", "fix it"]);
    assert_eq!(
        result["final_message"],
        "The test fails. I will run the test again.\n"
    );
    // The stream was not read to its end: what streamed before the cut is all the user saw.
    let server = MockServer::start(vec![MockResponse::sse(chunks)]);
    let out = repo.model_ok(&server, &["run", "--output-format", "text", "fix it"]);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.matches("again").count() < 100, "{shown}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("repeated the same text"), "{stderr}");
}

#[test]
fn a_context_learned_from_props_is_compacted_before_it_is_full() {
    let repo = Repo::new();
    write_files(&repo, 2000);
    let n_ctx = base_request_bytes() / 4 + 2200;
    let server = MockServer::start_with(Box::new(reading_model));
    server.serve_props(n_ctx);
    server.empty_stream_over(n_ctx);
    let stderr = read_all_done(&repo, &server);
    // No request was over the context: the conversation was compacted before.
    let over: Vec<u64> = server
        .requests()
        .iter()
        .map(|r| r.raw_body.len() as u64 / 4)
        .filter(|t| *t > n_ctx)
        .collect();
    assert_eq!(over, Vec::<u64>::new(), "{stderr}");
    assert!(compressions(&repo) >= 1, "{stderr}");
    assert!(!stderr.contains("retrying"), "{stderr}");
}

#[test]
fn a_vllm_refusal_of_the_cap_is_asked_again_with_the_cap_its_context_leaves() {
    let repo = Repo::new();
    write_files(&repo, 2000);
    let n = base_request_bytes() / 4 + 2200;
    // A server in front of vLLM: the size is not in /v1/models, only in the error.
    let server = MockServer::start_with(Box::new(reading_model));
    server.vllm_error_over(n);
    let stderr = read_all_done(&repo, &server);
    assert!(compressions(&repo) >= 1, "{stderr}");
    // The first refusal was of the cap (8192 beside a prompt that fits): asked again with the
    // cap the context leaves, not compacted.
    let caps: Vec<u64> = server
        .requests()
        .iter()
        .filter_map(|r| r.body["max_tokens"].as_u64())
        .collect();
    assert_eq!(caps.first(), Some(&8192));
    assert!(caps[1..].iter().all(|c| *c <= n / 4), "{caps:?}");
}

#[test]
fn a_vllm_context_error_is_compacted_and_sent_again_at_the_default_keep_last() {
    let repo = Repo::new();
    write_files(&repo, 2000);
    let n = base_request_bytes() / 4 + 2200;
    let server = MockServer::start_with(Box::new(reading_model));
    server.vllm_error_over(n);
    let out = repo
        .nop_model(&server, "openai")
        .args([
            "run",
            "--output-format",
            "text",
            "--set",
            "provider.max_tokens=100",
            "read a, b, c and d",
        ])
        .output()
        .expect("run nop");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "done reading\n");
    assert!(
        stderr.contains(&format!("maximum context length is {n} tokens"))
            && stderr.contains("compacted and the request is sent again"),
        "{stderr}"
    );
    assert!(compressions(&repo) >= 1, "{stderr}");
}

#[test]
fn a_context_learned_from_vllm_models_is_compacted_before_vllm_refuses() {
    let repo = Repo::new();
    write_files(&repo, 2000);
    let n = base_request_bytes() / 4 + 2200;
    let server = MockServer::start_with(Box::new(reading_model));
    server.serve_vllm(n);
    let stderr = read_all_done(&repo, &server);
    assert!(!stderr.contains("maximum context length"), "{stderr}");
    assert!(compressions(&repo) >= 1, "{stderr}");
    assert!(server.probes().iter().any(|p| p.path == "/v1/models"));
}

#[test]
fn ollama_dropping_the_start_of_the_prompt_is_noticed_and_compacted() {
    let repo = Repo::new();
    write_files(&repo, 2000);
    let num_ctx = base_request_bytes() / 4 + 600;
    let server = MockServer::start_with(Box::new(reading_model));
    server.serve_ollama(num_ctx);
    let stderr = read_all_done(&repo, &server);
    assert!(stderr.contains("dropped the start"), "{stderr}");
    assert!(compressions(&repo) >= 1, "{stderr}");
    assert!(server.probes().iter().any(|p| p.path == "/api/show"));
}

#[test]
fn an_anthropic_turn_of_one_text_block_is_a_plain_string() {
    let repo = Repo::new();
    let server = MockServer::start(vec![anthropic::reply_text("through LiteLLM")]);
    let out = repo
        .nop_model(&server, "anthropic")
        .args(["run", "--set", "provider.prompt_cache=false", "hello there"])
        .output()
        .expect("run nop");
    assert_eq!(out.status.code(), Some(0));
    let body = &server.requests()[0].body;
    let last = body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .cloned()
        .unwrap_or(Value::Null);
    assert_eq!(last["role"], "user");
    assert!(
        last["content"]
            .as_str()
            .is_some_and(|c| c.contains("hello there")),
        "{last}"
    );
}

/// A small context gets the tools compact: each description its first sentence, the schema
/// whole but for its descriptions; a large or unknown one gets them as they are.
#[test]
fn a_small_context_gets_compact_tool_descriptions() {
    let repo = Repo::new();
    let server = MockServer::start(vec![openai::reply_text("hi")]);
    repo.model_ok(&server, &["run", "hi"]);
    let full = server.requests()[0].clone();
    let server = MockServer::start(vec![openai::reply_text("hi")]);
    server.serve_props(16_384);
    repo.model_ok(&server, &["run", "hi"]);
    let small = server.requests()[0].clone();
    let server = MockServer::start(vec![openai::reply_text("hi")]);
    server.serve_props(32_768);
    repo.model_ok(&server, &["run", "hi"]);
    assert_eq!(server.requests()[0].body["tools"], full.body["tools"]);
    let tools = |r: &crate::support::mock::RecordedRequest| {
        r.body["tools"].as_array().cloned().unwrap_or_default()
    };
    assert_eq!(tools(&full).len(), tools(&small).len());
    for (f, s) in tools(&full).iter().zip(tools(&small).iter()) {
        let (f, s) = (&f["function"], &s["function"]);
        assert_eq!(f["name"], s["name"]);
        let short = s["description"].as_str().unwrap_or_default();
        assert!(short.chars().count() <= 160, "{short}");
        assert!(
            f["description"]
                .as_str()
                .unwrap_or_default()
                .starts_with(short.trim_end_matches('…')),
            "{short}"
        );
        assert_eq!(f["parameters"]["required"], s["parameters"]["required"]);
        assert!(
            !s["parameters"].to_string().contains("\"description\":\""),
            "{}",
            s["parameters"]
        );
    }
    eprintln!(
        "first request: {} bytes with the full tools, {} compact",
        full.raw_body.len(),
        small.raw_body.len()
    );
    assert!(small.raw_body.len() < full.raw_body.len());
}
