//! What the last checkpoint saw, kept for the next one (`.nop/checkpoints/scan`), so that a
//! checkpoint looks at the disk once, in process, and runs git only for what changed.
//!
//! Two kinds of stat data are compared with the disk:
//! - every recorded file's, as git keeps it in the private index (read here, compared the way
//!   git's `diff-files` compares: seconds of mtime and ctime, inode, owner, size, type and the
//!   executable bit; an entry as new as the index itself, or one git smudged, counts as changed);
//! - every directory's under the root (`.nop/` and `.git` directories left out; ignored ones
//!   too, since deciding what git ignores is git's), and the files that steer git's listing of
//!   untracked files (`.gitignore`s, `.git` entries, the exclude files, the files left out for
//!   their size). A new file, a removed or renamed one changes its directory's stat data; only
//!   such directories are listed again by git.
//!
//! A directory's stat data taken in the same tick of the file system's clock as a change to it
//! would not show that change: any stat data as new as the checkpoint's start (the `clock`
//! file's mtime, written first) is kept as "racy", which never matches, so the next checkpoint
//! looks again. Stat data is always taken before git reads what it describes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use nix::fcntl::AtFlags;
use nix::sys::stat::{FileStat, SFlag};

use super::objects::Id;
use crate::gitdir::index::{self, slice};

/// The name of the kept record in the store, and of the file whose mtime is a checkpoint's start.
const SAVED: &str = "scan";
pub(super) const CLOCK: &str = "clock";
const HEADER: &str = "nop-scan 1";

/// The stat data of a directory or a steering file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stamp {
    mode: u32,
    ino: u64,
    size: i64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    pub(super) fn of(st: &FileStat) -> Stamp {
        Stamp {
            mode: st.st_mode,
            ino: st.st_ino,
            size: st.st_size,
            mtime: (st.st_mtime, st.st_mtime_nsec),
            ctime: (st.st_ctime, st.st_ctime_nsec),
        }
    }

    /// The stat data of `path` (not following a final symbolic link), `None` when it is absent.
    pub(super) fn take(path: &Path) -> Option<Stamp> {
        nix::sys::stat::lstat(path).ok().map(|st| Stamp::of(&st))
    }

    /// Kept as taken, or as racy when it is as new as the checkpoint's start: with a time no
    /// file has, so it never matches (its inode still tells a directory replaced).
    fn settled(self, clock: (i64, i64)) -> Stamp {
        if self.mtime >= clock || self.ctime >= clock {
            Stamp {
                mtime: (-1, -1),
                ..self
            }
        } else {
            self
        }
    }

    fn is_dir(&self) -> bool {
        self.mode & SFlag::S_IFMT.bits() == SFlag::S_IFDIR.bits()
    }

    fn text(stamp: Option<Stamp>) -> String {
        match stamp {
            None => "- 0 0 0 0 0 0".to_string(),
            Some(s) => format!(
                "{} {} {} {} {} {} {}",
                s.mode, s.ino, s.size, s.mtime.0, s.mtime.1, s.ctime.0, s.ctime.1
            ),
        }
    }

    fn parse(fields: &[&str]) -> Option<Option<Stamp>> {
        if fields.first() == Some(&"-") {
            return Some(None);
        }
        let n = |i: usize| fields.get(i)?.parse::<i64>().ok();
        Some(Some(Stamp {
            mode: u32::try_from(n(0)?).ok()?,
            ino: u64::try_from(n(1)?).ok()?,
            size: n(2)?,
            mtime: (n(3)?, n(4)?),
            ctime: (n(5)?, n(6)?),
        }))
    }
}

/// The start of a checkpoint on the file system's clock: the mtime of the store's `clock` file,
/// written now. Any change after this gets a time at least as late.
pub(super) fn clock(store: &Path) -> std::io::Result<(i64, i64)> {
    use std::os::unix::fs::FileExt;
    // Written in place, never truncated (truncating costs a hundred times more), and with
    // bytes that differ from the last ones, so the file's content tells one checkpoint from
    // the next even within a tick. The mtime is the kernel's own clock, never
    // `SystemTime::now()`, which may run ahead of the coarser one file times come from.
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(store.join(CLOCK))?;
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    file.write_all_at(format!("{stamp:032x}").as_bytes(), 0)?;
    let st = nix::sys::stat::fstat(&file).map_err(std::io::Error::from)?;
    Ok((st.st_mtime, st.st_mtime_nsec))
}

/// What steers git's listing of a file's directory, or the whole listing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Steer {
    /// A `.gitignore` or `.git` entry in its directory (relative path).
    Local,
    /// An exclude file outside the root (absolute path): the whole listing.
    Global,
    /// A file left out for its size (relative path): listed again if it shrinks.
    Large,
}

