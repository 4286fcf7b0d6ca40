//! `isolation: worktree` (agents.yml): a subagent that works in a git worktree of its own, on a
//! new branch at the caller's `HEAD`, holding the caller's files as they are when it starts (a
//! checkpoint of the caller's tree, so it sees the caller's uncommitted work). When it ends, nop
//! commits what the subagent changed on that branch, with plumbing only: the changed files'
//! bytes come from the worktree's own checkpoint store (no filter of the repository runs), the
//! commit is written by `commit-tree` and `update-ref` under the same isolated git as
//! `fork --worktree` (no hook, no configuration that runs code, no signing). A worktree whose
//! subagent changed nothing is removed with its branch.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::worktree::{
    add_worktree_at, beside, head_commit, remove_worktree, set_index, user_git_with,
};
use super::{CheckpointError, Checkpoints, Result};

/// One process adds and removes worktrees one at a time: concurrent subagents would otherwise
/// race in git's `worktrees/` administration.
static WORKTREES: Mutex<()> = Mutex::new(());

/// At most this many changed files are named in [`Ended::summary`].
const NAMED_FILES: usize = 50;

/// A subagent's worktree, from [`isolate`] to [`Isolated::finish`].
#[derive(Debug, Clone)]
pub struct Isolated {
    /// The subagent's root, canonical: the worktree, or where the caller's root is in it (a
    /// package of a monorepo).
    pub path: PathBuf,
    /// The worktree, canonical.
    worktree: PathBuf,
    /// Where the caller's root is below the repository's top (empty at the top).
    prefix: PathBuf,
    /// The caller's store, where the worktree is named while the subagent works.
    marks: Option<PathBuf>,
    pub branch: String,
    /// The caller's root, where the repository's git is run.
    root: PathBuf,
    /// The commit the branch starts from (the caller's `HEAD`).
    base: String,
    /// The worktree's own checkpoint store, and the files as the subagent found them.
    store: Checkpoints,
    start: String,
    /// Files of the caller's tree the subagent's rules do not let it read: left out.
    pub skipped: Vec<String>,
}

/// How an isolated subagent's worktree ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// Its changes are committed on `branch`; the worktree stays for the user.
    Committed {
        branch: String,
        path: PathBuf,
        commit: String,
        files: Vec<String>,
    },
    /// Nothing changed: the worktree and its branch are gone.
    Unchanged,
}

impl Ended {
    /// What the caller's model reads of it.
    pub fn summary(&self) -> String {
        match self {
            Ended::Committed {
                branch,
                path,
                files,
                ..
            } => {
                let mut named = files
                    .iter()
                    .take(NAMED_FILES)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ");
                if files.len() > NAMED_FILES {
                    named.push_str(&format!(" and {} more", files.len() - NAMED_FILES));
                }
                format!(
                    "changes on branch {branch} (worktree {}): {named}",
                    path.display()
                )
            }
            Ended::Unchanged => "no changes (its worktree and branch were removed)".to_string(),
        }
    }
}

/// A new worktree for a subagent named `name` (branch `nop/<name>`, directory `<root>-<name>`
/// beside the caller's root `caller.root()`), holding the caller's files as they are now that
/// `policy` (the subagent's rules) lets it read. Refused, with nothing left behind, outside a
/// git repository with a commit, or where the root is not the repository's top.
pub fn isolate(
    caller: &Checkpoints,
    name: &str,
    policy: &crate::permissions::Policy,
) -> Result<Isolated> {
    let root = caller.root().to_path_buf();
    let refused = |why: String| {
        CheckpointError::Refused(format!(
            "`isolation: worktree` needs {why}; {} is not one",
            root.display()
        ))
    };
    let Some(repo) = crate::gitdir::find(&root) else {
        return Err(refused("a git repository".into()));
    };
    // nop's root may be a package of a monorepo: the worktree is the whole repository's, and
    // the subagent works where the package is in it.
    let prefix = root
        .strip_prefix(&repo.top)
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let Some(base) = head_commit(&root)? else {
        return Err(refused("a git repository with at least one commit".into()));
    };
    let tree = caller.record()?;
    let branch = format!("nop/{name}");
    let worktree = beside(&repo.top, name);
    // Until nop commits or removes it, the worktree is named in the caller's store: a nop
    // killed meanwhile leaves it named, and the next run says so (`left_behind`).
    mark(caller, &branch, &worktree);
    let added = {
        let _one = WORKTREES.lock().unwrap_or_else(|e| e.into_inner());
        add_worktree_at(caller, &base, &tree, &branch, &worktree, &prefix, policy)
    };
    let (worktree, skipped) = added.inspect_err(|_| unmark(caller.dir(), &branch))?;
    let path = if prefix.as_os_str().is_empty() {
        worktree.clone()
    } else {
        worktree.join(&prefix)
    };
    let store = caller.for_root(&path);
    match store.record() {
        Ok(start) => Ok(Isolated {
            path,
            worktree,
            prefix,
            marks: Some(caller.dir().to_path_buf()),
            branch,
            root,
            base,
            store,
            start,
            skipped,
        }),
        Err(e) => {
            let _one = WORKTREES.lock().unwrap_or_else(|e| e.into_inner());
            remove_worktree(&root, &worktree, &branch);
            unmark(caller.dir(), &branch);
            Err(e)
        }
    }
}

