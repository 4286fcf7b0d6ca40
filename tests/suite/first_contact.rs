//! What a new user does on day one (issue 17): `nop "PROMPT"`, piping a file into a prompt,
//! continuing the last session, choosing the model, and a session list that reads.

use std::fs;

use serde_json::{Value, json};

use crate::support::Repo;
use crate::support::mock::{MockResponse, MockServer, openai};

fn json_of(text: &str) -> Value {
    serde_json::from_str(text).expect("json")
}

#[test]
fn a_prompt_without_a_command_runs_it() {
    let repo = Repo::new();
    let server = MockServer::start(vec![openai::reply_text("hello from the agent")]);
    let out = repo.model_ok(&server, &["say hi"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("hello from the agent"));
    assert_eq!(server.requests()[0].user_messages(), vec!["say hi"]);
    // A mistyped command is refused, not sent to the model.
    let out = repo
        .nop_model(&server, "openai")
        .args(["sesions"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn piped_input_goes_with_the_prompt_as_a_fenced_block() {
    let repo = Repo::new();
    let server = MockServer::start(vec![openai::reply_text("it is a null pointer")]);
    let out = repo
        .nop_model(&server, "openai")
        .args(["run", "explain this"])
        .write_stdin("error: null pointer at line 3\n")
        .output()
        .expect("run");
    crate::support::assert_ok(&out);
    let users = server.requests()[0].user_messages();
    assert_eq!(
        users,
        vec!["explain this\n\n```\nerror: null pointer at line 3\n```"]
    );
}

#[test]
fn continue_takes_the_last_session_and_model_picks_the_model() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_text("first answer"),
        openai::reply_text("second answer"),
        openai::reply_text("third answer"),
    ]);
    repo.model_ok(&server, &["run", "first"]);
    let id = repo.first_session()["sessionId"]
        .as_str()
        .expect("id")
        .to_string();
    repo.model_ok(&server, &["run", "-c", "--model", "other-model", "second"]);
    let requests = server.requests();
    assert_eq!(requests[1].user_messages(), vec!["first", "second"]);
    assert_eq!(requests[1].body["model"], "other-model");
    assert_eq!(requests[0].body["model"], "mock-model");
    // `nop resume ID PROMPT` goes on with it too.
    repo.model_ok(&server, &["resume", &id[..8], "third"]);
    assert_eq!(
        server.requests()[2].user_messages(),
        vec!["first", "second", "third"]
    );
    let list = json_of(&repo.run(&["sessions", "list", "--json"]));
    assert_eq!(list.as_array().map(Vec::len), Some(1));
}

#[test]
fn continue_without_a_session_says_so() {
    let repo = Repo::new();
    let server = MockServer::start(vec![]);
    let out = repo
        .nop_model(&server, "openai")
        .args(["run", "-c", "go on"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no session to continue"));
}

#[test]
fn the_session_list_has_titles_newest_first_and_hides_called_sessions() {
    let repo = Repo::new();
    let old = repo
        .session()
        .user("fix the parser\nit chokes on arrays")
        .write();
    // A subagent's session, which the list leaves out.
    repo.session().called_by(&old).write();
    let new = repo.session().user("write the docs").write();

    let list = json_of(&repo.run(&["sessions", "list", "--json"]));
    let ids: Vec<&str> = list
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    assert_eq!(ids, vec![new.as_str(), old.as_str()]);
    assert_eq!(list[1]["title"], "fix the parser");
    let all = json_of(&repo.run(&["sessions", "list", "--json", "--all"]));
    assert_eq!(all.as_array().map(Vec::len), Some(3));
    let one = json_of(&repo.run(&["sessions", "list", "--json", "--limit", "1"]));
    assert_eq!(one.as_array().map(Vec::len), Some(1));
    let text = repo.run(&["sessions", "list"]);
    assert!(
        text.lines().next().is_some_and(|l| l.ends_with("TITLE")),
        "{text}"
    );
    assert!(text.contains("write the docs"), "{text}");
}

/// The README's first command, without the install: in a fresh git repository with no `.nop/`
/// and a HOME with nothing in it, set the model once for the user, then run a task.
#[test]
fn the_readme_first_commands_work_in_a_fresh_repository_with_only_a_user_config() {
    let base = crate::support::repo_dir();
    let repo = base.path().join("project");
    let home = base.path().join("home");
    fs::create_dir_all(&repo).expect("repo");
    fs::create_dir_all(&home).expect("home");
    let git = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(&repo)
        .status()
        .expect("git");
    assert!(git.success());
    let server = MockServer::start(vec![openai::reply_text("It is a small demo.")]);
    let nop = |args: &[&str]| {
        let out = assert_cmd::Command::cargo_bin("nop")
            .expect("nop")
            .current_dir(&repo)
            .env_clear()
            .env("HOME", &home)
            .env("OPENAI_API_KEY", "sk-test")
            .args(args)
            .output()
            .expect("run");
        assert_eq!(
            out.status.code(),
            Some(0),
            "nop {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    };
    // Where the model is: set once, for the user (a real user sets only the model).
    nop(&[
        "config",
        "set",
        "base_url",
        &server.openai_base_url(),
        "--user",
    ]);
    nop(&["config", "set", "model", "gpt-4.1", "--user"]);
    let out = nop(&["say what this repository does"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("It is a small demo."));
    let requests = server.requests();
    assert_eq!(requests[0].body["model"], "gpt-4.1");
    assert!(home.join(".config/nop/config.yml").is_file());
    let mut made: Vec<String> = fs::read_dir(repo.join(".nop"))
        .expect(".nop")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    made.sort();
    assert_eq!(made, vec!["checkpoints", "logs", "sessions"]);
}

#[test]
fn a_pipe_that_never_writes_does_not_hold_the_run() {
    let repo = Repo::new();
    let server = MockServer::start(vec![openai::reply_text("answered anyway")]);
    let mut child = repo
        .nop_model_process(&server, "openai")
        .args(["run", "explain this"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    // Held open, never written: as `ssh host nop "…"` leaves it.
    let _open = child.stdin.take();
    let status = child.wait().expect("wait");
    let mut stderr = String::new();
    use std::io::Read;
    if let Some(mut err) = child.stderr.take() {
        err.read_to_string(&mut stderr).expect("stderr");
    }
    assert!(status.success(), "{stderr}");
    assert!(
        stderr.contains("nothing came on the standard input pipe"),
        "{stderr}"
    );
    assert_eq!(server.requests()[0].user_messages(), vec!["explain this"]);
}

/// Issue 28: what users of Claude Code and Codex type works: unquoted words, `-c`, `--model`,
/// `-p` (print mode), `exec` and `-r ID`.
#[test]
fn the_other_tools_habits_work() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_text("first answer"),
        openai::reply_text("second answer"),
        openai::reply_text("printed answer"),
        openai::reply_text("piped answer"),
        openai::reply_text("exec answer"),
        openai::reply_text("resumed answer"),
    ]);
    repo.model_ok(&server, &["fix", "the", "failing", "test"]);
    assert_eq!(
        server.requests()[0].user_messages(),
        vec!["fix the failing test"]
    );
    let id = repo.first_session()["sessionId"]
        .as_str()
        .expect("id")
        .to_string();
    repo.model_ok(&server, &["-c", "--model", "other-model", "go", "on"]);
    assert_eq!(
        server.requests()[1].user_messages(),
        vec!["fix the failing test", "go on"]
    );
    assert_eq!(server.requests()[1].body["model"], "other-model");
    // Print mode: the answer alone on stdout.
    let out = repo.model_ok(&server, &["-p", "what is this?"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "printed answer"
    );
    // Without PROMPT it reads standard input.
    let out = repo
        .nop_model(&server, "openai")
        .args(["-p"])
        .write_stdin("a question on stdin\n")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "piped answer");
    assert_eq!(
        server.requests()[3].user_messages(),
        vec!["a question on stdin\n"]
    );
    let out = repo.model_ok(&server, &["exec", "run", "the", "tests"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "exec answer");
    assert_eq!(server.requests()[4].user_messages(), vec!["run the tests"]);
    repo.model_ok(&server, &["-r", &id, "and again"]);
    assert_eq!(
        server.requests()[5].user_messages(),
        vec!["fix the failing test", "go on", "and again"]
    );
}

#[test]
fn resume_lists_answered_sessions_newest_first_and_a_fork_by_its_own_first_prompt() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_text("parsed"),
        MockResponse::status(400, r#"{"error": {"message": "bad request"}}"#),
        openai::reply_text("lexed"),
    ]);
    repo.model_ok(&server, &["run", "fix the parser"]);
    let first = repo.first_session()["sessionId"]
        .as_str()
        .expect("id")
        .to_string();
    // A one-word run that failed before any answer.
    let out = repo
        .nop_model(&server, "openai")
        .args(["run", "hello"])
        .output()
        .expect("run");
    assert_ne!(out.status.code(), Some(0));
    let fork = repo.run(&["fork", &first]).trim().to_string();
    let listed = repo.run(&["resume"]);
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(lines.len(), 2, "{listed}");
    assert!(lines[0].contains(&fork) && lines[0].contains("(fork) fix the parser"));
    repo.model_ok(&server, &["run", "--session", &fork, "now the lexer"]);
    let listed = repo.run(&["resume"]);
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(lines.len(), 2, "{listed}");
    assert!(
        lines[0].contains(&fork) && lines[0].ends_with("now the lexer"),
        "{listed}"
    );
    assert!(
        lines[1].contains(&first) && lines[1].ends_with("fix the parser"),
        "{listed}"
    );
    assert!(!listed.contains("hello"), "{listed}");
}

#[test]
fn without_a_model_a_headless_run_says_the_config_set_command_at_once() {
    let repo = Repo::new();
    let out = repo.nop().args(["run", "hello"]).output().expect("run");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no model configured")
            && stderr.contains("`nop config set model MODEL --user`"),
        "{stderr}"
    );
    assert!(!stderr.contains("API key"), "{stderr}");
    let list = json_of(&repo.run(&["sessions", "list", "--json", "--all"]));
    assert_eq!(list, json!([]));
}

/// A run that failed before the model said anything leaves no noise in `nop sessions list`
/// (`--all` still shows it).
#[test]
fn a_run_that_failed_at_once_is_not_in_the_session_list() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        MockResponse::status(400, r#"{"error": {"message": "bad request"}}"#),
        openai::reply_text("answered"),
    ]);
    let failed = repo
        .nop_model(&server, "openai")
        .args(["run", "oops"])
        .output()
        .expect("run");
    assert_ne!(failed.status.code(), Some(0));
    let ok = repo
        .nop_model(&server, "openai")
        .args(["run", "fine"])
        .output()
        .expect("run");
    assert_eq!(ok.status.code(), Some(0));
    let listed: serde_json::Value =
        serde_json::from_str(&repo.run(&["sessions", "list", "--json"])).expect("json");
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
    let all: serde_json::Value =
        serde_json::from_str(&repo.run(&["sessions", "list", "--all", "--json"])).expect("json");
    assert_eq!(all.as_array().map(Vec::len), Some(2), "{all}");
}

/// A model without a key, headless: the message says the exact commands that fix it.
#[test]
fn without_a_key_a_headless_run_says_what_to_export_or_set() {
    let repo = Repo::new();
    let out = repo
        .nop()
        .env("NOP_MODEL", "gpt-4.1")
        .args(["run", "hi"])
        .output()
        .expect("run");
    assert_ne!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("export OPENAI_API_KEY=…"), "{stderr}");
    assert!(
        stderr.contains("nop config set provider.api_key_env NAME --user"),
        "{stderr}"
    );
}

