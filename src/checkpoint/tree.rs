//! A new tree of the store from what was recorded ([`Index`]: the private index with what was
//! hashed since over it) and the paths that changed, written in process: only the directories
//! on the way to a change get a new tree; every other directory keeps the tree git's cache of
//! trees (or an earlier checkpoint) names. No git process runs, and the index (of 100,000
//! entries, reading and writing it is most of what `update-index` and `write-tree` cost) is
//! neither read by git nor written.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::objects::{self, Id};
use super::scan::Index;

/// What a path of the tree becomes: `Some((git mode, object id))`, or `None` (removed).
pub(super) type Edits = BTreeMap<String, Option<(u32, Id)>>;

/// The trees written: the top one (`None`: nothing left), and each directory's on the way to
/// a change (`None`: it is gone).
pub(super) struct Built {
    pub root: Option<Id>,
    pub dirs: BTreeMap<String, Option<Id>>,
}

/// The tree of what `index` records with `edits` applied, its directories' trees written to
/// `pack`. `written`: trees written by earlier checkpoints since git last wrote the index.
/// `None` when a tree this needs is known to neither (git must write them).
pub(super) fn rebuild(
    index: &Index,
    written: &BTreeMap<String, Id>,
    edits: &Edits,
    pack: &mut objects::Pack,
) -> std::io::Result<Option<Built>> {
    // Every directory on the way to a change, deepest first.
    let mut dirs: BTreeMap<String, usize> = BTreeMap::new();
    dirs.insert(String::new(), 0);
    for path in edits.keys() {
        for (i, b) in path.bytes().enumerate() {
            if b == b'/' {
                dirs.insert(path[..i].to_string(), path[..i].matches('/').count() + 1);
            }
        }
    }
    let mut order: Vec<(&String, usize)> = dirs.iter().map(|(d, n)| (d, *n)).collect();
    order.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let mut built: HashMap<String, Option<Id>> = HashMap::new();
    for (dir, _) in order {
        let prefix = if dir.is_empty() {
            String::new()
        } else {
            format!("{dir}/")
        };
        let mut files: BTreeMap<String, (u32, Id)> = BTreeMap::new();
        let mut subdirs: BTreeSet<String> = BTreeSet::new();
        for (rest, mode, id) in index.under(&prefix) {
            match rest.split_once('/') {
                None => {
                    files.insert(rest.to_string(), (mode, id));
                }
                Some((sub, _)) => {
                    subdirs.insert(sub.to_string());
                }
            }
        }
        for (path, edit) in edits.range(prefix.clone()..) {
            let Some(rest) = path.strip_prefix(&prefix) else {
                break;
            };
            match (rest.split_once('/'), edit) {
                (None, Some(file)) => {
                    files.insert(rest.to_string(), *file);
                }
                (None, None) => {
                    files.remove(rest);
                }
                (Some((sub, _)), _) => {
                    subdirs.insert(sub.to_string());
                }
            }
        }
        // git's order: by name, a directory's as if it ended with '/'.
        let mut entries: BTreeMap<Vec<u8>, (String, &str, Id)> = BTreeMap::new();
        for sub in &subdirs {
            let full = format!("{prefix}{sub}");
            let id = if dirs.contains_key(&full) {
                built.get(&full).copied().flatten()
            } else {
                match written.get(&full).or_else(|| index.cached_tree(&full)) {
                    Some(id) => Some(*id),
                    None => return Ok(None),
                }
            };
            let Some(id) = id else { continue };
            if files.contains_key(sub) {
                // A file and a directory of one name: git sorts that out.
                return Ok(None);
            }
            let mut key = sub.as_bytes().to_vec();
            key.push(b'/');
            entries.insert(key, ("40000".to_string(), sub, id));
        }
        for (name, (mode, id)) in &files {
            entries.insert(name.as_bytes().to_vec(), (format!("{mode:o}"), name, *id));
        }
        if entries.is_empty() {
            built.insert(dir.clone(), None);
            continue;
        }
        let mut body = Vec::new();
        for (mode, name, id) in entries.values() {
            body.extend_from_slice(mode.as_bytes());
            body.push(b' ');
            body.extend_from_slice(name.as_bytes());
            body.push(0);
            body.extend_from_slice(id);
        }
        built.insert(dir.clone(), Some(pack.tree(&body)?));
    }
    let root = built.get("").copied().flatten();
    Ok(Some(Built {
        root,
        dirs: built.into_iter().collect(),
    }))
}

/// The git mode a file of this stat data is recorded with; `None` for what git does not record
/// as a file.
pub(super) fn mode_of(st: &nix::sys::stat::FileStat) -> Option<u32> {
    match st.st_mode & 0o170000 {
        0o100000 if st.st_mode & 0o100 != 0 => Some(0o100755),
        0o100000 => Some(0o100644),
        0o120000 => Some(0o120000),
        _ => None,
    }
}
