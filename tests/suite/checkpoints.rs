//! File checkpoints end to end, on the default configuration in a git repository under
//! /var/tmp: `nop undo` after a run that writes, edits and `rm`s through the shell; a user's
//! later edit kept and reported; a run killed before its end; `nop rewind` to a snapshot;
//! `nop fork --worktree` with two forks running at once; and what a hostile model could try
//! (a symbolic link where a directory was, a `.gitignore` that hides everything, the store).

use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::Repo;
use crate::support::git;
use crate::support::mock::{MockResponse, MockServer, RecordedRequest, openai};

fn write(repo: &Repo, path: &str, text: &str) {
    let path = repo.path().join(path);
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, text).expect("write");
}

fn read(dir: &Path, path: &str) -> Option<String> {
    std::fs::read_to_string(dir.join(path)).ok()
}

/// A repository as users have one: `nop init`, files committed with git, the root under
/// /var/tmp.
fn git_repo(files: &[(&str, &str)]) -> Repo {
    let repo = Repo::new();
    git(repo.path(), &["init", "-q"]);
    for (path, text) in files {
        write(&repo, path, text);
    }
    git(repo.path(), &["add", "-A"]);
    git(repo.path(), &["commit", "-qm", "start"]);
    repo
}

fn call(id: &str, tool: &str, args: Value) -> MockResponse {
    openai::reply_tool_calls(&[(id, tool, args)])
}

fn shell(id: &str, command: &str) -> MockResponse {
    call(id, "shell", json!({ "command": command }))
}

/// `nop args… --json` (or `--output-format json` for run): exit code and the JSON printed.
fn nop_json(repo: &Repo, server: Option<&MockServer>, args: &[&str]) -> (i32, Value, String) {
    let mut cmd = match server {
        Some(s) => repo.nop_model(s, "openai"),
        None => repo.nop(),
    };
    let out = cmd.args(args).output().expect("nop");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.code().unwrap_or(-1), value, stderr)
}

