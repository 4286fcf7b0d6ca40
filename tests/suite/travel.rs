//! Sessions that travel (issue 42): `nop sessions export` in one clone, `nop sessions import`
//! in another, and the session goes on there with its whole conversation; secrets of the
//! exporting environment stay behind; a damaged, newer or hostile archive is refused whole.

use serde_json::{Value, json};

use crate::support::mock::{MockServer, openai};
use crate::support::{Repo, git};

/// A session made in `repo`: a file read, an answer. Its id.
fn a_session(repo: &Repo, server: &MockServer, secret: &str) -> String {
    std::fs::write(repo.path().join("a.txt"), "alpha\n").expect("write");
    let out = repo
        .nop_model(server, "openai")
        .env("DEPLOY_TOKEN", secret)
        .args([
            "-p",
            "--output-format",
            "json",
            &format!("read a.txt; the deploy token is {secret}"),
        ])
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: Value = serde_json::from_slice(&out.stdout).expect("json");
    result["session_id"].as_str().expect("id").to_string()
}

fn export(repo: &Repo, id: &str, secret: &str) -> std::path::PathBuf {
    let file = repo.path().join("session.nop");
    let out = repo
        .nop()
        .env("DEPLOY_TOKEN", secret)
        .args(["sessions", "export", id, "-o"])
        .arg(&file)
        .output()
        .expect("export");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    file
}

fn import(repo: &Repo, file: &std::path::Path) -> std::process::Output {
    repo.nop()
        .args(["sessions", "import", "--json"])
        .arg(file)
        .output()
        .expect("import")
}

#[test]
fn a_session_exported_in_one_clone_goes_on_in_another_with_its_whole_conversation() {
    let (ci, laptop) = (Repo::new(), Repo::new());
    let secret = "s3cr3t-deploy-value-42";
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("c1", "read-file", json!({"path": "a.txt"}))]),
        openai::reply_text("a.txt says alpha"),
        openai::reply_text("going on"),
    ]);
    let id = a_session(&ci, &server, secret);
    let file = export(&ci, &id, secret);
    let archive = std::fs::read_to_string(&file).expect("archive");
    assert!(!archive.contains(secret), "the secret travelled");
    assert!(archive.contains("[DEPLOY_TOKEN scrubbed by nop]"));
    let ci_root = ci
        .path()
        .canonicalize()
        .expect("root")
        .display()
        .to_string();
    assert!(
        !archive.contains(&ci_root),
        "an absolute path of the CI clone travelled"
    );

    let imported = import(&laptop, &file);
    assert!(
        imported.status.success(),
        "{}",
        String::from_utf8_lossy(&imported.stderr)
    );
    let moved: Value = serde_json::from_slice(&imported.stdout).expect("json");
    assert_eq!(moved["session"], id);
    let before = std::fs::read_to_string(
        laptop
            .path()
            .join(".nop/sessions")
            .join(&id)
            .join("session.log"),
    )
    .expect("the event log travelled");

    let out = laptop
        .nop_model(&server, "openai")
        .args(["run", "--session", &id, "--output-format", "json", "go on"])
        .output()
        .expect("resume");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The resumed run's request carries the whole prior conversation.
    let resumed = &server.requests()[2];
    let users = resumed.user_messages();
    assert!(users[0].contains("read a.txt"), "{users:?}");
    assert_eq!(users.last().map(String::as_str), Some("go on"));
    assert!(
        resumed
            .tool_result("c1")
            .is_some_and(|r| r.contains("alpha"))
    );
    let body = resumed.body.to_string();
    assert!(body.contains("a.txt says alpha"), "{body}");
    let laptop_root = laptop
        .path()
        .canonicalize()
        .expect("root")
        .display()
        .to_string();
    assert!(
        !body.contains(&ci_root),
        "the CI clone's path reached the model"
    );
    // Paths under the repository are the laptop's now (the system prompt names the root).
    assert!(archive.contains("nop:repository-root"));
    assert!(body.contains(&laptop_root), "{body}");
    // The event log goes on from where the export left it.
    let after = std::fs::read_to_string(
        laptop
            .path()
            .join(".nop/sessions")
            .join(&id)
            .join("session.log"),
    )
    .expect("log");
    assert!(after.starts_with(&before) && after.len() > before.len());
    // A second import of the same session is refused, and changes nothing.
    let again = import(&laptop, &file);
    assert_eq!(again.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(
        stderr.contains(&format!("session {id} exists here already")),
        "{stderr}"
    );
}

