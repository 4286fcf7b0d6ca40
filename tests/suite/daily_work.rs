//! What a developer does every day works under the sandbox, in the default configuration, at the
//! root of a repository outside /tmp: git as a developer uses it (add, commit, stash, branch,
//! rebase, merge), builds and package managers that write their caches (the real ones stay
//! untouched), a tool writing `~/.cache`. Each test is an ordinary scripted sequence of tool
//! calls that must pass with no refusal; the hostile tests (`planted.rs`, `trust.rs`) keep what
//! the model must never reach out of it. Nothing here reaches the network.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::json;

use crate::support::mock::{MockResponse, MockServer, openai};
use crate::support::{Repo, repo_dir};

/// A repository on `main` with one commit, `nop init`, and a private HOME with the user's git
/// identity (as a developer's machine has).
struct Setup {
    repo: Repo,
    home: tempfile::TempDir,
}

impl Setup {
    fn new() -> Setup {
        let s = Setup {
            repo: Repo::bare(),
            home: repo_dir(),
        };
        fs::write(
            s.home.path().join(".gitconfig"),
            "[user]\n\tname = Dev\n\temail = dev@example.com\n[init]\n\tdefaultBranch = main\n",
        )
        .unwrap();
        s.git(&["init", "-q", "-b", "main"]);
        fs::write(s.root().join("README.md"), "# project\n").unwrap();
        s.git(&["add", "-A"]);
        s.git(&["commit", "-qm", "start"]);
        let out = s
            .repo
            .nop()
            .env("HOME", s.home.path())
            .arg("init")
            .output()
            .unwrap();
        crate::support::assert_ok(&out);
        s
    }

    fn root(&self) -> &Path {
        self.repo.path()
    }

    fn home(&self) -> &Path {
        self.home.path()
    }

    /// The user's git, as the user runs it: their HOME, nothing of nop's.
    fn git(&self, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(self.root())
            .env_clear()
            .env("HOME", self.home.path())
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `nop run` of `commands`, one shell call each, then an answer; returns each call's result.
    fn shell(&self, commands: &[&str], extra: &[&str]) -> Vec<String> {
        self.shell_with(commands, extra, "/usr/local/bin:/usr/bin:/bin")
    }

    /// [`Setup::shell`] with `path` as PATH.
    fn shell_with(&self, commands: &[&str], extra: &[&str], path: &str) -> Vec<String> {
        let mut script: Vec<MockResponse> = commands
            .iter()
            .enumerate()
            .map(|(i, c)| {
                openai::reply_tool_calls(&[(&format!("c{i}"), "shell", json!({"command": c}))])
            })
            .collect();
        script.push(openai::reply_text("done"));
        let server = MockServer::start(script);
        let out = self
            .repo
            .nop_model(&server, "openai")
            .env("HOME", self.home.path())
            .env("PATH", path)
            .arg("run")
            .args(extra)
            .arg("work")
            .output()
            .unwrap();
        crate::support::assert_ok(&out);
        (0..commands.len())
            .map(|i| server.result_of(&format!("c{i}")))
            .collect()
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        // Worktrees nop made beside the repository: `<repo>-<name>`.
        let Some(name) = self
            .root()
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
        else {
            return;
        };
        let Some(parent) = self.root().parent() else {
            return;
        };
        for entry in fs::read_dir(parent).into_iter().flatten().flatten() {
            if entry
                .file_name()
                .to_string_lossy()
                .starts_with(&format!("{name}-"))
            {
                let _ = fs::remove_dir_all(entry.path());
            }
        }
    }
}

/// Asserts each result is a command that exited 0 with no note from the sandbox.
fn all_ok(results: &[String]) {
    for r in results {
        assert!(
            r.starts_with("exit code: 0") && !r.contains("sandbox:"),
            "{results:#?}"
        );
    }
}

#[test]
fn the_agent_uses_git_as_a_developer_does() {
    let s = Setup::new();
    let results = s.shell(
        &[
            "echo a > a.txt && git add a.txt && git commit -qm 'add a'",
            "git checkout -qb feature && echo b > b.txt && git add b.txt && git commit -qm 'add b'",
            "git checkout -q main && echo c > c.txt && git add c.txt && git commit -qm 'add c'",
            "git checkout -q feature && git rebase -q main && git log --format=%s",
            "echo more >> a.txt && git stash -q && git status --short && git stash pop -q && git status --short",
            "git restore a.txt && git checkout -q main && git merge -q --no-edit feature && git branch --list",
        ],
        &[],
    );
    all_ok(&results);
    assert!(
        results[3].contains("add b\nadd c\nadd a\nstart"),
        "{results:#?}"
    );
    assert!(results[4].contains(" M a.txt"), "{results:#?}");
    // The user's git sees the agent's work.
    assert_eq!(
        s.git(&["log", "--format=%s", "main"]),
        "add b\nadd c\nadd a\nstart\n"
    );
    assert_eq!(s.git(&["status", "--short", "--untracked-files=no"]), "");
    assert!(s.git(&["stash", "list"]).is_empty());
    s.git(&["fsck", "--no-progress"]);
}

#[test]
fn a_commit_runs_the_users_own_hook_inside_the_sandbox() {
    let s = Setup::new();
    let hook = s.root().join(".git/hooks/pre-commit");
    fs::write(
        &hook,
        "#!/bin/sh\necho hook-ran > hook.log\ntouch /var/tmp/outside-hook-$$ 2>/dev/null; exit 0\n",
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&hook, fs::Permissions::from_mode(0o755)).unwrap();
    }
    let results = s.shell(
        &["echo a > a.txt && git add a.txt && git commit -qm 'add a'"],
        &[],
    );
    assert!(results[0].starts_with("exit code: 0"), "{results:?}");
    assert_eq!(
        fs::read_to_string(s.root().join("hook.log")).unwrap(),
        "hook-ran\n"
    );
    assert_eq!(s.git(&["log", "--format=%s", "-1"]), "add a\n");
}

