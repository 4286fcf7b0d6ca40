//! Regression tests for what was found by trying to break nop (issue 13): each named after the
//! defect it guards against.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;

use crate::support::Repo;
use crate::support::mock::{MockResponse, MockServer, openai};

/// The messages of the warning events in a stream-json output.
fn warnings(stdout: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "warning")
        .filter_map(|e| e["message"].as_str().map(str::to_string))
        .collect()
}

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
    crate::support::assert_ok(&out);
    assert_eq!(
        count.load(Ordering::SeqCst),
        1,
        "one request for one prompt"
    );
    let warnings = warnings(&out.stdout);
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

/// Runs `command`, killing it if it has not finished within `seconds` (then the test fails
/// instead of hanging).
fn output_within(mut command: std::process::Command, seconds: u64) -> std::process::Output {
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(seconds);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("still running after {seconds} s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn read_file_refuses_a_fifo_or_a_device_at_once() {
    let repo = Repo::new();
    let fifo = repo.path().join("pipe");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[
            ("c1", "read-file", serde_json::json!({"path": "pipe"})),
            (
                "c2",
                "read-file",
                serde_json::json!({"path": "/dev/zero", "limit": 2}),
            ),
        ]),
        openai::reply_text("done"),
    ]);
    let mut command = repo.nop_model_process(&server, "openai");
    // /dev/zero is outside the repository: allow reading it so the refusal is the file type's.
    std::fs::write(
        repo.path().join(".nop/.permissions/agent-default.yml"),
        "tools:\n  allowed: [\"*\"]\nfile-access:\n  - pattern: \"/dev/**\"\n    access: read-only\n  \
         - pattern: \"**\"\n    access: read\n",
    )
    .unwrap();
    repo.trust();
    command.args(["run", "read them"]);
    let out = output_within(command, 20);
    crate::support::assert_ok(&out);
    let results = server.results_of(&["c1", "c2"]);
    assert!(
        results[0].contains("pipe is a named pipe (FIFO), not a regular file"),
        "{results:?}"
    );
    assert!(
        results[1].contains("/dev/zero is a device, not a regular file"),
        "{results:?}"
    );
}

#[test]
fn reading_two_lines_of_a_large_file_streams_it() {
    let repo = Repo::new();
    let big = repo.path().join("big.log");
    {
        use std::io::Write as _;
        let mut file = std::io::BufWriter::new(std::fs::File::create(&big).unwrap());
        let line = format!("{}\n", "x".repeat(99));
        for _ in 0..1_500_000 {
            file.write_all(line.as_bytes()).unwrap();
        }
    }
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[(
            "c1",
            "read-file",
            serde_json::json!({"path": "big.log", "offset": 3, "limit": 2}),
        )]),
        openai::reply_text("done"),
    ]);
    // Python runs nop as its only child, so its children's peak memory is nop's.
    let nop = assert_cmd::cargo::cargo_bin("nop");
    let mut command = std::process::Command::new("python3");
    command
        .args([
            "-c",
            "import resource, subprocess, sys; \
             code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode; \
             print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(code)",
        ])
        .arg(&nop)
        .args(["run", "read two lines"])
        .current_dir(repo.path())
        .env_clear()
        .env("HOME", repo.path())
        .env("PATH", "/usr/bin:/bin")
        .envs(crate::support::model_env(&server, "openai"));
    let out = output_within(command, 60);
    crate::support::assert_ok(&out);
    let peak_kib: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let result = server.result_of("c1");
    let expected = format!(
        "{0}\n{0}\n[lines 3-4 of 1500000; use offset/limit to read more]",
        "x".repeat(99)
    );
    assert_eq!(result, expected);
    // The file is 150 MB; nop itself needs a few.
    assert!(peak_kib < 60 * 1024, "peak memory {peak_kib} KiB");
}