fn run(repo: &Repo, server: &MockServer, args: &[&str]) -> String {
    let mut all = vec!["run", "--output-format", "json"];
    all.extend_from_slice(args);
    let (code, result, stderr) = nop_json(repo, Some(server), &all);
    assert_eq!(code, 0, "{result} {stderr}");
    result["session_id"].as_str().expect("id").to_string()
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

#[test]
fn undo_puts_back_exactly_what_the_run_changed_through_write_edit_and_the_shell_and_keeps_a_later_user_edit()
 {
    let repo = git_repo(&[
        ("keep.txt", "untouched\n"),
        ("edit.txt", "hello world\n"),
        ("gone.txt", "delete me\n"),
        ("src/lib.rs", "pub fn f() {}\n"),
    ]);
    write(&repo, "notes-untracked.txt", "mine, not committed\n");
    let server = MockServer::start(vec![
        call(
            "c1",
            "write-file",
            json!({"path": "new.txt", "content": "by the agent\n"}),
        ),
        call(
            "c2",
            "edit-file",
            json!({"path": "edit.txt", "old_string": "world", "new_string": "nop"}),
        ),
        shell(
            "c3",
            "rm gone.txt notes-untracked.txt && mkdir -p made/deep && echo x > made/deep/by-shell.txt",
        ),
        openai::reply_text("done"),
    ]);
    let id = run(&repo, &server, &["change things"]);
    let root = repo.path();
    assert_eq!(read(root, "edit.txt").as_deref(), Some("hello nop\n"));
    assert_eq!(read(root, "gone.txt"), None);
    assert!(root.join("made/deep/by-shell.txt").exists());
    let turns = &repo.session_json(&id)["checkpoints"];
    assert_eq!(turns.as_array().map(Vec::len), Some(1), "{turns}");
    assert!(turns[0]["after"].is_string(), "{turns}");

    // The user edits a file the run wrote, and one it did not touch.
    write(&repo, "new.txt", "the user's version\n");
    write(&repo, "keep.txt", "the user's edit\n");
    let index_before = git(root, &["ls-files", "-s"]);
    let (code, undo, stderr) = nop_json(&repo, None, &["undo", "--json"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        strings(&undo["restored"]),
        ["edit.txt", "gone.txt", "notes-untracked.txt"]
    );
    assert_eq!(strings(&undo["removed"]), ["made/deep/by-shell.txt"]);
    assert_eq!(strings(&undo["kept"]), ["new.txt"]);
    assert_eq!(undo["session_id"], json!(id));

    assert_eq!(read(root, "edit.txt").as_deref(), Some("hello world\n"));
    assert_eq!(read(root, "gone.txt").as_deref(), Some("delete me\n"));
    assert_eq!(
        read(root, "notes-untracked.txt").as_deref(),
        Some("mine, not committed\n")
    );
    assert!(
        !root.join("made").exists(),
        "the directories the run made are gone too"
    );
    assert_eq!(
        read(root, "new.txt").as_deref(),
        Some("the user's version\n")
    );
    assert_eq!(read(root, "keep.txt").as_deref(), Some("the user's edit\n"));
    assert_eq!(read(root, "src/lib.rs").as_deref(), Some("pub fn f() {}\n"));
    // The user's git is as it was: index, branches, stash.
    assert_eq!(git(root, &["ls-files", "-s"]), index_before);
    assert_eq!(
        git(root, &["branch", "--format=%(refname:short)"])
            .lines()
            .count(),
        1
    );
    assert_eq!(git(root, &["stash", "list"]), "");
    assert!(
        !git(root, &["status", "--porcelain", "--untracked-files=all"])
            .contains(".nop/checkpoints"),
        "the store is never shown to git"
    );

    // The conversation knows; the run is undone once.
    let session = repo.session_json(&id);
    let last = session["messages"]
        .as_array()
        .and_then(|m| m.last())
        .cloned();
    let note = last
        .as_ref()
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default();
    assert!(
        note.contains("nop undo") && note.contains("kept as the user left them: new.txt"),
        "{note}"
    );
    assert!(session["checkpoints"][0]["undoneAt"].is_string());
    let again = repo.fail(&["undo", "--session", &id]);
    assert!(again.contains("undone already"), "{again}");

    // The text output names what it did.
    let shown = repo.run(&["sessions", "show", &id]);
    assert!(
        shown.contains("checkpoints of 1 runs (1 undone)"),
        "{shown}"
    );
}

/// Issue 43: `nop undo` passes over the runs that changed nothing, and when it keeps a file
/// you changed since, it names the one command that puts that back too; that command works,
/// and plain `nop undo` or `nop undo --force` afterwards names it again, never a dead end.
#[test]
fn undo_passes_over_runs_without_changes_and_names_the_one_command_for_what_it_kept() {
    let repo = git_repo(&[("a.txt", "a\n"), ("b.txt", "b\n")]);
    let server = MockServer::start(vec![
        call(
            "c1",
            "write-file",
            json!({"path": "a.txt", "content": "A\n"}),
        ),
        call(
            "c2",
            "write-file",
            json!({"path": "b.txt", "content": "B\n"}),
        ),
        openai::reply_text("both edited"),
        openai::reply_text("just talking"),
        openai::reply_text("still talking"),
    ]);
    let id = run(&repo, &server, &["edit both"]);
    run(&repo, &server, &["--session", &id, "what did you do?"]);
    run(&repo, &server, &["--session", &id, "and why?"]);
    write(&repo, "b.txt", "mine\n");

    let undone = repo.run(&["undo"]);
    let root = repo.path();
    assert!(
        undone.contains(&format!(
            "undid run 1 of session {id} (\"edit both\"; the 2 runs after it changed no file)"
        )),
        "{undone}"
    );
    assert!(undone.contains("restored  a.txt"), "{undone}");
    assert!(
        undone.contains("kept      b.txt (changed since; your version stays)"),
        "{undone}"
    );
    let command = format!("nop undo --session {id} --turn 1 --force");
    assert!(undone.contains(&command), "{undone}");
    assert_eq!(read(root, "a.txt").as_deref(), Some("a\n"));
    assert_eq!(read(root, "b.txt").as_deref(), Some("mine\n"));

    // Again, forced or not: nothing is left to undo, and the refusal names the command.
    for args in [&["undo"][..], &["undo", "--force"]] {
        let refused = repo.fail(args);
        assert!(
            refused.contains("nothing to undo")
                && refused.contains("kept b.txt")
                && refused.contains(&command),
            "{refused}"
        );
    }
    let refused = repo.fail(&["undo", "--session", &id, "--turn", "1"]);
    assert!(
        refused.contains("undone already") && refused.contains(&command),
        "{refused}"
    );

    // The command named puts the kept file back as it was before the run.
    let args: Vec<&str> = command.split(' ').skip(1).collect();
    let again = repo.run(&args);
    assert!(
        again.contains(&format!("undid run 1 of session {id} again")),
        "{again}"
    );
    assert!(again.contains("restored  b.txt"), "{again}");
    assert!(!again.contains("kept"), "{again}");
    assert_eq!(read(root, "b.txt").as_deref(), Some("b\n"));
    assert_eq!(read(root, "a.txt").as_deref(), Some("a\n"));
    let refused = repo.fail(&["undo"]);
    assert!(
        refused.contains("nothing to undo") && !refused.contains("--turn"),
        "{refused}"
    );
    let notes: Vec<String> = repo.session_json(&id)["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter_map(|m| m["content"].as_str())
        .filter(|t| t.starts_with("The user ran `nop undo`"))
        .map(str::to_string)
        .collect();
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert!(notes[1].contains("reverted again"), "{notes:?}");
}

/// A rewind to a run that keeps a file you changed since names the command that puts it back
/// too, and that command does.
#[test]
fn a_rewind_that_keeps_a_file_names_the_command_that_puts_it_back() {
    let repo = git_repo(&[("a.txt", "a\n")]);
    let server = MockServer::start(vec![
        call(
            "c1",
            "write-file",
            json!({"path": "a.txt", "content": "A\n"}),
        ),
        openai::reply_text("done"),
    ]);
    let id = run(&repo, &server, &["shout a"]);
    write(&repo, "a.txt", "mine\n");
    let rewound = repo.run(&["rewind", "--session", &id, "--turn", "1", "--files"]);
    let command = format!("nop rewind --session {id} --turn 1 --files --force");
    assert!(
        rewound.contains("kept      a.txt") && rewound.contains(&command),
        "{rewound}"
    );
    assert_eq!(read(repo.path(), "a.txt").as_deref(), Some("mine\n"));
    let args: Vec<&str> = command.split(' ').skip(1).collect();
    let again = repo.run(&args);
    assert!(again.contains("restored  a.txt"), "{again}");
    assert_eq!(read(repo.path(), "a.txt").as_deref(), Some("a\n"));
}

/// Issue 43: `nop undo` right after `nop fork` undoes the parent's last run from the fork, whose
/// conversation and files are the parent's; the parent's record is left as it was.
#[test]
fn undo_right_after_a_fork_undoes_the_run_the_fork_carries() {
    let repo = git_repo(&[("a.txt", "a\n")]);
    let server = MockServer::start(vec![
        call(
            "c1",
            "write-file",
            json!({"path": "a.txt", "content": "A\n"}),
        ),
        openai::reply_text("done"),
    ]);
    let parent = run(&repo, &server, &["shout a"]);
    let child = repo.run(&["fork", &parent]).trim().to_string();
    assert_eq!(
        repo.session_json(&child)["checkpoints"],
        repo.session_json(&parent)["checkpoints"]
    );
    let (code, undo, stderr) = nop_json(&repo, None, &["undo", "--json"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(undo["session_id"], json!(child), "{undo}");
    assert_eq!(undo["prompt"], json!("shout a"), "{undo}");
    assert_eq!(strings(&undo["restored"]), ["a.txt"], "{undo}");
    assert_eq!(read(repo.path(), "a.txt").as_deref(), Some("a\n"));
    assert!(repo.session_json(&child)["checkpoints"][0]["undoneAt"].is_string());
    assert!(repo.session_json(&parent)["checkpoints"][0]["undoneAt"].is_null());
}

#[test]
fn a_run_that_never_ended_is_undone_only_with_force() {
    let repo = git_repo(&[("a.txt", "before\n")]);
    let server = MockServer::start(vec![
        call(
            "c1",
            "write-file",
            json!({"path": "a.txt", "content": "during\n"}),
        ),
        openai::reply_text("done"),
    ]);
    let id = run(&repo, &server, &["write a"]);
    // As if the process had been killed before the run's end was recorded.
    let path = repo.session_dir(&id).join("session.json");
    let mut session = repo.session_json(&id);
    session["checkpoints"][0]
        .as_object_mut()
        .expect("turn")
        .remove("after");
    std::fs::write(&path, serde_json::to_string_pretty(&session).expect("json")).expect("write");
    let refused = repo.fail(&["undo", "--session", &id]);
    assert!(
        refused.contains("did not end normally")
            && refused.contains("a.txt")
            && refused.contains("--force"),
        "{refused}"
    );
    assert_eq!(
        read(repo.path(), "a.txt").as_deref(),
        Some("during\n"),
        "nothing changed"
    );
    repo.run(&["undo", "--session", &id, "--force"]);
    assert_eq!(read(repo.path(), "a.txt").as_deref(), Some("before\n"));
}

#[test]
fn rewind_takes_files_and_conversation_back_to_a_snapshot_and_can_be_rewound_itself() {
    let repo = git_repo(&[("base.txt", "base\n")]);
    let server = MockServer::start(vec![
        call(
            "c1",
            "write-file",
            json!({"path": "a.txt", "content": "v1\n"}),
        ),
        openai::reply_text("first done"),
        call(
            "c2",
            "edit-file",
            json!({"path": "a.txt", "old_string": "v1", "new_string": "v2"}),
        ),
        shell("c3", "rm base.txt && echo b > b.txt"),
        openai::reply_text("second done"),
    ]);
    let id = run(&repo, &server, &["first"]);
    let snap = repo.run(&["snapshot", &id]).trim().to_string();
    let at_snapshot = repo.session_json(&id)["messages"].as_array().map(Vec::len);
    run(&repo, &server, &["--session", &id, "second"]);
    let root = repo.path();
    assert_eq!(read(root, "a.txt").as_deref(), Some("v2\n"));

    // Files only: the conversation stays, with a note.
    let (code, files_only, stderr) = nop_json(
        &repo,
        None,
        &[
            "rewind",
            "--session",
            &id,
            "--to",
            &snap,
            "--files",
            "--json",
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        strings(&files_only["files"]["restored"]),
        ["a.txt", "base.txt"]
    );
    assert_eq!(strings(&files_only["files"]["removed"]), ["b.txt"]);
    assert_eq!(read(root, "a.txt").as_deref(), Some("v1\n"));
    assert_eq!(read(root, "base.txt").as_deref(), Some("base\n"));
    assert!(!root.join("b.txt").exists());
    let messages = repo.session_json(&id)["messages"].as_array().map(Vec::len);
    assert!(messages > at_snapshot, "the conversation is not rewound");

    // Rewinding to the state saved before that rewind brings the second run's files back.
    let saved = files_only["saved_as"].as_str().expect("saved_as");
    repo.run(&[
        "rewind",
        "--session",
        &id,
        "--to",
        saved,
        "--files",
        "--force",
    ]);
    assert_eq!(read(root, "a.txt").as_deref(), Some("v2\n"));
    assert!(root.join("b.txt").exists());

    // Both: files and conversation at the snapshot.
    let (code, both, stderr) = nop_json(
        &repo,
        None,
        &["rewind", "--session", &id, "--to", &snap, "--json"],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(read(root, "a.txt").as_deref(), Some("v1\n"));
    let session = repo.session_json(&id);
    assert_eq!(session["messages"].as_array().map(Vec::len), at_snapshot);
    assert_eq!(both["messages"][1], json!(at_snapshot));
    assert_eq!(session["status"], "idle");

    // An unknown snapshot is named.
    let bad = repo.fail(&["rewind", "--session", &id, "--to", "nosuchsnap"]);
    assert!(bad.contains("nosuchsnap"), "{bad}");
}

#[test]
fn rewind_to_a_turn_takes_files_and_conversation_back_to_where_it_began_and_keeps_a_later_user_edit()
 {
    let repo = git_repo(&[("base.txt", "base\n")]);
    let server = MockServer::start(vec![
        call(
            "c1",
            "write-file",
            json!({"path": "a.txt", "content": "v1\n"}),
        ),
        openai::reply_text("first done"),
        call(
            "c2",
            "edit-file",
            json!({"path": "a.txt", "old_string": "v1", "new_string": "v2"}),
        ),
        call(
            "c3",
            "write-file",
            json!({"path": "c.txt", "content": "c1\n"}),
        ),
        openai::reply_text("second done"),
        shell("c4", "rm base.txt"),
        openai::reply_text("third done"),
    ]);
    let id = run(&repo, &server, &["first"]);
    run(&repo, &server, &["--session", &id, "second"]);
    run(&repo, &server, &["--session", &id, "third"]);
    let root = repo.path();
    assert!(!root.join("base.txt").exists());
    // The user edits a file the second run wrote.
    write(&repo, "c.txt", "mine\n");
    let session = repo.session_json(&id);
    let messages_before = session["checkpoints"][1]["messagesBefore"].clone();
    assert_eq!(session["checkpoints"][1]["prompt"], "second");

    let (code, rewound, stderr) = nop_json(
        &repo,
        None,
        &["rewind", "--session", &id, "--turn", "2", "--json"],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(rewound["turn"], 2, "{rewound}");
    assert_eq!(
        strings(&rewound["files"]["restored"]),
        ["a.txt", "base.txt"]
    );
    assert_eq!(strings(&rewound["files"]["kept"]), ["c.txt"]);
    assert_eq!(read(root, "a.txt").as_deref(), Some("v1\n"));
    assert_eq!(read(root, "base.txt").as_deref(), Some("base\n"));
    assert_eq!(read(root, "c.txt").as_deref(), Some("mine\n"));
    let session = repo.session_json(&id);
    let messages = session["messages"].as_array().expect("messages");
    assert_eq!(json!(messages.len()), messages_before);
    assert_eq!(rewound["messages"][1], messages_before);
    assert!(
        messages.iter().all(|m| m["content"] != "second done"),
        "{messages:?}"
    );
    assert!(messages.iter().any(|m| m["content"] == "first done"));
    assert_eq!(session["status"], "idle");

    // The session as it was is a snapshot: rewinding to it brings the runs' files back (with
    // `--force`, as after a rewind to a snapshot).
    let saved = rewound["saved_as"].as_str().expect("saved_as");
    repo.run(&[
        "rewind",
        "--session",
        &id,
        "--to",
        saved,
        "--files",
        "--force",
    ]);
    assert_eq!(read(root, "a.txt").as_deref(), Some("v2\n"));

    // A run that is not there is named.
    let bad = repo.fail(&["rewind", "--session", &id, "--turn", "9"]);
    assert!(bad.contains("run 9") && bad.contains("1 to 3"), "{bad}");
}

/// Answers each request with the next of `script`, after both forks' first requests arrived:
/// the two runs are under way at the same time.
fn rendezvous(arrived: Arc<(Mutex<u32>, Condvar)>, script: Vec<MockResponse>) -> MockServer {
    let mut script = script.into_iter();
    let mut first = true;
    MockServer::start_with(Box::new(move |_request: &RecordedRequest| {
        if first {
            first = false;
            let (count, ready) = &*arrived;
            let mut n = count.lock().expect("lock");
            *n += 1;
            ready.notify_all();
            let (_n, timeout) = ready
                .wait_timeout_while(n, Duration::from_secs(60), |n| *n < 2)
                .expect("wait");
            assert!(!timeout.timed_out(), "the other fork never started");
        }
        script
            .next()
            .unwrap_or_else(|| openai::reply_text("nothing more"))
    }))
}

#[test]
#[expect(clippy::too_many_lines, reason = "a debt: listed in AGENTS.md")]
fn forks_into_worktrees_hold_the_snapshot_files_run_side_by_side_and_leave_the_parent_alone() {
    let repo = git_repo(&[("base.txt", "base\n"), ("src/main.rs", "fn main() {}\n")]);
    let server = MockServer::start(vec![
        call(
            "c1",
            "write-file",
            json!({"path": "a.txt", "content": "at S\n"}),
        ),
        call(
            "c2",
            "edit-file",
            json!({"path": "base.txt", "old_string": "base", "new_string": "base at S"}),
        ),
        openai::reply_text("first done"),
        call(
            "c3",
            "write-file",
            json!({"path": "a.txt", "content": "after S\n"}),
        ),
        shell("c4", "rm base.txt"),
        openai::reply_text("second done"),
    ]);
    let id = run(&repo, &server, &["first"]);
    let snap = repo.run(&["snapshot", &id]).trim().to_string();
    run(&repo, &server, &["--session", &id, "second"]);
    let root = repo.path();
    let parent_files = || (read(root, "a.txt"), read(root, "base.txt"));
    let parent_before = parent_files();
    assert_eq!(parent_before, (Some("after S\n".into()), None));

    let places = crate::support::repo_dir();
    let mut forks = Vec::new();
    for name in ["one", "two"] {
        let place = places.path().join(name);
        let place_text = place.to_string_lossy().into_owned();
        let (code, fork, stderr) = nop_json(
            &repo,
            None,
            &[
                "fork",
                &id,
                "--snapshot",
                &snap,
                "--worktree",
                &place_text,
                "--json",
            ],
        );
        assert_eq!(code, 0, "{stderr}");
        let dir = std::path::PathBuf::from(fork["worktree"].as_str().expect("worktree"));
        let child = fork["session_id"].as_str().expect("child").to_string();
        assert_eq!(fork["branch"], json!(format!("nop/{child}")));
        assert_eq!(read(&dir, "a.txt").as_deref(), Some("at S\n"));
        assert_eq!(read(&dir, "base.txt").as_deref(), Some("base at S\n"));
        assert_eq!(read(&dir, "src/main.rs").as_deref(), Some("fn main() {}\n"));
        assert!(
            dir.join(".nop/config.yml").exists(),
            "the configuration comes along"
        );
        assert!(
            dir.join(format!(".nop/sessions/{child}/session.json"))
                .exists()
        );
        // The parent's runs changed the parent's tree: the fork has none of its own to undo.
        let undo = repo
            .nop_in(&dir)
            .args(["undo", "--session", &child])
            .output()
            .expect("nop");
        let refused = String::from_utf8_lossy(&undo.stderr);
        assert!(
            !undo.status.success()
                && refused.contains(&format!("forked from session {id}"))
                && refused.contains(&format!("nop undo --session {id}")),
            "{refused}"
        );
        // git there shows the fork's changes against the branch's commit.
        let status = git(&dir, &["status", "--porcelain"]);
        assert!(
            status.contains(" M base.txt") && status.contains("?? a.txt"),
            "{status}"
        );
        forks.push((dir, child));
    }
    assert_eq!(
        parent_files(),
        parent_before,
        "forking left the parent's files alone"
    );
    let branches = git(root, &["branch", "--format=%(refname:short)"]);
    assert_eq!(
        branches.lines().filter(|b| b.starts_with("nop/")).count(),
        2,
        "{branches}"
    );

    // Both forks run at once, each in its own tree.
    let arrived = Arc::new((Mutex::new(0), Condvar::new()));
    let mut children = Vec::new();
    for (i, (dir, child)) in forks.iter().enumerate() {
        let text = format!("fork {i}\n");
        let server = rendezvous(
            arrived.clone(),
            vec![
                call("w", "write-file", json!({"path": "a.txt", "content": text})),
                shell("s", "rm src/main.rs"),
                openai::reply_text("fork done"),
            ],
        );
        let process = repo
            .nop_model_process(&server, "openai")
            .current_dir(dir)
            .args(["run", "--session", child, "--output-format", "json", "go"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn");
        children.push((process, server));
    }
    for (process, _server) in children {
        let out = process.wait_with_output().expect("wait");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for (i, (dir, _)) in forks.iter().enumerate() {
        assert_eq!(read(dir, "a.txt"), Some(format!("fork {i}\n")));
        assert!(!dir.join("src/main.rs").exists());
    }
    assert_eq!(parent_files(), parent_before);
    assert_eq!(read(root, "src/main.rs").as_deref(), Some("fn main() {}\n"));
}

#[test]
fn a_fork_into_a_worktree_outside_git_is_refused_and_leaves_nothing() {
    let repo = Repo::new();
    let id = repo.new_session();
    let refused = repo.fail(&["fork", &id, "--worktree"]);
    assert!(refused.contains("needs a git repository"), "{refused}");
    let sessions = std::fs::read_dir(repo.sessions_dir())
        .expect("sessions")
        .count();
    assert_eq!(sessions, 1);
}

#[test]
fn hostile_a_symlink_where_a_directory_was_is_never_written_through_and_the_store_is_read_only() {
    let repo = git_repo(&[
        ("docs/readme.md", "read me\n"),
        ("tracked.txt", "tracked\n"),
    ]);
    let outside = crate::support::repo_dir();
    let target = outside.path().to_string_lossy().into_owned();
    let server = MockServer::start(vec![
        // Hide everything from git, then change a tracked file and swap a directory for a link.
        shell(
            "c1",
            "printf '*\\n' > .gitignore && echo changed > tracked.txt",
        ),
        shell("c2", &format!("rm -rf docs && ln -s {target} docs")),
        // The checkpoint store is nop's, not the agent's.
        shell(
            "c3",
            "echo x > .nop/checkpoints/config; echo x > .nop/checkpoints/objects/evil",
        ),
        openai::reply_text("done"),
    ]);
    let id = run(&repo, &server, &["be sneaky"]);
    let root = repo.path();
    assert!(
        root.join("docs")
            .symlink_metadata()
            .expect("docs")
            .file_type()
            .is_symlink()
    );
    let config = std::fs::read_to_string(root.join(".nop/checkpoints/config")).expect("config");
    assert!(
        config.contains("[core]"),
        "the agent could not write the store: {config}"
    );
    assert!(!root.join(".nop/checkpoints/objects/evil").exists());

    let (code, undo, stderr) = nop_json(&repo, None, &["undo", "--session", &id, "--json"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        read(root, "tracked.txt").as_deref(),
        Some("tracked\n"),
        "{undo}"
    );
    assert!(root.join("docs").symlink_metadata().expect("docs").is_dir());
    assert_eq!(read(root, "docs/readme.md").as_deref(), Some("read me\n"));
    assert!(
        std::fs::read_dir(outside.path())
            .expect("outside")
            .next()
            .is_none(),
        "nothing was written through the link"
    );
    // The `.gitignore` that hides itself is a new ignored file: not recorded, so not removed
    // (README: what is recorded). What it tried to hide was put back all the same.
}

#[test]
fn a_relative_worktree_path_is_taken_from_where_the_command_was_given() {
    let repo = git_repo(&[("sub/file.txt", "in sub\n")]);
    let id = repo.new_session();
    let (code, fork, stderr) = nop_json(
        &repo,
        None,
        &["-C", "sub", "fork", &id, "--worktree", "wt", "--json"],
    );
    assert_eq!(code, 0, "{stderr}");
    let expected = repo
        .path()
        .join("sub/wt")
        .canonicalize()
        .expect("the worktree");
    assert_eq!(fork["worktree"], json!(expected));
    assert_eq!(read(&expected, "sub/file.txt").as_deref(), Some("in sub\n"));
}

#[test]
fn hostile_an_edit_that_keeps_size_and_mtime_is_still_seen_and_undone() {
    let repo = git_repo(&[("same.txt", "lower\n")]);
    // Record the file before the run, then the run overwrites it with as many bytes and puts
    // its old modification time back: only the change time (which nobody can set) tells.
    let server = MockServer::start(vec![
        shell(
            "c1",
            "touch -r same.txt /tmp/nop-mtime-$$ && printf 'UPPER\\n' > same.txt && touch -r /tmp/nop-mtime-$$ same.txt",
        ),
        openai::reply_text("done"),
    ]);
    let id = run(&repo, &server, &["sneak an edit"]);
    assert_eq!(read(repo.path(), "same.txt").as_deref(), Some("UPPER\n"));
    let (code, undo, stderr) = nop_json(&repo, None, &["undo", "--session", &id, "--json"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(strings(&undo["restored"]), ["same.txt"], "{undo}");
    assert_eq!(read(repo.path(), "same.txt").as_deref(), Some("lower\n"));
}

#[test]
fn a_rewind_to_a_snapshot_after_an_undo_redoes_without_force() {
    let repo = git_repo(&[("base.txt", "base\n")]);
    let server = MockServer::start(vec![
        call(
            "c1",
            "write-file",
            json!({"path": "made.txt", "content": "by the agent\n"}),
        ),
        openai::reply_text("done"),
    ]);
    let id = run(&repo, &server, &["make a file"]);
    let snap = repo.run(&["snapshot", &id]).trim().to_string();
    let (code, _, stderr) = nop_json(&repo, None, &["undo", "--json"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(read(repo.path(), "made.txt"), None);
    let (code, rewind, stderr) = nop_json(
        &repo,
        None,
        &[
            "rewind",
            "--session",
            &id,
            "--to",
            &snap,
            "--files",
            "--json",
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        strings(&rewind["files"]["restored"]),
        ["made.txt"],
        "{rewind}"
    );
    assert!(strings(&rewind["files"]["kept"]).is_empty(), "{rewind}");
    assert_eq!(
        read(repo.path(), "made.txt").as_deref(),
        Some("by the agent\n")
    );
}

#[test]
fn a_run_without_tool_calls_closes_where_it_began_and_undo_passes_it_over_keeping_what_you_wrote() {
    let repo = git_repo(&[("keep.txt", "untouched\n")]);
    let root = repo.path().to_path_buf();
    // While the model answers (after the run's first checkpoint is on record), you write a file.
    let server = MockServer::start_with(Box::new(move |_| {
        let sessions = root.join(".nop/sessions");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            let recorded = std::fs::read_dir(&sessions)
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| std::fs::read_to_string(e.path().join("session.json")).ok())
                .any(|text| text.contains("\"before\""));
            if recorded {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        std::fs::write(root.join("yours.txt"), "written while nop ran\n").expect("write");
        openai::reply_text("Nothing to change.")
    }));
    let id = run(&repo, &server, &["what does keep.txt say?"]);
    let turns = &repo.session_json(&id)["checkpoints"];
    assert_eq!(turns[0]["after"], turns[0]["before"], "{turns}");
    // The run changed no file: there is nothing of it to undo.
    let refused = repo.fail(&["undo"]);
    assert!(
        refused.contains("nothing to undo") && refused.contains("1 changed no file"),
        "{refused}"
    );
    assert_eq!(
        read(repo.path(), "yours.txt").as_deref(),
        Some("written while nop ran\n")
    );
}

/// The path of the loose object `id` in the git directory `git_dir`.
fn loose(git_dir: &Path, id: &str) -> std::path::PathBuf {
    git_dir.join("objects").join(&id[..2]).join(&id[2..])
}

#[test]
fn a_damaged_object_fails_the_undo_naming_it_and_every_file_stays_as_it_was() {
    let repo = git_repo(&[("a.txt", "one\n"), ("b.txt", "bee\n")]);
    let server = MockServer::start(vec![
        call(
            "c1",
            "write-file",
            json!({"path": "a.txt", "content": "two\n"}),
        ),
        call(
            "c2",
            "write-file",
            json!({"path": "b.txt", "content": "BEE\n"}),
        ),
        openai::reply_text("done"),
    ]);
    let id = run(&repo, &server, &["change them"]);
    // The blob `one\n` is the repository's own loose object (committed). The store copied it
    // into a pack of its own; that pack is lost, so the store reads it from the repository
    // again, whose file is replaced by a valid loose object of another content (made by git in
    // a scratch repository): git would hand it over as it is.
    let one = git(repo.path(), &["rev-parse", "HEAD:a.txt"])
        .trim()
        .to_string();
    let packs = repo.path().join(".nop/checkpoints/objects/pack");
    let mut lost = 0;
    for entry in std::fs::read_dir(&packs).expect("the store's packs") {
        let idx = entry.unwrap().path();
        if idx.extension().is_none_or(|e| e != "idx") {
            continue;
        }
        let listed = std::process::Command::new("git")
            .arg("show-index")
            .stdin(std::fs::File::open(&idx).unwrap())
            .output()
            .expect("git show-index");
        if String::from_utf8_lossy(&listed.stdout).contains(&one) {
            std::fs::remove_file(idx.with_extension("pack")).unwrap();
            std::fs::remove_file(&idx).unwrap();
            lost += 1;
        }
    }
    assert_eq!(lost, 1, "the store holds its own copy of {one}");
    let object = loose(&repo.path().join(".git"), &one);
    let original = std::fs::read(&object).expect("loose object");
    let scratch = crate::support::repo_dir();
    git(scratch.path(), &["init", "-q"]);
    std::fs::write(scratch.path().join("eve"), "eve\n").unwrap();
    let eve = git(scratch.path(), &["hash-object", "-w", "eve"])
        .trim()
        .to_string();
    let forged = std::fs::read(loose(&scratch.path().join(".git"), &eve)).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&object, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(&object, forged).unwrap();
    // `sessions check` finds it before any undo is tried, naming the run whose checkpoint
    // holds it.
    let before = repo.session_json(&id)["checkpoints"][0]["before"]
        .as_str()
        .expect("a checkpoint")
        .to_string();
    let (code, report, stderr) = nop_json(&repo, None, &["sessions", "check", "--json"]);
    assert_eq!(code, 1, "{stderr}");
    let problems = report[0]["problems"].to_string();
    assert!(
        problems.contains("run 1 (before)")
            && problems.contains(&before)
            && problems.contains(&one)
            && problems.contains("damaged"),
        "{report}"
    );
    let (code, _, stderr) = nop_json(&repo, None, &["undo", "--json"]);
    assert_ne!(code, 0, "{stderr}");
    assert!(
        stderr.contains("damaged") && stderr.contains(&one) && stderr.contains(&before),
        "{stderr}"
    );
    // Nothing was put back, nothing was emptied.
    assert_eq!(read(repo.path(), "a.txt").as_deref(), Some("two\n"));
    assert_eq!(read(repo.path(), "b.txt").as_deref(), Some("BEE\n"));
    std::fs::write(&object, original).unwrap();
    let (code, report, stderr) = nop_json(&repo, None, &["sessions", "check", "--json"]);
    assert_eq!(code, 0, "{report} {stderr}");
    let (code, _, stderr) = nop_json(&repo, None, &["undo", "--json"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(read(repo.path(), "a.txt").as_deref(), Some("one\n"));
    assert_eq!(read(repo.path(), "b.txt").as_deref(), Some("bee\n"));
}

#[test]
fn undo_survives_a_rewritten_history_pruned_by_git_gc() {
    let repo = git_repo(&[("a.txt", "one\n"), ("big.txt", &"line\n".repeat(100))]);
    let server = MockServer::start(vec![
        call(
            "c1",
            "write-file",
            json!({"path": "a.txt", "content": "two\n"}),
        ),
        openai::reply_text("done"),
    ]);
    run(&repo, &server, &["change a"]);
    // The user rewrites the commit that held `one`, and prunes what no ref reaches.
    let one = git(repo.path(), &["rev-parse", "HEAD:a.txt"])
        .trim()
        .to_string();
    write(&repo, "a.txt", "three\n");
    git(
        repo.path(),
        &["commit", "-qa", "--amend", "-m", "rewritten"],
    );
    git(repo.path(), &["reflog", "expire", "--expire=now", "--all"]);
    git(repo.path(), &["gc", "-q", "--prune=now"]);
    let gone = std::process::Command::new("git")
        .args(["cat-file", "-e", &one])
        .current_dir(repo.path())
        .status()
        .expect("git");
    assert!(!gone.success(), "the blob is still in the repository");
    let (code, _, stderr) = nop_json(&repo, None, &["undo", "--force", "--json"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(read(repo.path(), "a.txt").as_deref(), Some("one\n"));
}

#[test]
fn a_second_undo_waits_for_the_first_and_names_it() {
    let repo = git_repo(&[("a.txt", "one\n")]);
    let server = MockServer::start(vec![
        call(
            "c1",
            "write-file",
            json!({"path": "a.txt", "content": "two\n"}),
        ),
        openai::reply_text("done"),
    ]);
    run(&repo, &server, &["change it"]);
    // Another restore of this repository is under way: it holds the store's restore lock, its
    // pid written in.
    let path = repo.path().join(".nop/checkpoints/restore.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&path)
        .expect("lock file");
    let held = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive).expect("flock");
    std::fs::write(&path, "4242").expect("pid");
    let mut undo = repo
        .nop_model_process(&server, "openai")
        .args(["undo", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("nop undo");
    let stderr = undo.stderr.take().expect("stderr");
    let (said, heard) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = said.send(line);
        }
    });
    let line = heard
        .recv_timeout(Duration::from_secs(60))
        .expect("the waiting undo says so");
    assert!(line.contains("waiting for nop (pid 4242)"), "{line}");
    assert_eq!(read(repo.path(), "a.txt").as_deref(), Some("two\n"));
    drop(held);
    let status = undo.wait().expect("undo ends");
    assert!(status.success(), "{status:?}");
    assert_eq!(read(repo.path(), "a.txt").as_deref(), Some("one\n"));
}

#[test]
fn an_undo_killed_at_any_moment_leaves_every_file_whole_and_the_next_one_finishes_it() {
    // 150 files of 64 KiB, all rewritten by one run; undos killed 1–60 ms after they start.
    let old = |n: usize| format!("{n:03} old\n").repeat(8192);
    let new = |n: usize| format!("{n:03} NEW\n").repeat(8192);
    let files: Vec<(String, String)> = (0..150)
        .map(|n| (format!("d{}/f{n}.txt", n % 5), old(n)))
        .collect();
    let borrowed: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    let repo = git_repo(&borrowed);
    let server = MockServer::start(vec![
        shell(
            "c1",
            "for f in d*/f*.txt; do n=${f##*/f}; n=${n%.txt}; yes \"$(printf '%03d NEW' $n)\" | head -n 8192 > \"$f\"; done",
        ),
        openai::reply_text("done"),
    ]);
    run(&repo, &server, &["rewrite them"]);
    let whole = |repo: &Repo, allow_new: bool| {
        for (n, (path, _)) in files.iter().enumerate() {
            let text = read(repo.path(), path).unwrap_or_default();
            assert!(
                text == old(n) || (allow_new && text == new(n)),
                "{path} is neither as it was nor as restored ({} bytes)",
                text.len()
            );
        }
    };
    whole(&repo, true);
    let mut seed = std::process::id() as u64;
    for _ in 0..6 {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let mut undo = repo
            .nop_model_process(&server, "openai")
            .args(["undo", "--force", "--json"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("nop undo");
        std::thread::sleep(Duration::from_millis(1 + (seed >> 33) % 60));
        let _ = undo.kill();
        let _ = undo.wait();
        whole(&repo, true);
    }
    let (code, _, stderr) = nop_json(&repo, None, &["undo", "--force", "--json"]);
    // Either this undo put the rest back, or a killed one had finished it already.
    assert!(code == 0 || stderr.contains("undone already"), "{stderr}");
    whole(&repo, false);
    // Nothing of the killed undos is left in the tree, nor still writing into it.
    std::thread::sleep(Duration::from_millis(300));
    whole(&repo, false);
    let status = git(
        repo.path(),
        &["status", "--porcelain", "--untracked-files=all"],
    );
    assert!(status.trim().is_empty(), "{status}");
}
