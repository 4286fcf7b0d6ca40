//! The interactive `nop run` on a real terminal (tmux): prompts, the answer, what is typed while
//! the agent works (queued for it and taken at the next checkpoint), the slash commands.

use serde_json::json;

use crate::support::Repo;
use crate::support::mock::{MockServer, openai};
use crate::support::terminal::Terminal;

#[test]
fn the_interactive_session_answers_takes_what_is_typed_meanwhile_and_keeps_the_session() {
    let repo = Repo::new();
    let gate = repo.path().join("gate");
    let server = MockServer::start(vec![
        openai::reply_text("hi there"),
        openai::reply_tool_calls(&[(
            "c1",
            "shell",
            json!({"command": format!("while [ ! -e {} ]; do sleep 0.02; done; echo gate passed", gate.display())}),
        )]),
        openai::reply_text("did both"),
    ]);
    let t = Terminal::start(&repo, &server, "interactive", "run", &[], "/compact /exit");
    t.type_line("hello");
    t.wait_for_prompt_after("hi there");
    t.type_line("run the long thing");
    t.wait_for("shell");
    // While the command runs, what is typed goes to the agent's queue.
    t.type_line("and mention the weather");
    t.wait_for("queued");
    std::fs::write(&gate, "").expect("open the gate");
    t.wait_for_prompt_after("did both");
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    let users: Vec<String> = requests[2].user_messages();
    assert!(
        users.iter().any(|m| m == "and mention the weather"),
        "{users:?}"
    );
    t.type_line("/plan");
    t.wait_for("no tasks");
    t.type_line("/exit");
    let screen = t.wait_for("saved; continue with: nop run --session");
    let session = repo.first_session();
    let id = session["sessionId"].as_str().expect("id");
    assert!(screen.contains(id), "{screen}");
    assert_eq!(session["status"], "completed");
}

#[test]
fn an_approval_is_asked_on_the_terminal_and_always_holds_for_the_rest_of_the_session() {
    let repo = Repo::new();
    std::fs::write(
        repo.path().join(".nop/.permissions/agent-coder.yml"),
        "agent: coder\ntools:\n  allowed: [\"*\"]\nfile-access:\n  - pattern: \"notes/**\"\n    access: ask\n  - pattern: \"**\"\n    access: read\n",
    )
    .expect("permissions");
    let write = |text: &str| {
        openai::reply_tool_calls(&[(
            "w",
            "write-file",
            json!({"path": "notes/today.md", "content": text}),
        )])
    };
    let server = MockServer::start(vec![
        write("first"),
        openai::reply_text("wrote it"),
        write("second"),
        openai::reply_text("wrote it again"),
    ]);
    let t = Terminal::start(&repo, &server, "approval", "run", &[], "/compact /exit");
    t.type_line("note something");
    t.wait_for("allow?");
    t.type_line("a");
    t.wait_for_prompt_after("wrote it");
    let note = repo.path().join("notes/today.md");
    assert_eq!(std::fs::read_to_string(&note).expect("written"), "first");
    // The next prompt writes the same file: "always" still holds, nothing is asked.
    t.type_line("and again");
    let screen = t.wait_for_prompt_after("wrote it again");
    assert_eq!(screen.matches("allow?").count(), 1, "{screen}");
    assert_eq!(std::fs::read_to_string(&note).expect("written"), "second");
    t.type_line("/exit");
    t.wait_for("saved; continue with");
}

#[test]
fn compact_in_the_interactive_session_summarises_the_older_conversation() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_text("first answer"),
        openai::reply_text("second answer"),
        openai::reply_text("the gist of it"),
    ]);
    let t = Terminal::start(
        &repo,
        &server,
        "compact",
        "run",
        &[("NOP_COMPACTION_KEEP_LAST", "1")],
        "/compact /exit",
    );
    t.type_line("/compact");
    t.wait_for("no session yet: there is nothing to compact");
    t.type_line("one");
    t.wait_for_prompt_after("first answer");
    t.type_line("two");
    t.wait_for_prompt_after("second answer");
    t.type_line("/compact");
    let screen = t.wait_for_prompt_after("compacted 5 →");
    assert!(screen.contains("full history in snapshot"), "{screen}");
    t.type_line("/exit");
    t.wait_for("saved; continue with");
    let session = repo.first_session();
    assert_eq!(session["compressions"].as_array().map(Vec::len), Some(1));
    let summary = session["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .any(|m| {
            m["content"]
                .as_str()
                .is_some_and(|c| c.contains("the gist of it"))
        });
    assert!(summary, "{session}");
}
