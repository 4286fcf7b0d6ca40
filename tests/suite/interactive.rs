//! The interactive `nop run` on a real terminal (tmux): prompts, the answer, what is typed while
//! the agent works (queued for it and taken at the next checkpoint), the slash commands.

use serde_json::json;

use crate::support::Repo;
use crate::support::mock::{MockResponse, MockServer, openai};
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
    let t = Terminal::start(
        &repo,
        &server,
        "interactive",
        "run",
        &[],
        "/help for commands",
    );
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
    // The queued message went in at the next gap, after the command's result.
    let users: Vec<String> = server.request_with_result("c1").user_messages();
    assert!(
        users.iter().any(|m| m == "and mention the weather"),
        "{users:?}"
    );
    t.type_line("/plan");
    t.wait_for("no tasks");
    t.type_line("/exit");
    let screen = t.wait_for("saved; continue with: nop run -c");
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
    // Trusted before the session starts (else it would first ask whether to trust it).
    repo.trust();
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
    let t = Terminal::start(&repo, &server, "approval", "run", &[], "/help for commands");
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
        "/help for commands",
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

#[test]
fn the_transcript_shows_diffs_a_failing_commands_tail_the_plan_and_rendered_markdown() {
    let repo = Repo::new();
    std::fs::write(repo.path().join("notes.txt"), "one\ntwo\nthree\n").expect("write");
    let failing =
        "for i in $(seq 1 30); do echo line$i; done; echo 'error: the real cause' >&2; exit 3";
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[(
            "e1",
            "edit-file",
            json!({"path": "notes.txt", "old_string": "two", "new_string": "TWO"}),
        )]),
        openai::reply_tool_calls(&[("s1", "shell", json!({"command": failing}))]),
        openai::reply_tool_calls(&[(
            "p1",
            "update-plan",
            json!({"tasks": [
                {"id": "1", "title": "Edit the notes", "status": "completed"},
                {"id": "2", "title": "Find the cause", "status": "in_progress"},
                {"id": "3", "title": "Tell the user", "status": "pending"},
            ]}),
        )]),
        openai::reply_text("**Done**: changed `two`.\n\n- first point\n- second point\n"),
    ]);
    let t = Terminal::start(
        &repo,
        &server,
        "transcript",
        "run",
        // As a user has it: advisors on (none has a reason to speak in this run).
        &[("NOP_ADVISORS_ENABLED", "true")],
        "/help for commands",
    );
    t.type_line("do it");
    let screen = t.wait_for_prompt_after("second point");
    // The edit as a diff with line numbers.
    assert!(screen.contains("notes.txt (+1 −1)"), "{screen}");
    assert!(
        screen
            .lines()
            .any(|l| l.contains("2") && l.contains("- two")),
        "{screen}"
    );
    assert!(
        screen
            .lines()
            .any(|l| l.contains("2") && l.contains("+ TWO")),
        "{screen}"
    );
    // The failing command: its exit code and the end of its output, not its first line.
    assert!(screen.contains("failed with exit code 3"), "{screen}");
    assert!(screen.contains("error: the real cause"), "{screen}");
    assert!(!screen.contains("line1\n"), "{screen}");
    // The plan as a checklist.
    assert!(screen.contains("☑ Edit the notes"), "{screen}");
    assert!(screen.contains("◐ Find the cause"), "{screen}");
    assert!(screen.contains("☐ Tell the user"), "{screen}");
    // Markdown rendered: no literal markers.
    assert!(screen.contains("Done: changed two."), "{screen}");
    assert!(!screen.contains("**"), "{screen}");
    assert!(screen.contains("• first point"), "{screen}");
    // What the run cost, after it.
    assert!(screen.contains("4 turns"), "{screen}");
    t.type_line("/exit");
}

#[test]
fn a_status_line_with_elapsed_time_shows_while_the_model_thinks_and_a_command_runs() {
    let repo = Repo::new();
    let slow = |text: &str| {
        let mut chunks = vec![openai::role()];
        chunks.extend(text.split(' ').map(|w| openai::text(&format!("{w} "))));
        chunks.push(openai::finish("stop"));
        chunks.push(openai::done());
        MockResponse::Sse {
            chunks,
            delay: std::time::Duration::from_millis(700),
        }
    };
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("s1", "shell", json!({"command": "sleep 3; echo slept"}))]),
        slow("all done now"),
    ]);
    let t = Terminal::start(&repo, &server, "status", "run", &[], "/help for commands");
    t.type_line("go");
    t.wait_for("running sleep 3");
    t.wait_for("2s · ");
    t.wait_for("esc to interrupt");
    // The answer after it comes slowly: the model is thinking meanwhile.
    t.wait_for("thinking…");
    t.wait_for_prompt_after("all done now");
    t.type_line("/exit");
}

