//! A checkpoint never depends on an object only the user's repository holds. The store reads
//! the repository's objects as alternates (so a first checkpoint of a large repository costs no
//! copy of it), but the user may rewrite history and `git gc --prune=now`: the blobs the
//! checkpoint named would be gone, and `nop undo` with them. So once a checkpoint is recorded,
//! every blob it names that the store does not hold itself is copied into a pack of the store's
//! own (`git pack-objects`, no deltas), trees included, and the tree is remembered as pinned
//! (`pinned`): the next checkpoint looks only at what changed since, and not at all when it was
//! made in process from the pinned tree (whatever it adds, it writes to a pack of its own).

use std::collections::HashSet;

use super::{Checkpoints, Result, split_z};

/// Where the last tree whose blobs are all the store's own is written.
const PINNED: &str = "pinned";

impl Checkpoints {
    /// Copies into the store every object of `tree` it does not hold itself. `from`: the tree
    /// it was made from in process, without git hashing anything.
    pub(super) fn pin(&self, tree: &str, from: Option<&str>) -> Result<()> {
        let last = std::fs::read_to_string(self.dir.join(PINNED))
            .ok()
            .map(|t| t.trim().to_string())
            .filter(|t| t.len() == tree.len() && t.bytes().all(|b| b.is_ascii_hexdigit()));
        if last.as_deref() == Some(tree) {
            return Ok(());
        }
        let index = self.dir.join("index");
        if from.is_some() && last.as_deref() == from {
            return self.pinned(tree);
        }
        let mut named: Vec<String> = match &last {
            // What changed since the last pinned tree (added or changed blobs).
            Some(last) => {
                let out = self.git(
                    &[
                        "diff-tree",
                        "-r",
                        "-t",
                        "-z",
                        "--no-renames",
                        "--diff-filter=AMT",
                        last,
                        tree,
                    ],
                    &index,
                    None,
                );
                match out {
                    Ok(out) => new_ids_of_diff(&out),
                    // The last pinned tree is gone (a store rebuilt): look at everything.
                    Err(_) => self.object_ids(tree)?,
                }
            }
            None => self.object_ids(tree)?,
        };
        named.push(tree.to_string());
        let own = self.own_objects();
        let missing: Vec<&String> = named
            .iter()
            .filter(|id| !own.contains(id.as_str()) && !self.loose(id))
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        if !missing.is_empty() {
            let list: String = missing.iter().map(|id| format!("{id}\n")).collect();
            let base = self.dir.join("objects/pack/pack");
            self.git(
                &[
                    "pack-objects",
                    "-q",
                    "--window=0",
                    "--depth=0",
                    &base.to_string_lossy(),
                ],
                &index,
                Some(list.as_bytes()),
            )?;
            tracing::debug!(
                op = "checkpoint",
                copied = missing.len(),
                "pinned the repository's objects"
            );
        }
        self.pinned(tree)
    }

    /// Remembers `tree` as one whose objects are all the store's own.
    fn pinned(&self, tree: &str) -> Result<()> {
        crate::session::write_atomic(&self.dir.join(PINNED), format!("{tree}\n").as_bytes())
            .map_err(|e| super::CheckpointError::Refused(e.to_string()))
    }

    /// The ids of the blobs and trees `tree` names.
    fn object_ids(&self, tree: &str) -> Result<Vec<String>> {
        let out = self.git(
            &["ls-tree", "-r", "-t", "-z", tree],
            &self.dir.join("index"),
            None,
        )?;
        Ok(split_z(&out)
            .into_iter()
            .filter_map(|line| {
                let (meta, _) = line.split_once('\t')?;
                let mut parts = meta.split(' ');
                let (_, kind, id) = (parts.next()?, parts.next()?, parts.next()?);
                (kind == "blob" || kind == "tree").then(|| id.to_string())
            })
            .collect())
    }

    /// The ids of the objects in the store's own packs (not the repository's).
    fn own_objects(&self) -> HashSet<String> {
        let dir = self.dir.join("objects/pack");
        let mut ids = HashSet::new();
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "idx") {
                ids.extend(super::objects::index_ids(&path));
            }
        }
        ids
    }

    /// Whether the store holds `id` as a loose object of its own.
    fn loose(&self, id: &str) -> bool {
        id.len() > 2
            && self
                .dir
                .join("objects")
                .join(&id[..2])
                .join(&id[2..])
                .is_file()
    }
}

/// The new blob and tree ids of `git diff-tree -r -t -z` output: `:old new oldid newid status\0path\0`.
fn new_ids_of_diff(out: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(out);
    text.split('\0')
        .filter_map(|part| {
            let meta = part.strip_prefix(':')?;
            let fields: Vec<&str> = meta.split(' ').collect();
            let (new_mode, new_id) = (fields.get(1)?, fields.get(3)?);
            // Files and links; a gitlink (160000) names a commit of another repository.
            (*new_mode != "160000" && *new_mode != "000000").then(|| new_id.to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_new_ids_of_a_diff_are_read() {
        let out = b":100644 100644 aaaa bbbb M\0a.txt\0:000000 100644 0000 cccc A\0b\0:160000 160000 dd ee M\0sub\0:040000 040000 ff 11 M\0d\0:100644 000000 22 0000 D\0gone\0";
        assert_eq!(new_ids_of_diff(out), ["bbbb", "cccc", "11"]);
    }
}
