//! What the model can do to the person's terminal: nothing. Shell commands (and plugin command
//! tools) run in a session of their own with no controlling terminal, so they can neither open
//! `/dev/tty` nor push keys into it (TIOCSTI); every string the model controls is printed with
//! its control characters made visible (`\u{1b}`), in every output mode.

use std::fs;

use serde_json::json;

use crate::support::Repo;
use crate::support::mock::{MockServer, openai};
use crate::support::terminal::Terminal;

/// A command that says which terminal it has, then tries to open `/dev/tty` and push a line
/// into its input (the keys would reach nop's prompt, or the user's shell after nop exits).
/// The pushed text is spelled in pieces so that the command's own text never shows it.
const PUSH_KEYS: &str = r#"echo "tty=[$(ps -o tty= -p $$ | tr -d ' ')]"; python3 -c '
import os, fcntl, termios
try:
    fd = os.open("/dev/tty", os.O_RDWR)
except OSError as e:
    print("open /dev/tty:", e.strerror)
else:
    try:
        for b in b"INJ" + b"ECTED\r":
            fcntl.ioctl(fd, termios.TIOCSTI, bytes([b]))
        print("TIOCSTI pushed")
    except OSError as e:
        print("TIOCSTI:", e.strerror)
'"#;

/// Runs [`PUSH_KEYS`] as the model's shell call in the interactive session on a real terminal
/// (tmux: nop has a controlling terminal there), with `global` options before `run`.
fn commands_cannot_reach_the_terminal(tag: &str, global: &str) {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("t1", "shell", json!({ "command": PUSH_KEYS }))]),
        openai::reply_text("tried the terminal"),
    ]);
    let t = Terminal::start(
        &repo,
        &server,
        tag,
        &format!("{global} run"),
        &[],
        "/help for commands",
    );
    t.type_line("go");
    let screen = t.wait_for_prompt_after("tried the terminal");
    t.type_line("/exit");
    let after = t.wait_for("saved; continue with");
    let requests = server.requests();
    let result = requests[1].tool_results().join("\n");
    assert!(result.contains("tty=[?]"), "{result}");
    // No terminal to open (ENXIO); under the sandbox, Landlock refuses the write access first.
    assert!(
        result.contains("open /dev/tty: No such device or address")
            || result.contains("open /dev/tty: Permission denied"),
        "{result}"
    );
    assert!(!result.contains("TIOCSTI"), "{result}");
    for text in [&screen, &after] {
        assert!(!text.contains("INJECTED"), "{text}");
    }
    for r in &requests {
        assert!(
            !r.user_messages().iter().any(|m| m.contains("INJECTED")),
            "{:?}",
            r.user_messages()
        );
    }
}

#[test]
fn a_shell_command_has_no_terminal_under_namespaces() {
    commands_cannot_reach_the_terminal("notty-ns", "");
}

#[test]
fn a_shell_command_has_no_terminal_under_landlock_alone() {
    commands_cannot_reach_the_terminal("notty-ll", "--set shell.namespaces=off");
}

#[test]
fn a_shell_command_has_no_terminal_with_the_sandbox_off() {
    commands_cannot_reach_the_terminal("notty-off", "--set sandbox=off");
}

#[test]
fn a_plugin_command_tool_runs_in_a_session_of_its_own() {
    let repo = Repo::new();
    let dir = repo.path().join(".nop/plugins/where");
    fs::create_dir_all(&dir).expect("mkdir");
    fs::write(
        dir.join("config.yml"),
        "description: where am I\ntools:\n  - name: session\n    description: Says its session\n    command: ./session.sh\n    input_schema: {type: object}\n",
    )
    .expect("write");
    fs::write(
        dir.join("session.sh"),
        "#!/usr/bin/env bash\ncat > /dev/null\npython3 -c 'import os; print(\"sid\", os.getsid(0), \"pgid\", os.getpgid(0))'\n",
    )
    .expect("write");
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(dir.join("session.sh"), fs::Permissions::from_mode(0o755)).expect("chmod");
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("p1", "where__session", json!({}))]),
        openai::reply_text("done"),
    ]);
    // Landlock alone: the helper, the leader of the command's session, is visible to it.
    repo.model_ok(
        &server,
        &["--set", "shell.namespaces=off", "run", "where are you"],
    );
    let result = server.requests()[1].tool_results().join("\n");
    let ids: Vec<i64> = result
        .split_whitespace()
        .skip_while(|w| *w != "sid")
        .filter_map(|w| w.parse().ok())
        .collect();
    let [sid, pgid] = ids[..] else {
        panic!("no sid and pgid in {result}");
    };
    let ours = i64::from(nix::unistd::getsid(None).expect("getsid").as_raw());
    assert_ne!(sid, ours, "the command shares the test's session: {result}");
    assert_eq!(sid, pgid, "{result}");
}
