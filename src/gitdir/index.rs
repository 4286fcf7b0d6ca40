//! A git index (`.git/index`), read in process: versions 2 to 4, SHA-1 object names. The one
//! reader of that format in nop: the checkpoint store compares the disk with its private index,
//! the permissions find a repository's submodules in the user's.

use std::collections::HashMap;

/// A 20-byte SHA-1 object name.
pub type Oid = [u8; 20];

/// One entry of an index: the stat data git keeps, its object, its flags, and where its path is
/// in [`Index::paths`].
#[derive(Debug, Clone)]
pub struct Entry {
    pub oid: Oid,
    pub ctime: (u32, u32),
    pub mtime: (u32, u32),
    pub ino: u32,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u32,
    /// Assume-valid, skip-worktree or intent-to-add, or a merge stage.
    pub odd: bool,
    /// Start and length in [`Index::paths`].
    pub path: (u32, u32),
}

/// An index as read: its entries in git's order, their paths in one buffer, git's cache of
/// trees (each still valid directory's tree, "" for the top).
#[derive(Debug, Default)]
pub struct Index {
    pub entries: Vec<Entry>,
    pub paths: Vec<u8>,
    pub trees: HashMap<String, Oid>,
}

impl Index {
    /// The path of `entry`, as bytes relative to the work tree.
    pub fn path(&self, entry: &Entry) -> &[u8] {
        slice(&self.paths, entry.path)
    }
}

/// The bytes of the path at `(start, len)` in `paths`.
pub fn slice(paths: &[u8], (start, len): (u32, u32)) -> &[u8] {
    &paths[start as usize..(start + len) as usize]
}

/// The git mode of a gitlink (a submodule's commit).
pub const GITLINK: u32 = 0o160000;

