//! `@path` mentions (issue 17): a mentioned file is attached to the user message when the agent
//! could read it with `read-file`; otherwise the user gets a warning and neither the model nor
//! session.json gets anything of the file.

use std::path::Path;
use std::time::Duration;

use chrono::Utc;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use nop::agent::{RunRequest, Runtime, SessionHandle};
use nop::permissions::{ApprovalAnswer, ApprovalMode, Approver};
use nop::protocol::events::Event;
use nop::workspace::Workspace;

use crate::support::mock::{MockServer, RecordedRequest, openai};
use crate::support::{Repo, model_env, repo_dir};

const HEADER: &str = "Files the user attached with @ (as they were when this message was sent):\n";

/// Runs `nop run --output-format stream-json PROMPT` in `dir`; returns the exit code, the
/// warnings and the session id.
fn run_in(
    repo: &Repo,
    dir: &Path,
    server: &MockServer,
    prompt: &str,
) -> (i32, Vec<String>, String) {
    let output = repo
        .nop_in(dir)
        // HOME above the repository: HOME's own `.nop/` never counts for a directory below it.
        .env("HOME", repo.path().parent().expect("parent"))
        .envs(model_env(server, "openai"))
        .args(["run", "--output-format", "stream-json", prompt])
        .output()
        .expect("run nop");
    let events: Vec<Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let warnings = events
        .iter()
        .filter(|e| e["type"] == "warning")
        .filter_map(|e| e["message"].as_str().map(str::to_string))
        .collect();
    let id = events
        .iter()
        .find(|e| e["type"] == "session_started")
        .and_then(|e| e["session_id"].as_str())
        .unwrap_or_else(|| panic!("no session: {}", String::from_utf8_lossy(&output.stderr)))
        .to_string();
    (output.status.code().unwrap_or(-1), warnings, id)
}

/// The user messages of session `id` as stored.
fn stored_user_messages(repo: &Repo, id: &str) -> Vec<String> {
    repo.session_json(id)["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str().map(str::to_string))
        .collect()
}

fn write(path: &Path, bytes: impl AsRef<[u8]>) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, bytes).expect("write");
}

#[test]
fn a_mention_attaches_the_file_to_the_user_message() {
    let repo = Repo::new();
    write(&repo.path().join("notes.txt"), "the word is pelican\n");
    write(&repo.path().join("docs/x.md"), "# X\n```sh\nls\n```");
    let server = MockServer::start(vec![openai::reply_text("ok")]);
    let prompt = "summarize @notes.txt and @./docs/x.md, then mail me@example.com";
    let (code, warnings, id) = run_in(&repo, repo.path(), &server, prompt);
    assert_eq!(code, 0);
    assert_eq!(warnings, Vec::<String>::new());
    let expected = format!(
        "{prompt}\n\n{HEADER}\n```notes.txt\nthe word is pelican\n```\n\n````docs/x.md\n# X\n\
         ```sh\nls\n```\n````\n"
    );
    assert_eq!(server.requests()[0].user_messages(), vec![expected.clone()]);
    // session.json holds what the model was sent.
    assert_eq!(stored_user_messages(&repo, &id), vec![expected]);
}

#[test]
fn mentions_are_taken_from_the_working_directory() {
    let repo = Repo::new();
    write(&repo.path().join("top.txt"), "TOP\n");
    write(&repo.path().join("sub/notes.txt"), "SUB NOTES\n");
    let server = MockServer::start(vec![openai::reply_text("ok")]);
    let prompt = "@notes.txt and @../top.txt.";
    let (code, warnings, _) = run_in(&repo, &repo.path().join("sub"), &server, prompt);
    assert_eq!((code, warnings), (0, Vec::new()));
    assert_eq!(
        server.requests()[0].user_messages(),
        vec![format!(
            "{prompt}\n\n{HEADER}\n```sub/notes.txt\nSUB NOTES\n```\n\n```top.txt\nTOP\n```\n"
        )]
    );
}