impl Steer {
    fn letter(self) -> char {
        match self {
            Steer::Local => 'f',
            Steer::Global => 'a',
            Steer::Large => 'l',
        }
    }
}

/// The kept record of the last checkpoint.
#[derive(Debug, Clone, Default)]
pub(super) struct Saved {
    pub tree: String,
    /// Nested git repositories found (relative, never `.`).
    pub nested: Vec<String>,
    index: Option<Stamp>,
    /// The start of the checkpoint whose git last looked at the recorded files: their stat data
    /// in the index was taken after it.
    pub clock: (i64, i64),
    /// The permission files' fingerprint the record was made under (it is read only under
    /// the same).
    pub fingerprint: String,
    max_file_bytes: u64,
    dirs: BTreeMap<String, Stamp>,
    files: BTreeMap<String, (Steer, Option<Stamp>)>,
    /// The files hashed since git last wrote the private index, with their stat data as the
    /// index would hold it (`None`: removed since): `tree` holds them, the index not yet.
    pub delta: BTreeMap<String, Option<Kept>>,
    /// The trees written for them since, by directory ("" for the top): the index's own
    /// (git's cache of trees) are older for these.
    pub trees: BTreeMap<String, Id>,
}

/// The stat data of a file hashed without the index, as the index would hold it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Kept {
    ctime: (u32, u32),
    mtime: (u32, u32),
    ino: u32,
    mode: u32,
    uid: u32,
    gid: u32,
    size: u32,
    oid: Id,
}

impl Kept {
    /// `st` (taken before the file was read), for a file of git mode `mode` hashed to `oid`.
    pub fn of(st: &FileStat, mode: u32, oid: Id) -> Kept {
        Kept {
            oid,
            ctime: (st.st_ctime as u32, st.st_ctime_nsec as u32),
            mtime: (st.st_mtime as u32, st.st_mtime_nsec as u32),
            ino: st.st_ino as u32,
            mode,
            uid: st.st_uid,
            gid: st.st_gid,
            size: st.st_size as u32,
        }
    }

    fn text(&self) -> String {
        format!(
            "{} {} {} {} {} {} {} {} {} {}",
            super::objects::hex(&self.oid),
            self.ctime.0,
            self.ctime.1,
            self.mtime.0,
            self.mtime.1,
            self.ino,
            self.mode,
            self.uid,
            self.gid,
            self.size
        )
    }

    fn parse(fields: &[&str]) -> Option<Kept> {
        let n = |i: usize| fields.get(i + 1)?.parse::<u32>().ok();
        Some(Kept {
            oid: super::objects::from_hex(fields.first()?)?,
            ctime: (n(0)?, n(1)?),
            mtime: (n(2)?, n(3)?),
            ino: n(4)?,
            mode: n(5)?,
            uid: n(6)?,
            gid: n(7)?,
            size: n(8)?,
        })
    }

    fn entry(&self, path: (u32, u32)) -> Entry {
        Entry {
            git: index::Entry {
                ctime: self.ctime,
                mtime: self.mtime,
                ino: self.ino,
                mode: self.mode,
                uid: self.uid,
                gid: self.gid,
                size: self.size,
                oid: self.oid,
                odd: false,
                path,
            },
            own_size: true,
            removed: false,
        }
    }
}

/// What a comparison of the directories with the disk found.
#[derive(Debug, Default)]
pub(super) struct Changes {
    /// Directories whose own entries may have changed ("" for the root): their entries that
    /// are neither recorded nor known directories are listed again.
    pub dirs: BTreeSet<String>,
    /// Directories whose whole content is listed again: what steers git's listing there
    /// changed (a `.gitignore`, a `.git`; "" for an exclude file outside the root), or the
    /// directory was replaced.
    pub trees: BTreeSet<String>,
    /// Directories that are gone or were replaced: every recorded path beneath them changed.
    pub gone: Vec<String>,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.dirs.is_empty() && self.trees.is_empty()
    }
}

/// An entry of a directory listed again ([`Saved::rewalk`]).
#[derive(Debug, Clone)]
pub(super) struct Child {
    pub name: String,
    pub is_dir: bool,
    /// A directory the last checkpoint walked.
    pub known: bool,
}

impl Saved {
    /// The kept record, if there is one this checkpoint can use: made with the same rules
    /// (`fingerprint`) and size limit, for the private index as it is now.
    pub fn read(store: &Path, fingerprint: &str, max_file_bytes: u64) -> Option<Saved> {
        let bytes = std::fs::read(store.join(SAVED)).ok()?;
        let saved = Saved::parse(&bytes)?;
        (saved.fingerprint == fingerprint
            && saved.max_file_bytes == max_file_bytes
            && saved.index.is_some()
            && saved.index == Stamp::take(&store.join("index")))
        .then_some(saved)
    }

