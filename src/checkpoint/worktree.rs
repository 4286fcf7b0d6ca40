//! `nop fork ID --snapshot S --worktree [PATH]`: a git worktree on a new branch named after the
//! child session, holding the files as they were at S, with the child session in it, so two
//! forks can run side by side without touching each other or the parent's tree. Its steps (a
//! worktree added and removed, the repository's git run with nothing that runs code) serve
//! `isolation.rs` too.

use std::path::{Path, PathBuf};
use std::process::Command;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{CheckpointError, Checkpoints, Result};
use crate::protocol::SessionFile;
use crate::session::Store;

/// What a fork into a worktree made.
#[derive(Debug, Clone, Serialize)]
pub struct WorktreeFork {
    pub child: SessionFile,
    pub snapshot_id: String,
    pub path: PathBuf,
    pub branch: String,
    /// Files of the snapshot left out: the agent's rules do not let it read them (now).
    pub skipped: Vec<String>,
}

/// What of `.nop/` a worktree does not get: working state, not configuration.
const LOCAL_STATE: &[&str] = &["sessions", "logs", "state", "checkpoints"];

/// Forks session `id` of `store` into a new worktree (see the module doc) at `path` (absolute;
/// default beside the root). Without `snapshot` one is taken now. Nothing is left behind when a
/// step fails.
pub fn fork_worktree(
    checkpoints: &Checkpoints,
    store: &Store,
    id: &str,
    snapshot: Option<&str>,
    path: Option<&Path>,
    now: DateTime<Utc>,
) -> Result<WorktreeFork> {
    let root = checkpoints.root().to_path_buf();
    let Some(head) = head_commit(&root)? else {
        return Err(CheckpointError::Refused(format!(
            "--worktree needs a git repository with at least one commit at {}",
            root.display()
        )));
    };
    let snapshot = match snapshot {
        Some(s) => store.read_snapshot(id, s)?,
        None => {
            let taken = store.snapshot(id, now)?;
            store.read_snapshot(id, &taken)?
        }
    };
    let Some(tree) = snapshot.checkpoint.clone() else {
        return Err(CheckpointError::Refused(format!(
            "snapshot {} has no file checkpoint (taken before nop recorded them, or with checkpoints off); fork without --worktree, or from a newer snapshot",
            snapshot.snapshot_id
        )));
    };
    let child_id = crate::protocol::new_id();
    let branch = format!("nop/{child_id}");
    let path = match path {
        Some(p) if p.is_absolute() => p.to_path_buf(),
        Some(p) => {
            return Err(CheckpointError::Refused(format!(
                "the worktree path {} must be absolute (the caller resolves it)",
                p.display()
            )));
        }
        None => beside(&root, &child_id),
    };
    let agent = store.read_recent(id)?.session.agent;
    let policy = crate::permissions::load_policy(checkpoints.root(), &agent).map_err(|e| {
        CheckpointError::Refused(format!(
            "the rules of agent `{agent}` could not be read ({e})"
        ))
    })?;
    let (path, skipped) = add_worktree(checkpoints, &head, &tree, &branch, &path, &policy)?;
    let target = Store::new(path.join(".nop/sessions"), store.lock_timeout());
    let forked = store.fork_into(
        id,
        Some(&snapshot.snapshot_id),
        now,
        &target,
        Some(&child_id),
    );
    match forked {
        Ok((child, _)) => Ok(WorktreeFork {
            child,
            snapshot_id: snapshot.snapshot_id.clone(),
            path,
            branch,
            skipped,
        }),
        Err(e) => {
            remove_worktree(&root, &path, &branch);
            Err(e.into())
        }
    }
}

/// The commit `HEAD` names in the repository at `root`; `None` where there is none (not a git
/// repository, or no commit yet).
pub(super) fn head_commit(root: &Path) -> Result<Option<String>> {
    let head = user_git(root, &["rev-parse", "--verify", "-q", "HEAD^{commit}"])?;
    Ok(head
        .status
        .success()
        .then(|| String::from_utf8_lossy(&head.stdout).trim().to_string()))
}

