//! `nop run` end to end: the real binary against the mock model server, both wire protocols.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::support::Repo;
use crate::support::mock::{MockResponse, MockServer, anthropic, openai};

/// Runs `nop run` with json output; returns (exit code, the result object, stderr).
fn run_json(repo: &Repo, server: &MockServer, kind: &str, args: &[&str]) -> (i32, Value, String) {
    let output = repo
        .nop_model(server, kind)
        .args(["run", "--output-format", "json"])
        .args(args)
        .output()
        .expect("run nop");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let result = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("{e}: stdout {stdout:?}, stderr {stderr}"));
    (output.status.code().unwrap_or(-1), result, stderr)
}

fn reply_tools(kind: &str, calls: &[(&str, &str, Value)]) -> MockResponse {
    if kind == "anthropic" {
        anthropic::reply_tool_calls(calls)
    } else {
        openai::reply_tool_calls(calls)
    }
}

fn reply_text(kind: &str, text: &str) -> MockResponse {
    if kind == "anthropic" {
        anthropic::reply_text(text)
    } else {
        openai::reply_text(text)
    }
}

/// The ids of the tool calls whose results a request carries, in order, in either protocol.
fn result_ids(request: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for m in request["messages"].as_array().into_iter().flatten() {
        if m["role"] == "tool" {
            out.push(m["tool_call_id"].as_str().unwrap_or_default().to_string());
        }
        for block in m["content"].as_array().into_iter().flatten() {
            if block["type"] == "tool_result" {
                out.push(
                    block["tool_use_id"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                );
            }
        }
    }
    out
}

#[expect(clippy::too_many_lines, reason = "a debt: listed in AGENTS.md")]
fn three_step_task(kind: &str) {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        reply_tools(
            kind,
            &[(
                "c1",
                "write-file",
                json!({"path": "notes/hello.txt", "content": "hello from nop\n"}),
            )],
        ),
        reply_tools(
            kind,
            &[("c2", "shell", json!({"command": "wc -c < notes/hello.txt"}))],
        ),
        reply_tools(
            kind,
            &[("c3", "read-file", json!({"path": "notes/hello.txt"}))],
        ),
        reply_text(kind, "All three steps done."),
    ]);
    let (code, result, stderr) = run_json(
        &repo,
        &server,
        kind,
        &["write a file, count it, read it back"],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(result["status"], "completed");
    assert_eq!(result["final_message"], "All three steps done.");
    assert_eq!(result["turns"], 4);
    assert_eq!(result["tool_calls"], 3);
    assert_eq!(
        std::fs::read_to_string(repo.path().join("notes/hello.txt")).expect("file"),
        "hello from nop\n"
    );

    let requests = server.requests();
    assert_eq!(requests.len(), 4);
    let path = if kind == "anthropic" {
        "/v1/messages"
    } else {
        "/v1/chat/completions"
    };
    assert!(
        requests
            .iter()
            .all(|r| r.path == path && r.body["model"] == "mock-model" && r.body["stream"] == true)
    );
    let tools: Vec<&str> = requests[0].body["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| {
            t["name"]
                .as_str()
                .or(t["function"]["name"].as_str())
                .unwrap_or_default()
        })
        .collect();
    for name in [
        "shell",
        "read-file",
        "write-file",
        "edit-file",
        "list-files",
        "search-files",
        "update-plan",
        "ask-user",
        "snapshot",
        "compact",
    ] {
        assert!(tools.contains(&name), "{name} not offered: {tools:?}");
    }
    // Nothing to act on in a new repository: no other agent, no skill, no memory.
    for name in ["call-agent", "load-skill", "search-memory"] {
        assert!(!tools.contains(&name), "{name} offered: {tools:?}");
    }
    let results = server.results_of(&["c1", "c2", "c3"]);
    assert!(
        results[0].starts_with("created notes/hello.txt"),
        "{results:?}"
    );
    assert!(
        results[1].starts_with("exit code: 0") && results[1].contains("15"),
        "{results:?}"
    );
    assert_eq!(results[2], "hello from nop\n");
    // The last request carries the whole conversation: every result, in call order.
    assert_eq!(result_ids(&requests[3].body), ["c1", "c2", "c3"]);

    // The session on disk is complete: system, user, then assistant/tool pairs and the answer.
    let id = result["session_id"].as_str().expect("id");
    let session = repo.session_json(id);
    let roles: Vec<&str> = session["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["role"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        roles,
        vec![
            "system",
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant"
        ]
    );
    assert_eq!(session["status"], "completed");
    assert_eq!(session["messages"][3]["toolCall"]["name"], "write-file");
    assert_eq!(session["usage"]["requests"], 4);
    assert!(
        session["usage"]["outputTokens"]
            .as_u64()
            .is_some_and(|n| n > 0)
    );
}

