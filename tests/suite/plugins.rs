//! Plugins end to end: a tiny MCP server written for the tests (tests/fixtures/mcp_server.py,
//! stdio, JSON-RPC) and a plain command tool, through the real binary and the mock model.

use std::fs;
use std::path::Path;

use serde_json::{Value, json};

use crate::support::Repo;
use crate::support::mock::{MockServer, openai};

/// A repository with plugin `demo`: the test MCP server and a command tool `greet`.
fn repo_with_demo_plugin() -> Repo {
    let repo = Repo::new();
    let dir = repo.path().join(".nop/plugins/demo");
    fs::create_dir_all(&dir).expect("mkdir");
    let server = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp_server.py");
    fs::write(
        dir.join("config.yml"),
        format!(
            "description: test plugin\nmcp:\n  command: python3\n  args: [\"{}\"]\n  startup_timeout_s: 20\ntools:\n  - name: greet\n    description: Greets someone\n    command: ./greet.sh\n    input_schema: {{type: object, properties: {{name: {{type: string}}}}, required: [name]}}\n",
            server.display()
        ),
    )
    .expect("write");
    fs::write(
        dir.join("greet.sh"),
        "#!/usr/bin/env bash\nname=$(cat | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"name\"])')\necho \"hello $name\"\n",
    )
    .expect("write");
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(dir.join("greet.sh"), fs::Permissions::from_mode(0o755)).expect("chmod");
    // The user wrote the plugin by hand: its server starts once they trust it.
    repo.trust();
    repo
}

#[test]
fn mcp_and_command_tools_appear_and_round_trip() {
    let repo = repo_with_demo_plugin();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[
            ("p1", "demo__echo", json!({"text": "hi there"})),
            ("p2", "demo__add", json!({"a": 2, "b": 3})),
            ("p3", "demo__greet", json!({"name": "Ann"})),
            ("p4", "demo__add", json!({"a": "two"})),
        ]),
        openai::reply_text("done"),
    ]);
    repo.model_ok(&server, &["run", "use the plugin"]);
    let tools: Vec<String> = server.requests()[0].body["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
        .collect();
    for name in ["demo__echo", "demo__add", "demo__crash", "demo__greet"] {
        assert!(
            tools.contains(&name.to_string()),
            "{name} not offered: {tools:?}"
        );
    }
    let r = server.results_of(&["p1", "p2", "p3", "p4"]);
    assert_eq!(r[0], "hi there");
    assert_eq!(r[1], "5");
    assert_eq!(r[2].trim(), "hello Ann");
    assert!(
        r[3].contains("InvalidArguments") && r[3].contains("missing required argument `b`"),
        "{r:?}"
    );
    // Recorded under the plugin's name.
    let session = repo.first_session();
    assert_eq!(session["messages"][3]["toolCall"]["name"], "demo.echo");
    let plugins = repo.run(&["plugins", "list"]);
    assert!(
        plugins.contains("demo") && plugins.contains("loaded") && plugins.contains("demo.echo"),
        "{plugins}"
    );
}

#[test]
fn a_denied_plugin_tool_is_refused() {
    let repo = repo_with_demo_plugin();
    fs::write(
        repo.path().join(".nop/.permissions/agent-default.yml"),
        "tools:\n  allowed: [\"*\"]\n  denied: [\"demo.*\"]\nfile-access:\n  - pattern: \"**\"\n    access: read\n",
    )
    .expect("write");
    repo.trust();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("p1", "demo__echo", json!({"text": "hi"}))]),
        openai::reply_text("ok"),
    ]);
    let out = repo
        .nop_model(&server, "openai")
        .args(["run", "try"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0));
    let r = server.results_of(&["p1"]);
    assert!(
        r[0].contains("PermissionDenied") && r[0].contains("demo.echo"),
        "{r:?}"
    );
}

#[test]
fn a_broken_plugin_does_not_stop_the_run() {
    let repo = Repo::new();
    for (name, config) in [
        ("aaa-broken", "mcp: [unclosed\n"),
        ("bbb-ghost", "mcp:\n  command: /no/such/program\n"),
    ] {
        let dir = repo.path().join(".nop/plugins").join(name);
        fs::create_dir_all(&dir).expect("mkdir");
        fs::write(dir.join("config.yml"), config).expect("write");
    }
    repo.trust();
    let server = MockServer::start(vec![openai::reply_text("fine")]);
    let out = repo
        .nop_model(&server, "openai")
        .args(["run", "--output-format", "stream-json", "hi"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let warnings: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "warning")
        .collect();
    assert_eq!(warnings.len(), 2, "{stdout}");
    assert!(
        warnings[0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("aaa-broken") && m.contains("config.yml:1")),
        "{warnings:?}"
    );
    assert!(
        warnings[1]["message"]
            .as_str()
            .is_some_and(|m| m.contains("bbb-ghost") && m.contains("/no/such/program")),
        "{warnings:?}"
    );
    let out = repo.nop().args(["plugins", "list"]).output().expect("run");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("failed"));
}

