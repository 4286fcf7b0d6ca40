//! What a session costs, end to end against the mock model: prompt-cache fields in the requests
//! of both APIs and a prefix that stays byte-identical for the life of a session (a resume
//! included), cached tokens read from both APIs' usage, cost from a configured price (and
//! "unknown" without one), `--max-budget-usd` stopping a run, and retry-advisor asked about every
//! failed call at the cost of one small request per tool and kind of failure (or, opted in, only
//! about the kinds `advisors.retry_on` names).

use serde_json::{Value, json};

use crate::support::Repo;
use crate::support::mock::{MockResponse, MockServer, RecordedRequest, anthropic, openai};

const PRICE: &str =
    "\npricing:\n  mock-model: {input: 3.0, output: 15.0, cache_write: 3.75, cache_read: 0.30}\n";

fn price(repo: &Repo, text: &str) {
    let path = repo.path().join(".nop/config.yml");
    let mut config = std::fs::read_to_string(&path).expect("config.yml");
    config.push_str(text);
    std::fs::write(path, config).expect("write config.yml");
}

/// `nop run --output-format json ARGS` against `server` speaking `kind`: exit code, result.
fn run_json(repo: &Repo, server: &MockServer, kind: &str, args: &[&str]) -> (i32, Value) {
    let output = repo
        .nop_model(server, kind)
        .args(["run", "--output-format", "json"])
        .args(args)
        .output()
        .expect("run nop");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let result = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("no JSON result ({e}): {stderr}"));
    (output.status.code().unwrap_or(-1), result)
}

/// Two turns that read a file, then an answer, in `kind`'s wire format.
fn two_reads_then(kind: &str, answer: &str) -> Vec<MockResponse> {
    fn call(id: &str) -> (&str, &'static str, Value) {
        (id, "read-file", json!({"path": "notes.txt"}))
    }
    match kind {
        "anthropic" => vec![
            anthropic::reply_tool_calls(&[call("t1")]),
            anthropic::reply_tool_calls(&[call("t2")]),
            anthropic::reply_text(answer),
        ],
        _ => vec![
            openai::reply_tool_calls(&[call("c1")]),
            openai::reply_tool_calls(&[call("c2")]),
            openai::reply_text(answer),
        ],
    }
}

fn repo_with_notes() -> Repo {
    let repo = Repo::new();
    std::fs::write(repo.path().join("notes.txt"), "the notes\n".repeat(50)).expect("notes");
    repo
}

fn marks(request: &RecordedRequest) -> usize {
    request.raw_body.matches("\"cache_control\"").count()
}

/// The last block of message `index` of an Anthropic request.
fn last_block(request: &RecordedRequest, index: usize) -> Value {
    request.body["messages"][index]["content"]
        .as_array()
        .and_then(|c| c.last())
        .cloned()
        .unwrap_or(Value::Null)
}

/// What must stay the same across every request of a session: the tools and the system prompt.
fn prefix(request: &RecordedRequest, kind: &str) -> String {
    let system = match kind {
        "anthropic" => request.body["system"].to_string(),
        _ => request.body["messages"][0].to_string(),
    };
    format!("{}\n{system}", request.body["tools"])
}

#[test]
fn anthropic_requests_mark_the_stable_prefix_and_the_latest_turns_and_keep_it_after_a_resume() {
    let repo = repo_with_notes();
    let mut script = two_reads_then("anthropic", "read twice");
    script.push(anthropic::reply_text("and again"));
    let server = MockServer::start(script);
    let (code, result) = run_json(&repo, &server, "anthropic", &["read the notes twice"]);
    assert_eq!(code, 0, "{result}");
    let id = result["session_id"].as_str().expect("id").to_string();
    let (code, result) = run_json(
        &repo,
        &server,
        "anthropic",
        &["--session", &id, "once more"],
    );
    assert_eq!(code, 0, "{result}");
    let requests = server.requests();
    assert_eq!(requests.len(), 4);
    for (i, request) in requests.iter().enumerate() {
        assert!(
            (1..=4).contains(&marks(request)),
            "request {i}: {} marks",
            marks(request)
        );
        assert_eq!(
            request.body["system"][0]["cache_control"]["type"], "ephemeral",
            "request {i}: the system prompt (and the tools before it) are marked"
        );
        let messages = request.body["messages"].as_array().expect("messages");
        assert!(
            last_block(request, messages.len() - 1)["cache_control"].is_object(),
            "request {i}: the conversation's end is marked"
        );
        assert_eq!(
            prefix(request, "anthropic"),
            prefix(&requests[0], "anthropic")
        );
    }
    // From the second request on, the previous request's mark is marked again (read back).
    let second = &requests[1];
    assert!(
        last_block(second, 0)["cache_control"].is_object(),
        "{}",
        second.raw_body
    );
    assert!(
        requests[0].raw_body.contains("\"tools\""),
        "the coder's tools are sent"
    );
}