    /// The paths of the kept record's delta, whatever the record is worth otherwise: what the
    /// private index may hold stale.
    pub fn unfolded(store: &Path) -> Vec<String> {
        std::fs::read(store.join(SAVED))
            .ok()
            .and_then(|bytes| Saved::parse(&bytes))
            .map(|saved| saved.delta.into_keys().collect())
            .unwrap_or_default()
    }

    fn parse(bytes: &[u8]) -> Option<Saved> {
        let text = std::str::from_utf8(bytes).ok()?;
        let (head, records) = text.split_once("\n\n")?;
        let mut lines = head.lines();
        if lines.next()? != HEADER {
            return None;
        }
        let mut saved = Saved::default();
        for line in lines {
            let (key, value) = line.split_once(' ')?;
            match key {
                "tree" => saved.tree = value.to_string(),
                "index" => {
                    saved.index = Stamp::parse(&value.split(' ').collect::<Vec<_>>())?;
                }
                "rules" => saved.fingerprint = value.to_string(),
                "clock" => {
                    let (s, ns) = value.split_once(' ')?;
                    saved.clock = (s.parse().ok()?, ns.parse().ok()?);
                }
                "max" => saved.max_file_bytes = value.parse().ok()?,
                _ => return None,
            }
        }
        for record in records.split('\0').filter(|r| !r.is_empty()) {
            if let Some(rest) = record.strip_prefix("e ") {
                let fields: Vec<&str> = rest.splitn(11, ' ').collect();
                let kept = Kept::parse(fields.get(..10)?)?;
                saved.delta.insert(fields.get(10)?.to_string(), Some(kept));
                continue;
            }
            if let Some(rest) = record.strip_prefix("t ") {
                let (id, path) = rest.split_once(' ')?;
                saved
                    .trees
                    .insert(path.to_string(), super::objects::from_hex(id)?);
                continue;
            }
            if let Some(path) = record.strip_prefix("x ") {
                saved.delta.insert(path.to_string(), None);
                continue;
            }
            let fields: Vec<&str> = record.splitn(9, ' ').collect();
            let (letter, path) = (*fields.first()?, *fields.get(8)?);
            let stamp = Stamp::parse(fields.get(1..8)?)?;
            match letter {
                "d" => {
                    saved.dirs.insert(path.to_string(), stamp?);
                }
                "f" => {
                    saved.files.insert(path.to_string(), (Steer::Local, stamp));
                }
                "a" => {
                    saved.files.insert(path.to_string(), (Steer::Global, stamp));
                }
                "l" => {
                    saved.files.insert(path.to_string(), (Steer::Large, stamp));
                }
                "n" => saved.nested.push(path.to_string()),
                _ => return None,
            }
        }
        (!saved.tree.is_empty()).then_some(saved)
    }

    /// Writes the record for the private index as it is now (after git's last write to it).
    pub fn write(&mut self, store: &Path, tree: &str, nested: &[String]) -> std::io::Result<()> {
        self.tree = tree.to_string();
        self.nested = nested.iter().filter(|n| *n != ".").cloned().collect();
        self.index = Stamp::take(&store.join("index"));
        let mut text = format!(
            "{HEADER}\ntree {}\nindex {}\nclock {} {}\nrules {}\nmax {}\n\n",
            self.tree,
            Stamp::text(self.index),
            self.clock.0,
            self.clock.1,
            self.fingerprint,
            self.max_file_bytes
        );
        for (path, stamp) in &self.dirs {
            text.push_str(&format!("d {} {path}\0", Stamp::text(Some(*stamp))));
        }
        for (path, (steer, stamp)) in &self.files {
            text.push_str(&format!(
                "{} {} {path}\0",
                steer.letter(),
                Stamp::text(*stamp)
            ));
        }
        for path in &self.nested {
            text.push_str(&format!("n {} {path}\0", Stamp::text(None)));
        }
        for (path, kept) in &self.delta {
            match kept {
                Some(kept) => text.push_str(&format!("e {} {path}\0", kept.text())),
                None => text.push_str(&format!("x {path}\0")),
            }
        }
        for (path, id) in &self.trees {
            text.push_str(&format!("t {} {path}\0", super::objects::hex(id)));
        }
        let temp = store.join(format!("{SAVED}.tmp"));
        let written =
            std::fs::write(&temp, text).and_then(|()| std::fs::rename(&temp, store.join(SAVED)));
        if written.is_err() {
            let _ = std::fs::remove_file(&temp);
        }
        written
    }