#[test]
fn two_compactions_at_once_lose_nothing_appended_meanwhile() {
    let repo = Repo::new();
    // The first compaction to reach its before-compact hook waits there until released.
    let config = repo.path().join(".nop/config.yml");
    let text = std::fs::read_to_string(&config).unwrap();
    let base = text.split("\nhooks:").next().unwrap().to_string();
    std::fs::write(
        &config,
        format!(
            "{base}\nhooks:\n  before-compact:\n    - \"if mkdir gates/first 2>/dev/null; then \
             while [ ! -e gates/go ]; do sleep 0.01; done; fi\"\n"
        ),
    )
    .unwrap();
    repo.trust();
    std::fs::create_dir_all(repo.path().join("gates")).unwrap();
    let id = repo.session().alternating(30, |i| format!("m{i}")).write();
    let server = MockServer::start(vec![
        openai::reply_text("summary one"),
        openai::reply_text("summary two"),
    ]);
    let first = repo
        .nop_model_process(&server, "openai")
        .args(["compact", &id])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !repo.path().join("gates/first").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the first compaction never started"
        );
        std::thread::yield_now();
    }
    // The second compaction runs to its end while the first waits, then messages arrive.
    repo.model_ok(&server, &["compact", &id]);
    for i in 0..5 {
        repo.run(&["sessions", "append", &id, &format!("late{i}")]);
    }
    std::fs::create_dir(repo.path().join("gates/go")).unwrap();
    let out = first.wait_with_output().unwrap();
    let session = repo.session_json(&id);
    let texts: Vec<&str> = session["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    for i in 0..5 {
        let late = format!("late{i}");
        assert!(texts.contains(&late.as_str()), "{late} lost: {texts:?}");
    }
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("changed while it was being compacted"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(session["compressions"].as_array().unwrap().len(), 1);
}

#[test]
fn a_session_json_without_messages_is_refused_with_file_and_field_and_left_alone() {
    let repo = Repo::new();
    let id = repo.session().user("kept").write();
    let file = repo.session_dir(&id).join("session.json");
    let mut value: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    value.as_object_mut().unwrap().remove("messages");
    let damaged = serde_json::to_string_pretty(&value).unwrap();
    std::fs::write(&file, &damaged).unwrap();
    for args in [
        vec!["sessions", "show", id.as_str()],
        vec!["sessions", "append", id.as_str(), "more"],
    ] {
        let err = repo.fail(&args);
        assert!(
            err.contains("session.json") && err.contains("missing field `messages`"),
            "{args:?}: {err}"
        );
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), damaged);
}

