//! The submodules of a repository, from its index: each gitlink's `.git` in the working tree (a
//! pointer file, or a directory) is what the user's `git status` follows into the submodule and
//! whose configuration it then reads, so the agent must not be able to change it.
//!
//! The index is read here, in process (versions 2 to 4, SHA-1 object names), not by running git:
//! nothing of the repository's configuration is involved, and the result is kept while the
//! index file stays the same (it is read-only to the agent, so only the user's git changes it).

use std::path::{Path, PathBuf};
use std::sync::Mutex;

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

const GITLINK: u32 = 0o160000;
const STAT_AND_NAME: usize = 40 + 20;

fn parse(bytes: &[u8]) -> Option<Vec<String>> {
    Some(
        entries(bytes)?
            .into_iter()
            .filter(|(mode, _)| mode & 0o170000 == GITLINK)
            .map(|(_, name)| name)
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
            .and_then(|bytes| entries(&bytes))
            .is_some_and(|entries| entries.iter().any(|(_, name)| name == path))
}

/// Every entry of an index: its mode and path.
fn entries(bytes: &[u8]) -> Option<Vec<(u32, String)>> {
    let u32_at = |at: usize| -> Option<u32> {
        Some(u32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
    };
    if bytes.get(0..4)? != b"DIRC" {
        return None;
    }
    let version = u32_at(4)?;
    if !(2..=4).contains(&version) {
        return None;
    }
    let count = u32_at(8)? as usize;
    let mut at = 12;
    let mut previous: Vec<u8> = Vec::new();
    let mut links = Vec::new();
    for _ in 0..count {
        let start = at;
        let mode = u32_at(start + 24)?;
        let flags = u16::from_be_bytes(
            bytes
                .get(start + STAT_AND_NAME..start + STAT_AND_NAME + 2)?
                .try_into()
                .ok()?,
        );
        at = start + STAT_AND_NAME + 2;
        if version >= 3 && flags & 0x4000 != 0 {
            at += 2;
        }
        let name = if version == 4 {
            let (strip, used) = varint(bytes.get(at..)?)?;
            at += used;
            let end = at + bytes.get(at..)?.iter().position(|b| *b == 0)?;
            let keep = previous.len().checked_sub(strip)?;
            let mut name = previous[..keep].to_vec();
            name.extend_from_slice(&bytes[at..end]);
            at = end + 1;
            name
        } else {
            let end = at + bytes.get(at..)?.iter().position(|b| *b == 0)?;
            let name = bytes[at..end].to_vec();
            // Entries are padded with NULs to a multiple of eight bytes.
            at = start + ((end - start + 8) & !7);
            name
        };
        links.push((mode, String::from_utf8_lossy(&name).into_owned()));
        previous = name;
    }
    Some(links)
}

/// git's offset encoding (varint.c): returns the value and the bytes it took; `None` past the
/// end or on a value too large (a corrupt index).
pub(crate) fn varint(bytes: &[u8]) -> Option<(usize, usize)> {
    let mut used = 0;
    let mut byte = *bytes.first()?;
    used += 1;
    let mut value = usize::from(byte & 0x7f);
    while byte & 0x80 != 0 {
        byte = *bytes.get(used)?;
        used += 1;
        value = value.checked_add(1)?.checked_shl(7)? | usize::from(byte & 0x7f);
    }
    Some((value, used))
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