#[test]
fn a_damaged_newer_or_hostile_archive_is_refused_whole() {
    let (ci, laptop) = (Repo::new(), Repo::new());
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("c1", "read-file", json!({"path": "a.txt"}))]),
        openai::reply_text("done"),
    ]);
    let id = a_session(&ci, &server, "not-a-secret-really");
    let file = export(&ci, &id, "x");
    let archive = std::fs::read_to_string(&file).expect("archive");
    let sessions = laptop.path().join(".nop/sessions");
    let refused = |text: &str, why: &str| {
        let path = laptop.path().join("bad.nop");
        std::fs::write(&path, text).expect("write");
        let out = import(&laptop, &path);
        assert_eq!(out.status.code(), Some(1), "{why}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(why), "{stderr}");
        let left: Vec<_> = std::fs::read_dir(&sessions)
            .map(|d| d.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "{why}: {left:?}");
    };
    // One character changed in the middle.
    let at = archive.find("alpha").expect("the read");
    let mut damaged = archive.clone();
    damaged.replace_range(at..at + 1, "A");
    refused(&damaged, "damaged or cut short");
    // Cut short: the trailer is gone.
    let cut = &archive[..archive.trim_end().rfind('\n').expect("lines") + 1];
    refused(cut, "damaged or cut short");
    // Written by a newer nop.
    refused(
        &archive.replacen("\"version\":1", "\"version\":99", 1),
        "written by a newer nop",
    );
    refused("{\"hello\": 1}\n", "not a nop session archive");
    // A file name that climbs out of the session directory, with a checksum that matches.
    let mut lines: Vec<String> = archive.lines().map(str::to_string).collect();
    let mut entry: Value = serde_json::from_str(&lines[1]).expect("entry");
    entry["path"] = json!("../../../escaped.txt");
    lines[1] = entry.to_string();
    let body: String = lines[..lines.len() - 1]
        .iter()
        .map(|l| format!("{l}\n"))
        .collect();
    let digest = {
        use std::fmt::Write as _;
        let sum = sha256(body.as_bytes());
        sum.iter().fold(String::new(), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
    };
    let trailer = json!({"end": true, "files": lines.len() - 2, "sha256": digest});
    refused(&format!("{body}{trailer}\n"), "not a session file");
    assert!(!laptop.path().join("escaped.txt").exists());
}

/// SHA-256, as `sha256sum` computes it.
fn sha256(bytes: &[u8]) -> Vec<u8> {
    let out = std::process::Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().expect("stdin").write_all(bytes)?;
            child.wait_with_output()
        })
        .expect("sha256sum");
    let hex = String::from_utf8_lossy(&out.stdout);
    let hex = hex.split_whitespace().next().expect("a digest");
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
        .collect()
}

#[test]
fn a_session_pushed_under_a_git_ref_is_pulled_in_another_clone_and_goes_on() {
    let (ci, laptop, remote) = (Repo::new(), Repo::new(), Repo::bare());
    git(remote.path(), &["init", "-q", "--bare"]);
    for clone in [&ci, &laptop] {
        git(clone.path(), &["init", "-q"]);
        git(
            clone.path(),
            &[
                "remote",
                "add",
                "origin",
                &remote.path().display().to_string(),
            ],
        );
    }
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("c1", "read-file", json!({"path": "a.txt"}))]),
        openai::reply_text("a.txt says alpha"),
        openai::reply_text("going on"),
    ]);
    let id = a_session(&ci, &server, "a-token-of-the-runner");
    let pushed = ci
        .nop()
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .args(["sessions", "push", &id])
        .output()
        .expect("push");
    assert!(
        pushed.status.success(),
        "{}",
        String::from_utf8_lossy(&pushed.stderr)
    );
    let pulled = laptop
        .nop()
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .args(["sessions", "pull", &id, "origin"])
        .output()
        .expect("pull");
    assert!(
        pulled.status.success(),
        "{}",
        String::from_utf8_lossy(&pulled.stderr)
    );
    let out = laptop
        .nop_model(&server, "openai")
        .args(["run", "--session", &id, "--output-format", "json", "go on"])
        .output()
        .expect("resume");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let users = server.requests()[2].user_messages();
    assert!(users[0].contains("read a.txt"), "{users:?}");
    assert_eq!(users.last().map(String::as_str), Some("go on"));
    // A ref that does not hold a session is an error, and imports nothing.
    let missing = laptop
        .nop()
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .args(["sessions", "pull", "01m8aaaaaa-aaaa"])
        .output()
        .expect("pull");
    assert_eq!(missing.status.code(), Some(1));
}