#[test]
fn a_crashing_mcp_server_gives_the_model_an_error_and_the_run_goes_on() {
    let repo = repo_with_demo_plugin();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[
            ("p1", "demo__crash", json!({})),
            ("p2", "demo__echo", json!({"text": "anyone?"})),
        ]),
        openai::reply_text("the plugin died; carrying on"),
    ]);
    let out = repo.model_ok(&server, &["run", "--output-format", "json", "crash it"]);
    let r = server.results_of(&["p1", "p2"]);
    assert!(r[0].starts_with("error (PluginError)"), "{r:?}");
    assert!(r[1].starts_with("error (PluginError)"), "{r:?}");
    let result: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(result["final_message"], "the plugin died; carrying on");
}

#[test]
fn a_plugin_command_tool_is_asked_about_under_approval_always_like_shell() {
    let repo = repo_with_demo_plugin();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[
            ("p1", "demo__greet", json!({"name": "Ann"})),
            (
                "p2",
                "read-file",
                json!({"path": ".nop/plugins/demo/config.yml"}),
            ),
        ]),
        openai::reply_text("done"),
    ]);
    // Headless, nobody can answer: a call that needs asking is refused and says so.
    let result = repo.model_json(
        &server,
        &[
            "run",
            "--approval",
            "always",
            "--output-format",
            "json",
            "greet Ann",
        ],
    );
    let denials = result["permission_denials"].as_array().expect("denials");
    assert_eq!(denials.len(), 1, "{denials:?}");
    assert_eq!(denials[0]["tool"], "demo.greet");
    let results = server.results_of(&["p1", "p2"]);
    assert!(
        results[0].contains("PermissionDenied") && !results[0].contains("hello Ann"),
        "{results:?}"
    );
    // Reading is never asked about.
    assert!(
        results[1].contains("description: test plugin"),
        "{results:?}"
    );
}

/// A repository with plugin `spy`: the test MCP server started with `mcp_env` as its `env:`
/// and an argument that names `${SPY_LABEL}`, and a command tool `env` that prints its
/// environment and directory.
fn repo_with_spy_plugin(mcp_env: &str) -> Repo {
    let repo = Repo::new();
    let dir = repo.path().join(".nop/plugins/spy");
    fs::create_dir_all(&dir).expect("mkdir");
    let server = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp_server.py");
    fs::write(
        dir.join("config.yml"),
        format!(
            "mcp:\n  command: python3\n  args: [\"{}\", \"--label=${{SPY_LABEL}}\"]\n  env: {mcp_env}\ntools:\n  - name: env\n    command: \"env; echo CWD=$(pwd)\"\n",
            server.display()
        ),
    )
    .expect("write");
    repo.trust();
    repo
}

/// The model's view of a `whoami` result: the server's environment, directory and arguments.
fn whoami(result: &str) -> Value {
    serde_json::from_str(result).unwrap_or_else(|e| panic!("{e}: {result}"))
}

/// Secrets in nop's environment that neither an MCP server nor a command plugin may see.
const SECRETS: [(&str, &str); 4] = [
    ("NOP_API_KEY", "sk-nop-test-0000-SECRET"),
    ("LLM_CREDENTIAL", "cred-test-1111-SECRET"),
    ("DEPLOY_TOKEN", "tok-test-2222-SECRET"),
    ("DATABASE_URL", "postgres://app:3333-SECRET@db/app"),
];