#[test]
fn three_step_task_openai() {
    three_step_task("openai");
}

#[test]
fn three_step_task_anthropic() {
    three_step_task("anthropic");
}

#[test]
fn text_output_streams_the_answer_to_stdout_and_tool_lines_to_stderr() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("c1", "shell", json!({"command": "echo hi"}))]),
        openai::reply_text("The answer."),
    ]);
    let output = repo
        .nop_model(&server, "openai")
        .args(["run", "say it"])
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&output.stdout), "The answer.\n");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("⏺ shell echo hi") && stderr.contains("exit code: 0"),
        "{stderr}"
    );
}

#[test]
fn tool_arguments_streamed_in_many_pieces_and_llama_cpp_deltas() {
    let repo = Repo::new();
    let args = json!({"path": "pieces.txt", "content": "ünïcödé – split everywhere\n"}).to_string();
    let mut first = openai::tool_call(0, "c1", "write-file", &args, args.chars().count());
    first.extend([openai::finish("tool_calls"), openai::done()]);
    let mut second =
        openai::tool_call_llama_cpp(0, "c2", "read-file", r#"{"path": "pieces.txt"}"#, 5);
    second.extend([openai::finish("tool_calls"), openai::done()]);
    let server = MockServer::start(vec![
        MockResponse::sse(first),
        MockResponse::sse(second),
        openai::reply_text("ok"),
    ]);
    let (code, _, stderr) = run_json(&repo, &server, "openai", &["go"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        std::fs::read_to_string(repo.path().join("pieces.txt")).expect("file"),
        "ünïcödé – split everywhere\n"
    );
    assert_eq!(server.result_of("c2"), "ünïcödé – split everywhere\n");
    // The repeated name was not doubled in what was recorded and sent back.
    let assistant = &server.request_with_result("c2").body["messages"][4];
    assert_eq!(assistant["tool_calls"][0]["function"]["name"], "read-file");
}

#[test]
fn rate_limit_then_success_is_retried_and_a_plain_400_is_not() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        MockResponse::Status {
            code: 429,
            headers: vec![("retry-after".into(), "0".into())],
            body: r#"{"error":{"message":"slow down"}}"#.into(),
        },
        MockResponse::status(503, "overloaded"),
        openai::reply_text("made it"),
    ]);
    let (code, result, stderr) = run_json(&repo, &server, "openai", &["hi"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(result["final_message"], "made it");
    assert_eq!(server.requests().len(), 3);

    let server = MockServer::start(vec![
        MockResponse::status(400, r#"{"error":{"message":"bad model"}}"#),
        openai::reply_text("never"),
    ]);
    let (code, result, _) = run_json(&repo, &server, "openai", &["hi"]);
    assert_eq!(code, 1);
    assert_eq!(result["status"], "error");
    assert!(
        result["final_message"]
            .as_str()
            .is_some_and(|m| m.contains("HTTP 400") && m.contains("bad model"))
    );
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn a_stream_cut_mid_way_or_empty_is_retried() {
    for kind in ["openai", "anthropic"] {
        let repo = Repo::new();
        let cut = if kind == "anthropic" {
            let mut chunks = vec![anthropic::message_start(5)];
            chunks.extend(
                anthropic::text_block(0, &["half an ans"])
                    .into_iter()
                    .take(2),
            );
            MockResponse::sse(chunks)
        } else {
            MockResponse::sse(vec![openai::text("half an ans")])
        };
        let server = MockServer::start(vec![
            cut,
            MockResponse::sse(Vec::new()),
            reply_text(kind, "whole answer"),
        ]);
        let (code, result, stderr) = run_json(&repo, &server, kind, &["hi"]);
        assert_eq!(code, 0, "{kind}: {stderr}");
        assert_eq!(result["final_message"], "whole answer", "{kind}");
        assert_eq!(server.requests().len(), 3, "{kind}");
        // Only the whole answer is in the session.
        let session = repo.session_json(result["session_id"].as_str().expect("id"));
        assert_eq!(session["messages"][2]["content"], "whole answer");
    }
}

#[test]
fn retries_give_up_after_the_configured_attempts() {
    let repo = Repo::new();
    let server = MockServer::start((0..3).map(|_| MockResponse::status(500, "boom")).collect());
    let output = repo
        .nop_model(&server, "openai")
        .args([
            "--set",
            "provider.max_attempts=3",
            "run",
            "--output-format",
            "json",
            "hi",
        ])
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(server.requests().len(), 3);
}

#[test]
fn malformed_tool_arguments_go_back_to_the_model_and_the_run_completes() {
    let repo = Repo::new();
    let mut broken =
        openai::tool_call(0, "c1", "write-file", r#"{"path": "x.txt", "content": "#, 3);
    broken.extend([openai::finish("tool_calls"), openai::done()]);
    let server = MockServer::start(vec![
        MockResponse::sse(broken),
        openai::reply_tool_calls(&[("c2", "read-file", json!({"file": "x.txt"}))]),
        openai::reply_text("recovered"),
    ]);
    let (code, result, stderr) = run_json(&repo, &server, "openai", &["go"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(result["final_message"], "recovered");
    let results = server.results_of(&["c1", "c2"]);
    assert!(results[0].contains("not valid JSON"), "{results:?}");
    assert!(results[1].contains("unknown field `file`"), "{results:?}");
    // Failures are in error logs with their details, and marked in the transcript.
    let id = result["session_id"].as_str().expect("id");
    let errors: Vec<_> = std::fs::read_dir(repo.session_dir(id))
        .expect("dir")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("error-"))
        .collect();
    assert_eq!(errors.len(), 2);
    let session = repo.session_json(id);
    assert_eq!(session["messages"][3]["isError"], true);
    repo.assert_session_shape(id, "run-tool-calls-and-a-failed-call.json");
}

#[test]
fn tool_results_carry_the_outcome_in_stream_json() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("c1", "shell", json!({"command": "echo hi; exit 3"}))]),
        openai::reply_tool_calls(&[("c2", "write-file", json!({"path": "x.txt", "content": "x"}))]),
        openai::reply_text("done"),
    ]);
    let output = repo
        .nop_model(&server, "openai")
        .args(["run", "--output-format", "stream-json", "go"])
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(0));
    let results: Vec<Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .filter(|e| e["type"] == "tool_result")
        .collect();
    assert_eq!(results.len(), 2, "{results:?}");
    let shell = &results[0]["outcome"];
    assert_eq!(shell["exit_code"], 3, "{shell}");
    assert!(shell["command_ms"].is_u64(), "{shell}");
    assert!(shell.get("whole_in").is_none(), "{shell}");
    assert_eq!(results[1]["outcome"], json!({"paths_written": ["x.txt"]}));
}

