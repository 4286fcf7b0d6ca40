//! Multi-message conversation end to end: batches answered at once with several replies, the
//! splitter and its fallback, the stored batch fields, and `nop chat` on a real terminal (tmux).

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::Repo;
use crate::support::mock::{MockServer, openai};

fn batch(repo: &Repo, server: &MockServer, messages: &[&str]) -> Value {
    let mut cmd = repo.nop_model(server, "openai");
    cmd.args(["run", "--output-format", "json"]);
    for m in messages {
        cmd.args(["--message", m]);
    }
    let out = cmd.output().expect("run");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json")
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

/// The screen of tmux session `name`.
fn screen(name: &str) -> String {
    let out = Command::new("tmux")
        .args(["capture-pane", "-p", "-t", name])
        .output()
        .expect("tmux capture-pane");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Waits until the screen shows `text` (a condition, polled; fails after 20 s).
fn wait_for_screen(name: &str, text: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = screen(name);
        if s.contains(text) {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "`{text}` never appeared; screen:\n{s}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn nop_chat_on_a_terminal_waits_counts_down_and_replies_in_several_messages() {
    let repo = Repo::new();
    let server = MockServer::start(vec![openai::reply_text(&replies_json(&[
        ("first reply", 0),
        ("second reply", 1),
    ]))]);
    let t = Terminal::start(&repo, &server, "batch", 3);
    t.type_line("hello");
    t.type_line("are you there?");
    wait_for_screen(&t.0, "thinking…");
    let shown = wait_for_screen(&t.0, "coder › second reply");
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
    wait_for_screen(&t.0, "saved; continue with");
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

/// `nop chat` in a tmux session with a quiet period of `wait` seconds; killed when dropped.
struct Terminal(String);

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.0])
            .status();
    }
}

impl Terminal {
    fn start(repo: &Repo, server: &MockServer, tag: &str, wait: u32) -> Terminal {
        Terminal::launch(repo, server, tag, wait, "chat")
    }

    /// `nop chat --session ID`.
    fn start_on(repo: &Repo, server: &MockServer, tag: &str, wait: u32, id: &str) -> Terminal {
        Terminal::launch(repo, server, tag, wait, &format!("chat --session {id}"))
    }

    fn launch(repo: &Repo, server: &MockServer, tag: &str, wait: u32, args: &str) -> Terminal {
        let name = format!("nop-chat-{tag}-{}", std::process::id());
        let nop = assert_cmd::cargo::cargo_bin("nop");
        let env: Vec<String> = crate::support::model_env(server, "openai")
            .into_iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let command = format!(
            "cd {} && env -i HOME={} {} NOP_CHAT_WAIT_MIN_S={wait} NOP_CHAT_WAIT_MAX_S={wait} {} {args}; sleep 30",
            repo.path().display(),
            repo.path().display(),
            env.join(" "),
            nop.display()
        );
        let status = Command::new("tmux")
            .args([
                "new-session",
                "-d",
                "-x",
                "120",
                "-y",
                "30",
                "-s",
                &name,
                &command,
            ])
            .status()
            .expect("tmux");
        assert!(status.success());
        let t = Terminal(name);
        wait_for_screen(&t.0, "chatting with coder");
        t
    }

    fn type_line(&self, text: &str) {
        Command::new("tmux")
            .args(["send-keys", "-t", &self.0, text, "Enter"])
            .status()
            .expect("keys");
    }
}

#[test]
fn typing_during_delivery_starts_the_next_batch_and_unshown_replies_are_not_sent() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_text(&replies_json(&[("one", 0), ("two", 10)])),
        openai::reply_text(&replies_json(&[("three", 0)])),
    ]);
    let t = Terminal::start(&repo, &server, "late", 1);
    t.type_line("a");
    wait_for_screen(&t.0, "coder › one");
    t.type_line("b");
    wait_for_screen(&t.0, "coder › three");
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
    let s = wait_for_screen(&t.0, "saved; continue with");
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
}

#[test]
fn a_reply_whose_delivery_cannot_be_recorded_is_said_not_swallowed() {
    let repo = Repo::new();
    let server = MockServer::start(vec![openai::reply_text(&replies_json(&[
        ("one", 0),
        ("two", 2),
    ]))]);
    let t = Terminal::start(&repo, &server, "unrecorded", 1);
    t.type_line("a");
    wait_for_screen(&t.0, "coder › one");
    // Between the two replies the session file breaks: "two" is shown, its record cannot be.
    let id = repo.first_session()["sessionId"]
        .as_str()
        .expect("id")
        .to_string();
    let file = repo.session_dir(&id).join("session.json");
    std::fs::write(&file, "{\"broken\":").expect("write");
    let s = wait_for_screen(&t.0, "coder › two");
    let s = if s.contains("could not record") {
        s
    } else {
        wait_for_screen(&t.0, "could not record")
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
    let t = Terminal::start_on(&repo, &server, "held", 1, &id);
    t.type_line("again");
    wait_for_screen(&t.0, "coder › first");
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
    wait_for_screen(&t.0, "saved; continue with");
    assert_eq!(repo.session_json(&id)["status"], "idle");
}