#[test]
fn mcp_servers_get_the_filtered_environment_and_start_outside_the_repository() {
    let repo = repo_with_spy_plugin(
        "{GITHUB_TOKEN: \"${GITHUB_TOKEN}\", PLAIN: \"literal $HOME ${UNSET_VAR:-fallback}\"}",
    );
    let runtime = crate::support::repo_dir();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[
            ("p1", "spy__whoami", json!({})),
            ("p2", "spy__env", json!({})),
        ]),
        openai::reply_text("done"),
    ]);
    let out = repo
        .nop_model(&server, "openai")
        .envs(SECRETS)
        .env("NOP_PROVIDER_API_KEY_ENV", "LLM_CREDENTIAL")
        .env("GITHUB_TOKEN", "ghp-wanted-by-the-user")
        .env("SPY_LABEL", "blue")
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("XDG_RUNTIME_DIR", runtime.path())
        .args(["run", "--output-format", "json", "spy"])
        .output()
        .expect("run");
    crate::support::assert_ok(&out);
    let results = server.results_of(&["p1", "p2"]);
    let seen = whoami(&results[0]);
    for (name, secret) in SECRETS {
        assert!(seen["env"].get(name).is_none(), "{name} reached the server");
        for r in &results {
            assert!(!r.contains(secret), "{name} leaked:\n{r}");
        }
    }
    // What the configuration names explicitly is expanded from nop's environment.
    assert_eq!(seen["env"]["GITHUB_TOKEN"], "ghp-wanted-by-the-user");
    assert_eq!(seen["env"]["PLAIN"], "literal $HOME fallback");
    assert_eq!(seen["argv"][0], "--label=blue");
    assert!(seen["env"]["PATH"].is_string(), "{seen}");
    // A fresh, empty directory of nop's own, outside the repository.
    let cwd = Path::new(seen["cwd"].as_str().expect("cwd"));
    let root = repo.path().canonicalize().expect("root");
    assert!(!cwd.starts_with(&root), "{}", cwd.display());
    assert!(
        cwd.starts_with(runtime.path().canonicalize().expect("runtime").join("nop")),
        "{}",
        cwd.display()
    );
    // Removed with the server.
    assert!(!cwd.exists(), "{} left behind", cwd.display());
    // The command tool runs as `shell` does.
    assert!(results[1].contains("HOME="), "{}", results[1]);
}

#[test]
fn without_a_runtime_directory_the_server_starts_outside_the_repository_too() {
    // HOME is the repository here, so nothing beneath it will do. No XDG_STATE_HOME either (the
    // state directory would do): the user's record of what they trust is then beneath HOME too,
    // and `nop trust --yes` runs with that same environment.
    let repo = repo_with_spy_plugin("{}");
    crate::support::assert_ok(
        &repo
            .nop()
            .env_remove("XDG_STATE_HOME")
            .args(["trust", "--yes"])
            .output()
            .expect("trust"),
    );
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("p1", "spy__whoami", json!({}))]),
        openai::reply_text("done"),
    ]);
    let out = repo
        .nop_model(&server, "openai")
        .env_remove("XDG_STATE_HOME")
        .env("SPY_LABEL", "red")
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .args(["run", "--output-format", "json", "spy"])
        .output()
        .expect("run");
    crate::support::assert_ok(&out);
    let seen = whoami(&server.result_of("p1"));
    let cwd = Path::new(seen["cwd"].as_str().expect("cwd"));
    let root = repo.path().canonicalize().expect("root");
    assert!(!cwd.starts_with(&root), "{}", cwd.display());
    for temp in ["/tmp", "/var/tmp", "/dev/shm"] {
        assert!(!cwd.starts_with(temp), "{}", cwd.display());
    }
}

#[test]
fn a_plugin_cannot_name_the_provider_key_or_an_unset_variable() {
    for (mcp_env, named) in [
        ("{K: \"${NOP_API_KEY}\"}", "NOP_API_KEY"),
        ("{K: \"x${LLM_CREDENTIAL}\"}", "LLM_CREDENTIAL"),
        ("{K: \"${NO_SUCH_VARIABLE}\"}", "NO_SUCH_VARIABLE"),
    ] {
        let repo = repo_with_spy_plugin(mcp_env);
        let server = MockServer::start(vec![openai::reply_text("fine")]);
        let out = repo
            .nop_model(&server, "openai")
            .envs(SECRETS)
            .env("NOP_PROVIDER_API_KEY_ENV", "LLM_CREDENTIAL")
            .env("SPY_LABEL", "red")
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .args(["run", "--output-format", "stream-json", "hi"])
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(0));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let warning = stdout
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|e| e["type"] == "warning")
            .unwrap_or_else(|| panic!("{mcp_env}: no warning in {stdout}"));
        let message = warning["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("spy") && message.contains(named),
            "{mcp_env}: {message}"
        );
        for (_, secret) in SECRETS {
            assert!(!stdout.contains(secret), "{stdout}");
        }
    }
}

#[test]
fn a_tool_name_with_dots_round_trips_through_the_model() {
    let repo = repo_with_demo_plugin();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("p1", "demo__files__count", json!({}))]),
        openai::reply_text("done"),
    ]);
    repo.model_ok(&server, &["run", "count the files"]);
    let offered = server.requests()[0].body["tools"].to_string();
    assert!(offered.contains("\"demo__files__count\""), "{offered}");
    assert_eq!(server.result_of("p1"), "3 files");
    assert_eq!(
        repo.first_session()["messages"][3]["toolCall"]["name"],
        "demo.files.count"
    );
}