#[test]
fn a_missing_prompt_file_is_said_once() {
    let repo = Repo::new();
    let path = repo.path().join(".nop/agents.yml");
    let agents = std::fs::read_to_string(&path).expect("agents.yml");
    let ghost = "agents:\n  - name: ghost\n    description: d\n    prompt: agents/ghost.md\n";
    std::fs::write(&path, agents.replacen("agents:\n", ghost, 1)).expect("write");
    let server = MockServer::start(vec![]);
    let output = repo
        .nop_model(&server, "openai")
        .args(["run", "--agent", "ghost", "hello"])
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        stderr.trim_end(),
        format!(
            "error: {}: No such file or directory (os error 2) (the prompt file of agent \
             `ghost` in agents.yml)",
            repo.path().join(".nop/agents/ghost.md").display()
        ),
        "said once"
    );
}

#[test]
fn a_tool_that_runs_too_long_is_killed_and_reported() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[(
            "c1",
            "shell",
            json!({"command": "sleep 30", "timeout_s": 0.5}),
        )]),
        openai::reply_text("noted"),
    ]);
    let started = Instant::now();
    let (code, _, stderr) = run_json(&repo, &server, "openai", &["go"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(20));
    let result = server.result_of("c1");
    assert!(result.starts_with("error (Timeout)"), "{result}");
}