/// An answer streamed a word every `ms` milliseconds.
fn slow_answer(text: &str, ms: u64) -> MockResponse {
    let mut chunks = vec![openai::role()];
    chunks.extend(text.split(' ').map(|w| openai::text(&format!("{w} "))));
    chunks.push(openai::finish("stop"));
    chunks.push(openai::done());
    MockResponse::Sse {
        chunks,
        delay: std::time::Duration::from_millis(ms),
    }
}

#[test]
fn typing_while_the_agent_answers_leaves_the_answer_intact_and_esc_interrupts() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        slow_answer("alpha beta gamma delta", 400),
        slow_answer("one two three four five six seven eight nine ten", 1000),
    ]);
    let t = Terminal::start(&repo, &server, "keys", "run", &[], "/help for commands");
    t.type_line("first");
    t.wait_for("writing");
    // Typed mid-answer, no Enter: shown on the status line, never inside the answer.
    t.press(&["z", "z", "z"]);
    // The answer intact; what was typed waits on the next prompt line.
    let screen = t.wait_for("› zzz");
    assert!(screen.contains("alpha beta gamma delta\n"), "{screen}");
    assert_eq!(screen.matches("zzz").count(), 1, "{screen}");
    // Esc stops the next answer; the session waits for the next prompt.
    t.press(&["C-u"]);
    t.type_line("second");
    t.wait_for("esc to interrupt");
    t.press(&["Escape"]);
    let screen = t.wait_for_prompt_after("interrupted");
    assert!(!screen.contains("ten"), "{screen}");
    // Ctrl-C twice at an empty prompt leaves.
    t.press(&["C-c"]);
    t.wait_for("Ctrl-C again");
    t.press(&["C-c"]);
    t.wait_for("saved; continue with");
}

#[test]
fn an_approval_is_one_key_t_tells_the_agent_what_to_do_instead_and_esc_stops_the_run() {
    let repo = Repo::new();
    std::fs::write(
        repo.path().join(".nop/.permissions/agent-coder.yml"),
        "agent: coder\ntools:\n  allowed: [\"*\"]\nfile-access:\n  - pattern: \"notes/**\"\n    access: ask\n  - pattern: \"**\"\n    access: read\n",
    )
    .expect("permissions");
    // Trusted before the session starts (else it would first ask whether to trust it).
    repo.trust();
    let write = |id: &str, content: &str| {
        openai::reply_tool_calls(&[(
            id,
            "write-file",
            json!({"path": "notes/today.md", "content": content}),
        )])
    };
    let server = MockServer::start(vec![
        write("w1", "x"),
        openai::reply_text("did not write"),
        write("w2", "x"),
        openai::reply_text("fine, elsewhere"),
        write("w3", "x"),
        openai::reply_text("written"),
        write("w4", "y"),
        openai::reply_text("went on after esc"),
    ]);
    let t = Terminal::start(
        &repo,
        &server,
        "keysapproval",
        "run",
        &[],
        "/help for commands",
    );
    t.type_line("note it");
    // While the question waits, the status line says so, not what the agent was doing.
    let screen = t.wait_for("waiting for your answer");
    assert!(!screen.contains("esc to interrupt"), "{screen}");
    // The question shows the diff of the write and what "always" would cover.
    assert!(screen.contains("notes/today.md (new file, +1)"), "{screen}");
    assert!(screen.contains("+ x"), "{screen}");
    assert!(
        screen.contains("[a] always: writing files under notes/"),
        "{screen}"
    );
    t.press(&["n"]);
    let screen = t.wait_for_prompt_after("did not write");
    // The answer takes the status line's place: no frozen spinner line is left behind.
    assert!(screen.contains("\n  ✗ no\n"), "{screen}");
    // The user's "no" is what they chose: not an error, no error log, no advisor asked.
    assert!(screen.contains("⎿ you declined"), "{screen}");
    assert!(!screen.contains("PermissionDenied"), "{screen}");
    assert!(!screen.contains("error"), "{screen}");
    assert!(
        server.result_of("w1").starts_with("not run (declined): "),
        "{}",
        server.result_of("w1")
    );
    let logs = std::fs::read_dir(repo.path().join(".nop/sessions"))
        .expect("sessions")
        .flatten()
        .flat_map(|s| std::fs::read_dir(s.path()).into_iter().flatten())
        .flatten()
        .filter(|f| f.file_name().to_string_lossy().starts_with("error-"))
        .count();
    assert_eq!(logs, 0, "no error log for a no");
    assert!(!screen.contains("esc to interrupt"), "{screen}");
    assert!(!screen.contains("waiting for your answer"), "{screen}");
    assert!(!repo.path().join("notes/today.md").exists());
    t.type_line("again");
    t.wait_for_after("› again", "allow?");
    t.press(&["t"]);
    t.wait_for("instead (enter sends it, esc goes back):");
    // What is typed is echoed as it is typed.
    t.press(&["write it to scratch.m", "d", "x", "BSpace"]);
    t.wait_for("goes back): write it to scratch.md");
    t.press(&["Enter"]);
    let screen = t.wait_for_prompt_after("fine, elsewhere");
    assert!(
        screen.contains("✗ no; instead: write it to scratch.md"),
        "{screen}"
    );
    let result = server.result_of("w2");
    assert!(
        result.contains("do this instead: write it to scratch.md"),
        "{result}"
    );
    assert!(!repo.path().join("notes/today.md").exists());
    // y: yes, this once.
    t.type_line("third");
    t.wait_for_after("› third", "allow?");
    t.press(&["y"]);
    let screen = t.wait_for_prompt_after("written");
    assert!(repo.path().join("notes/today.md").exists());
    // The diff was shown in the question, and not again with the result.
    let third = screen.rsplit("› third").next().unwrap_or_default();
    assert_eq!(
        third.matches("notes/today.md (new file, +1)").count(),
        1,
        "{screen}"
    );
    assert!(!screen.contains("esc to interrupt"), "{screen}");
    // Esc stops the run: nothing is written, the agent does not go on, nop waits for a prompt.
    t.type_line("fourth");
    t.wait_for_after("› fourth", "allow?");
    t.press(&["Escape"]);
    let screen = t.wait_for_prompt_after("interrupted");
    assert!(!screen.contains("went on after esc"), "{screen}");
    assert_eq!(
        std::fs::read_to_string(repo.path().join("notes/today.md")).expect("written"),
        "x"
    );
    t.type_line("/exit");
}

