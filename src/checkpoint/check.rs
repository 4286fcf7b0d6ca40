//! `nop sessions check` for the checkpoint store: every object the sessions' checkpoints name is
//! present and hashes to its id. Nothing is written or repaired; a damaged checkpoint is named
//! so the user knows which undo or rewind would fail before trying it.

use std::collections::{BTreeMap, BTreeSet};
use std::io::BufRead;

use super::{CheckpointError, Checkpoints, Result};

/// What is wrong with one checkpoint (a tree the sessions name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    pub tree: String,
    pub message: String,
}

impl Checkpoints {
    /// Checks the checkpoints `trees` (ids as sessions recorded them; anything that is not an
    /// object id is itself damage): every object each reaches is there and hashes to its id.
    /// Each object is read once, whatever number of checkpoints share it.
    pub fn check(&self, trees: &BTreeSet<String>) -> Result<Vec<Damage>> {
        let (valid, invalid): (Vec<&String>, Vec<&String>) =
            trees.iter().partition(|t| is_object_id(t));
        let mut damage: Vec<Damage> = invalid
            .into_iter()
            .map(|tree| Damage {
                tree: tree.clone(),
                message: "is not an object id".to_string(),
            })
            .collect();
        if valid.is_empty() {
            return Ok(damage);
        }
        if !self.dir.join("objects").is_dir() {
            damage.extend(valid.into_iter().map(|tree| Damage {
                tree: tree.clone(),
                message: format!("has no checkpoint store at {}", self.dir.display()),
            }));
            return Ok(damage);
        }
        let (bad, listed_all) = match self.reachable(&valid) {
            Ok(objects) => (self.verify(objects)?, true),
            Err(e @ CheckpointError::NoGit(_)) => return Err(e),
            // A tree that cannot be listed: each is looked at alone below.
            Err(_) => (BTreeMap::new(), false),
        };
        if bad.is_empty() && listed_all {
            return Ok(damage);
        }
        for tree in valid {
            match self.reachable(&[tree]) {
                Err(e) => damage.push(Damage {
                    tree: tree.clone(),
                    message: format!("cannot be read: {e}"),
                }),
                Ok(objects) => damage.extend(objects.iter().filter_map(|(id, _)| {
                    Some(Damage {
                        tree: tree.clone(),
                        message: format!("object {id} {}", bad.get(id)?),
                    })
                })),
            }
        }
        Ok(damage)
    }

    /// Every object `trees` reach, with whether it is missing: `git rev-list --objects`.
    fn reachable(&self, trees: &[&String]) -> Result<Vec<(String, bool)>> {
        let input: String = trees.iter().map(|t| format!("{t}\n")).collect();
        let out = self.git(
            &[
                "rev-list",
                "--objects",
                "--no-object-names",
                "--missing=print",
                "--stdin",
            ],
            &self.dir.join("index"),
            Some(input.as_bytes()),
        )?;
        Ok(String::from_utf8_lossy(&out)
            .lines()
            .filter(|line| !line.is_empty())
            .map(|line| match line.strip_prefix('?') {
                Some(id) => (id.to_string(), true),
                None => (line.to_string(), false),
            })
            .collect())
    }

    /// The objects of `objects` that are missing or do not hash to their id, with what is wrong.
    fn verify(&self, objects: Vec<(String, bool)>) -> Result<BTreeMap<String, &'static str>> {
        let mut bad: BTreeMap<String, &'static str> = objects
            .iter()
            .filter(|(_, missing)| *missing)
            .map(|(id, _)| (id.clone(), "is missing"))
            .collect();
        let present: Vec<String> = objects
            .into_iter()
            .filter(|(_, missing)| !missing)
            .map(|(id, _)| id)
            .collect();
        if present.is_empty() {
            return Ok(bad);
        }
        let ids: String = present.iter().map(|id| format!("{id}\n")).collect();
        self.cat_batch(ids, |out| {
            for id in &present {
                let mut header = String::new();
                out.read_line(&mut header)
                    .map_err(|e| self.failed("cat-file", e.to_string().as_bytes()))?;
                let fields: Vec<&str> = header.split_whitespace().collect();
                let (kind, size) = match fields.as_slice() {
                    [got, kind, size] if got == id => match size.parse::<u64>() {
                        Ok(size) => (kind.to_string(), size),
                        Err(_) => return Err(self.failed("cat-file", header.as_bytes())),
                    },
                    _ => {
                        bad.insert(id.clone(), "cannot be read");
                        continue;
                    }
                };
                let whole = self.read_object(out, (&kind, id, size), |_| Ok(()))?;
                if !whole {
                    bad.insert(
                        id.clone(),
                        "is damaged (its content does not hash to its id)",
                    );
                }
            }
            Ok(())
        })?;
        Ok(bad)
    }
}

/// Whether `id` is a full object id (SHA-1 or SHA-256, lower-case hex): nothing else read from
/// a session file is ever given to git.
fn is_object_id(id: &str) -> bool {
    matches!(id.len(), 40 | 64) && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn what_a_session_file_names_reaches_git_only_as_an_object_id_and_a_missing_one_is_named() {
        let _serial = super::super::serial();
        let dir = tempfile::tempdir().expect("temp");
        let cp = Checkpoints::new(dir.path(), &dir.path().join(".nop"), 1.0);
        std::fs::write(dir.path().join("a.txt"), "one\n").expect("write");
        let tree = cp.record().expect("record");
        let absent = "0".repeat(40);
        let trees: BTreeSet<String> = [tree.clone(), "--all".to_string(), absent.clone()]
            .into_iter()
            .collect();
        let damage = cp.check(&trees).expect("checked");
        let named: Vec<&str> = damage.iter().map(|d| d.tree.as_str()).collect();
        assert_eq!(named, ["--all", absent.as_str()], "{damage:?}");
        assert_eq!(damage[0].message, "is not an object id");
        assert_eq!(damage[1].message, format!("object {absent} is missing"));
        assert_eq!(
            cp.check(&[tree].into_iter().collect()).expect("checked"),
            []
        );
    }
}
