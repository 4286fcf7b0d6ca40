//! Custom slash commands as Claude Code keeps them (`.claude/commands/review.md` is `/review`):
//! expanded headless (`nop run "/review …"`, `nop -p`) and in the interactive session (menu,
//! `/help`, Tab), listed by `nop commands list`; built-in commands win a clash.

use std::fs;
use std::path::Path;

use crate::support::Repo;
use crate::support::mock::{MockServer, openai};
use crate::support::terminal::Terminal;

fn write(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    fs::write(path, text).expect("write");
}

const REVIEW: &str = "---
description: Review a file for one concern
argument-hint: [file] [focus]
allowed-tools: Bash(git diff:*), Read
model: claude-3-5-haiku-20241022
---
Review @$0 with a focus on $1 ($ARGUMENTS[1]).
Everything asked: $ARGUMENTS
Context: !`git diff HEAD`
";

#[test]
fn a_custom_command_is_the_prompt_headless_with_its_arguments_and_mentions() {
    let repo = Repo::new();
    write(&repo.path().join(".claude/commands/review.md"), REVIEW);
    write(
        &repo.path().join("src/x.rs"),
        "fn main() { let v = vec![1]; }\n",
    );
    write(
        &repo.path().join(".nop/commands/frontend/test.md"),
        "Run the UI tests and report failures.\n",
    );
    // A built-in command's name: the built-in wins, the file is not used.
    write(&repo.path().join(".nop/commands/help.md"), "planted help\n");
    let server = MockServer::start(vec![
        openai::reply_text("reviewed"),
        openai::reply_text("tested"),
        openai::reply_text("looked"),
        openai::reply_text("helped"),
    ]);
    repo.model_ok(&server, &["run", "/review src/x.rs 'error handling'"]);
    repo.model_ok(&server, &["-p", "/frontend:test  only the login page"]);
    repo.model_ok(&server, &["run", "/etc/hosts is empty, why?"]);
    repo.model_ok(&server, &["run", "/help"]);
    let requests = server.requests();
    let user = |i: usize| {
        requests[i]
            .user_messages()
            .last()
            .cloned()
            .expect("a user message")
    };
    let review = user(0);
    assert!(
        review.starts_with(
            "Review @src/x.rs with a focus on error handling (error handling).\n\
             Everything asked: src/x.rs 'error handling'\n\
             Context: !`git diff HEAD`"
        ),
        "{review}"
    );
    assert!(
        review.contains("fn main() { let v = vec![1]; }"),
        "the @mention in the body is attached: {review}"
    );
    assert_eq!(
        user(1),
        "Run the UI tests and report failures.\n\nARGUMENTS: only the login page"
    );
    assert_eq!(user(2), "/etc/hosts is empty, why?");
    assert_eq!(user(3), "/help");
}

#[test]
fn commands_list_shows_where_each_comes_from_and_what_it_shadows() {
    let repo = Repo::new();
    let home = crate::support::repo_dir();
    write(&repo.path().join(".claude/commands/review.md"), REVIEW);
    write(&home.path().join(".claude/commands/review.md"), "mine\n");
    write(
        &home.path().join(".claude/commands/deploy.md"),
        "---\ndescription: Ship it\n---\nDeploy $ARGUMENTS\n",
    );
    write(
        &home.path().join(".config/nop/commands/standup.md"),
        "# Write my standup\nFrom git log.\n",
    );
    write(
        &home.path().join(".claude/commands/broken.md"),
        "---\ndescription: never closed\nx\n",
    );
    write(&repo.path().join(".nop/commands/status.md"), "planted\n");
    let out = repo
        .nop()
        .env("HOME", home.path())
        .args(["commands", "list", "--json"])
        .output()
        .expect("nop");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let names: Vec<&str> = list["commands"]
        .as_array()
        .expect("commands")
        .iter()
        .map(|c| c["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["/review", "/standup", "/deploy"], "{list}");
    assert_eq!(list["commands"][0]["argumentHint"], "[file] [focus]");
    assert_eq!(list["commands"][1]["description"], "Write my standup");
    assert_eq!(list["commands"][2]["user"], true);
    assert_eq!(list["shadowed"][0]["source"], "~/.claude/commands");
    assert_eq!(list["hiddenByBuiltin"][0]["name"], "/status");
    assert!(
        list["warnings"][0]
            .as_str()
            .is_some_and(|w| w.contains("broken.md")),
        "{list}"
    );
    let text = repo
        .nop()
        .env("HOME", home.path())
        .args(["commands", "list"])
        .output()
        .expect("nop");
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(
        stdout.contains("/review")
            && stdout.contains("[file] [focus] Review a file for one concern")
            && stdout.contains("hidden by a built-in"),
        "{stdout}"
    );
    assert!(
        String::from_utf8_lossy(&text.stderr).contains("broken.md"),
        "the bad file is named"
    );
}

#[test]
fn a_custom_command_is_in_the_menu_and_help_and_runs_in_the_interactive_session() {
    let repo = Repo::new();
    write(&repo.path().join(".claude/commands/review.md"), REVIEW);
    write(&repo.path().join("src/x.rs"), "fn main() {}\n");
    let server = MockServer::start(vec![openai::reply_text("reviewed it")]);
    let t = Terminal::start(
        &repo,
        &server,
        "custom-cmd",
        "run",
        &[],
        "/help for commands",
    );
    t.type_line("/help");
    t.wait_for("custom commands");
    t.wait_for("[file] [focus] · Review a file for one concern");
    t.press(&["/rev", "Tab"]);
    t.wait_for("› /review");
    t.type_line("src/x.rs speed");
    t.wait_for_prompt_after("reviewed it");
    let users = server.requests()[0].user_messages();
    let last = users.last().expect("a user message");
    assert!(
        last.starts_with("Review @src/x.rs with a focus on speed (speed)."),
        "{last}"
    );
    t.type_line("/exit");
    t.wait_for("saved; continue with");
}
