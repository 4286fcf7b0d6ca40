//! A conversation longer than `session.seal_kb`, as a user meets it: its earlier messages
//! sealed into files of their own beside session.json, and every command still reading the
//! whole conversation (the model's request, show, list, fork, check).

use pretty_assertions::assert_eq;
use serde_json::Value;

use crate::support::Repo;
use crate::support::mock::{MockServer, openai};

/// The `messages-*.json` files in session `id`'s directory, sorted.
fn sealed_files(repo: &Repo, id: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(repo.session_dir(id))
        .expect("dir")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("messages-"))
        .collect();
    names.sort();
    names
}

#[test]
fn a_long_conversation_is_sealed_and_every_command_reads_it_whole() {
    let repo = Repo::new();
    repo.run(&["config", "set", "session.seal_kb", "16"]);
    let server = MockServer::start(vec![
        openai::reply_text("Started."),
        openai::reply_text("Still here, with all of it."),
    ]);
    let out = repo.model_ok(
        &server,
        &["run", "--output-format", "json", "remember the first thing"],
    );
    let result: Value = serde_json::from_slice(&out.stdout).expect("json");
    let id = result["session_id"]
        .as_str()
        .expect("session id")
        .to_string();
    // Ten notes of 4 KB: past the 16 KB limit twice over.
    for n in 0..10 {
        let note = format!("note {n}: {}", "x".repeat(4000));
        repo.run(&["sessions", "append", &id, &note]);
    }
    let sealed = sealed_files(&repo, &id);
    assert!(!sealed.is_empty(), "nothing sealed");
    let file = repo.session_json(&id);
    let named: Vec<&str> = file["earlierMessages"]
        .as_array()
        .expect("earlierMessages")
        .iter()
        .map(|n| n["file"].as_str().expect("file"))
        .collect();
    assert_eq!(named, sealed);
    let on_disk = std::fs::metadata(repo.session_dir(&id).join("session.json"))
        .expect("session.json")
        .len();
    assert!(on_disk < 24 * 1024, "session.json is {on_disk} bytes");
    repo.assert_session_shape(&id, "sealed.json");

    // The model gets the whole conversation, the sealed part first.
    repo.model_ok(
        &server,
        &["run", "--session", &id, "--output-format", "json", "go on"],
    );
    let request = &server.requests()[1].body;
    let contents: Vec<&str> = request["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert_eq!(contents.first(), Some(&"remember the first thing"));
    assert_eq!(contents.len(), 12, "{contents:?}");
    assert_eq!(contents.last(), Some(&"go on"));

    // show, list and check see every message.
    let shown: Value =
        serde_json::from_str(&repo.run(&["sessions", "show", &id, "--json"])).expect("json");
    let messages = shown["session"]["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 15, "system, 2 asked, 2 answered, 10 notes");
    assert!(shown["session"].get("earlierMessages").is_none());
    let list: Value =
        serde_json::from_str(&repo.run(&["sessions", "list", "--json"])).expect("json");
    assert_eq!(list[0]["messages"], 15);
    assert_eq!(list[0]["title"], "remember the first thing");
    repo.run(&["sessions", "check", &id]);

    // A fork has sealed files of its own and outlives its parent.
    let child = repo.run(&["fork", &id]).trim().to_string();
    assert!(!sealed_files(&repo, &child).is_empty());
    repo.run(&["sessions", "delete", &id, "--force"]);
    let shown: Value =
        serde_json::from_str(&repo.run(&["sessions", "show", &child, "--json"])).expect("json");
    assert_eq!(
        shown["session"]["messages"].as_array().map(Vec::len),
        Some(15)
    );
    repo.run(&["sessions", "check", &child]);
}
