//! A watch on the working tree between the checkpoints of one nop process (the interactive
//! session), so that a run whose files did not change since the last checkpoint starts from
//! its tree without looking at the disk or running git.
//!
//! inotify watches every directory the last checkpoint walked. The watch vouches for a
//! checkpoint only when it watched every one of those directories from before the checkpoint
//! began, and no event came since. Anything else makes the next checkpoint look at the disk as
//! usual: an event of any kind, a queue overflow, a directory made, moved or removed (the
//! watches are then set up again), a directory the checkpoint found that was not watched
//! before it, a watch that cannot be added (the user's limit, a directory on another file
//! system), more directories than [`MAX_WATCHES`], a file system inotify may not hear
//! (anything but local ones), another nop's checkpoint since (the store's clock file holds
//! other bytes), other rules, or another exclude file outside the root.
//!
//! What inotify cannot hear: a write through a hard link from outside the tree, or through a
//! memory mapping of a file closed before; a change on a network file system. Only processes
//! that outlive a run could make such a change between runs (every command the agent starts
//! ends with it), so the watch is trusted only for a run's first checkpoint, never for one
//! taken after tools ran. Recorded files with more than one link are looked at anyway (their
//! stat data, as the checkpoint counted them).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};

use super::Recorded;
use super::scan::Stamp;

/// At most this many directories are watched; a tree with more is looked at every time (each
/// watch costs the kernel about a kilobyte, and the user's limit is shared with editors).
const MAX_WATCHES: usize = if cfg!(test) { 64 } else { 16_384 };

/// At most this many recorded files with more than one link are looked at instead; more, and
/// the watch vouches for nothing.
const MAX_LINKED: usize = 1_024;

/// What is kept between the checkpoints of one process: [`super::Checkpoints::watched`].
#[derive(Debug, Clone, Default)]
pub struct Watch(Arc<Mutex<State>>);

impl Watch {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[derive(Debug, Default)]
pub(super) struct State {
    watcher: Option<Watcher>,
    /// No watch is possible in this process (the reason is logged as it is found).
    unavailable: bool,
    /// The last checkpoint, while the watch vouches for it.
    vouched: Option<Vouched>,
}

/// A checkpoint the watch vouches for, with what steers a checkpoint from outside the tree.
#[derive(Debug)]
struct Vouched {
    recorded: Recorded,
    fingerprint: String,
    /// The store's clock as this checkpoint left it: every checkpoint (of any nop) writes new
    /// bytes there.
    clock: Vec<u8>,
    /// Stat data of the exclude files outside the root, the nested repositories' `.git`s
    /// (inside them is not watched) and the recorded files with more than one link.
    outside: Vec<(PathBuf, Option<Stamp>)>,
}

#[derive(Debug)]
struct Watcher {
    inotify: Inotify,
    /// The device of the root: a directory on another is not watched.
    dev: u64,
    /// Each watched directory, relative to the root.
    watched: HashSet<String>,
    /// An event came since the last checkpoint began.
    heard: bool,
    /// The watches no longer match the tree (a directory made, moved or removed; an overflow).
    stale: bool,
}

fn mask() -> AddWatchFlags {
    AddWatchFlags::IN_MODIFY
        | AddWatchFlags::IN_ATTRIB
        | AddWatchFlags::IN_CLOSE_WRITE
        | AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_DELETE_SELF
        | AddWatchFlags::IN_MOVE_SELF
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_ONLYDIR
        | AddWatchFlags::IN_DONT_FOLLOW
}

/// Local file systems, where every change passes through this kernel.
fn local(root: &Path) -> bool {
    use nix::sys::statfs::{
        BTRFS_SUPER_MAGIC, EXT4_SUPER_MAGIC, F2FS_SUPER_MAGIC, OVERLAYFS_SUPER_MAGIC, TMPFS_MAGIC,
        XFS_SUPER_MAGIC,
    };
    nix::sys::statfs::statfs(root).is_ok_and(|fs| {
        [
            EXT4_SUPER_MAGIC,
            XFS_SUPER_MAGIC,
            BTRFS_SUPER_MAGIC,
            TMPFS_MAGIC,
            F2FS_SUPER_MAGIC,
            OVERLAYFS_SUPER_MAGIC,
        ]
        .contains(&fs.filesystem_type())
    })
}

impl State {
    /// The last checkpoint, if the watch vouches that nothing changed since it began.
    pub fn quiet(&mut self, fingerprint: &str, clock: &Path) -> Option<Recorded> {
        self.listen();
        let vouched = self.vouched.as_ref()?;
        let same = vouched.fingerprint == fingerprint
            && std::fs::read(clock).is_ok_and(|now| now == vouched.clock)
            && vouched
                .outside
                .iter()
                .all(|(path, stamp)| Stamp::take(path) == *stamp);
        if !same {
            self.vouched = None;
            return None;
        }
        Some(vouched.recorded.clone())
    }

