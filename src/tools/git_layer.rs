//! The agent's git, as a developer uses it: a shell command writes `.git` (and the git
//! directories a `.git` file names) through a copy-on-write layer of its own
//! ([`crate::sandbox::MountKind::Overlay`]), so `git add`, `commit`, `stash`, `checkout -b`,
//! `rebase` and `merge` work inside the sandbox, the user's own hooks included. When the command
//! has ended (its PID namespace is gone: nothing of it still runs), nop applies to the real
//! directory only what git's object and ref model needs, and refuses, names and drops the rest:
//!
//! - applied: `objects/` (new objects only; nothing is deleted there, so history the command
//!   threw away can still be found), `refs/`, `logs/`, `packed-refs`, `index`, `HEAD` and its
//!   siblings (`ORIG_HEAD`, `MERGE_HEAD`, `COMMIT_EDITMSG`…), `rebase-merge/`, `rebase-apply/`,
//!   `sequencer/`, `rr-cache/`;
//! - refused: everything git reads as configuration or as a pointer (`config`, `hooks/`,
//!   `info/`, `commondir`, `gitdir`, `modules/`, `worktrees/`, `objects/info/alternates`…), any
//!   file that is not a regular file, a ref or `HEAD` that does not read as one, and an index
//!   that adds a gitlink (a submodule entry would send the user's git into a repository the
//!   agent made): then nothing of the command's git work is applied.
//!
//! Each file is moved into place whole (rename), objects first and the index and `HEAD` last, so
//! a reader sees the old state or the new one. Commands of one nop process apply one at a time.

use std::path::{Path, PathBuf};

/// Files at the top of a git directory that git's own work writes.
const TOP_FILES: &[&str] = &[
    "HEAD",
    "ORIG_HEAD",
    "FETCH_HEAD",
    "MERGE_HEAD",
    "MERGE_MODE",
    "MERGE_MSG",
    "MERGE_AUTOSTASH",
    "AUTO_MERGE",
    "CHERRY_PICK_HEAD",
    "REVERT_HEAD",
    "REBASE_HEAD",
    "BISECT_HEAD",
    "BISECT_LOG",
    "BISECT_NAMES",
    "BISECT_START",
    "BISECT_EXPECTED_REV",
    "BISECT_ANCESTORS_OK",
    "BISECT_TERMS",
    "COMMIT_EDITMSG",
    "SQUASH_MSG",
    "TAG_EDITMSG",
    "NOTES_EDITMSG",
    "packed-refs",
    "index",
];

/// Directories of a git directory that git's own work writes, with whether what the command
/// deleted there is deleted for real.
const DIRS: &[(&str, bool)] = &[
    ("objects", false),
    ("refs", true),
    ("logs", true),
    ("rebase-merge", true),
    ("rebase-apply", true),
    ("sequencer", true),
    ("rr-cache", true),
];

/// What files of the layer are at most looked at: beyond, nothing is applied.
const MAX_ENTRIES: usize = 200_000;

/// What was done with one command's git layers.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Files moved into place or removed.
    pub changed: usize,
    /// What was not applied, relative to the repository (or absolute), each with why.
    pub refused: Vec<String>,
    /// Why nothing at all was applied, if so.
    pub withheld: Option<String>,
    /// A layer the kernel would not mount (the directory was read-only to the command).
    pub unavailable: Option<String>,
}

impl Applied {
    /// What the model is told, if anything.
    pub fn note(&self) -> Option<String> {
        let mut parts = Vec::new();
        if let Some(why) = &self.unavailable {
            parts.push(format!(
                "sandbox: git could not write through its layer here ({why}), so .git was \
                 read-only to this command; ask to run it outside the sandbox if it must write"
            ));
        }
        if let Some(why) = &self.withheld {
            parts.push(format!(
                "sandbox: none of this command's changes to .git were kept: {why}"
            ));
        }
        if !self.refused.is_empty() {
            parts.push(format!(
                "sandbox: not kept in .git (git reads these as configuration or pointers and runs \
                 them later, outside any sandbox; the user changes them): {}",
                self.refused.join(", ")
            ));
        }
        (!parts.is_empty()).then(|| parts.join("\n"))
    }
}