    /// A new record, for a checkpoint that lists everything: every directory under `root`
    /// walked (stat data first), with the steering files outside it.
    pub fn fresh(
        root: &Path,
        fingerprint: &str,
        max_file_bytes: u64,
        global: &[PathBuf],
        clock: (i64, i64),
    ) -> Saved {
        let mut saved = Saved {
            fingerprint: fingerprint.to_string(),
            max_file_bytes,
            clock,
            ..Saved::default()
        };
        saved.walk(root, "", clock);
        for path in global {
            saved.files.insert(
                path.to_string_lossy().into_owned(),
                (Steer::Global, Stamp::take(path).map(|s| s.settled(clock))),
            );
        }
        saved
    }

    /// The files left out for their size, as the checkpoint leaves them.
    pub fn set_large(&mut self, root: &Path, large: &BTreeSet<String>, clock: (i64, i64)) {
        self.files.retain(|_, (steer, _)| *steer != Steer::Large);
        for path in large {
            let stamp = Stamp::take(&root.join(path)).map(|s| s.settled(clock));
            self.files.insert(path.clone(), (Steer::Large, stamp));
        }
    }

    /// The directories whose listing may have changed since the record, and the recorded paths
    /// beneath a directory that is gone or was replaced. Stat data only, no listing.
    pub fn changed_dirs(&self, root: &Path) -> Changes {
        let mut changes = Changes::default();
        for (path, stamp) in &self.dirs {
            // Beneath a directory that is gone (each comes after its parent): its path may now
            // lead through a link out of the root, so it is not looked at.
            if changes.gone.iter().any(|g| super::beneath(path, g)) {
                continue;
            }
            let now = Stamp::take(&join(root, path));
            if now == Some(*stamp) {
                continue;
            }
            match now {
                Some(now) if now.is_dir() && now.ino == stamp.ino => {
                    changes.dirs.insert(path.clone());
                }
                Some(now) if now.is_dir() => {
                    changes.gone.push(path.clone());
                    changes.trees.insert(path.clone());
                    changes.dirs.insert(parent(path).to_string());
                }
                _ => {
                    changes.gone.push(path.clone());
                    changes.dirs.insert(parent(path).to_string());
                }
            }
        }
        for (path, (steer, stamp)) in &self.files {
            let full = match steer {
                Steer::Global => PathBuf::from(path),
                Steer::Local | Steer::Large => root.join(path),
            };
            if Stamp::take(&full) == *stamp {
                continue;
            }
            match steer {
                Steer::Global => changes.trees.insert(String::new()),
                Steer::Local => changes.trees.insert(parent(path).to_string()),
                Steer::Large => changes.dirs.insert(parent(path).to_string()),
            };
        }
        changes
    }

    /// Walks the directories `trees` again whole, before git lists them: what was recorded
    /// beneath them is forgotten first.
    pub fn rewalk_trees(&mut self, root: &Path, trees: &BTreeSet<String>, clock: (i64, i64)) {
        for tree in trees {
            if tree.is_empty() {
                self.dirs.clear();
                self.files.retain(|_, (steer, _)| *steer == Steer::Global);
            } else {
                self.forget(tree);
            }
            self.walk(root, tree, clock);
        }
        self.restamp_globals(clock);
    }

    /// Walks the directories `dirs` again before git lists them: new subdirectories are walked
    /// whole, vanished ones forgotten, steering files stamped afresh. Returns each one's
    /// entries.
    pub fn rewalk(
        &mut self,
        root: &Path,
        dirs: &BTreeSet<String>,
        clock: (i64, i64),
    ) -> BTreeMap<String, Vec<Child>> {
        let mut listed = BTreeMap::new();
        for dir in dirs {
            if !self.dirs.contains_key(dir) && !dir.is_empty() {
                // Beneath a directory already walked again (or gone with it).
                continue;
            }
            let Some(stamp) = Stamp::take(&join(root, dir)).filter(Stamp::is_dir) else {
                self.forget(dir);
                continue;
            };
            self.dirs.insert(dir.clone(), stamp.settled(clock));
            self.files
                .retain(|p, (steer, _)| *steer != Steer::Local || parent(p) != dir.as_str());
            let mut children = Vec::new();
            for (name, is_dir) in listing(root, dir) {
                let rel = child(dir, &name);
                let known = is_dir && self.dirs.contains_key(&rel);
                if is_dir && !known {
                    self.walk(root, &rel, clock);
                } else if !is_dir && is_steering(dir, &name) {
                    let stamp = Stamp::take(&root.join(&rel)).map(|s| s.settled(clock));
                    self.files.insert(rel, (Steer::Local, stamp));
                }
                children.push(Child {
                    name,
                    is_dir,
                    known,
                });
            }
            let present: BTreeSet<String> = children
                .iter()
                .filter(|c| c.is_dir)
                .map(|c| child(dir, &c.name))
                .collect();
            let stale: Vec<String> = self
                .dirs
                .keys()
                .filter(|d| parent(d) == dir.as_str() && !d.is_empty() && !present.contains(*d))
                .cloned()
                .collect();
            for d in stale {
                self.forget(&d);
            }
            listed.insert(dir.clone(), children);
        }
        self.restamp_globals(clock);
        listed
    }