#[test]
fn resume_lists_recent_sessions_and_shows_the_last_exchanges() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_text("the **first** answer"),
        openai::reply_text("second answer"),
    ]);
    repo.model_ok(&server, &["run", "fix the parser"]);
    let id = repo.first_session()["sessionId"]
        .as_str()
        .expect("id")
        .to_string();
    let t = Terminal::start(&repo, &server, "resume", "run", &[], "/help for commands");
    t.type_line("/resmue");
    t.wait_for("did you mean /resume?");
    t.type_line("/resume");
    let screen = t.wait_for("resume which");
    assert!(
        screen.contains(&id) && screen.contains("fix the parser"),
        "{screen}"
    );
    // Newest first: Enter takes the first; typing filters, the arrows move.
    t.press(&["x", "y", "z"]);
    t.wait_for("(nothing matches)");
    t.press(&[
        "BSpace", "BSpace", "BSpace", "p", "a", "r", "s", "Down", "Up", "Enter",
    ]);
    let screen = t.wait_for("resumed");
    assert!(screen.contains("› fix the parser"), "{screen}");
    assert!(screen.contains("the first answer"), "{screen}");
    t.type_line("go on");
    t.wait_for_prompt_after("second answer");
    t.type_line("/status");
    let screen = t.wait_for("tokens");
    assert!(
        screen.contains("mock-model") && screen.contains(&id),
        "{screen}"
    );
    t.type_line("/exit");
    t.wait_for("saved; continue with");
    // The same session went on.
    let session = repo.session_json(&id);
    let users: Vec<&str> = session["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert_eq!(users, vec!["fix the parser", "go on"]);
}

#[test]
fn a_question_from_the_agent_is_shown_once_without_a_headless_hint() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[(
            "q",
            "ask-user",
            json!({"question": "Which branch should I use?"}),
        )]),
        openai::reply_text("using main"),
    ]);
    let t = Terminal::start(&repo, &server, "askuser", "run", &[], "/help for commands");
    t.type_line("start");
    let screen = t.wait_for_prompt_after("Which branch should I use?");
    assert_eq!(
        screen.matches("Which branch should I use?").count(),
        1,
        "{screen}"
    );
    assert!(!screen.contains("nop run --session"), "{screen}");
    t.type_line("main");
    t.wait_for_prompt_after("using main");
    t.type_line("/exit");
}

#[test]
fn undo_and_rewind_in_the_interactive_session_put_the_files_back() {
    let repo = Repo::new();
    std::fs::write(repo.path().join("notes.txt"), "one\n").expect("write");
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[(
            "e1",
            "edit-file",
            json!({"path": "notes.txt", "old_string": "one", "new_string": "ONE"}),
        )]),
        openai::reply_text("edited"),
    ]);
    let t = Terminal::start(&repo, &server, "undo", "run", &[], "/help for commands");
    t.type_line("/undo");
    t.wait_for("no session yet");
    t.type_line("shout the notes");
    t.wait_for_prompt_after("edited");
    let notes = || std::fs::read_to_string(repo.path().join("notes.txt")).expect("notes");
    assert_eq!(notes(), "ONE\n");
    t.type_line("/snapshot");
    t.wait_for("nop fork");
    // `/undo` alone offers the prompts that changed files; Enter takes the newest, `f` its files.
    t.type_line("/undo");
    t.wait_for("go back to before which prompt");
    t.wait_for("shout the notes  · notes.txt");
    t.press(&["Enter"]);
    t.wait_for("f: files only");
    t.press(&["f"]);
    t.wait_for_prompt_after("restored  notes.txt");
    assert_eq!(notes(), "one\n");
    // `/rewind` alone picks a run; Esc leaves everything as it is.
    t.type_line("/rewind");
    t.wait_for("rewind to before which run");
    t.wait_for("shout the notes (undone)  · notes.txt");
    t.press(&["Escape"]);
    // The picker is gone before anything else is typed: keys right after Esc would read as Alt+key.
    t.wait_for_prompt_after("› /rewind");
    t.type_line("/rewind nosuchsnapshot --files");
    t.wait_for_prompt_after("error:");
    t.type_line("/exit");
    t.wait_for("saved; continue with");
    let session = repo.first_session();
    assert!(
        session["checkpoints"][0]["undoneAt"].is_string(),
        "{session}"
    );
}