#[test]
fn openai_requests_carry_the_session_as_prompt_cache_key_and_the_same_prefix_after_a_resume() {
    let repo = repo_with_notes();
    let mut script = two_reads_then("openai", "read twice");
    script.push(openai::reply_text("and again"));
    let server = MockServer::start(script);
    let (code, result) = run_json(&repo, &server, "openai", &["read the notes twice"]);
    assert_eq!(code, 0, "{result}");
    let id = result["session_id"].as_str().expect("id").to_string();
    let (code, result) = run_json(&repo, &server, "openai", &["--session", &id, "once more"]);
    assert_eq!(code, 0, "{result}");
    let requests = server.requests();
    assert_eq!(requests.len(), 4);
    for request in &requests {
        assert_eq!(request.body["prompt_cache_key"], json!(id));
        assert_eq!(prefix(request, "openai"), prefix(&requests[0], "openai"));
        // Each request starts with the one before it, byte for byte (the cache holds prefixes).
    }
    for pair in requests.windows(2) {
        let before = pair[0].body["messages"].as_array().expect("messages");
        let after = pair[1].body["messages"].as_array().expect("messages");
        assert_eq!(&after[..before.len()], &before[..]);
    }
}

#[test]
fn a_compatible_server_that_refuses_prompt_cache_key_is_asked_again_without_it() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        MockResponse::status(
            400,
            r#"{"error": {"message": "Unrecognized request argument supplied: prompt_cache_key"}}"#,
        ),
        openai::reply_text("hello"),
        openai::reply_text("again"),
    ]);
    let (code, result) = run_json(&repo, &server, "openai", &["hi"]);
    assert_eq!(code, 0, "{result}");
    assert_eq!(result["final_message"], "hello");
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests[0].body.get("prompt_cache_key").is_some());
    assert!(requests[1].body.get("prompt_cache_key").is_none());
}

/// The cost of `usage` (a json result's) at [`PRICE`].
fn priced(usage: &Value) -> f64 {
    let n = |k: &str| usage[k].as_u64().expect(k) as f64;
    let uncached = n("input_tokens") - n("cache_read_tokens") - n("cache_write_tokens");
    (uncached * 3.0
        + n("cache_write_tokens") * 3.75
        + n("cache_read_tokens") * 0.30
        + n("output_tokens") * 15.0)
        / 1e6
}

#[test]
fn cached_tokens_of_both_apis_are_counted_and_priced_in_the_result_the_session_and_show() {
    for kind in ["openai", "anthropic"] {
        let repo = repo_with_notes();
        price(&repo, PRICE);
        let server = MockServer::start(two_reads_then(kind, "read twice"));
        server.simulate_prompt_cache();
        let (code, result) = run_json(&repo, &server, kind, &["read the notes twice"]);
        assert_eq!(code, 0, "{kind}: {result}");
        let usage = &result["usage"];
        assert_eq!(usage["requests"], 3, "{kind}: {result}");
        let read = usage["cache_read_tokens"].as_u64().unwrap_or(0);
        let input = usage["input_tokens"].as_u64().unwrap_or(0);
        // Requests 2 and 3 re-send request 1's prompt (nop's prompt alone is over 1,024 tokens).
        assert!(
            read * 2 > input,
            "{kind}: {read} of {input} cached: {usage}"
        );
        if kind == "anthropic" {
            assert!(
                usage["cache_write_tokens"].as_u64().unwrap_or(0) > 0,
                "{usage}"
            );
        }
        let cost = result["total_cost_usd"].as_f64().expect("a cost");
        assert!(
            (cost - priced(usage)).abs() < 1e-9,
            "{kind}: {cost} {usage}"
        );
        assert_eq!(usage["cost_usd"], result["total_cost_usd"]);
        assert_eq!(usage["subagents"]["requests"], 0);

        let id = result["session_id"].as_str().expect("id");
        let session = repo.session_json(id);
        assert_eq!(session["usage"]["cacheReadTokens"], json!(read));
        let stored = session["usage"]["costUsd"].as_f64().expect("costUsd");
        assert!((stored - cost).abs() < 1e-9);
        let shown = repo.run(&["sessions", "show", id]);
        assert!(
            shown.contains(&format!("{read} from cache"))
                && shown.contains(&format!("cost ${cost:.4}")),
            "{shown}"
        );
    }
}

