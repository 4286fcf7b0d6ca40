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
        r"\n\[… (\d+) bytes of stdout omitted; the whole output is in (out-[^ ]+\.log) …\]\n",
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
    let name = regex::Regex::new(r"bytes of stdout omitted; the whole output is in (out-\S+\.log)")
        .expect("regex")
        .captures(result)
        .expect("a marker")[1]
        .to_string();
    let session = repo.first_session();
    let log = repo
        .session_dir(session["sessionId"].as_str().expect("id"))
        .join(name);
    let whole = std::fs::metadata(log).expect("out log").len();
    assert!(whole > 5_000_000, "{whole}");
}