#[test]
fn permission_file_problems_name_the_file_and_the_line() {
    let repo = Repo::new();
    let dir = repo.path().join(".nop/.permissions");
    let write = |name: &str, text: &str| std::fs::write(dir.join(name), text).unwrap();
    write(
        "agent-a.yml",
        "# a\nextends: typo\ntools:\n  allowed: [\"*\"]\n",
    );
    write("agent-x.yml", "extends: y\n");
    write("agent-y.yml", "extends: x\n");
    write("agent-c.yml", "# only a comment\n# and another\n");
    let out = repo.nop().args(["permissions", "check"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    let a = dir.join("agent-a.yml");
    let typo = dir.join("agent-typo.yml");
    assert!(
        text.contains(&format!(
            "{}:2: `extends: typo` names {}, which does not exist",
            a.display(),
            typo.display()
        )),
        "{text}"
    );
    assert!(
        text.contains("a cycle: agent-x.yml → agent-y.yml → agent-x.yml"),
        "{text}"
    );
    assert!(
        text.contains("agent-c.yml: the file sets nothing (comments only)"),
        "{text}"
    );
    assert!(
        text.contains("ok       .nop/.permissions/agent-default.yml"),
        "{text}"
    );
}

#[test]
fn invalid_utf8_in_config_or_plan_names_the_byte() {
    let repo = Repo::new();
    let id = repo.new_session();
    let plan = repo.session_dir(&id).join("plan.xml");
    std::fs::write(
        &plan,
        b"<tasks>\n  <task id=\"1\" title=\"caf\xe9\"/>\n</tasks>\n",
    )
    .unwrap();
    let err = repo.fail(&["plan", &id]);
    assert!(
        err.contains("plan.xml:2:26: invalid UTF-8 at byte 33"),
        "{err}"
    );
    let config = repo.path().join(".nop/config.yml");
    let mut bytes = std::fs::read(&config).unwrap();
    let at = bytes.len();
    bytes.extend_from_slice(b"# caf\xe9\n");
    std::fs::write(&config, &bytes).unwrap();
    let err = repo.fail(&["config", "show"]);
    assert!(
        err.contains("config.yml:") && err.contains(&format!("invalid UTF-8 at byte {}", at + 5)),
        "{err}"
    );
}

#[test]
fn an_empty_agents_yml_means_one_rule_for_run_and_sessions_new() {
    let repo = Repo::new();
    std::fs::write(repo.path().join(".nop/agents.yml"), "").unwrap();
    // The built-in coder exists without agents.yml, for both.
    let id = repo.new_session();
    assert!(!id.is_empty());
    let server = MockServer::start(vec![openai::reply_text("hi")]);
    repo.model_ok(&server, &["run", "hello"]);
    // Any other agent must be defined, for both, with the same words.
    let new = repo.fail(&["sessions", "new", "--agent", "helper"]);
    let run = String::from_utf8_lossy(
        &repo
            .nop_model(&server, "openai")
            .args(["run", "--agent", "helper", "hello"])
            .output()
            .unwrap()
            .stderr,
    )
    .into_owned();
    assert!(new.contains("no agent `helper` in"), "{new}");
    assert!(run.contains("no agent `helper` in"), "{run}");
}

#[test]
fn a_whole_json_reply_to_a_streaming_request_is_taken_or_named() {
    let repo = Repo::new();
    let body = serde_json::json!({
        "id": "c1", "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello there"},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 2},
    });
    let server = MockServer::start(vec![MockResponse::status(200, body.to_string())]);
    let out = repo.model_ok(&server, &["run", "--output-format", "json", "hi"]);
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["final_message"], "hello there", "{result}");
    assert_eq!(server.requests().len(), 1);

    // Anthropic's whole message is not taken, but said for what it is, and not retried.
    let message =
        serde_json::json!({"type": "message", "content": [{"type": "text", "text": "hi"}]});
    let server = MockServer::start(vec![MockResponse::status(200, message.to_string())]);
    let out = repo
        .nop_model(&server, "anthropic")
        .args(["run", "hi"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("answered a streaming request with one JSON document"),
        "{err}"
    );
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn keep_alive_comments_alone_and_a_stalled_error_body_time_out() {
    let repo = Repo::new();
    // Comments every 50 ms, for far longer than the test may take.
    let server = MockServer::start(vec![
        MockResponse::Sse {
            chunks: vec![": keep-alive\n\n".to_string(); 100_000],
            delay: std::time::Duration::from_millis(50),
        },
        MockResponse::StalledError {
            code: 500,
            hold: std::time::Duration::from_secs(600),
        },
    ]);
    let run = |server: &MockServer| {
        let mut command = repo.nop_model_process(server, "openai");
        command
            .env("NOP_PROVIDER_STREAM_IDLE_TIMEOUT_S", "1")
            .env("NOP_PROVIDER_MAX_ATTEMPTS", "1")
            .args(["run", "hi"]);
        output_within(command, 30)
    };
    let out = run(&server);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("the stream sent no event for 1s"), "{err}");
    let out = run(&server);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("500") && err.contains("no body within 1s"),
        "{err}"
    );
}

#[test]
fn ctrl_c_ends_the_pause_before_an_advised_retry_at_once() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[(
            "c1",
            "read-file",
            serde_json::json!({"path": "missing.txt"}),
        )]),
        // retry-advisor's answer: retry (after advisors.retry_delay_s, an hour here).
        openai::reply_text(
            r#"{"shouldRetry": true, "reason": "try again", "suggestedAction": "retry", "modifiedParams": {}}"#,
        ),
        openai::reply_text("done"),
    ]);
    let mut command = repo.nop_model_process(&server, "openai");
    command
        .env("NOP_ADVISORS_ENABLED", "true")
        .env("NOP_ADVISORS_RETRY_DELAY_S", "3600")
        .args(["run", "read it"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let mut child = command.spawn().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
        text
    });
    // Once the advisor's request is in, the pause comes next (or has begun).
    server.wait_for_requests(2, std::time::Duration::from_secs(20));
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("nop still waited for the retry after Ctrl-C");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let stderr = reader.join().unwrap_or_default();
    assert_eq!(status.code(), Some(130), "{stderr}");
}

