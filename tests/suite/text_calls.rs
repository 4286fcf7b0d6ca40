//! Small local models' habits: tool calls written as text are run as calls (and shown to the
//! model as calls next time), a call gone wrong is corrected once, the same call made again and
//! again ends the run, and an answer that is no answer (empty, a fix only described after a
//! failure, a change claimed that no tool made) is nudged once.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::support::Repo;
use crate::support::mock::{MockServer, RecordedRequest, anthropic, openai};

fn run_json(repo: &Repo, server: &MockServer, args: &[&str]) -> (i32, Value, String) {
    let output = repo
        .nop_model(server, "openai")
        .args(["run", "--output-format", "json"])
        .args(args)
        .arg("go")
        .output()
        .expect("run nop");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let result = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("{e}: stdout {stdout:?}, stderr {stderr}"));
    (output.status.code().unwrap_or(-1), result, stderr)
}

/// Asserts that the last user message of `request` (what nop told the model) contains `said`.
fn assert_told(request: &RecordedRequest, said: &str) {
    let told = request.user_messages();
    assert!(
        told.last().is_some_and(|t| t.contains(said)),
        "{said:?} not in {told:?}"
    );
}

/// The assistant messages of a request, as sent.
fn assistant_messages(request: &Value) -> Vec<Value> {
    request["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "assistant")
        .cloned()
        .collect()
}

#[test]
fn a_call_written_as_a_json_block_runs_and_the_model_sees_it_as_a_call() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_text(
            "```json\n{\"name\": \"shell\", \"arguments\": {\"command\": \"echo hi-from-text\"}}\n```",
        ),
        openai::reply_text("done"),
    ]);
    let (code, result, stderr) = run_json(&repo, &server, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(result["final_message"], "done");
    assert_eq!(result["tool_calls"], 1);
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    // The next request shows a call, not the text, and carries its result.
    let assistant = assistant_messages(&requests[1].body);
    assert_eq!(assistant.len(), 1, "{assistant:?}");
    assert_eq!(assistant[0]["content"], "");
    let call = &assistant[0]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "shell");
    let id = call["id"].as_str().expect("id");
    let arguments: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().expect("string"))
            .expect("json");
    assert_eq!(arguments, json!({"command": "echo hi-from-text"}));
    assert!(server.result_of(id).contains("hi-from-text"));
    // Recorded as a call like any other, marked as recovered from the text.
    let session_id = result["session_id"].as_str().expect("id");
    let session = repo.session_json(session_id);
    let messages = session["messages"].as_array().expect("messages");
    let recovered: Vec<&Value> = messages
        .iter()
        .filter(|m| m["recoveredFromText"] == true)
        .collect();
    assert_eq!(recovered.len(), 1, "{messages:?}");
    assert_eq!(recovered[0]["toolCalls"][0]["id"], id);
    assert!(
        messages
            .iter()
            .any(|m| m["role"] == "tool" && m["toolCall"]["id"] == id)
    );
    std::fs::write(
        "/var/tmp/h5-fixture.json",
        std::fs::read_to_string(repo.session_dir(session_id).join("session.json")).unwrap(),
    )
    .unwrap();
    repo.assert_session_shape(session_id, "recovered-tool-call.json");
}

#[test]
fn text_output_keeps_the_call_out_of_the_answer_and_stream_json_says_it_was_calls() {
    let repo = Repo::new();
    let call = "```json\n{\"name\": \"shell\", \"arguments\": {\"command\": \"echo hi\"}}\n```";
    let server = MockServer::start(vec![openai::reply_text(call), openai::reply_text("done")]);
    let output = repo
        .nop_model(&server, "openai")
        .args(["run", "go"])
        .output()
        .expect("run nop");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "done");
    assert!(String::from_utf8_lossy(&output.stderr).contains("echo hi"));

    let server = MockServer::start(vec![openai::reply_text(call), openai::reply_text("done")]);
    let output = repo
        .nop_model(&server, "openai")
        .args(["run", "--output-format", "stream-json", "go"])
        .output()
        .expect("run nop");
    let events: Vec<Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    let types: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    let at = types
        .iter()
        .position(|t| *t == "text_was_calls")
        .expect("text_was_calls");
    assert_eq!(events[at]["calls"], 1);
    assert_eq!(types[at + 1..].first(), Some(&"usage"), "{types:?}");
    assert!(types[at..].contains(&"tool_call"), "{types:?}");
}