/// One change the layer asks for.
enum Change {
    /// Move the layer's file at `from` to `to`.
    Put { from: PathBuf, to: PathBuf },
    /// Remove `path` (a file, or a directory with what is in it).
    Remove(PathBuf),
}

/// Applies `layers` (each git directory with its layer, as the view mounted them) after the
/// command has ended; `root` names paths in what is refused. Applies nothing at all when an
/// index would add a gitlink.
pub fn apply(layers: &[(PathBuf, PathBuf)], root: &Path) -> Applied {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut applied = Applied::default();
    let mut changes: Vec<(u8, Change)> = Vec::new();
    for (dir, layer) in layers {
        if let Ok(why) = std::fs::read_to_string(layer.join(crate::sandbox::LAYER_UNAVAILABLE)) {
            applied.unavailable = Some(why.trim().to_string());
            continue;
        }
        let upper = layer.join("upper");
        let mut budget = MAX_ENTRIES;
        if let Err(why) = collect(
            &upper,
            dir,
            Path::new(""),
            &mut changes,
            &mut applied,
            &mut budget,
        ) {
            applied.withheld = Some(why);
            return applied;
        }
        let (old, new) = (dir.join("index"), upper.join("index"));
        if new.is_file() {
            let before = crate::permissions::gitlinks(&old);
            let added: Vec<String> = crate::permissions::gitlinks(&new)
                .into_iter()
                .filter(|l| !before.contains(l))
                .collect();
            if !added.is_empty() {
                applied.withheld = Some(format!(
                    "the index would get a gitlink ({}): your git would then go into a \
                     repository this command made and run its configuration; add submodules \
                     yourself",
                    added.join(", ")
                ));
                return applied;
            }
        }
    }
    applied.refused = applied
        .refused
        .iter()
        .map(|p| super::shown(root, Path::new(p)))
        .collect();
    // Objects before what names them, the index and HEAD last.
    changes.sort_by_key(|(order, _)| *order);
    for (_, change) in changes {
        let done = match change {
            Change::Put { from, to } => put(&from, &to),
            Change::Remove(path) => remove(&path),
        };
        match done {
            Ok(()) => applied.changed += 1,
            Err(e) => tracing::warn!(op = "git-layer", result = "error", "{e}"),
        }
    }
    applied
}

/// The order a file of a git directory is applied in.
fn order(relative: &Path) -> u8 {
    match relative
        .components()
        .next()
        .map(|c| c.as_os_str().to_string_lossy())
    {
        Some(c) if c == "objects" => 0,
        Some(c) if c == "refs" || c == "packed-refs" || c == "logs" => 1,
        Some(c) if c == "index" || c == "HEAD" => 3,
        _ => 2,
    }
}

/// Where `relative` (a path in a git directory) may change, and whether a deletion there is
/// applied; `None`: it may not.
fn allowed(relative: &Path) -> Option<bool> {
    let mut parts = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned());
    let first = parts.next()?;
    let rest: Vec<String> = parts.collect();
    if rest.is_empty() && TOP_FILES.contains(&first.as_str()) {
        return Some(true);
    }
    let (_, deletes) = DIRS.iter().find(|(d, _)| *d == first)?;
    if first == "objects" && rest.first().is_some_and(|r| r == "info") {
        // alternates, http-alternates: pointers to other object stores.
        return None;
    }
    Some(*deletes)
}