/// The tool names the first request offered.
fn offered_tools(server: &MockServer) -> Vec<String> {
    server.requests()[0].body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn tools_with_nothing_to_act_on_are_offered_once_there_is_something() {
    let repo = Repo::new();
    let server = MockServer::start(vec![openai::reply_text("done")]);
    let (code, _, stderr) = run_json(&repo, &server, "openai", &["go"]);
    assert_eq!(code, 0, "{stderr}");
    let tools = offered_tools(&server);
    for gone in ["call-agent", "load-skill", "search-memory"] {
        assert!(!tools.contains(&gone.to_string()), "{gone} in {tools:?}");
    }
    assert!(tools.contains(&"update-plan".to_string()), "{tools:?}");

    // Another agent, a skill, a day's memory: each tool has something to act on.
    let agents = std::fs::read_to_string(repo.path().join(".nop/agents.yml")).expect("agents");
    std::fs::write(
        repo.path().join(".nop/agents.yml"),
        format!("{agents}\n  - name: tester\n    description: runs the tests\n"),
    )
    .expect("agents.yml");
    let skill = repo.path().join(".nop/.system/skills/deploy");
    std::fs::create_dir_all(&skill).expect("mkdir");
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: deploy\ndescription: How to deploy\n---\nRun make deploy.\n",
    )
    .expect("skill");
    repo.trust();
    repo.session()
        .user("the parser chokes on nested arrays")
        .assistant("Fixed src/parser.rs.")
        .created_at("2026-01-15T10:00:00Z")
        .write();
    let summary = json!({"summary": "Fixed the parser.", "topics": [], "keyPoints": [], "keywords": ["parser"]});
    let summarizer = MockServer::start(vec![openai::reply_text(&summary.to_string())]);
    repo.model_json(
        &summarizer,
        &["memory", "summarize", "--date", "2026-01-15", "--json"],
    );
    let server = MockServer::start(vec![openai::reply_text("done")]);
    let (code, _, stderr) = run_json(&repo, &server, "openai", &["go"]);
    assert_eq!(code, 0, "{stderr}");
    let tools = offered_tools(&server);
    for back in ["call-agent", "load-skill", "search-memory"] {
        assert!(tools.contains(&back.to_string()), "{back} not in {tools:?}");
    }

    // The one other agent denied to the caller: nothing left to call.
    std::fs::write(
        repo.path().join(".nop/.permissions/agent-coder.yml"),
        "agent: coder\ntools:\n  allowed: [\"*\"]\n  denied: [\"call-agent:tester\"]\nfile-access:\n  - pattern: \"**\"\n    access: read\n",
    )
    .expect("rules");
    repo.trust();
    let server = MockServer::start(vec![openai::reply_text("done")]);
    let (code, _, stderr) = run_json(&repo, &server, "openai", &["go"]);
    assert_eq!(code, 0, "{stderr}");
    let tools = offered_tools(&server);
    assert!(!tools.contains(&"call-agent".to_string()), "{tools:?}");
    assert!(tools.contains(&"load-skill".to_string()), "{tools:?}");
}

#[test]
fn a_missing_workdir_is_named_not_taken_for_a_missing_bash() {
    let repo = Repo::new();
    std::fs::write(repo.path().join("file.txt"), "x").expect("file");
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[
            (
                "c1",
                "shell",
                json!({"command": "ls", "workdir": "no/such/dir"}),
            ),
            (
                "c2",
                "shell",
                json!({"command": "ls", "workdir": "file.txt"}),
            ),
            ("c3", "shell", json!({"command": "pwd", "workdir": "src"})),
        ]),
        openai::reply_text("noted"),
    ]);
    std::fs::create_dir(repo.path().join("src")).expect("src");
    let (code, _, stderr) = run_json(&repo, &server, "openai", &["go"]);
    assert_eq!(code, 0, "{stderr}");
    let missing = server.result_of("c1");
    assert!(
        missing.starts_with("error (NotFound)")
            && missing
                .contains("workdir `no/such/dir` does not exist (relative to the repository root")
            && !missing.contains("could not start bash"),
        "{missing}"
    );
    let file = server.result_of("c2");
    assert!(
        file.contains("workdir `file.txt` is not a directory"),
        "{file}"
    );
    assert!(
        server.result_of("c3").contains("/src"),
        "{}",
        server.result_of("c3")
    );
}