/// The default place of a worktree: beside the root, named after it and `suffix`.
pub(super) fn beside(root: &Path, suffix: &str) -> PathBuf {
    let name = root
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "nop".into());
    root.parent()
        .unwrap_or(root)
        .join(format!("{name}-{suffix}"))
}

/// A new worktree of the repository at the checkpoint store's root, at `path`, on a new branch
/// `branch` at commit `head`, holding the files of checkpoint `tree` that `policy` lets the agent
/// read, with `.nop/`'s configuration. Its index is `head`'s, so `git status` there shows the
/// changes against it. Returns the worktree's canonical path and the files left out. Nothing is
/// left behind when a step fails.
pub(super) fn add_worktree(
    checkpoints: &Checkpoints,
    head: &str,
    tree: &str,
    branch: &str,
    path: &Path,
    policy: &crate::permissions::Policy,
) -> Result<(PathBuf, Vec<String>)> {
    add_worktree_at(checkpoints, head, tree, branch, path, Path::new(""), policy)
}

/// [`add_worktree`] for a root `prefix` below the repository's top (a package of a monorepo):
/// the worktree holds `head`'s files, and the checkpoint's beneath `prefix`, with `.nop/`'s
/// configuration there.
pub(super) fn add_worktree_at(
    checkpoints: &Checkpoints,
    head: &str,
    tree: &str,
    branch: &str,
    path: &Path,
    prefix: &Path,
    policy: &crate::permissions::Policy,
) -> Result<(PathBuf, Vec<String>)> {
    let root = checkpoints.root();
    if path.exists() {
        return Err(CheckpointError::Refused(format!(
            "{} exists already; name a new directory for the worktree",
            path.display()
        )));
    }
    let path_text = path.to_string_lossy().into_owned();
    // --no-checkout: the files come from the checkpoint, and no hook of the repository runs.
    let add = user_git(
        root,
        &[
            "worktree",
            "add",
            "--no-checkout",
            "-q",
            "-b",
            branch,
            &path_text,
            head,
        ],
    )?;
    if !add.status.success() {
        return Err(CheckpointError::Git {
            command: "worktree add".into(),
            dir: root.to_path_buf(),
            stderr: String::from_utf8_lossy(&add.stderr).trim().to_string(),
        });
    }
    let made = (|| {
        let path = std::fs::canonicalize(path).map_err(super::io(path))?;
        let at = path.join(prefix);
        if !prefix.as_os_str().is_empty() {
            // The rest of the repository, as its commit has it.
            checkpoints.checkout_commit(head, &path)?;
            std::fs::create_dir_all(&at).map_err(super::io(&at))?;
        }
        let skipped = checkpoints.materialize(tree, &at, policy)?;
        // The worktree's index is its branch's commit, so `git status` there shows the fork's
        // changes against it; written by the store's git (no configuration of the repository),
        // in the format every git reads.
        set_index(checkpoints, &path, head)?;
        copy_configuration(&root.join(".nop"), &at.join(".nop"))?;
        Ok((path, skipped))
    })();
    if made.is_err() {
        remove_worktree(root, path, branch);
    }
    made
}

/// Makes the index of the worktree at `path` hold `commit`'s tree, written by the checkpoint
/// store's git (which reads the repository's objects, none of its configuration).
pub(super) fn set_index(checkpoints: &Checkpoints, path: &Path, commit: &str) -> Result<()> {
    let gitdir = crate::gitdir::at(path).ok_or_else(|| {
        CheckpointError::Refused(format!(
            "{} has no .git after `git worktree add`",
            path.display()
        ))
    })?;
    checkpoints.git_in(
        &[
            "-c",
            "index.version=2",
            "-c",
            "index.skipHash=false",
            "read-tree",
            commit,
        ],
        &gitdir.gitdir.join("index"),
        path,
        None,
    )?;
    Ok(())
}

