//! Recording a checkpoint: the working tree as a tree of the store, at the cost of one look at
//! the disk when little changed.
//!
//! The look is in process ([`super::scan`]): the stat data of every recorded file against the
//! private index's, and of every directory against the last checkpoint's. Nothing changed: the
//! last tree again, no git at all. Something changed: git lists the untracked files of the
//! directories whose listing changed, and hashes only the changed paths into the private index
//! before writing the tree. Without a usable record of the last checkpoint (the first one, new
//! rules, an index changed by something else), git compares and lists everything.

use std::collections::BTreeSet;
use std::path::Path;

use super::ignored::Excludes;
use super::scan::{self, Saved};
use super::{Checkpoints, How, Recorded, Result, Rules, beneath, io, nul_list, split_z};

impl Checkpoints {
    /// Records the working tree as it is now: its tree id, and the nested git repositories
    /// found in it (left out).
    ///
    /// What is left out is decided here, by nop's rules, not by the ignore files the agent can
    /// write: nothing under `.nop/` or `.git/`, nothing a rule of any agent denies reading.
    pub fn record_full(&self) -> Result<Recorded> {
        self.record_with(false)
    }

    /// Records the working tree as a run begins. With a [`Watch`](super::Watch) that vouches
    /// that nothing changed since this process's last checkpoint (nothing but the user can
    /// have acted since: no tool ran), that checkpoint's tree, without a look at the disk.
    pub fn record_at_start(&self) -> Result<Recorded> {
        self.record_with(true)
    }

    fn record_with(&self, quiet_will_do: bool) -> Result<Recorded> {
        let _lock = self.lock()?;
        self.ensure_store()?;
        if quiet_will_do {
            // As a run begins, off the way of its first request: the packs of earlier
            // checkpoints stay few.
            let objects = self.dir.join("objects");
            if let Err(e) = super::objects::roll_up(&objects) {
                tracing::warn!(
                    op = "checkpoint",
                    result = "partial",
                    "rolling up packs: {e}"
                );
            }
        }
        let fingerprint = Rules::fingerprint(&self.root);
        let fingerprint = fingerprint.trim();
        let mut watching = self.watch.as_ref().map(|w| w.lock());
        if quiet_will_do
            && let Some(state) = watching.as_deref_mut()
            && let Some(mut recorded) = state.quiet(fingerprint, &self.dir.join(scan::CLOCK))
        {
            recorded.how = How::Watched;
            recorded.nested = self.with_root_repository(recorded.nested);
            return Ok(recorded);
        }
        let saved = Saved::read(&self.dir, fingerprint, self.max_file_bytes);
        if let Some(state) = watching.as_deref_mut() {
            state.prepare(&self.root, saved.iter().flat_map(|s| s.dirs()));
        }
        let clock = scan::clock(&self.dir).map_err(io(&self.dir))?;
        let changed = match saved {
            Some(saved) => self.record_changes(saved, clock)?,
            None => None,
        };
        let done = match changed {
            Some(done) => done,
            None => self.record_everything(fingerprint, clock)?,
        };
        tracing::debug!(op = "checkpoint", result = ?done.recorded.how, "recorded");
        if let Some(state) = watching.as_deref_mut() {
            let mut outside = done.saved.unwatched(&self.root);
            let linked = done.linked.map(|linked| {
                let n = linked.len();
                outside.extend(
                    linked
                        .into_iter()
                        .map(|(p, s)| (self.root.join(p), Some(s))),
                );
                n
            });
            state.recorded(
                &self.root,
                done.saved.dirs(),
                &done.recorded,
                (fingerprint, &self.dir.join(scan::CLOCK)),
                outside,
                linked,
            );
        }
        if quiet_will_do {
            // The run's checkpoint of its changes is what the user waits for.
            Excludes::warm(&self.root, &self.exclude_files());
        }
        // What it names of the repository's objects becomes the store's own: a history the
        // user rewrites and prunes never takes a checkpoint with it.
        if let Err(e) = self.pin(&done.recorded.tree, done.from.as_deref()) {
            tracing::warn!(
                op = "checkpoint",
                result = "partial",
                "copying the repository's objects it names: {e}"
            );
        }
        Ok(done.recorded)
    }

    /// A checkpoint that lists everything: every directory walked for the record first (its
    /// stat data taken before git reads it), then git compares every tracked file (`diff-files`)
    /// and lists every untracked one, side by side.
    fn record_everything(&self, fingerprint: &str, clock: (i64, i64)) -> Result<Done> {
        let mut saved = Saved::fresh(
            &self.root,
            fingerprint,
            self.max_file_bytes,
            &self.steering_files(),
            clock,
        );
        refuse_blocking(&saved)?;
        let rules = Rules::current(&self.root, fingerprint);
        let index = self.dir.join("index");
        if !index.exists() {
            self.seed(&index, &rules)?;
            self.write_if_changed(&self.dir.join("rules"), &rules.fingerprint)?;
        } else if std::fs::read_to_string(self.dir.join("rules"))
            .map_or(true, |f| f != rules.fingerprint)
        {
            self.sweep(&index, &rules)?;
            self.write_if_changed(&self.dir.join("rules"), &rules.fingerprint)?;
        }
        // What the last checkpoints hashed without the index: git forgets it first, so that it
        // hashes it again whatever its stat data says.
        let forget: BTreeSet<String> = Saved::unfolded(&self.dir).into_iter().collect();
        if index.exists() {
            self.remove_from_index(&index, &forget)?;
        }
        let large = self.large_files()?;
        saved.restamp_globals(clock);
        let changed = self.spawn_git(&["diff-files", "--name-only", "-z"], &index)?;
        let untracked = self.spawn_git(&["ls-files", "-z", "-o", "--exclude-standard"], &index)?;
        let changed = self.finish(changed, "diff-files")?;
        let untracked = self.finish(untracked, "ls-files")?;
        let paths = split_z(&changed)
            .into_iter()
            .filter(|p| !rules.excluded(p))
            .collect();
        let untracked = split_z(&untracked);
        let todo = self.classify(&rules, large, paths, &untracked, Vec::new())?;
        let updated = self.apply(&index, todo)?;
        self.save(
            &mut saved,
            &updated.tree,
            &updated.nested,
            &updated.large,
            clock,
        );
        let recorded = Recorded {
            tree: updated.tree,
            nested: updated.nested,
            how: How::Everything,
        };
        Ok(Done {
            recorded,
            saved,
            linked: None,
            from: None,
        })
    }

