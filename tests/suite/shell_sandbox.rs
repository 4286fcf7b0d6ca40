//! The shell sandbox as a user meets it and as an attacker tries it: the default configuration
//! `nop init` installs, a git repository outside `/tmp` (where users keep theirs), commands run
//! at its root through `nop sandbox run` (exactly the shell tool's confinement) and through
//! `nop run` with a model that calls `shell`.
//!
//! Three ways of confining are exercised: the namespace view (this machine's default), the
//! Landlock-only mapping chosen with `shell.namespaces: off`, and the real fallback: nop started
//! in a user namespace that may create no more of them, as on kernels that restrict them.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::json;

use crate::support::git;
use crate::support::mock::{MockServer, openai};
use crate::support::{Repo, processes_with, repo_dir, wait_until_gone};

/// How shell commands are confined in a test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// User, mount and PID namespaces under Landlock (the default here).
    Namespaces,
    /// Landlock alone, chosen with `--set shell.namespaces=off`.
    LandlockOnly,
    /// nop run where user namespaces cannot be created: the automatic fallback.
    NoUserNamespaces,
}

const ALL_MODES: [Mode; 3] = [Mode::Namespaces, Mode::LandlockOnly, Mode::NoUserNamespaces];

/// A git repository with a README, set up by `nop init` with the shipped defaults.
fn git_repo() -> Repo {
    let repo = Repo::bare();
    git(repo.path(), &["init", "-q"]);
    fs::write(repo.path().join("README.md"), "# project\n").unwrap();
    git(repo.path(), &["add", "README.md"]);
    git(repo.path(), &["commit", "-qm", "start"]);
    repo.run(&["init"]);
    repo
}