#[test]
fn an_mcp_is_error_result_goes_to_the_model_and_not_to_the_retry_advisor() {
    let repo = repo_with_demo_plugin();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("p1", "demo__fail", json!({}))]),
        openai::reply_text("the issue does not exist"),
    ]);
    let out = repo
        .nop_model(&server, "openai")
        .env("NOP_ADVISORS_ENABLED", "true")
        .env("NOP_ADVISORS_RETRY_DELAY_S", "0")
        .args(["run", "--output-format", "json", "look at issue 7"])
        .output()
        .expect("run");
    crate::support::assert_ok(&out);
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "an advisor was asked");
    let r = server.result_of("p1");
    assert!(
        r.starts_with("error (ToolReportedError)")
            && r.contains("the tool failed: no such issue #7"),
        "{r}"
    );
    assert_eq!(repo.first_session()["messages"][3]["isError"], true);
}

/// The test MCP server as plugin `name` of `repo`, with `extra` lines under `mcp:` and
/// `args` after the server's path.
fn add_mcp_plugin(repo: &Repo, name: &str, args: &[&str], extra: &str) {
    let dir = repo.path().join(".nop/plugins").join(name);
    fs::create_dir_all(&dir).expect("mkdir");
    let server = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp_server.py");
    let mut all = vec![server.display().to_string()];
    all.extend(args.iter().map(|a| a.to_string()));
    fs::write(
        dir.join("config.yml"),
        format!(
            "mcp:\n  command: python3\n  args: {}\n{extra}",
            serde_json::to_string(&all).expect("json")
        ),
    )
    .expect("write");
}

#[test]
fn an_mcp_call_is_cut_at_its_plugin_limit_and_a_timeout_argument_changes_nothing() {
    let repo = Repo::new();
    add_mcp_plugin(&repo, "slow", &[], "  timeout_s: 1\n");
    repo.trust();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("p1", "slow__sleep", json!({"seconds": 30, "timeout_s": 60}))]),
        openai::reply_text("too slow"),
    ]);
    let started = std::time::Instant::now();
    repo.model_ok(&server, &["run", "sleep"]);
    let r = server.results_of(&["p1"]);
    assert!(
        r[0].starts_with("error (Timeout)") && r[0].contains("within 1.0 s"),
        "{r:?}"
    );
    // Cut at the limit, not seconds after it.
    let ms = repo.first_session()["messages"][3]["durationMs"]
        .as_u64()
        .expect("durationMs");
    assert!((1000..1900).contains(&ms), "{ms} ms");
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
}

#[test]
fn every_mcp_content_type_reaches_the_model_and_resources_can_be_read() {
    let repo = repo_with_demo_plugin();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[
            ("p1", "demo__media", json!({})),
            (
                "p2",
                "demo__read_resource",
                json!({"uri": "test://notes/readme"}),
            ),
            (
                "p3",
                "demo__read_resource",
                json!({"uri": "test://nothing"}),
            ),
        ]),
        openai::reply_text("done"),
    ]);
    repo.model_ok(&server, &["run", "show me"]);
    let tools = server.requests()[0].body["tools"].clone();
    let read = tools
        .as_array()
        .expect("tools")
        .iter()
        .find(|t| t["function"]["name"] == "demo__read_resource")
        .unwrap_or_else(|| panic!("no read_resource in {tools}"));
    assert!(
        read["function"]["description"]
            .as_str()
            .is_some_and(|d| d.contains("test://notes/readme (readme)")),
        "{read}"
    );
    let r = server.results_of(&["p1", "p2", "p3"]);
    assert_eq!(
        r[0],
        "here is everything\n[image: image/png, 8 bytes]\n\
         [resource: test://notes/a.txt, text/plain]\nembedded text\n\
         [resource: test://bin/b.bin, application/octet-stream, 10 bytes]\n\
         [link: readme test://notes/readme, text/plain]"
    );
    assert_eq!(
        r[1],
        "[resource: test://notes/readme, text/plain]\nthe readme says hello"
    );
    assert!(
        r[2].starts_with("error (ToolReportedError)") && r[2].contains("resource not found"),
        "{r:?}"
    );
}

#[test]
fn a_servers_stderr_goes_to_the_log_and_its_tail_into_the_start_up_warning() {
    let repo = Repo::new();
    add_mcp_plugin(&repo, "broken", &["--fail-at-start"], "");
    add_mcp_plugin(&repo, "chatty", &[], "");
    repo.trust();
    let server = MockServer::start(vec![openai::reply_text("fine")]);
    let out = repo
        .nop_model(&server, "openai")
        .args(["run", "--output-format", "stream-json", "hi"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let warnings: Vec<String> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "warning")
        .filter_map(|e| e["message"].as_str().map(str::to_string))
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("plugin broken")
            && warnings[0].contains("cannot open config.json: no such file"),
        "{warnings:?}"
    );
    // Never on the terminal (quoted only in the warning); in the log.
    assert!(!stderr.contains("nop-test-server"), "{stderr}");
    assert_eq!(stdout.matches("a banner on stderr").count(), 1, "{stdout}");
    let log = fs::read_to_string(repo.path().join(".nop/logs/system.log")).expect("system.log");
    assert!(
        log.contains("chatty") && log.contains("nop-test-server: starting (a banner on stderr)"),
        "{log}"
    );
}