    /// A checkpoint from the record of the last one: `None` when the private index cannot be
    /// read here (then everything is listed).
    #[expect(clippy::too_many_lines, reason = "a debt: listed in AGENTS.md")]
    fn record_changes(&self, mut saved: Saved, clock: (i64, i64)) -> Result<Option<Done>> {
        let index_path = self.dir.join("index");
        // The index is read while the directories are looked at.
        let (index, changes, walked) = std::thread::scope(|scope| {
            let delta = &saved.delta;
            let index = scope.spawn(|| scan::Index::read(&index_path, delta));
            let changes = saved.changed_dirs(&self.root);
            let walked = if changes.is_empty() {
                None
            } else {
                let large = self.large_files();
                let mut saved = saved.clone();
                saved.rewalk_trees(&self.root, &changes.trees, clock);
                let listed = saved.rewalk(&self.root, &changes.dirs, clock);
                Some((large, saved, listed))
            };
            (index.join().ok().flatten(), changes, walked)
        });
        let Some(index) = index else {
            return Ok(None);
        };
        tracing::debug!(op = "checkpoint", dirs = ?changes.dirs, trees = ?changes.trees, gone = ?changes.gone, "looked");
        let mut large = None;
        let mut listing = None;
        if let Some((walked_large, walked_saved, listed)) = walked {
            large = Some(walked_large?);
            saved = walked_saved;
            refuse_blocking(&saved)?;
            let (specs, whole) = self.relisted(&changes, &listed, &index, &saved.nested);
            if specs.as_ref().is_none_or(|s| !s.is_empty()) {
                listing = Some((self.start_listing(specs.as_deref(), whole)?, specs));
            }
        }
        // git lists while the recorded files are compared here.
        let tracked = scan::tracked_changes(&self.root, &index, &changes.gone, saved.clock);
        let listed = match listing {
            Some((Listing::Git(child), specs)) => Some((self.finish(child, "ls-files")?, specs)),
            Some((Listing::Here(out), specs)) => Some((out, specs)),
            None => None,
        };
        let Some(tracked) = tracked else {
            return Ok(None);
        };
        if changes.is_empty() && tracked.paths.is_empty() {
            let recorded = Recorded {
                tree: saved.tree.clone(),
                nested: self.with_root_repository(saved.nested.clone()),
                how: How::Unchanged,
            };
            if tracked.verified {
                // Files in doubt were read: the next checkpoint need not read them again.
                saved.clock = clock;
                let (tree, nested) = (saved.tree.clone(), saved.nested.clone());
                if let Err(e) = saved.write(&self.dir, &tree, &nested) {
                    tracing::warn!(op = "checkpoint", result = "partial", "{e}");
                }
            }
            let from = Some(recorded.tree.clone());
            return Ok(Some(Done {
                recorded,
                saved,
                linked: Some(tracked.linked),
                from,
            }));
        }
        let rules = Rules::current(&self.root, &saved.fingerprint);
        let large = match large {
            Some(large) => large,
            None => self.large_files()?,
        };
        let mut nested = saved.nested.clone();
        let untracked = match listed {
            Some((out, None)) => {
                nested.clear();
                out
            }
            Some((out, Some(specs))) => {
                nested.retain(|n| !specs.iter().any(|s| n == s || beneath(n, s)));
                out
            }
            None => Vec::new(),
        };
        // What git lists that the last checkpoint recorded without the index is no news.
        let untracked: Vec<String> = split_z(&untracked)
            .into_iter()
            .filter(|p| !index.contains(p) || tracked.paths.contains(p))
            .collect();
        let paths: BTreeSet<String> = tracked
            .paths
            .iter()
            .filter(|p| !rules.excluded(p))
            .cloned()
            .collect();
        let stale: BTreeSet<String> = tracked.stale.intersection(&paths).cloned().collect();
        let todo = self.classify(&rules, large, paths, &untracked, nested)?;
        tracing::debug!(
            op = "checkpoint",
            update = todo.paths.len(),
            stale = stale.len(),
            delta = saved.delta.len(),
            "compared"
        );
        let known = saved.tree.clone();
        let mut from = Some(known.clone());
        let updated = if todo.paths.is_empty() && todo.gone.is_empty() {
            todo.unchanged(&known)
        } else if saved.delta.len() + todo.paths.len() + todo.gone.len() <= FOLD_AT
            && let Some(edited) = self.edit(&mut saved, &index, &todo)?
        {
            edited
        } else {
            from = None;
            // Into the index, with everything hashed without it so far: git forgets those
            // first, so it hashes them again whatever their stat data says.
            let mut forget: BTreeSet<String> = saved.delta.keys().cloned().collect();
            forget.extend(stale);
            self.remove_from_index(&index_path, &forget)?;
            let mut todo = todo;
            todo.paths.extend(
                std::mem::take(&mut saved.delta)
                    .into_keys()
                    .filter(|p| !self.beneath_link(p)),
            );
            saved.trees.clear();
            self.apply(&index_path, todo)?
        };
        if updated.hashed || tracked.verified {
            saved.clock = clock;
        }
        self.save(
            &mut saved,
            &updated.tree,
            &updated.nested,
            &updated.large,
            clock,
        );
        let recorded = Recorded {
            tree: updated.tree,
            nested: updated.nested,
            how: How::Changes,
        };
        let mut linked = tracked.linked;
        linked.extend(updated.linked);
        Ok(Some(Done {
            recorded,
            saved,
            linked: Some(linked),
            from,
        }))
    }