#[test]
fn a_model_without_a_price_has_an_unknown_cost_never_a_guessed_one() {
    let repo = Repo::new();
    let server = MockServer::start(vec![openai::reply_text("hello")]);
    let (code, result) = run_json(&repo, &server, "openai", &["hi"]);
    assert_eq!(code, 0, "{result}");
    assert_eq!(result["total_cost_usd"], Value::Null);
    assert_eq!(result["usage"]["cost_usd"], Value::Null);
    let id = result["session_id"].as_str().expect("id");
    assert!(repo.session_json(id)["usage"].get("costUsd").is_none());
    let shown = repo.run(&["sessions", "show", id]);
    assert!(shown.contains("cost unknown"), "{shown}");
    // A local model priced at 0 costs 0, and says so.
    price(&repo, "\npricing:\n  mock-model: {input: 0, output: 0}\n");
    let server = MockServer::start(vec![openai::reply_text("hello")]);
    let (_, result) = run_json(&repo, &server, "openai", &["hi"]);
    assert_eq!(result["total_cost_usd"], json!(0.0));
}

#[test]
fn the_budget_stops_the_run_before_the_request_that_would_pass_it_and_the_session_goes_on() {
    let repo = repo_with_notes();
    // A dollar per thousand tokens: each request of nop's ~2,500-token prompt costs ~$2.5.
    price(
        &repo,
        "\npricing:\n  mock-model: {input: 1000, output: 1000}\n",
    );
    let mut script: Vec<MockResponse> = (0..6)
        .map(|i| {
            openai::reply_tool_calls(&[(
                &format!("c{i}"),
                "read-file",
                json!({"path": "notes.txt"}),
            )])
        })
        .collect();
    script.push(openai::reply_text("all read"));
    let server = MockServer::start(script);
    server.simulate_prompt_cache();
    let (code, result) = run_json(
        &repo,
        &server,
        "openai",
        &["--max-budget-usd", "6", "read the notes six times"],
    );
    assert_eq!(code, 5, "{result}");
    assert_eq!(result["status"], "budget_exceeded");
    let made = server.requests().len();
    assert!((1..7).contains(&made), "{made} requests");
    let spent = result["total_cost_usd"].as_f64().expect("cost");
    assert!(spent <= 6.0, "spent {spent}");
    let message = result["final_message"].as_str().unwrap_or_default();
    assert!(message.contains("budget of $6.00"), "{message}");
    let id = result["session_id"].as_str().expect("id");
    assert_eq!(result["limit"], "max_budget_usd", "{result}");
    assert_eq!(
        result["continue_with"],
        format!("nop run --session {id} --max-budget-usd …")
    );
    assert_eq!(repo.session_json(id)["status"], "idle");
    // The session goes on with more budget, from where it stopped.
    let (code, result) = run_json(
        &repo,
        &server,
        "openai",
        &["--session", id, "--max-budget-usd", "100", "go on"],
    );
    assert_eq!(code, 0, "{result}");
    assert_eq!(result["final_message"], "all read");
    assert_eq!(server.requests().len(), 7);
}

#[test]
fn a_budget_for_a_model_without_a_price_is_refused_before_anything_happens() {
    let repo = Repo::new();
    let server = MockServer::start(vec![openai::reply_text("hello")]);
    let output = repo
        .nop_model(&server, "openai")
        .args(["run", "--max-budget-usd", "1", "hi"])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("no price for model `mock-model`") && stderr.contains("pricing"),
        "{stderr}"
    );
    assert!(server.requests().is_empty());
    let bad = repo
        .nop_model(&server, "openai")
        .args(["run", "--max-budget-usd", "0", "hi"])
        .output()
        .expect("run");
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("US dollars above 0"));
}

fn advisor_requests(server: &MockServer) -> usize {
    server.requests().iter().filter(|r| is_advisor(r)).count()
}

fn is_advisor(request: &RecordedRequest) -> bool {
    request.body["messages"][0]["content"]
        .as_str()
        .is_some_and(|s| s.contains("retry advisor"))
}

/// `nop run --output-format json` with advisors on; the result.
fn run_with_advisors(repo: &Repo, server: &MockServer, prompt: &str) -> Value {
    let output = repo
        .nop_model(server, "openai")
        .env("NOP_ADVISORS_ENABLED", "true")
        .env("NOP_ADVISORS_RETRY_DELAY_S", "0")
        .args(["run", "--output-format", "json", prompt])
        .output()
        .expect("run");
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stderr)))
}

