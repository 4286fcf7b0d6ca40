//! Hooks end to end: a before-tool hook that blocks `rm -rf`, a slow hook that times out, and the
//! session-start/after-tool/session-end events with their JSON on standard input.

use std::fs;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::Repo;
use crate::support::mock::{MockServer, openai};

fn with_hooks(yaml: &str) -> Repo {
    let repo = Repo::new();
    let config = repo.path().join(".nop/config.yml");
    let text = fs::read_to_string(&config).expect("config");
    // The template ends with an empty `hooks:` section: replace it.
    let base = text.split("\nhooks:").next().unwrap_or(&text);
    fs::write(&config, format!("{base}\nhooks:\n{yaml}")).expect("write");
    fs::create_dir_all(repo.path().join("work")).expect("mkdir");
    // The user wrote the hooks by hand: they run once the user trusts them.
    repo.trust();
    repo
}

#[test]
fn a_before_tool_hook_blocks_rm_rf_and_lets_the_rest_run() {
    let repo = with_hooks(
        "  before-tool:\n    - 'input=$(cat); if printf \"%s\" \"$input\" | grep -q \"rm -rf\"; then echo \"rm -rf is not allowed here\" >&2; exit 2; fi'\n",
    );
    fs::write(repo.path().join("work/keep.txt"), "keep").expect("write");
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[
            ("c1", "shell", json!({"command": "rm -rf work"})),
            ("c2", "shell", json!({"command": "echo still fine"})),
        ]),
        openai::reply_text("ok"),
    ]);
    repo.model_ok(&server, &["run", "clean up"]);
    let results = server.results_of(&["c1", "c2"]);
    assert!(
        results[0].starts_with("error (BlockedByHook): rm -rf is not allowed here"),
        "{results:?}"
    );
    assert!(results[1].contains("still fine"), "{results:?}");
    assert!(repo.path().join("work/keep.txt").exists());
}

#[test]
fn a_slow_hook_times_out_and_the_run_goes_on() {
    let repo = with_hooks("  timeout_s: 0.5\n  before-tool:\n    - 'sleep 30'\n");
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("c1", "shell", json!({"command": "echo ran"}))]),
        openai::reply_text("ok"),
    ]);
    let started = Instant::now();
    let out = repo
        .nop_model(&server, "openai")
        .args(["run", "go"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0));
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    assert!(server.result_of("c1").contains("ran"));
    let log = fs::read_to_string(repo.path().join(".nop/logs/system.log")).expect("log");
    assert!(
        log.contains("op=hook") && log.contains("still running after 0.5 s; killed"),
        "{log}"
    );
}

#[test]
fn session_and_tool_hooks_get_their_events_on_stdin() {
    let repo = with_hooks(
        "  session-start:\n    - 'cat > work/start.json'\n  after-tool:\n    - 'cat >> work/tools.jsonl; echo >> work/tools.jsonl'\n  session-end:\n    - 'cat > work/end.json'\n",
    );
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("c1", "shell", json!({"command": "echo hi"}))]),
        openai::reply_text("bye"),
    ]);
    let out = repo
        .nop_model(&server, "openai")
        .args(["run", "say hi"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0));
    let read = |name: &str| -> Value {
        serde_json::from_str(
            fs::read_to_string(repo.path().join("work").join(name))
                .expect(name)
                .trim(),
        )
        .expect("json")
    };
    let start = read("start.json");
    assert_eq!(
        (
            start["event"].clone(),
            start["agent"].clone(),
            start["input"].clone()
        ),
        (json!("session-start"), json!("coder"), json!("say hi"))
    );
    let tool = read("tools.jsonl");
    assert_eq!(
        (
            tool["event"].clone(),
            tool["tool"].clone(),
            tool["ok"].clone()
        ),
        (json!("after-tool"), json!("shell"), json!(true))
    );
    let end = read("end.json");
    assert_eq!(
        (end["status"].clone(), end["final_message"].clone()),
        (json!("completed"), json!("bye"))
    );
    assert_eq!(start["session_id"], end["session_id"]);
}

#[test]
fn a_hook_never_gets_the_provider_key() {
    let repo = with_hooks(
        "  session-start:\n    - 'env > work/session-start.env'\n  before-tool:\n    - 'env > work/before-tool.env'\n",
    );
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("c1", "shell", json!({"command": "echo ran"}))]),
        openai::reply_text("ok"),
    ]);
    let out = repo
        .nop_model(&server, "openai")
        .env("NOP_API_KEY", "sk-hook-canary-1")
        .env("MY_LLM_KEY_VAR", "sk-hook-canary-2")
        .env("NOP_PROVIDER_API_KEY_ENV", "MY_LLM_KEY_VAR")
        .env("HOOK_VISIBLE", "yes")
        .args(["run", "go"])
        .output()
        .expect("run");
    crate::support::assert_ok(&out);
    for name in ["session-start.env", "before-tool.env"] {
        let env = fs::read_to_string(repo.path().join("work").join(name)).expect(name);
        assert!(env.contains("HOOK_VISIBLE=yes"), "{env}");
        assert!(!env.contains("sk-hook-canary"), "{name}: {env}");
    }
}

#[test]
fn prompt_and_session_start_hooks_find_the_new_session_written() {
    // A new session is written beside the run and its first request; a hook given its id may
    // read it, so the run waits for it where a hook runs. What a hook sees is checked here; a
    // hook's own start takes longer than the write, so this cannot catch a run that forgot to
    // wait (the unit tests of `FirstWrite` hold the ordering).
    let copy = |to: &str| {
        format!(
            "'id=$(sed -n \"s/.*\\\"session_id\\\":\\\"\\([^\\\"]*\\)\\\".*/\\1/p\"); cp .nop/sessions/$id/session.json work/{to}'"
        )
    };
    let repo = with_hooks(&format!(
        "  user-prompt-submit:\n    - {}\n  session-start:\n    - {}\n",
        copy("at-prompt.json"),
        copy("at-start.json")
    ));
    let server = MockServer::start(vec![openai::reply_text("hello")]);
    let out = repo
        .nop_model(&server, "openai")
        .args(["run", "say hi"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let read = |name: &str| -> Value {
        let text = fs::read_to_string(repo.path().join("work").join(name)).expect(name);
        serde_json::from_str(&text).expect("json")
    };
    // At the prompt: the session exists, nothing in it yet.
    assert_eq!(read("at-prompt.json")["messages"], json!([]));
    // At the start: the first messages are in it, the input last.
    let at_start = read("at-start.json");
    let messages = at_start["messages"].as_array().expect("messages");
    assert_eq!(
        messages.last().map(|m| &m["content"]),
        Some(&json!("say hi"))
    );
    assert_eq!(at_start["status"], json!("running"));
}
