//! Long-term memory end to end: summarize a day with the summarizer (mock model), list, remove,
//! restore, search, and a run whose question pulls memory into what the model sees.

use serde_json::{Value, json};

use crate::support::Repo;
use crate::support::mock::{MockServer, openai};

/// A session of `coder` on 2026-01-15 (UTC; tests run with no TZ) about the parser.
fn day_of_work(repo: &Repo) -> String {
    repo.session()
        .user("the parser chokes on nested arrays")
        .assistant("Fixed src/parser.rs: arrays now recurse.")
        .created_at("2026-01-15T10:00:00Z")
        .write()
}

fn summary_reply() -> Value {
    json!({
        "summary": "Fixed the parser so nested arrays recurse (src/parser.rs).",
        "topics": ["parser"],
        "keyPoints": ["nested arrays recurse now"],
        "keywords": ["parser", "arrays", "解析器"]
    })
}

fn summarize(repo: &Repo, server: &MockServer) -> Value {
    repo.model_json(
        server,
        &["memory", "summarize", "--date", "2026-01-15", "--json"],
    )
}

#[test]
fn summarize_list_pop_restore_and_search() {
    let repo = Repo::new();
    day_of_work(&repo);
    let server = MockServer::start(vec![openai::reply_text(&summary_reply().to_string())]);
    let entry = summarize(&repo, &server);
    assert_eq!(entry["summaryDate"], "2026-01-15");
    assert_eq!(
        entry["index"]["keywords"],
        json!(["parser", "arrays", "解析器"])
    );
    assert_eq!(entry["index"]["userMessageCount"], 1);
    let request = &server.requests()[0].body;
    assert!(
        request["messages"][0]["content"]
            .as_str()
            .is_some_and(|c| c.contains("You summarise one day"))
    );
    assert!(
        request["messages"][1]["content"]
            .as_str()
            .is_some_and(|c| c.contains("chokes on nested arrays"))
    );
    assert!(request.get("tools").is_none());

    let id = entry["id"].as_str().expect("id").to_string();
    let prompt = repo.run(&["memory", "show"]);
    assert!(
        prompt.trim_end().ends_with(
            "[Memory of 2026-01-15] Fixed the parser so nested arrays recurse (src/parser.rs)."
        ),
        "{prompt}"
    );
    let list: Value = serde_json::from_str(&repo.run(&["memory", "list", "--json"])).expect("json");
    assert_eq!(list.as_array().map(Vec::len), Some(1));

    // The same day again is refused; a wrong id cannot be removed.
    let out = repo
        .nop_model(&server, "openai")
        .args(["memory", "summarize", "--date", "2026-01-15"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already has a summary of 2026-01-15"));
    let err = repo.fail(&["memory", "pop", "--id", "zzz"]);
    assert!(
        err.contains("only the latest summary can be removed"),
        "{err}"
    );

    let hits: Value =
        serde_json::from_str(&repo.run(&["memory", "search", "解析器", "--json"])).expect("json");
    assert_eq!(hits[0]["id"], id.as_str());
    repo.run(&["--user", "alice", "memory", "pop"]);
    let hits: Value =
        serde_json::from_str(&repo.run(&["memory", "search", "parser", "--json"])).expect("json");
    assert_eq!(hits, json!([]));
    let all: Value =
        serde_json::from_str(&repo.run(&["memory", "list", "--all", "--json"])).expect("json");
    assert_eq!(all[0]["deletedBy"], "alice");
    assert_eq!(all[0]["index"]["deleted"], true);
    assert!(!repo.run(&["memory", "show"]).contains("[Memory of"));
    repo.run(&["memory", "restore"]);
    let hits: Value =
        serde_json::from_str(&repo.run(&["memory", "search", "2026-01-15", "--json"]))
            .expect("json");
    assert_eq!(hits[0]["id"], id.as_str());
}

#[test]
fn an_unusable_summary_stores_nothing() {
    let repo = Repo::new();
    day_of_work(&repo);
    let server = MockServer::start(vec![openai::reply_text("Today we fixed a parser bug.")]);
    let out = repo
        .nop_model(&server, "openai")
        .args(["memory", "summarize", "--date", "2026-01-15"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing was stored"));
    assert!(!repo.path().join(".nop/memory/coder.json").exists());
}

#[test]
fn a_question_about_the_past_pulls_memory_into_the_request() {
    let repo = Repo::new();
    day_of_work(&repo);
    let server = MockServer::start(vec![
        openai::reply_text(&summary_reply().to_string()),
        openai::reply_tool_calls(&[("m1", "search-memory", json!({"query": "arrays"}))]),
        openai::reply_text("We fixed nested arrays in the parser."),
    ]);
    summarize(&repo, &server);
    repo.model_ok(
        &server,
        &[
            "run",
            "--output-format",
            "json",
            "what did we change in the parser previously?",
        ],
    );
    let messages = server.requests()[1].body["messages"]
        .as_array()
        .expect("messages")
        .clone();
    // The prompt history is part of the system prompt…
    assert!(
        messages[0]["content"]
            .as_str()
            .is_some_and(|c| c.contains("[Memory of 2026-01-15]"))
    );
    // …and the question brought the matching index entry right before it.
    assert_eq!(messages[1]["role"], "system");
    assert!(
        messages[1]["content"].as_str().is_some_and(
            |c| c.starts_with("[Relevant memory") && c.contains("nested arrays recurse")
        ),
        "{messages:#?}"
    );
    assert_eq!(
        messages[2]["content"],
        "what did we change in the parser previously?"
    );
    // The search-memory tool finds it too.
    let result = server.result_of("m1");
    assert!(
        result.contains("2026-01-15") && result.contains("Fixed the parser"),
        "{result}"
    );
}

#[test]
fn auto_summarize_does_one_earlier_day_before_the_run() {
    let repo = Repo::new();
    day_of_work(&repo);
    let server = MockServer::start(vec![
        openai::reply_text(&summary_reply().to_string()),
        openai::reply_text("hello"),
        openai::reply_text("again"),
    ]);
    let run = |prompt: &str| {
        repo.nop_model(&server, "openai")
            .env("NOP_MEMORY_AUTO_SUMMARIZE", "true")
            .args(["run", prompt])
            .output()
            .expect("run")
    };
    assert_eq!(run("hi").status.code(), Some(0));
    let requests = server.requests();
    assert!(
        requests[0].body["messages"][0]["content"]
            .as_str()
            .is_some_and(|c| c.contains("You summarise one day"))
    );
    // The new session's prompt already carries the summary.
    assert!(
        requests[1].body["messages"][0]["content"]
            .as_str()
            .is_some_and(|c| c.contains("[Memory of 2026-01-15]"))
    );
    // Never twice for the same day: the next run goes straight to work.
    assert_eq!(run("hi again").status.code(), Some(0));
    assert_eq!(server.requests().len(), 3);
}
