//! A repository used without `nop init` (issue 17): nop runs on its built-in configuration,
//! agents, prompts and permissions, creates only `.nop/sessions` and `.nop/logs` (saying so
//! once), stays out of `git status`, finds the right repository root under an initialised
//! HOME, and confines the agent exactly as the defaults `nop init` installs would.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::support::mock::{MockServer, openai};
use crate::support::{Repo, model_env, repo_dir};

const NOTE: &str = "nop: using the built-in configuration";

fn git_init(dir: &Path) {
    fs::create_dir_all(dir).expect("mkdir");
    let out = Command::new("git")
        .args(["init", "-q"])
        .current_dir(dir)
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A git repository without `.nop/`, where users keep theirs (not under /tmp).
fn bare_git_repo() -> Repo {
    let repo = Repo::bare();
    git_init(repo.path());
    fs::write(repo.path().join("README.md"), "# project\n").expect("write");
    repo
}

/// The names in `dir`, sorted.
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The session directories under `nop_dir/sessions`.
fn sessions_in(nop_dir: &Path) -> Vec<String> {
    match fs::read_dir(nop_dir.join("sessions")) {
        Ok(_) => entries(&nop_dir.join("sessions")),
        Err(_) => Vec::new(),
    }
}

/// `nop args…` in `dir` with HOME set to `home` and the model at `server`.
fn nop_at(dir: &Path, home: &Path, server: &MockServer, args: &[&str]) -> Output {
    let mut cmd = assert_cmd::Command::cargo_bin("nop").expect("nop binary");
    cmd.current_dir(dir)
        .env_clear()
        .env("HOME", home)
        .envs(model_env(server, "openai"))
        .args(args)
        .output()
        .expect("run nop")
}

fn ok(out: Output) -> Output {
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout {}\nstderr {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn run_without_init_answers_creates_only_sessions_logs_and_checkpoints_and_stays_out_of_git_status()
{
    let repo = bare_git_repo();
    let server = MockServer::start(vec![
        openai::reply_text("hello from the built-in coder"),
        openai::reply_text("second answer"),
    ]);
    let first = ok(repo
        .nop_model(&server, "openai")
        .args(["run", "say hello"])
        .output()
        .expect("run"));
    assert!(
        String::from_utf8_lossy(&first.stdout).contains("hello from the built-in coder"),
        "{}",
        String::from_utf8_lossy(&first.stdout)
    );
    let said = stderr(&first);
    assert_eq!(
        said.matches(NOTE).count(),
        1,
        "the note, exactly once: {said}"
    );
    assert!(
        said.contains(
            "nop: using the built-in configuration; sessions go to .nop/sessions (run `nop init` to customise)"
        ),
        "{said}"
    );

    let nop_dir = repo.path().join(".nop");
    assert_eq!(entries(&nop_dir), ["checkpoints", "logs", "sessions"]);
    // What nop writes on its own is in the repository's exclude file, which the agent cannot
    // write (all of .git is read-only to it), not in a .gitignore of its own.
    let exclude = fs::read_to_string(repo.path().join(".git/info/exclude")).expect("exclude");
    assert!(exclude.contains("/.nop/sessions/"), "{exclude}");
    assert_eq!(entries(repo.path()), [".git", ".nop", "README.md"]);
    assert_eq!(sessions_in(&nop_dir).len(), 1);

    // The built-in agents.yml and coder prompt made the system prompt.
    let requests = server.requests();
    let system = requests[0].body["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let coder = include_str!("../../.nop/.system/agents/coder.md");
    assert!(system.starts_with(coder.trim_end()), "{system}");

    // A second run says nothing and adds nothing but its session.
    let second = ok(repo
        .nop_model(&server, "openai")
        .args(["run", "again"])
        .output()
        .expect("run"));
    assert!(!stderr(&second).contains(NOTE), "{}", stderr(&second));
    assert_eq!(entries(&nop_dir), ["checkpoints", "logs", "sessions"]);
    assert_eq!(sessions_in(&nop_dir).len(), 2);
    // git never sees .nop/.
    let status = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=all"])
        .current_dir(repo.path())
        .output()
        .expect("git status");
    assert_eq!(String::from_utf8_lossy(&status.stdout), "?? README.md\n");
    // Whatever the user does with git next, .nop/ is as if it were not there.
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(["-c", "user.name=u", "-c", "user.email=u@example.com"])
            .args(args)
            .current_dir(repo.path())
            .output()
            .expect("git");
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    git(&["add", "-A"]);
    git(&["commit", "-qm", "all"]);
    assert_eq!(git(&["ls-files"]), "README.md\n");
    fs::write(repo.path().join("README.md"), "changed\n").expect("write");
    git(&["stash", "-u"]);
    git(&["stash", "pop"]);
    git(&["clean", "-fdq"]);
    assert_eq!(sessions_in(&nop_dir).len(), 2);
}

/// Every command that works on a repository works without `nop init`, on the built-in files.
#[test]
fn repository_commands_work_without_init() {
    let repo = bare_git_repo();
    let out = repo.nop().args(["sessions", "list"]).output().expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stderr(&out).matches(NOTE).count(), 1, "{}", stderr(&out));

    let shown = repo.run(&["config", "show"]);
    assert!(shown.contains("agent.default"), "{shown}");
    let checked = repo.run(&["permissions", "check"]);
    assert!(
        checked.contains("ok       .nop/.permissions/agent-default.yml (built in: no such file)"),
        "{checked}"
    );
    assert!(!checked.contains("problem"), "{checked}");
    let explain = |path: &str| {
        let out = repo
            .nop()
            .args(["permissions", "explain", "--agent", "coder", "--path", path])
            .args(["--access", "write"])
            .output()
            .expect("run");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let denied = explain(".nop/config.yml");
    assert!(denied.starts_with("deny"), "{denied}");
    // The rule that allows it is named as the built-in default, not as a file.
    let allowed = explain("src/main.rs");
    assert!(
        allowed.starts_with("allow")
            && allowed.contains("built-in default")
            && allowed.contains(".nop/.permissions/agent-default.yml:"),
        "{allowed}"
    );
    let id = repo.new_session();
    let listed = repo.run(&["sessions", "list"]);
    assert!(listed.contains(&id), "{listed}");
    assert_eq!(entries(&repo.path().join(".nop")), ["logs", "sessions"]);
}

/// `nop init` in HOME, then a git repository beneath it: the repository is the root (sessions
/// land in its `.nop/`, never in HOME's), from its root and from a subdirectory; `nop init` from
/// that subdirectory customises the repository root.
#[test]
fn a_home_initialised_above_a_git_repository_is_not_its_root() {
    let home = Repo::new(); // `nop init` ran in it; it is also the HOME nop is given
    let project = home.path().join("src/project");
    git_init(&project);
    fs::create_dir_all(project.join("lib/deep")).expect("mkdir");
    let server = MockServer::start(vec![openai::reply_text("one"), openai::reply_text("two")]);

    let first = ok(nop_at(&project, home.path(), &server, &["run", "hi"]));
    assert!(stderr(&first).contains(NOTE), "{}", stderr(&first));
    let from_deep = ok(nop_at(
        &project.join("lib/deep"),
        home.path(),
        &server,
        &["run", "hi again"],
    ));
    assert!(!stderr(&from_deep).contains(NOTE), "{}", stderr(&from_deep));
    assert_eq!(sessions_in(&project.join(".nop")).len(), 2);
    assert_eq!(sessions_in(&home.path().join(".nop")), Vec::<String>::new());
    assert!(!project.join("lib/deep/.nop").exists());

    let out = ok(nop_at(
        &project.join("lib"),
        home.path(),
        &server,
        &["init"],
    ));
    assert!(project.join(".nop/config.yml").is_file());
    assert!(
        !project.join("lib/.nop").exists(),
        "init wrote into the root"
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("created  ")
            && project.join(".nop/sessions").is_dir(),
        "init adds its files beside the first run's sessions: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    // HOME itself still works as an initialised root when nop runs there.
    let sessions = home.run(&["sessions", "list", "--json"]);
    assert_eq!(sessions.trim(), "[]");
}

/// Outside git the working directory is the root (HOME's `.nop/` above it is passed over), and
/// a directory initialised with `nop init` is the root of those beneath it.
#[test]
fn outside_git_the_root_is_the_working_directory() {
    let home = Repo::new();
    let downloads = home.path().join("downloads");
    fs::create_dir_all(&downloads).expect("mkdir");
    let server = MockServer::start(vec![openai::reply_text("one"), openai::reply_text("two")]);
    let out = ok(nop_at(&downloads, home.path(), &server, &["run", "hi"]));
    assert!(stderr(&out).contains(NOTE), "{}", stderr(&out));
    assert_eq!(sessions_in(&downloads.join(".nop")).len(), 1);
    assert_eq!(sessions_in(&home.path().join(".nop")), Vec::<String>::new());

    let notes = home.path().join("notes");
    fs::create_dir_all(notes.join("drafts")).expect("mkdir");
    ok(nop_at(&notes, home.path(), &server, &["init"]));
    let out = ok(nop_at(
        &notes.join("drafts"),
        home.path(),
        &server,
        &["run", "hi"],
    ));
    assert!(!stderr(&out).contains(NOTE), "{}", stderr(&out));
    assert_eq!(sessions_in(&notes.join(".nop")).len(), 1);
    assert!(!notes.join("drafts/.nop").exists());
}

/// An agent in a repository without `.nop/` tries to give itself rules, reach outside the
/// repository and read what the defaults hide, through the file tools and through the shell:
/// all of it is refused exactly as under the defaults `nop init` installs, and ordinary work
/// still runs.
#[test]
fn without_init_the_agent_is_confined_by_the_shipped_defaults() {
    // The namespace view (this machine's default) and the Landlock-only mapping.
    for namespaces in ["auto", "off"] {
        hostile_agent_without_init(namespaces);
    }
    // The advisors' own shipped files hold too, not the wider agent-default.yml.
    let repo = bare_git_repo();
    let explain = |agent: &str, what: &[&str]| {
        let out = repo
            .nop()
            .args(["permissions", "explain", "--agent", agent])
            .args(what)
            .output()
            .expect("run");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    for agent in [
        "retry-advisor",
        "consistency-checker",
        "compression-advisor",
        "summarizer",
        "splitter",
    ] {
        let read = explain(agent, &["--path", "README.md", "--access", "read"]);
        assert!(read.starts_with("deny"), "{agent}: {read}");
        let shell = explain(agent, &["--tool", "shell"]);
        assert!(shell.starts_with("deny"), "{agent}: {shell}");
    }
}

fn hostile_agent_without_init(namespaces: &str) {
    let repo = bare_git_repo();
    fs::create_dir_all(repo.path().join("work")).expect("mkdir");
    let outside = repo_dir();
    fs::write(outside.path().join("secret.txt"), "hunter2\n").expect("write");
    let outside_file = outside.path().join("planted.txt");
    let outside_secret = outside.path().join("secret.txt");
    let planted_rules =
        "tools:\n  allowed: [\"*\"]\nfile-access:\n  - pattern: \"/**\"\n    access: read\n";
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[
            (
                "c1",
                "write-file",
                json!({"path": ".nop/.permissions/agent-default.yml", "content": planted_rules}),
            ),
            (
                "c2",
                "write-file",
                json!({"path": ".nop/config.yml", "content": "sandbox: off\n"}),
            ),
            (
                "c3",
                "write-file",
                json!({"path": outside_file.display().to_string(), "content": "x"}),
            ),
            (
                "c4",
                "read-file",
                json!({"path": outside_secret.display().to_string()}),
            ),
            (
                "c5",
                "shell",
                json!({"command": format!(
                    "mkdir -p .nop/.permissions && printf '{}' > .nop/.permissions/agent-default.yml",
                    planted_rules.replace('\n', "\\n")
                )}),
            ),
            (
                "c6",
                "shell",
                json!({"command": "echo 'sandbox: off' > .nop/config.yml"}),
            ),
            (
                "c7",
                "shell",
                json!({"command": format!("echo x > {}", outside_file.display())}),
            ),
            (
                "c8",
                "shell",
                json!({"command": "rm -rf .nop/sessions .nop/.gitignore"}),
            ),
            (
                "c9",
                "shell",
                json!({"command": "echo ok > work/made.txt && mkdir -p work/sub && echo more >> README.md && cat work/made.txt"}),
            ),
        ]),
        openai::reply_text("done"),
    ]);
    let out = repo
        .nop_model(&server, "openai")
        .args([
            "--set",
            "sandbox=required",
            "--set",
            &format!("shell.namespaces={namespaces}"),
            "run",
            "--output-format",
            "json",
            "take over",
        ])
        .output()
        .expect("run");
    let result: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&out)));
    assert_eq!(out.status.code(), Some(0), "{result}");
    let results = server.results_of(&["c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8", "c9"]);
    for (i, r) in results[..4].iter().enumerate() {
        assert!(
            r.contains("PermissionDenied"),
            "file tool call c{} should be refused: {r}",
            i + 1
        );
    }
    assert!(!results[3].contains("hunter2"), "{}", results[3]);
    let sandboxed = nop::sandbox::support().filesystem == nop::sandbox::Enforcement::Full;
    if sandboxed {
        for (i, r) in results[4..8].iter().enumerate() {
            assert!(
                !r.starts_with("exit code: 0"),
                "shell call c{} should fail: {r}",
                i + 5
            );
        }
        assert!(
            results[8].starts_with("exit code: 0"),
            "{namespaces}: ordinary work must still run: {}",
            results[8]
        );
        assert!(repo.path().join("work/made.txt").is_file());
        assert_eq!(
            fs::read_to_string(repo.path().join("README.md")).expect("read"),
            "# project\nmore\n"
        );
    } else {
        for r in &results[4..] {
            assert!(r.contains("SandboxUnavailable"), "{r}");
        }
    }
    // Nothing planted, nothing removed.
    let nop_dir = repo.path().join(".nop");
    assert_eq!(entries(&nop_dir), ["checkpoints", "logs", "sessions"]);
    assert_eq!(sessions_in(&nop_dir).len(), 1);
    assert!(!outside_file.exists());
}

