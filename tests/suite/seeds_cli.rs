//! Issue 14, "the seeds, to the letter": what the command line still did differently from seeds
//! 001 and 002 — `memory pop`'s result fields, reply delays counted from the first reply, memory
//! recall in chat batches, and `nop sessions delete`.

use std::fs;

use serde_json::{Value, json};

use crate::support::Repo;
use crate::support::mock::{MockServer, openai};

/// A session of `coder` created on `date` (UTC; tests run with no TZ) holding `text`.
fn session_on(repo: &Repo, date: &str, text: &str) -> String {
    let id = repo.new_session();
    repo.run(&["sessions", "append", &id, text]);
    let path = repo.session_dir(&id).join("session.json");
    let mut session: Value =
        serde_json::from_str(&fs::read_to_string(&path).expect("read")).expect("json");
    session["createdAt"] = json!(format!("{date}T10:00:00Z"));
    fs::write(&path, serde_json::to_string_pretty(&session).expect("json")).expect("write");
    id
}

/// The summarizer's answer for a day whose summary is `summary`.
fn summary_reply(summary: &str, keywords: &[&str]) -> String {
    json!({
        "summary": summary,
        "topics": keywords,
        "keyPoints": [format!("{summary} (key point)")],
        "keywords": keywords,
    })
    .to_string()
}

/// `nop memory summarize --date DATE --json` against `server`; the stored entry.
fn summarize(repo: &Repo, server: &MockServer, date: &str) -> Value {
    let out = repo
        .nop_model(server, "openai")
        .args(["memory", "summarize", "--date", date, "--json"])
        .output()
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json")
}

/// Seed 001 §3.1: removing the latest summary answers `remaining_count` and
/// `current_prompt_preview` (with `success` and `deleted_summary_date`), in JSON and in text.
#[test]
fn memory_pop_reports_remaining_count_and_current_prompt_preview() {
    let repo = Repo::new();
    session_on(&repo, "2026-01-14", "the lexer drops unicode escapes");
    session_on(&repo, "2026-01-15", "the parser chokes on nested arrays");
    let server = MockServer::start(vec![
        openai::reply_text(&summary_reply(
            "Taught the lexer unicode escapes.",
            &["lexer"],
        )),
        openai::reply_text(&summary_reply(
            "Fixed nested arrays in the parser.",
            &["parser"],
        )),
    ]);
    summarize(&repo, &server, "2026-01-14");
    let latest = summarize(&repo, &server, "2026-01-15");

    let popped: Value =
        serde_json::from_str(&repo.run(&["memory", "pop", "--json"])).expect("json");
    assert_eq!(popped["id"], latest["id"]);
    assert_eq!(popped["success"], true);
    assert_eq!(popped["deleted_summary_date"], "2026-01-15");
    assert_eq!(popped["remaining_count"], 1);
    // The prompt now ends with the summary that remains, and no longer holds the removed one.
    let preview = popped["current_prompt_preview"].as_str().expect("preview");
    assert!(
        preview.ends_with("[Memory of 2026-01-14] Taught the lexer unicode escapes."),
        "{preview}"
    );
    assert!(!preview.contains("nested arrays"), "{preview}");
    assert!(preview.chars().count() <= 201, "a preview, not the prompt");
    let show: Value = serde_json::from_str(&repo.run(&["memory", "show", "--json"])).expect("json");
    let prompt = show["currentPrompt"].as_str().expect("prompt");
    assert!(prompt.ends_with(preview.trim_start_matches('…')));

    // Text: the same two facts. The last removal leaves the initial prompt alone.
    let text = repo.run(&["memory", "pop"]);
    assert!(
        text.contains("no summary remains: the prompt is the initial prompt"),
        "{text}"
    );
    let initial_end: String = {
        let show: Value =
            serde_json::from_str(&repo.run(&["memory", "show", "--json"])).expect("json");
        let prompt = show["currentPrompt"].as_str().expect("prompt").trim_end();
        let n = prompt.chars().count();
        prompt.chars().skip(n.saturating_sub(40)).collect()
    };
    assert!(text.trim_end().ends_with(&initial_end), "{text}");
    assert!(!text.contains("[Memory of"), "{text}");
}
