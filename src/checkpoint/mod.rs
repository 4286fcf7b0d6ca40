//! File checkpoints: the state of the working tree the agent can write, recorded before and
//! after each run in a shadow git store under `.nop/checkpoints/`, so `nop undo`, `nop rewind`
//! and `nop fork --worktree` can put files back whoever changed them (write-file, edit-file or
//! the shell).
//!
//! The store is a bare git directory of its own with a private index: git's object format and
//! plumbing (`add -A`, `write-tree`, `diff-tree`, `cat-file`), run with the repository's
//! directory as work tree; files are put back by nop itself (`put_back.rs`), git only reading.
//! The user's git index, branches, stash and config are never touched: the store reads the
//! repository's objects as alternates (so files git already holds cost no space; what a
//! checkpoint names is copied in, `pin.rs`) and its list of tracked files, nothing else. Git's system and global configuration are
//! not read, and `info/attributes` turns off every filter and line-ending conversion, so a file
//! comes back byte for byte (an LFS file as its content, a CRLF file with its CRLFs).
//!
//! What is recorded: every file git would see in the repository (`.gitignore`d ones not, `.nop/`
//! not), and files the repository tracks even when ignored. A new untracked file over
//! `checkpoints.max_file_mb` is left out, and so is everything in a nested repository.
//!
//! Recording (`record.rs`) looks at the disk once, in process (`scan.rs`: the private index's stat
//! data and the last checkpoint's directories), and runs git only for what changed; a process
//! that keeps a [`Watch`] (the interactive session) starts a run that changed nothing from the
//! last tree without looking at all (`watch.rs`).

mod check;
mod ignored;
mod isolation;
mod objects;
mod pin;
mod put_back;
mod record;
mod restore;
mod scan;
mod tree;
mod watch;
mod worktree;

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

pub use check::Damage;
pub use isolation::{Ended, Isolated, isolate, left_behind};
pub use put_back::set_notice as set_restore_notice;
pub use restore::{
    Restored, Rewind, RewindMode, Skipped, TurnRewind, Undo, rewind, rewind_turn, undo_turn,
};
pub use watch::Watch;
pub use worktree::{WorktreeFork, fork_worktree};