/// Issue 43: Esc Esc on an empty prompt (as in Claude Code), like `/undo` alone, offers the
/// prompts that changed files, newest first (a prompt that changed none is not a point), and one
/// key takes the files and the conversation back to where the one picked began; `/undo --force`
/// still undoes the last run that changed files at once.
#[test]
fn esc_esc_offers_the_prompts_that_changed_files_and_takes_files_and_conversation_back() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[(
            "w1",
            "write-file",
            json!({"path": "a.txt", "content": "v1\n"}),
        )]),
        openai::reply_text("first done"),
        openai::reply_text("only talk"),
        openai::reply_tool_calls(&[(
            "e2",
            "edit-file",
            json!({"path": "a.txt", "old_string": "v1", "new_string": "v2"}),
        )]),
        openai::reply_text("second done"),
    ]);
    let env: Vec<(String, String)> = crate::support::model_env(&server, "openai");
    let t = Terminal::start_with(&repo, "escesc", "run", &env, "/help for commands");
    t.type_line("write the first file");
    t.wait_for_prompt_after("first done");
    t.type_line("just chat about it");
    t.wait_for_prompt_after("only talk");
    t.type_line("change the file");
    t.wait_for_prompt_after("second done");
    let read = |path: &str| std::fs::read_to_string(repo.path().join(path)).ok();
    assert_eq!(read("a.txt").as_deref(), Some("v2\n"));
    t.press(&["Escape", "Escape"]);
    let screen = t.wait_for("write the first file  · a.txt");
    let picker = screen
        .split("go back to before which prompt")
        .nth(1)
        .expect("the picker");
    assert!(!picker.contains("just chat"), "{screen}");
    let newest = picker.find("change the file  · a.txt");
    let oldest = picker.find("write the first file  · a.txt");
    assert!(
        newest.is_some_and(|n| oldest.is_some_and(|o| n < o)),
        "newest first: {screen}"
    );
    t.press(&["Enter"]);
    t.wait_for("b: files and conversation");
    t.press(&["b"]);
    let screen = t.wait_for_prompt_after("restored  a.txt");
    assert!(screen.contains("to before run 3"), "{screen}");
    assert_eq!(read("a.txt").as_deref(), Some("v1\n"));
    let session = repo.first_session();
    let contents: Vec<&str> = session["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert!(contents.contains(&"just chat about it"), "{contents:?}");
    assert!(!contents.contains(&"change the file"), "{contents:?}");

    // `/undo --force`: the last run not undone that changed files, at once.
    t.type_line("/undo --force");
    let screen = t.wait_for_prompt_after("removed   a.txt");
    assert!(
        screen.contains("undid run 1 of session") && screen.contains("write the first file"),
        "{screen}"
    );
    assert_eq!(read("a.txt"), None);
    t.type_line("/exit");
    t.wait_for("saved; continue with");
}

/// `/rewind` alone: a picker of the session's runs, newest first, with each one's prompt and
/// files; the one picked (typed to filter) has its files and conversation taken back to where
/// it began.
#[test]
fn rewind_picks_a_run_and_takes_files_and_conversation_back_to_where_it_began() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[(
            "w1",
            "write-file",
            json!({"path": "a.txt", "content": "v1\n"}),
        )]),
        openai::reply_text("first done"),
        openai::reply_tool_calls(&[
            (
                "e2",
                "edit-file",
                json!({"path": "a.txt", "old_string": "v1", "new_string": "v2"}),
            ),
            (
                "w2",
                "write-file",
                json!({"path": "b.txt", "content": "b\n"}),
            ),
        ]),
        openai::reply_text("second done"),
        openai::reply_text("third done"),
    ]);
    let t = Terminal::start(
        &repo,
        &server,
        "rewindpick",
        "run",
        &[],
        "/help for commands",
    );
    t.type_line("write the first file");
    t.wait_for_prompt_after("first done");
    t.type_line("change it and add another");
    t.wait_for_prompt_after("second done");
    let read = |path: &str| std::fs::read_to_string(repo.path().join(path)).ok();
    assert_eq!(read("a.txt").as_deref(), Some("v2\n"));
    t.type_line("/rewind");
    t.wait_for("rewind to before which run");
    let screen = t.wait_for("write the first file  · a.txt");
    let picker = screen
        .split("rewind to before which run")
        .nth(1)
        .expect("the picker");
    let newest = picker.find("change it and add another  · a.txt, b.txt");
    let oldest = picker.find("write the first file  · a.txt");
    assert!(
        newest.is_some_and(|n| oldest.is_some_and(|o| n < o)),
        "newest first: {screen}"
    );
    // Typing filters; Enter takes the run that matches.
    t.press(&["c", "h", "a", "n", "g", "e", "Enter"]);
    let screen = t.wait_for_prompt_after("removed   b.txt");
    assert!(screen.contains("to before run 2"), "{screen}");
    assert!(screen.contains("restored  a.txt"), "{screen}");
    assert_eq!(read("a.txt").as_deref(), Some("v1\n"));
    assert_eq!(read("b.txt"), None);
    let session = repo.first_session();
    let contents: Vec<&str> = session["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert!(contents.contains(&"first done"), "{contents:?}");
    assert!(!contents.contains(&"second done"), "{contents:?}");
    // The next prompt goes on from there.
    t.type_line("go on");
    t.wait_for_prompt_after("third done");
    t.type_line("/exit");
    t.wait_for("saved; continue with");
}

