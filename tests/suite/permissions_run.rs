//! Permissions end to end: the real binary, the mock model, and files on disk that must not change.

use std::fs;

use serde_json::{Value, json};

use crate::support::Repo;
use crate::support::mock::{MockServer, openai};

/// A repository whose default rules protect `protected/` (read-only) and `secret/` (deny).
fn repo_with_rules(extra_tools: &str) -> Repo {
    let repo = Repo::new();
    fs::write(
        repo.path().join(".nop/.permissions/agent-default.yml"),
        format!(
            "tools:\n  allowed: [\"*\"]\n  denied: [{extra_tools}]\nfile-access:\n  - pattern: \"protected/**\"\n    access: read-only\n  - pattern: \"secret/**\"\n    access: deny\n  - pattern: \"approve/**\"\n    access: ask\n  - pattern: \"**\"\n    access: read\n  - pattern: \"/tmp/**\"\n    access: read\n"
        ),
    )
    .expect("rules");
    fs::create_dir_all(repo.path().join("protected")).expect("mkdir");
    fs::create_dir_all(repo.path().join("secret")).expect("mkdir");
    fs::create_dir_all(repo.path().join("approve")).expect("mkdir");
    fs::write(repo.path().join("protected/file"), "original\n").expect("write");
    fs::write(repo.path().join("secret/key"), "hunter2\n").expect("write");
    fs::create_dir_all(repo.path().join("work")).expect("mkdir");
    fs::write(repo.path().join("notes.md"), "notes\n").expect("write");
    // The user wrote the rules by hand: they are used once the user trusts them.
    repo.trust();
    repo
}

fn run(repo: &Repo, server: &MockServer, args: &[&str]) -> (i32, Value) {
    let output = repo
        .nop_model(server, "openai")
        .args([
            "--set",
            "sandbox=required",
            "run",
            "--output-format",
            "json",
        ])
        .args(args)
        .output()
        .expect("run");
    let result = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stderr)));
    (output.status.code().unwrap_or(-1), result)
}

#[test]
fn a_denied_tool_is_refused_and_reported() {
    let repo = repo_with_rules("shell");
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("c1", "shell", json!({"command": "touch made-by-shell"}))]),
        openai::reply_text("ok"),
    ]);
    let (code, result) = run(&repo, &server, &["go"]);
    assert_eq!(code, 0);
    let refusal = server.result_of("c1");
    assert!(
        refusal.starts_with("error (PermissionDenied): tool `shell` is denied"),
        "{refusal}"
    );
    assert!(
        refusal.contains("agent-default.yml:3"),
        "names the rule: {refusal}"
    );
    assert!(!repo.path().join("made-by-shell").exists());
    assert_eq!(result["permission_denials"][0]["tool"], "shell");
}

#[test]
#[expect(clippy::too_many_lines, reason = "a debt: listed in AGENTS.md")]
fn protected_files_stay_unchanged_through_file_tools_and_through_the_shell() {
    let repo = repo_with_rules("");
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[
            (
                "c1",
                "write-file",
                json!({"path": "protected/file", "content": "changed\n"}),
            ),
            (
                "c2",
                "edit-file",
                json!({"path": "protected/file", "old_string": "original", "new_string": "changed"}),
            ),
            (
                "c3",
                "shell",
                json!({"command": "echo changed > protected/file"}),
            ),
            (
                "c4",
                "shell",
                json!({"command": "sed -i s/original/changed/ protected/file"}),
            ),
            (
                "c5",
                "shell",
                json!({"command": "rm -f protected/file; mv protected/file /tmp/x"}),
            ),
            (
                "c6",
                "shell",
                json!({"command": "cat .nop/.permissions/agent-default.yml"}),
            ),
            ("c7", "shell", json!({"command": "cat secret/key"})),
            ("c8", "read-file", json!({"path": "secret/key"})),
            (
                "c9",
                "shell",
                json!({"command": "echo ok > work/allowed.txt && mkdir -p work/sub && echo ok > work/sub/made.txt && echo more >> notes.md && cat work/allowed.txt"}),
            ),
            (
                "c10",
                "shell",
                json!({"command": "echo x > .nop/config.yml"}),
            ),
        ]),
        openai::reply_text("done"),
    ]);
    let (code, result) = run(&repo, &server, &["try everything"]);
    assert_eq!(code, 0, "{result}");
    let results = server.results_of(&["c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8", "c9", "c10"]);
    assert_eq!(
        fs::read_to_string(repo.path().join("protected/file")).expect("read"),
        "original\n"
    );
    assert!(
        results[0].contains("PermissionDenied") && results[0].contains("read-only"),
        "{results:?}"
    );
    assert!(results[1].contains("PermissionDenied"), "{results:?}");
    let sandboxed = nop::sandbox::support().filesystem == nop::sandbox::Enforcement::Full;
    if sandboxed {
        for (i, r) in results[2..=6].iter().enumerate() {
            assert!(
                !r.starts_with("exit code: 0"),
                "shell call {} should fail: {r}",
                i + 3
            );
        }
        assert!(
            !results[5].contains("allowed:"),
            "the permissions file leaked: {}",
            results[5]
        );
        assert!(
            !results[6].contains("hunter2"),
            "the secret leaked: {}",
            results[6]
        );
        assert!(
            results[8].starts_with("exit code: 0"),
            "ordinary work must still run: {}",
            results[8]
        );
        assert!(repo.path().join("work/sub/made.txt").is_file());
        assert_eq!(
            fs::read_to_string(repo.path().join("notes.md")).expect("read"),
            "notes\nmore\n"
        );
        assert!(!results[9].starts_with("exit code: 0"));
    } else {
        // sandbox: required on a kernel without Landlock: shell is refused, never run unconfined.
        for r in &results[2..=6] {
            assert!(r.contains("SandboxUnavailable"), "{r}");
        }
    }
    assert!(results[7].contains("PermissionDenied") && !results[7].contains("hunter2"));
    assert!(
        fs::read_to_string(repo.path().join(".nop/config.yml"))
            .expect("read")
            .contains("log:")
    );
}