#[test]
fn ask_user_waits_with_exit_3_and_the_answer_resumes() {
    for kind in ["openai", "anthropic"] {
        let repo = Repo::new();
        let server = MockServer::start(vec![
            reply_tools(
                kind,
                &[(
                    "q1",
                    "ask-user",
                    json!({"question": "Which file should I change?"}),
                )],
            ),
            reply_text(kind, "Changed config.toml."),
        ]);
        let output = repo
            .nop_model(&server, kind)
            .args(["run", "fix it"])
            .output()
            .expect("run");
        assert_eq!(output.status.code(), Some(3), "{kind}");
        assert!(String::from_utf8_lossy(&output.stdout).contains("Which file should I change?"));
        let (_, list) = (0, repo.run(&["sessions", "list", "--json"]));
        let list: Value = serde_json::from_str(&list).expect("json");
        let id = list[0]["id"].as_str().expect("id").to_string();
        assert_eq!(list[0]["status"], "waiting_input");

        let (code, result, stderr) = run_json(
            &repo,
            &server,
            kind,
            &["--session", &id[..12], "config.toml"],
        );
        assert_eq!(code, 0, "{kind}: {stderr}");
        assert_eq!(result["session_id"], id.as_str());
        assert_eq!(server.result_of("q1"), "config.toml", "{kind}");
        assert_eq!(repo.session_json(&id)["status"], "completed");
    }
}

#[test]
fn ctrl_c_mid_tool_exits_130_and_the_session_resumes() {
    let repo = Repo::new();
    // In a writable subdirectory: confined shells cannot create entries in the repository root.
    std::fs::create_dir_all(repo.path().join("work")).expect("mkdir");
    let marker = repo.path().join("work/still-running");
    let probe = repo.path().join("work/probe");
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[(
            "c1",
            "shell",
            json!({"command": format!("touch {} && sleep 20; touch {}", probe.display(), marker.display())}),
        )]),
        openai::reply_text("resumed fine"),
    ]);
    let mut child = repo
        .nop_model_process(&server, "openai")
        .args(["run", "--output-format", "stream-json", "long task"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    // Wait for the tool call to start, on the event itself.
    for line in lines.by_ref() {
        let event: Value = serde_json::from_str(&line.expect("line")).expect("event");
        if event["type"] == "tool_call" {
            break;
        }
    }
    // The command is running once its first step shows on disk (a condition, not a guess).
    let deadline = Instant::now() + Duration::from_secs(15);
    while !probe.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(probe.exists(), "the command never started");
    let started = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .expect("SIGINT");
    let rest: Vec<Value> = lines
        .map(|l| serde_json::from_str(&l.expect("line")).expect("event"))
        .collect();
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(130));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "did not stop at once"
    );
    let result = rest.last().expect("result event");
    assert_eq!(result["type"], "result");
    assert_eq!(result["status"], "cancelled");
    let id = result["session_id"].as_str().expect("id").to_string();
    let session = repo.session_json(&id);
    assert_eq!(session["status"], "cancelled");
    let last = session["messages"]
        .as_array()
        .and_then(|m| m.last())
        .expect("message")
        .clone();
    assert_eq!(last["role"], "tool");
    assert!(
        last["content"]
            .as_str()
            .is_some_and(|c| c.contains("aborted by user")),
        "{last}"
    );

    let (code, result, stderr) =
        run_json(&repo, &server, "openai", &["--session", &id, "carry on"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(result["final_message"], "resumed fine");
    let result = server.result_of("c1");
    assert!(result.contains("aborted by user"), "{result}");
    assert!(
        !marker.exists(),
        "the killed command's process group survived"
    );
}

#[test]
fn stream_json_events_parse_line_by_line() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        MockResponse::status(429, "later"),
        openai::reply_tool_calls(&[("c1", "list-files", json!({}))]),
        openai::reply_text("listed"),
    ]);
    let output = repo
        .nop_model(&server, "openai")
        .args(["run", "--output-format", "stream-json", "list"])
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(0));
    let events: Vec<Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let types: Vec<&str> = events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(types.first(), Some(&"session_started"));
    assert_eq!(types.last(), Some(&"result"));
    for needed in [
        "turn_started",
        "retrying",
        "tool_call",
        "tool_result",
        "text",
    ] {
        assert!(types.contains(&needed), "{needed} missing from {types:?}");
    }
    let result = events.last().expect("result");
    assert_eq!(result["status"], "completed");
    assert_eq!(result["usage"]["output_tokens"], 10);
}