/// A run interrupted before the model answered stays resumable: `nop resume` lists it.
#[test]
fn a_session_interrupted_before_its_answer_is_listed_to_resume() {
    let repo = Repo::new();
    let server = MockServer::start(vec![MockResponse::Stall {
        chunks: vec![openai::role()],
        hold: std::time::Duration::from_secs(30),
    }]);
    let child = repo
        .nop_model_process(&server, "openai")
        .args(["run", "refactor the parser"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    server.wait_for_requests(1, std::time::Duration::from_secs(15));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .expect("SIGINT");
    let status = child.wait_with_output().expect("wait").status;
    assert_eq!(status.code(), Some(130));
    let listed = repo.run(&["resume"]);
    assert!(listed.contains("refactor the parser"), "{listed}");
}

/// One time zone everywhere: the list says local time, as the picker does; JSON has the offset.
#[test]
fn the_session_list_says_local_time_and_json_has_the_offset() {
    let repo = Repo::new();
    let server = MockServer::start(vec![openai::reply_text("done")]);
    repo.model_ok(&server, &["run", "say hi"]);
    let tokyo = |args: &[&str]| {
        let out = repo
            .nop()
            .env("TZ", "Asia/Tokyo")
            .args(args)
            .output()
            .expect("list");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let list = json_of(&tokyo(&["sessions", "list", "--json"]));
    let updated = list[0]["updatedAt"]
        .as_str()
        .expect("updatedAt")
        .to_string();
    assert!(updated.ends_with("+09:00"), "{updated}");
    let at = chrono::DateTime::parse_from_rfc3339(&updated).expect("rfc 3339");
    let text = tokyo(&["sessions", "list"]);
    let local = at.format("%Y-%m-%d %H:%M:%S").to_string();
    assert!(text.contains(&local), "{local} not in {text}");
}

/// A run killed outside nop's control (kill -9) is not "running" for ever: the list says it
/// was interrupted, and `nop resume` offers it.
#[test]
fn a_killed_run_is_listed_as_interrupted_and_offered_to_resume() {
    let repo = Repo::new();
    let server = MockServer::start(vec![MockResponse::Stall {
        chunks: vec![openai::role()],
        hold: std::time::Duration::from_secs(30),
    }]);
    let mut child = repo
        .nop_model_process(&server, "openai")
        .args(["run", "port the lexer"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    server.wait_for_requests(1, std::time::Duration::from_secs(15));
    child.kill().expect("kill -9");
    child.wait().expect("wait");
    let list = repo.run(&["sessions", "list"]);
    assert!(list.contains("interrupted"), "{list}");
    assert!(!list.contains("running"), "{list}");
    let json = json_of(&repo.run(&["sessions", "list", "--json"]));
    assert_eq!(json[0]["status"], "running");
    assert_eq!(json[0]["interrupted"], true);
    let listed = repo.run(&["resume"]);
    assert!(listed.contains("port the lexer"), "{listed}");
}