    /// What to hash: `paths`, and the untracked files git listed (`untracked`), leaving out
    /// what the rules exclude and new files over the size limit (`large`, kept up to date);
    /// the nested repositories listed, with those known outside the listing (`nested`).
    fn classify(
        &self,
        rules: &Rules,
        large: BTreeSet<String>,
        mut paths: BTreeSet<String>,
        untracked: &[String],
        mut nested: Vec<String>,
    ) -> Result<Todo> {
        let mut new_large = large.clone();
        for path in untracked {
            if let Some(dir) = path.strip_suffix('/') {
                // git lists a nested repository as its directory and does not go in.
                if !rules.excluded(dir) && !nested.iter().any(|n| n == dir) {
                    nested.push(dir.to_string());
                }
            } else if rules.excluded(path) {
                continue;
            } else if self.is_large(path) {
                new_large.insert(path.clone());
            } else {
                paths.insert(path.clone());
            }
        }
        nested.sort();
        let nested = self.with_root_repository(nested);
        if new_large != large {
            self.save_large_files(&new_large)?;
        }
        // A path beneath a symbolic link is gone as far as the tree is concerned (git would
        // refuse it, and the whole update with it).
        let (gone, paths): (BTreeSet<String>, BTreeSet<String>) =
            paths.into_iter().partition(|p| self.beneath_link(p));
        Ok(Todo {
            paths,
            gone,
            nested,
            large: new_large,
        })
    }

    /// Hashes what `todo` names into the private index and writes its tree.
    fn apply(&self, index: &Path, todo: Todo) -> Result<Updated> {
        let Todo {
            paths,
            gone,
            nested,
            large,
        } = todo;
        // Taken before git reads the files: a write after it shows.
        let linked = paths
            .iter()
            .filter_map(|p| {
                let st = nix::sys::stat::lstat(&self.root.join(p)).ok()?;
                (st.st_nlink > 1).then(|| (p.clone(), scan::Stamp::of(&st)))
            })
            .collect();
        self.remove_from_index(index, &gone)?;
        if !paths.is_empty() {
            let list = nul_list(&paths);
            // The index is written even when git finds every file the same: an entry as new
            // as the index it is in proves nothing by its stat data, and stops being so only
            // when the index is written again.
            let update = self.run_git(
                &[
                    "update-index",
                    "--add",
                    "--remove",
                    "--force-write-index",
                    "-z",
                    "--stdin",
                ],
                index,
                &self.root,
                Some(&list),
            )?;
            if !update.status.success() {
                // A file nobody may read, or one that changed kind: let `add` skip what it
                // cannot take rather than lose the whole checkpoint (the same paths only).
                let add = self.run_git(
                    &[
                        "add",
                        "-A",
                        "--ignore-errors",
                        "--pathspec-from-file=-",
                        "--pathspec-file-nul",
                    ],
                    index,
                    &self.root,
                    Some(&list),
                )?;
                if !add.status.success() {
                    tracing::warn!(
                        op = "checkpoint",
                        result = "partial",
                        "git add: {}",
                        String::from_utf8_lossy(&add.stderr).trim()
                    );
                }
            }
        }
        let tree = self.git(&["write-tree"], index, None)?;
        Ok(Updated {
            tree: String::from_utf8_lossy(&tree).trim().to_string(),
            nested,
            large,
            hashed: true,
            linked,
        })
    }

    /// Writes the tree of `todo` in process (see [`super::tree`]): the files hashed and written
    /// to the store here, and only the trees on the way to them, all in one pack; what it
    /// hashed is kept in `saved`'s delta, with its stat data, for the index to take in later.
    /// `None` when git must do it: a file that changed while it was read, or that is neither a
    /// regular file, a link nor a directory; a tree this does not know.
    fn edit(&self, saved: &mut Saved, index: &scan::Index, todo: &Todo) -> Result<Option<Updated>> {
        use super::{objects, tree};
        let objects = self.dir.join("objects");
        let mut pack = objects::Pack::new(&objects);
        // The tree the index and what is kept over it describe must be the last one.
        let last = saved
            .trees
            .get("")
            .or_else(|| index.cached_tree(""))
            .map(objects::hex);
        if last.as_deref() != Some(saved.tree.as_str()) {
            return Ok(None);
        }
        let mut edits = tree::Edits::new();
        let mut kept: Vec<(String, scan::Kept, nix::sys::stat::FileStat)> = Vec::new();
        for path in &todo.gone {
            edits.insert(path.clone(), None);
        }
        for path in &todo.paths {
            let full = self.root.join(path);
            let Ok(st) = nix::sys::stat::lstat(&full) else {
                edits.insert(path.clone(), None);
                continue;
            };
            match tree::mode_of(&st) {
                // git stores a large file compressed; written here, it would be stored whole.
                Some(_) if st.st_size as u64 > self.max_file_bytes => return Ok(None),
                Some(mode) => {
                    let link = mode == 0o120000;
                    let Ok(id) = pack.blob_of(&full, link, st.st_size as u64) else {
                        return Ok(None);
                    };
                    edits.insert(path.clone(), Some((mode, id)));
                    kept.push((path.clone(), scan::Kept::of(&st, mode, id), st));
                }
                // A directory now (what it holds is listed as new).
                None if st.st_mode & 0o170000 == 0o040000 => {
                    edits.insert(path.clone(), None);
                }
                None => return Ok(None),
            }
        }
        let built =
            tree::rebuild(index, &saved.trees, &edits, &mut pack).map_err(super::io(&objects))?;
        let Some(tree::Built {
            root: Some(root),
            dirs,
        }) = built
        else {
            return Ok(None);
        };
        // Seen by git before anything names its objects.
        pack.finish().map_err(super::io(&objects))?;
        for (dir, id) in dirs {
            match id {
                Some(id) => {
                    saved.trees.insert(dir, id);
                }
                None => saved.trees.retain(|d, _| *d != dir && !beneath(d, &dir)),
            }
        }
        let mut linked = Vec::new();
        for (path, edit) in &edits {
            if edit.is_none() {
                saved.delta.insert(path.clone(), None);
            }
        }
        for (path, k, st) in kept {
            if st.st_nlink > 1 {
                linked.push((path.clone(), scan::Stamp::of(&st)));
            }
            saved.delta.insert(path, Some(k));
        }
        Ok(Some(Updated {
            tree: objects::hex(&root),
            nested: todo.nested.clone(),
            large: todo.large.clone(),
            hashed: true,
            linked,
        }))
    }