#[test]
fn a_tool_result_shown_is_in_session_json_even_when_nop_is_killed_right_then() {
    use std::io::BufRead as _;
    for round in 0..5 {
        let repo = Repo::new();
        std::fs::write(repo.path().join("notes.txt"), format!("round {round}\n")).unwrap();
        let server = MockServer::start(vec![
            openai::reply_tool_calls(&[(
                "c1",
                "read-file",
                serde_json::json!({"path": "notes.txt"}),
            )]),
            openai::reply_text("read"),
        ]);
        let mut child = repo
            .nop_model_process(&server, "openai")
            .args(["run", "--output-format", "stream-json", "read the notes"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut session = None;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let event: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
            if let Some(id) = event["session_id"].as_str() {
                session = Some(id.to_string());
            }
            if event["type"] == "tool_result" {
                // The user has seen it: kill nop at once.
                child.kill().unwrap();
                break;
            }
        }
        let _ = child.wait();
        let id = session.expect("a session id in the stream");
        let json = repo.session_json(&id);
        let results: Vec<&str> = json["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "tool")
            .filter_map(|m| m["content"].as_str())
            .collect();
        assert!(
            results
                .iter()
                .any(|r| r.contains(&format!("round {round}"))),
            "round {round}: {results:?}"
        );
    }
}

#[test]
fn corrupt_memory_is_a_warning_not_silently_left_out_of_the_prompt() {
    let repo = Repo::new();
    std::fs::create_dir_all(repo.path().join(".nop/memory")).unwrap();
    let memory = repo.path().join(".nop/memory/coder.json");
    std::fs::write(&memory, "{ torn").unwrap();
    let server = MockServer::start(vec![openai::reply_text("hi")]);
    let out = repo.model_ok(&server, &["run", "--output-format", "stream-json", "hello"]);
    let warnings = warnings(&out.stdout);
    assert!(
        warnings.iter().any(
            |w| w.contains("long-term memory of `coder` could not be read")
                && w.contains("coder.json")
        ),
        "{warnings:?}"
    );
    // Left as it was, for the user to repair.
    assert_eq!(std::fs::read_to_string(&memory).unwrap(), "{ torn");
}

#[test]
fn temporary_directories_of_killed_runs_are_cleaned_by_the_next_write_not_after_an_hour() {
    let repo = Repo::new();
    let id = repo.new_session();
    let sessions = repo.sessions_dir();
    // What a create or fork killed half way leaves: a temporary session directory, just now.
    let left = sessions.join(".tmp-killed");
    std::fs::create_dir(&left).unwrap();
    std::fs::write(left.join("session.json"), "{\"half\":").unwrap();
    // One that a live nop is still building: its builder holds it.
    let building = sessions.join(".tmp-building");
    std::fs::create_dir(&building).unwrap();
    let hold = std::fs::File::open(&building).unwrap();
    hold.lock().unwrap();
    // And a temporary file a killed write left in the session itself.
    let torn = repo.session_dir(&id).join(".tmp-torn");
    std::fs::write(&torn, "{\"half\":").unwrap();

    // The next write to that session, by another process.
    repo.run(&["sessions", "append", &id, "next"]);
    assert!(!left.exists(), "a killed run's temporary directory stayed");
    assert!(!torn.exists(), "a killed write's temporary file stayed");
    assert!(
        building.exists(),
        "a directory still being built was removed"
    );

    // Once its builder is gone, the next create removes it too.
    drop(hold);
    repo.run(&["sessions", "new"]);
    assert!(!building.exists());
}

/// The session directories of a repository whose session.json mentions `needle`.
fn sessions_mentioning(repo: &Repo, needle: &str) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(repo.sessions_dir())
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            std::fs::read_to_string(p.join("session.json")).is_ok_and(|s| s.contains(needle))
        })
        .collect()
}