fn skip() -> MockResponse {
    openai::reply_text(
        r#"{"shouldRetry": false, "reason": "it would fail the same way", "suggestedAction": "skip"}"#,
    )
}

#[test]
fn every_failed_call_goes_to_retry_advisor_once_per_tool_and_kind_of_failure_in_a_small_request() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("c1", "read-file", json!({"path": "missing.txt"}))]),
        skip(),
        // The same tool failing the same way on another file: the decision is reused.
        openai::reply_tool_calls(&[("c2", "read-file", json!({"path": "gone/away.txt"}))]),
        // Another kind of failure, another tool: asked.
        openai::reply_tool_calls(&[("c3", "edit-file", json!({"path": 7}))]),
        skip(),
        openai::reply_text("gave up"),
    ]);
    let result = run_with_advisors(&repo, &server, "try things");
    assert_eq!(result["final_message"], "gave up", "{result}");
    let requests = server.requests();
    let asked: Vec<bool> = requests.iter().map(is_advisor).collect();
    assert_eq!(asked, [false, true, false, false, true, false]);
    let question = |r: &RecordedRequest| {
        r.body["messages"][1]["content"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        question(&requests[1]).contains("\"errorType\": \"NotFound\"")
            && question(&requests[1]).contains("missing.txt"),
        "{}",
        question(&requests[1])
    );
    assert!(question(&requests[4]).contains("\"errorType\": \"InvalidArguments\""));
    // Small: no tool is offered to the advisor.
    for advisor in [&requests[1], &requests[4]] {
        assert_eq!(advisor.body.get("tools"), None, "{}", advisor.body);
    }
    // The model sees each failure as it was.
    let results = server.results_of(&["c1", "c2", "c3"]);
    assert!(results[1].contains("gone/away.txt"), "{results:?}");
    assert_eq!(result["usage"]["advisors"]["requests"], 2, "{result}");
    let log = repo.run(&["log", result["session_id"].as_str().expect("id")]);
    assert!(
        log.contains("op=advisor") && log.contains("result=cached"),
        "{log}"
    );
}

#[test]
fn retry_on_a_list_of_kinds_sends_the_others_straight_back_to_the_model() {
    let repo = Repo::new();
    repo.run(&["config", "set", "advisors.retry_on", "[Timeout]"]);
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("c1", "read-file", json!({"path": "missing.txt"}))]),
        openai::reply_tool_calls(&[("c2", "edit-file", json!({"path": 7}))]),
        openai::reply_tool_calls(&[("c3", "read-file", json!({"path": "../../etc/passwd"}))]),
        openai::reply_tool_calls(&[(
            "c4",
            "edit-file",
            json!({"path": ".nop/config.yml", "old_string": "no such text", "new_string": "x"}),
        )]),
        // The kind it names still goes to the advisor.
        openai::reply_tool_calls(&[(
            "c5",
            "shell",
            json!({"command": "sleep 5", "timeout_s": 0.2}),
        )]),
        skip(),
        openai::reply_text("gave up"),
    ]);
    let result = run_with_advisors(&repo, &server, "try things");
    assert_eq!(result["final_message"], "gave up", "{result}");
    let requests = server.requests();
    let asked: Vec<bool> = requests.iter().map(is_advisor).collect();
    assert_eq!(asked, [false, false, false, false, false, true, false]);
    // Each result reached the model.
    server.results_of(&["c1", "c2", "c3", "c4", "c5"]);
}

#[test]
fn a_timeout_goes_to_retry_advisor_and_its_request_is_counted_apart() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[(
            "c1",
            "shell",
            json!({"command": "sleep 5", "timeout_s": 0.5}),
        )]),
        openai::reply_text(
            r#"{"shouldRetry": false, "reason": "it will time out again", "suggestedAction": "skip"}"#,
        ),
        openai::reply_text("too slow"),
    ]);
    let output = repo
        .nop_model(&server, "openai")
        .env("NOP_ADVISORS_ENABLED", "true")
        .args(["run", "--output-format", "json", "wait"])
        .output()
        .expect("run");
    let result: Value = serde_json::from_slice(&output.stdout).expect("json");
    assert_eq!(result["final_message"], "too slow", "{result}");
    assert_eq!(advisor_requests(&server), 1);
    // The advisor's request is the run's, shown apart.
    assert_eq!(result["usage"]["advisors"]["requests"], 1, "{result}");
    assert_eq!(result["usage"]["requests"], 2, "{result}");
    let session = repo.session_json(result["session_id"].as_str().expect("id"));
    assert_eq!(session["usage"]["advisors"]["requests"], 1, "{session}");
    assert_eq!(session["usage"]["requests"], 2);
}