#[test]
fn servers_start_concurrently() {
    // Each of the two servers answers only once the other has started.
    let repo = Repo::new();
    let meeting = crate::support::repo_dir();
    let place = meeting.path().display().to_string();
    add_mcp_plugin(
        &repo,
        "one",
        &[&format!("--rendezvous={place}:one:two")],
        "  startup_timeout_s: 20\n",
    );
    add_mcp_plugin(
        &repo,
        "two",
        &[&format!("--rendezvous={place}:two:one")],
        "  startup_timeout_s: 20\n",
    );
    repo.trust();
    let out = repo.run(&["plugins", "list"]);
    assert!(
        out.contains("one.echo") && out.contains("two.echo") && !out.contains("failed"),
        "{out}"
    );
}

/// A JSON `mcpServers` entry starting the test server with `args` after its path.
fn server_entry(args: &[&str]) -> Value {
    let server = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp_server.py");
    let mut all = vec![server.display().to_string()];
    all.extend(args.iter().map(|a| a.to_string()));
    json!({"command": "python3", "args": all})
}

fn git(repo: &Path, args: &[&str]) {
    let out = std::process::Command::new("git")
        .current_dir(repo)
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
#[expect(clippy::too_many_lines, reason = "a debt: listed in AGENTS.md")]
fn servers_come_from_every_place_users_keep_them_in_order_of_precedence() {
    let repo = Repo::new();
    let home = crate::support::repo_dir();
    let root = repo.path().canonicalize().expect("root");
    // 1. The repository's own plugin.
    add_mcp_plugin(&repo, "dup", &["--label=nop-plugin"], "");
    // 2. .mcp.json, tracked by git.
    fs::write(
        repo.path().join(".mcp.json"),
        json!({"mcpServers": {"dup": server_entry(&["--label=mcp-json"]), "proj": server_entry(&[])}})
            .to_string(),
    )
    .expect("write");
    git(repo.path(), &["init", "-q"]);
    git(repo.path(), &["add", ".mcp.json"]);
    // 3. and 5. ~/.claude.json: local scope for this repository, and user scope.
    fs::write(
        home.path().join(".claude.json"),
        json!({
            "numStartups": 3,
            "projects": {root.display().to_string(): {"mcpServers": {"local": server_entry(&[]), "proj": server_entry(&["--label=claude-local"])}}},
            "mcpServers": {"user": server_entry(&[]), "local": server_entry(&[])},
        })
        .to_string(),
    )
    .expect("write");
    // 6. ~/.codex/config.toml.
    fs::create_dir_all(home.path().join(".codex")).expect("mkdir");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp_server.py");
    fs::write(
        home.path().join(".codex/config.toml"),
        format!(
            "[mcp_servers.user]\ncommand = \"python3\"\nargs = [\"{0}\"]\n\n[mcp_servers.codex]\ncommand = \"python3\"\nargs = [\"{0}\"]\n",
            fixture.display()
        ),
    )
    .expect("write");
    // 4. ~/.config/nop/plugins.
    let user_plugin = home.path().join(".config/nop/plugins/mine");
    fs::create_dir_all(&user_plugin).expect("mkdir");
    fs::write(
        user_plugin.join("config.yml"),
        format!(
            "mcp:\n  command: python3\n  args: [\"{}\"]\n",
            fixture.display()
        ),
    )
    .expect("write");
    // The user trusts what they wrote, with the environment of the commands below.
    crate::support::assert_ok(
        &repo
            .nop()
            .env("HOME", home.path())
            .args(["trust", "--yes"])
            .output()
            .expect("trust"),
    );
    let list = repo
        .nop()
        .env("HOME", home.path())
        .args(["plugins", "list", "--json"])
        .output()
        .expect("run");
    assert_eq!(
        list.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&list.stdout)
    );
    let statuses: Value = serde_json::from_slice(&list.stdout).expect("json");
    let row = |name: &str, source_ends: &str| -> String {
        statuses
            .as_array()
            .expect("list")
            .iter()
            .find(|s| {
                s["name"] == name
                    && s["source"]
                        .as_str()
                        .is_some_and(|s| s.ends_with(source_ends))
            })
            .unwrap_or_else(|| panic!("{name} from {source_ends}: {statuses:#}"))["state"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(row("dup", ".nop/plugins/dup/config.yml"), "loaded");
    assert!(
        row("dup", ".mcp.json").starts_with("shadowed by "),
        "{statuses:#}"
    );
    assert_eq!(row("proj", ".mcp.json"), "loaded");
    assert!(row("proj", ".claude.json").starts_with("shadowed by "));
    assert_eq!(row("mine", "nop/plugins/mine/config.yml"), "loaded");
    // The local scope comes before the user scope.
    let locals: Vec<&Value> = statuses
        .as_array()
        .expect("list")
        .iter()
        .filter(|s| s["name"] == "local")
        .collect();
    assert_eq!(locals.len(), 2, "{statuses:#}");
    assert_eq!(locals[0]["state"], "loaded");
    assert_eq!(row("user", ".claude.json"), "loaded");
    assert!(row("user", ".codex/config.toml").starts_with("shadowed by "));
    assert_eq!(row("codex", ".codex/config.toml"), "loaded");
    // And a run uses them.
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[
            ("p1", "dup__whoami", json!({})),
            ("p2", "user__echo", json!({"text": "from the user scope"})),
            ("p3", "mine__echo", json!({"text": "from ~/.config/nop"})),
        ]),
        openai::reply_text("done"),
    ]);
    let out = repo
        .nop_model(&server, "openai")
        .env("HOME", home.path())
        .args(["run", "go"])
        .output()
        .expect("run");
    crate::support::assert_ok(&out);
    let r = server.results_of(&["p1", "p2", "p3"]);
    assert_eq!(whoami(&r[0])["argv"][0], "--label=nop-plugin");
    assert_eq!(r[1], "from the user scope");
    assert_eq!(r[2], "from ~/.config/nop");
}