    /// Before a checkpoint begins: every directory of the last one (`dirs`) watched, the
    /// events so far taken in (the checkpoint sees what they say).
    pub fn prepare<'a>(&mut self, root: &Path, dirs: impl Iterator<Item = &'a str>) {
        self.vouched = None;
        if self.unavailable {
            return;
        }
        self.listen();
        if self.watcher.as_ref().is_some_and(|w| w.stale) {
            self.watcher = None;
        }
        if self.watcher.is_none() {
            if !local(root) {
                self.give_up("not a local file system".to_string());
                return;
            }
            let dev = match nix::sys::stat::lstat(root) {
                Ok(st) => st.st_dev,
                Err(e) => {
                    self.give_up(format!("{}: {e}", root.display()));
                    return;
                }
            };
            match Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC) {
                Ok(inotify) => {
                    self.watcher = Some(Watcher {
                        inotify,
                        dev,
                        watched: HashSet::new(),
                        heard: false,
                        stale: false,
                    })
                }
                Err(e) => {
                    self.give_up(format!("inotify: {e}"));
                    return;
                }
            }
        }
        let added = match self.watcher.as_mut() {
            Some(watcher) => {
                let added = watcher.add_all(root, dirs);
                watcher.heard = false;
                added
            }
            None => Ok(false),
        };
        if let Err(why) = added {
            self.give_up(why);
        }
    }

    /// After a checkpoint: vouches for it when every directory it walked (`dirs`) was watched
    /// before it began, it counted the files with more than one link (`linked`), and nothing
    /// was heard since. `outside`: what [`State::quiet`] compares again.
    pub fn recorded<'a>(
        &mut self,
        root: &Path,
        dirs: impl Iterator<Item = &'a str>,
        recorded: &Recorded,
        (fingerprint, clock): (&str, &Path),
        outside: Vec<(PathBuf, Option<Stamp>)>,
        linked: Option<usize>,
    ) {
        let Some(watcher) = self.watcher.as_mut() else {
            return;
        };
        // Files with other names may be written where no watch hears: each is looked at (their
        // stat data is in `outside`), and a checkpoint that did not count them is not vouched for.
        // A directory found by this checkpoint is watched from now on, vouched for from the
        // next one.
        let complete = match watcher.add_all(root, dirs) {
            Ok(added) => !added && linked.is_some_and(|n| n <= MAX_LINKED),
            Err(why) => {
                self.give_up(why);
                return;
            }
        };
        self.listen();
        let heard = self.watcher.as_ref().is_none_or(|w| w.heard || w.stale);
        if complete
            && !heard
            && let Ok(clock) = std::fs::read(clock)
        {
            self.vouched = Some(Vouched {
                recorded: recorded.clone(),
                fingerprint: fingerprint.to_string(),
                clock,
                outside,
            });
        }
    }

    /// Takes in every event waiting: any makes the last checkpoint unvouched; a directory
    /// made, moved or removed, or an overflow, makes the watches stale.
    fn listen(&mut self) {
        let Some(watcher) = self.watcher.as_mut() else {
            return;
        };
        loop {
            match watcher.inotify.read_events() {
                Ok(events) if !events.is_empty() => {
                    for event in events {
                        watcher.heard = true;
                        let structural = event.mask.intersects(
                            AddWatchFlags::IN_Q_OVERFLOW
                                | AddWatchFlags::IN_IGNORED
                                | AddWatchFlags::IN_DELETE_SELF
                                | AddWatchFlags::IN_MOVE_SELF
                                | AddWatchFlags::IN_UNMOUNT,
                        ) || (event.mask.contains(AddWatchFlags::IN_ISDIR)
                            && event.mask.intersects(
                                AddWatchFlags::IN_CREATE
                                    | AddWatchFlags::IN_DELETE
                                    | AddWatchFlags::IN_MOVED_FROM
                                    | AddWatchFlags::IN_MOVED_TO,
                            ));
                        if structural {
                            watcher.stale = true;
                        }
                    }
                }
                Ok(_) | Err(nix::errno::Errno::EAGAIN) => break,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => {
                    watcher.heard = true;
                    watcher.stale = true;
                    break;
                }
            }
        }
        if watcher.heard || watcher.stale {
            self.vouched = None;
        }
    }

    /// Vouches for nothing until the next checkpoint.
    pub fn distrust(&mut self) {
        self.vouched = None;
    }

    fn give_up(&mut self, why: String) {
        tracing::debug!(op = "checkpoint", result = "unwatched", "{why}");
        self.watcher = None;
        self.vouched = None;
        self.unavailable = true;
    }
}

