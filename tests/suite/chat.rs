//! Multi-message conversation end to end: batches answered at once with several replies, the
//! splitter and its fallback, the stored batch fields, and `nop chat` on a real terminal (tmux).

use serde_json::{Value, json};

use crate::support::Repo;
use crate::support::mock::{MockServer, openai};
use crate::support::terminal::Terminal;

fn batch(repo: &Repo, server: &MockServer, messages: &[&str]) -> Value {
    let mut args = vec!["run", "--output-format", "json"];
    for m in messages {
        args.extend(["--message", m]);
    }
    repo.model_json(server, &args)
}

fn replies_json(replies: &[(&str, u64)]) -> String {
    json!({"replies": replies.iter().map(|(c, d)| json!({"content": c, "send_delay_seconds": d})).collect::<Vec<_>>()}).to_string()
}

#[test]
fn a_batch_of_three_messages_is_one_request_and_replies_keep_their_delays() {
    let repo = Repo::new();
    let server = MockServer::start(vec![openai::reply_text(&replies_json(&[
        ("Hi!", 0),
        ("Rust it is.", 2),
        ("And tests too.", 3),
    ]))]);
    let result = batch(&repo, &server, &["hello", "which language?", "also tests?"]);
    assert_eq!(result["via"], "json");
    let replies = result["replies"].as_array().expect("replies");
    let got: Vec<(String, f64, u64)> = replies
        .iter()
        .map(|r| {
            (
                r["content"].as_str().unwrap_or_default().to_string(),
                r["send_delay_seconds"].as_f64().unwrap_or(-1.0),
                r["order"].as_u64().unwrap_or(99),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("Hi!".into(), 0.0, 0),
            ("Rust it is.".into(), 2.0, 1),
            ("And tests too.".into(), 3.0, 2)
        ]
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let sent = requests[0].user_messages();
    assert_eq!(sent, vec!["hello", "which language?", "also tests?"]);
    assert!(requests[0].body.get("tools").is_none());
    // Stored: batch id and index on every message; delays and schedule on replies.
    let session = repo.session_json(result["session_id"].as_str().expect("id"));
    let batch_id = result["batch_id"].clone();
    let messages = session["messages"].as_array().expect("messages");
    let users: Vec<&Value> = messages.iter().filter(|m| m["role"] == "user").collect();
    assert_eq!(
        users
            .iter()
            .map(|m| m["batchIndex"].clone())
            .collect::<Vec<_>>(),
        vec![json!(0), json!(1), json!(2)]
    );
    assert!(users.iter().all(|m| m["batchId"] == batch_id));
    let replies: Vec<&Value> = messages
        .iter()
        .filter(|m| m["role"] == "assistant")
        .collect();
    assert_eq!(replies.len(), 3);
    assert_eq!(replies[2]["sendDelaySeconds"], 3.0);
    assert_eq!(replies[2]["actualSentAt"], Value::Null);
    let t0 =
        chrono::DateTime::parse_from_rfc3339(replies[0]["scheduledSendAt"].as_str().expect("t"))
            .expect("time");
    let t2 =
        chrono::DateTime::parse_from_rfc3339(replies[2]["scheduledSendAt"].as_str().expect("t"))
            .expect("time");
    assert_eq!(
        (t2 - t0).num_seconds(),
        3,
        "delays count from the first reply"
    );
}

#[test]
fn an_answer_that_is_not_json_goes_to_the_splitter() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_text("Hello there. Also, about your question: yes."),
        openai::reply_text(&replies_json(&[
            ("Hello there.", 0),
            ("Also, about your question: yes.", 1),
        ])),
    ]);
    let result = batch(&repo, &server, &["hi", "is it done?"]);
    assert_eq!(result["via"], "splitter");
    assert_eq!(result["replies"].as_array().map(Vec::len), Some(2));
    let split = &server.requests()[1].body;
    assert!(
        split["messages"][0]["content"]
            .as_str()
            .is_some_and(|c| c.contains("You split an assistant's answer"))
    );
    assert_eq!(
        split["messages"][1]["content"],
        "Hello there. Also, about your question: yes."
    );
}

#[test]
fn when_the_splitter_fails_twice_the_whole_answer_is_one_reply() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_text("One long answer."),
        openai::reply_text("sorry, I cannot"),
        openai::reply_text("{\"replies\": \"no\"}"),
    ]);
    let result = batch(&repo, &server, &["hi"]);
    assert_eq!(result["via"], "single");
    assert_eq!(
        result["replies"],
        json!([{"id": result["replies"][0]["id"], "content": "One long answer.", "send_delay_seconds": 0.0, "order": 0}])
    );
    assert_eq!(server.requests().len(), 3, "the splitter was tried twice");
}