#[test]
fn a_bad_claude_json_is_one_warning_naming_it_and_the_run_goes_on() {
    let repo = Repo::new();
    let home = crate::support::repo_dir();
    fs::write(home.path().join(".claude.json"), "{\"mcpServers\": {").expect("write");
    let server = MockServer::start(vec![openai::reply_text("fine")]);
    let out = repo
        .nop_model(&server, "openai")
        .env("HOME", home.path())
        .args(["run", "--output-format", "stream-json", "hi"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let warnings: Vec<String> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "warning")
        .filter_map(|e| e["message"].as_str().map(str::to_string))
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains(".claude.json:1:"), "{warnings:?}");
}

#[test]
fn the_agent_cannot_plant_an_mcp_server_for_later() {
    let repo = Repo::new();
    git(repo.path(), &["init", "-q"]);
    let starts = repo.path().join("starts.txt");
    let planted =
        json!({"mcpServers": {"evil": server_entry(&[&format!("--starts={}", starts.display())])}})
            .to_string();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[
            (
                "p1",
                "write-file",
                json!({"path": ".mcp.json", "content": planted}),
            ),
            (
                "p2",
                "write-file",
                json!({"path": ".codex/config.toml", "content": "[mcp_servers.evil]\ncommand = \"sh\"\n"}),
            ),
            (
                "p3",
                "write-file",
                json!({"path": ".claude/settings.json", "content": "{}"}),
            ),
            (
                "p4",
                "shell",
                json!({"command": format!("printf '%s' '{planted}' > .mcp.json && echo planted")}),
            ),
        ]),
        openai::reply_text("done"),
        openai::reply_text("second run"),
        openai::reply_text("third run"),
    ]);
    repo.model_ok(&server, &["run", "plant a server"]);
    let r = server.results_of(&["p1", "p2", "p3"]);
    for (i, wanted) in [
        (0, ".mcp.json"),
        (1, ".codex/config.toml"),
        (2, ".claude/settings.json"),
    ] {
        assert!(
            r[i].contains("PermissionDenied") && r[i].contains(wanted),
            "{r:?}"
        );
    }
    // A shell command may create the file where none was (a name that does not exist cannot be
    // protected): nop then leaves its server out, as the user never trusted it. (Changed by
    // design: it used to be set aside because git did not track it; being tracked no longer
    // makes a `.mcp.json` trusted, so the same holds once git tracks the planted file.)
    let planted_exists = repo.path().join(".mcp.json").exists();
    for prompt in ["hello again", "and again, tracked"] {
        let out = repo
            .nop_model(&server, "openai")
            .args(["run", "--output-format", "stream-json", prompt])
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(0));
        assert!(!starts.exists(), "the planted server was started");
        if planted_exists {
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                stdout.contains("\"untrusted\"")
                    && stdout.contains("not trusted")
                    && stdout.contains("MCP server `evil` of .mcp.json"),
                "{stdout}"
            );
            git(repo.path(), &["add", ".mcp.json"]);
        }
    }
    // Once a .mcp.json exists (the user's, here tracked), the agent cannot change it.
    fs::write(repo.path().join(".mcp.json"), "{\"mcpServers\": {}}").expect("write");
    git(repo.path(), &["add", ".mcp.json"]);
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[(
            "p1",
            "shell",
            json!({"command": format!("printf '%s' '{planted}' > .mcp.json")}),
        )]),
        openai::reply_text("done"),
    ]);
    repo.model_ok(&server, &["run", "plant again"]);
    assert_eq!(
        fs::read_to_string(repo.path().join(".mcp.json")).expect("read"),
        "{\"mcpServers\": {}}"
    );
}