    /// Takes the stat data of the exclude files outside the root again (before git reads them).
    pub fn restamp_globals(&mut self, clock: (i64, i64)) {
        for (path, (steer, stamp)) in self.files.iter_mut() {
            if *steer == Steer::Global {
                *stamp = Stamp::take(Path::new(path)).map(|s| s.settled(clock));
            }
        }
    }

    /// Forgets `dir` and everything recorded beneath it.
    fn forget(&mut self, dir: &str) {
        let beneath = |p: &String| p == dir || super::beneath(p, dir);
        self.dirs.retain(|p, _| !beneath(p));
        self.files
            .retain(|p, (steer, _)| *steer == Steer::Global || !beneath(p));
    }

    /// Walks `dir` (relative to `root`) and everything beneath it: each directory's stat data
    /// is taken before it is read.
    fn walk(&mut self, root: &Path, dir: &str, clock: (i64, i64)) {
        let mut stack = vec![dir.to_string()];
        while let Some(dir) = stack.pop() {
            let Some(stamp) = Stamp::take(&join(root, &dir)).filter(Stamp::is_dir) else {
                continue;
            };
            self.dirs.insert(dir.clone(), stamp.settled(clock));
            for (name, is_dir) in listing(root, &dir) {
                let rel = child(&dir, &name);
                if is_dir {
                    stack.push(rel);
                } else if is_steering(&dir, &name) {
                    let stamp = Stamp::take(&root.join(&rel)).map(|s| s.settled(clock));
                    self.files.insert(rel, (Steer::Local, stamp));
                }
            }
        }
    }

    /// A `.gitignore` walked that git would wait on for ever as it lists (a named pipe, a
    /// device): its path, relative to the root.
    pub fn blocking_ignore(&self) -> Option<&str> {
        self.files.iter().find_map(|(path, (steer, stamp))| {
            let kind = stamp.as_ref()?.mode & SFlag::S_IFMT.bits();
            let blocks = kind == SFlag::S_IFIFO.bits()
                || kind == SFlag::S_IFCHR.bits()
                || kind == SFlag::S_IFBLK.bits();
            (*steer == Steer::Local && path.rsplit('/').next() == Some(".gitignore") && blocks)
                .then_some(path.as_str())
        })
    }

    /// The directories walked, relative to the root ("" for the root): what a watch watches.
    pub fn dirs(&self) -> impl Iterator<Item = &str> {
        self.dirs.keys().map(String::as_str)
    }

    /// What steers git's listing from where a watch does not hear, with the stat data taken
    /// before git read it: the exclude files outside the root, the nested repositories' `.git`s.
    pub fn unwatched(&self, root: &Path) -> Vec<(PathBuf, Option<Stamp>)> {
        self.files
            .iter()
            .filter_map(|(p, (steer, stamp))| match steer {
                Steer::Global => Some((PathBuf::from(p), *stamp)),
                Steer::Local if p.rsplit('/').next() == Some(".git") => {
                    Some((root.join(p), *stamp))
                }
                Steer::Local | Steer::Large => None,
            })
            .collect()
    }
}

/// The entries of `dir` worth walking: subdirectories (not `.git`, not the root's `.nop`, never
/// through a symbolic link) as `true`, the rest as `false`.
fn listing(root: &Path, dir: &str) -> Vec<(String, bool)> {
    let Ok(entries) = std::fs::read_dir(join(root, dir)) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            let walked = is_dir && name != ".git" && !(dir.is_empty() && name == ".nop");
            (name, walked)
        })
        .collect()
}

/// Files whose change can change what git lists in their directory: its `.gitignore`, and a
/// `.git` that makes it a nested repository (the root's own is git's business: it changes with
/// every `git add`).
fn is_steering(dir: &str, name: &str) -> bool {
    name == ".gitignore" || (name == ".git" && !dir.is_empty())
}

fn join(root: &Path, rel: &str) -> PathBuf {
    if rel.is_empty() {
        root.to_path_buf()
    } else {
        root.join(rel)
    }
}

fn child(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// The directory `path` is in ("" for the root).
pub(super) fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(p, _)| p)
}