#[test]
fn through_an_anthropic_gateway_the_recovered_call_goes_back_as_a_tool_use() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        anthropic::reply_text(
            "<tool_call>{\"name\": \"shell\", \"arguments\": {\"command\": \"echo via-gateway\"}}</tool_call>",
        ),
        anthropic::reply_text("done"),
    ]);
    let output = repo
        .nop_model(&server, "anthropic")
        .args(["run", "--output-format", "json", "go"])
        .output()
        .expect("run nop");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let assistant = assistant_messages(&requests[1].body);
    let blocks = assistant[0]["content"].as_array().expect("blocks");
    let tool_use = blocks
        .iter()
        .find(|b| b["type"] == "tool_use")
        .expect("a tool_use block");
    assert_eq!(tool_use["name"], "shell");
    assert!(
        !blocks.iter().any(|b| b["type"] == "text"),
        "the text is not sent back: {blocks:?}"
    );
    let id = tool_use["id"].as_str().expect("id");
    assert!(server.result_of(id).contains("via-gateway"));
}

#[test]
fn hermes_tags_with_two_calls_run_both_through_the_permissions() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_text(
            "<tool_call>\n{\"name\": \"write-file\", \"arguments\": {\"path\": \"a.txt\", \"content\": \"one\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"read-file\", \"arguments\": {\"path\": \"a.txt\"}}\n</tool_call>",
        ),
        openai::reply_text("done"),
    ]);
    let (code, result, stderr) = run_json(&repo, &server, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(result["tool_calls"], 2);
    assert_eq!(
        std::fs::read_to_string(repo.path().join("a.txt")).expect("written"),
        "one"
    );
    // A call the permissions refuse is refused written as text too.
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_text(
            "<tool_call>{\"name\": \"write-file\", \"arguments\": {\"path\": \"b.txt\", \"content\": \"x\"}}</tool_call>",
        ),
        openai::reply_text("done"),
    ]);
    let (code, _, stderr) = run_json(&repo, &server, &["--permission-mode", "plan"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!repo.path().join("b.txt").exists());
    let call = &assistant_messages(&server.requests()[1].body)[0]["tool_calls"][0];
    let result = server.result_of(call["id"].as_str().expect("id"));
    assert!(result.contains("plan mode"), "{result}");
}