#[test]
fn ask_rules_are_denied_headless_unless_yes() {
    let repo = repo_with_rules("");
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[(
            "c1",
            "write-file",
            json!({"path": "approve/f.txt", "content": "x"}),
        )]),
        openai::reply_text("done"),
        openai::reply_tool_calls(&[(
            "c2",
            "write-file",
            json!({"path": "approve/f.txt", "content": "x"}),
        )]),
        openai::reply_text("done"),
    ]);
    let (code, result) = run(&repo, &server, &["write it"]);
    assert_eq!(code, 0);
    assert!(!repo.path().join("approve/f.txt").exists());
    let reason = result["permission_denials"][0]["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        reason.contains("needs approval") && reason.contains("--yes"),
        "{reason}"
    );
    let (code, result) = run(&repo, &server, &["--yes", "write it"]);
    assert_eq!(code, 0);
    assert_eq!(
        fs::read_to_string(repo.path().join("approve/f.txt")).expect("read"),
        "x"
    );
    assert_eq!(result["permission_denials"], json!([]));
}

#[test]
fn a_broken_permission_file_fails_closed_with_file_and_line() {
    let repo = Repo::new();
    fs::write(
        repo.path().join(".nop/.permissions/agent-default.yml"),
        "tools:\n  allowed: [\"*\"]\nfile-access:\n  - pattern: \"**\"\n    access: everything\n",
    )
    .expect("write");
    let server = MockServer::start(vec![openai::reply_text("never")]);
    let output = repo
        .nop_model(&server, "openai")
        .args(["run", "hi"])
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("agent-default.yml:5") && stderr.contains("everything"),
        "{stderr}"
    );
    assert!(
        server.requests().is_empty(),
        "nothing may run with broken permissions"
    );
    let out = repo
        .nop()
        .args(["permissions", "check"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("agent-default.yml:5"));
}

#[test]
fn explain_names_the_rule_and_a_subagent_cannot_widen_its_parent() {
    let repo = repo_with_rules("");
    // A "helper" agent whose own file tries to allow everything, secret/ included.
    fs::write(
        repo.path().join(".nop/.permissions/agent-helper.yml"),
        "tools:\n  allowed: [\"*\"]\nfile-access:\n  - pattern: \"**\"\n    access: read\n",
    )
    .expect("write");
    fs::write(
        repo.path().join(".nop/.permissions/agent-reader.yml"),
        "tools:\n  allowed: [read-file]\nfile-access:\n  - pattern: \"**\"\n    access: read-only\n",
    )
    .expect("write");
    repo.trust();
    let explain = |args: &[&str]| {
        let out = repo
            .nop()
            .args(["permissions", "explain"])
            .args(args)
            .output()
            .expect("run");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, text) = explain(&["--agent", "helper", "--path", "secret/key"]);
    assert_eq!(code, Some(0), "{text}");
    let (code, text) = explain(&[
        "--agent", "helper", "--within", "reader", "--path", "src/x.rs", "--access", "write",
    ]);
    assert_eq!(code, Some(1));
    assert!(
        text.contains("read-only") && text.contains("agent-reader.yml:4"),
        "{text}"
    );
    let (code, text) = explain(&["--agent", "helper", "--within", "reader", "--tool", "shell"]);
    assert_eq!(code, Some(1), "{text}");
    let (code, text) = explain(&[
        "--agent",
        "helper",
        "--within",
        "coder",
        "--path",
        "secret/key",
    ]);
    assert_eq!(code, Some(1));
    assert!(
        text.contains("denied") && text.contains("agent-default.yml:7"),
        "{text}"
    );
    let (code, text) = explain(&["--path", ".nop/.permissions/agent-default.yml"]);
    assert_eq!(code, Some(1));
    assert!(text.contains("built-in floor"), "{text}");
}