impl Isolated {
    /// Commits what changed in the worktree since [`isolate`] on its branch (author and
    /// committer nop, `message`), or removes the worktree and branch when nothing did.
    #[expect(clippy::too_many_lines, reason = "a debt: listed in AGENTS.md")]
    pub fn finish(&self, message: &str) -> Result<Ended> {
        let end = self.store.record()?;
        let changed = self.store.changes(&self.start, &end)?;
        // The subagent may have committed on its branch itself (its git works in the
        // worktree): nop's commit goes on top of what the branch holds now.
        let head = self
            .git(
                &[
                    "rev-parse",
                    "--verify",
                    &format!("refs/heads/{}", self.branch),
                ],
                &[],
                None,
            )?
            .trim()
            .to_string();
        let committed_itself = head != self.base;
        if changed.is_empty() && !committed_itself {
            self.remove();
            return Ok(Ended::Unchanged);
        }
        let entries = self.store.entries(&end)?;
        let scratch = tempfile::Builder::new()
            .prefix("isolation-")
            .tempdir_in(self.store.dir())
            .map_err(super::io(self.store.dir()))?;
        // The new blobs go from the worktree's store into the repository as bytes: written to
        // scratch files, hashed with no filter.
        let mut lines: Vec<u8> = Vec::new();
        let mut blobs: Vec<(String, PathBuf)> = Vec::new();
        for path in &changed {
            match entries
                .get(path)
                .map(|meta| meta.split(' ').collect::<Vec<_>>())
            {
                Some(meta) if meta.len() == 3 && meta[1] == "blob" => {
                    let file = scratch.path().join(format!("blob-{}", blobs.len()));
                    self.store.blob_to(meta[2], &file)?;
                    blobs.push((meta[2].to_string(), file));
                    let path = self.in_repository(path);
                    lines
                        .extend_from_slice(format!("{} {}\t{path}\0", meta[0], meta[2]).as_bytes());
                }
                // Not in the tree (or not a file: a nested repository is never recorded).
                Some(_) => continue,
                None => lines.extend_from_slice(
                    format!(
                        "0 0000000000000000000000000000000000000000\t{}\0",
                        self.in_repository(path)
                    )
                    .as_bytes(),
                ),
            }
        }
        if !blobs.is_empty() {
            let list: String = blobs
                .iter()
                .map(|(_, f)| format!("{}\n", f.display()))
                .collect();
            let hashed = self.git(
                &["hash-object", "-w", "--no-filters", "--stdin-paths"],
                &[],
                Some(list.as_bytes()),
            )?;
            let ids: Vec<&str> = hashed.lines().collect();
            let expected: Vec<&str> = blobs.iter().map(|(id, _)| id.as_str()).collect();
            if ids != expected {
                return Err(CheckpointError::Refused(format!(
                    "the repository at {} stores objects differently from nop's checkpoint store (another hash?); the subagent's files are left in {}",
                    self.root.display(),
                    self.worktree.display()
                )));
            }
        }
        let index = scratch.path().join("index");
        let with_index: [(&str, &Path); 1] = [("GIT_INDEX_FILE", &index)];
        self.git(&["read-tree", &head], &with_index, None)?;
        self.git(
            &["update-index", "-z", "--index-info"],
            &with_index,
            Some(&lines),
        )?;
        let tree = self.git(&["write-tree"], &with_index, None)?;
        let head_tree = self.git(&["rev-parse", &format!("{head}^{{tree}}")], &[], None)?;
        if tree.trim() == head_tree.trim() {
            if !committed_itself {
                // Changed back to what the branch already holds.
                self.remove();
                return Ok(Ended::Unchanged);
            }
            // Everything it changed, it committed.
            self.done();
            return Ok(Ended::Committed {
                branch: self.branch.clone(),
                path: self.path.clone(),
                commit: head,
                files: changed,
            });
        }
        let nop = Path::new("nop");
        let email = Path::new("nop@localhost");
        let author: [(&str, &Path); 4] = [
            ("GIT_AUTHOR_NAME", nop),
            ("GIT_AUTHOR_EMAIL", email),
            ("GIT_COMMITTER_NAME", nop),
            ("GIT_COMMITTER_EMAIL", email),
        ];
        let commit = self.git(
            &[
                "commit-tree",
                "--no-gpg-sign",
                tree.trim(),
                "-p",
                &head,
                "-F",
                "-",
            ],
            &author,
            Some(message.as_bytes()),
        )?;
        let commit = commit.trim().to_string();
        self.git(
            &[
                "update-ref",
                "-m",
                "nop: isolated subagent",
                &format!("refs/heads/{}", self.branch),
                &commit,
                &head,
            ],
            &[],
            None,
        )?;
        // `git status` in the worktree then shows nothing the branch does not hold.
        set_index(&self.store, &self.worktree, &commit)?;
        self.done();
        Ok(Ended::Committed {
            branch: self.branch.clone(),
            path: self.path.clone(),
            commit,
            files: changed,
        })
    }