/// Issue 28: a 429 that says the account's quota is exhausted never succeeds on a retry; the
/// run fails at once and says it is the quota or billing, not a rate limit.
#[test]
fn an_exhausted_quota_fails_at_once_without_retries() {
    let repo = Repo::new();
    let body = json!({"error": {
        "message": "You exceeded your current quota, please check your plan and billing details.",
        "type": "insufficient_quota",
        "param": null,
        "code": "insufficient_quota"
    }});
    let server = MockServer::start(vec![
        MockResponse::status(429, body.to_string()),
        openai::reply_text("never sent"),
    ]);
    let output = repo
        .nop_model(&server, "openai")
        .args(["run", "hello"])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert_eq!(server.requests().len(), 1, "{stderr}");
    assert!(!stderr.contains("retrying"), "{stderr}");
    assert!(
        stderr.contains("run out of quota or credit")
            && stderr.contains("not a rate limit")
            && stderr.contains("You exceeded your current quota"),
        "{stderr}"
    );
}

#[test]
fn keys_come_from_the_environment_and_never_reach_files_or_logs() {
    let repo = Repo::new();
    let key = "sk-test-SECRET-never-written-4711";
    let server = MockServer::start(vec![openai::reply_text("hi"), anthropic::reply_text("hi")]);
    let output = repo
        .nop_model(&server, "openai")
        .env("OPENAI_API_KEY", key)
        .args(["run", "hello"])
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(
        server.requests()[0].header("authorization"),
        Some(format!("Bearer {key}").as_str()),
        "{:?}",
        server.requests()[0].headers
    );
    let output = repo
        .nop_model(&server, "anthropic")
        .env("NOP_API_KEY", key)
        .args(["--log-level", "debug", "run", "hello"])
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(server.requests()[1].header("x-api-key"), Some(key));
    assert_eq!(
        server.requests()[1].header("anthropic-version"),
        Some("2023-06-01")
    );
    let mut stack = vec![repo.path().join(".nop")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(dir).expect("dir").flatten() {
            if entry.path().is_dir() {
                stack.push(entry.path());
            } else {
                let text = std::fs::read(entry.path()).expect("read");
                assert!(
                    !String::from_utf8_lossy(&text).contains(key),
                    "key in {}",
                    entry.path().display()
                );
            }
        }
    }
}

#[test]
fn a_remote_provider_without_a_key_says_which_variable_to_set() {
    let repo = Repo::new();
    let output = repo
        .nop()
        .env("NOP_BASE_URL", "https://models.example.invalid/v1")
        .env("NOP_MODEL", "m")
        .args(["run", "hi"])
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("NOP_API_KEY or OPENAI_API_KEY"), "{stderr}");
    let output = repo
        .nop()
        .env("NOP_BASE_URL", "http://127.0.0.1:9/v1")
        .args(["run", "hi"])
        .output()
        .expect("run");
    assert!(String::from_utf8_lossy(&output.stderr).contains("NOP_MODEL"));
}