/// Walks the upper layer beneath `relative`, turning what it holds into changes of `dir`.
fn collect(
    upper: &Path,
    dir: &Path,
    relative: &Path,
    changes: &mut Vec<(u8, Change)>,
    applied: &mut Applied,
    budget: &mut usize,
) -> Result<(), String> {
    let here = upper.join(relative);
    let Ok(entries) = std::fs::read_dir(&here) else {
        return Ok(());
    };
    if !relative.as_os_str().is_empty() && crate::sandbox::namespace::is_opaque(&here) {
        // Removed and made again: what the real directory has that the layer does not goes.
        if allowed(relative) == Some(true) {
            for real in std::fs::read_dir(dir.join(relative))
                .into_iter()
                .flatten()
                .flatten()
            {
                if !here.join(real.file_name()).exists() {
                    changes.push((order(relative), Change::Remove(real.path())));
                }
            }
        }
    }
    for entry in entries.flatten() {
        if *budget == 0 {
            return Err(format!(
                "the command left more than {MAX_ENTRIES} files in .git"
            ));
        }
        *budget -= 1;
        let name = entry.file_name();
        let rel = relative.join(&name);
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let target = dir.join(&rel);
        if name.to_string_lossy().ends_with(".lock") {
            // git's own lock files, left by a command that was killed: never applied.
            continue;
        }
        if kind.is_dir() {
            // A directory of its own only matters for what it holds; one git does not write
            // (hooks/, info/, modules/, worktrees/) is refused whole.
            if rel.components().count() == 1 && !DIRS.iter().any(|(d, _)| name == *d) {
                applied.refused.push(target.display().to_string());
                continue;
            }
            collect(upper, dir, &rel, changes, applied, budget)?;
            continue;
        }
        let whiteout = {
            use std::os::unix::fs::{FileTypeExt, MetadataExt};
            kind.is_char_device() && entry.metadata().is_ok_and(|m| m.rdev() == 0)
        };
        match allowed(&rel) {
            None => applied.refused.push(target.display().to_string()),
            Some(deletes) if whiteout => {
                if deletes {
                    changes.push((order(&rel), Change::Remove(target)));
                }
            }
            Some(_) if !kind.is_file() => applied.refused.push(target.display().to_string()),
            Some(_) if !reads_as_git_wrote_it(&rel, &entry.path()) => applied
                .refused
                .push(format!("{} (not what git writes there)", target.display())),
            Some(_) => {
                if rel.starts_with("objects") && target.exists() {
                    continue; // an object never changes
                }
                changes.push((
                    order(&rel),
                    Change::Put {
                        from: entry.path(),
                        to: target,
                    },
                ));
            }
        }
    }
    Ok(())
}

/// Whether a ref or `HEAD` in the layer reads as git writes one: an object id, or `ref:` and a
/// name under `refs/` without `..`. Other files are git's own formats, read by git only.
fn reads_as_git_wrote_it(relative: &Path, file: &Path) -> bool {
    let name = relative.to_string_lossy();
    let is_ref = name.starts_with("refs/") || name.ends_with("HEAD") && !name.contains('/');
    if !is_ref {
        return true;
    }
    let Ok(Some(bytes)) = crate::capped_file::read(file, 4096) else {
        return false;
    };
    let text = String::from_utf8_lossy(&bytes);
    let line = text.lines().next().unwrap_or("").trim();
    if let Some(target) = line.strip_prefix("ref:") {
        let target = target.trim();
        return target.starts_with("refs/") && !target.contains("..") && !target.contains('\\');
    }
    // FETCH_HEAD holds lines of an id, a tab and where it came from.
    let id = line.split(['\t', ' ']).next().unwrap_or("");
    (id.len() == 40 || id.len() == 64) && id.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Moves the layer's file into place (making its directories), by rename where it can, else by
/// a copy renamed into place.
fn put(from: &Path, to: &Path) -> std::io::Result<()> {
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent)?;
    }
    match std::fs::rename(from, to) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(nix::libc::EXDEV) => {
            let temp = to.with_extension("nop-layer");
            std::fs::copy(from, &temp)?;
            std::fs::rename(&temp, to)
        }
        Err(e) => Err(e),
    }
}