/// A permission file that exists but is broken stops a run before the model is asked, also in a
/// repository that is otherwise on the built-in configuration (no config.yml, no agents.yml).
#[test]
fn a_broken_permission_file_fails_closed_without_init() {
    for (file, text) in [
        ("agent-default.yml", "tools: [\n"),
        (
            "agent-coder.yml",
            "file-access:\n  - pattern: \"**\"\n    access: sometimes\n",
        ),
        ("agent-default.yml", "# only a comment\n"),
    ] {
        let repo = bare_git_repo();
        let dir: PathBuf = repo.path().join(".nop/.permissions");
        fs::create_dir_all(&dir).expect("mkdir");
        fs::write(dir.join(file), text).expect("write");
        let server = MockServer::start(vec![openai::reply_text("should not be asked")]);
        let out = repo
            .nop_model(&server, "openai")
            .args(["run", "hi"])
            .output()
            .expect("run");
        assert_ne!(out.status.code(), Some(0), "{file}: {text:?}");
        assert!(
            stderr(&out).contains(&dir.join(file).display().to_string()),
            "the error names the file: {}",
            stderr(&out)
        );
        assert!(server.requests().is_empty(), "{file}: the model was asked");
        // The session is written while the rules are read: the refused run removes it.
        let sessions: Vec<String> = fs::read_dir(repo.path().join(".nop/sessions"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with('.'))
            .collect();
        assert!(
            sessions.is_empty(),
            "{file}: a session was left: {sessions:?}"
        );
        let checked = repo
            .nop()
            .args(["permissions", "check"])
            .output()
            .expect("run");
        assert_ne!(checked.status.code(), Some(0));
    }
}
