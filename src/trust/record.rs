//! The record of what the user trusted, one JSON file per repository outside it:
//! `$XDG_STATE_HOME/nop/trust/<hash of the repository's path>.json` (`~/.local/state/nop/trust`
//! by default). Each entry is a facet's key (`.claude/settings.json#hooks`, `tools/server.py`)
//! with the SHA-256 of what it held when trusted and, when short, its text (to show a diff when
//! it changes). The agent's shell never reaches it: nop's floor masks the directory wherever it
//! is, and nop makes it before any command runs, so that there is something to mask.
//!
//! A record that cannot be read (not JSON, not the user's own file, writable by others) trusts
//! nothing and is never overwritten: fail closed, and say which file.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Content, Facet};

/// The largest record read (thousands of entries).
const MAX_RECORD: u64 = 32 << 20;

/// Where records are kept: `$XDG_STATE_HOME/nop/trust`, else `$HOME/.local/state/nop/trust`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Store {
    dir: PathBuf,
}

impl Store {
    /// The store of the user whose environment is `env`; `None` without an absolute HOME (and
    /// no XDG_STATE_HOME): then nothing of a repository's is trusted.
    pub fn from_env(env: &BTreeMap<String, String>) -> Option<Store> {
        let absolute = |key: &str| env.get(key).map(PathBuf::from).filter(|p| p.is_absolute());
        let state = absolute("XDG_STATE_HOME")
            .or_else(|| absolute("HOME").map(|h| h.join(".local/state")))?;
        Some(Store {
            dir: state.join("nop/trust"),
        })
    }

    pub fn at(dir: PathBuf) -> Store {
        Store { dir }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Makes the directory (owner only), so that the sandbox has a path to mask.
    pub fn ensure(&self) -> std::io::Result<()> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
    }

    /// The record of the repository whose work tree's top is `top`.
    pub fn file_for(&self, top: &Path) -> PathBuf {
        let digest =
            ring::digest::digest(&ring::digest::SHA256, top.as_os_str().as_encoded_bytes());
        let name: String = digest.as_ref()[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        self.dir.join(format!("{name}.json"))
    }
}

/// A repository as the record knows it: the top of its work tree (the keys are relative to it)
/// and, for a linked worktree, the main work tree's top, whose record it inherits by content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Base {
    pub top: PathBuf,
    pub main: Option<PathBuf>,
}

impl Base {
    /// The repository `root` (canonical) is in: its git work tree, else `root` itself.
    pub fn of(root: &Path) -> Base {
        let Some(repo) = crate::gitdir::find(root) else {
            return Base {
                top: root.to_path_buf(),
                main: None,
            };
        };
        let main = (repo.gitdir != repo.common)
            .then(|| {
                repo.common
                    .file_name()
                    .filter(|n| *n == ".git")
                    .and(repo.common.parent())
                    .map(Path::to_path_buf)
            })
            .flatten()
            .filter(|m| *m != repo.top);
        Base {
            top: repo.top,
            main,
        }
    }