/// The approval mode is on the first screen and `/mode` switches it; in plan mode nothing is
/// changed, and a yes to "carry out the plan?" switches to on-request and goes on.
#[test]
fn the_approval_mode_is_shown_and_switched_and_a_plan_is_carried_out_after_a_yes() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[(
            "c1",
            "write-file",
            json!({"path": "planned.txt", "content": "x\n"}),
        )]),
        openai::reply_text("Plan: write planned.txt."),
        openai::reply_tool_calls(&[(
            "c2",
            "write-file",
            json!({"path": "planned.txt", "content": "x\n"}),
        )]),
        openai::reply_text("written"),
    ]);
    let t = Terminal::start(&repo, &server, "mode", "run", &[], "/help for commands");
    t.wait_for("approval: on-request");
    t.type_line("/mode plan");
    t.wait_for("approval: plan");
    t.type_line("write planned.txt");
    let screen = t.wait_for("carry out the plan?");
    // Plan mode holding the write is what the user chose, not an error.
    assert!(
        screen.contains("not run: plan mode changes nothing"),
        "{screen}"
    );
    assert!(!screen.contains("PermissionDenied"), "{screen}");
    assert!(!screen.contains("Declined"), "{screen}");
    assert!(!repo.path().join("planned.txt").exists());
    // One key, no Enter.
    t.press(&["y"]);
    t.wait_for_prompt_after("written");
    assert!(repo.path().join("planned.txt").exists());
    t.type_line("/exit");
    t.wait_for("saved; continue with");
}

#[test]
fn first_contact_without_a_model_asks_for_it_writes_the_user_config_and_goes_on() {
    let repo = Repo::new();
    let server = MockServer::start(vec![openai::reply_text("hello, configured")]);
    // A local server needs no key: provider and model are asked, then the session opens.
    let env = vec![("NOP_BASE_URL".to_string(), server.openai_base_url())];
    let t = Terminal::start_with(&repo, "setup", "", &env, "provider (openai or anthropic)");
    t.type_line("");
    t.wait_for("model (such as gpt-4.1)");
    t.type_line("mock-model");
    t.wait_for("/help for commands");
    t.type_line("hi");
    t.wait_for_prompt_after("hello, configured");
    t.type_line("/exit");
    t.wait_for("saved; continue with");
    let config = std::fs::read_to_string(repo.path().join(".config/nop/config.yml"))
        .expect("the user config");
    assert!(config.contains("model: mock-model"), "{config}");
    assert_eq!(server.requests()[0].body["model"], "mock-model");

    // A remote provider without a key in the environment: the variable's name is asked too.
    let repo = Repo::new();
    let t = Terminal::start_with(
        &repo,
        "setup-key",
        "",
        &[],
        "provider (openai or anthropic)",
    );
    t.type_line("anthropic");
    t.wait_for("model (such as claude-sonnet-4-5)");
    t.type_line("claude-x");
    t.wait_for("variable that holds your API key");
    t.type_line("MY_CLAUDE_KEY");
    t.wait_for("MY_CLAUDE_KEY is not set here: export MY_CLAUDE_KEY=");
    let config = std::fs::read_to_string(repo.path().join(".config/nop/config.yml"))
        .expect("the user config");
    for line in [
        "kind: anthropic",
        "model: claude-x",
        "api_key_env: MY_CLAUDE_KEY",
    ] {
        assert!(config.contains(line), "{config}");
    }
}

/// The prompt editor: Alt-Enter and Ctrl-J insert a newline, Enter sends the whole text.
#[test]
fn alt_enter_and_ctrl_j_insert_a_newline_and_enter_sends() {
    let repo = Repo::new();
    let server = MockServer::start(vec![openai::reply_text("three lines read")]);
    let t = Terminal::start(&repo, &server, "newline", "run", &[], "/help for commands");
    t.press(&["first line"]);
    t.press(&["M-Enter"]);
    t.press(&["second"]);
    t.press(&["C-j"]);
    t.type_line("third");
    t.wait_for_prompt_after("three lines read");
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        requests[0].user_messages().last().map(String::as_str),
        Some("first line\nsecond\nthird")
    );
    t.type_line("/exit");
    t.wait_for("saved; continue with");
}