/// Removes the worktree at `path` and its branch, as far as they exist (best effort: this
/// undoes a step that failed, or ends a worktree that holds nothing).
pub(super) fn remove_worktree(root: &Path, path: &Path, branch: &str) {
    let path_text = path.to_string_lossy().into_owned();
    let _ = user_git(root, &["worktree", "remove", "--force", &path_text]);
    let _ = user_git(root, &["branch", "-D", "-q", branch]);
}

/// The repository's `.nop/` configuration (agents, permissions, prompts, plugins, memory), so
/// the child runs under the same rules; sessions, logs and checkpoints stay with their root.
fn copy_configuration(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).map_err(super::io(to))?;
    if let Ok(entries) = std::fs::read_dir(from) {
        for entry in entries.flatten() {
            let name = entry.file_name();
            if LOCAL_STATE.iter().any(|s| name == *s) {
                continue;
            }
            copy_tree(&entry.path(), &to.join(&name))?;
        }
    }
    for dir in ["sessions", "logs"] {
        let path = to.join(dir);
        std::fs::create_dir_all(&path).map_err(super::io(&path))?;
    }
    let ignore = to.join(".gitignore");
    if !ignore.exists() {
        let text = crate::templates::get(".gitignore").unwrap_or_default();
        std::fs::write(&ignore, text).map_err(super::io(&ignore))?;
    }
    Ok(())
}

fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    let meta = from.symlink_metadata().map_err(super::io(from))?;
    if meta.is_dir() {
        std::fs::create_dir_all(to).map_err(super::io(to))?;
        for entry in std::fs::read_dir(from).map_err(super::io(from))?.flatten() {
            copy_tree(&entry.path(), &to.join(entry.file_name()))?;
        }
    } else if meta.is_file() {
        std::fs::copy(from, to).map_err(super::io(to))?;
    }
    // A symbolic link in .nop/ is not followed into the new tree.
    Ok(())
}

/// git in the user's repository for what only it can do (a worktree and its branch), with
/// nothing that runs code: no system or global configuration, no hooks, no fsmonitor, no
/// automatic maintenance, no pager, and none of the caller's `GIT_*` variables (a hook's
/// `GIT_DIR` would point it elsewhere). `worktree add --no-checkout` writes no file through a
/// filter; the files come from the checkpoint store.
pub(super) fn user_git(dir: &Path, args: &[&str]) -> Result<std::process::Output> {
    user_git_with(dir, args, &[], None)
}

/// [`user_git`] with more environment (`GIT_INDEX_FILE`, the author) and standard input.
pub(super) fn user_git_with(
    dir: &Path,
    args: &[&str],
    env: &[(&str, &Path)],
    stdin: Option<&[u8]>,
) -> Result<std::process::Output> {
    use std::io::Write;
    use std::process::Stdio;
    let mut command = Command::new("git");
    command
        .args(ISOLATED)
        .args(args)
        .current_dir(dir)
        .env_clear()
        .envs(super::base_env())
        .envs(env.iter().copied())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().map_err(CheckpointError::NoGit)?;
    let writer = match (stdin, child.stdin.take()) {
        (Some(bytes), Some(mut pipe)) => {
            let bytes = bytes.to_vec();
            Some(std::thread::spawn(move || pipe.write_all(&bytes)))
        }
        _ => None,
    };
    let out = child.wait_with_output().map_err(super::io(dir))?;
    if let Some(writer) = writer {
        let _ = writer.join();
    }
    Ok(out)
}

/// Settings that beat the repository's own configuration (the command line comes last).
const ISOLATED: &[&str] = &[
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.untrackedCache=false",
    "-c",
    "gc.auto=0",
    "-c",
    "maintenance.auto=false",
    "-c",
    "core.pager=cat",
    "-c",
    "commit.gpgSign=false",
    "-c",
    "core.sshCommand=false",
    "-c",
    "protocol.allow=never",
    "--no-pager",
];