    /// The key of `path` (absolute, normal): relative to the top inside it, else the path.
    pub fn key(&self, path: &Path) -> String {
        match path.strip_prefix(&self.top) {
            Ok(rel) => rel.to_string_lossy().into_owned(),
            Err(_) => path.to_string_lossy().into_owned(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub sha256: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    pub at: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    repository: PathBuf,
    #[serde(default)]
    trusted: BTreeMap<String, Entry>,
    /// Keys taken back here: what the main work tree trusts does not count for them.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    revoked: BTreeSet<String>,
}

/// Why the record cannot be used: nothing is trusted until it is fixed or removed.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}: {why}; nothing of this repository is trusted until it is fixed or removed", path.display())]
pub struct RecordError {
    pub path: PathBuf,
    pub why: String,
}

/// What the user trusted in one repository (and, for a linked worktree, in its main work tree).
#[derive(Debug, Clone)]
pub struct Record {
    base: Base,
    path: Option<PathBuf>,
    own: File,
    inherited: Option<File>,
    /// Why the record could not be read: then it trusts nothing.
    broken: Option<RecordError>,
}

impl Record {
    /// The record of `base` in `store` (an empty one when there is none yet; one that trusts
    /// nothing, saying why, when it cannot be read or without a store).
    pub fn load(store: Option<&Store>, base: &Base) -> Record {
        let mut record = Record {
            base: base.clone(),
            path: None,
            own: File::default(),
            inherited: None,
            broken: None,
        };
        let Some(store) = store else {
            return record;
        };
        let path = store.file_for(&base.top);
        match read(&path, &base.top) {
            Ok(file) => record.own = file.unwrap_or_default(),
            Err(why) => {
                record.broken = Some(RecordError {
                    path: path.clone(),
                    why,
                })
            }
        }
        record.path = Some(path);
        if let Some(main) = &base.main {
            // The main work tree's record counts only where it reads well.
            record.inherited = read(&store.file_for(main), main).ok().flatten();
        }
        record
    }

    pub fn base(&self) -> &Base {
        &self.base
    }

    /// Why this record trusts nothing, if it cannot be read.
    pub fn broken(&self) -> Option<&RecordError> {
        self.broken.as_ref()
    }

    /// Whether `facet` holds what the user trusted (an empty facet always does).
    pub fn trusts(&self, facet: &Facet) -> bool {
        match &facet.content {
            None => true,
            Some(Content::Untrustable(_)) => false,
            Some(Content::Held { sha256, .. }) => {
                if self.broken.is_some() {
                    return false;
                }
                let same = |file: &File| {
                    file.trusted
                        .get(&facet.key)
                        .is_some_and(|e| e.sha256 == *sha256)
                };
                same(&self.own)
                    || (!self.own.revoked.contains(&facet.key)
                        && self.inherited.as_ref().is_some_and(same))
            }
        }
    }

    /// What `key` held when it was last trusted (here, else in the main work tree).
    pub fn previous(&self, key: &str) -> Option<&Entry> {
        self.own.trusted.get(key).or_else(|| {
            (!self.own.revoked.contains(key))
                .then(|| self.inherited.as_ref()?.trusted.get(key))
                .flatten()
        })
    }

    /// Records `facets` as trusted with what they hold now, under the record's lock, read
    /// again first so that another process's entries stay. Refused for a record that cannot be
    /// read, or without a store.
    pub fn accept(
        store: Option<&Store>,
        base: &Base,
        facets: &[&Facet],
    ) -> Result<(), RecordError> {
        Record::change(store, base, |file| {
            let at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
            for facet in facets {
                let Some(Content::Held { sha256, text }) = &facet.content else {
                    continue;
                };
                file.revoked.remove(&facet.key);
                file.trusted.insert(
                    facet.key.clone(),
                    Entry {
                        sha256: sha256.clone(),
                        text: text.clone(),
                        at: at.clone(),
                    },
                );
            }
            0
        })
        .map(drop)
    }

    /// Takes back every entry of `key` (a file, its facets, or a directory's files); returns
    /// how many.
    pub fn revoke(store: Option<&Store>, base: &Base, key: &str) -> Result<usize, RecordError> {
        let key = key.trim_end_matches('/').to_string();
        let inherited = Record::load(store, base).inherited;
        Record::change(store, base, |file| {
            let matches = |k: &str| {
                k == key
                    || k.strip_prefix(key.as_str())
                        .is_some_and(|rest| rest.starts_with('#') || rest.starts_with('/'))
                    || key.is_empty()
            };
            let before = file.trusted.len();
            file.trusted.retain(|k, _| !matches(k));
            let mut taken = before - file.trusted.len();
            for k in inherited.iter().flat_map(|f| f.trusted.keys()) {
                if matches(k) && file.revoked.insert(k.clone()) {
                    taken += 1;
                }
            }
            taken
        })
    }

    fn change(
        store: Option<&Store>,
        base: &Base,
        edit: impl FnOnce(&mut File) -> usize,
    ) -> Result<usize, RecordError> {
        let Some(store) = store else {
            return Err(RecordError {
                path: PathBuf::from("~/.local/state/nop/trust"),
                why: "neither HOME nor XDG_STATE_HOME is an absolute path, so nop has nowhere \
                      to keep what you trust"
                    .into(),
            });
        };
        let path = store.file_for(&base.top);
        let error = |why: String| RecordError {
            path: path.clone(),
            why,
        };
        store.ensure().map_err(|e| error(e.to_string()))?;
        let lock_path = path.with_extension("lock");
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&lock_path)
            .map_err(|e| error(format!("cannot open its lock: {e}")))?;
        let _held = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| error(format!("cannot lock it: {e}")))?;
        let mut file = read(&path, &base.top)
            .map_err(error)?
            .unwrap_or_else(|| File {
                repository: base.top.clone(),
                ..File::default()
            });
        let changed = edit(&mut file);
        let bytes = serde_json::to_vec_pretty(&file).map_err(|e| error(e.to_string()))?;
        crate::session::write_atomic(&path, &bytes).map_err(|e| error(e.to_string()))?;
        let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600));
        Ok(changed)
    }
}

/// The record at `path` for the repository `top`; `Ok(None)` when there is none.
fn read(path: &Path, top: &Path) -> Result<Option<File>, String> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    if !meta.is_file() {
        return Err("it is not a regular file".into());
    }
    if meta.uid() != nix::unistd::geteuid().as_raw() {
        return Err("it is not your own file".into());
    }
    if meta.mode() & 0o022 != 0 {
        return Err("others may write it".into());
    }
    let bytes = match crate::capped_file::read(path, MAX_RECORD) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    let file: File =
        serde_json::from_slice(&bytes).map_err(|e| format!("it is not a trust record ({e})"))?;
    if file.repository != top {
        return Err(format!(
            "it is the record of {}, not of {}",
            file.repository.display(),
            top.display()
        ));
    }
    Ok(Some(file))
}
