//! A command that prints far more than the model reads (`docs/output-limits.md`): the model gets
//! head and tail with a marker naming the session's out log, which holds the whole output.

use serde_json::json;

use crate::support::Repo;
use crate::support::mock::{MockServer, openai};

/// 20 MB of "é\n" (cut mid-character at both ends of what the model reads) between two lines
/// the model must see, and a line of standard error.
const COMMAND: &str =
    "printf 'FIRST\\n'; yes é | head -c 20000000; printf '\\nLAST\\n'; echo oops >&2";

#[test]
fn twenty_megabytes_of_output_reach_the_log_whole_and_the_model_as_head_and_tail() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("c1", "shell", json!({"command": COMMAND}))]),
        openai::reply_text("Long."),
    ]);
    repo.model_ok(&server, &["run", "--output-format", "json", "print a lot"]);

    let result = &server.result_of("c1");
    assert!(result.len() <= 30_000, "{}", result.len());
    assert!(result.starts_with("exit code: 0 ("), "{result}");
    assert!(result.contains("\nstdout:\nFIRST\né\né\n"), "{result}");
    assert!(result.ends_with("é\né\nLAST\nstderr:\noops\n"), "{result}");
    assert!(!result.contains('\u{FFFD}'), "a character was cut");
    let marker = regex::Regex::new(
        r"\n\[… \d+ lines \((\d+) bytes\) of stdout omitted; the whole output is in \.nop/sessions/[^/]+/(out-[^ ]+\.log) …\]\n",
    )
    .expect("regex");
    let found = marker.captures(result).expect("a marker");
    let omitted: usize = found[1].parse().expect("a number");
    assert!(omitted > 19_900_000, "{omitted}");

    let session = repo.first_session();
    let id = session["sessionId"].as_str().expect("id");
    assert_eq!(
        session["messages"][3]["content"].as_str(),
        Some(result.as_str())
    );
    let dir = repo.session_dir(id);
    let logs: Vec<_> = std::fs::read_dir(&dir)
        .expect("session dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("out-"))
        .collect();
    assert_eq!(logs, [found[2].to_string()]);
    let whole = std::fs::read(dir.join(&logs[0])).expect("out log");
    let mut expected = b"stdout:\nFIRST\n".to_vec();
    expected.extend("é\n".repeat(6_666_666).as_bytes());
    expected.extend("é\nLAST\nstderr:\noops\nexit code: 0 (".as_bytes());
    assert_eq!(&whole[..expected.len()], &expected[..]);
    let last = String::from_utf8_lossy(&whole[expected.len()..]);
    assert!(
        regex::Regex::new(r"^\d+\.\d s\)\n$")
            .expect("regex")
            .is_match(&last),
        "{last}"
    );
}

#[test]
fn a_plugin_command_printing_megabytes_gives_the_model_head_and_tail() {
    let repo = Repo::new();
    let dir = repo.path().join(".nop/plugins/big");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(
        dir.join("config.yml"),
        "description: prints a lot\ntools:\n  - name: flood\n    description: Prints a lot\n    command: ./flood.sh\n    input_schema: {type: object}\n",
    )
    .expect("write");
    std::fs::write(
        dir.join("flood.sh"),
        "#!/usr/bin/env bash\ncat >/dev/null\necho start; head -c 5000000 /dev/zero | tr '\\0' y; echo; echo end\n",
    )
    .expect("write");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.join("flood.sh"), std::fs::Permissions::from_mode(0o755))
        .expect("chmod");
    repo.trust();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("p1", "big__flood", json!({}))]),
        openai::reply_text("done"),
    ]);
    repo.model_ok(&server, &["run", "flood"]);
    let result = &server.result_of("p1");
    assert!(result.len() <= 30_000, "{}", result.len());
    assert!(result.starts_with("start\nyyy") && result.ends_with("yyy\nend\n"));
    let path = regex::Regex::new(r"bytes\)? of stdout omitted; the whole output is in (\S+\.log)")
        .expect("regex")
        .captures(result)
        .expect("a marker")[1]
        .to_string();
    let session = repo.first_session();
    let log = repo.path().join(&path);
    assert_eq!(
        log.parent(),
        Some(
            repo.session_dir(session["sessionId"].as_str().expect("id"))
                .as_path()
        )
    );
    let whole = std::fs::metadata(log).expect("out log").len();
    assert!(whole > 5_000_000, "{whole}");
}

/// 20,000 lines of a test run, a failure in the middle of them.
const FAILING_RUN: &str = "seq 1 9999 | sed 's/$/ of a long test run: all is well so far/'; \
     printf \"thread 'main' panicked at src/main.rs:3:5:\\nassertion \\`left == right\\` failed\\n  left: 3\\n right: 4\\n\"; \
     seq 10000 20000 | sed 's/$/ of a long test run: all is well again/'; exit 101";

#[test]
fn a_failure_in_the_middle_of_a_long_output_reaches_the_model_and_the_user() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("c1", "shell", json!({"command": FAILING_RUN}))]),
        openai::reply_text("It failed."),
    ]);
    let output = repo
        .nop_model(&server, "openai")
        .args(["run", "run the tests"])
        .output()
        .expect("run");
    let shown = String::from_utf8_lossy(&output.stderr);

    // The model: head and tail, the lines that say why picked from the middle, every line
    // counted, the log named from the repository.
    let result = server.result_of("c1");
    assert!(result.len() <= 30_000, "{}", result.len());
    assert!(result.starts_with("exit code: 101 ("), "{result}");
    for line in [
        "line 10000: thread 'main' panicked at src/main.rs:3:5:",
        "line 10001: assertion `left == right` failed",
        "line 10002:   left: 3",
        "line 10003:  right: 4",
    ] {
        assert!(result.lines().any(|l| l == line), "{line} in {result}");
    }
    let marker = regex::Regex::new(
        r"\[… (\d+) lines \(\d+ bytes\) of stdout omitted; the whole output is in (\.nop/sessions/[^/]+/out-\S+\.log); the lines among them",
    )
    .expect("regex")
    .captures(&result)
    .expect("a marker");
    let omitted: usize = marker[1].parse().expect("a count");
    let around = result
        .lines()
        .filter(|l| !l.starts_with("line ") && l.contains(" of a long test run: "))
        .count();
    assert_eq!(around + omitted, 20_004, "{result}");
    let log = std::fs::read_to_string(repo.path().join(&marker[2])).expect("the log opens");
    assert!(log.contains("\nassertion `left == right` failed\n"));

    // The user: the assertion, the real count, the log's path from where nop ran.
    for line in [
        "    thread 'main' panicked at src/main.rs:3:5:",
        "    assertion `left == right` failed",
        "      left: 3",
        "     right: 4",
        "    20000 of a long test run: all is well again",
    ] {
        assert!(shown.lines().any(|l| l == line), "{line} in {shown}");
    }
    let more = format!(
        "    … +{} lines (all of it in {})",
        20_004 - 4 - 8,
        &marker[2]
    );
    assert!(shown.lines().any(|l| l == more), "{more} in {shown}");
}