/// The entries of an index file's bytes, with git's cache of trees; `None` for anything this
/// reader does not know or a damaged index (never a panic, never an overflow).
pub fn parse(bytes: &[u8]) -> Option<Index> {
    let be32 = |at: usize| -> Option<u32> {
        Some(u32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
    };
    if bytes.get(0..4)? != b"DIRC" {
        return None;
    }
    let version = be32(4)?;
    if !(2..=4).contains(&version) {
        return None;
    }
    let count = be32(8)? as usize;
    // Each entry takes at least 62 bytes: a count beyond that is a damaged index.
    if count > bytes.len() / 62 {
        return None;
    }
    let mut entries = Vec::with_capacity(count);
    let mut paths: Vec<u8> = Vec::with_capacity(bytes.len());
    let mut at = 12;
    let mut previous = (0u32, 0u32);
    for _ in 0..count {
        let start = at;
        let oid = bytes.get(start + 40..start + 60)?;
        let flags = u16::from_be_bytes(bytes.get(start + 60..start + 62)?.try_into().ok()?);
        at = start + 62;
        let mut odd = flags & 0x8000 != 0 || flags & 0x3000 != 0;
        if flags & 0x4000 != 0 {
            if version < 3 {
                return None;
            }
            let extended = u16::from_be_bytes(bytes.get(at..at + 2)?.try_into().ok()?);
            odd |= extended != 0;
            at += 2;
        }
        let begin = u32::try_from(paths.len()).ok()?;
        if version == 4 {
            // The number of bytes to drop from the end of the previous path, as git's varint.
            let (strip, used) = varint(bytes.get(at..)?)?;
            at += used;
            let keep = (previous.1 as usize).checked_sub(strip)?;
            let end = at + bytes.get(at..)?.iter().position(|b| *b == 0)?;
            let from = previous.0 as usize;
            paths.extend_from_within(from..from + keep);
            paths.extend_from_slice(&bytes[at..end]);
            at = end + 1;
        } else {
            let end = at + bytes.get(at..)?.iter().position(|b| *b == 0)?;
            paths.extend_from_slice(&bytes[at..end]);
            // Padded with 1 to 8 NULs to a multiple of eight bytes from the entry's start.
            at = start + (end - start + 8) / 8 * 8;
        }
        let path = (begin, u32::try_from(paths.len()).ok()? - begin);
        previous = path;
        entries.push(Entry {
            oid: oid.try_into().ok()?,
            ctime: (be32(start)?, be32(start + 4)?),
            mtime: (be32(start + 8)?, be32(start + 12)?),
            ino: be32(start + 20)?,
            mode: be32(start + 24)?,
            uid: be32(start + 28)?,
            gid: be32(start + 32)?,
            size: be32(start + 36)?,
            odd,
            path,
        });
    }
    // The extensions, up to the trailing hash: git's cache of trees is the one read here.
    let mut trees = HashMap::new();
    while at + 8 <= bytes.len().saturating_sub(20) {
        let size = be32(at + 4)? as usize;
        let data = bytes.get(at + 8..at.checked_add(8 + size)?)?;
        if &bytes[at..at + 4] == b"TREE" {
            let mut from = 0;
            cache_tree(data, &mut from, "", &mut trees, 0)?;
        }
        at += 8 + size;
    }
    Some(Index {
        entries,
        paths,
        trees,
    })
}

/// One node of git's cache of trees (`TREE`), and those below it: each valid one's id, by
/// directory ("" for the top). `depth` bounds the recursion a damaged index could ask for.
fn cache_tree(
    data: &[u8],
    at: &mut usize,
    prefix: &str,
    trees: &mut HashMap<String, Oid>,
    depth: usize,
) -> Option<()> {
    if depth > 4096 {
        return None;
    }
    let rest = data.get(*at..)?;
    let nul = rest.iter().position(|b| *b == 0)?;
    let name = std::str::from_utf8(&rest[..nul]).ok()?;
    let line_end = rest[nul + 1..].iter().position(|b| *b == b'\n')?;
    let line = std::str::from_utf8(&rest[nul + 1..nul + 1 + line_end]).ok()?;
    *at += nul + 1 + line_end + 1;
    let (count, subtrees) = line.split_once(' ')?;
    let count: i64 = count.parse().ok()?;
    let subtrees: usize = subtrees.parse().ok()?;
    let path = match (prefix, name) {
        ("", name) => name.to_string(),
        (prefix, name) => format!("{prefix}/{name}"),
    };
    if count >= 0 {
        trees.insert(path.clone(), data.get(*at..*at + 20)?.try_into().ok()?);
        *at += 20;
    }
    for _ in 0..subtrees {
        cache_tree(data, at, &path, trees, depth + 1)?;
    }
    Some(())
}

/// git's offset encoding (varint.c): returns the value and the bytes it took; `None` past the
/// end or on a value too large (a corrupt index).
fn varint(bytes: &[u8]) -> Option<(usize, usize)> {
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
    use pretty_assertions::assert_eq;
    use std::path::Path;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .expect("git");
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    #[test]
    fn every_index_version_reads_as_git_lists_it_gitlinks_and_cached_trees_included() {
        let dir = tempfile::tempdir().expect("temp");
        let root = dir.path();
        git(root, &["init", "-q"]);
        for (path, text) in [
            ("a.txt", "a"),
            ("empty", ""),
            ("dir/long-name-to-share-a-prefix-one.rs", "1"),
            ("dir/long-name-to-share-a-prefix-two.rs", "2"),
            ("dir/sub/ü.md", "u"),
        ] {
            let full = root.join(path);
            std::fs::create_dir_all(full.parent().expect("parent")).expect("mkdir");
            std::fs::write(full, text).expect("write");
        }
        git(root, &["add", "-A"]);
        git(root, &["commit", "-qm", "x"]);
        let head = git(root, &["rev-parse", "HEAD"]);
        for link in ["dir/sub/link", "libs/one"] {
            let info = format!("160000,{},{link}", head.trim());
            git(root, &["update-index", "--add", "--cacheinfo", &info]);
        }
        git(root, &["write-tree"]);
        // An entry with extended flags (intent to add) makes a version 3 index.
        std::fs::write(root.join("new.txt"), "n").expect("write");
        git(root, &["add", "-N", "new.txt"]);
        for version in ["2", "3", "4"] {
            git(root, &["update-index", "--index-version", version]);
            let bytes = std::fs::read(root.join(".git/index")).expect("index");
            let index = parse(&bytes).expect("parsed");
            let paths: Vec<String> = index
                .entries
                .iter()
                .map(|e| String::from_utf8_lossy(index.path(e)).into_owned())
                .collect();
            let listed: Vec<String> = git(root, &["-c", "core.quotepath=false", "ls-files"])
                .lines()
                .map(str::to_string)
                .collect();
            assert_eq!(paths, listed, "version {version}");
            let links: Vec<&str> = index
                .entries
                .iter()
                .filter(|e| e.mode & 0o170000 == GITLINK)
                .map(|e| std::str::from_utf8(index.path(e)).expect("utf-8"))
                .collect();
            assert_eq!(links, ["dir/sub/link", "libs/one"], "version {version}");
            let odd: Vec<&str> = index
                .entries
                .iter()
                .filter(|e| e.odd)
                .map(|e| std::str::from_utf8(index.path(e)).expect("utf-8"))
                .collect();
            assert_eq!(odd, ["new.txt"], "version {version}");
            assert!(index.trees.contains_key("dir"), "version {version}");
        }
    }

    #[test]
    fn a_damaged_index_is_refused_not_overflowed() {
        assert!(parse(b"not an index").is_none());
        let mut huge = b"DIRC\0\0\0\x02\xff\xff\xff\xff".to_vec();
        huge.extend([0u8; 100]);
        assert!(parse(&huge).is_none());
        // A version-4 path's prefix length that never ends, or ends past any number.
        assert_eq!(varint(&[0xff; 20]), None);
        assert_eq!(varint(&[0x80, 0x80]), None);
        assert_eq!(varint(&[0x81, 0x00]), Some((256, 2)));
    }
}