/// What the comparison of the recorded files with the private index found.
#[derive(Debug, Default)]
pub(super) struct Tracked {
    /// Paths whose stat data differs (changed, removed, beneath a replaced directory, or as
    /// new as the checkpoint that took it), as git's `diff-files` would list them and more.
    pub paths: BTreeSet<String>,
    /// Those of `paths` whose difference git cannot see by their stat data (below a second, or
    /// racy by nop's clock only): git must forget them before it hashes them again, or it
    /// would keep the old stat data and hash nothing.
    pub stale: BTreeSet<String>,
    /// Recorded files with more than one link, with their stat data: a write through another
    /// of their names may come from outside the tree, where no watch hears it.
    pub linked: Vec<(String, Stamp)>,
    /// Whether a file in doubt was found unchanged by its content: from now on its stat data
    /// proves it (the record may say so with this checkpoint's start).
    pub verified: bool,
}

/// The private index as read here: its entries, their paths (one buffer), and its own mtime
/// (seconds).
pub(super) struct Index {
    entries: Vec<Entry>,
    paths: Vec<u8>,
    mtime: i64,
    /// git's cache of trees: each directory's tree as the index last had it written.
    trees: HashMap<String, Id>,
}

impl Index {
    /// The index with `delta` over it: what the last checkpoint recorded. `None` when the
    /// index cannot be read here (a format this reader does not know).
    pub fn read(path: &Path, delta: &BTreeMap<String, Option<Kept>>) -> Option<Index> {
        let bytes = std::fs::read(path).ok()?;
        let mtime = nix::sys::stat::lstat(path).ok()?.st_mtime;
        let index::Index {
            entries,
            mut paths,
            trees,
        } = index::parse(&bytes)?;
        let mut entries: Vec<Entry> = entries.into_iter().map(Entry::from).collect();
        if !delta.is_empty() {
            // The delta's paths go to the end of the buffer; then both, in git's order (bytes),
            // are merged.
            let over: Vec<((u32, u32), &Option<Kept>)> = delta
                .iter()
                .map(|(path, kept)| {
                    let start = paths.len() as u32;
                    paths.extend_from_slice(path.as_bytes());
                    ((start, path.len() as u32), kept)
                })
                .collect();
            let mut over = over.into_iter().peekable();
            let mut merged = Vec::with_capacity(entries.len() + delta.len());
            for entry in entries {
                let name = slice(&paths, entry.git.path);
                while let Some((at, kept)) = over.next_if(|(at, _)| slice(&paths, *at) < name) {
                    merged.extend(kept.map(|k| k.entry(at)));
                }
                match over.next_if(|(at, _)| slice(&paths, *at) == name) {
                    Some((at, Some(kept))) => merged.push(kept.entry(at)),
                    Some((_, None)) => merged.push(Entry {
                        removed: true,
                        ..entry
                    }),
                    None => merged.push(entry),
                }
            }
            merged.extend(over.filter_map(|(at, kept)| kept.map(|k| k.entry(at))));
            entries = merged;
        }
        Some(Index {
            entries,
            paths,
            mtime,
            trees,
        })
    }

    fn path(&self, e: &Entry) -> &[u8] {
        slice(&self.paths, e.git.path)
    }

    /// The recorded paths whose directory is one of `dirs` (relative to the root).
    pub fn children(&self, dirs: &BTreeSet<&str>) -> std::collections::HashSet<String> {
        self.entries
            .iter()
            .filter(|e| !e.removed)
            .map(|e| String::from_utf8_lossy(self.path(e)))
            .filter(|path| dirs.contains(parent(path)))
            .map(|path| path.into_owned())
            .collect()
    }

