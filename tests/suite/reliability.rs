//! Regression tests for what was found by trying to break nop (issue 13): each named after the
//! defect it guards against.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;

use crate::support::Repo;
use crate::support::mock::{MockResponse, MockServer, openai};

#[test]
fn an_unreadable_queue_file_is_set_aside_and_never_makes_nop_call_the_model_again() {
    let repo = Repo::new();
    let id = repo.new_session();
    let inbox = repo.session_dir(&id).join("inbox");
    std::fs::create_dir_all(&inbox).unwrap();
    std::fs::write(
        inbox.join("1-00000000000000000001-0000000001-000001.json"),
        "{torn",
    )
    .unwrap();
    // Any number of requests is answered; after the fourth they fail, so a loop ends.
    let count = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&count);
    let server = MockServer::start_with(Box::new(move |_| {
        if seen.fetch_add(1, Ordering::SeqCst) < 4 {
            openai::reply_text("answered")
        } else {
            MockResponse::status(400, "enough")
        }
    }));
    let out = repo
        .nop_model(&server, "openai")
        .args([
            "run",
            "--session",
            &id,
            "--output-format",
            "stream-json",
            "hi",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        count.load(Ordering::SeqCst),
        1,
        "one request for one prompt"
    );
    let warnings: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "warning")
        .filter_map(|e| e["message"].as_str().map(str::to_string))
        .collect();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("is not a message") && w.contains("inbox/bad/")),
        "{warnings:?}"
    );
    assert!(
        inbox
            .join("bad/1-00000000000000000001-0000000001-000001.json")
            .is_file()
    );
    let log = std::fs::read_to_string(repo.path().join(".nop/logs/system.log")).unwrap();
    assert!(log.contains("result=set-aside"), "{log}");
}

#[test]
fn a_tool_process_never_outlives_a_sigkilled_nop_even_with_the_sandbox_off() {
    let repo = Repo::new();
    let marker = format!("600.{}", std::process::id());
    let script = format!("setsid -f sleep {marker}; exec sleep {marker}");
    let mut nop = crate::support::start_until(
        &repo,
        &[
            "--set",
            "sandbox=off",
            "sandbox",
            "run",
            "--",
            "bash",
            "-c",
            &script,
        ],
        &marker,
        2,
    );
    nop.kill().unwrap();
    nop.wait().unwrap();
    assert_eq!(
        crate::support::wait_until_gone(&marker),
        Vec::<String>::new()
    );
}

#[test]
fn write_file_and_edit_file_keep_a_files_mode_and_new_files_follow_the_umask() {
    use std::os::unix::fs::PermissionsExt as _;
    let repo = Repo::new();
    let script = repo.path().join("run.sh");
    std::fs::write(&script, "#!/bin/sh\necho one\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o750)).unwrap();
    let linked = repo.path().join("linked.txt");
    std::fs::write(&linked, "old\n").unwrap();
    std::fs::hard_link(&linked, repo.path().join("other-name.txt")).unwrap();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[
            (
                "c1",
                "edit-file",
                serde_json::json!({"path": "run.sh", "old_string": "one", "new_string": "two"}),
            ),
            (
                "c2",
                "write-file",
                serde_json::json!({"path": "new.txt", "content": "new\n"}),
            ),
            (
                "c3",
                "write-file",
                serde_json::json!({"path": "linked.txt", "content": "new\n"}),
            ),
        ]),
        openai::reply_text("done"),
    ]);
    repo.model_ok(&server, &["run", "edit"]);
    let mode = |name: &str| {
        std::fs::metadata(repo.path().join(name))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    };
    assert_eq!(
        std::fs::read_to_string(&script).unwrap(),
        "#!/bin/sh\necho two\n"
    );
    assert_eq!(mode("run.sh"), 0o750, "an edit keeps the mode");
    // nop inherits this process's umask.
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let umask = status
        .lines()
        .find_map(|l| l.strip_prefix("Umask:"))
        .map(|u| u32::from_str_radix(u.trim(), 8).unwrap())
        .unwrap();
    assert_eq!(
        mode("new.txt"),
        0o666 & !umask,
        "a new file follows the umask"
    );
    // Documented: the file is replaced whole, so another hard link keeps the old contents.
    assert_eq!(std::fs::read_to_string(&linked).unwrap(), "new\n");
    assert_eq!(
        std::fs::read_to_string(repo.path().join("other-name.txt")).unwrap(),
        "old\n"
    );
}