#[test]
fn the_example_permission_files_load_and_mean_what_they_say() {
    let repo = Repo::new();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/permissions");
    for entry in fs::read_dir(&dir).expect("examples") {
        let path = entry.expect("entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .expect("name")
            .to_string();
        let target = if name == "agent-default-protect-secrets.yml" {
            "agent-default.yml".to_string()
        } else {
            name
        };
        fs::copy(&path, repo.path().join(".nop/.permissions").join(target)).expect("copy");
    }
    repo.trust();
    let out = repo
        .nop()
        .args(["permissions", "check"])
        .output()
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let decide = |args: &[&str]| {
        repo.nop()
            .args(["permissions", "explain"])
            .args(args)
            .output()
            .expect("run")
            .status
            .code()
    };
    assert_eq!(
        decide(&[
            "--agent", "reviewer", "--path", "src/a.rs", "--access", "write"
        ]),
        Some(1)
    );
    assert_eq!(
        decide(&["--agent", "reviewer", "--path", "src/a.rs"]),
        Some(0)
    );
    assert_eq!(
        decide(&["--agent", "reviewer", "--path", "secrets/k"]),
        Some(1)
    );
    assert_eq!(decide(&["--agent", "no-shell", "--tool", "shell"]), Some(1));
    assert_eq!(decide(&["--agent", "coder", "--path", "app/.env"]), Some(1));
    assert_eq!(
        decide(&["--agent", "ci", "--path", "Cargo.lock", "--access", "write"]),
        Some(1)
    );
    assert_eq!(
        decide(&["--agent", "ci", "--path", "src/lib.rs", "--access", "write"]),
        Some(0)
    );
    assert_eq!(decide(&["--agent", "ci", "--tool", "ask-user"]), Some(1));
}

/// The approval mode as a configuration key (here the user's file, as `nop config set approval
/// plan --user` writes it): plan mode refuses every call that changes something, and tells the
/// model to present its plan; `--approval` overrides the key for one run.
#[test]
fn the_approval_key_and_plan_mode() {
    let repo = Repo::new();
    let home = crate::support::repo_dir();
    let set = repo
        .nop()
        .env("HOME", home.path())
        .args(["config", "set", "approval", "plan", "--user"])
        .output()
        .expect("config set");
    assert!(
        set.status.success(),
        "{}",
        String::from_utf8_lossy(&set.stderr)
    );
    let script = || {
        MockServer::start(vec![
            openai::reply_tool_calls(&[
                ("c1", "read-file", json!({"path": ".nop/config.yml"})),
                (
                    "c2",
                    "write-file",
                    json!({"path": "work/new.txt", "content": "x"}),
                ),
                ("c3", "shell", json!({"command": "echo ran > work/ran.txt"})),
            ]),
            openai::reply_text("Plan: write work/new.txt."),
        ])
    };
    let server = script();
    let out = repo
        .nop_model(&server, "openai")
        .env("HOME", home.path())
        .args(["run", "--output-format", "json", "make the file"])
        .output()
        .expect("run");
    crate::support::assert_ok(&out);
    let results = server.results_of(&["c1", "c2", "c3"]);
    assert!(!results[0].contains("plan mode"), "{}", results[0]);
    // write-file is refused; the shell command runs, and cannot write the repository.
    for r in &results[1..] {
        assert!(r.contains("plan mode: nothing is changed"), "{r}");
    }
    assert!(!results[2].starts_with("exit code: 0"), "{}", results[2]);
    assert!(!repo.path().join("work/new.txt").exists());
    assert!(!repo.path().join("work/ran.txt").exists());
    // The command line beats the key.
    let server = script();
    let out = repo
        .nop_model(&server, "openai")
        .env("HOME", home.path())
        .args([
            "run",
            "--approval",
            "on-request",
            "--output-format",
            "json",
            "make the file",
        ])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0));
    assert!(repo.path().join("work/new.txt").exists());
    assert!(repo.path().join("work/ran.txt").exists());
}