#[test]
fn nop_chat_on_a_terminal_waits_counts_down_and_replies_in_several_messages() {
    let repo = Repo::new();
    let server = MockServer::start(vec![openai::reply_text(&replies_json(&[
        ("first reply", 0),
        ("second reply", 1),
    ]))]);
    let t = chat_terminal(&repo, &server, "batch", 3, "chat");
    t.type_line("hello");
    t.type_line("are you there?");
    t.wait_for("thinking…");
    let shown = t.wait_for("coder › second reply");
    let first = shown
        .find("coder › first reply")
        .expect("first reply shown");
    assert!(
        first < shown.find("coder › second reply").unwrap_or(0),
        "{shown}"
    );
    // Both lines went to the model in one request.
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let sent = requests[0].user_messages();
    assert_eq!(sent, vec!["hello", "are you there?"]);
    t.type_line("/exit");
    t.wait_for("saved; continue with");
    let session = repo.first_session();
    let replies: Vec<&Value> = session["messages"]
        .as_array()
        .expect("m")
        .iter()
        .filter(|m| m["role"] == "assistant")
        .collect();
    assert!(
        replies
            .iter()
            .all(|r| r["sent"] == true && r["actualSentAt"].is_string()),
        "{replies:#?}"
    );
}

/// `nop chat` on a terminal with a quiet period of `wait` seconds.
fn chat_terminal(repo: &Repo, server: &MockServer, tag: &str, wait: u32, args: &str) -> Terminal {
    let wait = wait.to_string();
    Terminal::start(
        repo,
        server,
        &format!("chat-{tag}"),
        args,
        &[
            ("NOP_CHAT_WAIT_MIN_S", &wait),
            ("NOP_CHAT_WAIT_MAX_S", &wait),
        ],
        "chatting with coder",
    )
}

#[test]
fn typing_during_delivery_starts_the_next_batch_and_unshown_replies_are_not_sent() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_text(&replies_json(&[("one", 0), ("two", 10)])),
        openai::reply_text(&replies_json(&[("three", 0)])),
    ]);
    let t = chat_terminal(&repo, &server, "late", 1, "chat");
    t.type_line("a");
    t.wait_for("coder › one");
    t.type_line("b");
    t.wait_for("coder › three");
    let second: Vec<String> = server.requests()[1].body["messages"]
        .as_array()
        .expect("m")
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str().map(str::to_string))
        .collect();
    assert_eq!(
        second,
        vec!["a", "b"],
        "b started a batch of its own, after a"
    );
    t.type_line("/exit");
    let s = t.wait_for("saved; continue with");
    assert!(!s.contains("coder › two"), "{s}");
    let session = repo.first_session();
    let two = session["messages"]
        .as_array()
        .expect("m")
        .iter()
        .find(|m| m["content"] == "two")
        .cloned()
        .expect("two");
    assert_eq!(
        (two["sent"].clone(), two["actualSentAt"].clone()),
        (json!(false), Value::Null)
    );
    assert_eq!(two["sendDelaySeconds"], 10.0);
    let id = session["sessionId"].as_str().expect("id");
    repo.assert_session_shape(id, "chat-batch-delivery.json");
}

#[test]
fn a_reply_whose_delivery_cannot_be_recorded_is_said_not_swallowed() {
    let repo = Repo::new();
    let server = MockServer::start(vec![openai::reply_text(&replies_json(&[
        ("one", 0),
        ("two", 2),
    ]))]);
    let t = chat_terminal(&repo, &server, "unrecorded", 1, "chat");
    t.type_line("a");
    t.wait_for("coder › one");
    // Between the two replies the session file breaks: "two" is shown, its record cannot be.
    let id = repo.first_session()["sessionId"]
        .as_str()
        .expect("id")
        .to_string();
    let file = repo.session_dir(&id).join("session.json");
    std::fs::write(&file, "{\"broken\":").expect("write");
    let s = t.wait_for("coder › two");
    let s = if s.contains("could not record") {
        s
    } else {
        t.wait_for("could not record")
    };
    assert!(
        s.contains(&format!("session {id} could not record that reply")),
        "{s}"
    );
    assert_eq!(
        std::fs::read_to_string(&file).expect("read"),
        "{\"broken\":"
    );
}