    /// The root's own repository counts too: a `git init` at the root of a directory that had
    /// none is one the agent made.
    fn with_root_repository(&self, mut nested: Vec<String>) -> Vec<String> {
        nested.retain(|n| n != ".");
        if self.root.join(".git").symlink_metadata().is_ok() {
            nested.insert(0, ".".to_string());
        }
        nested
    }

    /// Keeps the record of this checkpoint for the next one.
    fn save(
        &self,
        saved: &mut Saved,
        tree: &str,
        nested: &[String],
        large: &BTreeSet<String>,
        clock: (i64, i64),
    ) {
        saved.set_large(&self.root, large, clock);
        if let Err(e) = saved.write(&self.dir, tree, nested) {
            // The last record stays: an older state, but a whole one (the index and what it
            // kept beside it), which the next checkpoint compares the disk with again.
            tracing::warn!(op = "checkpoint", result = "partial", "{e}");
        }
    }
}

/// Refuses a checkpoint whose listing git would never finish: a `.gitignore` that is a named
/// pipe (or a device) keeps git waiting for ever, in `ls-files` and `add` alike.
fn refuse_blocking(saved: &Saved) -> Result<()> {
    match saved.blocking_ignore() {
        Some(path) => Err(super::CheckpointError::Refused(format!(
            "{path} is a named pipe or a device, which git would wait on for ever as it reads \
             ignore rules: no file checkpoint is taken until it is removed"
        ))),
        None => Ok(()),
    }
}

/// Where the untracked files of a checkpoint are listed.
enum Listing {
    /// By git, still running.
    Git(std::process::Child),
    /// Here, as git would list them.
    Here(Vec<u8>),
}

/// What a checkpoint hashes ([`Checkpoints::classify`]).
struct Todo {
    /// Paths to hash (or to remove, when they are gone).
    paths: BTreeSet<String>,
    /// Paths beneath a symbolic link: removed.
    gone: BTreeSet<String>,
    nested: Vec<String>,
    /// The files left out for their size.
    large: BTreeSet<String>,
}

impl Todo {
    /// Nothing to hash: the tree `known` again.
    fn unchanged(self, known: &str) -> Updated {
        Updated {
            tree: known.to_string(),
            nested: self.nested,
            large: self.large,
            hashed: false,
            linked: Vec::new(),
        }
    }
}

/// At most this many files are kept hashed without the private index; then git takes them
/// in (reading and writing the index once).
const FOLD_AT: usize = if cfg!(test) { 8 } else { 512 };

/// What a checkpoint made.
struct Updated {
    tree: String,
    nested: Vec<String>,
    /// The files left out for their size.
    large: BTreeSet<String>,
    /// Whether git looked at files (their stat data in the index is then as of this checkpoint).
    hashed: bool,
    /// The files hashed that have more than one link, with their stat data.
    linked: Vec<(String, scan::Stamp)>,
}

/// A checkpoint taken, with its record for the next one.
struct Done {
    recorded: Recorded,
    saved: Saved,
    /// Recorded files with more than one link (`None`: not looked at, git compared them).
    linked: Option<Vec<(String, scan::Stamp)>>,
    /// The last tree, when this one was made from it without git hashing anything: every blob
    /// it adds was written to a pack of the store's own. `None`: git hashed files, and finds a
    /// blob the user's repository holds without copying it.
    from: Option<String>,
}

/// At most this many bytes of paths are given to one `git ls-files`; more, and it lists the
/// changed directories whole.
const MAX_SPEC_BYTES: usize = 64 * 1024;

impl Checkpoints {
    /// Lists the untracked files of `specs` (everything when `None`; `whole`: directories
    /// among them): here when only new files are asked about and their rules read plainly,
    /// else by git, started now and read by whoever takes the listing.
    fn start_listing(&self, specs: Option<&[String]>, whole: bool) -> Result<Listing> {
        if let Some(files) = specs.filter(|_| !whole)
            && let Some(out) = self.untracked_here(files)
        {
            return Ok(Listing::Here(out));
        }
        let mut args = vec!["ls-files", "-z", "-o", "--exclude-standard"];
        if let Some(specs) = specs {
            args.push("--");
            args.extend(specs.iter().map(String::as_str));
        }
        // Only paths nothing recorded: git need not read the index to list them.
        let index = self.dir.join(if whole { "index" } else { "no-index" });
        Ok(Listing::Git(self.spawn_git(&args, &index)?))
    }

    /// What git would list of the new files `files` (none of them recorded), as it lists
    /// them (NUL after each), decided here by [`super::ignored`]: `None` when git must say.
    fn untracked_here(&self, files: &[String]) -> Option<Vec<u8>> {
        let mut excludes = Excludes::new(&self.root, &self.exclude_files())?;
        let mut out = Vec::new();
        for file in files {
            let Ok(meta) = std::fs::symlink_metadata(self.root.join(file)) else {
                continue; // gone since
            };
            let kind = meta.file_type();
            if kind.is_dir() {
                return None; // a directory since: git lists what it holds
            }
            // git lists files and links, nothing else (a pipe, a socket).
            if (kind.is_file() || kind.is_symlink()) && excludes.listed(file)? {
                out.extend_from_slice(file.as_bytes());
                out.push(0);
            }
        }
        Some(out)
    }

