//! Where a directory's git repository keeps its files, found by reading `.git` (a directory, or
//! a `gitdir:` pointer file) and `commondir`, never by running git: nothing of the repository's
//! configuration is involved. Used by the permissions (what git reads later), the checkpoint
//! store (the repository's objects and index) and the workspace (its `info/exclude`).

pub mod index;

use std::path::{Path, PathBuf};

/// A repository's directories, canonical where they are read from a pointer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitDirs {
    /// The directory that holds `.git` (the work tree's top).
    pub top: PathBuf,
    /// What `.git` is or names: the repository's own git directory, or a worktree's or a
    /// submodule's.
    pub gitdir: PathBuf,
    /// Where the shared files are (`objects/`, `info/`, `config`): what `gitdir/commondir` names,
    /// else the git directory itself.
    pub common: PathBuf,
}

/// The repository `dir` itself is the top of (its own `.git`), if any.
pub fn at(dir: &Path) -> Option<GitDirs> {
    let dot_git = dir.join(".git");
    let meta = dot_git.symlink_metadata().ok()?;
    let gitdir = if meta.is_dir() {
        dot_git
    } else {
        let text = std::fs::read_to_string(&dot_git).ok()?;
        let named = text.trim().strip_prefix("gitdir:")?.trim().to_string();
        std::fs::canonicalize(dir.join(named)).ok()?
    };
    let common = match std::fs::read_to_string(gitdir.join("commondir")) {
        Ok(text) => std::fs::canonicalize(gitdir.join(text.trim())).ok()?,
        Err(_) => gitdir.clone(),
    };
    Some(GitDirs {
        top: dir.to_path_buf(),
        gitdir,
        common,
    })
}

/// The repository `dir` is in: the nearest directory at or above it with a `.git`.
pub fn find(dir: &Path) -> Option<GitDirs> {
    let top = dir
        .ancestors()
        .find(|d| d.join(".git").symlink_metadata().is_ok())?;
    at(top)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_a_worktree_pointer_and_a_subdirectory() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(root.join("main/.git/worktrees/wt")).unwrap();
        std::fs::write(root.join("main/.git/worktrees/wt/commondir"), "../..\n").unwrap();
        std::fs::create_dir_all(root.join("wt/sub")).unwrap();
        std::fs::write(
            root.join("wt/.git"),
            format!(
                "gitdir: {}\n",
                root.join("main/.git/worktrees/wt").display()
            ),
        )
        .unwrap();
        let main = at(&root.join("main")).unwrap();
        assert_eq!(main.gitdir, root.join("main/.git"));
        assert_eq!(main.common, root.join("main/.git"));
        let wt = find(&root.join("wt/sub")).unwrap();
        assert_eq!(wt.top, root.join("wt"));
        assert_eq!(wt.gitdir, root.join("main/.git/worktrees/wt"));
        assert_eq!(wt.common, root.join("main/.git"));
        assert_eq!(at(&root.join("wt/sub")), None);
    }
}