#[test]
fn a_call_gone_wrong_is_corrected_once_and_a_second_one_is_the_answer() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_text("{\"name\": \"bash\", \"arguments\": {\"command\": \"echo hi\"}}"),
        openai::reply_text("{\"name\": \"shell\", \"arguments\": {\"command\": \"echo fixed\"}}"),
        openai::reply_text("done"),
    ]);
    let (code, result, stderr) = run_json(&repo, &server, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(result["final_message"], "done");
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    let told = requests[1].user_messages();
    let told = told.last().expect("a correction");
    assert!(told.contains("no tool named `bash`"), "{told}");
    assert!(told.contains("shell"), "{told}");
    assert!(requests[2].tool_results()[0].contains("fixed"));

    let repo = Repo::new();
    let wrong = "```json\n{\"name\": \"shell\", \"arguments\": {\"cmd\": \"ls\"}}\n```";
    let server = MockServer::start(vec![
        openai::reply_text(wrong),
        openai::reply_text(wrong),
        openai::reply_text("never asked"),
    ]);
    let (code, result, stderr) = run_json(&repo, &server, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(result["final_message"], wrong);
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_told(&requests[1], "`command` is required");
}

#[test]
fn recovery_switched_off_takes_the_text_as_the_answer() {
    let repo = Repo::new();
    let text = "```json\n{\"name\": \"shell\", \"arguments\": {\"command\": \"echo hi\"}}\n```";
    let server = MockServer::start(vec![openai::reply_text(text), openai::reply_text("x")]);
    let (code, result, stderr) =
        run_json(&repo, &server, &["--set", "provider.text_tool_calls=off"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(result["final_message"], text);
    assert_eq!(result["tool_calls"], 0);
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn the_same_call_with_the_same_result_is_named_then_ends_the_run() {
    let repo = Repo::new();
    let same =
        |id: &str| openai::reply_tool_calls(&[(id, "shell", json!({"command": "echo same"}))]);
    let server = MockServer::start(vec![
        same("c1"),
        same("c2"),
        same("c3"),
        same("c4"),
        same("c5"),
        openai::reply_text("never asked"),
    ]);
    let (code, result, stderr) = run_json(&repo, &server, &[]);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(result["status"], "error");
    assert_eq!(result["limit"], "repeated_call");
    assert_eq!(result["subtype"], "error_during_execution");
    let message = result["final_message"].as_str().expect("message");
    assert!(message.contains("same call (shell"), "{message}");
    assert!(message.contains("5 times"), "{message}");
    assert!(result["continue_with"].is_string(), "{result}");
    let results = server.results_of(&["c2", "c3", "c4"]);
    assert!(!results[0].contains("exact call"), "{results:?}");
    assert!(results[1].contains("this exact call"), "{results:?}");
    assert!(results[1].contains("3 times"), "{results:?}");
    assert!(
        results[2].contains("one more time ends the run"),
        "{results:?}"
    );
    assert_eq!(server.requests().len(), 5);
    let session = repo.session_json(result["session_id"].as_str().expect("id"));
    assert_eq!(session["status"], "error");
}

#[test]
fn a_fix_described_after_a_failing_command_is_nudged_once() {
    let repo = Repo::new();
    let prose = "The test fails because of the bound. Replace `i < n` with `i <= n` in src/lib.rs.";
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("c1", "shell", json!({"command": "echo failing; exit 1"}))]),
        openai::reply_text(prose),
        openai::reply_text(prose),
        openai::reply_text("never asked"),
    ]);
    let (code, result, stderr) = run_json(&repo, &server, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(result["final_message"], prose);
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    assert_told(&requests[2], "You described a change but did not make it");
    // After a command that passed, the same answer is the answer.
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("c1", "shell", json!({"command": "echo ok"}))]),
        openai::reply_text(prose),
        openai::reply_text("never asked"),
    ]);
    let (code, result, stderr) = run_json(&repo, &server, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(result["final_message"], prose);
    assert_eq!(server.requests().len(), 2);
}