#[test]
fn hostile_mentions_are_refused_with_a_warning_and_never_reach_the_model() {
    let repo = Repo::new();
    let outside = repo_dir();
    write(&outside.path().join("secret.txt"), "OUTSIDE-SECRET\n");
    let outside_name = outside
        .path()
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    std::os::unix::fs::symlink(
        outside.path().join("secret.txt"),
        repo.path().join("link.txt"),
    )
    .expect("symlink");
    write(&repo.path().join(".env"), "ENV-SECRET=1\n");
    write(&repo.path().join("docs/readme.md"), "DOCS-DIR\n");
    write(&repo.path().join("bin.dat"), b"BINARY-SECRET\0\x01\x02");
    write(&repo.path().join("latin.txt"), b"LATIN-SECRET caf\xe9\n");
    // The shipped rules let the agent read .env; this repository's deny it.
    let rules = repo.path().join(".nop/.permissions/agent-default.yml");
    let shipped = std::fs::read_to_string(&rules).expect("rules");
    write(
        &rules,
        shipped.replace(
            "file-access:\n",
            "file-access:\n  - pattern: \".env\"\n    access: deny\n",
        ),
    );
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let server = MockServer::start(vec![openai::reply_text("ok")]);
    let mentioned = [
        format!("../{outside_name}/secret.txt"),
        "/etc/passwd".into(),
        ".env".into(),
        "link.txt".into(),
        "docs".into(),
        "bin.dat".into(),
        "latin.txt".into(),
        ".nop/.permissions/agent-default.yml".into(),
        "missing.txt".into(),
    ];
    let prompt = format!(
        "look at {} and @ alone, then write to me@example.com",
        mentioned
            .iter()
            .map(|m| format!("@{m}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let (code, warnings, id) = run_in(&repo, repo.path(), &server, &prompt);
    assert_eq!(code, 0);
    let refused: Vec<String> = warnings
        .iter()
        .filter_map(|w| {
            w.split_once(" is not attached: ")
                .map(|(m, _)| m.to_string())
        })
        .collect();
    let expected: Vec<String> = mentioned.iter().map(|m| format!("@{m}")).collect();
    assert_eq!(refused, expected, "{warnings:#?}");
    assert_eq!(warnings.len(), mentioned.len(), "{warnings:#?}");
    let why = |m: &str| {
        warnings
            .iter()
            .find(|w| w.starts_with(&format!("@{m} ")))
            .cloned()
            .unwrap_or_default()
    };
    assert!(why(".env").contains("refused"), "{}", why(".env"));
    assert!(why("docs").contains("a directory"), "{}", why("docs"));
    assert!(why("bin.dat").contains("binary"), "{}", why("bin.dat"));
    assert!(
        why("latin.txt").contains("not UTF-8"),
        "{}",
        why("latin.txt")
    );
    // The model got the text as typed and nothing of any file.
    assert_eq!(server.requests()[0].user_messages(), vec![prompt.clone()]);
    assert_eq!(stored_user_messages(&repo, &id), vec![prompt]);
    let session =
        std::fs::read_to_string(repo.session_dir(&id).join("session.json")).expect("session.json");
    let mut secrets = vec![
        "OUTSIDE-SECRET",
        "ENV-SECRET",
        "DOCS-DIR",
        "BINARY-SECRET",
        "LATIN-SECRET",
        "Permissions of every agent",
    ];
    if let Some(line) = passwd.lines().next() {
        secrets.push(line);
    }
    for secret in secrets {
        for request in server.requests() {
            assert!(!request.raw_body.contains(secret), "{secret} was sent");
        }
        assert!(!session.contains(secret), "{secret} is in session.json");
    }
}

#[test]
fn a_huge_file_is_attached_cut_with_a_note() {
    let repo = Repo::new();
    let line = "0123456789abcdef\n";
    write(&repo.path().join("big.txt"), line.repeat(20_000));
    let server = MockServer::start(vec![openai::reply_text("ok")]);
    let (code, warnings, _) = run_in(&repo, repo.path(), &server, "@big.txt");
    assert_eq!(code, 0);
    assert_eq!(
        warnings,
        vec!["@big.txt is attached cut: its first 262144 of 340000 bytes".to_string()]
    );
    let kept = &line.repeat(20_000)[..262_144];
    let expected = format!(
        "@big.txt\n\n{HEADER}\n```big.txt\n{kept}\n```\n[big.txt is cut here: its first \
         262144 of 340000 bytes are attached; read-file reads the rest]\n"
    );
    let sent = server.requests()[0].user_messages();
    // Not a diff of 256 KiB when it fails: the lengths and the ends.
    assert_eq!(sent.len(), 1);
    let tail = |s: &str| s[s.len() - 200..].to_string();
    assert_eq!(
        (sent[0].len(), tail(&sent[0])),
        (expected.len(), tail(&expected))
    );
    assert!(sent[0] == expected);
}

#[test]
fn nop_send_attaches_mentions_too() {
    let repo = Repo::new();
    write(&repo.path().join("notes.txt"), "SENT NOTES\n");
    let server = MockServer::start(vec![openai::reply_text("one"), openai::reply_text("two")]);
    let (_, _, id) = run_in(&repo, repo.path(), &server, "hi");
    let output = repo
        .nop_model(&server, "openai")
        .args(["send", "--session", &id, "and now @notes.txt"])
        .output()
        .expect("send");
    crate::support::assert_ok(&output);
    let expected = format!("and now @notes.txt\n\n{HEADER}\n```notes.txt\nSENT NOTES\n```\n");
    assert_eq!(
        server.requests()[1].user_messages(),
        vec!["hi".to_string(), expected.clone()]
    );
    assert_eq!(
        stored_user_messages(&repo, &id),
        vec!["hi".to_string(), expected]
    );
}

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

/// A runtime on `repo` speaking to `server`, asking questions when `ask`.
fn runtime(
    repo: &Repo,
    server: &MockServer,
    ask: bool,
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
    let (approver, questions) = if ask {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        (Approver::interactive(ApprovalMode::OnRequest, tx), Some(rx))
    } else {
        (Approver::headless(ApprovalMode::OnRequest, false), None)
    };
    let runtime = Runtime::new(ws, resolved.config, env, approver, "tester".into());
    (runtime.with_cwd(repo.path()), questions)
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

fn last_user_message(request: &RecordedRequest) -> String {
    request.user_messages().last().cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_queued_message_gets_its_mentions_when_it_enters_the_conversation() {
    let repo = Repo::new();
    write(&repo.path().join("a.txt"), "a\n");
    write(&repo.path().join("b.txt"), "B CONTENT\n");
    let sessions = repo.sessions_dir();
    let server = MockServer::start_with(Box::new(move |request| {
        if last_user_message(request).starts_with("also @b.txt") {
            return openai::reply_text("checked both");
        }
        if request.user_messages().len() > 1 {
            return openai::reply_text("the message never arrived");
        }
        // While the model "thinks", the user sends a high-priority message with mentions.
        let dir = std::fs::read_dir(&sessions)
            .expect("sessions")
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| p.join("session.json").exists())
            .expect("the session");
        nop::queue::Inbox::new(&dir)
            .push(&nop::queue::QueuedMessage {
                id: "m1".into(),
                text: "also @b.txt and @/etc/passwd".into(),
                priority: nop::queue::QueuePriority::High,
                session_key: "cli:test:tester".into(),
                queued_at: Utc::now(),
                stop: false,
            })
            .expect("queue");
        openai::reply_tool_calls(&[("c1", "read-file", json!({"path": "a.txt"}))])
    }));
    let (rt, _) = runtime(&repo, &server, false);
    let mut session = SessionHandle::start(rt, None, prompt("check a.txt"));
    let mut warnings = Vec::new();
    while let Some(event) = tokio::time::timeout(Duration::from_secs(30), session.next_event())
        .await
        .expect("an event within 30 s")
    {
        if let Event::Warning { message } = event {
            warnings.push(message);
        }
    }
    let outcome = session.finish().await.expect("outcome");
    assert_eq!(outcome.final_message, "checked both");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].starts_with("@/etc/passwd is not attached: "));
    let requests = server.requests();
    assert_eq!(
        last_user_message(requests.last().expect("request")),
        format!("also @b.txt and @/etc/passwd\n\n{HEADER}\n```b.txt\nB CONTENT\n```\n")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_ask_rule_asks_before_a_mentioned_file_is_attached() {
    for (answer, attached) in [(ApprovalAnswer::Once, true), (ApprovalAnswer::No, false)] {
        let repo = Repo::new();
        write(&repo.path().join("private/p.txt"), "PRIVATE\n");
        let rules = repo.path().join(".nop/.permissions/agent-default.yml");
        let shipped = std::fs::read_to_string(&rules).expect("rules");
        write(
            &rules,
            shipped.replace(
                "file-access:\n",
                "file-access:\n  - pattern: \"private/**\"\n    access: ask\n",
            ),
        );
        let server = MockServer::start(vec![openai::reply_text("ok")]);
        let (rt, questions) = runtime(&repo, &server, true);
        let mut session = SessionHandle::start(
            rt,
            questions.map(nop::agent::handle::approvals),
            prompt("read @private/p.txt"),
        );
        let (mut asked, mut warnings) = (Vec::new(), Vec::new());
        while let Some(event) = session.next_event().await {
            match event {
                Event::ApprovalRequested {
                    id, tool, detail, ..
                } => {
                    asked.push((tool, detail));
                    session.submit(nop::agent::Op::Approval {
                        id,
                        answer: answer.clone(),
                    });
                }
                Event::Warning { message } => warnings.push(message),
                _ => {}
            }
        }
        session.finish().await.expect("outcome");
        assert_eq!(
            asked,
            vec![("read-file".to_string(), "read private/p.txt".to_string())]
        );
        let sent = last_user_message(&server.requests()[0]);
        assert_eq!(sent.contains("PRIVATE"), attached, "{answer:?}: {sent}");
        assert_eq!(warnings.is_empty(), attached, "{answer:?}: {warnings:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_interactive_prompt_attaches_mentions_to_each_input() {
    let repo = Repo::new();
    write(&repo.path().join("one.txt"), "ONE\n");
    write(&repo.path().join("two.txt"), "TWO\n");
    let server = MockServer::start(vec![openai::reply_text("a"), openai::reply_text("b")]);
    let (rt, _) = runtime(&repo, &server, false);
    let mut session = SessionHandle::open(rt, None, nop::agent::Open::default());
    let mut inputs = vec!["then @two.txt", "first @one.txt"];
    session.submit(nop::agent::Op::UserInput {
        text: inputs.pop().expect("input").into(),
    });
    while let Some(event) = tokio::time::timeout(Duration::from_secs(30), session.next_event())
        .await
        .expect("an event within 30 s")
    {
        if let Event::Idle { .. } = event {
            let op = match inputs.pop() {
                Some(text) => nop::agent::Op::UserInput { text: text.into() },
                None => nop::agent::Op::Shutdown,
            };
            session.submit(op);
        }
    }
    session.finish().await.expect("outcome");
    assert_eq!(
        server.requests()[1].user_messages(),
        vec![
            format!("first @one.txt\n\n{HEADER}\n```one.txt\nONE\n```\n"),
            format!("then @two.txt\n\n{HEADER}\n```two.txt\nTWO\n```\n"),
        ]
    );
}
