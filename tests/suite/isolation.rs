//! `isolation: worktree` (agents.yml): a subagent that works in a git worktree of its own, on a
//! new branch, from its caller's current files; nop commits its changes there (with none of the
//! repository's hooks, filters or signing) and the caller's model is told the branch, the
//! worktree and the files. Every test runs `nop` against the mock model, in a git repository
//! under /var/tmp.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::support::mock::{MockResponse, MockServer, RecordedRequest, openai};
use crate::support::{Repo, repo_dir};

/// A git repository with one commit and `.nop/`, whose agents.yml adds `worker`
/// (`isolation: worktree`); worktrees nop leaves beside it are removed with it.
struct Setup {
    repo: Repo,
    home: tempfile::TempDir,
}

impl Setup {
    fn new() -> Setup {
        let setup = Setup {
            repo: Repo::bare(),
            home: repo_dir(),
        };
        setup.git(&["init", "-q"]);
        fs::write(setup.root().join("README.md"), "# project\n").unwrap();
        setup.git(&["add", "-A"]);
        setup.git(&["commit", "-qm", "start"]);
        setup.repo.run(&["init"]);
        add_worker(&setup.repo);
        setup
    }

    fn root(&self) -> &Path {
        self.repo.path()
    }

    /// The user's git, as the user runs it: their HOME, nothing of nop's.
    fn git_in(&self, dir: &Path, args: &[&str]) -> String {
        let out = crate::support::user_git(dir, self.home.path(), args);
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn git(&self, args: &[&str]) -> String {
        self.git_in(self.root(), args)
    }

    /// `nop run PROMPT` against `server`: the final message.
    fn run(&self, server: &MockServer, prompt: &str) -> String {
        let out = self
            .repo
            .nop_model(server, "openai")
            .env("HOME", self.home.path())
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .args(["run", "--output-format", "json", prompt])
            .output()
            .unwrap();
        crate::support::assert_ok(&out);
        let result: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(result["status"], "completed", "{result}");
        result["final_message"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// `nop trust --yes`, with the environment of [`Setup::run`]: what the user does after
    /// writing rules by hand.
    fn trust(&self) {
        let out = self
            .repo
            .nop()
            .env("HOME", self.home.path())
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .args(["trust", "--yes"])
            .output()
            .unwrap();
        crate::support::assert_ok(&out);
    }

    /// The branches nop made.
    fn nop_branches(&self) -> Vec<String> {
        self.git(&["branch", "--list", "nop/*", "--format=%(refname:short)"])
            .lines()
            .map(str::to_string)
            .collect()
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        // The worktrees nop made live beside the repository: `<repo>-<agent>-<session>`.
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

fn add_worker(repo: &Repo) {
    let agents = repo.path().join(".nop/agents.yml");
    let mut text = fs::read_to_string(&agents).unwrap();
    text.push_str(
        "\n  - name: worker\n    description: works in a worktree of its own\n    isolation: worktree\n",
    );
    fs::write(&agents, text).unwrap();
}

/// A model that answers each session by its first user message: the i-th request of that
/// session (counted by the tool results it carries) gets `script[task][i]`; past the end, the
/// tool results joined.
fn server(scripts: HashMap<String, Vec<MockResponse>>) -> MockServer {
    MockServer::start_with(Box::new(move |request: &RecordedRequest| {
        let first = request
            .user_messages()
            .into_iter()
            .next()
            .unwrap_or_default();
        let results = request.tool_results();
        let turn = request.body["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m["role"] == "assistant")
            .count();
        match scripts.get(&first).and_then(|s| s.get(turn)) {
            Some(reply) => reply.clone(),
            None => openai::reply_text(&results.join(" | ")),
        }
    }))
}

fn call_workers(tasks: &[&str]) -> MockResponse {
    let calls: Vec<(String, Value)> = tasks
        .iter()
        .enumerate()
        .map(|(i, t)| (format!("w{i}"), json!({"agent": "worker", "arguments": t})))
        .collect();
    openai::reply_tool_calls(
        &calls
            .iter()
            .map(|(id, args)| (id.as_str(), "call-agent", args.clone()))
            .collect::<Vec<_>>(),
    )
}

fn shell(command: &str) -> MockResponse {
    openai::reply_tool_calls(&[("s", "shell", json!({ "command": command }))])
}

/// The branch and worktree an answer names ("changes on branch B (worktree P): …").
fn branch_and_worktree(answer: &str) -> (String, PathBuf) {
    let rest = answer
        .split("changes on branch ")
        .nth(1)
        .unwrap_or_else(|| panic!("no branch named: {answer}"));
    let (branch, rest) = rest.split_once(" (worktree ").unwrap();
    let (path, _) = rest.split_once("): ").unwrap();
    (branch.to_string(), PathBuf::from(path))
}

#[test]
fn an_isolated_subagent_works_in_its_own_worktree_and_its_changes_are_committed_on_its_branch() {
    let s = Setup::new();
    // The caller's uncommitted work: the subagent starts from it.
    fs::write(s.root().join("notes.txt"), "caller's notes\n").unwrap();
    let server = server(HashMap::from([
        ("delegate".to_string(), vec![call_workers(&["do the work"])]),
        (
            "do the work".to_string(),
            vec![shell(
                "cat notes.txt && pwd && echo made > a.txt && mkdir -p src && echo b > src/b.txt && rm README.md",
            )],
        ),
    ]));
    let answer = s.run(&server, "delegate");
    assert!(answer.contains("caller's notes"), "{answer}");
    let (branch, worktree) = branch_and_worktree(&answer);
    assert!(branch.starts_with("nop/worker-"), "{branch}");
    // The files it changed are named; the caller's notes, which it only read, are not.
    assert!(
        answer.contains(&format!(
            "(worktree {}): README.md, a.txt, src/b.txt",
            worktree.display()
        )),
        "{answer}"
    );
    // Its shell worked in the worktree, beside the repository.
    assert!(
        answer.contains(&format!("{}\n", worktree.display())),
        "{answer}"
    );
    assert_eq!(worktree.parent(), s.root().parent());
    // The caller's tree is as it was.
    assert!(!s.root().join("a.txt").exists());
    assert!(!s.root().join("src").exists());
    assert!(s.root().join("README.md").exists());
    assert!(s.git(&["status", "--porcelain"]).contains("?? notes.txt"));
    // The worktree has the subagent's files, and `git status` there shows what it does in the
    // caller's tree (the caller's notes it started from, `.nop/`): the branch holds the rest.
    assert_eq!(
        fs::read_to_string(worktree.join("a.txt")).unwrap(),
        "made\n"
    );
    let status = ["status", "--porcelain", "--untracked-files=all"];
    assert_eq!(s.git_in(&worktree, &status), s.git(&status));
    // The branch: HEAD plus the subagent's changes, by nop.
    assert_eq!(
        s.git(&["log", "-1", "--format=%an <%ae>|%P", &branch])
            .trim(),
        format!(
            "nop <nop@localhost>|{}",
            s.git(&["rev-parse", "HEAD"]).trim()
        )
    );
    assert_eq!(
        s.git(&["diff", "--name-status", "HEAD", &branch]),
        "D\tREADME.md\nA\ta.txt\nA\tsrc/b.txt\n"
    );
    // What the user then does with it.
    s.git(&["merge", "-q", "--ff-only", &branch]);
    assert!(s.root().join("a.txt").exists());
}

#[test]
fn an_isolated_subagent_that_changes_nothing_leaves_no_worktree_or_branch() {
    let s = Setup::new();
    let server = server(HashMap::from([
        ("delegate".to_string(), vec![call_workers(&["look only"])]),
        ("look only".to_string(), vec![shell("cat README.md && pwd")]),
    ]));
    let answer = s.run(&server, "delegate");
    assert!(
        answer.contains("no changes (its worktree and branch were removed)"),
        "{answer}"
    );
    let worktree = answer
        .lines()
        .find(|l| l.contains("-worker-"))
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("pwd: {answer}"));
    assert!(!worktree.exists(), "{}", worktree.display());
    assert_eq!(s.nop_branches(), Vec::<String>::new());
    assert_eq!(
        s.git(&["worktree", "list", "--porcelain"])
            .matches("worktree ")
            .count(),
        1
    );
}

#[test]
fn two_isolated_subagents_in_one_turn_each_get_their_own_worktree_and_branch() {
    let s = Setup::new();
    let server = server(HashMap::from([
        (
            "split".to_string(),
            vec![call_workers(&["write one", "write two"])],
        ),
        (
            "write one".to_string(),
            vec![shell("echo 1 > one.txt && echo 1 > shared.txt")],
        ),
        (
            "write two".to_string(),
            vec![shell("echo 2 > two.txt && echo 2 > shared.txt")],
        ),
    ]));
    let answer = s.run(&server, "split");
    let parts: Vec<&str> = answer.split(" | ").collect();
    assert_eq!(parts.len(), 2, "{answer}");
    let (one, one_tree) = branch_and_worktree(parts[0]);
    let (two, two_tree) = branch_and_worktree(parts[1]);
    assert_ne!(one, two);
    assert_ne!(one_tree, two_tree);
    let mut branches = s.nop_branches();
    branches.sort();
    let mut expected = vec![one.clone(), two.clone()];
    expected.sort();
    assert_eq!(branches, expected);
    // No interference: each branch and worktree holds its own writes only.
    assert_eq!(
        s.git(&["diff", "--name-only", "HEAD", &one]),
        "one.txt\nshared.txt\n"
    );
    assert_eq!(
        s.git(&["diff", "--name-only", "HEAD", &two]),
        "shared.txt\ntwo.txt\n"
    );
    assert_eq!(s.git(&["show", &format!("{one}:shared.txt")]), "1\n");
    assert_eq!(s.git(&["show", &format!("{two}:shared.txt")]), "2\n");
    assert!(!one_tree.join("two.txt").exists());
    assert!(!two_tree.join("one.txt").exists());
    assert!(!s.root().join("shared.txt").exists());
}

fn write(id: &str, path: &str) -> MockResponse {
    openai::reply_tool_calls(&[(id, "write-file", json!({"path": path, "content": "x\n"}))])
}

#[test]
fn the_rules_of_an_isolated_subagent_and_of_its_callers_hold_in_its_worktree() {
    let s = Setup::new();
    let rules = s.root().join(".nop/.permissions");
    // The worker's own rules keep `own/` read-only; its caller's (coder, under agent-default)
    // keep `caller/` read-only, which narrows the worker's.
    fs::write(
        rules.join("agent-worker.yml"),
        "agent: worker\ntools:\n  allowed: [\"*\"]\n  denied: []\nfile-access:\n  - pattern: \"own/**\"\n    access: read-only\n  - pattern: \"**\"\n    access: read\n",
    )
    .unwrap();
    for dir in ["own", "caller"] {
        fs::create_dir(s.root().join(dir)).unwrap();
        fs::write(s.root().join(dir).join("keep.txt"), "kept\n").unwrap();
    }
    s.git(&["add", "own", "caller"]);
    s.git(&["commit", "-qm", "protected directories"]);
    let default = fs::read_to_string(rules.join("agent-default.yml")).unwrap();
    fs::write(
        rules.join("agent-default.yml"),
        default.replace(
            "file-access:\n",
            "file-access:\n  - pattern: \"caller/**\"\n    access: read-only\n",
        ),
    )
    .unwrap();
    s.trust();
    let server = server(HashMap::from([
        ("delegate".to_string(), vec![call_workers(&["try"])]),
        (
            "try".to_string(),
            vec![
                write("a", "own/x.txt"),
                write("b", "caller/x.txt"),
                shell("echo y > caller/y.txt"),
                write("c", "free.txt"),
            ],
        ),
    ]));
    let answer = s.run(&server, "delegate");
    let worker_results = server
        .requests()
        .iter()
        .rfind(|r| r.user_messages().first().is_some_and(|u| u == "try"))
        .map(|r| r.tool_results())
        .unwrap_or_default();
    assert_eq!(worker_results.len(), 4, "{worker_results:?}");
    assert!(
        worker_results[0].contains("`own/**` is read-only"),
        "{}",
        worker_results[0]
    );
    assert!(
        worker_results[1].contains("`caller/**` is read-only"),
        "{}",
        worker_results[1]
    );
    assert!(
        worker_results[2].contains("exit code: 1"),
        "{}",
        worker_results[2]
    );
    let (branch, worktree) = branch_and_worktree(&answer);
    assert!(answer.contains("): free.txt:\n"), "{answer}");
    assert_eq!(
        s.git(&["diff", "--name-only", "HEAD", &branch]),
        "free.txt\n"
    );
    assert!(!worktree.join("caller/x.txt").exists() && !worktree.join("own/x.txt").exists());
}

#[test]
fn a_subagent_an_isolated_one_calls_works_in_the_same_worktree() {
    let s = Setup::new();
    let server = server(HashMap::from([
        ("delegate".to_string(), vec![call_workers(&["hand on"])]),
        (
            "hand on".to_string(),
            vec![openai::reply_tool_calls(&[(
                "c",
                "call-agent",
                json!({"agent": "coder", "arguments": "write it"}),
            )])],
        ),
        ("write it".to_string(), vec![shell("pwd && echo z > z.txt")]),
    ]));
    let answer = s.run(&server, "delegate");
    let (branch, worktree) = branch_and_worktree(&answer);
    assert!(
        answer.contains(&format!("{}\n", worktree.display())),
        "{answer}"
    );
    assert!(!s.root().join("z.txt").exists());
    assert_eq!(s.git(&["diff", "--name-only", "HEAD", &branch]), "z.txt\n");
}

#[test]
fn isolation_outside_a_git_repository_is_an_error_the_model_reads() {
    let repo = Repo::new();
    add_worker(&repo);
    let server = server(HashMap::from([
        ("delegate".to_string(), vec![call_workers(&["do it"])]),
        ("do it".to_string(), vec![shell("echo x > x.txt")]),
    ]));
    let result = repo.model_json(&server, &["run", "--output-format", "json", "delegate"]);
    assert_eq!(result["status"], "completed", "{result}");
    let answer = result["final_message"].as_str().unwrap_or_default();
    assert!(
        answer.contains("did not start: `isolation: worktree` needs a git repository"),
        "{answer}"
    );
    // The subagent never ran.
    assert!(
        !server
            .requests()
            .iter()
            .any(|r| r.user_messages().first().is_some_and(|u| u == "do it"))
    );
    assert!(!repo.path().join("x.txt").exists());
}

#[test]
#[expect(clippy::too_many_lines, reason = "a debt: listed in AGENTS.md")]
fn hostile_an_isolated_subagent_cannot_plant_git_metadata_and_nops_commit_runs_no_hook_filter_or_signing()
 {
    let s = Setup::new();
    let canaries = repo_dir();
    let canary = |n: &str| canaries.path().join(n);
    // What the repository has that runs code: hooks for everything a commit, a ref update or a
    // checkout calls, a filter, fsmonitor and signing. The user's own git would run them; nop's
    // must not.
    let hooks = s.root().join(".git/hooks");
    for hook in [
        "pre-commit",
        "commit-msg",
        "post-commit",
        "reference-transaction",
        "post-checkout",
        "post-index-change",
    ] {
        let path = hooks.join(hook);
        fs::write(
            &path,
            format!("#!/bin/sh\ntouch {}\n", canary(hook).display()),
        )
        .unwrap();
        Command::new("chmod").arg("+x").arg(&path).status().unwrap();
    }
    let script = |name: &str| {
        let path = canaries.path().join(format!("{name}.sh"));
        fs::write(
            &path,
            format!("#!/bin/sh\ntouch {}\ncat\n", canary(name).display()),
        )
        .unwrap();
        Command::new("chmod").arg("+x").arg(&path).status().unwrap();
        path.display().to_string()
    };
    s.git(&["config", "filter.evil.clean", &script("filter")]);
    s.git(&["config", "core.fsmonitor", &script("fsmonitor")]);
    s.git(&["config", "commit.gpgSign", "true"]);
    s.git(&["config", "gpg.program", &script("gpg")]);
    // The subagent tries to plant hooks and configuration through its worktree's `.git` pointer
    // file and the git directories it names, then writes a file (and an attribute that would run
    // the filter) so nop commits.
    let gitdir = "$(sed -n 's/^gitdir: //p' .git)";
    let attempts = [
        format!(
            "printf '[core]\\n\\thooksPath = {}\\n' >> \"{gitdir}/config.worktree\"",
            canaries.path().display()
        ),
        format!(
            "printf '#!/bin/sh\\ntouch {}\\n' > \"{gitdir}/../../hooks/pre-merge-commit\"",
            canary("planted").display()
        ),
        format!("printf '../../../evil\\n' > \"{gitdir}/commondir\""),
        "printf 'gitdir: /var/tmp/evil\\n' > .git".to_string(),
    ];
    let mut worker: Vec<MockResponse> = attempts.iter().map(|c| shell(c)).collect();
    worker.push(openai::reply_tool_calls(&[(
        "w",
        "write-file",
        json!({"path": ".git", "content": "gitdir: /var/tmp/evil\n"}),
    )]));
    worker.push(shell(
        "echo '* filter=evil' > .gitattributes && echo data > data.txt",
    ));
    let server = server(HashMap::from([
        ("delegate".to_string(), vec![call_workers(&["plant"])]),
        ("plant".to_string(), worker),
    ]));
    let answer = s.run(&server, "delegate");
    let (branch, worktree) = branch_and_worktree(&answer);
    // Every planting attempt was refused (the git directories are written through a layer whose
    // configuration, hooks and pointers nop never keeps); the pointer file is as git wrote it.
    let worker_results = server
        .requests()
        .iter()
        .rfind(|r| r.user_messages().first().is_some_and(|u| u == "plant"))
        .map(|r| r.tool_results())
        .unwrap_or_default();
    assert_eq!(worker_results.len(), 6, "{worker_results:?}");
    for result in &worker_results[..5] {
        assert!(
            result.contains("Read-only file system")
                || result.contains("Permission denied")
                || result.contains("read-only")
                || result.contains("denied")
                || result.contains("not kept in .git"),
            "{result}"
        );
    }
    let pointer = fs::read_to_string(worktree.join(".git")).unwrap();
    assert!(
        pointer.starts_with("gitdir: ") && pointer.contains("/.git/worktrees/"),
        "{pointer}"
    );
    assert!(!hooks.join("pre-merge-commit").exists());
    // nop committed the files, as bytes, and nothing of the repository's ran.
    assert_eq!(
        s.git(&["diff", "--name-only", "HEAD", &branch]),
        ".gitattributes\ndata.txt\n"
    );
    assert_eq!(s.git(&["show", &format!("{branch}:data.txt")]), "data\n");
    let mut fired: Vec<String> = fs::read_dir(canaries.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with(".sh"))
        .collect();
    fired.sort();
    assert_eq!(fired, Vec::<String>::new());
    // The canaries are real: the user's own git in the worktree runs them.
    fs::write(worktree.join("new.txt"), "new\n").unwrap();
    s.git_in(&worktree, &["add", "new.txt"]);
    let commit = Command::new("git")
        .args([
            "-c",
            "user.name=u",
            "-c",
            "user.email=u@example.com",
            "commit",
            "-qm",
            "user",
        ])
        .current_dir(&worktree)
        .env_clear()
        .env("HOME", s.home.path())
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .output()
        .unwrap();
    assert!(!commit.status.success(), "the fake gpg signs nothing");
    for name in ["filter", "fsmonitor", "pre-commit", "gpg"] {
        assert!(canary(name).exists(), "{name} did not run for the user");
    }
}

#[test]
fn isolation_where_nops_root_is_a_subdirectory_works_there_in_a_worktree_of_the_whole_repository() {
    let s = Setup::new();
    // nop's root is the nearest `.nop/config.yml` inside the repository: here `sub/`.
    let sub = Repo {
        dir: tempfile::TempDir::new_in(s.root()).unwrap(),
        state: repo_dir(),
    };
    fs::create_dir(sub.path().join(".nop")).unwrap();
    fs::write(sub.path().join(".nop/config.yml"), "").unwrap();
    // A `.nop/` below the repository's top is the root only once the user trusts it.
    sub.trust();
    sub.run(&["init"]);
    add_worker(&sub);
    // `nop init` kept the config.yml written by hand above (not its template), so what it
    // created is not trusted by it; the user trusts the workspace as it now is.
    sub.trust();
    let server = server(HashMap::from([
        ("delegate".to_string(), vec![call_workers(&["do it"])]),
        ("do it".to_string(), vec![shell("echo x > x.txt")]),
    ]));
    let result = sub.model_json(&server, &["run", "--output-format", "json", "delegate"]);
    let answer = result["final_message"].as_str().unwrap_or_default();
    let (branch, worktree) = branch_and_worktree(answer);
    // The subagent worked where the package is in a worktree of the whole repository, and its
    // file is committed there, under the package's directory.
    let package = sub
        .path()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(worktree.ends_with(&package), "{answer}");
    assert!(worktree.join("x.txt").exists());
    assert!(
        worktree.parent().unwrap().join("README.md").exists(),
        "{answer}"
    );
    assert_eq!(s.nop_branches(), vec![branch.clone()]);
    assert_eq!(
        s.git(&["diff", "--name-only", "HEAD", &branch]).trim(),
        format!("{package}/x.txt")
    );
}