#[test]
fn plan_mode_runs_commands_that_read_and_changes_nothing() {
    let s = Setup::new();
    fs::write(s.root().join("notes.txt"), "hello\n").unwrap();
    let results = s.shell(
        &[
            "git status --short",
            "ls && grep -n hello notes.txt",
            "echo x > /tmp/nop-plan-scratch-$$ && echo scratch",
            "echo changed > notes.txt",
        ],
        &["--approval", "plan"],
    );
    all_ok(&results[..3]);
    assert!(results[1].contains("1:hello"), "{results:#?}");
    assert!(!results[3].starts_with("exit code: 0"), "{results:#?}");
    assert_eq!(
        fs::read_to_string(s.root().join("notes.txt")).unwrap(),
        "hello\n"
    );
}

/// Every file beneath `dir`, with its bytes.
fn tree(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push((path.clone(), fs::read(&path).unwrap_or_default()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn caches_outside_the_repository_are_written_through_the_session_and_the_real_ones_stay() {
    let s = Setup::new();
    fs::create_dir_all(s.home().join(".cache/tool")).unwrap();
    fs::write(s.home().join(".cache/tool/old"), "old\n").unwrap();
    fs::create_dir_all(s.home().join(".npm")).unwrap();
    let before_cache = tree(&s.home().join(".cache"));
    let before_npm = tree(&s.home().join(".npm"));
    let results = s.shell(
        &[
            "mkdir -p ~/.cache/tool && echo new > ~/.cache/tool/new && cat ~/.cache/tool/old",
            "cat ~/.cache/tool/new && echo data > ~/.npm/entry",
        ],
        &[],
    );
    all_ok(&results);
    // The next command of the session sees what the one before wrote.
    assert!(results[1].contains("new"), "{results:#?}");
    assert_eq!(tree(&s.home().join(".cache")), before_cache);
    assert_eq!(tree(&s.home().join(".npm")), before_npm);
}

#[test]
fn cargo_test_works_with_the_users_cargo_home_left_as_it_was() {
    // The cargo running these tests (the toolchain's own binary, with rustc beside it).
    let Some(cargo) = std::env::var_os("CARGO").map(PathBuf::from) else {
        return;
    };
    let Some(bin) = cargo.parent() else { return };
    let s = Setup::new();
    // The user's cargo home (cargo takes a lock file there for every build).
    let home_cargo = s.home().join(".cargo");
    fs::create_dir_all(&home_cargo).unwrap();
    fs::write(home_cargo.join("config.toml"), "[term]\nquiet = false\n").unwrap();
    fs::write(
        s.root().join("Cargo.toml"),
        "[package]\nname = \"daily\"\nversion = \"0.1.0\"\nedition = \"2021\"\n[dependencies]\n",
    )
    .unwrap();
    fs::create_dir_all(s.root().join("src")).unwrap();
    fs::write(
        s.root().join("src/lib.rs"),
        "pub fn two() -> u32 { 2 }\n#[test]\nfn it_is_two() { assert_eq!(two(), 2); }\n",
    )
    .unwrap();
    let before = tree(&home_cargo);
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display());
    let results = s.shell_with(&["cargo test --offline 2>&1 | tail -3"], &[], &path);
    assert!(
        results[0].starts_with("exit code: 0") && results[0].contains("test result: ok"),
        "{results:#?}"
    );
    assert_eq!(tree(&home_cargo), before);
}

#[test]
fn hostile_what_a_command_writes_to_git_beyond_objects_refs_and_index_is_never_kept() {
    let s = Setup::new();
    let canaries = repo_dir();
    let canary = |name: &str| canaries.path().join(name).display().to_string();
    let config_before = fs::read_to_string(s.root().join(".git/config")).unwrap();
    let objects_before = tree(&s.root().join(".git/objects"));
    let head = s.git(&["rev-parse", "HEAD"]).trim().to_string();
    let results = s.shell(
        &[
            // Configuration, hooks, attributes, pointers.
            &format!("git config core.fsmonitor 'touch {}' && git config alias.st '!touch {}'", canary("fsmonitor"), canary("alias")),
            &format!("printf '#!/bin/sh\\ntouch {}\\n' > .git/hooks/post-checkout && chmod +x .git/hooks/post-checkout", canary("hook")),
            "mkdir -p .git/info && echo '* filter=evil' > .git/info/attributes && echo /elsewhere > .git/objects/info/alternates",
            "mkdir -p /tmp/evil.git && echo /tmp/evil.git > .git/commondir",
            // A HEAD and a ref that do not read as git writes them.
            "echo 'ref: ../../../tmp/x' > .git/HEAD",
            // History thrown away: loose objects deleted.
            "rm -rf .git/objects/?? && echo gone",
        ],
        &[],
    );
    for r in &results {
        assert!(r.starts_with("exit code:"), "{results:#?}");
    }
    assert!(
        results[0].contains("not kept in .git") && results[0].contains(".git/config"),
        "{results:#?}"
    );
    assert!(
        results[4].contains("not what git writes there"),
        "{results:#?}"
    );
    assert_eq!(
        fs::read_to_string(s.root().join(".git/config")).unwrap(),
        config_before
    );
    assert!(!s.root().join(".git/hooks/post-checkout").exists());
    assert!(!s.root().join(".git/commondir").exists());
    assert!(!s.root().join(".git/objects/info/alternates").exists());
    assert_eq!(tree(&s.root().join(".git/objects")), objects_before);
    assert_eq!(s.git(&["rev-parse", "HEAD"]).trim(), head);
    // A gitlink into a repository the command made: none of that command's git work is kept.
    let results = s.shell(
        &["git init -q vendor/lib && git -C vendor/lib commit -q --allow-empty -m x && git add vendor/lib 2>/dev/null; git commit -qm 'vendor' && echo committed"],
        &[],
    );
    assert!(results[0].contains("gitlink (vendor/lib)"), "{results:#?}");
    assert_eq!(s.git(&["rev-parse", "HEAD"]).trim(), head);
    assert!(!s.git(&["ls-files", "--stage"]).contains("160000"));
    // The user's git runs none of it.
    s.git(&["status", "--short"]);

    s.git(&["checkout", "-q", "-b", "user-branch"]);
    s.git(&["fsck", "--no-progress"]);
    let fired: Vec<_> = fs::read_dir(canaries.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(fired.is_empty(), "{fired:?}");
}

/// A model that answers each session by its first user message: its i-th request gets
/// `script[task][i]`; past the end, the tool results joined.
fn by_task(scripts: std::collections::HashMap<String, Vec<MockResponse>>) -> MockServer {
    MockServer::start_with(Box::new(
        move |request: &crate::support::mock::RecordedRequest| {
            let first = request
                .user_messages()
                .into_iter()
                .next()
                .unwrap_or_default();
            let turn = request.body["messages"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|m| m["role"] == "assistant")
                .count();
            match scripts.get(&first).and_then(|s| s.get(turn)) {
                Some(reply) => reply.clone(),
                None => openai::reply_text(&request.tool_results().join(" | ")),
            }
        },
    ))
}

#[test]
fn git_works_in_an_isolated_subagents_worktree_also_from_a_package_of_a_monorepo() {
    let s = Setup::new();
    // nop's root is a package of the repository, with a `.nop/` the user trusted there.
    let package = s.root().join("packages/web");
    fs::create_dir_all(package.join(".nop")).unwrap();
    fs::write(package.join(".nop/config.yml"), "").unwrap();
    fs::write(package.join("index.js"), "// web\n").unwrap();
    s.git(&["add", "-A"]);
    s.git(&["commit", "-qm", "package"]);
    let nop = |args: &[&str]| {
        let out = s
            .repo
            .nop_in(&package)
            .env("HOME", s.home())
            .args(args)
            .output()
            .unwrap();
        crate::support::assert_ok(&out);
    };
    nop(&["trust", "--yes"]);
    nop(&["init"]);
    let agents = package.join(".nop/agents.yml");
    let mut text = fs::read_to_string(&agents).unwrap();
    text.push_str("\n  - name: worker\n    description: works in a worktree of its own\n    isolation: worktree\n");
    fs::write(&agents, text).unwrap();
    nop(&["trust", "--yes"]);
    let server = by_task(std::collections::HashMap::from([
        (
            "delegate".to_string(),
            vec![openai::reply_tool_calls(&[(
                "w",
                "call-agent",
                json!({"agent": "worker", "arguments": "look at git"}),
            )])],
        ),
        (
            "look at git".to_string(),
            vec![openai::reply_tool_calls(&[(
                "g",
                "shell",
                json!({"command": "pwd && echo x >> index.js && git status --short && git diff --stat && git log --format=%s -1"}),
            )])],
        ),
    ]));
    let out = s
        .repo
        .nop_in(&package)
        .env("HOME", s.home())
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .envs(crate::support::model_env(&server, "openai"))
        .args(["run", "--output-format", "json", "delegate"])
        .output()
        .unwrap();
    crate::support::assert_ok(&out);
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let said = answer["final_message"].as_str().unwrap_or_default();
    assert!(said.contains("exit code: 0"), "{said}");
    assert!(
        said.contains(" M index.js") && said.contains("package"),
        "{said}"
    );
}

#[test]
fn git_works_in_an_isolated_subagents_worktree() {
    let s = Setup::new();
    let agents = s.root().join(".nop/agents.yml");
    let mut text = fs::read_to_string(&agents).unwrap();
    text.push_str("\n  - name: worker\n    description: works in a worktree of its own\n    isolation: worktree\n");
    fs::write(&agents, text).unwrap();
    let out = s
        .repo
        .nop()
        .env("HOME", s.home())
        .args(["trust", "--yes"])
        .output()
        .unwrap();
    crate::support::assert_ok(&out);
    let server = by_task(std::collections::HashMap::from([
        (
            "delegate".to_string(),
            vec![openai::reply_tool_calls(&[(
                "w",
                "call-agent",
                json!({"agent": "worker", "arguments": "look at git"}),
            )])],
        ),
        (
            "look at git".to_string(),
            vec![openai::reply_tool_calls(&[(
                "g",
                "shell",
                json!({"command": "echo x >> README.md && git status --short && git diff --stat && git log --format=%s -1 && git add -A && git commit -qm mine && git log --format=%s -1"}),
            )])],
        ),
    ]));
    let out = s
        .repo
        .nop()
        .env("HOME", s.home())
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .envs(crate::support::model_env(&server, "openai"))
        .args(["run", "--output-format", "json", "delegate"])
        .output()
        .unwrap();
    crate::support::assert_ok(&out);
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let said = answer["final_message"].as_str().unwrap_or_default();
    assert!(said.contains("exit code: 0"), "{said}");
    assert!(
        said.contains(" M README.md") && said.contains("start\n") && said.contains("mine"),
        "{said}"
    );
}

#[test]
fn a_command_runs_outside_the_sandbox_only_as_the_user_allows_it() {
    let s = Setup::new();
    let outside = repo_dir();
    let target = |name: &str| outside.path().join(name).display().to_string();
    let outside_call = |id: &str, command: &str| {
        openai::reply_tool_calls(&[(
            id,
            "shell",
            json!({"command": command, "outside_sandbox": true, "justification": "it writes outside the repository"}),
        )])
    };
    let run = |extra: &[&str], command: &str| -> String {
        let server = MockServer::start(vec![
            outside_call("c1", command),
            openai::reply_text("done"),
        ]);
        let out = s
            .repo
            .nop_model(&server, "openai")
            .env("HOME", s.home())
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .args(["run"])
            .args(extra)
            .arg("work")
            .output()
            .unwrap();
        crate::support::assert_ok(&out);
        server.result_of("c1")
    };
    // Confined, the write is refused, and the model is told the way out.
    let results = s.shell(&[&format!("touch {}", target("confined"))], &[]);
    assert!(results[0].contains("outside_sandbox: true"), "{results:?}");
    // Headless, without a rule: refused, and it never ran.
    let said = run(&[], &format!("touch {}", target("headless")));
    assert!(
        said.contains("no `shell.outside_sandbox` pattern matches"),
        "{said}"
    );
    assert!(!outside.path().join("headless").exists());
    // With a rule for the command: it runs with the user's rights, and says so.
    let rule = "shell.outside_sandbox=[\"touch *\"]";
    let said = run(&["--set", rule], &format!("touch {}", target("allowed")));
    assert!(said.contains("ran outside the sandbox"), "{said}");
    assert!(outside.path().join("allowed").exists());
    // A compound command never matches a rule; plan mode and `--approval never` never run one.
    let said = run(
        &["--set", rule],
        &format!("touch {} && touch {}", target("a"), target("b")),
    );
    assert!(said.contains("may not run outside the sandbox"), "{said}");
    let said = run(
        &["--set", rule, "--approval", "plan"],
        &format!("touch {}", target("plan")),
    );
    assert!(said.contains("plan mode never runs"), "{said}");
    let said = run(
        &["--set", rule, "--approval", "never"],
        &format!("touch {}", target("never")),
    );
    assert!(said.contains("approvals are off"), "{said}");
    for name in ["confined", "headless", "a", "b", "plan", "never"] {
        assert!(!outside.path().join(name).exists(), "{name}");
    }
    // The session holds the call as what it was.
    let sessions: Vec<_> = fs::read_dir(s.root().join(".nop/sessions"))
        .unwrap()
        .flatten()
        .collect();
    let recorded = sessions
        .iter()
        .filter_map(|e| fs::read_to_string(e.path().join("session.json")).ok())
        .any(|t| t.contains("\"outside_sandbox\": true") && t.contains("ran outside the sandbox"));
    assert!(recorded);
}

/// Whether `program` runs here.
fn have(program: &str) -> bool {
    std::process::Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn npm_install_and_npm_test_work_and_the_users_npm_cache_stays_as_it_was() {
    if !have("npm") {
        return;
    }
    let s = Setup::new();
    fs::create_dir_all(s.home().join(".npm")).unwrap();
    fs::create_dir_all(s.root().join("deps/hello")).unwrap();
    fs::write(
        s.root().join("deps/hello/package.json"),
        r#"{"name": "hello", "version": "1.0.0", "main": "index.js"}"#,
    )
    .unwrap();
    fs::write(
        s.root().join("deps/hello/index.js"),
        "module.exports = () => 'hello';\n",
    )
    .unwrap();
    fs::write(
        s.root().join("package.json"),
        r#"{"name": "app", "version": "1.0.0", "scripts": {"test": "node -e \"process.exit(require('hello')() === 'hello' ? 0 : 1)\""}}"#,
    )
    .unwrap();
    let before = tree(&s.home().join(".npm"));
    let results = s.shell(
        &[
            "cd deps/hello && npm pack --silent >/dev/null && cd ../.. && npm install --offline --no-audit --no-fund ./deps/hello/hello-1.0.0.tgz 2>&1 | tail -2",
            "npm test 2>&1 | tail -2",
        ],
        &[],
    );
    all_ok(&results);
    assert!(s.root().join("node_modules/hello/index.js").exists());
    assert_eq!(tree(&s.home().join(".npm")), before);
}

#[test]
fn pip_install_into_a_venv_in_the_repository_works_and_the_users_pip_cache_stays_as_it_was() {
    if !have("python3") {
        return;
    }
    let s = Setup::new();
    fs::create_dir_all(s.home().join(".cache")).unwrap();
    fs::create_dir_all(s.root().join("deps/pyhello/pyhello")).unwrap();
    fs::write(
        s.root().join("deps/pyhello/setup.py"),
        "from setuptools import setup\nsetup(name='pyhello', version='1.0', packages=['pyhello'])\n",
    )
    .unwrap();
    fs::write(
        s.root().join("deps/pyhello/pyhello/__init__.py"),
        "def hello():\n    return 'hello'\n",
    )
    .unwrap();
    let before = tree(&s.home().join(".cache"));
    let results = s.shell(
        &[
            "python3 -m venv .venv && .venv/bin/pip install -q --no-index --no-build-isolation ./deps/pyhello 2>&1 | tail -2",
            ".venv/bin/python -c 'import pyhello; print(pyhello.hello())'",
        ],
        &[],
    );
    all_ok(&results);
    assert!(results[1].contains("hello"), "{results:#?}");
    assert_eq!(tree(&s.home().join(".cache")), before);
}

#[test]
fn a_worktree_a_killed_subagent_left_is_named_by_the_next_run() {
    let s = Setup::new();
    let agents = s.root().join(".nop/agents.yml");
    let mut text = fs::read_to_string(&agents).unwrap();
    text.push_str("\n  - name: worker\n    description: works in a worktree of its own\n    isolation: worktree\n");
    fs::write(&agents, text).unwrap();
    let out = s
        .repo
        .nop()
        .env("HOME", s.home())
        .args(["trust", "--yes"])
        .output()
        .unwrap();
    crate::support::assert_ok(&out);
    let scratch = tempfile::Builder::new()
        .prefix("nop-kill-")
        .tempdir_in("/tmp")
        .unwrap();
    let started = scratch.path().join("started");
    let gate = scratch.path().join("gate");
    let server = by_task(std::collections::HashMap::from([
        (
            "delegate".to_string(),
            vec![openai::reply_tool_calls(&[(
                "w",
                "call-agent",
                json!({"agent": "worker", "arguments": "work slowly"}),
            )])],
        ),
        (
            "work slowly".to_string(),
            vec![openai::reply_tool_calls(&[(
                "g",
                "shell",
                json!({"command": format!("echo half > half.txt && touch {} && while [ ! -e {} ]; do sleep 0.05; done", started.display(), gate.display())}),
            )])],
        ),
        ("next".to_string(), vec![openai::reply_text("ok")]),
    ]));
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("nop"))
        .current_dir(s.root())
        .env_clear()
        .env("HOME", s.home())
        .env("XDG_STATE_HOME", s.repo.state.path())
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .envs(crate::support::model_env(&server, "openai"))
        .args(["run", "delegate"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !started.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the subagent never started"
        );
        std::thread::yield_now();
    }
    child.kill().unwrap();
    let _ = child.wait();
    fs::write(&gate, "").unwrap();
    let out = s
        .repo
        .nop_model(&server, "openai")
        .env("HOME", s.home())
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .args(["run", "next"])
        .output()
        .unwrap();
    crate::support::assert_ok(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("a subagent's nop was killed while it worked"),
        "{stderr}"
    );
    let worktree = stderr
        .split("its worktree ")
        .nth(1)
        .and_then(|r| r.split(" (branch ").next())
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(Path::new(worktree).join("half.txt").exists(), "{stderr}");
    assert!(stderr.contains("branch nop/worker-"), "{stderr}");
    // Said once.
    let out = s
        .repo
        .nop_model(&server, "openai")
        .env("HOME", s.home())
        .args(["run", "next"])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&out.stderr).contains("was killed while it worked"));
}