#[test]
fn the_system_prompt_carries_agents_md_and_non_tty_never_waits() {
    let repo = Repo::new();
    std::fs::write(
        repo.path().join("AGENTS.md"),
        "Always run `make check` before finishing.\n",
    )
    .expect("write");
    let server = MockServer::start(vec![openai::reply_text("ok")]);
    let (code, _, _) = run_json(&repo, &server, "openai", &["hi"]);
    assert_eq!(code, 0);
    let system = server.requests()[0].body["messages"][0].clone();
    assert_eq!(system["role"], "system");
    assert!(
        system["content"]
            .as_str()
            .is_some_and(|c| c.contains("make check") && c.contains("nop's coding agent"))
    );

    // Without a prompt and without a terminal: a usage error at once, never a wait.
    let output = repo
        .nop_model(&server, "openai")
        .args(["run"])
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(2));
    let output = repo.nop().output().expect("run");
    assert_eq!(output.status.code(), Some(2));
    let output = repo
        .nop_model(&server, "openai")
        .args(["run", "-"])
        .write_stdin("from stdin")
        .output()
        .expect("run");
    assert_eq!(
        output.status.code(),
        Some(1),
        "script is empty: a 500, retried, then an error"
    );
    let last = server.requests().last().cloned().expect("request");
    assert!(last.body["messages"][1]["content"] == "from stdin");
}

#[test]
fn a_silent_stream_is_cut_after_the_idle_timeout_and_retried() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        MockResponse::Stall {
            chunks: vec![openai::text("thinking")],
            hold: Duration::from_secs(30),
        },
        openai::reply_text("awake"),
    ]);
    let started = Instant::now();
    let output = repo
        .nop_model(&server, "openai")
        .args([
            "--set",
            "provider.stream_idle_timeout_s=0.5",
            "run",
            "--output-format",
            "json",
            "hi",
        ])
        .output()
        .expect("run");
    crate::support::assert_ok(&output);
    assert!(started.elapsed() < Duration::from_secs(20));
    let result: Value = serde_json::from_slice(&output.stdout).expect("json");
    assert_eq!(result["final_message"], "awake");
    assert_eq!(server.requests().len(), 2);
}

#[test]
fn the_ci_example_script_runs_headless_and_keeps_the_result() {
    let repo = Repo::bare();
    let server = MockServer::start(vec![openai::reply_text("CI done")]);
    let nop_dir = assert_cmd::cargo::cargo_bin("nop")
        .parent()
        .expect("dir")
        .to_path_buf();
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/ci/nop-headless.sh");
    let output = std::process::Command::new("bash")
        .arg(&script)
        .arg("tidy up")
        .current_dir(repo.path())
        .env_clear()
        .env(
            "PATH",
            format!("{}:/usr/local/bin:/usr/bin:/bin", nop_dir.display()),
        )
        .env("HOME", repo.path())
        .envs(crate::support::model_env(&server, "openai"))
        .output()
        .expect("run script");
    crate::support::assert_ok(&output);
    assert!(String::from_utf8_lossy(&output.stdout).contains("nop completed the task"));
    let result: Value = serde_json::from_str(
        &std::fs::read_to_string(repo.path().join("nop-result.json")).expect("result"),
    )
    .expect("json");
    assert_eq!(result["type"], "result");
    assert_eq!(result["final_message"], "CI done");
    // No `nop init`: the built-in configuration, and the session kept in .nop/sessions.
    assert!(!repo.path().join(".nop/config.yml").exists());
    let sessions = std::fs::read_dir(repo.path().join(".nop/sessions")).expect("sessions");
    assert_eq!(sessions.count(), 1);
}

/// Plain text output (a CI log, no terminal) shows each command's output under it, as `codex
/// exec` does; for a failing test run, the assertion, not only the last lines.
#[test]
fn text_output_shows_a_failing_commands_error_lines() {
    let repo = Repo::new();
    std::fs::write(
        repo.path().join("test_calc.py"),
        "import unittest\n\nclass T(unittest.TestCase):\n    def test_a(self):\n        pass\n    def test_b(self):\n        self.assertEqual(6 / 3, 3)\n    def test_c(self):\n        pass\n    def test_d(self):\n        pass\n\nif __name__ == '__main__':\n    unittest.main()\n",
    )
    .expect("write");
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[(
            "c1",
            "shell",
            json!({"command": "python3 -m unittest -v test_calc"}),
        )]),
        openai::reply_text("it fails"),
    ]);
    let out = repo
        .nop_model(&server, "openai")
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .args(["run", "run the tests"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("exit code: 1"), "{stderr}");
    assert!(stderr.contains("AssertionError: 2.0 != 3"), "{stderr}");
    assert!(stderr.contains("FAILED (failures=1)"), "{stderr}");
}