#[test]
fn a_subagent_whose_final_status_cannot_be_recorded_is_a_warning_not_silence() {
    let repo = Repo::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let (seen, root) = (calls.clone(), repo.path().to_path_buf());
    let server = MockServer::start_with(Box::new(move |_| {
        match seen.fetch_add(1, Ordering::SeqCst) {
            0 => openai::reply_tool_calls(&[(
                "c1",
                "call-agent",
                serde_json::json!({"agent": "coder", "arguments": "investigate"}),
            )]),
            1 => {
                // While the subagent works, its session.json is broken (a disk error, a person).
                let sessions = root.join(".nop/sessions");
                for entry in std::fs::read_dir(&sessions).unwrap().filter_map(Result::ok) {
                    let file = entry.path().join("session.json");
                    if std::fs::read_to_string(&file).is_ok_and(|s| s.contains("\"caller\"")) {
                        std::fs::write(&file, "{\"broken\":").unwrap();
                    }
                }
                openai::reply_text("found it")
            }
            _ => openai::reply_text("handled"),
        }
    }));
    let out = repo
        .nop_model(&server, "openai")
        .args(["run", "--output-format", "stream-json", "delegate"])
        .output()
        .unwrap();
    assert!(calls.load(Ordering::SeqCst) >= 2, "the subagent never ran");
    let warnings = warnings(&out.stdout);
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("subagent session") && w.contains("could not record")),
        "{warnings:?}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The broken file is left as it was for a person to look at.
    assert_eq!(sessions_mentioning(&repo, "{\"broken\":").len(), 1);
}

#[test]
fn an_unreadable_priority_stack_is_a_warning_once_not_silently_not_paused() {
    let repo = Repo::new();
    std::fs::write(
        repo.path().join(".nop/agents.yml"),
        "agents:\n  - name: coder\n    description: codes\n    priority: 50\n    interruptible: true\n",
    )
    .unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let (seen, stack) = (calls.clone(), repo.path().join(".nop/state/active.json"));
    let server = MockServer::start_with(Box::new(move |_| {
        match seen.fetch_add(1, Ordering::SeqCst) {
            0 => {
                assert!(stack.exists(), "the run did not enter the priority stack");
                std::fs::write(&stack, "{\"users\": [not json").unwrap();
                openai::reply_tool_calls(&[
                    ("c1", "list-files", serde_json::json!({})),
                    ("c2", "list-files", serde_json::json!({})),
                ])
            }
            _ => openai::reply_text("done"),
        }
    }));
    let out = repo
        .nop_model(&server, "openai")
        .args(["run", "--output-format", "stream-json", "work"])
        .output()
        .unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let about_stack: Vec<String> = warnings(&out.stdout)
        .into_iter()
        .filter(|w| w.contains("priority stack cannot be read"))
        .collect();
    // Three checkpoints read it (two between tools, one before the request): one warning.
    assert_eq!(about_stack.len(), 1, "{about_stack:?}");
    assert!(about_stack[0].contains("active.json"), "{about_stack:?}");
    // The stack is not overwritten: the run's end says it cannot update it.
    assert_eq!(
        std::fs::read_to_string(repo.path().join(".nop/state/active.json")).unwrap(),
        "{\"users\": [not json"
    );
}

#[test]
fn a_session_that_cannot_be_read_is_named_when_left_out_of_a_summary() {
    let repo = Repo::new();
    repo.session()
        .user("the parser chokes")
        .created_at("2026-01-15T10:00:00Z")
        .write();
    let broken = repo.new_session();
    std::fs::write(
        repo.session_dir(&broken).join("session.json"),
        "{\"broken\":",
    )
    .unwrap();
    let server = MockServer::start(vec![openai::reply_text(
        &serde_json::json!({
            "summary": "Parser work.",
            "topics": ["parser"],
            "keyPoints": ["it chokes"],
            "keywords": ["parser"]
        })
        .to_string(),
    )]);
    let out = repo
        .nop_model(&server, "openai")
        .args(["memory", "summarize", "--date", "2026-01-15"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("left out of the summary") && stderr.contains(&broken),
        "{stderr}"
    );
}