fn remove(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Where a command's git layers are made: a directory of this user's own in `/dev/shm` (a
/// tmpfs: making and removing a layer per command costs no disk), else the session's
/// `layers/`. The view hides it from the command ([`crate::permissions::Layers::git`]'s
/// parent is masked), so nothing but the overlay writes it.
pub fn scratch_dir(session_dir: &Path) -> PathBuf {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let uid = nix::unistd::geteuid().as_raw();
    let shm = PathBuf::from(format!("/dev/shm/nop-{uid}"));
    // Made by this user with no rights for others, or found so: another user's (or a link)
    // is never used.
    let _ = std::fs::DirBuilder::new().mode(0o700).create(&shm);
    let ours = std::fs::symlink_metadata(&shm)
        .is_ok_and(|m| m.is_dir() && m.uid() == uid && m.mode() & 0o077 == 0);
    let dir = if ours {
        shm
    } else {
        session_dir.join("layers")
    };
    sweep(&dir);
    dir
}

/// The name of a new git layer: this process's id first, so that one a killed nop left behind
/// can be told from one in use ([`sweep`]).
pub fn layer_name() -> String {
    format!(
        "git-{}-{}",
        std::process::id(),
        uuid::Uuid::now_v7().simple()
    )
}

/// Removes the git layers in `dir` whose process is gone (a nop killed during a command), once
/// per process: a tmpfs keeps them in memory until someone does.
fn sweep(dir: &Path) {
    static SWEPT: std::sync::Once = std::sync::Once::new();
    SWEPT.call_once(|| {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(pid) = name
                .strip_prefix("git-")
                .and_then(|rest| rest.split('-').next())
                .and_then(|p| p.parse::<i32>().ok())
            else {
                continue;
            };
            let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok();
            if !alive {
                remove_layer(&entry.path());
            }
        }
    });
}

/// Removes a layer directory and what is in it (the kernel leaves `work/work` unreadable).
pub fn remove_layer(layer: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let work = layer.join("work/work");
    let _ = std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o700));
    for entry in walk_dirs(layer) {
        let _ = std::fs::set_permissions(&entry, std::fs::Permissions::from_mode(0o700));
    }
    if let Err(e) = std::fs::remove_dir_all(layer) {
        tracing::warn!(op = "git-layer", "cannot remove {}: {e}", layer.display());
    }
}

/// Every directory beneath `dir` (bounded), for making them removable.
fn walk_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        if out.len() > MAX_ENTRIES {
            break;
        }
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                out.push(entry.path());
                stack.push(entry.path());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_git_writes_is_allowed_and_what_it_reads_as_configuration_is_not() {
        for (path, expected) in [
            ("objects/ab/cdef", Some(false)),
            ("objects/pack/pack-1.pack", Some(false)),
            ("objects/info/alternates", None),
            ("refs/heads/main", Some(true)),
            ("logs/HEAD", Some(true)),
            ("HEAD", Some(true)),
            ("index", Some(true)),
            ("packed-refs", Some(true)),
            ("rebase-merge/done", Some(true)),
            ("config", None),
            ("hooks/pre-commit", None),
            ("info/exclude", None),
            ("commondir", None),
            ("modules/x/config", None),
            ("worktrees/wt/gitdir", None),
            ("description", None),
        ] {
            assert_eq!(allowed(Path::new(path)), expected, "{path}");
        }
    }

    #[test]
    fn refs_and_head_must_read_as_git_writes_them() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("x");
        for (text, ok) in [
            ("ref: refs/heads/main\n", true),
            ("0123456789abcdef0123456789abcdef01234567\n", true),
            ("ref: ../../../elsewhere\n", false),
            ("ref: /etc/passwd\n", false),
            ("[core]\nfsmonitor = x\n", false),
        ] {
            std::fs::write(&file, text)?;
            assert_eq!(
                reads_as_git_wrote_it(Path::new("HEAD"), &file),
                ok,
                "{text}"
            );
            assert_eq!(
                reads_as_git_wrote_it(Path::new("refs/heads/x"), &file),
                ok,
                "{text}"
            );
        }
        assert!(reads_as_git_wrote_it(Path::new("COMMIT_EDITMSG"), &file));
        Ok(())
    }
}