/// Tab: `/` completes the slash commands (listed with their help when there are several),
/// a word completes a path, `@` and a fuzzy part of a name completes a file git would list.
#[test]
fn tab_completes_slash_commands_paths_and_at_files_fuzzily() {
    let repo = Repo::new();
    std::fs::create_dir_all(repo.path().join("src/deep")).expect("dirs");
    std::fs::write(repo.path().join("src/deep/zqparser.rs"), "fn parse() {}\n").expect("write");
    std::fs::create_dir_all(repo.path().join("build")).expect("dirs");
    std::fs::write(repo.path().join("build/zqparser.rs"), "").expect("write");
    std::fs::write(repo.path().join(".gitignore"), "build/\n").expect("write");
    let server = MockServer::start(vec![openai::reply_text("looked at it")]);
    let t = Terminal::start(&repo, &server, "complete", "run", &[], "/help for commands");
    t.press(&["/re"]);
    let screen = t.wait_for("pick a recent session");
    assert!(screen.contains("/rewind"), "{screen}");
    // One match is put in place.
    t.press(&["C-u", "/sta", "Tab"]);
    t.wait_for("› /status");
    t.press(&["C-u", "cat sr", "Tab"]);
    t.wait_for("› cat src/");
    t.press(&["C-u", "explain @zqprs", "Tab"]);
    t.wait_for("› explain @src/deep/zqparser.rs");
    t.type_line("please");
    t.wait_for_prompt_after("looked at it");
    let users = server.requests()[0].user_messages();
    let last = users.last().expect("a user message");
    assert!(
        last.contains("explain @src/deep/zqparser.rs please"),
        "{last}"
    );
    assert!(last.contains("fn parse()"), "{last}");
    t.type_line("/exit");
    t.wait_for("saved; continue with");
}

/// Shift+Tab steps through the approval modes keeping what is typed; the prompt names a mode
/// other than the default, a line says each change, and Ctrl-C still clears the line.
#[test]
fn shift_tab_cycles_the_approval_mode_and_keeps_what_is_typed() {
    let repo = Repo::new();
    let server = MockServer::start(vec![openai::reply_text("kept it")]);
    let t = Terminal::start(&repo, &server, "shifttab", "run", &[], "/help for commands");
    t.press(&["keep this"]);
    t.press(&["BTab"]);
    t.wait_for("approval: always ·");
    t.wait_for("always › keep this");
    t.press(&["BTab"]);
    t.wait_for("plan › keep this");
    t.press(&["BTab"]);
    t.wait_for("never › keep this");
    t.press(&["BTab"]);
    t.wait_for("approval: on-request ·");
    t.press(&["Enter"]);
    t.wait_for_prompt_after("kept it");
    assert_eq!(
        server.requests()[0]
            .user_messages()
            .last()
            .map(String::as_str),
        Some("keep this")
    );
    t.press(&["C-c"]);
    t.wait_for("Ctrl-C again");
    t.type_line("/exit");
    t.wait_for("saved; continue with");
}

/// Typing `/` shows the matching commands with their help, narrowed as more is typed.
/// The `/` and `@` menus are live lists: arrows move the highlight, Tab takes it, Enter runs
/// the highlighted command (or takes the highlighted file), typing filters; nothing garbles at
/// 100×30 or 80×24.
#[test]
fn the_slash_and_at_menus_are_live_lists_at_any_size() {
    let repo = Repo::new();
    std::fs::create_dir_all(repo.path().join("src")).expect("dirs");
    std::fs::write(repo.path().join("src/zqalpha.rs"), "fn alpha() {}\n").expect("write");
    std::fs::write(repo.path().join("src/zqbeta.rs"), "fn beta() {}\n").expect("write");
    let server = MockServer::start(vec![openai::reply_text("read it")]);
    let t = Terminal::start(&repo, &server, "livemenu", "run", &[], "/help for commands");
    t.resize(100, 30);
    t.press(&["/re"]);
    let screen = t.wait_for("› /resume");
    assert!(screen.contains("/rewind"), "{screen}");
    assert!(!screen.contains("/verbose"), "{screen}");
    t.press(&["Down"]);
    t.wait_for("› /rewind");
    // Tab takes the highlighted one; the menu closes, nothing is left doubled.
    t.press(&["Tab"]);
    let screen = t.wait_for("› /rewind\n");
    assert!(!screen.contains("/resume"), "{screen}");
    assert!(!screen.contains("/rewindnd"), "{screen}");
    // Enter runs the one match of what is typed.
    t.press(&["C-u", "/st", "Enter"]);
    let screen = t.wait_for("model    mock-model");
    assert!(!screen.contains("unknown command"), "{screen}");
    assert!(!screen.contains("did you mean"), "{screen}");
    // Two files match (the shorter path first): ↓ picks the second, Enter puts it in place
    // without sending.
    t.resize(80, 24);
    t.press(&["explain @zq"]);
    let screen = t.wait_for("@src/zqalpha.rs");
    assert!(screen.contains("› @src/zqbeta.rs"), "{screen}");
    t.press(&["Down", "Enter"]);
    t.wait_for("› explain @src/zqalpha.rs\n");
    t.type_line("please");
    t.wait_for_prompt_after("read it");
    let users = server.requests()[0].user_messages();
    let last = users.last().expect("a user message");
    assert!(last.contains("explain @src/zqalpha.rs please"), "{last}");
    t.type_line("/exit");
    t.wait_for("saved; continue with");
}