    /// What git lists again (`None`: everything), and whether that takes the index (directories
    /// listed whole hold recorded files): the directories whose listing steers changed,
    /// whole; in the directories whose entries changed (`listed`, as walked again), each entry
    /// that is neither recorded (`index`) nor a directory walked before; a directory that is
    /// or was a nested repository whole. Nothing inside a nested repository (git lists nothing
    /// there), nothing under `.nop/` or named `.git`.
    fn relisted(
        &self,
        changes: &scan::Changes,
        listed: &std::collections::BTreeMap<String, Vec<scan::Child>>,
        index: &scan::Index,
        nested: &[String],
    ) -> (Option<Vec<String>>, bool) {
        if changes.trees.contains("") {
            return (None, true);
        }
        let mut trees: BTreeSet<String> = changes.trees.clone();
        let mut files = BTreeSet::new();
        let dirs: BTreeSet<&str> = listed.keys().map(String::as_str).collect();
        let recorded = index.children(&dirs);
        for (dir, children) in listed {
            if !dir.is_empty()
                && (nested.contains(dir) || children.iter().any(|c| c.name == ".git"))
            {
                trees.insert(dir.clone());
                continue;
            }
            for c in children {
                if c.name == ".git" || (dir.is_empty() && c.name == ".nop") {
                    continue;
                }
                let path = if dir.is_empty() {
                    c.name.clone()
                } else {
                    format!("{dir}/{}", c.name)
                };
                if c.is_dir && !c.known {
                    trees.insert(path);
                } else if !c.is_dir && !recorded.contains(&path) {
                    files.insert(path);
                }
            }
        }
        let covered = |p: &String| {
            trees.iter().any(|t| beneath(p, t)) || nested.iter().any(|n| p == n || beneath(p, n))
        };
        let mut specs: Vec<String> = trees
            .iter()
            .filter(|t| !covered(t) || nested.contains(t))
            .filter(|t| !nested.iter().any(|n| beneath(t, n)))
            .cloned()
            .collect();
        let whole = !specs.is_empty();
        specs.extend(files.iter().filter(|f| !covered(f)).cloned());
        if specs.iter().map(|s| s.len() + 1).sum::<usize>() > MAX_SPEC_BYTES {
            let mut dirs: BTreeSet<String> = trees;
            dirs.extend(listed.keys().cloned());
            if dirs.contains("") {
                return (None, true);
            }
            let specs = dirs
                .iter()
                .filter(|d| !dirs.iter().any(|a| beneath(d, a)))
                .filter(|d| !nested.iter().any(|n| beneath(d, n)))
                .cloned()
                .collect();
            return (Some(specs), true);
        }
        (Some(specs), whole)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use std::process::Command;

    fn repo() -> (tempfile::TempDir, Checkpoints) {
        std::fs::create_dir_all("/var/tmp/nop-tests").expect("/var/tmp/nop-tests");
        let dir = tempfile::tempdir_in("/var/tmp/nop-tests").expect("temp");
        let root = dir.path();
        let git = |args: &[&str]| {
            let out = Command::new("git")
                .args(["-c", "user.name=t", "-c", "user.email=t@t"])
                .args(args)
                .current_dir(root)
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .output()
                .expect("git");
            assert!(out.status.success(), "{out:?}");
        };
        git(&["init", "-q"]);
        for (path, text) in [
            ("top.txt", "top\n"),
            (".gitignore", "build/\n*.log\n"),
            ("src/a.rs", "a\n"),
            ("src/deep/b.rs", "b\n"),
            ("docs/c.md", "c\n"),
        ] {
            write(root, path, text);
        }
        git(&["add", "-A"]);
        git(&["commit", "-qm", "files"]);
        let cp = Checkpoints::new(root, &root.join(".nop"), 0.001);
        (dir, cp)
    }

    fn write(root: &Path, path: &str, text: &str) {
        let full = root.join(path);
        std::fs::create_dir_all(full.parent().expect("parent")).expect("mkdir");
        std::fs::write(full, text).expect("write");
    }

    /// Records until nothing is left to look at again (stat data as new as a checkpoint's
    /// start is looked at once more by the next one); the tree must not move meanwhile.
    fn settle(cp: &Checkpoints) -> Recorded {
        let first = cp.record_full().expect("record");
        // Stat data settles once the file system's clock has moved past it (a tick of up to
        // 10 ms): wait for that, at most a second, rather than count on a number of tries.
        for _ in 0..50 {
            std::thread::sleep(std::time::Duration::from_millis(20));
            let next = cp.record_full().expect("record");
            assert_eq!(next.tree, first.tree, "nothing changed, same tree");
            if next.how == How::Unchanged {
                return next;
            }
        }
        panic!("a checkpoint with nothing changed still ran git");
    }

    /// What a checkpoint that lists everything records now (the record of the last one made
    /// unusable, as other rules would; what it hashed without the index still read).
    fn everything(cp: &Checkpoints) -> Recorded {
        let kept = cp.dir.join("scan");
        let text = std::fs::read(&kept).expect("a record kept");
        let at = text
            .windows(5)
            .position(|w| w == b"\nmax ")
            .expect("the size limit");
        let mut text = text;
        text.insert(at + 5, b'9');
        std::fs::write(&kept, text).expect("write");
        let full = cp.record_full().expect("record");
        assert_eq!(full.how, How::Everything);
        full
    }

    fn paths(cp: &Checkpoints, tree: &str) -> Vec<String> {
        cp.entries(tree).expect("entries").into_keys().collect()
    }

    #[test]
    fn nothing_changed_runs_no_git_and_changes_are_recorded_as_a_full_listing_would() {
        let _serial = crate::checkpoint::serial();
        let (dir, cp) = repo();
        let root = dir.path();
        let first = cp.record_full().expect("record");
        assert_eq!(first.how, How::Everything);
        let settled = settle(&cp);
        assert_eq!(settled.tree, first.tree);
        // Same size, new content; a new file deep down; a new directory; a removed file; an
        // ignored file; a file in an ignored directory.
        write(root, "src/a.rs", "A\n");
        write(root, "src/deep/new.rs", "new\n");
        write(root, "fresh/dir/f.txt", "f\n");
        std::fs::remove_file(root.join("docs/c.md")).expect("rm");
        write(root, "x.log", "log\n");
        write(root, "build/out.bin", "out\n");
        let changed = cp.record_full().expect("record");
        assert_eq!(changed.how, How::Changes);
        assert_eq!(
            paths(&cp, &changed.tree),
            [
                ".gitignore",
                "fresh/dir/f.txt",
                "src/a.rs",
                "src/deep/b.rs",
                "src/deep/new.rs",
                "top.txt"
            ]
        );
        assert_eq!(everything(&cp).tree, changed.tree);
        assert_eq!(settle(&cp).tree, changed.tree);
    }

    #[test]
    fn what_steers_the_listing_is_watched_too() {
        let _serial = crate::checkpoint::serial();
        let (dir, cp) = repo();
        let root = dir.path();
        write(root, "src/keep.log", "kept out\n");
        write(root, "build/out.bin", "out\n");
        settle(&cp);
        // The ignore file changed in place: its directory's listing does not show it.
        write(root, ".gitignore", "*.log\n");
        let listed = cp.record_full().expect("record");
        assert!(paths(&cp, &listed.tree).contains(&"build/out.bin".to_string()));
        settle(&cp);
        // A nested repository made in a directory of its own.
        write(root, "src/vendor/lib.rs", "lib\n");
        let out = Command::new("git")
            .args(["init", "-q", "src/vendor"])
            .current_dir(root)
            .output()
            .expect("git");
        assert!(out.status.success());
        let nested = cp.record_full().expect("record");
        assert_eq!(nested.nested, [".", "src/vendor"]);
        assert_eq!(settle(&cp).nested, [".", "src/vendor"]);
        // A repository made in a directory the last checkpoint walked, empty until now.
        std::fs::create_dir_all(root.join("docs/empty")).expect("mkdir");
        settle(&cp);
        let out = Command::new("git")
            .args(["init", "-q", "docs/empty"])
            .current_dir(root)
            .output()
            .expect("git");
        assert!(out.status.success());
        let nested = cp.record_full().expect("record");
        assert_eq!(nested.nested, [".", "docs/empty", "src/vendor"]);
        std::fs::remove_dir_all(root.join("docs/empty")).expect("rm");
        // A directory swapped for a link to a copy of it.
        std::fs::rename(root.join("docs"), root.join("docs2")).expect("mv");
        std::os::unix::fs::symlink("docs2", root.join("docs")).expect("ln");
        let swapped = cp.record_full().expect("record");
        let listed = paths(&cp, &swapped.tree);
        assert!(listed.contains(&"docs".to_string()), "{listed:?}");
        assert!(listed.contains(&"docs2/c.md".to_string()), "{listed:?}");
        assert!(!listed.contains(&"docs/c.md".to_string()), "{listed:?}");
        assert_eq!(everything(&cp).tree, swapped.tree);
    }

    #[test]
    fn a_file_left_out_for_its_size_is_recorded_once_it_shrinks() {
        let _serial = crate::checkpoint::serial();
        let (dir, cp) = repo();
        let root = dir.path();
        write(root, "src/big.bin", &"x".repeat(4096));
        let first = settle(&cp);
        assert!(!paths(&cp, &first.tree).contains(&"src/big.bin".to_string()));
        write(root, "src/big.bin", "small\n");
        let shrunk = cp.record_full().expect("record");
        assert!(paths(&cp, &shrunk.tree).contains(&"src/big.bin".to_string()));
    }

    #[test]
    fn new_rules_list_everything_again() {
        let _serial = crate::checkpoint::serial();
        let (dir, cp) = repo();
        let root = dir.path();
        settle(&cp);
        write(
            root,
            ".nop/.permissions/agent-default.yml",
            "file-access:\n  - pattern: \"src/**\"\n    access: deny\n",
        );
        let ruled = cp.record_full().expect("record");
        assert_eq!(ruled.how, How::Everything);
        assert!(
            !paths(&cp, &ruled.tree)
                .iter()
                .any(|p| p.starts_with("src/")),
            "{:?}",
            paths(&cp, &ruled.tree)
        );
    }

    /// Random changes, one after another, each recorded from the last checkpoint's record and
    /// compared with a checkpoint that lists everything: the same tree, the same nested
    /// repositories.
    #[test]
    fn what_changed_is_recorded_as_a_full_listing_would_whatever_the_change() {
        let _serial = crate::checkpoint::serial();
        let (dir, cp) = repo();
        let root = dir.path();
        for seed in [0x5eed, 7, 1 << 40] {
            random_changes(&cp, root, seed);
        }
    }

    fn random_changes(cp: &Checkpoints, root: &Path, seed: u64) {
        let mut seed = seed;
        let mut next = |n: usize| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 33) as usize) % n
        };
        let names = ["src", "src/deep", "docs", "x", "x/y", "x/y/z", "build", "n"];
        settle(cp);
        for step in 0..60 {
            let at = names[next(names.len())];
            let full = root.join(at);
            let what = next(14);
            let _ = match what {
                0 => std::fs::create_dir_all(full.join("new")).and_then(|_| {
                    std::fs::write(full.join(format!("new/f{step}")), format!("{step}\n"))
                }),
                1 => std::fs::create_dir_all(&full)
                    .and_then(|_| std::fs::write(full.join("f.txt"), format!("s{step:03}\n"))),
                2 => std::fs::remove_file(full.join("f.txt")),
                3 => std::fs::remove_dir_all(&full),
                4 => std::fs::rename(&full, root.join(format!("moved{}", step % 3))),
                5 => std::fs::remove_dir_all(&full).and_then(|_| std::fs::write(&full, "file\n")),
                6 => std::fs::remove_file(&full).and_then(|_| std::fs::create_dir_all(&full)),
                7 => std::fs::create_dir_all(&full).and_then(|_| {
                    std::fs::write(full.join(".gitignore"), ["*.txt\n", "new/\n", ""][step % 3])
                }),
                8 => std::fs::create_dir_all(&full).and_then(|_| {
                    let out = Command::new("git")
                        .args(["init", "-q"])
                        .current_dir(&full)
                        .output()?;
                    assert!(out.status.success());
                    Ok(())
                }),
                9 => std::fs::remove_dir_all(full.join(".git")),
                11 => std::fs::set_permissions(
                    full.join("f.txt"),
                    std::os::unix::fs::PermissionsExt::from_mode(0o755),
                ),
                12 => std::fs::create_dir_all(&full)
                    .and_then(|_| std::os::unix::fs::symlink("f.txt", full.join("link"))),
                13 => std::fs::write(full.join("f.txt"), format!("t{step:03}\n")),
                _ => std::fs::remove_dir_all(&full).and_then(|_| {
                    std::fs::create_dir_all(root.join("target"))?;
                    std::os::unix::fs::symlink("target", &full)
                }),
            };
            let changed = cp.record_full().expect("record");
            if step % 3 != 2 {
                // What is hashed without the index piles up in between.
                continue;
            }
            let full_listing = everything(cp);
            assert_eq!(
                (&changed.tree, &changed.nested),
                (&full_listing.tree, &full_listing.nested),
                "step {step}: change {what} at {at}: {:?} against {:?}",
                paths(cp, &changed.tree),
                paths(cp, &full_listing.tree)
            );
        }
    }

    #[test]
    fn names_that_are_not_utf8_are_recorded_as_a_full_listing_would() {
        use std::os::unix::ffi::OsStrExt;
        let _serial = crate::checkpoint::serial();
        let (dir, cp) = repo();
        let root = dir.path();
        cp.record_full().expect("record");
        settle(&cp);
        let odd_dir = root
            .join("src")
            .join(std::ffi::OsStr::from_bytes(b"odd-\xff"));
        std::fs::create_dir(&odd_dir).expect("mkdir");
        std::fs::write(odd_dir.join("f.txt"), "f\n").expect("write");
        let odd_file = root
            .join("docs")
            .join(std::ffi::OsStr::from_bytes(b"name-\xfe.md"));
        std::fs::write(&odd_file, "n\n").expect("write");
        let quick = cp.record_full().expect("record");
        assert_eq!(quick.tree, everything(&cp).tree, "new");
        settle(&cp);
        // A change inside the directory with the odd name, and to the file with one.
        std::fs::write(odd_dir.join("f.txt"), "changed\n").expect("write");
        std::fs::write(&odd_file, "changed too\n").expect("write");
        std::fs::write(root.join("src/a.rs"), "a2\n").expect("write");
        let quick = cp.record_full().expect("record");
        assert_eq!(quick.tree, everything(&cp).tree, "changed");
    }

    #[test]
    fn a_tracked_file_grown_past_the_size_limit_is_stored_compressed_by_git() {
        let _serial = crate::checkpoint::serial();
        let (dir, cp) = repo();
        let root = dir.path();
        cp.record_full().expect("record");
        settle(&cp);
        // The agent makes a tracked file 64 MiB of nothing (sparse: no disk for it here).
        std::fs::File::options()
            .write(true)
            .open(root.join("src/a.rs"))
            .and_then(|f| f.set_len(64 << 20))
            .expect("grow");
        let grown = cp.record_full().expect("record");
        assert_eq!(grown.tree, everything(&cp).tree);
        fn size(dir: &Path) -> u64 {
            std::fs::read_dir(dir)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| match e.file_type() {
                    Ok(t) if t.is_dir() => size(&e.path()),
                    _ => e.metadata().map(|m| m.len()).unwrap_or(0),
                })
                .sum()
        }
        let stored = size(&cp.dir.join("objects"));
        assert!(stored < 8 << 20, "the store holds {stored} bytes");
    }

    #[test]
    fn new_files_in_known_directories_are_listed_without_git_unless_a_rule_reads_ambiguously() {
        let _serial = super::super::serial();
        let (dir, cp) = repo();
        let root = dir.path();
        settle(&cp);
        let runs = || super::super::GIT_RUNS.load(std::sync::atomic::Ordering::Relaxed);
        let before = runs();
        write(root, "src/new.rs", "new\n");
        write(root, "src/deep/noise.log", "ignored\n");
        write(root, "docs/d.md", "d\n");
        let changed = cp.record_full().expect("record");
        assert_eq!(changed.how, How::Changes);
        assert_eq!(runs(), before, "no git process for a few new files");
        assert!(paths(&cp, &changed.tree).contains(&"src/new.rs".to_string()));
        assert_eq!(everything(&cp).tree, changed.tree);
        settle(&cp);
        // A pattern with an escape: git says what it means.
        write(root, "docs/.gitignore", "\\#odd\n");
        settle(&cp);
        write(root, "docs/#odd", "odd\n");
        write(root, "docs/e.md", "e\n");
        let before = runs();
        let changed = cp.record_full().expect("record");
        assert!(runs() > before, "git lists");
        let listed = paths(&cp, &changed.tree);
        assert!(listed.contains(&"docs/e.md".to_string()), "{listed:?}");
        assert!(!listed.contains(&"docs/#odd".to_string()), "{listed:?}");
        assert_eq!(everything(&cp).tree, changed.tree);
    }

    /// A checkpoint in a thread of its own: its result, or `None` when it took over a minute.
    fn within_a_minute(
        cp: &Checkpoints,
        record: fn(&Checkpoints) -> Result<Recorded>,
    ) -> Option<Result<Recorded>> {
        let (tx, rx) = std::sync::mpsc::channel();
        let cp = Checkpoints::new(&cp.root, cp.dir.parent().expect("nop dir"), 0.001);
        std::thread::spawn(move || tx.send(record(&cp)));
        rx.recv_timeout(std::time::Duration::from_secs(60)).ok()
    }

    #[test]
    fn hostile_named_pipes_where_git_reads_rules_never_hold_up_a_checkpoint() {
        let _serial = super::super::serial();
        let (dir, cp) = repo();
        let root = dir.path();
        settle(&cp);
        // Read by git for every file it hashes: never, from the tree.
        nix::unistd::mkfifo(
            &root.join("src/.gitattributes"),
            nix::sys::stat::Mode::S_IRWXU,
        )
        .expect("mkfifo");
        write(root, "src/a.rs", "changed\n");
        let full = within_a_minute(&cp, |cp| {
            everything(cp);
            cp.record_full()
        })
        .expect("the checkpoint ends");
        assert!(full.is_ok(), "{full:?}");
        // Read by git as it lists: the checkpoint is refused, at once, naming it.
        std::fs::create_dir(root.join("fresh")).expect("mkdir");
        nix::unistd::mkfifo(
            &root.join("fresh/.gitignore"),
            nix::sys::stat::Mode::S_IRWXU,
        )
        .expect("mkfifo");
        write(root, "fresh/f.rs", "f\n");
        for record in [Checkpoints::record_full, Checkpoints::record_at_start] {
            let refused = within_a_minute(&cp, record).expect("the checkpoint ends");
            let message = format!("{refused:?}");
            assert!(message.contains("fresh/.gitignore"), "{message}");
        }
        std::fs::remove_file(root.join("fresh/.gitignore")).expect("rm");
        let taken = cp.record_full().expect("record");
        assert!(paths(&cp, &taken.tree).contains(&"fresh/f.rs".to_string()));
    }

    #[test]
    fn checkpoints_of_changes_stay_in_few_packs_and_each_keeps_its_files() {
        let _serial = super::super::serial();
        let (dir, cp) = repo();
        let root = dir.path();
        settle(&cp);
        let packs = || {
            std::fs::read_dir(cp.dir.join("objects/pack"))
                .map(|d| d.flatten().count() / 2)
                .unwrap_or(0)
        };
        let mut recorded = Vec::new();
        for n in 0..40 {
            write(root, "src/a.rs", &format!("a, take {n}\n"));
            write(root, &format!("new/{n}.rs"), "new\n");
            let r = cp.record_full().expect("record");
            assert_eq!(r.how, How::Changes);
            recorded.push((r.tree, n));
            if n % 10 == 9 {
                // A run begins: the packs are rolled up.
                cp.record_at_start().expect("record");
                assert!(packs() <= 16, "{} packs", packs());
            }
        }
        assert!((1..=16).contains(&packs()), "{} packs", packs());
        for (tree, n) in recorded {
            let entries = cp.entries(&tree).expect("entries");
            let out = cp.dir.join("out");
            let id = entries["src/a.rs"].rsplit(' ').next().expect("an id");
            cp.blob_to(id, &out).expect("blob");
            assert_eq!(
                std::fs::read_to_string(&out).expect("read"),
                format!("a, take {n}\n")
            );
            assert_eq!(
                entries.keys().filter(|p| p.starts_with("new/")).count(),
                n + 1
            );
        }
    }

    /// Whether the store alone (its alternates set aside) holds every object of `tree`.
    fn held_alone(cp: &Checkpoints, tree: &str) -> std::result::Result<(), String> {
        let alternates = cp.dir.join("objects/info/alternates");
        let aside = cp.dir.join("objects/info/alternates.aside");
        std::fs::rename(&alternates, &aside).expect("alternates");
        let git = |args: &[&str], input: Option<&str>| {
            let mut child = Command::new("git")
                .args(args)
                .env("GIT_DIR", &cp.dir)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("git");
            let mut stdin = child.stdin.take().expect("stdin");
            std::io::Write::write_all(&mut stdin, input.unwrap_or("").as_bytes()).expect("in");
            drop(stdin);
            child.wait_with_output().expect("git")
        };
        let listed = git(&["ls-tree", "-r", "-t", tree], None);
        let mut ids = vec![tree.to_string()];
        ids.extend(
            String::from_utf8_lossy(&listed.stdout)
                .lines()
                .filter_map(|l| {
                    let meta = l.split('\t').next()?;
                    (!meta.starts_with("160000"))
                        .then(|| meta.rsplit(' ').next().map(String::from))?
                }),
        );
        let checked = git(
            &["cat-file", "--batch-check"],
            Some(&(ids.join("\n") + "\n")),
        );
        std::fs::rename(&aside, &alternates).expect("alternates");
        let checked = String::from_utf8_lossy(&checked.stdout).into_owned();
        match (listed.status.success(), checked.contains("missing")) {
            (true, false) => Ok(()),
            _ => Err(format!(
                "{}{checked}",
                String::from_utf8_lossy(&listed.stderr)
            )),
        }
    }

    #[test]
    fn every_object_a_checkpoint_names_is_the_stores_own_however_it_was_recorded() {
        let _serial = super::super::serial();
        let (dir, cp) = repo();
        let root = dir.path();
        // A blob only the repository's history holds.
        write(root, "old.txt", "history\n");
        for args in [
            &["add", "old.txt"][..],
            &["commit", "-qm", "old"],
            &["rm", "-q", "old.txt"],
            &["commit", "-qm", "gone"],
        ] {
            let out = Command::new("git")
                .args(["-c", "user.name=t", "-c", "user.email=t@t"])
                .args(args)
                .current_dir(root)
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .output()
                .expect("git");
            assert!(out.status.success(), "{out:?}");
        }
        // The first checkpoint is the repository's index, read as it is.
        let first = settle(&cp);
        held_alone(&cp, &first.tree).expect("the first checkpoint");
        // Many files changed (git hashes them), then a few (hashed here), then many again,
        // most of them back to what the repository holds (git finds them there, copies none).
        let committed = [
            ("top.txt", "top\n"),
            ("src/a.rs", "a\n"),
            ("src/deep/b.rs", "b\n"),
            ("docs/c.md", "c\n"),
        ];
        for (path, _) in committed {
            write(root, path, "changed\n");
        }
        for n in 0..12 {
            write(root, &format!("more/{n}.txt"), &format!("{n}\n"));
        }
        let many = cp.record_full().expect("record");
        held_alone(&cp, &many.tree).expect("many changes");
        write(root, "top.txt", "top\n");
        let few = cp.record_full().expect("record");
        held_alone(&cp, &few.tree).expect("a file put back");
        for (path, text) in committed {
            write(root, path, text);
        }
        for n in 0..12 {
            let (_, text) = committed[n % committed.len()];
            write(root, &format!("more/{n}.txt"), text);
            write(root, &format!("old/{n}.txt"), "history\n");
        }
        let back = cp.record_full().expect("record");
        held_alone(&cp, &back.tree).expect("files put back");
        let again = everything(&cp);
        held_alone(&cp, &again.tree).expect("everything listed");
    }
}
