//! Issue 14, "the seeds, to the letter": what the command line still did differently from seeds
//! 001 and 002 — `memory pop`'s result fields, reply delays counted from the first reply, memory
//! recall in chat batches, and `nop sessions delete`.

use std::fs;

use serde_json::{Value, json};

use crate::support::Repo;
use crate::support::mock::{MockServer, openai};

/// A session of `coder` created on `date` (UTC; tests run with no TZ) holding `text`.
fn session_on(repo: &Repo, date: &str, text: &str) -> String {
    repo.session()
        .user(text)
        .created_at(&format!("{date}T10:00:00Z"))
        .write()
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
    repo.model_json(server, &["memory", "summarize", "--date", date, "--json"])
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

/// `scheduledSendAt` of each reply stored in session `id`, in seconds after the first reply's,
/// with its `sendDelaySeconds`.
fn stored_schedule(repo: &Repo, id: &str) -> Vec<(f64, f64)> {
    let session = repo.session_json(id);
    let replies: Vec<&Value> = session["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "assistant")
        .collect();
    let at = |m: &Value| {
        chrono::DateTime::parse_from_rfc3339(m["scheduledSendAt"].as_str().expect("scheduled"))
            .expect("time")
    };
    let first = at(replies[0]);
    replies
        .iter()
        .map(|m| {
            (
                (at(m) - first).num_milliseconds() as f64 / 1000.0,
                m["sendDelaySeconds"].as_f64().expect("delay"),
            )
        })
        .collect()
}

/// Seed 001 §2.2.2/§2.2.5: `send_delay_seconds` counts from the first reply (从第一条回复开始计算):
/// delays 0, 2 and 3 put the replies 0, 2 and 3 s after the first, not 0, 2 and 5. A smaller delay
/// after a larger one keeps the replies in order.
#[test]
fn reply_delays_count_from_the_first_reply() {
    let repo = Repo::new();
    let replies = json!({"replies": [
        {"content": "Hi!", "send_delay_seconds": 0},
        {"content": "Rust it is.", "send_delay_seconds": 2},
        {"content": "And tests too.", "send_delay_seconds": 3},
        {"content": "One more thing.", "send_delay_seconds": 1},
    ]});
    let server = MockServer::start(vec![openai::reply_text(&replies.to_string())]);
    let out = repo.model_ok(
        &server,
        &[
            "run",
            "--output-format",
            "json",
            "--message",
            "hello",
            "--message",
            "which language?",
        ],
    );
    let result: Value = serde_json::from_slice(&out.stdout).expect("json");
    let id = result["session_id"].as_str().expect("id");
    assert_eq!(
        stored_schedule(&repo, id),
        vec![(0.0, 0.0), (2.0, 2.0), (3.0, 3.0), (3.0, 3.0)]
    );
    let delays: Vec<f64> = result["replies"]
        .as_array()
        .expect("replies")
        .iter()
        .map(|r| r["send_delay_seconds"].as_f64().expect("delay"))
        .collect();
    assert_eq!(delays, vec![0.0, 2.0, 3.0, 3.0]);
    // The model is told how the delays count.
    let instruction = server.requests()[0].body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(
        instruction.contains("after the first reply"),
        "{instruction}"
    );
}

/// Seed 001 §2.3.5 in chat mode: a history question in a batch ("昨天我们聊了什么？") pulls the
/// matching memory into the request, as `nop run` does, and the session records it; a batch
/// without one does not.
#[test]
fn a_history_question_in_a_chat_batch_recalls_memory() {
    let repo = Repo::new();
    // A session exactly a day ago: yesterday wherever the clock's time zone is.
    let yesterday = chrono::Utc::now() - chrono::Duration::days(1);
    repo.session()
        .user("the parser chokes on nested arrays")
        .created_at(&yesterday.to_rfc3339())
        .write();
    let replies = |text: &str| json!({"replies": [{"content": text, "send_delay_seconds": 0}]});
    let server = MockServer::start(vec![
        openai::reply_text(&summary_reply(
            "Fixed nested arrays in the parser.",
            &["parser"],
        )),
        openai::reply_text(&replies("我们修了解析器的嵌套数组。").to_string()),
        openai::reply_text(&replies("好的").to_string()),
    ]);
    let entry = summarize(&repo, &server, "yesterday");

    let batch = |args: &[&str]| -> Value {
        let mut all = vec!["run", "--output-format", "json"];
        all.extend_from_slice(args);
        serde_json::from_slice(&repo.model_ok(&server, &all).stdout).expect("json")
    };
    let result = batch(&["--message", "在吗", "--message", "昨天我们聊了什么？"]);
    let messages = server.requests()[1].body["messages"]
        .as_array()
        .expect("messages")
        .clone();
    // The recalled entry comes just before the batch, with what only the index holds (its key
    // points): the system prompt's "[Memory of …]" line alone is not recall.
    let recalled = messages
        .iter()
        .position(|m| {
            m["role"] == "system"
                && m["content"].as_str().is_some_and(|c| {
                    c.starts_with("[Relevant memory")
                        && c.contains("Fixed nested arrays in the parser. (key point)")
                })
        })
        .unwrap_or_else(|| panic!("no memory recalled: {messages:#?}"));
    assert_eq!(messages[recalled + 1]["content"], "在吗");
    assert_eq!(messages[recalled + 2]["content"], "昨天我们聊了什么？");
    // Recorded in the session with the entry ids and the batch.
    let chat = result["session_id"].as_str().expect("id").to_string();
    let stored = repo.session_json(&chat);
    let recall: Vec<&Value> = stored["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m.get("memoryRecall").is_some())
        .collect();
    assert_eq!(recall.len(), 1);
    assert_eq!(recall[0]["memoryRecall"], json!([entry["id"]]));
    assert_eq!(recall[0]["batchId"], result["batch_id"]);

    // The next batch asks nothing about the past: nothing more is recalled.
    batch(&["--session", &chat, "--message", "谢谢"]);
    let last = &server.requests()[2].body["messages"];
    let recalls = last
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| {
            m["content"]
                .as_str()
                .is_some_and(|c| c.starts_with("[Relevant memory"))
        })
        .count();
    assert_eq!(
        recalls, 1,
        "only the first batch's recall, from its history"
    );
    repo.assert_session_shape(&chat, "chat-memory-recall.json");
}

/// Entries of the sessions directory whose name starts with `.tmp-`.
fn temporaries(repo: &Repo) -> Vec<String> {
    fs::read_dir(repo.sessions_dir())
        .expect("sessions dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".tmp-"))
        .collect()
}

/// Seed 002 §8.1 (删除操作需要先检查引用关系) and §7.2–7.3: `nop sessions delete` refuses a session
/// that forks or subagents refer to, listing them; `--force` deletes it anyway and its forks stay
/// whole (they still load, check clean and fork again from their snapshot); ids are prefixes.
#[test]
fn sessions_delete_checks_references_and_force_keeps_forks_whole() {
    let repo = Repo::new();
    let parent = repo
        .session()
        .user("the parser chokes on nested arrays")
        .write();
    let fork = repo.run(&["fork", &parent]).trim().to_string();
    // A fork made before forks kept their own snapshot copy: nothing but the parent holds it.
    let old_fork = repo.run(&["fork", &parent]).trim().to_string();
    let snapshot = repo.session_json(&old_fork)["parentSession"]["snapshotId"]
        .as_str()
        .expect("snapshot")
        .to_string();
    let own_copy = repo
        .session_dir(&old_fork)
        .join(format!("history-{snapshot}.json"));
    fs::remove_file(&own_copy).expect("remove the fork's copy");
    let subagent = repo.session().called_by(&parent).write();
    let lonely = repo.new_session();

    // Referred to: refused (exit 1), naming every referring session and how it refers.
    let prefix = &parent[..parent.len() - 2];
    let out = repo
        .nop()
        .args(["sessions", "delete", prefix, "--json"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for id in [&fork, &old_fork, &subagent] {
        assert!(stderr.contains(id.as_str()), "{stderr}");
    }
    assert!(stderr.contains("--force"), "{stderr}");
    assert!(stderr.contains("a subagent it called"), "{stderr}");
    let refused: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(refused["deleted"], false);
    let mut kinds: Vec<(String, String)> = refused["referencedBy"]
        .as_array()
        .expect("references")
        .iter()
        .map(|r| {
            (
                r["id"].as_str().unwrap_or_default().to_string(),
                r["kind"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    kinds.sort();
    let mut expected = vec![
        (fork.clone(), "fork".to_string()),
        (old_fork.clone(), "fork".to_string()),
        (subagent.clone(), "subagent".to_string()),
    ];
    expected.sort();
    assert_eq!(kinds, expected);
    assert!(repo.session_dir(&parent).join("session.json").is_file());

    // Nothing refers to it: deleted.
    let gone: Value =
        serde_json::from_str(&repo.run(&["sessions", "delete", &lonely, "--json"])).expect("json");
    assert_eq!(
        gone,
        json!({"id": lonely, "deleted": true, "referencedBy": []})
    );
    assert!(!repo.session_dir(&lonely).exists());

    // Forced: deleted, the referring sessions said, and nothing broken.
    let text = repo.run(&["sessions", "delete", &parent, "--force"]);
    assert!(text.starts_with(&format!("deleted {parent}")), "{text}");
    assert!(
        text.contains(&format!("{old_fork} (forked from it")),
        "{text}"
    );
    assert!(!repo.session_dir(&parent).exists());
    assert_eq!(temporaries(&repo), Vec::<String>::new());
    let list: Value =
        serde_json::from_str(&repo.run(&["sessions", "list", "--json", "--all"])).expect("json");
    let mut ids: Vec<&str> = list
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    ids.sort();
    let mut left = vec![fork.as_str(), old_fork.as_str(), subagent.as_str()];
    left.sort();
    assert_eq!(ids, left);
    let check = repo.run(&["sessions", "check"]);
    assert!(!check.contains("problem"), "{check}");
    // The old fork got its own copy of its snapshot before the parent went.
    assert!(own_copy.is_file());
    for child in [&fork, &old_fork] {
        let shown = repo.run(&["sessions", "show", child]);
        assert!(shown.contains("nested arrays"), "{shown}");
        let from = repo.session_json(child)["parentSession"]["snapshotId"].clone();
        repo.run(&[
            "fork",
            child,
            "--snapshot",
            from.as_str().expect("snapshot"),
        ]);
    }
    // An unknown id is an error naming it.
    let err = repo.fail(&["sessions", "delete", &parent]);
    assert!(
        err.contains(&format!("no session matches `{parent}`")),
        "{err}"
    );
}

/// Deleting takes the session's write lock: a holder in another process makes it fail with the
/// holder's pid, and a session a process is running is refused. Either way nothing is lost.
#[test]
fn sessions_delete_refuses_a_session_held_or_running_elsewhere() {
    use std::sync::mpsc;
    let repo = Repo::new();
    let id = repo.new_session();
    let store = repo.store();
    let (held_tx, held_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let holder = {
        let id = id.clone();
        std::thread::spawn(move || {
            store
                .update(&id, chrono::Utc::now(), |_| {
                    held_tx.send(()).expect("send");
                    release_rx.recv().expect("release");
                    Ok(())
                })
                .expect("update")
        })
    };
    held_rx.recv().expect("the lock is held");
    let err = repo.fail(&[
        "--set",
        "session.lock_timeout_s=0.3",
        "sessions",
        "delete",
        &id,
    ]);
    assert!(
        err.contains(&format!("held by pid {}", std::process::id())),
        "{err}"
    );
    release_tx.send(()).expect("release");
    holder.join().expect("holder");
    assert!(repo.session_dir(&id).join("session.json").is_file());

    // A process runs it (it holds the session's run lock): refused, even with --force.
    let guard = nop::queue::RunGuard::try_acquire(&repo.session_dir(&id))
        .expect("run lock")
        .expect("free");
    let err = repo.fail(&["sessions", "delete", &id, "--force"]);
    assert!(err.contains("is being run by another process"), "{err}");
    drop(guard);
    assert!(repo.session_dir(&id).join("session.json").is_file());
    repo.run(&["sessions", "delete", &id]);
    assert!(!repo.session_dir(&id).exists());
}

/// A delete cut short after its rename (the process killed while removing the directory)
/// leaves a `.tmp-*` entry, never a half session: `sessions list` and `check` are clean, and
/// the next write of any nop process removes it.
#[test]
fn a_delete_cut_short_leaves_no_half_session() {
    let repo = Repo::new();
    let id = repo.session().user("hello").write();
    // As `Store::delete` leaves it when killed between the rename and the end of the removal.
    let renamed = repo.sessions_dir().join(format!(".tmp-deleted-{id}-x"));
    fs::rename(repo.session_dir(&id), &renamed).expect("rename");
    fs::remove_file(renamed.join("plan.xml")).expect("half removed");
    let list = repo.nop().args(["sessions", "list"]).output().expect("run");
    assert_eq!(list.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&list.stderr).is_empty());
    repo.run(&["sessions", "check"]);
    repo.new_session();
    assert_eq!(temporaries(&repo), Vec::<String>::new());
}