    /// The recorded files whose path starts with `prefix` ("" for all, else a directory and
    /// '/'): the rest of each path, its git mode and object.
    pub fn under<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = (&'a str, u32, Id)> + 'a {
        let start = self
            .entries
            .partition_point(|e| self.path(e) < prefix.as_bytes());
        self.entries[start..]
            .iter()
            .map(|e| (self.path(e), e))
            .take_while(move |(path, _)| path.starts_with(prefix.as_bytes()))
            .filter(|(_, e)| !e.removed)
            .filter_map(move |(path, e)| {
                let rest = std::str::from_utf8(&path[prefix.len()..]).ok()?;
                Some((rest, e.git.mode, e.git.oid))
            })
    }

    /// The tree git's cache of trees names for `dir` ("" for the top), if still valid there.
    pub fn cached_tree(&self, dir: &str) -> Option<&Id> {
        self.trees.get(dir)
    }

    /// Whether `path` is recorded.
    pub fn contains(&self, path: &str) -> bool {
        self.entries
            .binary_search_by(|e| self.path(e).cmp(path.as_bytes()))
            .is_ok_and(|i| !self.entries[i].removed)
    }
}

/// Compares every recorded file with the private index's stat data, taken after `clock`, and
/// adds every recorded path beneath the directories `gone` (replaced or removed).
pub(super) fn tracked_changes(
    root: &Path,
    index: &Index,
    gone: &[String],
    clock: (i64, i64),
) -> Option<Tracked> {
    let (entries, index_mtime, names) = (&index.entries, index.mtime, &index.paths);
    let verified = std::sync::atomic::AtomicBool::new(false);
    let verified = &verified;
    let root_dir = std::fs::File::open(root).ok()?;
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 4);
    let threads = if entries.len() < 512 { 1 } else { threads };
    let chunk = entries.len().div_ceil(threads).max(1);
    let looked: Option<Vec<(usize, Verdict, Option<Stamp>)>> = std::thread::scope(|scope| {
        let workers: Vec<_> = entries
            .chunks(chunk)
            .enumerate()
            .map(|(n, part)| {
                let dir = &root_dir;
                scope.spawn(move || {
                    let name = |e: &Entry| OsStr::from_bytes(slice(names, e.git.path));
                    part.iter()
                        .enumerate()
                        .filter_map(|(i, e)| {
                            let st =
                                nix::sys::stat::fstatat(dir, name(e), AtFlags::AT_SYMLINK_NOFOLLOW);
                            let (verdict, linked) = match st {
                                // Recorded as removed: there again.
                                Ok(_) if e.removed => (Verdict::Changed, None),
                                Ok(st) => {
                                    let verdict = match e.compare(&st, index_mtime, clock) {
                                        Verdict::Doubt { .. }
                                            if e.holds(&root.join(name(e)), st.st_size as u64) =>
                                        {
                                            // Unchanged, and known so from now on.
                                            verified.store(true, Ordering::Relaxed);
                                            Verdict::Same
                                        }
                                        verdict => verdict,
                                    };
                                    (verdict, (st.st_nlink > 1).then(|| Stamp::of(&st)))
                                }
                                Err(_) if e.removed => (Verdict::Same, None),
                                Err(_) => (Verdict::Changed, None),
                            };
                            (verdict != Verdict::Same || linked.is_some()).then_some((
                                n * chunk + i,
                                verdict,
                                linked,
                            ))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut all = Vec::new();
        for worker in workers {
            // A worker that failed proves nothing: no answer rather than a wrong one.
            all.extend(worker.join().ok()?);
        }
        Some(all)
    });
    let mut tracked = Tracked {
        verified: verified.load(Ordering::Relaxed),
        ..Tracked::default()
    };
    for (i, verdict, linked) in looked? {
        let path = String::from_utf8_lossy(index.path(&entries[i])).into_owned();
        if let Some(stamp) = linked {
            tracked.linked.push((path.clone(), stamp));
        }
        match verdict {
            Verdict::Same => continue,
            Verdict::Doubt { git_sees: false } => {
                tracked.stale.insert(path.clone());
            }
            Verdict::Doubt { git_sees: true } | Verdict::Changed => {}
        }
        tracked.paths.insert(path);
    }
    if !gone.is_empty() {
        for e in entries {
            let path = String::from_utf8_lossy(index.path(e));
            if !e.removed && gone.iter().any(|g| path.starts_with(&format!("{g}/"))) {
                tracked.paths.insert(path.into_owned());
            }
        }
    }
    Some(tracked)
}

/// One entry of the private index, or of the delta recorded over it.
#[derive(Debug, Clone)]
pub(super) struct Entry {
    git: index::Entry,
    /// Whether a size of 0 is the file's own, not git's smudge: the empty blob's, or one kept
    /// here.
    own_size: bool,
    /// Recorded as removed since git wrote the index ([`Saved::delta`]).
    removed: bool,
}

impl From<index::Entry> for Entry {
    fn from(git: index::Entry) -> Entry {
        Entry {
            own_size: git.oid == EMPTY_BLOB,
            git,
            removed: false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Same,
    Changed,
    /// The stat data is git's, but racy or different below a second: the content decides.
    /// `git_sees`: whether git would look at the content too (see [`Tracked::stale`]).
    Doubt {
        git_sees: bool,
    },
}

/// A file in doubt larger than this is hashed by git, not here.
const MAX_VERIFIED: u64 = 8 * 1024 * 1024;

/// The empty blob's SHA-1.
const EMPTY_BLOB: [u8; 20] = [
    0xe6, 0x9d, 0xe2, 0x9b, 0xb2, 0xd1, 0xd6, 0x43, 0x4b, 0x8b, 0x29, 0xae, 0x77, 0x5a, 0xd8, 0xc2,
    0xe4, 0x8c, 0x53, 0x91,
];

impl Entry {
    /// Compares the file with the entry: what git's `ie_match_stat` compares (type, executable
    /// bit, owner, inode, size, times; never the device), the times to the nanosecond. Stat
    /// data as new as `clock` (the start of the checkpoint whose git took it) proves nothing:
    /// the file may have changed again in the same tick of the file system's clock. Stat data
    /// older than it does: git read the file after `clock`, and any change since would have
    /// given the file a later change time.
    fn compare(&self, st: &FileStat, index_mtime: i64, clock: (i64, i64)) -> Verdict {
        let git = &self.git;
        const S_IFMT: u32 = 0o170000;
        const S_IFREG: u32 = 0o100000;
        const S_IFLNK: u32 = 0o120000;
        let kind = st.st_mode & S_IFMT;
        let type_changed = match git.mode & S_IFMT {
            S_IFREG => kind != S_IFREG || (git.mode ^ st.st_mode) & 0o100 != 0,
            S_IFLNK => kind != S_IFLNK,
            _ => true, // a gitlink, which checkpoints never record
        };
        let whole = |t: (u32, u32)| (i64::from(t.0), i64::from(t.1));
        // git's smudge of an entry as new as the index it wrote: its size no longer says
        // anything, its times still do.
        let smudged = git.size == 0 && !self.own_size;
        if git.odd
            || type_changed
            || git.uid != st.st_uid
            || git.gid != st.st_gid
            || git.ino != st.st_ino as u32
            || (!smudged && git.size != st.st_size as u32)
            || git.mtime.0 != st.st_mtime as u32
            || git.ctime.0 != st.st_ctime as u32
        {
            return Verdict::Changed;
        }
        let fraction =
            git.mtime.1 != st.st_mtime_nsec as u32 || git.ctime.1 != st.st_ctime_nsec as u32;
        if !fraction && whole(git.mtime) < clock && whole(git.ctime) < clock {
            return Verdict::Same;
        }
        // Only the content tells now. git would look at it for a smudged entry or one as new
        // as its index (racily clean), and at nothing else whose whole seconds match.
        Verdict::Doubt {
            git_sees: smudged || i64::from(git.mtime.0) >= index_mtime,
        }
    }

    /// Whether the file's content (of size `size`, by its stat data) is still the entry's
    /// object: hashed here, not written.
    fn holds(&self, path: &Path, size: u64) -> bool {
        const S_IFLNK: u32 = 0o120000;
        size <= MAX_VERIFIED
            && super::objects::blob_id(path, self.git.mode & 0o170000 == S_IFLNK, size)
                .is_ok_and(|id| id == self.git.oid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn a_new_file_changes_its_directory_and_a_racy_stamp_never_matches() {
        let dir = tempfile::tempdir().expect("temp");
        let root = dir.path();
        std::fs::create_dir_all(root.join("a/b")).expect("mkdir");
        std::fs::create_dir_all(root.join(".nop/x")).expect("mkdir");
        std::fs::create_dir_all(root.join(".git/objects")).expect("mkdir");
        let far = (i64::MAX, 0);
        let saved = Saved::fresh(root, "r", 1, &[], far);
        assert_eq!(saved.dirs().collect::<Vec<_>>(), ["", "a", "a/b"]);
        assert!(saved.changed_dirs(root).is_empty());
        std::fs::write(root.join("a/b/new"), "x").expect("write");
        assert_eq!(
            saved
                .changed_dirs(root)
                .dirs
                .into_iter()
                .collect::<Vec<_>>(),
            ["a/b"]
        );
        let racy = Saved::fresh(root, "r", 1, &[], (0, 0));
        let changes = racy.changed_dirs(root);
        assert_eq!((changes.dirs.len(), changes.trees.len()), (3, 0));
    }

    #[test]
    fn a_directory_replaced_by_a_link_out_of_the_root_is_gone_and_nothing_beneath_is_walked() {
        // The agent records `x/usr`, then swaps `x` for a link to a tree outside the root
        // that has a `usr` of its own: nothing out there may be looked at again.
        let dir = tempfile::tempdir().expect("temp");
        let root = dir.path().join("root");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(root.join("x/usr/deep")).expect("mkdir");
        std::fs::create_dir_all(outside.join("usr/deep")).expect("mkdir");
        let far = (i64::MAX, 0);
        let mut saved = Saved::fresh(&root, "r", 1, &[], far);
        std::fs::remove_dir_all(root.join("x")).expect("rm");
        std::os::unix::fs::symlink(&outside, root.join("x")).expect("link");
        let changes = saved.changed_dirs(&root);
        assert_eq!(changes.gone, ["x"]);
        assert!(changes.trees.is_empty(), "{:?}", changes.trees);
        assert_eq!(changes.dirs.iter().collect::<Vec<_>>(), [""]);
        saved.rewalk_trees(&root, &changes.trees, far);
        saved.rewalk(&root, &changes.dirs, far);
        assert_eq!(saved.dirs().collect::<Vec<_>>(), [""]);
    }
}