#[test]
fn esc_during_a_command_shows_and_hands_the_model_what_it_printed_so_far() {
    let repo = Repo::new();
    let gate = repo.path().join("gate");
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[(
            "c1",
            "shell",
            json!({"command": format!("echo first partial line; echo second partial line >&2; while [ ! -e {} ]; do sleep 0.02; done", gate.display())}),
        )]),
        openai::reply_text("noted"),
    ]);
    let t = Terminal::start(&repo, &server, "partial", "run", &[], "/help for commands");
    t.type_line("run it");
    t.wait_for("esc to interrupt");
    // The command has printed (the live tail shows it) before Esc.
    t.wait_for("first partial line");
    t.press(&["Escape"]);
    let screen = t.wait_for_prompt_after("interrupted");
    assert!(screen.contains("first partial line"), "{screen}");
    t.type_line("go on");
    t.wait_for_prompt_after("noted");
    let result = server.result_of("c1");
    assert!(
        result.contains("aborted by user")
            && result.contains("first partial line")
            && result.contains("second partial line"),
        "{result}"
    );
    t.type_line("/exit");
}

/// A message queued while the agent works and not read yet comes back into the prompt at
/// Esc (as in Claude Code): it never goes out silently with the next prompt.
#[test]
fn esc_puts_a_queued_message_not_read_yet_back_into_the_prompt() {
    let repo = Repo::new();
    let gate = repo.path().join("gate");
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[(
            "c1",
            "shell",
            json!({"command": format!("echo waiting; while [ ! -e {} ]; do sleep 0.02; done", gate.display())}),
        )]),
        openai::reply_text("answered the queued one"),
    ]);
    let t = Terminal::start(&repo, &server, "unqueue", "run", &[], "/help for commands");
    t.type_line("run it");
    t.wait_for("waiting");
    t.type_line("also check the docs");
    // What was queued is shown, not only that something was.
    t.wait_for("queued (position 1): also check the docs");
    t.press(&["Escape"]);
    // The text is in the editor, ready to send or change.
    let screen = t.wait_for("› also check the docs");
    assert!(screen.contains("back in the prompt"), "{screen}");
    // The user's stop is not shown as an error.
    assert!(screen.contains("⎿ stopped by you after"), "{screen}");
    assert!(!screen.contains("error"), "{screen}");
    let inbox = std::fs::read_dir(repo.path().join(".nop/sessions"))
        .expect("sessions")
        .flatten()
        .flat_map(|s| {
            std::fs::read_dir(s.path().join("inbox"))
                .into_iter()
                .flatten()
        })
        .flatten()
        .filter(|f| f.file_name().to_string_lossy().ends_with(".json"))
        .count();
    assert_eq!(inbox, 0, "taken out of the queue");
    t.press(&["Enter"]);
    t.wait_for_prompt_after("answered the queued one");
    let last = server.requests().last().expect("request").body.to_string();
    assert_eq!(last.matches("also check the docs").count(), 1, "{last}");
    t.type_line("/exit");
}

/// A request that fails after part of its answer was shown goes again; the part shown goes
/// from the screen, so the answer is there once.
#[test]
fn a_retried_stream_replaces_the_part_of_the_answer_shown() {
    let repo = Repo::new();
    let cut = MockResponse::Sse {
        chunks: vec![
            openai::role(),
            openai::text("Partial opening paragraph.\n\n"),
            openai::text("Partial second paragraph.\n\n"),
            openai::text("And a third"),
            openai::text(" one"),
        ],
        delay: std::time::Duration::from_millis(800),
    };
    let server = MockServer::start(vec![
        cut,
        openai::reply_text("Whole opening paragraph.\n\nThe rest of it."),
    ]);
    let t = Terminal::start(&repo, &server, "retried", "run", &[], "/help for commands");
    t.type_line("explain");
    t.wait_for("Partial opening paragraph.");
    let screen = t.wait_for_prompt_after("The rest of it.");
    assert!(screen.contains("retrying"), "{screen}");
    // The note wraps between words.
    assert!(screen.contains("retrying in 0.0 s"), "{screen}");
    assert!(!screen.contains("Partial opening paragraph."), "{screen}");
    assert_eq!(
        screen.matches("Whole opening paragraph.").count(),
        1,
        "{screen}"
    );
    t.type_line("/exit");
}