#[test]
fn a_chat_session_holds_the_run_lock_has_a_status_and_runs_the_session_hooks() {
    let repo = Repo::new();
    let config = repo.path().join(".nop/config.yml");
    let text = std::fs::read_to_string(&config).expect("config");
    let base = text.split("\nhooks:").next().expect("config").to_string();
    std::fs::write(
        &config,
        format!(
            "{base}\nhooks:\n  session-start:\n    - \"cat >> hooks.log; echo >> hooks.log\"\n  session-end:\n    - \"cat >> hooks.log; echo >> hooks.log\"\n"
        ),
    )
    .expect("write");
    repo.trust();
    // A one-shot batch: both hooks ran, and the session is idle afterwards.
    let server = MockServer::start(vec![
        openai::reply_text(&replies_json(&[("hi", 0)])),
        openai::reply_text(&replies_json(&[("first", 0)])),
    ]);
    let result = batch(&repo, &server, &["hello"]);
    let id = result["session_id"].as_str().expect("id").to_string();
    let log = std::fs::read_to_string(repo.path().join("hooks.log")).expect("hooks ran");
    let events: Vec<Value> = log
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("hook payload"))
        .collect();
    assert_eq!(events.len(), 2, "{log}");
    assert_eq!(events[0]["mode"], "chat");
    assert_eq!(events[1]["status"], "idle");
    assert_eq!(repo.session_json(&id)["status"], "idle");

    // While `nop chat` has the session open, it waits for input and nothing else may run or
    // delete it.
    let t = chat_terminal(&repo, &server, "held", 1, &format!("chat --session {id}"));
    t.type_line("again");
    t.wait_for("coder › first");
    assert_eq!(repo.session_json(&id)["status"], "waiting_input");
    let out = repo
        .nop_model(&server, "openai")
        .args(["run", "--session", &id, "--message", "me too"])
        .output()
        .expect("run");
    assert_ne!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("being run by another process"), "{stderr}");
    let out = repo
        .nop()
        .args(["sessions", "delete", &id, "--force"])
        .output()
        .expect("delete");
    assert_ne!(out.status.code(), Some(0));
    assert!(repo.session_dir(&id).exists());
    t.type_line("/exit");
    t.wait_for("saved; continue with");
    assert_eq!(repo.session_json(&id)["status"], "idle");
}

#[test]
fn a_chat_with_a_disabled_agent_is_refused_as_a_run_would_be() {
    let repo = Repo::new();
    let agents = std::fs::read_to_string(repo.path().join(".nop/agents.yml")).expect("agents");
    std::fs::write(
        repo.path().join(".nop/agents.yml"),
        format!("{agents}\n  - name: resting\n    description: off\n    enabled: false\n"),
    )
    .expect("write");
    let server = MockServer::start(vec![openai::reply_text(&replies_json(&[("hi", 0)]))]);
    let out = repo
        .nop_model(&server, "openai")
        .args(["run", "--agent", "resting", "--message", "hello"])
        .output()
        .expect("run");
    assert_ne!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("agent `resting` is disabled"), "{stderr}");
    assert_eq!(repo.run(&["sessions", "list", "--json"]).trim(), "[]");
    assert!(server.requests().is_empty());
    // A run with it is refused the same way, and the session written meanwhile is removed.
    let out = repo
        .nop_model(&server, "openai")
        .args(["run", "--agent", "resting", "hello"])
        .output()
        .expect("run");
    assert_ne!(out.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("agent `resting` is disabled"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(repo.run(&["sessions", "list", "--json"]).trim(), "[]");
    assert!(server.requests().is_empty());
}

#[test]
fn a_mention_in_a_chat_message_attaches_the_file_the_rules_let_the_agent_read() {
    let repo = Repo::new();
    std::fs::write(repo.path().join("notes.txt"), "CANARY-NOTES-1\n").expect("write");
    let server = MockServer::start(vec![openai::reply_text(&replies_json(&[("Read it.", 0)]))]);
    let out = repo
        .nop_model(&server, "openai")
        .args([
            "run",
            "--output-format",
            "json",
            "--message",
            "what does @notes.txt say?",
            "--message",
            "and @.nop/.permissions/agent-default.yml?",
        ])
        .output()
        .expect("run");
    crate::support::assert_ok(&out);
    let sent = serde_json::to_string(&server.requests()[0].body).expect("json");
    assert!(sent.contains("CANARY-NOTES-1"), "{sent}");
    assert!(
        !sent.contains("file-access"),
        "a denied file was attached: {sent}"
    );
}
