//! The user's own configuration (`~/.config/nop/config.yml`, under `XDG_CONFIG_HOME` when it is
//! set) between the defaults and the repository's file, `nop config set [--user]`, and the
//! messages a first-time user meets: a bad number, an unknown key, an unreachable model API,
//! the end of `--max-turns`.

use std::fs;
use std::path::{Path, PathBuf};

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::support::Repo;
use crate::support::mock::{MockServer, openai};

/// `XDG_CONFIG_HOME` inside the repository's temp directory, and the user file under it.
fn xdg(repo: &Repo) -> (PathBuf, PathBuf) {
    let dir = repo.path().join("xdg");
    let file = dir.join("nop/config.yml");
    (dir, file)
}

fn write_user_file(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    fs::write(path, text).expect("write user file");
}

/// `nop args…` with `XDG_CONFIG_HOME` set and nothing of the model in the environment.
fn nop_xdg(repo: &Repo, dir: &Path, args: &[&str]) -> std::process::Output {
    repo.nop()
        .env("XDG_CONFIG_HOME", dir)
        .args(args)
        .output()
        .expect("run nop")
}

fn ok(output: &std::process::Output) -> String {
    assert_eq!(
        output.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn failed(output: &std::process::Output) -> String {
    assert_eq!(
        output.status.code(),
        Some(1),
        "stdout: {}",
        String::from_utf8_lossy(&output.stdout)
    );
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn config_show(repo: &Repo, dir: &Path) -> Value {
    serde_json::from_str(&ok(&nop_xdg(repo, dir, &["config", "show", "--json"]))).expect("json")
}

#[test]
fn the_user_file_serves_every_repository_and_a_repository_value_beats_it() {
    let server = MockServer::start(vec![
        openai::reply_text("from the user's model"),
        openai::reply_text("from another repository"),
        openai::reply_text("from the repository's model"),
    ]);
    let repo = Repo::new();
    let (dir, user_file) = xdg(&repo);
    write_user_file(
        &user_file,
        &format!(
            "# mine\nprovider:\n  base_url: {}\n  model: user-model\n  retry_base_ms: 1\nadvisors:\n  enabled: false\n",
            server.openai_base_url()
        ),
    );

    // No NOP_* variable, and the repository's .nop/config.yml (the shipped one) sets no model.
    let out = ok(&nop_xdg(&repo, &dir, &["run", "say hi"]));
    assert!(out.contains("from the user's model"), "{out}");
    assert_eq!(server.requests()[0].body["model"], "user-model");

    // Another repository, the same user: the same model, set once.
    let other = Repo::new();
    let out = ok(&nop_xdg(&other, &dir, &["run", "say hi"]));
    assert!(out.contains("from another repository"), "{out}");
    assert_eq!(server.requests()[1].body["model"], "user-model");

    // `nop config show` names the user file as the origin.
    let shown = config_show(&repo, &dir);
    let user_origin = format!("user file {}", user_file.display());
    assert_eq!(shown["provider.model"]["value"], "user-model");
    assert_eq!(shown["provider.model"]["origin"], user_origin);
    assert_eq!(shown["provider.base_url"]["origin"], user_origin);
    assert_eq!(shown["log.level"]["origin"], "default");

    // The repository's own value beats the user's.
    let set = ok(&nop_xdg(
        &repo,
        &dir,
        &["config", "set", "provider.model", "repo-model"],
    ));
    assert!(set.starts_with("provider.model = repo-model in "), "{set}");
    let out = ok(&nop_xdg(&repo, &dir, &["run", "say hi"]));
    assert!(out.contains("from the repository's model"), "{out}");
    assert_eq!(server.requests()[2].body["model"], "repo-model");
    let shown = config_show(&repo, &dir);
    let repo_file = fs::canonicalize(repo.path())
        .expect("canonical")
        .join(".nop/config.yml");
    assert_eq!(
        shown["provider.model"]["origin"],
        format!("file {}", repo_file.display())
    );
    assert_eq!(shown["provider.base_url"]["origin"], user_origin);
    // The shipped file's comments are still there, and the key is set where it was shown.
    let text = fs::read_to_string(&repo_file).expect("read");
    assert_eq!(
        text.lines().count(),
        include_str!("../../.nop/config.yml").lines().count(),
        "{text}"
    );
    assert!(text.contains("  model: repo-model"), "{text}");
    assert!(
        text.starts_with("# nop configuration for this repository."),
        "{text}"
    );
}

#[test]
fn config_set_user_writes_the_user_file_and_keeps_what_is_there() {
    let repo = Repo::new();
    let (dir, user_file) = xdg(&repo);
    assert!(!user_file.exists());
    let out = ok(&nop_xdg(
        &repo,
        &dir,
        &["config", "set", "model", "gpt-4.1", "--user"],
    ));
    assert_eq!(
        out,
        format!("provider.model = gpt-4.1 in {}\n", user_file.display())
    );
    assert_eq!(
        fs::read_to_string(&user_file).expect("read"),
        "provider:\n  model: gpt-4.1\n"
    );

    // A second key keeps the first, and the comment the user added by hand.
    let text = fs::read_to_string(&user_file).expect("read");
    fs::write(
        &user_file,
        format!("# set once for all my repositories\n{text}"),
    )
    .expect("write");
    ok(&nop_xdg(
        &repo,
        &dir,
        &["config", "set", "--user", "provider.api_key_env", "MY_KEY"],
    ));
    ok(&nop_xdg(
        &repo,
        &dir,
        &["config", "set", "provider", "anthropic", "--user"],
    ));
    assert_eq!(
        fs::read_to_string(&user_file).expect("read"),
        "# set once for all my repositories\nprovider:\n  model: gpt-4.1\n  api_key_env: MY_KEY\n  kind: anthropic\n"
    );
    let shown = config_show(&repo, &dir);
    for key in ["provider.model", "provider.api_key_env", "provider.kind"] {
        assert_eq!(
            shown[key]["origin"],
            format!("user file {}", user_file.display()),
            "{key}"
        );
    }
    assert_eq!(shown["provider.kind"]["value"], "anthropic");

    // Without XDG_CONFIG_HOME the file is under HOME (the repository's directory here).
    let out = repo
        .nop()
        .args(["config", "set", "log.level", "debug", "--user"])
        .output()
        .expect("run");
    let home_file = repo.path().join(".config/nop/config.yml");
    assert_eq!(
        ok(&out),
        format!("log.level = debug in {}\n", home_file.display())
    );
    assert_eq!(
        fs::read_to_string(&home_file).expect("read"),
        "log:\n  level: debug\n"
    );

    // The global `--user NAME` (who you are) is not the user file.
    ok(&repo
        .nop()
        .env("XDG_CONFIG_HOME", &dir)
        .args(["--user", "alice", "config", "set", "agent.max_turns", "7"])
        .output()
        .expect("run"));
    let shown = config_show(&repo, &dir);
    assert_eq!(shown["agent.max_turns"]["value"], 7);
    assert!(
        shown["agent.max_turns"]["origin"]
            .as_str()
            .is_some_and(|o| o.starts_with("file ")),
        "{shown}"
    );
}

#[test]
fn a_bad_value_or_key_is_refused_and_nothing_is_written() {
    let repo = Repo::new();
    let (dir, user_file) = xdg(&repo);

    let err = failed(&nop_xdg(
        &repo,
        &dir,
        &["config", "set", "agent.max_turns", "0", "--user"],
    ));
    assert!(
        err.contains("`agent.max_turns`")
            && err.contains("must be a whole number from 1 to 4294967295, not 0"),
        "{err}"
    );
    let err = failed(&nop_xdg(
        &repo,
        &dir,
        &["config", "set", "session.lock_timeout_s", "-1", "--user"],
    ));
    assert!(
        err.contains("`session.lock_timeout_s`")
            && err.contains("must be more than 0 and at most 3600 seconds, not -1"),
        "{err}"
    );
    assert!(!user_file.exists(), "nothing is written");

    // The API key itself never goes into a file.
    let err = failed(&nop_xdg(
        &repo,
        &dir,
        &[
            "config",
            "set",
            "provider.api_key",
            "sk-secret-123",
            "--user",
        ],
    ));
    assert!(
        err.contains("provider.api_key_env") && !err.contains("sk-secret-123"),
        "{err}"
    );
    let err = failed(&nop_xdg(
        &repo,
        &dir,
        &["config", "set", "api_key_env", "sk-secret-123", "--user"],
    ));
    assert!(err.contains("never the key itself"), "{err}");
    assert!(!user_file.exists(), "nothing is written");

    // A file that does not load is never overwritten.
    write_user_file(&user_file, "provider:\n  model: [unclosed\n");
    let err = failed(&nop_xdg(
        &repo,
        &dir,
        &["config", "set", "model", "x", "--user"],
    ));
    assert!(
        err.contains(&format!("{} was not changed", user_file.display()))
            && err.contains("fix it first"),
        "{err}"
    );
    assert_eq!(
        fs::read_to_string(&user_file).expect("read"),
        "provider:\n  model: [unclosed\n"
    );
    // ... and every command names it.
    let err = failed(&nop_xdg(&repo, &dir, &["sessions", "list"]));
    assert!(err.contains(&format!("{}:", user_file.display())), "{err}");

    // The repository's file: the same checks.
    let repo_file = repo.path().join(".nop/config.yml");
    let before = fs::read_to_string(&repo_file).expect("read");
    let err = failed(&nop_xdg(
        &repo,
        &dir,
        &["config", "set", "tools.output_max_bytes", "10"],
    ));
    assert!(
        err.contains("`tools.output_max_bytes`") && err.contains("at least 1000, not 10"),
        "{err}"
    );
    assert_eq!(fs::read_to_string(&repo_file).expect("read"), before);
}

#[test]
fn an_unknown_key_suggests_at_most_five_close_keys() {
    let repo = Repo::new();
    let (dir, _) = xdg(&repo);
    let err = failed(&nop_xdg(&repo, &dir, &["config", "set", "modle", "x"]));
    assert!(
        err.contains("unknown configuration key `modle`")
            && err.contains("did you mean `provider.model`?"),
        "{err}"
    );
    let err = failed(&nop_xdg(
        &repo,
        &dir,
        &["--set", "timeout=5", "config", "show"],
    ));
    let line = err.lines().next().unwrap_or_default();
    let suggested = line.matches("_s`").count();
    assert!(
        line.contains("did you mean `") && (1..=5).contains(&suggested),
        "{err}"
    );
    assert!(!err.contains("chat.batching"), "not the whole list: {err}");
    // In a file: the key, its line, and what was meant.
    fs::write(
        repo.path().join(".nop/config.yml"),
        "provider:\n  modle: x\n",
    )
    .expect("write");
    let err = failed(&nop_xdg(&repo, &dir, &["sessions", "list"]));
    assert!(
        err.contains("config.yml:2:3: unknown configuration key `provider.modle`; did you mean `provider.model`?"),
        "{err}"
    );
}

#[test]
fn a_bad_number_names_the_key_the_file_and_the_range() {
    let repo = Repo::new();
    let (dir, user_file) = xdg(&repo);
    write_user_file(&user_file, "agent:\n  max_turns: -5\n");
    let err = failed(&nop_xdg(&repo, &dir, &["sessions", "list"]));
    assert_eq!(
        err.trim_end(),
        format!(
            "error: {}:2:14: `agent.max_turns` must be a whole number from 1 to 4294967295, not -5",
            user_file.display()
        )
    );
    fs::remove_file(&user_file).expect("rm");

    let out = nop_xdg(&repo, &dir, &["run", "--max-turns", "abc", "hi"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("'--max-turns <N>': must be a whole number from 1 to 4294967295"),
        "{err}"
    );
    let err = failed(&nop_xdg(
        &repo,
        &dir,
        &["--set", "agent.max_turns=many", "sessions", "list"],
    ));
    assert!(
        err.contains("`agent.max_turns` (from command line --set): must be a whole number from 1 to 4294967295, not many"),
        "{err}"
    );
}

#[test]
fn an_unreachable_model_api_names_the_url_and_the_cause() {
    let repo = Repo::new();
    // A port nobody listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let out = repo
        .nop()
        .env("NOP_BASE_URL", format!("http://127.0.0.1:{port}/v1"))
        .env("NOP_MODEL", "m")
        .env("NOP_PROVIDER_MAX_ATTEMPTS", "1")
        .env("NOP_ADVISORS_ENABLED", "false")
        .args(["run", "hi"])
        .output()
        .expect("run");
    let err = failed(&out);
    assert!(
        err.contains(&format!(
            "could not reach the model API at http://127.0.0.1:{port}/v1/chat/completions: connection refused ("
        )),
        "{err}"
    );
}

#[test]
fn a_run_at_its_max_turns_says_so_and_how_to_go_on_with_the_real_session() {
    let repo = Repo::new();
    fs::write(repo.path().join("a.txt"), "a\n").expect("write");
    let server = MockServer::start(vec![openai::reply_tool_calls(&[(
        "c1",
        "read-file",
        json!({"path": "a.txt"}),
    )])]);
    let out = repo
        .nop_model(&server, "openai")
        .args([
            "run",
            "--max-turns",
            "1",
            "--output-format",
            "json",
            "read it",
        ])
        .output()
        .expect("run");
    let result: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let list: Value =
        serde_json::from_str(&repo.run(&["sessions", "list", "--json"])).expect("json");
    let id = list[0]["id"].as_str().expect("a session");
    // The engine says how the run ended; the renderer words how to go on.
    assert_eq!(result["limit"], "max_turns", "{result}");
    assert_eq!(
        result["continue_with"],
        format!("nop run --session {id}"),
        "{result}"
    );
    assert_eq!(
        result["final_message"],
        "stopped after 1 model requests without finishing (--max-turns / agent.max_turns)"
    );
}

/// The model must not widen its own rights through the user's configuration: neither a shell
/// command (writing the file, or running `nop config set --user`) nor write-file can change the
/// user file, which lives outside the repository (HOME here is beside it, not under /tmp).
#[test]
fn the_agent_cannot_rewrite_the_users_configuration() {
    let repo = Repo::new();
    let home = crate::support::repo_dir();
    let user_file = home.path().join(".config/nop/config.yml");
    write_user_file(&user_file, "sandbox: required\n");
    let nop = assert_cmd::cargo::cargo_bin("nop");
    let attack = format!(
        "echo 'sandbox: off' > {file}; {nop} config set sandbox off --user; echo done",
        file = user_file.display(),
        nop = nop.display()
    );
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("s", "shell", json!({"command": attack}))]),
        openai::reply_tool_calls(&[(
            "w",
            "write-file",
            json!({"path": user_file.display().to_string(), "content": "sandbox: off\n"}),
        )]),
        openai::reply_text("tried"),
    ]);
    let output = repo
        .nop_model(&server, "openai")
        .env("HOME", home.path())
        .args(["run", "--output-format", "json", "loosen your limits"])
        .output()
        .expect("run");
    crate::support::assert_ok(&output);
    assert_eq!(
        fs::read_to_string(&user_file).expect("user file"),
        "sandbox: required\n"
    );
    let results = server.results_of(&["s", "w"]);
    assert!(
        results
            .iter()
            .any(|r| r.contains("refused") || r.contains("denied")),
        "{results:?}"
    );
}