/// Failures of the checkpoint store.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("file checkpoints need git, which could not be run: {0}")]
    NoGit(std::io::Error),
    #[error("git {command} failed in the checkpoint store {dir}: {stderr}")]
    Git {
        command: String,
        dir: PathBuf,
        stderr: String,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the checkpoint store {0} stayed locked by another nop for 60 s")]
    Busy(PathBuf),
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Session(#[from] crate::session::SessionError),
}

type Result<T> = std::result::Result<T, CheckpointError>;

/// How long a record or restore waits for another nop's use of the store (the `Busy` error
/// says it).
const LOCK_WAIT: Duration = Duration::from_secs(60);

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The checkpoint store of one repository root.
#[derive(Debug, Clone)]
pub struct Checkpoints {
    root: PathBuf,
    dir: PathBuf,
    max_file_bytes: u64,
    /// Kept between this process's checkpoints: [`Checkpoints::watched`].
    watch: Option<Watch>,
}

/// The shadow store's own configuration: nothing of the user's applies (no system or global
/// file is read), no hooks, no automatic gc (trees are referenced from session files only), and
/// a smaller index that is quicker to rewrite (path compression, no trailing checksum).
const STORE_CONFIG: &str = "[core]
\trepositoryformatversion = 0
\tbare = true
\tfilemode = true
\tsymlinks = true
\tautocrlf = false
\tsafecrlf = false
\tfsmonitor = false
\tuntrackedCache = false
\tquotepath = false
\thooksPath = /dev/null
[index]
\tversion = 4
\tskipHash = true
\trecordEndOfIndexEntries = true
\trecordOffsetTable = true
[gc]
\tauto = 0
[maintenance]
\tauto = false
[advice]
\taddEmbeddedRepo = false
";

/// Every file is stored as its bytes: no filter (LFS), no end-of-line or encoding conversion.
/// git's empty tree, which every git knows without having it.
const EMPTY_TREE: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";

const STORE_ATTRIBUTES: &str = "* -text -filter -ident -working-tree-encoding\n";

impl Checkpoints {
    /// The store of the repository at `root`, in `nop_dir/checkpoints`.
    pub fn new(root: &Path, nop_dir: &Path, max_file_mb: f64) -> Checkpoints {
        Checkpoints {
            root: root.to_path_buf(),
            dir: nop_dir.join("checkpoints"),
            max_file_bytes: (max_file_mb.max(0.0) * 1024.0 * 1024.0) as u64,
            watch: None,
        }
    }

    /// The same store, with `watch` kept between its checkpoints (one per process and root:
    /// the interactive session's), so that a run that changed nothing starts from the last
    /// tree without looking at the disk ([`Checkpoints::record_at_start`]).
    pub fn watched(mut self, watch: &Watch) -> Checkpoints {
        self.watch = Some(watch.clone());
        self
    }

    /// Tools ran since the last checkpoint: its watch no longer vouches for it (a command may
    /// change files where no watch hears, through a hard link made to outside the tree).
    pub fn tools_ran(&self) {
        if let Some(watch) = &self.watch {
            watch.lock().distrust();
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The store of another root (a worktree of the same repository), in its own `.nop/`, with
    /// the same size limit.
    pub fn for_root(&self, root: &Path) -> Checkpoints {
        Checkpoints {
            root: root.to_path_buf(),
            dir: root.join(".nop").join("checkpoints"),
            max_file_bytes: self.max_file_bytes,
            watch: None,
        }
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the store is (`.nop/checkpoints/`), for messages.
    pub fn store_dir(&self) -> &Path {
        &self.dir
    }

    /// Writes the bytes of blob `id` of the store to `file`, streamed.
    fn blob_to(&self, id: &str, file: &Path) -> Result<()> {
        let out = std::fs::File::create(file).map_err(io(file))?;
        let status = self
            .command(
                &["cat-file", "blob", id],
                &self.dir.join("index"),
                &self.root,
                false,
            )
            .stdout(Stdio::from(out))
            .stderr(Stdio::null())
            .status()
            .map_err(CheckpointError::NoGit)?;
        if !status.success() {
            return Err(self.failed("cat-file", format!("no blob {id}").as_bytes()));
        }
        Ok(())
    }

    /// Records the working tree as it is now; returns its tree id.
    pub fn record(&self) -> Result<String> {
        self.record_full().map(|r| r.tree)
    }

    /// Whether a directory on the way to `rel` (inside the root) is a symbolic link.
    fn beneath_link(&self, rel: &str) -> bool {
        let mut dir = self.root.clone();
        let Some(parent) = Path::new(rel).parent() else {
            return false;
        };
        parent.components().any(|part| {
            dir.push(part);
            dir.symlink_metadata()
                .is_ok_and(|m| m.file_type().is_symlink())
        })
    }

    /// Takes out of the private index what the rules now leave out (they changed since the
    /// last checkpoint): later checkpoints do not carry it on.
    fn sweep(&self, index: &Path, rules: &Rules) -> Result<()> {
        let listed = self.git(&["ls-files", "-z"], index, None)?;
        let gone: BTreeSet<String> = split_z(&listed)
            .into_iter()
            .filter(|p| rules.excluded(p))
            .collect();
        self.remove_from_index(index, &gone)
    }

    /// Takes `paths` out of `index` (nothing to do when there are none).
    fn remove_from_index(&self, index: &Path, paths: &BTreeSet<String>) -> Result<()> {
        if !paths.is_empty() {
            self.git(
                &["update-index", "--force-remove", "-z", "--stdin"],
                index,
                Some(&nul_list(paths)),
            )?;
        }
        Ok(())
    }

    /// The paths whose content or mode differs between trees `from` and `to`.
    pub fn changes(&self, from: &str, to: &str) -> Result<Vec<String>> {
        let out = self.git(
            &[
                "diff-tree",
                "-r",
                "-z",
                "--name-only",
                "--no-renames",
                from,
                to,
            ],
            &self.dir.join("index"),
            None,
        )?;
        Ok(split_z(&out))
    }

    /// The paths of `tree` (files and links), with their modes and object ids.
    pub fn entries(&self, tree: &str) -> Result<std::collections::BTreeMap<String, String>> {
        let out = self.git(
            &["ls-tree", "-r", "-z", "--full-tree", tree],
            &self.dir.join("index"),
            None,
        )?;
        Ok(split_z(&out)
            .into_iter()
            .filter_map(|line| {
                let (meta, path) = line.split_once('\t')?;
                Some((path.to_string(), meta.to_string()))
            })
            .collect())
    }

    /// Writes the files of `tree` into `dir` (a new worktree), as the checkpoint held it: those
    /// `policy` (the forked session's agent's rules, which the worktree gets too) lets the agent
    /// read, judged at the same place under the root (a file its rules keep read-only is part of
    /// the project and comes along; one they deny since the checkpoint was taken does not).
    /// Returns the paths left out.
    pub fn materialize(
        &self,
        tree: &str,
        dir: &Path,
        policy: &crate::permissions::Policy,
    ) -> Result<Vec<String>> {
        let entries = self.entries(tree)?;
        let (write, skipped): (BTreeSet<&String>, BTreeSet<&String>) =
            entries.keys().partition(|path| {
                policy
                    .check_resolved(&self.root.join(path), crate::permissions::Access::Read)
                    .is_allowed()
            });
        let wanted = put_back::wants(&entries, write);
        self.put_back(tree, dir, &wanted)?;
        Ok(skipped.into_iter().cloned().collect())
    }

    /// Writes every file of `commit` into `dir` (a new worktree) as a restore does: verified and
    /// whole, by nop itself, git only reading (none of the repository's filters, hooks or
    /// configuration; nothing of git's left writing if nop is killed).
    pub(crate) fn checkout_commit(&self, commit: &str, dir: &Path) -> Result<()> {
        let entries = self.entries(commit)?;
        let wanted = put_back::wants(&entries, entries.keys());
        self.put_back(commit, dir, &wanted)
    }

    /// Holds the store's lock (nop's one lock helper, [`crate::session::lock_file`]); git's own
    /// `index.lock` would make a second nop fail, not wait.
    fn lock(&self) -> Result<std::fs::File> {
        use crate::session::{LockKind, SessionError, Waited};
        std::fs::create_dir_all(&self.dir).map_err(io(&self.dir))?;
        let path = self.dir.join("nop.lock");
        let what = self.dir.display().to_string();
        match crate::session::lock_file(&path, LockKind::Exclusive, LOCK_WAIT, &what) {
            Ok(file) => Ok(file),
            Err(Waited::TimedOut { .. }) => Err(CheckpointError::Busy(self.dir.clone())),
            Err(Waited::Failed(SessionError::Io { path, source })) => {
                Err(CheckpointError::Io { path, source })
            }
            Err(Waited::Failed(e)) => Err(e.into()),
        }
    }

    /// Creates the store on first use: a bare git directory, its configuration, the attributes
    /// that keep files byte for byte, and the repository's objects as alternates.
    fn ensure_store(&self) -> Result<()> {
        if self.dir.join("HEAD").exists() {
            // A store made by an older nop gets this one's configuration.
            return self.write_if_changed(&self.dir.join("config"), STORE_CONFIG);
        }
        let out = Command::new("git")
            .args(["init", "--bare", "-q"])
            .arg(&self.dir)
            .env_clear()
            .envs(base_env())
            .output()
            .map_err(CheckpointError::NoGit)?;
        if !out.status.success() {
            return Err(self.failed("init", &out.stderr));
        }
        let write = |name: &str, text: &str| {
            let path = self.dir.join(name);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(io(parent))?;
            }
            std::fs::write(&path, text).map_err(io(&path))
        };
        write("config", STORE_CONFIG)?;
        write("info/attributes", STORE_ATTRIBUTES)?;
        // The repository's own .gitignore never sees this directory (it may predate it).
        write(".gitignore", "*\n")?;
        if let Some(objects) = crate::gitdir::find(&self.root)
            .map(|g| g.common.join("objects"))
            .filter(|objects| objects.is_dir())
        {
            write(
                "objects/info/alternates",
                &format!("{}\n", objects.display()),
            )?;
        }
        Ok(())
    }

    /// The first checkpoint starts from the files the repository tracks, ignored or not, so a
    /// fork's worktree gets every one of them (nothing the rules leave out, no nested
    /// repository). The repository's index is read by the store's own git, so nothing of the
    /// repository's configuration applies.
    fn seed(&self, index: &Path, rules: &Rules) -> Result<()> {
        let Some(repo) = crate::gitdir::find(&self.root) else {
            return Ok(()); // not a git repository: nothing is tracked
        };
        let out = Command::new("git")
            .args(["ls-files", "-z", "-s"])
            .current_dir(&repo.top)
            .env_clear()
            .envs(base_env())
            .env("GIT_DIR", &self.dir)
            .env("GIT_WORK_TREE", &repo.top)
            .env("GIT_INDEX_FILE", repo.gitdir.join("index"))
            .stderr(Stdio::null())
            .output()
            .map_err(CheckpointError::NoGit)?;
        if !out.status.success() {
            return Ok(()); // no index yet, or one this git cannot read alone
        }
        let prefix = self
            .root
            .strip_prefix(&repo.top)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut paths = BTreeSet::new();
        for line in split_z(&out.stdout) {
            let Some((meta, path)) = line.split_once('\t') else {
                continue;
            };
            let path = match prefix.as_str() {
                "" => path,
                p => match path.strip_prefix(p).and_then(|r| r.strip_prefix('/')) {
                    Some(rest) => rest,
                    None => continue,
                },
            };
            if meta.starts_with("160000") || rules.excluded(path) {
                continue;
            }
            if self.root.join(path).symlink_metadata().is_ok() {
                paths.insert(path.to_string());
            }
        }
        if paths.is_empty() {
            return Ok(());
        }
        // update-index takes paths as they are (no pathspec matching, which is quadratic).
        let update = self.run_git(
            &["update-index", "--add", "-z", "--stdin"],
            index,
            &self.root,
            Some(&nul_list(&paths)),
        )?;
        if !update.status.success() {
            tracing::warn!(
                op = "checkpoint",
                result = "partial",
                "seeding from the tracked files: {}",
                String::from_utf8_lossy(&update.stderr).trim()
            );
        }
        Ok(())
    }

    /// The untracked files left out for their size (still there and still too large), with
    /// the store's exclude file brought up to date: them, `.nop/`, and the repository's own
    /// `info/exclude` (which a separate git directory would not read).
    fn large_files(&self) -> Result<BTreeSet<String>> {
        let large: BTreeSet<String> = std::fs::read_to_string(self.dir.join("large-files"))
            .unwrap_or_default()
            .lines()
            .filter(|p| self.is_large(p))
            .map(str::to_string)
            .collect();
        self.write_if_changed(&self.dir.join("info/exclude"), &self.exclude_text(&large))?;
        Ok(large)
    }

    fn save_large_files(&self, large: &BTreeSet<String>) -> Result<()> {
        let text: String = large.iter().map(|p| format!("{p}\n")).collect();
        self.write_if_changed(&self.dir.join("large-files"), &text)?;
        self.write_if_changed(&self.dir.join("info/exclude"), &self.exclude_text(large))
    }

    fn is_large(&self, path: &str) -> bool {
        self.root
            .join(path)
            .symlink_metadata()
            .is_ok_and(|m| m.is_file() && m.len() > self.max_file_bytes)
    }

    /// The repository's own `info/exclude`: its git directory is the parent of the objects
    /// written as alternates.
    fn own_exclude(&self) -> Option<PathBuf> {
        let line = std::fs::read_to_string(self.dir.join("objects/info/alternates")).ok()?;
        Some(Path::new(line.trim()).parent()?.join("info/exclude"))
    }

    /// The files outside the root that steer git's listing of untracked files in the store:
    /// its exclude file, the repository's, and the user's `~/.config/git/ignore` (read by git
    /// even without a global configuration).
    fn steering_files(&self) -> Vec<PathBuf> {
        let mut files = self.exclude_files();
        files.extend(self.own_exclude());
        files
    }

    /// The exclude files outside the tree the store's git reads, the first to say first: the
    /// store's `info/exclude` (which holds the repository's), then the user's.
    fn exclude_files(&self) -> Vec<PathBuf> {
        let mut files = vec![self.dir.join("info/exclude")];
        files.extend(global_ignore());
        files
    }

    fn exclude_text(&self, large: &BTreeSet<String>) -> String {
        let mut text = String::from("# written by nop\n/.nop/\n");
        if let Some(own) = self
            .own_exclude()
            .and_then(|p| std::fs::read_to_string(p).ok())
        {
            text.push_str(&own);
            text.push('\n');
        }
        for path in large {
            text.push('/');
            text.push_str(&escape_pattern(path));
            text.push('\n');
        }
        text
    }

    /// Rewrites a file only when its text changes (git's untracked cache keys on the exclude
    /// file's content).
    fn write_if_changed(&self, path: &Path, text: &str) -> Result<()> {
        if std::fs::read_to_string(path).is_ok_and(|old| old == text) {
            return Ok(());
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        std::fs::write(path, text).map_err(io(path))
    }

    fn failed(&self, command: &str, stderr: &[u8]) -> CheckpointError {
        CheckpointError::Git {
            command: command.to_string(),
            dir: self.dir.clone(),
            stderr: String::from_utf8_lossy(stderr).trim().to_string(),
        }
    }

    /// Runs git on the store with the root as work tree; its standard output.
    fn git(&self, args: &[&str], index: &Path, stdin: Option<&[u8]>) -> Result<Vec<u8>> {
        self.git_in(args, index, &self.root, stdin)
    }

    fn git_in(
        &self,
        args: &[&str],
        index: &Path,
        work_tree: &Path,
        stdin: Option<&[u8]>,
    ) -> Result<Vec<u8>> {
        let out = self.run_git(args, index, work_tree, stdin)?;
        if !out.status.success() {
            return Err(self.failed(args.first().copied().unwrap_or("git"), &out.stderr));
        }
        Ok(out.stdout)
    }

    fn run_git(
        &self,
        args: &[&str],
        index: &Path,
        work_tree: &Path,
        stdin: Option<&[u8]>,
    ) -> Result<std::process::Output> {
        let mut child = self
            .command(args, index, work_tree, stdin.is_some())
            .spawn()
            .map_err(CheckpointError::NoGit)?;
        let writer = match (stdin, child.stdin.take()) {
            (Some(bytes), Some(mut pipe)) => {
                let bytes = bytes.to_vec();
                Some(std::thread::spawn(move || pipe.write_all(&bytes)))
            }
            _ => None,
        };
        let out = child.wait_with_output().map_err(io(&self.dir))?;
        if let Some(writer) = writer {
            let _ = writer.join();
        }
        Ok(out)
    }

    /// Starts git on the store (root as work tree) without waiting: [`Checkpoints::finish`].
    fn spawn_git(&self, args: &[&str], index: &Path) -> Result<std::process::Child> {
        self.command(args, index, &self.root, false)
            .spawn()
            .map_err(CheckpointError::NoGit)
    }

    fn finish(&self, child: std::process::Child, command: &str) -> Result<Vec<u8>> {
        let out = child.wait_with_output().map_err(io(&self.dir))?;
        if !out.status.success() {
            return Err(self.failed(command, &out.stderr));
        }
        Ok(out.stdout)
    }

    fn command(&self, args: &[&str], index: &Path, work_tree: &Path, stdin: bool) -> Command {
        #[cfg(test)]
        GIT_RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut command = Command::new("git");
        command
            .args(args)
            .current_dir(work_tree)
            .env_clear()
            .envs(base_env())
            .env("GIT_DIR", &self.dir)
            .env("GIT_WORK_TREE", work_tree)
            .env("GIT_INDEX_FILE", index)
            .env("GIT_LITERAL_PATHSPECS", "1")
            // Attributes come from the store's own `info/attributes` only, never from the
            // tree's `.gitattributes`: they change nothing there, and a named pipe planted
            // under that name would keep git waiting for ever on every file it hashes or
            // writes (git 2.40 and later; an older git ignores this).
            .env("GIT_ATTR_SOURCE", EMPTY_TREE)
            .stdin(if stdin { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    }
}

impl crate::session::Checkpointer for Checkpoints {
    fn checkpoint(&self) -> Option<String> {
        match self.record() {
            Ok(tree) => Some(tree),
            Err(e) => {
                tracing::warn!(
                    op = "checkpoint",
                    result = "error",
                    "the snapshot has no file checkpoint: {e}"
                );
                None
            }
        }
    }
}

/// The environment of every git nop runs for checkpoints: PATH and HOME to find and run git,
/// no system or global configuration, no prompts, and none of the caller's `GIT_*` variables.
/// The user's exclude file as the store's git reads it: `~/.config/git/ignore` (no global
/// configuration and no `XDG_CONFIG_HOME` reach that git, so nothing else).
fn global_ignore() -> Option<PathBuf> {
    let home = base_env().into_iter().find(|(k, _)| k == "HOME")?;
    Some(Path::new(&home.1).join(".config/git/ignore"))
}

fn base_env() -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = ["PATH", "HOME"]
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
        .collect();
    env.extend(
        [
            ("GIT_CONFIG_NOSYSTEM", "1"),
            ("GIT_CONFIG_GLOBAL", "/dev/null"),
            ("GIT_TERMINAL_PROMPT", "0"),
            ("LC_ALL", "C"),
            // What the store's git writes is on disk before a checkpoint names it.
            ("GIT_CONFIG_COUNT", "1"),
            ("GIT_CONFIG_KEY_0", "core.fsync"),
            ("GIT_CONFIG_VALUE_0", "objects,derived-metadata,reference"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    env
}

/// The files the git repository `root` is in tracks that `policy` denies reading, relative to
/// `root`: a deny rule cannot hide what git history holds (`nop sandbox check` names them).
/// The repository's index is read by a git with no configuration of the repository's.
pub fn tracked_but_denied(root: &Path, policy: &crate::permissions::Policy) -> Vec<String> {
    let Some(repo) = crate::gitdir::find(root) else {
        return Vec::new();
    };
    let Ok(scratch) = tempfile::tempdir() else {
        return Vec::new();
    };
    let init = Command::new("git")
        .args(["init", "--bare", "-q"])
        .arg(scratch.path())
        .env_clear()
        .envs(base_env())
        .output();
    if !init.is_ok_and(|o| o.status.success()) {
        return Vec::new();
    }
    let Ok(out) = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(&repo.top)
        .env_clear()
        .envs(base_env())
        .env("GIT_DIR", scratch.path())
        .env("GIT_WORK_TREE", &repo.top)
        .env("GIT_INDEX_FILE", repo.gitdir.join("index"))
        .stderr(Stdio::null())
        .output()
    else {
        return Vec::new();
    };
    split_z(&out.stdout)
        .into_iter()
        .filter_map(|p| {
            let full = repo.top.join(&p);
            let rel = full.strip_prefix(root).ok()?.to_string_lossy().into_owned();
            (!policy
                .check_resolved(&full, crate::permissions::Access::Read)
                .is_allowed()
                && !rel.starts_with(".nop/"))
            .then_some(rel)
        })
        .collect()
}

/// What one checkpoint found: [`Checkpoints::record_full`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    pub tree: String,
    /// Git repositories in the tree (a directory with its own `.git`, `.` for the root's),
    /// relative to the root: git commands run in them read their configuration, which whoever
    /// made them wrote.
    pub nested: Vec<String>,
    /// What it took.
    pub how: How,
}

/// What a checkpoint took: what is logged, what benchmarks and tests look at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    /// Nothing changed since this process's last checkpoint, by its watch: nothing was looked
    /// at, no git ran.
    Watched,
    /// Nothing changed since the last checkpoint, by the stat data kept from it: no git ran.
    Unchanged,
    /// git listed and hashed only what changed.
    Changes,
    /// git compared and listed everything (the first checkpoint, new rules, or no usable
    /// record of the last one).
    Everything,
}

/// What checkpoints leave out, by nop's rules: `.nop/`, `.git/`, and every path a rule of any
/// agent denies reading (read afresh for each checkpoint, parsed again only when the permission
/// files changed: [`Rules::current`]).
#[derive(Clone)]
struct Rules {
    root: PathBuf,
    policy: crate::permissions::Policy,
    /// The permission files' text, to know when a sweep of the index is due.
    fingerprint: String,
}

impl Rules {
    /// The rules of `root` as its permission files say now (`fingerprint`, from
    /// [`Rules::fingerprint`] at this checkpoint's start): the ones this process last parsed
    /// for it when the files are the same (their fingerprint covers everything the rules are
    /// read from), else parsed afresh.
    fn current(root: &Path, fingerprint: &str) -> std::sync::Arc<Rules> {
        use std::sync::{Arc, Mutex, OnceLock};
        static PARSED: OnceLock<Mutex<Vec<Arc<Rules>>>> = OnceLock::new();
        let fingerprint = format!("{}\n", fingerprint.trim());
        let parsed = PARSED.get_or_init(Default::default);
        if let Ok(parsed) = parsed.lock()
            && let Some(rules) = parsed
                .iter()
                .find(|r| r.root == root && r.fingerprint == fingerprint)
        {
            return Arc::clone(rules);
        }
        let rules = Arc::new(Rules::load(root, fingerprint));
        if let Ok(mut parsed) = parsed.lock() {
            parsed.retain(|r| r.root != root);
            parsed.push(Arc::clone(&rules));
        }
        rules
    }

    fn load(root: &Path, fingerprint: String) -> Rules {
        let (policy, errors) = crate::permissions::load_every_agent(root);
        for e in errors {
            tracing::warn!(op = "checkpoint", result = "partial", "{e}");
        }
        Rules {
            root: root.to_path_buf(),
            policy,
            fingerprint,
        }
    }

    /// The permission files' text, hashed: whether the rules changed since a checkpoint.
    fn fingerprint(root: &Path) -> String {
        let mut hasher = std::hash::DefaultHasher::new();
        let dir = root.join(".nop/.permissions");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .collect();
        files.sort();
        for file in files {
            std::hash::Hash::hash(&file, &mut hasher);
            std::hash::Hash::hash(&std::fs::read(&file).unwrap_or_default(), &mut hasher);
        }
        format!("rules {:016x}\n", std::hash::Hasher::finish(&hasher))
    }

    /// Whether `rel` (relative to the root, as git lists it) stays out of checkpoints.
    fn excluded(&self, rel: &str) -> bool {
        let first = rel.split('/').next().unwrap_or(rel);
        first == ".nop" || first == ".git" || self.policy.denied_to_some_agent(&self.root.join(rel))
    }
}

fn nul_list(paths: &BTreeSet<String>) -> Vec<u8> {
    let mut list = Vec::new();
    for path in paths {
        list.extend_from_slice(path.as_bytes());
        list.push(0);
    }
    list
}

/// Whether `path` is strictly beneath the directory `dir` (both relative to the root).
fn beneath(path: &str, dir: &str) -> bool {
    path.len() > dir.len() && path.starts_with(dir) && path.as_bytes()[dir.len()] == b'/'
}

fn split_z(bytes: &[u8]) -> Vec<String> {
    bytes
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

/// A path as a gitignore pattern that matches only itself.
fn escape_pattern(path: &str) -> String {
    let mut out = String::new();
    for c in path.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\' | '!' | '#' | ' ') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A bare git store under /var/tmp (where a user's repository is, not /tmp): its temporary
/// directory, and the store in it (`store`).
#[cfg(test)]
pub(crate) fn bare_store() -> (tempfile::TempDir, PathBuf) {
    std::fs::create_dir_all("/var/tmp/nop-tests").expect("/var/tmp/nop-tests");
    let dir = tempfile::tempdir_in("/var/tmp/nop-tests").expect("temp");
    let store = dir.path().join("store");
    let out = Command::new("git")
        .args(["init", "-q", "--bare"])
        .arg(&store)
        .output()
        .expect("git");
    assert!(out.status.success(), "{out:?}");
    (dir, store)
}

/// How many git commands the store started: tests that count them hold [`serial`].
#[cfg(test)]
pub(crate) static GIT_RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Taken by this module's tests that start processes, and by those that lock and unlock a run
/// lock in quick succession: a process started between two locks holds the first one's
/// descriptor until it execs, and the second one would find the session running.
#[cfg(test)]
pub(crate) fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn store() -> (tempfile::TempDir, Checkpoints) {
        let dir = tempfile::tempdir().expect("temp");
        let cp = Checkpoints::new(dir.path(), &dir.path().join(".nop"), 0.001);
        (dir, cp)
    }

    #[test]
    fn the_store_lock_is_the_sessions_flock_and_released_on_drop() {
        let _serial = serial();
        use crate::session::{LockKind, Waited, lock_file};
        let (_dir, cp) = store();
        let held = cp.lock().expect("lock");
        let path = cp.dir.join("nop.lock");
        let other = lock_file(&path, LockKind::Exclusive, Duration::ZERO, "store");
        assert!(matches!(other, Err(Waited::TimedOut { .. })), "{other:?}");
        drop(held);
        assert!(lock_file(&path, LockKind::Exclusive, Duration::ZERO, "store").is_ok());
    }

    #[test]
    fn a_checkpoint_sees_every_change_and_leaves_out_nop_and_large_new_files() {
        let _serial = serial();
        let (dir, cp) = store();
        let root = dir.path();
        std::fs::write(root.join("a.txt"), "one\r\n").expect("write");
        std::fs::create_dir_all(root.join(".nop/sessions")).expect("mkdir");
        std::fs::write(root.join(".nop/sessions/x"), "session").expect("write");
        std::fs::write(root.join("big.bin"), vec![b'x'; 4096]).expect("write");
        let first = cp.record().expect("record");
        let entries = cp.entries(&first).expect("entries");
        assert_eq!(entries.keys().collect::<Vec<_>>(), ["a.txt"]);
        std::fs::write(root.join("a.txt"), "two\r\n").expect("write");
        std::fs::write(root.join("b.txt"), "new").expect("write");
        let second = cp.record().expect("record");
        assert_eq!(
            cp.changes(&first, &second).expect("diff"),
            ["a.txt", "b.txt"]
        );
        assert_eq!(
            cp.record().expect("record"),
            second,
            "nothing changed, same tree"
        );
    }

    #[test]
    fn patterns_of_odd_names_match_only_themselves() {
        assert_eq!(escape_pattern("a b/[x]*.txt"), "a\\ b/\\[x\\]\\*.txt");
    }
}