    /// Removes the worktree and its branch.
    pub fn remove(&self) {
        let _one = WORKTREES.lock().unwrap_or_else(|e| e.into_inner());
        remove_worktree(&self.root, &self.worktree, &self.branch);
        self.done();
    }

    /// The worktree is the user's now (committed) or gone: no longer named as in progress.
    fn done(&self) {
        if let Some(caller) = self.marks.as_deref() {
            unmark(caller, &self.branch);
        }
    }

    /// `path` (relative to the subagent's root) as the repository names it.
    fn in_repository(&self, path: &str) -> String {
        if self.prefix.as_os_str().is_empty() {
            path.to_string()
        } else {
            format!("{}/{path}", self.prefix.to_string_lossy())
        }
    }

    /// The repository's isolated git in the caller's root; its standard output.
    fn git(&self, args: &[&str], env: &[(&str, &Path)], stdin: Option<&[u8]>) -> Result<String> {
        let out = user_git_with(&self.root, args, env, stdin)?;
        if !out.status.success() {
            return Err(CheckpointError::Git {
                command: args.first().copied().unwrap_or("git").to_string(),
                dir: self.root.clone(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// Where worktrees of subagents at work are named, in the caller's store.
fn marks_dir(store: &Path) -> PathBuf {
    store.join("isolated")
}

fn mark_file(store: &Path, branch: &str) -> PathBuf {
    marks_dir(store).join(format!("{}.json", branch.replace('/', "_")))
}

/// Names `worktree` (on `branch`) as a subagent's at work, by this process.
fn mark(caller: &Checkpoints, branch: &str, worktree: &Path) {
    let file = mark_file(caller.dir(), branch);
    let text = serde_json::json!({
        "branch": branch,
        "worktree": worktree,
        "pid": std::process::id(),
    })
    .to_string();
    let written =
        std::fs::create_dir_all(marks_dir(caller.dir())).and_then(|()| std::fs::write(&file, text));
    if let Err(e) = written {
        tracing::warn!(
            op = "isolation",
            "cannot name {} in the store: {e}",
            worktree.display()
        );
    }
}

fn unmark(store: &Path, branch: &str) {
    let _ = std::fs::remove_file(mark_file(store, branch));
}

/// The worktrees and branches of subagents whose nop was killed while they worked, said once
/// each (their names are then dropped): what to look at, and how to remove them.
pub fn left_behind(caller: &Checkpoints) -> Vec<String> {
    let mut said = Vec::new();
    for entry in std::fs::read_dir(marks_dir(caller.dir()))
        .into_iter()
        .flatten()
        .flatten()
    {
        let Some(mark) = crate::capped_file::read(&entry.path(), 64 * 1024)
            .ok()
            .flatten()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        else {
            continue;
        };
        let pid = mark["pid"]
            .as_u64()
            .and_then(|p| i32::try_from(p).ok())
            .unwrap_or(0);
        let alive =
            pid > 0 && nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok();
        if alive {
            continue;
        }
        let (branch, worktree) = (
            mark["branch"].as_str().unwrap_or_default(),
            mark["worktree"].as_str().unwrap_or_default(),
        );
        said.push(format!(
            "a subagent's nop was killed while it worked: its worktree {worktree} (branch \
             {branch}) holds what it did, uncommitted; look at it, then `git worktree remove \
             --force {worktree}` and `git branch -D {branch}` to drop it"
        ));
        let _ = std::fs::remove_file(entry.path());
    }
    said
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_names_the_branch_the_worktree_and_at_most_fifty_files() {
        let files: Vec<String> = (0..52).map(|i| format!("f{i}.txt")).collect();
        let ended = Ended::Committed {
            branch: "nop/w-1".into(),
            path: PathBuf::from("/src/p-w-1"),
            commit: "c".into(),
            files,
        };
        let summary = ended.summary();
        assert!(
            summary
                .starts_with("changes on branch nop/w-1 (worktree /src/p-w-1): f0.txt, f1.txt, "),
            "{summary}"
        );
        assert!(summary.ends_with("f49.txt and 2 more"), "{summary}");
        assert_eq!(
            Ended::Unchanged.summary(),
            "no changes (its worktree and branch were removed)"
        );
    }
}