/// `nop [--set shell.namespaces=off] sandbox run -- bash -c script` at the repository root,
/// started as `mode` asks, with `env` added to the (otherwise empty) environment.
fn sh(repo: &Repo, mode: Mode, script: &str, env: &[(&str, &str)]) -> Output {
    let nop = assert_cmd::cargo::cargo_bin("nop");
    let mut args: Vec<String> = Vec::new();
    if mode == Mode::LandlockOnly {
        args.extend(["--set".into(), "shell.namespaces=off".into()]);
    }
    args.extend(["sandbox", "run", "--", "bash", "-c", script].map(String::from));
    let mut command = match mode {
        Mode::NoUserNamespaces => {
            let mut c = Command::new("unshare");
            // Root of a user namespace whose limit of further user namespaces is zero.
            c.args([
                "--user",
                "--map-root-user",
                "sh",
                "-c",
                "echo 0 > /proc/sys/user/max_user_namespaces && exec \"$@\"",
                "sh",
            ])
            .arg(&nop)
            .args(&args);
            c
        }
        _ => {
            let mut c = Command::new(&nop);
            c.args(&args);
            c
        }
    };
    command
        .current_dir(repo.path())
        .env_clear()
        .env("HOME", repo.path())
        // The user's state, as every other nop command of the repository has it: what they
        // trust (`nop init`, `nop trust --yes`) is recorded there.
        .env("XDG_STATE_HOME", repo.state.path())
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// What `.nop/` holds that a command could want to change: everything but the logs nop writes.
fn nop_files(root: &Path) -> Vec<(PathBuf, String)> {
    contents(&root.join(".nop"))
        .into_iter()
        .filter(|(p, _)| !p.starts_with(root.join(".nop/logs")))
        .collect()
}

/// Every file beneath `dir` with its contents (symbolic links as their target), sorted.
fn contents(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                stack.push(path.clone());
                out.push((path, "<dir>".into()));
            } else if kind.is_symlink() {
                out.push((
                    path.clone(),
                    format!("-> {:?}", fs::read_link(&path).unwrap()),
                ));
            } else {
                out.push((path.clone(), fs::read_to_string(&path).unwrap_or_default()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn normal_work_at_the_repository_root_succeeds() {
    let repo = git_repo();
    let script = r#"set -e
        ls | grep -qx README.md
        find . -maxdepth 1 | grep -qx ./README.md
        mkdir build
        echo hello > out.txt
        mv README.md README.old && mv README.old README.md
        cp out.txt build/copy.txt && rm out.txt && rm -r build
        sed -i s/project/Project/ README.md
        echo notes > notes.txt
        git status --porcelain | grep -q notes.txt
        git diff --stat | grep -q README.md
        git log --oneline | grep -q start
        f=$(mktemp) && echo scratch > "$f" && rm "$f"
        echo x > /tmp/nop-sandbox-test-$$ && rm /tmp/nop-sandbox-test-$$
        echo DONE"#;
    let out = sh(&repo, Mode::Namespaces, script, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "DONE\n", "{}", stderr(&out));
    assert_eq!(
        fs::read_to_string(repo.path().join("README.md")).unwrap(),
        "# Project\n"
    );
    assert!(!repo.path().join("build").exists());
    // Git metadata is read-only (it runs later, outside the sandbox): the agent reads history
    // but leaves staging and committing to the user.
    let out = sh(&repo, Mode::Namespaces, "git add notes.txt", &[]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("index.lock"), "{}", stderr(&out));
    assert_eq!(git(repo.path(), &["log", "--format=%s"]), "start\n");
}

#[test]
fn cargo_and_python_test_suites_run_in_the_sandbox() {
    let repo = git_repo();
    let root = repo.path();
    fs::create_dir_all(root.join("src")).unwrap();
    fs::write(
        root.join("Cargo.toml"),
        "[package]\nname = \"tiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    )
    .unwrap();
    fs::write(
        root.join("src/lib.rs"),
        "pub fn add(a: i32, b: i32) -> i32 { a + b }\n\
         #[cfg(test)]\nmod tests {\n    #[test]\n    fn adds() { assert_eq!(super::add(2, 3), 5); }\n}\n",
    )
    .unwrap();
    fs::create_dir_all(root.join("pkg")).unwrap();
    fs::write(
        root.join("pkg/__init__.py"),
        "def double(x):\n    return 2 * x\n",
    )
    .unwrap();
    fs::create_dir_all(root.join("tests")).unwrap();
    fs::write(root.join("tests/__init__.py"), "").unwrap();
    fs::write(
        root.join("tests/test_pkg.py"),
        "import unittest\nimport pkg\n\nclass T(unittest.TestCase):\n    \
         def test_double(self):\n        self.assertEqual(pkg.double(2), 4)\n",
    )
    .unwrap();
    // The toolchain as the developer has it (rustup's proxies need their homes).
    let home = std::env::var("HOME").unwrap_or_default();
    let var = |name: &str, default: String| std::env::var(name).unwrap_or(default);
    let path = var("PATH", "/usr/local/bin:/usr/bin:/bin".into());
    let cargo_home = var("CARGO_HOME", format!("{home}/.cargo"));
    let rustup_home = var("RUSTUP_HOME", format!("{home}/.rustup"));
    let env = [
        ("PATH", path.as_str()),
        ("CARGO_HOME", cargo_home.as_str()),
        ("RUSTUP_HOME", rustup_home.as_str()),
    ];
    let out = sh(
        &repo,
        Mode::Namespaces,
        "set -e; cargo build --offline -q; cargo test --offline -q 2>&1; \
         python3 -m unittest discover -s tests -t . 2>&1; echo DONE",
        &env,
    );
    let text = stdout(&out);
    assert!(out.status.success(), "{text}\n{}", stderr(&out));
    assert!(text.contains("test result: ok. 1 passed"), "{text}");
    assert!(text.contains("Ran 1 test"), "{text}");
    assert!(text.ends_with("DONE\n"), "{text}");
    assert!(root.join("target").is_dir());
}

/// A repository whose rules add a read-only directory, a denied one, a denied glob, and a link
/// pointing out of the repository, to the shipped defaults.
fn guarded_repo() -> (Repo, tempfile::TempDir) {
    let repo = git_repo();
    let root = repo.path();
    let shipped = fs::read_to_string(root.join(".nop/.permissions/agent-default.yml")).unwrap();
    let extra = "file-access:\n  - pattern: \"docs/**\"\n    access: read-only\n  \
                 - pattern: \"secrets/**\"\n    access: deny\n  \
                 - pattern: \"**/*.pem\"\n    access: deny\n";
    fs::write(
        root.join(".nop/.permissions/agent-default.yml"),
        shipped.replace("file-access:\n", extra),
    )
    .unwrap();
    fs::create_dir_all(root.join("docs")).unwrap();
    fs::write(root.join("docs/guide.md"), "guide\n").unwrap();
    fs::create_dir_all(root.join("secrets")).unwrap();
    fs::write(root.join("secrets/key.txt"), "hunter2\n").unwrap();
    fs::create_dir_all(root.join("src/certs")).unwrap();
    fs::write(root.join("src/certs/server.pem"), "PRIVATE\n").unwrap();
    fs::write(root.join("src/main.rs"), "fn main() {}\n").unwrap();
    let outside = repo_dir();
    fs::write(outside.path().join("outside.txt"), "outside\n").unwrap();
    std::os::unix::fs::symlink(outside.path(), root.join("out-link")).unwrap();
    // The user wrote the rules by hand: they hold once the user trusts them.
    repo.trust();
    (repo, outside)
}

/// Each attempt prints ESCAPED when it works.
const ATTACKS: &str = r##"
try() { if eval "$1" >/dev/null 2>&1; then echo "ESCAPED: $1"; fi; }
try 'echo x > .nop/config.yml'
try 'echo x >> .nop/agents.yml'
try 'sed -i s/log/LOG/ .nop/config.yml'
try 'mv .nop/config.yml .nop/moved.yml'
try 'rm .nop/config.yml'
try 'ln -s /tmp .nop/link'
try 'ln .nop/config.yml hardlink && echo x >> hardlink'
try 'python3 -c "open(\".nop/config.yml\", \"w\").write(\"x\")"'
try 'touch .nop/new-file'
try 'mv .nop .nop-moved'
try 'cat .nop/.permissions/agent-default.yml'
try 'ls .nop/.permissions'
try 'echo "tools: {allowed: [\"*\"]}" > .nop/.permissions/agent-evil.yml'
try 'ln -s .nop/.permissions perms && cat perms/agent-default.yml'
try 'echo "#!/bin/sh" > .git/hooks/pre-commit'
try 'rm .git/hooks/*.sample'
try 'mv .git/hooks .git/hooks-moved'
try 'git config core.fsmonitor "touch /tmp/pwned"'
try 'git config core.hooksPath /tmp'
try 'echo x >> .git/config'
try 'mv .git .git-moved'
try 'echo x > docs/guide.md'
try 'touch docs/new.md'
try 'rm docs/guide.md'
try 'mv docs docs-moved'
try 'cat secrets/key.txt'
try 'ls secrets'
try 'cat src/certs/server.pem'
try 'echo x > out-link/outside.txt'
try 'touch out-link/new.txt'
try 'ln -s "$HOME/../.." up && touch up/escaped'
try 'echo x > /usr/local/nop-escaped'
echo END
"##;

#[test]
fn protected_paths_hold_against_every_way_to_write_them() {
    for mode in ALL_MODES {
        let (repo, outside) = guarded_repo();
        let root = repo.path();
        let nop_before = nop_files(root);
        let hooks_before = contents(&root.join(".git/hooks"));
        let config_before = fs::read_to_string(root.join(".git/config")).unwrap();
        let out = sh(&repo, mode, ATTACKS, &[]);
        let text = stdout(&out);
        assert!(
            text.ends_with("END\n"),
            "{mode:?}: {text}\n{}",
            stderr(&out)
        );
        assert!(!text.contains("ESCAPED"), "{mode:?}:\n{text}");
        assert!(nop_files(root) == nop_before, "{mode:?}: .nop/ changed");
        assert_eq!(contents(&root.join(".git/hooks")), hooks_before, "{mode:?}");
        assert_eq!(
            fs::read_to_string(root.join(".git/config")).unwrap(),
            config_before,
            "{mode:?}"
        );
        assert!(root.join(".git/HEAD").is_file(), "{mode:?}");
        assert_eq!(
            fs::read_to_string(root.join("docs/guide.md")).unwrap(),
            "guide\n"
        );
        assert_eq!(
            contents(outside.path()),
            vec![(outside.path().join("outside.txt"), "outside\n".to_string())],
            "{mode:?}"
        );
        assert!(!Path::new("/tmp/pwned").exists());
        // The same sandbox still lets work happen where the rules allow it (Landlock alone
        // cannot create entries where a glob rule reaches: there, only existing files).
        let script = match mode {
            Mode::Namespaces => {
                "mkdir -p src/new && echo '// more' >> src/main.rs && cat src/main.rs"
            }
            _ => "echo '// more' >> src/main.rs && cat src/main.rs",
        };
        let work = sh(&repo, mode, script, &[]);
        assert!(work.status.success(), "{mode:?}: {}", stderr(&work));
        assert_eq!(stdout(&work), "fn main() {}\n// more\n");
    }
}

#[test]
fn nothing_a_command_starts_outlives_it() {
    for (n, mode) in ALL_MODES.into_iter().enumerate() {
        let repo = git_repo();
        // A marker no other process on the machine has in its command line.
        let marker = format!("{}.{}{n}", 300 + n, std::process::id());
        let script = format!(
            "setsid -f sleep {marker}; (sleep {marker} &); nohup sleep {marker} >/dev/null 2>&1 & \
             disown; echo STARTED"
        );
        let out = sh(&repo, mode, &script, &[]);
        assert_eq!(stdout(&out), "STARTED\n", "{mode:?}: {}", stderr(&out));
        assert_eq!(processes_with(&marker), Vec::<String>::new(), "{mode:?}");
        // The command kills what watches it (the helper, or the namespace's init), then leaves
        // a process behind.
        let marker = format!("{}.{}{n}", 310 + n, std::process::id());
        let script = format!(
            "setsid -f sleep {marker} </dev/null >/dev/null 2>&1; kill -9 $PPID; echo STARTED"
        );
        let out = sh(&repo, mode, &script, &[]);
        assert_eq!(
            wait_until_gone(&marker),
            Vec::<String>::new(),
            "{mode:?}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn network_deny_leaves_loopback_inside_only() {
    let repo = git_repo();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let script = format!(
        "exec 3<>/dev/tcp/127.0.0.1/{port} && echo REACHED-HOST; \
         python3 -c 'import socket; s = socket.socket(); s.bind((\"127.0.0.1\", 0)); s.listen(); \
         socket.create_connection(s.getsockname()); print(\"LOOPBACK\")'"
    );
    let nop = assert_cmd::cargo::cargo_bin("nop");
    let out = Command::new(nop)
        .args([
            "--set",
            "shell.network=deny",
            "sandbox",
            "run",
            "--",
            "bash",
            "-c",
        ])
        .arg(&script)
        .current_dir(repo.path())
        .env_clear()
        .env("HOME", repo.path())
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    assert_eq!(stdout(&out), "LOOPBACK\n", "{}", stderr(&out));
}

#[test]
fn sandbox_required_refuses_where_user_namespaces_are_unavailable() {
    let repo = git_repo();
    let nop = assert_cmd::cargo::cargo_bin("nop");
    let run = |args: &[&str]| {
        Command::new("unshare")
            .args(["--user", "--map-root-user", "sh", "-c"])
            .arg("echo 0 > /proc/sys/user/max_user_namespaces && exec \"$@\"")
            .arg("sh")
            .arg(&nop)
            .args(args)
            .current_dir(repo.path())
            .env_clear()
            .env("HOME", repo.path())
            .env("PATH", "/usr/bin:/bin")
            .output()
            .unwrap()
    };
    let refused = run(&[
        "--set",
        "sandbox=required",
        "sandbox",
        "run",
        "--",
        "touch",
        "ran",
    ]);
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    assert!(
        stderr(&refused)
            .contains("sandbox: required, but this machine cannot enforce the namespace view"),
        "{}",
        stderr(&refused)
    );
    assert!(!repo.path().join("ran").exists());
    let check = run(&["sandbox", "check"]);
    let text = stdout(&check);
    assert!(
        text.contains("mechanism:   landlock: Landlock ABI"),
        "{text}"
    );
    assert!(text.contains("cannot be listed"), "{text}");
    // best-effort falls back and says so, once.
    let fallback = run(&["sandbox", "run", "--", "touch", "src-made"]);
    assert!(
        stderr(&fallback).contains("user namespaces are unavailable"),
        "{}",
        stderr(&fallback)
    );
}

#[test]
fn sandbox_check_and_explain_show_what_each_rule_becomes() {
    let (repo, _outside) = guarded_repo();
    git(repo.path(), &["add", "-f", "secrets/key.txt"]);
    let text = repo.run(&["sandbox", "check"]);
    assert!(
        text.contains("git tracks files the rules deny (secrets/key.txt)"),
        "{text}"
    );
    assert!(
        text.contains("mechanism:   namespaces: user, mount and PID namespaces under Landlock ABI"),
        "{text}"
    );
    for line in [
        "read-only  .git ",
        "read-only  .nop ",
        "hidden     .nop/.permissions ",
        "read-only  docs ",
        "hidden     secrets ",
        "hidden     src/certs/server.pem ",
        "pinned     src ",
    ] {
        assert!(text.contains(line), "{line:?} in:\n{text}");
    }
    // The small helper beside nop does the confining (it starts faster than nop).
    let json: serde_json::Value =
        serde_json::from_str(&repo.run(&["sandbox", "check", "--json"])).unwrap();
    assert_eq!(
        json["helper"].as_str().map(|h| h.ends_with("/nop-sandbox")),
        Some(true),
        "{json}"
    );
    assert_eq!(json["mechanism"], "namespaces");
    let explained = repo.run(&[
        "permissions",
        "explain",
        "--path",
        "docs/guide.md",
        "--access",
        "read",
    ]);
    assert!(
        explained.contains("shell: read-only (`docs/**` is read-only"),
        "{explained}"
    );
}

/// The model's script: each of `commands` through the shell tool, one call per turn, then
/// "done".
fn shell_script(commands: &[&str]) -> Vec<crate::support::mock::MockResponse> {
    let mut script: Vec<_> = commands
        .iter()
        .enumerate()
        .map(|(i, c)| {
            openai::reply_tool_calls(&[(&format!("c{i}"), "shell", json!({ "command": c }))])
        })
        .collect();
    script.push(openai::reply_text("done"));
    script
}

/// `nop run` whose model runs each of `commands` through the shell tool, one call per turn; the
/// tool results in order.
fn agent_runs(repo: &Repo, env: &[(&str, &str)], commands: &[&str]) -> Vec<String> {
    let server = MockServer::start(shell_script(commands));
    let out = repo
        .nop_model(&server, "openai")
        .envs(env.iter().copied())
        .args(["run", "--output-format", "json", "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    (0..commands.len())
        .map(|i| server.result_of(&format!("c{i}")))
        .collect()
}

#[test]
fn the_api_key_never_reaches_a_shell_command() {
    let secrets = [
        ("NOP_API_KEY", "sk-nop-test-0000-SECRET"),
        ("LLM_CREDENTIAL", "cred-test-1111-SECRET"),
        ("DEPLOY_TOKEN", "tok-test-2222-SECRET"),
    ];
    for mode in [Mode::Namespaces, Mode::LandlockOnly] {
        let repo = git_repo();
        let mut env = secrets.to_vec();
        env.push(("NOP_PROVIDER_API_KEY_ENV", "LLM_CREDENTIAL"));
        if mode == Mode::LandlockOnly {
            env.push(("NOP_SHELL_NAMESPACES", "off"));
        }
        let results = agent_runs(
            &repo,
            &env,
            &[
                "printenv; env",
                "tr '\\0' '\\n' < /proc/self/environ; tr '\\0' '\\n' < /proc/$PPID/environ",
                "for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done 2>/dev/null; echo SCANNED",
            ],
        );
        assert_eq!(results.len(), 3, "{mode:?}: {results:?}");
        assert!(results[0].contains("HOME="), "{mode:?}: {}", results[0]);
        assert!(results[2].contains("SCANNED"), "{mode:?}: {}", results[2]);
        for (name, secret) in secrets {
            for r in &results {
                assert!(!r.contains(secret), "{mode:?}: {name} leaked:\n{r}");
            }
        }
        // Nor anywhere nop wrote: sessions, out-logs, logs.
        for (path, text) in contents(&repo.path().join(".nop")) {
            for (name, secret) in secrets {
                assert!(
                    !text.contains(secret),
                    "{mode:?}: {name} in {}",
                    path.display()
                );
            }
        }
    }
}

#[test]
fn a_refused_command_is_told_which_rule_refused_it() {
    let repo = git_repo();
    let outside = repo_dir();
    let target = outside.path().join("x");
    let results = agent_runs(
        &repo,
        &[],
        &[
            "echo x > .nop/config.yml",
            "cat .nop/.permissions/agent-default.yml",
            "mv .git .git-moved",
            &format!("echo x > {}", target.display()),
        ],
    );
    assert!(
        results[0].contains(
            "sandbox: `.nop/config.yml` is read-only to shell commands: `.nop/**` is read-only \
             (nop's built-in floor)"
        ),
        "{}",
        results[0]
    );
    assert!(
        results[1].contains(
            "sandbox: `.nop/.permissions/agent-default.yml` is hidden from shell commands: \
             `.nop/.permissions/**` is denied (nop's built-in floor)"
        ),
        "{}",
        results[1]
    );
    assert!(
        results[2].contains("sandbox: `.git` cannot be moved or removed by shell commands"),
        "{}",
        results[2]
    );
    assert!(
        results[3].contains(&format!(
            "sandbox: `{}` is outside the places shell commands may write",
            target.display()
        )),
        "{}",
        results[3]
    );
    assert!(!target.exists());
}

#[test]
fn rewriting_the_temp_directory_cannot_widen_the_rules() {
    let repo = git_repo();
    let tmp = repo_dir();
    let outside = repo_dir();
    let target = outside.path().join("pwned");
    let permissive = json!({
        "mechanism": "landlock", "required": false, "network": true, "mounts": [],
        "grants": [{"path": "/", "access": "read_write"}],
    })
    .to_string();
    // A process of the attacker's rewrites every file in the temp directory, from outside any
    // sandbox, for the whole run.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let rewriter = {
        let stop = stop.clone();
        let dir = tmp.path().to_path_buf();
        let spec = permissive.clone();
        std::thread::spawn(move || {
            let mut rounds = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for entry in fs::read_dir(&dir).into_iter().flatten().flatten() {
                    let _ = fs::write(entry.path(), &spec);
                }
                // Plant files too, as a spec-swapping process would.
                let _ = fs::write(dir.join(format!("nop-sandbox-{}.json", rounds % 4)), &spec);
                rounds += 1;
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            rounds
        })
    };
    // And the model tries the same from inside, leaving a process behind to do it.
    let swapper = format!(
        "setsid -f sh -c 'while :; do for f in \"$TMPDIR\"/* /tmp/nop-sandbox-*; do \
         [ -f \"$f\" ] && printf %s {permissive:?} > \"$f\"; done; done' ; echo STARTED"
    );
    let attempt = format!("echo x > {} ; echo x > .nop/config.yml", target.display());
    let tmpdir = tmp.path().to_string_lossy().into_owned();
    let results = agent_runs(
        &repo,
        &[("TMPDIR", tmpdir.as_str())],
        &[&swapper, &attempt, &attempt, &attempt, &attempt],
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let rounds = rewriter.join().unwrap();
    assert!(rounds > 0);
    assert!(results[0].contains("STARTED"), "{}", results[0]);
    assert!(!target.exists(), "{results:?}");
    assert!(
        fs::read_to_string(repo.path().join(".nop/config.yml"))
            .unwrap()
            .contains("sandbox:"),
        "{results:?}"
    );
}

#[test]
fn a_command_ends_when_nop_is_killed_or_stops_it() {
    for (n, mode) in [Mode::Namespaces, Mode::LandlockOnly]
        .into_iter()
        .enumerate()
    {
        // nop killed with SIGKILL while the command runs: nothing it started survives.
        let repo = git_repo();
        let marker = format!("{}.{}{n}", 400 + n, std::process::id());
        let script = format!("setsid -f sleep {marker}; exec sleep {marker}");
        let mut args: Vec<&str> = Vec::new();
        if mode == Mode::LandlockOnly {
            args.extend(["--set", "shell.namespaces=off"]);
        }
        args.extend(["sandbox", "run", "--", "bash", "-c", &script]);
        let mut child = crate::support::start_until(&repo, &args, &marker, 2);
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(wait_until_gone(&marker), Vec::<String>::new(), "{mode:?}");

        // The shell tool's time limit: the call ends, and so does everything it started.
        let marker = format!("{}.{}{n}", 500 + n, std::process::id());
        let mut env = Vec::new();
        if mode == Mode::LandlockOnly {
            env.push(("NOP_SHELL_NAMESPACES", "off"));
        }
        let server = MockServer::start(vec![
            openai::reply_tool_calls(&[(
                "c1",
                "shell",
                json!({
                    "command": format!("setsid -f sleep {marker}; trap '' TERM; sleep {marker}"),
                    "timeout_s": 1.0,
                }),
            )]),
            openai::reply_text("done"),
        ]);
        let out = repo
            .nop_model(&server, "openai")
            .envs(env)
            .args(["run", "--output-format", "json", "go"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let result = server.result_of("c1");
        assert!(result.contains("did not finish within 1.0 s"), "{result}");
        assert_eq!(wait_until_gone(&marker), Vec::<String>::new(), "{mode:?}");
    }
}

#[test]
fn replacing_the_sandbox_helper_during_a_run_changes_nothing() {
    // nop run from a build directory inside the repository it works on: its helper lies where
    // shell commands may write.
    let repo = git_repo();
    let bin = repo.path().join("target/bin");
    fs::create_dir_all(&bin).unwrap();
    let built = assert_cmd::cargo::cargo_bin("nop");
    for name in ["nop", "nop-sandbox"] {
        fs::copy(built.with_file_name(name), bin.join(name)).unwrap();
    }
    let outside = repo_dir();
    let marker = outside.path().join("helper-ran");
    let pwned = outside.path().join("pwned");
    let fake = format!(
        "printf '%s\\n' '#!/bin/sh' 'echo RAN > {}' \
         'while [ \"$1\" != -- ]; do shift; done; shift; exec \"$@\"' > target/bin/fake && \
         chmod +x target/bin/fake && mv -f target/bin/fake target/bin/nop-sandbox && echo REPLACED",
        marker.display()
    );
    let pwn = format!("echo x > {}", pwned.display());
    let server = MockServer::start(shell_script(&[&fake, &pwn]));
    let out = Command::new(bin.join("nop"))
        .args(["run", "--output-format", "json", "go"])
        .current_dir(repo.path())
        .env_clear()
        .env("HOME", repo.path())
        .env("PATH", "/usr/bin:/bin")
        .envs(crate::support::model_env(&server, "openai"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let results = server.results_of(&["c0", "c1"]);
    assert!(results[0].contains("REPLACED"), "{results:?}");
    assert!(!marker.exists(), "the replaced helper ran: {results:?}");
    assert!(!pwned.exists(), "{results:?}");
}

#[test]
fn with_the_sandbox_off_a_command_keeps_the_users_rights() {
    let repo = git_repo();
    let caps = |status: &str| {
        status
            .lines()
            .find(|l| l.starts_with("CapEff:"))
            .map(str::to_string)
            .unwrap_or_default()
    };
    let mine = caps(&fs::read_to_string("/proc/self/status").unwrap());
    let nop = assert_cmd::cargo::cargo_bin("nop");
    let out = Command::new(nop)
        .args([
            "--set",
            "sandbox=off",
            "sandbox",
            "run",
            "--",
            "cat",
            "/proc/self/status",
        ])
        .current_dir(repo.path())
        .env_clear()
        .env("HOME", repo.path())
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    assert_eq!(caps(&stdout(&out)), mine, "{}", stderr(&out));
}

/// A command that connects to the abstract UNIX socket `name` and prints what happened.
fn connect_abstract(name: &str) -> String {
    format!(
        "python3 -c 'import socket\ns = socket.socket(socket.AF_UNIX)\ntry:\n    \
         s.connect(\"\\0{name}\"); print(\"CONNECTED\")\nexcept OSError as e:\n    \
         print(\"REFUSED\", e.errno)'"
    )
}

#[test]
fn network_deny_keeps_abstract_unix_sockets_outside_the_sandbox_out_of_reach() {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixListener};
    // A service outside the sandbox listening on an abstract socket (as X11, D-Bus or a
    // debugger's do): it needs no file, so no file rule can protect it.
    let name = format!("nop-test-{}-{}", std::process::id(), line!());
    let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let _listener = UnixListener::bind_addr(&addr).unwrap();
    let command = connect_abstract(&name);
    // The model's command, in each way of confining.
    for mode in [Mode::Namespaces, Mode::LandlockOnly] {
        let repo = git_repo();
        let mut env = vec![("NOP_SHELL_NETWORK", "deny")];
        if mode == Mode::LandlockOnly {
            env.push(("NOP_SHELL_NAMESPACES", "off"));
        }
        let results = agent_runs(&repo, &env, &[command.as_str()]);
        assert!(
            results[0].contains("REFUSED"),
            "{mode:?}: the command reached the socket: {}",
            results[0]
        );
    }
    let repo = git_repo();
    for mode in ALL_MODES {
        let out = sh(&repo, mode, &command, &[("NOP_SHELL_NETWORK", "deny")]);
        assert!(
            stdout(&out).starts_with("REFUSED"),
            "{mode:?}: {}{}",
            stdout(&out),
            stderr(&out)
        );
    }
    // With the network allowed, it is reachable (the socket works; the rule is what refuses).
    let out = sh(&repo, Mode::LandlockOnly, &command, &[]);
    assert_eq!(stdout(&out), "CONNECTED\n", "{}", stderr(&out));
}

#[test]
fn credentials_of_every_shape_never_reach_a_shell_command() {
    // Named so that a careless filter misses them, or shaped so (a URL with a password).
    let secrets = [
        ("GH_PAT", "github_pat_SECRET0"),
        (
            "DATABASE_URL",
            "postgres://app:SECRET1@db.internal:5432/app",
        ),
        ("REDIS_URL", "redis://default:SECRET2@cache:6379/0"),
        ("SENTRY_DSN", "https://SECRET3@o1.ingest.sentry.io/1"),
        ("NPM_CONFIG__AUTH", "SECRET4"),
        ("MYSQL_PWD", "SECRET5"),
        ("GOOGLE_APPLICATION_CREDENTIALS", "/SECRET6/gcp.json"),
        ("SSH_PRIVATE_KEY_PATH", "/SECRET7/id"),
        (
            "ORIGIN",
            "https://x-access-token:SECRET8@github.com/o/r.git",
        ),
    ];
    // … and ones a user lets through, or that are no secret.
    let ordinary = [
        ("PUBLIC_URL", "https://example.com/kept-1"),
        ("GIT_AUTHOR_NAME", "kept-2"),
        ("XAUTHORITY", "/run/user/1000/kept-3"),
        ("WANTED_PWD", "kept-4"),
    ];
    for mode in [Mode::Namespaces, Mode::LandlockOnly] {
        let repo = git_repo();
        let config = repo.path().join(".nop/config.yml");
        let text = fs::read_to_string(&config).unwrap();
        assert!(text.contains("  # env_keep: []\n"), "{text}");
        fs::write(
            &config,
            text.replace("  # env_keep: []\n", "  env_keep: [\"wanted_*\"]\n"),
        )
        .unwrap();
        repo.trust();
        let mut env = secrets.to_vec();
        env.extend(ordinary);
        if mode == Mode::LandlockOnly {
            env.push(("NOP_SHELL_NAMESPACES", "off"));
        }
        let results = agent_runs(&repo, &env, &["env; echo PWD=$PWD"]);
        for (name, secret) in secrets {
            assert!(
                !results[0].contains(secret),
                "{mode:?}: {name} leaked:\n{}",
                results[0]
            );
        }
        for (name, value) in ordinary {
            assert!(
                results[0].contains(&format!("{name}={value}")),
                "{mode:?}: {name} missing:\n{}",
                results[0]
            );
        }
        assert!(
            results[0].contains(&format!("PWD={}", repo.path().display())),
            "{}",
            results[0]
        );
    }
}