impl Watcher {
    /// Watches each of `dirs` not watched yet (parents before what they hold); whether any
    /// was. One gone since, or that nop may not read, stays unwatched (the checkpoint sees it,
    /// and a walk with an unwatched directory is never vouched for), and so does what is
    /// beneath it: its path may lead through a link swapped in since. `Err`: why the watch
    /// cannot go on.
    fn add_all<'a>(
        &mut self,
        root: &Path,
        dirs: impl IntoIterator<Item = &'a str>,
    ) -> Result<bool, String> {
        let mut added = false;
        let mut unwatched: Vec<&str> = Vec::new();
        for dir in dirs {
            if self.watched.contains(dir) || unwatched.iter().any(|u| super::beneath(dir, u)) {
                continue;
            }
            added = true;
            match self.add(root, dir) {
                Ok(()) => {}
                Err(nix::errno::Errno::ENOENT)
                | Err(nix::errno::Errno::ENOTDIR)
                | Err(nix::errno::Errno::EACCES) => unwatched.push(dir),
                Err(e) => return Err(format!("watching {dir}: {e}")),
            }
            if self.watched.len() > MAX_WATCHES {
                return Err(format!("more than {MAX_WATCHES} directories"));
            }
        }
        Ok(added)
    }

    /// Watches `dir` (relative to the root): never through a symbolic link, never on another
    /// file system (`EXDEV`).
    fn add(&mut self, root: &Path, dir: &str) -> nix::Result<()> {
        let full = if dir.is_empty() {
            root.to_path_buf()
        } else {
            root.join(dir)
        };
        self.inotify.add_watch(&full, mask())?;
        self.watched.insert(dir.to_string());
        // Checked after the watch is on: a directory swapped in between is on record here.
        if nix::sys::stat::lstat(&full)?.st_dev != self.dev {
            return Err(nix::errno::Errno::EXDEV);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Checkpoints, How};
    use super::*;
    use pretty_assertions::assert_eq;
    use std::process::Command;

    fn repo() -> (tempfile::TempDir, Checkpoints) {
        std::fs::create_dir_all("/var/tmp/nop-tests").expect("/var/tmp/nop-tests");
        let dir = tempfile::tempdir_in("/var/tmp/nop-tests").expect("temp");
        let root = dir.path().join("repo");
        write(&root, "src/a.rs", "a\n");
        write(&root, "docs/b.md", "b\n");
        let out = Command::new("git")
            .args(["init", "-q"])
            .current_dir(&root)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .expect("git");
        assert!(out.status.success());
        let cp = Checkpoints::new(&root, &root.join(".nop"), 1.0).watched(&Watch::default());
        (dir, cp)
    }

    fn write(root: &Path, path: &str, text: &str) {
        let full = root.join(path);
        std::fs::create_dir_all(full.parent().expect("parent")).expect("mkdir");
        std::fs::write(full, text).expect("write");
    }

    /// Checkpoints at a run's start until the watch vouches (stat data as new as a checkpoint's
    /// start, and directories found by one, are looked at once more); the tree must not move.
    fn quiet(cp: &Checkpoints) -> Recorded {
        let first = cp.record_at_start().expect("record");
        // Stat data settles once the file system's clock has moved past it (a tick of up to
        // 10 ms): wait for that, at most a second, rather than count on a number of tries.
        for _ in 0..50 {
            std::thread::sleep(std::time::Duration::from_millis(20));
            let next = cp.record_at_start().expect("record");
            assert_eq!(next.tree, first.tree, "nothing changed, same tree");
            if next.how == How::Watched {
                return next;
            }
        }
        panic!("the watch never vouched for a checkpoint");
    }

    fn has(cp: &Checkpoints, tree: &str, path: &str, text: &str) -> bool {
        let entries = cp.entries(tree).expect("entries");
        let Some(meta) = entries.get(path) else {
            return false;
        };
        let id = meta.split_whitespace().nth(2).expect("id");
        let out = Command::new("git")
            .args(["cat-file", "blob", id])
            .env("GIT_DIR", cp.root().join(".nop/checkpoints"))
            .output()
            .expect("git");
        out.stdout == text.as_bytes()
    }

    #[test]
    fn a_run_starts_from_the_last_tree_only_while_the_watch_heard_nothing() {
        let _serial = crate::checkpoint::serial();
        let (_dir, cp) = repo();
        let root = cp.root().to_path_buf();
        let quiet_tree = quiet(&cp).tree;
        // An edit, then a new directory: heard, looked at, recorded.
        write(&root, "src/a.rs", "A\n");
        let edited = cp.record_at_start().expect("record");
        assert_ne!(edited.how, How::Watched);
        assert!(has(&cp, &edited.tree, "src/a.rs", "A\n"));
        assert_eq!(quiet(&cp).tree, edited.tree);
        write(&root, "new/dir/c.txt", "c\n");
        let made = cp.record_at_start().expect("record");
        assert_ne!(made.how, How::Watched);
        assert!(has(&cp, &made.tree, "new/dir/c.txt", "c\n"));
        // Files in the new directory are heard from now on.
        quiet(&cp);
        write(&root, "new/dir/c.txt", "C\n");
        let inside = cp.record_at_start().expect("record");
        assert_ne!(inside.how, How::Watched);
        assert!(has(&cp, &inside.tree, "new/dir/c.txt", "C\n"));
        assert_ne!(inside.tree, quiet_tree);
        // Tools ran: the next run's start looks at the disk.
        quiet(&cp);
        cp.tools_ran();
        assert_ne!(cp.record_at_start().expect("record").how, How::Watched);
        // Another nop's checkpoint, other rules: the same.
        quiet(&cp);
        Checkpoints::new(&root, &root.join(".nop"), 1.0)
            .record_full()
            .expect("record");
        assert_ne!(cp.record_at_start().expect("record").how, How::Watched);
        quiet(&cp);
        write(&root, ".nop/.permissions/agent-x.yml", "file-access: []\n");
        assert_ne!(cp.record_at_start().expect("record").how, How::Watched);
    }

    #[test]
    fn a_write_through_another_link_or_an_exclude_file_outside_is_not_missed() {
        let _serial = crate::checkpoint::serial();
        let (dir, cp) = repo();
        let root = cp.root().to_path_buf();
        let outside = dir.path().join("outside-link");
        std::fs::hard_link(root.join("docs/b.md"), &outside).expect("link");
        quiet(&cp);
        // No event in the tree: the file's other name is elsewhere.
        std::fs::write(&outside, "through the link\n").expect("write");
        let linked = cp.record_at_start().expect("record");
        assert_ne!(linked.how, How::Watched);
        assert!(has(&cp, &linked.tree, "docs/b.md", "through the link\n"));
        // The repository's own exclude file is outside the tree too.
        write(&root, "notes.tmp", "notes\n");
        write(&root, ".git/info/exclude", "*.tmp\n");
        let before = quiet(&cp);
        assert!(!has(&cp, &before.tree, "notes.tmp", "notes\n"));
        write(&root, ".git/info/exclude", "\n");
        let listed = cp.record_at_start().expect("record");
        assert_ne!(listed.how, How::Watched);
        assert!(has(&cp, &listed.tree, "notes.tmp", "notes\n"));
    }

    #[test]
    fn a_directory_renamed_or_too_many_events_or_directories_are_never_missed() {
        let _serial = crate::checkpoint::serial();
        let (_dir, cp) = repo();
        let root = cp.root().to_path_buf();
        quiet(&cp);
        // A directory renamed: the watches move with it, so they are set up again.
        std::fs::rename(root.join("docs"), root.join("papers")).expect("mv");
        let moved = cp.record_at_start().expect("record");
        assert_ne!(moved.how, How::Watched);
        assert!(has(&cp, &moved.tree, "papers/b.md", "b\n"));
        quiet(&cp);
        // More events than the kernel queues between two checkpoints (the queue overflows):
        // the checkpoint after them looks at the disk. (What the lost events named is found by
        // that checkpoint's walk, which watches any directory it finds.)
        let queued = std::fs::read_to_string("/proc/sys/fs/inotify/max_queued_events")
            .ok()
            .and_then(|n| n.trim().parse::<usize>().ok())
            .unwrap_or(16_384);
        for i in 0..=queued / 2 {
            std::fs::write(root.join("src/churn.tmp"), i.to_string()).expect("write");
        }
        write(&root, "src/a.rs", "after the flood\n");
        let flooded = cp.record_at_start().expect("record");
        assert_ne!(flooded.how, How::Watched);
        assert!(has(&cp, &flooded.tree, "src/a.rs", "after the flood\n"));
        // More directories than are watched: none is, every checkpoint looks at the disk.
        for i in 0..MAX_WATCHES {
            std::fs::create_dir_all(root.join(format!("many/d{i}"))).expect("mkdir");
        }
        for _ in 0..3 {
            assert_ne!(cp.record_at_start().expect("record").how, How::Watched);
        }
        write(&root, "many/d7/late.txt", "late\n");
        let late = cp.record_at_start().expect("record");
        assert!(has(&cp, &late.tree, "many/d7/late.txt", "late\n"));
    }

    #[test]
    fn nothing_beneath_a_directory_swapped_for_a_link_is_watched() {
        let dir = tempfile::tempdir().expect("temp");
        let root = dir.path().join("root");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(root.join("x")).expect("mkdir");
        std::fs::create_dir_all(outside.join("usr")).expect("mkdir");
        std::os::unix::fs::symlink(&outside, root.join("x").with_file_name("y")).expect("link");
        // Recorded as directories; `x` is a link to the outside by the time they are watched.
        std::fs::remove_dir(root.join("x")).expect("rm");
        std::fs::rename(root.join("y"), root.join("x")).expect("swap");
        let mut watcher = Watcher {
            inotify: Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
                .expect("inotify"),
            dev: nix::sys::stat::lstat(&root).expect("stat").st_dev,
            watched: HashSet::new(),
            heard: false,
            stale: false,
        };
        assert_eq!(watcher.add_all(&root, ["", "x", "x/usr"]), Ok(true));
        assert_eq!(watcher.watched, HashSet::from([String::new()]));
    }
}
