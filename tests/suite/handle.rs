//! The session handle in process (like Codex's `core/tests/common`): the library's runtime, the
//! mock model on 127.0.0.1, and the handle's events, with no nop process in between. Fast tests
//! of the turn loop, cancellation, approvals and queue injection.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use chrono::Utc;
use serde_json::{Value, json};

use nop::agent::{Op, RunRequest, Runtime, SessionHandle};
use nop::permissions::{ApprovalAnswer, ApprovalMode, Approver};
use nop::protocol::events::{Event, FileChange, RunStatus};
use nop::workspace::Workspace;

use crate::support::mock::{MockResponse, MockServer, RecordedRequest, openai};
use crate::support::{Repo, model_env};

/// The in-process environment of the user's record of what they trust
/// (`crate::support::in_process_env`), with the repository trusted as the test left it: what
/// `nop init` wrote and what the test wrote by hand, as `nop trust --yes` would (`nop init`
/// recorded its trust in the state directory of the nop processes, not in this process's).
/// Called before anything else of the library's, once the test has written its files.
fn trusted(repo: &Repo) -> std::collections::BTreeMap<String, String> {
    let env = crate::support::in_process_env();
    let root = repo.path().canonicalize().expect("root");
    nop::trust::accept_all(&root, &[], &env).unwrap();
    env
}

/// A runtime on `repo` speaking to `server`, and the approval questions when `ask` is set.
fn runtime(
    repo: &Repo,
    server: &MockServer,
    ask: Option<ApprovalMode>,
) -> (
    Runtime,
    Option<tokio::sync::mpsc::UnboundedReceiver<nop::permissions::ApprovalRequest>>,
) {
    let mut env = trusted(repo);
    env.extend(model_env(server, "openai"));
    let ws = Workspace::discover(repo.path(), None).expect("workspace");
    let resolved = ws
        .config(None, None, env.clone(), Vec::new())
        .expect("config");
    let (approver, questions) = match ask {
        Some(mode) => {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            (Approver::interactive(mode, tx), Some(rx))
        }
        None => (Approver::headless(ApprovalMode::OnRequest, false), None),
    };
    (
        Runtime::new(ws, resolved.config, env, approver, "tester".into()),
        questions,
    )
}

fn prompt(text: &str) -> RunRequest {
    RunRequest {
        session: None,
        agent: None,
        input: Some(text.to_string()),
        max_turns: None,
        emergency: false,
        guard: None,
        goal: None,
    }
}

/// Every event up to the end, by type name.
async fn drain(session: &mut SessionHandle) -> Vec<Event> {
    let mut events = Vec::new();
    while let Some(event) = tokio::time::timeout(Duration::from_secs(30), session.next_event())
        .await
        .expect("an event within 30 s")
    {
        events.push(event);
    }
    events
}

fn kinds(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| serde_json::to_value(e).ok())
        .filter_map(|v| v["type"].as_str().map(str::to_string))
        .filter(|k| k != "text")
        .collect()
}

/// A request matcher: the request whose last message is from `role` and contains `text`.
fn last_message_contains(request: &RecordedRequest, role: &str, text: &str) -> bool {
    request.body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .is_some_and(|m| {
            m["role"] == role && m["content"].as_str().is_some_and(|c| c.contains(text))
        })
}