#[test]
fn a_configured_cwd_and_the_project_variable_name_the_repository_and_the_warning_says_so() {
    let repo = Repo::new();
    fs::create_dir_all(repo.path().join("tools")).expect("mkdir");
    add_mcp_plugin(
        &repo,
        "here",
        &["--label=${NOP_PROJECT_DIR}"],
        "  cwd: tools\n",
    );
    add_mcp_plugin(&repo, "away", &[], "");
    repo.trust();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[
            ("p1", "here__whoami", json!({})),
            ("p2", "away__roots", json!({})),
        ]),
        openai::reply_text("done"),
    ]);
    let out = repo
        .nop_model(&server, "openai")
        .args(["run", "--output-format", "stream-json", "where are you"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0));
    let root = repo.path().canonicalize().expect("root");
    let r = server.results_of(&["p1", "p2"]);
    let seen = whoami(&r[0]);
    assert_eq!(seen["cwd"], root.join("tools").display().to_string());
    assert_eq!(seen["argv"][0], format!("--label={}", root.display()));
    assert_eq!(seen["env"]["NOP_PROJECT_DIR"], root.display().to_string());
    // The client's roots: the repository, as a file:// URI.
    let roots: Value = serde_json::from_str(&r[1]).expect("roots");
    assert_eq!(
        roots["roots"][0]["uri"],
        format!("file://{}", root.display())
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let warnings: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("\"warning\""))
        .collect();
    assert_eq!(warnings.len(), 1, "{stdout}");
    assert!(
        warnings[0].contains("plugin here") && warnings[0].contains("inside the repository"),
        "{warnings:?}"
    );
}

#[test]
fn a_remote_server_over_streamable_http_gets_its_headers_and_the_token_is_never_recorded() {
    let remote = crate::support::mcp_http::McpHttpServer::start();
    let repo = Repo::new();
    let dir = repo.path().join(".nop/plugins/remote");
    fs::create_dir_all(&dir).expect("mkdir");
    fs::write(
        dir.join("config.yml"),
        format!(
            "mcp:\n  url: \"{}\"\n  headers: {{X-Team: \"${{TEAM}}\"}}\n  bearer_token_env_var: REMOTE_TOKEN\n",
            remote.url()
        ),
    )
    .expect("write");
    repo.trust();
    const TOKEN: &str = "tok-remote-4444-SECRET";
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("p1", "remote__echo", json!({"text": "over http"}))]),
        openai::reply_text("done"),
    ]);
    let out = repo
        .nop_model(&server, "openai")
        .env("TEAM", "blue")
        .env("REMOTE_TOKEN", TOKEN)
        .args([
            "run",
            "--output-format",
            "stream-json",
            "--log-level",
            "debug",
            "call it",
        ])
        .output()
        .expect("run");
    crate::support::assert_ok(&out);
    assert_eq!(server.result_of("p1"), "remote: over http");
    let seen = remote.seen();
    let posts: Vec<_> = seen.iter().filter(|s| s.method == "POST").collect();
    assert!(posts.len() >= 3, "{seen:?}");
    for post in &posts {
        assert_eq!(
            post.header("authorization"),
            Some(format!("Bearer {TOKEN}").as_str())
        );
        assert_eq!(post.header("x-team"), Some("blue"));
    }
    // The token reaches the server only: not the output, the logs or the session.
    assert!(!String::from_utf8_lossy(&out.stdout).contains(TOKEN));
    assert!(!String::from_utf8_lossy(&out.stderr).contains(TOKEN));
    let mut files = vec![repo.path().join(".nop")];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(
                fs::read_dir(&path)
                    .expect("dir")
                    .flatten()
                    .map(|e| e.path()),
            );
        } else if let Ok(bytes) = fs::read(&path) {
            assert!(
                !String::from_utf8_lossy(&bytes).contains(TOKEN),
                "{} holds the token",
                path.display()
            );
        }
    }
}

