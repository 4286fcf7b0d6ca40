//! The submodules of a repository, from its index: each gitlink's `.git` in the working tree (a
//! pointer file, or a directory) is what the user's `git status` follows into the submodule and
//! whose configuration it then reads, so the agent must not be able to change it.
//!
//! The index is read in process ([`crate::gitdir::index`]), not by running git: nothing of the repository's configuration is involved, and the result is kept while the
//! index file stays the same (it is read-only to the agent, so only the user's git changes it).

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::gitdir::index;

/// The paths (relative to the index's work tree) of the index's gitlink entries; empty when the
/// index is missing or in a form this reader does not know.
pub fn gitlinks(index: &Path) -> Vec<String> {
    type Key = (PathBuf, u64, i64, i64, u64);
    static CACHE: Mutex<Option<(Key, Vec<String>)>> = Mutex::new(None);
    let Ok(meta) = std::fs::metadata(index) else {
        return Vec::new();
    };
    let key: Key = {
        use std::os::unix::fs::MetadataExt;
        (
            index.to_path_buf(),
            meta.len(),
            meta.mtime(),
            meta.mtime_nsec(),
            meta.ino(),
        )
    };
    if let Ok(cache) = CACHE.lock()
        && let Some((k, links)) = cache.as_ref()
        && *k == key
    {
        return links.clone();
    }
    let links = std::fs::read(index)
        .ok()
        .and_then(|bytes| parse(&bytes))
        .unwrap_or_default();
    if let Ok(mut cache) = CACHE.lock() {
        *cache = Some((key, links.clone()));
    }
    links
}

fn parse(bytes: &[u8]) -> Option<Vec<String>> {
    let index = index::parse(bytes)?;
    Some(
        index
            .entries
            .iter()
            .filter(|e| e.mode & 0o170000 == index::GITLINK)
            .map(|e| String::from_utf8_lossy(index.path(e)).into_owned())
            .collect(),
    )
}

/// Whether git tracks `name` (a path relative to the repository root `root`): the index of the
/// repository around `root` has an entry for it, a file the user added, which the agent cannot
/// have done (`.git` is read-only to it). `false` outside a git repository.
pub fn git_tracks(root: &Path, name: &str) -> bool {
    let Some(repo) = crate::gitdir::find(root) else {
        return false;
    };
    let top = repo.top.canonicalize().unwrap_or(repo.top);
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    root.join(name)
        .strip_prefix(&top)
        .ok()
        .and_then(Path::to_str)
        .is_some_and(|rel| tracked(&repo.gitdir.join("index"), rel))
}

/// Whether the index at `index` has an entry for `path` (relative to its work tree).
fn tracked(index: &Path, path: &str) -> bool {
    // An index is read whole; a huge one is not what this is for.
    const MAX: u64 = 256 << 20;
    std::fs::metadata(index).is_ok_and(|m| m.len() <= MAX)
        && std::fs::read(index)
            .ok()
            .and_then(|bytes| index::parse(&bytes))
            .is_some_and(|index| {
                index
                    .entries
                    .iter()
                    .any(|e| index.path(e) == path.as_bytes())
            })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) {
        let out = Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "protocol.file.allow=always",
            ])
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn gitlinks_are_read_from_every_index_version() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        git(root, &["init", "-q"]);
        for (path, text) in [
            ("a.txt", "a"),
            ("deep/dir/b.txt", "b"),
            ("deep/dir/c.txt", "c"),
        ] {
            std::fs::create_dir_all(root.join(path).parent().unwrap()).unwrap();
            std::fs::write(root.join(path), text).unwrap();
        }
        git(root, &["add", "-A"]);
        git(root, &["commit", "-qm", "x"]);
        let head = String::from_utf8(
            Command::new("git")
                .args(["rev-parse", "HEAD"])
                .current_dir(root)
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap();
        let head = head.trim();
        for link in ["deep/dir/sub", "libs/one", "z"] {
            git(
                root,
                &[
                    "update-index",
                    "--add",
                    "--cacheinfo",
                    &format!("160000,{head},{link}"),
                ],
            );
        }
        // An entry with extended flags (intent to add) makes a version 3 index.
        std::fs::write(root.join("new.txt"), "n").unwrap();
        git(root, &["add", "-N", "new.txt"]);
        for version in ["2", "3", "4"] {
            git(root, &["update-index", "--index-version", version]);
            let bytes = std::fs::read(root.join(".git/index")).unwrap();
            assert_eq!(
                parse(&bytes),
                Some(vec![
                    "deep/dir/sub".to_string(),
                    "libs/one".to_string(),
                    "z".to_string()
                ]),
                "version {version}"
            );
        }
        assert_eq!(parse(b"not an index"), None);
        assert_eq!(
            parse(&std::fs::read(root.join(".git/index")).unwrap()[..40]),
            None
        );
    }
}