#[tokio::test(flavor = "multi_thread")]
async fn the_turn_loop_runs_a_tool_and_answers_through_the_handle() {
    let repo = Repo::new();
    std::fs::write(repo.path().join("notes.txt"), "the answer is 42\n").expect("write");
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("c1", "read-file", json!({"path": "notes.txt"}))]),
        openai::reply_text("It is 42."),
    ]);
    let (rt, _) = runtime(&repo, &server, None);
    let mut session = SessionHandle::start(rt, None, prompt("what is the answer?"));
    let events = drain(&mut session).await;
    assert_eq!(
        kinds(&events),
        vec![
            "session_started",
            "turn_started",
            "usage",
            "tool_call",
            "tool_result",
            "turn_started",
            "usage",
            "result"
        ]
    );
    let outcome = session.finish().await.expect("outcome");
    assert_eq!(outcome.status, RunStatus::Completed);
    assert_eq!(outcome.final_message, "It is 42.");
    let result = server.result_of("c1");
    assert!(result.contains("the answer is 42"), "{result}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_interrupt_ends_a_stalled_model_request_and_keeps_the_session() {
    let repo = Repo::new();
    let server = MockServer::start(vec![MockResponse::Stall {
        chunks: vec![openai::text("thinking")],
        hold: Duration::from_secs(60),
    }]);
    let (rt, _) = runtime(&repo, &server, None);
    let mut session = SessionHandle::start(rt, None, prompt("take your time"));
    // Interrupt once the model has begun answering.
    loop {
        match session.next_event().await.expect("events") {
            Event::Text { .. } => break,
            _ => continue,
        }
    }
    session.submit(Op::Interrupt);
    let rest = drain(&mut session).await;
    assert!(matches!(rest.last(), Some(Event::Result(_))), "{rest:?}");
    let outcome = session.finish().await.expect("outcome");
    assert_eq!(outcome.status, RunStatus::Cancelled);
    assert_eq!(
        repo.session_json(&outcome.session_id)["status"],
        "cancelled"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn approvals_are_events_answered_with_an_op() {
    let instead = ApprovalAnswer::Instead("put it in notes.md".into());
    for (answer, written) in [
        (ApprovalAnswer::Once, true),
        (ApprovalAnswer::No, false),
        (instead, false),
    ] {
        let repo = Repo::new();
        let server = MockServer::start(vec![
            openai::reply_tool_calls(&[(
                "c1",
                "write-file",
                json!({"path": "out.txt", "content": "hello"}),
            )]),
            openai::reply_text("done"),
        ]);
        let (rt, questions) = runtime(&repo, &server, Some(ApprovalMode::Always));
        let mut session = SessionHandle::start(
            rt,
            questions.map(nop::agent::handle::approvals),
            prompt("write it"),
        );
        let mut asked = 0;
        while let Some(event) = session.next_event().await {
            if let Event::ApprovalRequested {
                id, tool, detail, ..
            } = &event
            {
                asked += 1;
                assert_eq!((tool.as_str(), detail.as_str()), ("write-file", "out.txt"));
                let answer = answer.clone();
                session.submit(Op::Approval { id: *id, answer });
            }
        }
        assert_eq!(asked, 1);
        // "No, do this instead": the model reads the instruction as the call's result.
        if let ApprovalAnswer::Instead(text) = &answer {
            let result = server.result_of("c1");
            assert!(result.contains(text.as_str()), "{result}");
        }
        let outcome = session.finish().await.expect("outcome");
        assert_eq!(outcome.status, RunStatus::Completed);
        assert_eq!(repo.path().join("out.txt").exists(), written, "{answer:?}");
        assert_eq!(outcome.permission_denials.is_empty(), written);
    }
}

/// Runs `calls` (one model reply) under `--approval always`, answering each question with the
/// next of `answers`; returns the questions (tool, detail, scope, preview), the tool results
/// the model read (in the order of `calls`), and the outcome.
async fn approving(
    repo: &Repo,
    calls: &[(&str, &str, Value)],
    answers: Vec<ApprovalAnswer>,
) -> (
    Vec<(String, String, String, Option<FileChange>)>,
    Vec<String>,
    nop::protocol::events::RunOutcome,
) {
    let server = MockServer::start(vec![
        openai::reply_tool_calls(calls),
        openai::reply_text("done"),
    ]);
    let (rt, questions) = runtime(repo, &server, Some(ApprovalMode::Always));
    let mut session = SessionHandle::start(
        rt,
        questions.map(nop::agent::handle::approvals),
        prompt("go"),
    );
    let mut answers = answers.into_iter();
    let mut asked = Vec::new();
    drain_answering(&mut session, |event| match event {
        Event::ApprovalRequested {
            tool,
            detail,
            scope,
            preview,
            ..
        } => {
            asked.push((tool.clone(), detail.clone(), scope.clone(), preview.clone()));
            Some(answers.next().unwrap_or(ApprovalAnswer::No))
        }
        _ => None,
    })
    .await;
    let ids: Vec<&str> = calls.iter().map(|(id, _, _)| *id).collect();
    let results = server.results_of(&ids);
    let outcome = session.finish().await.expect("outcome");
    (asked, results, outcome)
}

/// Every event up to the end; `answer` answers the approval questions among them.
async fn drain_answering(
    session: &mut SessionHandle,
    mut answer: impl FnMut(&Event) -> Option<ApprovalAnswer>,
) -> Vec<Event> {
    let mut events = Vec::new();
    while let Some(event) = tokio::time::timeout(Duration::from_secs(30), session.next_event())
        .await
        .expect("an event within 30 s")
    {
        if let (Event::ApprovalRequested { id, .. }, Some(reply)) = (&event, answer(&event)) {
            session.submit(Op::Approval {
                id: *id,
                answer: reply,
            });
        }
        events.push(event);
    }
    events
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approval_shows_the_diff_and_what_always_covers() {
    let repo = Repo::new();
    std::fs::create_dir_all(repo.path().join("src")).expect("mkdir");
    std::fs::write(repo.path().join("src/notes.txt"), "one\ntwo\nthree\n").expect("write");
    let (asked, results, outcome) = approving(
        &repo,
        &[
            (
                "c1",
                "edit-file",
                json!({"path": "src/notes.txt", "old_string": "two", "new_string": "TWO"}),
            ),
            // Under src/ as well: covered by the "always" for the edit, not asked.
            (
                "c2",
                "write-file",
                json!({"path": "src/new.txt", "content": "new\n"}),
            ),
            // Elsewhere: asked, a new file's preview has no "before".
            (
                "c3",
                "write-file",
                json!({"path": "docs/guide.md", "content": "# Guide\n"}),
            ),
        ],
        vec![ApprovalAnswer::Always, ApprovalAnswer::Once],
    )
    .await;
    assert_eq!(
        asked,
        vec![
            (
                "edit-file".to_string(),
                "src/notes.txt".to_string(),
                "writing files under src/".to_string(),
                Some(FileChange {
                    path: "src/notes.txt".into(),
                    before: Some("one\ntwo\nthree\n".into()),
                    after: "one\nTWO\nthree\n".into(),
                })
            ),
            (
                "write-file".to_string(),
                "docs/guide.md".to_string(),
                "writing files under docs/".to_string(),
                Some(FileChange {
                    path: "docs/guide.md".into(),
                    before: None,
                    after: "# Guide\n".into(),
                })
            ),
        ]
    );
    assert_eq!(outcome.status, RunStatus::Completed);
    assert!(outcome.permission_denials.is_empty(), "{results:?}");
    let read = |p: &str| std::fs::read_to_string(repo.path().join(p)).expect("read");
    assert_eq!(read("src/notes.txt"), "one\nTWO\nthree\n");
    assert_eq!(read("src/new.txt"), "new\n");
    assert_eq!(read("docs/guide.md"), "# Guide\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn always_for_a_command_covers_its_prefix_and_nothing_else() {
    let repo = Repo::new();
    std::fs::create_dir_all(repo.path().join("src")).expect("mkdir");
    let (asked, results, outcome) = approving(
        &repo,
        &[
            ("c1", "shell", json!({"command": "ls -la"})),
            ("c2", "shell", json!({"command": "ls src"})),
            ("c3", "shell", json!({"command": "ls; echo pwned"})),
            ("c4", "shell", json!({"command": "echo ls"})),
            ("c5", "shell", json!({"command": "lsblk"})),
        ],
        vec![ApprovalAnswer::Always],
    )
    .await;
    let asked: Vec<(&str, &str)> = asked
        .iter()
        .map(|(_, detail, scope, _)| (detail.as_str(), scope.as_str()))
        .collect();
    assert_eq!(
        asked,
        vec![
            ("ls -la", "\"ls …\" commands"),
            ("ls; echo pwned", "this exact command"),
            ("echo ls", "\"echo ls …\" commands"),
            ("lsblk", "\"lsblk …\" commands"),
        ]
    );
    assert_eq!(outcome.status, RunStatus::Completed);
    assert_eq!(results.len(), 5, "{results:?}");
    for refused in &results[2..] {
        assert!(refused.contains("the user said no"), "{refused}");
    }
    for ran in &results[..2] {
        assert!(!ran.contains("approval"), "{ran}");
    }
    assert_eq!(outcome.permission_denials.len(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_queued_during_a_run_enters_at_the_next_checkpoint() {
    let repo = Repo::new();
    std::fs::write(repo.path().join("a.txt"), "a\n").expect("write");
    let calls = Arc::new(AtomicUsize::new(0));
    let sessions = repo.sessions_dir();
    let seen = Arc::clone(&calls);
    let server = MockServer::start_with(Box::new(move |request| {
        match seen.fetch_add(1, Ordering::SeqCst) {
            0 => {
                // While the model "thinks", the user sends a high-priority message.
                let id = std::fs::read_dir(&sessions)
                    .expect("sessions")
                    .filter_map(Result::ok)
                    .map(|e| e.path())
                    .find(|p| p.join("session.json").exists())
                    .expect("the session");
                nop::queue::Inbox::new(&id)
                    .push(&nop::queue::QueuedMessage {
                        id: "m1".into(),
                        text: "also check b.txt".into(),
                        priority: nop::queue::QueuePriority::High,
                        session_key: "cli:test:tester".into(),
                        queued_at: Utc::now(),
                        stop: false,
                    })
                    .expect("queue");
                openai::reply_tool_calls(&[("c1", "read-file", json!({"path": "a.txt"}))])
            }
            _ if last_message_contains(request, "user", "also check b.txt") => {
                openai::reply_text("checked both")
            }
            _ => openai::reply_text("the message never arrived"),
        }
    }));
    let (rt, _) = runtime(&repo, &server, None);
    let mut session = SessionHandle::start(rt, None, prompt("check a.txt"));
    let events = drain(&mut session).await;
    assert!(
        kinds(&events).contains(&"messages_injected".to_string()),
        "{:?}",
        kinds(&events)
    );
    let outcome = session.finish().await.expect("outcome");
    assert_eq!(outcome.final_message, "checked both");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn op_queue_hands_a_message_to_the_running_session() {
    let repo = Repo::new();
    std::fs::write(repo.path().join("a.txt"), "a\n").expect("write");
    let sessions = repo.sessions_dir();
    let server = MockServer::start_with(Box::new(move |request| {
        if last_message_contains(request, "user", "also say hello") {
            return openai::reply_text("hello, and done");
        }
        if last_message_contains(request, "tool", "a") {
            return openai::reply_text("the message never arrived");
        }
        // The first request: answer once the message typed meanwhile is in the queue.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            let queued = std::fs::read_dir(&sessions)
                .into_iter()
                .flatten()
                .filter_map(Result::ok)
                .any(|e| {
                    std::fs::read_dir(e.path().join("inbox"))
                        .is_ok_and(|mut d| d.any(|f| f.is_ok_and(|f| f.path().is_file())))
                });
            if queued {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        openai::reply_tool_calls(&[("c1", "read-file", json!({"path": "a.txt"}))])
    }));
    let (rt, _) = runtime(&repo, &server, None);
    let mut session = SessionHandle::start(rt, None, prompt("read a.txt"));
    let mut events = Vec::new();
    while let Some(event) = session.next_event().await {
        if matches!(event, Event::TurnStarted { turn: 1 }) {
            session.submit(Op::Queue {
                text: "also say hello".into(),
                priority: nop::queue::QueuePriority::High,
            });
        }
        events.push(event);
    }
    let queued = events
        .iter()
        .find_map(|e| match e {
            Event::Queued { position, stop, .. } => Some((*position, *stop)),
            _ => None,
        })
        .expect("a queued event");
    assert_eq!(queued, (1, false));
    assert!(kinds(&events).contains(&"messages_injected".to_string()));
    let outcome = session.finish().await.expect("outcome");
    assert_eq!(outcome.final_message, "hello, and done");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_interrupt_while_a_call_waits_for_approval_refuses_it_and_ends_the_run() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[(
            "c1",
            "write-file",
            json!({"path": "out.txt", "content": "hello"}),
        )]),
        openai::reply_text("should not be asked"),
    ]);
    let (rt, questions) = runtime(&repo, &server, Some(ApprovalMode::Always));
    let mut session = SessionHandle::start(
        rt,
        questions.map(nop::agent::handle::approvals),
        prompt("write it"),
    );
    // The person never answers; they press Ctrl-C instead.
    loop {
        if let Event::ApprovalRequested { .. } = session.next_event().await.expect("events") {
            break;
        }
    }
    session.submit(Op::Interrupt);
    drain(&mut session).await;
    let outcome = session.finish().await.expect("outcome");
    assert_eq!(outcome.status, RunStatus::Cancelled);
    assert!(!repo.path().join("out.txt").exists());
    assert_eq!(server.requests().len(), 1);
}

/// Events up to the next `idle` (included).
async fn until_idle(session: &mut SessionHandle) -> Vec<Event> {
    let mut events = Vec::new();
    loop {
        let event = tokio::time::timeout(Duration::from_secs(30), session.next_event())
            .await
            .expect("an event within 30 s")
            .expect("the handle is still open");
        let idle = matches!(event, Event::Idle { .. });
        events.push(event);
        if idle {
            return events;
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_open_handle_runs_each_input_on_one_session_and_compacts_on_request() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_text("first answer"),
        openai::reply_text("second answer"),
        openai::reply_text("the gist"),
    ]);
    let mut env = trusted(&repo);
    env.extend(model_env(&server, "openai"));
    let ws = Workspace::discover(repo.path(), None).expect("workspace");
    env.insert("NOP_COMPACTION_KEEP_LAST".into(), "1".into());
    let config = ws
        .config(None, None, env.clone(), Vec::new())
        .expect("config")
        .config;
    let approver = Approver::headless(ApprovalMode::OnRequest, false);
    let rt = Runtime::new(ws, config, env, approver, "tester".into());
    let mut session = SessionHandle::open(rt, None, nop::agent::Open::default());
    session.submit(Op::Compact);
    let nothing = until_idle(&mut session).await;
    assert_eq!(kinds(&nothing), vec!["warning", "idle"], "{nothing:?}");
    session.submit(Op::UserInput { text: "one".into() });
    let first = until_idle(&mut session).await;
    assert_eq!(
        kinds(&first),
        vec!["session_started", "turn_started", "usage", "result", "idle"]
    );
    let Some(Event::Idle {
        session_id: Some(id),
    }) = first.last()
    else {
        panic!("{first:?}")
    };
    session.submit(Op::UserInput { text: "two".into() });
    let second = until_idle(&mut session).await;
    let Some(Event::SessionStarted {
        session_id,
        resumed,
        ..
    }) = second.first()
    else {
        panic!("{second:?}")
    };
    assert_eq!((session_id, *resumed), (id, true));
    // Nothing runs now: a stop has nothing to stop, a compaction runs at once.
    session.submit(Op::Stop);
    session.submit(Op::Compact);
    let compacted = until_idle(&mut session).await;
    assert_eq!(
        kinds(&compacted),
        vec!["warning", "compacted", "idle"],
        "{compacted:?}"
    );
    session.submit(Op::Shutdown);
    assert!(session.next_event().await.is_none());
    let outcome = session.finish().await.expect("the last run's outcome");
    assert_eq!(outcome.final_message, "second answer");
    let stored = repo.session_json(id);
    assert_eq!(stored["compressions"].as_array().map(Vec::len), Some(1));
    // The second prompt's request carries the whole conversation of the session.
    let requests = server.requests();
    let second = requests
        .iter()
        .find(|r| last_message_contains(r, "user", "two"))
        .expect("a request for the second prompt");
    assert_eq!(second.user_messages(), vec!["one", "two"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_chat_handle_answers_a_batch_sends_replies_when_due_and_records_what_was_not_sent() {
    let repo = Repo::new();
    let replies = json!({"replies": [
        {"content": "right away", "send_delay_seconds": 0},
        {"content": "much later", "send_delay_seconds": 60},
    ]});
    let server = MockServer::start(vec![openai::reply_text(&replies.to_string())]);
    let (rt, _) = runtime(&repo, &server, None);
    let quiet = nop::agent::Quiet::default();
    let (id, mut chat) = nop::agent::ChatHandle::chat(&rt, None, "coder", quiet)
        .await
        .expect("a chat");
    chat.submit(Op::UserInput {
        text: "hello".into(),
    });
    let mut seen = Vec::new();
    while !seen.iter().any(|e| matches!(e, Event::Reply { .. })) {
        let event = tokio::time::timeout(Duration::from_secs(30), chat.next_event())
            .await
            .expect("an event within 30 s")
            .expect("the chat is open");
        seen.push(event);
    }
    assert_eq!(
        kinds(&seen),
        vec!["batch_waiting", "batch_answered", "reply"]
    );
    let Some(Event::Reply { content, .. }) = seen.last() else {
        unreachable!()
    };
    assert_eq!(content, "right away");
    // Leaving before the second reply is due: it is recorded as never sent.
    chat.submit(Op::Shutdown);
    while chat.next_event().await.is_some() {}
    chat.finish().await.expect("left cleanly");
    let session = repo.session_json(&id);
    let sent: Vec<(String, Value)> = session["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "assistant")
        .map(|m| {
            (
                m["content"].as_str().unwrap_or_default().to_string(),
                m["sent"].clone(),
            )
        })
        .collect();
    assert_eq!(
        sent,
        vec![
            ("right away".to_string(), json!(true)),
            ("much later".to_string(), json!(false)),
        ]
    );
    assert_eq!(session["status"], "idle");
}

#[tokio::test(flavor = "multi_thread")]
async fn mcp_servers_start_once_for_all_the_prompts_of_an_open_handle() {
    let repo = Repo::new();
    let starts = repo.path().join("starts.txt");
    let dir = repo.path().join(".nop/plugins/count");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp_server.py");
    std::fs::write(
        dir.join("config.yml"),
        format!(
            "mcp:\n  command: python3\n  args: [\"{}\", \"--starts={}\"]\n",
            fixture.display(),
            starts.display()
        ),
    )
    .expect("write");
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("c1", "count__echo", serde_json::json!({"text": "a"}))]),
        openai::reply_text("first"),
        openai::reply_tool_calls(&[("c2", "count__echo", serde_json::json!({"text": "b"}))]),
        openai::reply_text("second"),
    ]);
    let (rt, _) = runtime(&repo, &server, None);
    let mut session = SessionHandle::open(rt, None, nop::agent::Open::default());
    for text in ["one", "two"] {
        session.submit(Op::UserInput { text: text.into() });
        let events = until_idle(&mut session).await;
        assert!(
            kinds(&events).contains(&"tool_result".to_string()),
            "{events:?}"
        );
    }
    session.submit(Op::Shutdown);
    while session.next_event().await.is_some() {}
    let outcome = session.finish().await.expect("outcome");
    assert_eq!(outcome.final_message, "second");
    let results: Vec<String> = server
        .requests()
        .iter()
        .flat_map(|r| r.tool_results())
        .collect();
    assert!(results.contains(&"b".to_string()), "{results:?}");
    let started = std::fs::read_to_string(&starts).expect("starts");
    assert_eq!(started.lines().count(), 1, "{started}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_permission_request_hook_answers_before_a_person_and_a_notification_hook_hears_of_the_rest()
 {
    let repo = Repo::new();
    let config = repo.path().join(".nop/config.yml");
    let text = std::fs::read_to_string(&config).expect("config");
    let base = text.split("\nhooks:").next().unwrap_or(&text).to_string();
    std::fs::create_dir_all(repo.path().join("work")).expect("mkdir");
    std::fs::write(
        &config,
        format!(
            "{base}\nhooks:\n  permission-request:\n    - matcher: write-file\n      command: 'echo {{\\\"decision\\\": \\\"allow\\\"}}'\n  notification:\n    - 'cat >> work/notified.jsonl; echo >> work/notified.jsonl'\n"
        ),
    )
    .expect("write");
    let (asked, results, _) = approving(
        &repo,
        &[
            ("c1", "shell", json!({"command": "echo asked"})),
            (
                "c2",
                "write-file",
                json!({"path": "work/new.txt", "content": "new\n"}),
            ),
        ],
        vec![ApprovalAnswer::Once],
    )
    .await;
    assert_eq!(
        asked.iter().map(|a| a.0.as_str()).collect::<Vec<_>>(),
        vec!["shell"]
    );
    assert!(results[0].contains("asked"), "{results:?}");
    assert!(repo.path().join("work/new.txt").exists(), "{results:?}");
    let notified = std::fs::read_to_string(repo.path().join("work/notified.jsonl")).expect("log");
    let kinds: Vec<(String, String)> = notified
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str::<Value>(l).expect("json"))
        .map(|v| {
            (
                v["kind"].as_str().unwrap_or_default().to_string(),
                v["message"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            (
                "approval".to_string(),
                "nop needs your permission to use shell: echo asked".to_string()
            ),
            ("done".to_string(), "nop finished the task".to_string()),
        ]
    );
}

/// The text of `path` in checkpoint `tree` of the repository's store.
fn in_checkpoint(repo: &Repo, tree: &Value, path: &str) -> Option<String> {
    let tree = tree.as_str()?;
    let out = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(repo.path().join(".nop/checkpoints"))
        .args(["cat-file", "blob", &format!("{tree}:{path}")])
        .output()
        .expect("git");
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_open_session_starts_a_prompt_from_the_last_tree_while_nothing_changed_and_looks_again_after_any_change()
 {
    let repo = Repo::new();
    crate::support::git(repo.path(), &["init", "-q"]);
    std::fs::write(repo.path().join("kept.txt"), "kept\n").expect("write");
    // A second name for a recorded file, outside the tree: a write through it makes no event
    // where the watch listens.
    let elsewhere = crate::support::repo_dir();
    let other_name = elsewhere.path().join("kept-too.txt");
    std::fs::hard_link(repo.path().join("kept.txt"), &other_name).expect("link");
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[(
            "c1",
            "shell",
            json!({"command": "printf 'by the shell\\n' > made.txt"}),
        )]),
        openai::reply_text("one"),
        openai::reply_text("two"),
        openai::reply_text("three"),
        openai::reply_text("four"),
    ]);
    let (rt, _) = runtime(&repo, &server, None);
    let mut session = SessionHandle::open(rt, None, nop::agent::Open::default());
    // Every checkpoint that looks at the disk (and any git it runs) writes new bytes to the
    // store's clock first; one taken from the watch writes nothing.
    let clock = repo.path().join(".nop/checkpoints/clock");
    let looked = || std::fs::read(&clock).expect("clock");
    async fn prompt(session: &mut SessionHandle, text: &str) -> Option<String> {
        session.submit(Op::UserInput { text: text.into() });
        match until_idle(session).await.last() {
            Some(Event::Idle { session_id }) => session_id.clone(),
            _ => None,
        }
    }
    prompt(&mut session, "make a file").await;
    let after_first = looked();
    prompt(&mut session, "and now?").await;
    assert_eq!(looked(), after_first, "nothing changed: nothing looked at");
    std::fs::write(&other_name, "written elsewhere\n").expect("write");
    prompt(&mut session, "anything new?").await;
    let after_third = looked();
    assert_ne!(after_third, after_first, "a write through another name");
    std::fs::write(repo.path().join("yours.txt"), "yours\n").expect("write");
    let id = prompt(&mut session, "and yours?").await.expect("a session");
    assert_ne!(looked(), after_third, "a file of the user's");
    session.submit(Op::Shutdown);
    while session.next_event().await.is_some() {}
    let turns = repo.session_json(&id)["checkpoints"].clone();
    let turns = turns.as_array().expect("turns");
    assert_eq!(turns.len(), 4, "{turns:?}");
    assert_eq!(
        in_checkpoint(&repo, &turns[0]["after"], "made.txt").as_deref(),
        Some("by the shell\n")
    );
    assert_eq!(turns[1]["before"], turns[0]["after"]);
    assert_eq!(
        in_checkpoint(&repo, &turns[2]["before"], "kept.txt").as_deref(),
        Some("written elsewhere\n")
    );
    assert_eq!(
        in_checkpoint(&repo, &turns[3]["before"], "yours.txt").as_deref(),
        Some("yours\n")
    );
}