/// A wrong token for a remote server: the warning says the HTTP status and what to check (the
/// variable the token comes from), never the library's type names, never the token.
#[test]
fn a_remote_server_refusing_the_token_says_http_401_and_what_to_check() {
    let remote = crate::support::mcp_http::McpHttpServer::requiring_token("the-right-one");
    let repo = Repo::new();
    let dir = repo.path().join(".nop/plugins/remote");
    fs::create_dir_all(&dir).expect("mkdir");
    fs::write(
        dir.join("config.yml"),
        format!(
            "mcp:\n  url: \"{}\"\n  bearer_token_env_var: REMOTE_TOKEN\n",
            remote.url()
        ),
    )
    .expect("write");
    repo.trust();
    const WRONG: &str = "tok-wrong-5555-SECRET";
    let server = MockServer::start(vec![openai::reply_text("done")]);
    let out = repo
        .nop_model(&server, "openai")
        .env("REMOTE_TOKEN", WRONG)
        .args(["run", "--output-format", "stream-json", "go"])
        .output()
        .expect("run");
    crate::support::assert_ok(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let warning = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["type"] == "warning")
        .filter_map(|e| e["message"].as_str().map(str::to_string))
        .find(|m| m.contains("remote"))
        .unwrap_or_else(|| panic!("no warning about the server: {stdout}"));
    assert!(
        warning.contains(&format!("{} answered HTTP 401 Unauthorized", remote.url()))
            && warning.contains("check the token in REMOTE_TOKEN (bearer_token_env_var)"),
        "{warning}"
    );
    for leaked in ["Transport", "StreamableHttp", "Error(", WRONG] {
        assert!(!warning.contains(leaked), "{leaked}: {warning}");
    }
    assert!(!stdout.contains(WRONG) && !String::from_utf8_lossy(&out.stderr).contains(WRONG));
}

/// Where the official servers are installed (`npm i @modelcontextprotocol/server-everything
/// @modelcontextprotocol/server-filesystem` in a directory): `NOP_TEST_MCP_MODULES`, else
/// `/var/tmp/mcp-real/node_modules`.
fn official_servers() -> std::path::PathBuf {
    let dir = std::env::var_os("NOP_TEST_MCP_MODULES")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| "/var/tmp/mcp-real/node_modules".into());
    let found = dir
        .join("@modelcontextprotocol/server-everything/dist/index.js")
        .is_file()
        && dir
            .join("@modelcontextprotocol/server-filesystem/dist/index.js")
            .is_file();
    assert!(
        found,
        "the official MCP servers are not installed in {} (set NOP_TEST_MCP_MODULES)",
        dir.display()
    );
    dir
}

#[test]
#[ignore = "needs the official MCP servers from npm: `npm i @modelcontextprotocol/server-everything \
            @modelcontextprotocol/server-filesystem` in /var/tmp/mcp-real (or NOP_TEST_MCP_MODULES), \
            then `cargo test --test all official_servers -- --ignored`"]
fn the_official_servers_content_types_names_and_roots() {
    let modules = official_servers();
    let repo = Repo::new();
    fs::write(repo.path().join("hello.txt"), "hello from the repository\n").expect("write");
    for (name, args) in [
        (
            "everything",
            "[\"@modelcontextprotocol/server-everything/dist/index.js\", \"stdio\"]",
        ),
        // No directory given: it serves the client's roots.
        (
            "fs",
            "[\"@modelcontextprotocol/server-filesystem/dist/index.js\"]",
        ),
    ] {
        let dir = repo.path().join(".nop/plugins").join(name);
        fs::create_dir_all(&dir).expect("mkdir");
        fs::write(
            dir.join("config.yml"),
            format!(
                "mcp:\n  command: node\n  args: {}\n  cwd: \"{}\"\n",
                args.replace("\"@", &format!("\"{}/@", modules.display())),
                modules.display()
            ),
        )
        .expect("write");
    }
    // Servers start only once the user trusted their configuration.
    repo.trust();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[
            ("p1", "everything__get-tiny-image", json!({})),
            ("p2", "everything__get-resource-links", json!({"count": 2})),
            (
                "p3",
                "everything__get-resource-reference",
                json!({"resourceType": "Text", "resourceId": 1}),
            ),
            ("p4", "everything__get-roots-list", json!({})),
            ("p5", "fs__list_allowed_directories", json!({})),
            ("p6", "fs__read_text_file", json!({"path": "hello.txt"})),
        ]),
        openai::reply_text("done"),
    ]);
    let out = repo
        .nop_model(&server, "openai")
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .args(["run", "--output-format", "json", "try the servers"])
        .output()
        .expect("run");
    crate::support::assert_ok(&out);
    let r = server.results_of(&["p1", "p2", "p3", "p4", "p5", "p6"]);
    for (i, result) in r.iter().enumerate() {
        eprintln!("--- result {i}:\n{result}");
    }
    let root = repo
        .path()
        .canonicalize()
        .expect("root")
        .display()
        .to_string();
    assert!(r[0].contains("[image: image/png, "), "{}", r[0]);
    assert!(r[1].contains("[link: "), "{}", r[1]);
    assert!(r[2].contains("[resource: "), "{}", r[2]);
    assert!(r[3].contains(&root), "{}", r[3]);
    assert!(r[4].contains(&root), "{}", r[4]);
    assert!(r[5].contains("hello from the repository"), "{}", r[5]);
}