/// At 80 columns the header, the approval mode and an approval question's answers break
/// between words (the answers between answers); `/help` lists the keys.
#[test]
fn at_80_columns_nothing_breaks_mid_word_and_help_lists_the_keys() {
    let repo = Repo::new();
    std::fs::write(
        repo.path().join(".nop/.permissions/agent-coder.yml"),
        "agent: coder\ntools:\n  allowed: [\"*\"]\nfile-access:\n  - pattern: \"notes/**\"\n    access: ask\n  - pattern: \"**\"\n    access: read\n",
    )
    .expect("permissions");
    repo.trust();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[(
            "w1",
            "write-file",
            json!({"path": "notes/a-rather-long-directory-name/today.md", "content": "x"}),
        )]),
        openai::reply_text("did not write"),
    ]);
    let t = Terminal::start_sized(&repo, &server, "narrow", (80, 24), "Ctrl-D leaves");
    let screen = t.wait_for("Shift+Tab or /mode to change");
    // Every row ends at a word's end and the next begins a word: no word cut in two.
    let words_whole = |screen: &str| {
        for line in screen.lines() {
            assert!(line.chars().count() <= 80, "{line}");
        }
        for pair in screen.lines().collect::<Vec<_>>().windows(2) {
            let full = pair[0].chars().count() == 80;
            assert!(
                !full,
                "a row filled to the edge wraps:\n{}\n{}",
                pair[0], pair[1]
            );
        }
    };
    words_whole(&screen);
    assert!(screen.contains("Ctrl-D leaves"), "{screen}");
    t.type_line("/help");
    let screen = t.wait_for("keys:");
    assert!(screen.contains("Shift+Tab"), "{screen}");
    assert!(screen.contains("Esc Esc"), "{screen}");
    assert!(screen.contains("Ctrl-O"), "{screen}");
    t.type_line("/clear");
    t.wait_for("new session: it starts with your next prompt");
    t.type_line("note it");
    let screen = t.wait_for("[t] no, and tell it what to do instead");
    words_whole(&screen);
    assert!(screen.contains("[n] no"), "{screen}");
    t.press(&["n"]);
    t.wait_for_prompt_after("did not write");
    t.type_line("/exit");
}

#[test]
fn ctrl_o_shows_the_last_result_in_full_and_keeps_what_is_typed() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("c1", "shell", json!({"command": "seq -f 'row%02g' 1 12"}))]),
        openai::reply_text("listed"),
    ]);
    let t = Terminal::start(&repo, &server, "ctrlo", "run", &[], "/help for commands");
    t.type_line("count");
    let screen = t.wait_for_prompt_after("listed");
    // The result is cut to its last lines.
    assert!(
        screen.contains("row12") && !screen.contains("row01"),
        "{screen}"
    );
    t.press(&["a", "b", "C-o"]);
    // Printed in one piece: the whole result is there once its heading is.
    let screen = t.wait_for("last result (shell)");
    assert!(screen.contains("row01"), "{screen}");
    // What was typed is still there.
    t.wait_for("› ab");
    t.press(&["C-u"]);
    t.type_line("/exit");
}

#[test]
fn a_running_command_shows_its_last_lines_under_the_status_line() {
    let repo = Repo::new();
    let gate = repo.path().join("gate");
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[(
            "c1",
            "shell",
            json!({"command": format!("for i in 1 2 3 4 5; do echo tick$i; done; while [ ! -e {} ]; do sleep 0.02; done", gate.display())}),
        )]),
        openai::reply_text("all ticked"),
    ]);
    let t = Terminal::start(&repo, &server, "tail", "run", &[], "/help for commands");
    t.type_line("tick");
    let screen = t.wait_for("│ tick5");
    assert!(
        screen.contains("│ tick3") && !screen.contains("│ tick2"),
        "{screen}"
    );
    assert!(screen.contains("esc to interrupt"), "{screen}");
    std::fs::write(&gate, "").expect("open the gate");
    let screen = t.wait_for_prompt_after("all ticked");
    // The live tail is gone with the status line.
    assert!(!screen.contains("│ tick"), "{screen}");
    t.type_line("/exit");
}

#[test]
fn a_model_without_its_key_is_said_before_the_session_opens() {
    let repo = Repo::new();
    // A model is configured, no key for its server: nop says so at once, with the fix.
    let env = vec![("NOP_MODEL".to_string(), "gpt-4.1".to_string())];
    let t = Terminal::start_with(
        &repo,
        "nokey",
        "",
        &env,
        "no API key for https://api.openai.com/v1",
    );
    let screen = t.screen();
    assert!(screen.contains("export OPENAI_API_KEY"), "{screen}");
    assert!(
        !screen.contains("/help for commands"),
        "the session opened:\n{screen}"
    );
}