#[test]
fn a_change_claimed_when_no_tool_changed_anything_is_nudged_once() {
    let repo = Repo::new();
    let claim = "The function `is_palindrome(s)` has been added to `textutil.py`.";
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("c1", "read-file", json!({"path": "README.md"}))]),
        openai::reply_text(claim),
        openai::reply_tool_calls(&[(
            "c2",
            "write-file",
            json!({"path": "textutil.py", "content": "def is_palindrome(s):\n    return s == s[::-1]\n"}),
        )]),
        openai::reply_text(claim),
        openai::reply_text("never asked"),
    ]);
    let (code, result, stderr) = run_json(&repo, &server, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(result["final_message"], claim);
    let requests = server.requests();
    assert_eq!(requests.len(), 4);
    assert_told(&requests[2], "no tool changed anything");
    assert!(repo.path().join("textutil.py").exists());
    // Steps for the user to make the change by hand, with nothing changed: nudged too.
    let repo = Repo::new();
    let steps = "To change the port, open the file config.json and set `\"port\": 9090`, then save the file.";
    let server = MockServer::start(vec![
        openai::reply_text(steps),
        openai::reply_text(steps),
        openai::reply_text("never asked"),
    ]);
    let (code, result, stderr) = run_json(&repo, &server, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(result["final_message"], steps);
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_told(&requests[1], "You described a change but did not make it");
    // An answer to a question that claims nothing is the answer at once.
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_text("The README explains how to install the tool."),
        openai::reply_text("never asked"),
    ]);
    let (code, _, stderr) = run_json(&repo, &server, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn an_empty_reply_is_told_once_and_a_second_one_ends_the_run() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("c1", "shell", json!({"command": "exit 3"}))]),
        openai::reply_text(""),
        openai::reply_text("It exits with 3."),
        openai::reply_text("never asked"),
    ]);
    let (code, result, stderr) = run_json(&repo, &server, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(result["final_message"], "It exits with 3.");
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    assert_told(&requests[2], "Your reply was empty");
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_text(""),
        openai::reply_text(""),
        openai::reply_text("never asked"),
    ]);
    let (code, result, stderr) = run_json(&repo, &server, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(result["final_message"], "");
    assert_eq!(server.requests().len(), 2);
}

#[test]
fn an_edit_whose_text_is_not_in_a_small_file_shows_the_file() {
    let repo = Repo::new();
    std::fs::write(
        repo.path().join("textutil.py"),
        "def shout(s):\n    return s.upper()\n",
    )
    .expect("write");
    std::fs::write(repo.path().join("big.py"), "x = 1\n".repeat(1000)).expect("write");
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[
            (
                "c1",
                "edit-file",
                json!({"path": "textutil.py", "old_string": "def is_palindrome(s):", "new_string": "x"}),
            ),
            (
                "c2",
                "edit-file",
                json!({"path": "big.py", "old_string": "y = 2", "new_string": "y = 3"}),
            ),
        ]),
        openai::reply_text("done"),
    ]);
    let (code, _, stderr) = run_json(&repo, &server, &[]);
    assert_eq!(code, 0, "{stderr}");
    let small = server.result_of("c1");
    assert!(
        small.contains("does not occur in textutil.py")
            && small
                .contains("Its text now (2 lines):\n```\ndef shout(s):\n    return s.upper()\n```"),
        "{small}"
    );
    let big = server.result_of("c2");
    assert!(
        big.contains("does not occur in big.py") && !big.contains("x = 1"),
        "{big}"
    );
}

/// Hostile: a file the rules let the agent write only when asked (`ask`) is never shown by a
/// failed edit, even once the write was approved: showing it is a read no one approved.
#[test]
fn a_failed_edit_never_shows_a_file_the_agent_may_not_read_outright() {
    let repo = Repo::new();
    std::fs::create_dir_all(repo.path().join(".nop/.permissions")).expect("dir");
    std::fs::write(
        repo.path().join(".nop/.permissions/agent-default.yml"),
        "tools:\n  allowed: [\"*\"]\nfile-access:\n  - pattern: \"ask/**\"\n    access: ask\n  \
         - pattern: \"**\"\n    access: read\n",
    )
    .expect("rules");
    repo.trust();
    std::fs::create_dir_all(repo.path().join("ask")).expect("dir");
    std::fs::write(repo.path().join("ask/x.md"), "ASK-SECRET\n").expect("write");
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[(
            "c1",
            "edit-file",
            json!({"path": "ask/x.md", "old_string": "nothing here", "new_string": "x"}),
        )]),
        openai::reply_text("done"),
    ]);
    let (code, _, stderr) = run_json(&repo, &server, &["--yes"]);
    assert_eq!(code, 0, "{stderr}");
    let result = server.result_of("c1");
    assert!(
        result.contains("does not occur in ask/x.md") && !result.contains("ASK-SECRET"),
        "{result}"
    );
}
