//! Test support: temporary repositories with `.nop/`, the real `nop` binary run in them, and the
//! mock model server (`mock`).

#![allow(dead_code)]

pub mod mcp_http;
pub mod mock;
pub mod session;
pub mod terminal;

use std::path::{Path, PathBuf};
use std::time::Duration;

use assert_cmd::Command;
use nop::session::Store;
use tempfile::TempDir;

/// `git ARGS` in `dir` with a test identity and none of the developer's configuration (the
/// first branch is `main`); asserts it succeeded and returns its stdout.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(["-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The user's git, as the user runs it later: their HOME and PATH, nothing of nop's.
pub fn user_git(dir: &Path, home: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new("git")
        .args(["-c", "user.name=u", "-c", "user.email=u@example.com"])
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("HOME", home)
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .output()
        .expect("git")
}

/// Asserts that a nop process exited 0, showing its stderr if not.
pub fn assert_ok(out: &std::process::Output) {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The environment that points nop at `server` speaking `kind`, with fast retries and advisors
/// off.
pub fn model_env(server: &mock::MockServer, kind: &str) -> Vec<(String, String)> {
    let base = if kind == "anthropic" {
        server.anthropic_base_url()
    } else {
        server.openai_base_url()
    };
    vec![
        ("NOP_PROVIDER".into(), kind.into()),
        ("NOP_BASE_URL".into(), base),
        ("NOP_MODEL".into(), "mock-model".into()),
        ("NOP_PROVIDER_RETRY_BASE_MS".into(), "1".into()),
        // Advisors make model requests of their own; tests that script them turn them on.
        ("NOP_ADVISORS_ENABLED".into(), "false".into()),
    ]
}

/// The environment an in-process test gives the library (`Runtime::new`'s env) for the user's
/// record of what they trust: one state directory for the whole test process, also made the
/// library's own (`nop::trust::use_env`), so that the permission checks read the same record.
/// Call it before anything of the library's in an in-process test.
pub fn in_process_env() -> std::collections::BTreeMap<String, String> {
    static STATE: std::sync::OnceLock<TempDir> = std::sync::OnceLock::new();
    let state = STATE.get_or_init(repo_dir);
    let env = std::collections::BTreeMap::from([(
        "XDG_STATE_HOME".to_string(),
        state.path().display().to_string(),
    )]);
    nop::trust::use_env(&env);
    env
}

/// A fresh directory under `/var/tmp/nop-tests` (outside every writable root of the sandbox),
/// removed when dropped.
pub fn repo_dir() -> TempDir {
    let base = Path::new("/var/tmp/nop-tests");
    std::fs::create_dir_all(base).expect("/var/tmp/nop-tests");
    tempfile::Builder::new()
        .prefix("repo-")
        .tempdir_in(base)
        .expect("temp dir")
}

/// A temporary repository on which `nop init` has run, with the user's state (the record of
/// what they trust, `XDG_STATE_HOME`) beside it, outside the repository.
pub struct Repo {
    pub dir: TempDir,
    pub state: TempDir,
}

impl Repo {
    pub fn new() -> Repo {
        let repo = Repo::bare();
        repo.run(&["init"]);
        repo
    }

    /// A temporary directory without `.nop/`, placed where users keep repositories: not under
    /// `/tmp`, which the shipped rules and the shell sandbox treat specially (a repository there
    /// would hide what happens in `~/src/project`).
    pub fn bare() -> Repo {
        Repo {
            dir: repo_dir(),
            state: repo_dir(),
        }
    }

    /// What the user does once they have looked at what they wrote by hand: `nop trust --yes`.
    pub fn trust(&self) {
        self.run(&["trust", "--yes"]);
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `nop` in the repository root, with an environment that holds nothing of the developer's.
    pub fn nop(&self) -> Command {
        self.nop_in(self.path())
    }

    pub fn nop_in(&self, dir: &Path) -> Command {
        let mut cmd = Command::cargo_bin("nop").expect("nop binary");
        cmd.current_dir(dir)
            .env_clear()
            .env("HOME", self.path())
            .env("XDG_STATE_HOME", self.state.path());
        cmd
    }

    /// Runs `nop args…`, asserts success and returns stdout.
    pub fn run(&self, args: &[&str]) -> String {
        let output = self.nop().args(args).output().expect("run nop");
        assert!(
            output.status.success(),
            "nop {args:?} failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).expect("utf-8 stdout")
    }

    /// Runs `nop args…`, asserts failure with exit code 1 and returns stderr.
    pub fn fail(&self, args: &[&str]) -> String {
        let output = self.nop().args(args).output().expect("run nop");
        assert_eq!(
            output.status.code(),
            Some(1),
            "nop {args:?} should fail; stdout:\n{}",
            String::from_utf8_lossy(&output.stdout)
        );
        String::from_utf8(output.stderr).expect("utf-8 stderr")
    }

    pub fn new_session(&self) -> String {
        self.run(&["sessions", "new"]).trim().to_string()
    }

    /// A session to build and write ([`session::SessionBuilder`]).
    pub fn session(&self) -> session::SessionBuilder<'_> {
        session::SessionBuilder::new(self)
    }

    pub fn sessions_dir(&self) -> PathBuf {
        self.path().join(".nop/sessions")
    }

    pub fn session_dir(&self, id: &str) -> PathBuf {
        self.sessions_dir().join(id)
    }

    /// `nop` pointed at `server` speaking `kind` ("openai" or "anthropic"), with fast retries.
    pub fn nop_model(&self, server: &mock::MockServer, kind: &str) -> Command {
        let mut cmd = self.nop();
        cmd.envs(model_env(server, kind));
        cmd
    }

    /// The same as a plain `std::process::Command`, for tests that drive the child themselves.
    pub fn nop_model_process(
        &self,
        server: &mock::MockServer,
        kind: &str,
    ) -> std::process::Command {
        let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("nop"));
        cmd.current_dir(self.path())
            .env_clear()
            .env("HOME", self.path())
            .env("XDG_STATE_HOME", self.state.path())
            .envs(model_env(server, kind));
        cmd
    }

    /// Runs `nop args…` against `server` (OpenAI protocol) and asserts it exits 0, showing
    /// stderr if not.
    pub fn model_ok(&self, server: &mock::MockServer, args: &[&str]) -> std::process::Output {
        let out = self
            .nop_model(server, "openai")
            .args(args)
            .output()
            .expect("run nop");
        assert_eq!(
            out.status.code(),
            Some(0),
            "nop {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// [`Repo::model_ok`], and its standard output as JSON (`--output-format json`, `--json`).
    pub fn model_json(&self, server: &mock::MockServer, args: &[&str]) -> serde_json::Value {
        let out = self.model_ok(server, args);
        serde_json::from_slice(&out.stdout).expect("JSON on standard output")
    }

    /// The session.json of the oldest (or only) session.
    pub fn first_session(&self) -> serde_json::Value {
        let list: serde_json::Value =
            serde_json::from_str(&self.run(&["sessions", "list", "--json"])).expect("json");
        self.session_json(list[0]["id"].as_str().expect("a session"))
    }

    /// The session.json of `id` as JSON.
    pub fn session_json(&self, id: &str) -> serde_json::Value {
        let text = std::fs::read_to_string(self.session_dir(id).join("session.json"))
            .expect("session.json");
        serde_json::from_str(&text).expect("session.json parses")
    }

    pub fn store(&self) -> Store {
        Store::new(self.sessions_dir(), Duration::from_secs(10))
    }

    /// Session `id`'s messages after the system prompt, as `role: content` lines in order
    /// (an assistant message that calls tools names them).
    pub fn conversation(&self, id: &str) -> Vec<String> {
        let session = self.session_json(id);
        session["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m["role"] != "system")
            .map(|m| {
                let calls: Vec<&str> = m["toolCalls"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|c| c["name"].as_str())
                    .collect();
                let text = m["content"].as_str().unwrap_or_default();
                match calls.is_empty() {
                    true => format!("{}: {text}", m["role"].as_str().unwrap_or_default()),
                    false => format!(
                        "{}: calls {}",
                        m["role"].as_str().unwrap_or_default(),
                        calls.join(", ")
                    ),
                }
            })
            .collect()
    }
}

/// The command lines of the processes on this machine that hold `marker`.
pub fn processes_with(marker: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(marker))
        .collect()
}

/// Waits until no process holds `marker` (the kernel delivers parent-death signals and tears
/// namespaces down as nop exits, not before) and returns those left after 10 s.
pub fn wait_until_gone(marker: &str) -> Vec<String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let left = processes_with(marker);
        if left.is_empty() || std::time::Instant::now() > deadline {
            return left;
        }
        std::thread::yield_now();
    }
}

/// Starts `nop args…` in `repo` and waits until `count` processes hold `marker`.
pub fn start_until(repo: &Repo, args: &[&str], marker: &str, count: usize) -> std::process::Child {
    let child = std::process::Command::new(assert_cmd::cargo::cargo_bin("nop"))
        .args(args)
        .current_dir(repo.path())
        .env_clear()
        .env("HOME", repo.path())
        .env("XDG_STATE_HOME", repo.state.path())
        .env("PATH", "/usr/bin:/bin")
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("nop");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while processes_with(marker).len() < count {
        assert!(
            std::time::Instant::now() < deadline,
            "{marker} never started"
        );
        std::thread::yield_now();
    }
    child
}

/// What a JSON value looks like without its values: objects as their keys in order, each with
/// its value's shape; arrays element by element; scalars as their type.
pub fn json_shape(value: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::Object(map) => Value::Array(
            map.iter()
                .map(|(k, v)| serde_json::json!([k, json_shape(v)]))
                .collect(),
        ),
        Value::Array(items) => {
            serde_json::json!({"items": items.iter().map(json_shape).collect::<Vec<_>>()})
        }
        Value::Null => "null".into(),
        Value::Bool(_) => "bool".into(),
        Value::Number(n) if n.is_f64() => "float".into(),
        Value::Number(_) => "integer".into(),
        Value::String(_) => "string".into(),
    }
}

impl Repo {
    /// Asserts that session `id`'s session.json has the keys (in the same order) and the value
    /// types of `tests/fixtures/session-json/<fixture>`, which nop wrote for the same scenario
    /// before its fields were typed.
    pub fn assert_session_shape(&self, id: &str, fixture: &str) {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/session-json")
            .join(fixture);
        let old: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("fixture")).expect("json");
        pretty_assertions::assert_eq!(
            json_shape(&self.session_json(id)),
            json_shape(&old),
            "{fixture}"
        );
    }
}
