//! Crash-safe file writes: temp file in the same directory, fsync, rename, fsync the directory.
//!
//! A reader (or a process killed at any instant) sees either the old file or the new one, never
//! a mixture. Several files change together through [`commit_files`], which keeps a small
//! journal so that a crash between renames is rolled forward on the next write lock.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tempfile::{Builder, NamedTempFile, TempPath};

use super::error::{Result, SessionError};

/// Prefix of every temporary file and directory the store makes. Its builder holds an exclusive
/// `flock` on it while it lives ([`claim`]), so one that nobody holds was left by a killed
/// process and is removed by the next write ([`remove_abandoned`]), whatever its age.
pub(crate) const TEMP_PREFIX: &str = ".tmp-";
/// The journal of a multi-file commit in progress.
pub(crate) const JOURNAL: &str = "commit.json";

/// Replaces `path` with `contents` atomically.
pub fn write_atomic(path: &Path, contents: &[u8]) -> Result<()> {
    let dir = parent_of(path);
    let temp = write_temp(dir, contents, None)?;
    temp.persist(path).map_err(|e| SessionError::Io {
        path: path.to_path_buf(),
        source: e.error,
    })?;
    sync_dir(dir)
}

/// Replaces `path` with `contents` atomically, as an editor saves a user's file: an existing
/// file keeps its permission bits (an executable stays executable) and, where this process may
/// set them, its owner and group; a new file gets `0666` less the umask, as `open(2)` would give
/// it. The file is a new inode: a hard link to the old one keeps the old contents.
pub fn replace_file(path: &Path, contents: &[u8]) -> Result<()> {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let dir = parent_of(path);
    let existing = std::fs::metadata(path).ok();
    let temp = write_temp(dir, contents, None)?;
    let temp_path = temp.path().to_path_buf();
    let mode = match &existing {
        Some(meta) => meta.mode() & 0o7777,
        None => 0o666 & !umask(),
    };
    temp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(SessionError::io(&temp_path))?;
    if let Some(meta) = &existing {
        // Only root or the owner with a group it belongs to may; otherwise the file becomes the
        // writer's, as with any editor that saves by renaming.
        let _ = std::os::unix::fs::fchown(temp.as_file(), Some(meta.uid()), Some(meta.gid()));
        if meta.mode() & 0o6000 != 0 {
            // chown clears set-user-ID and set-group-ID bits: set the mode again.
            let _ = temp
                .as_file()
                .set_permissions(std::fs::Permissions::from_mode(mode));
        }
    }
    temp.persist(path).map_err(|e| SessionError::Io {
        path: path.to_path_buf(),
        source: e.error,
    })?;
    sync_dir(dir)
}

/// This process's umask, read without changing it (`umask(2)` can only set it); 022 where
/// /proc does not say.
fn umask() -> u32 {
    static UMASK: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *UMASK.get_or_init(read_umask)
}

fn read_umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("Umask:"))?;
            u32::from_str_radix(line.trim_start_matches("Umask:").trim(), 8).ok()
        })
        .unwrap_or(0o022)
}

/// Creates `path` with `contents`, failing if it exists (create-new semantics); with `read_only`
/// the file is made read-only before it appears under its name.
pub fn create_new_atomic(path: &Path, contents: &[u8], read_only: bool) -> Result<()> {
    create_new_atomic_with(path, read_only, |out| out.write_all(contents))
}

/// [`create_new_atomic`] with the contents written by `write` as they are made (through a
/// buffer): a large file is never whole in memory.
pub fn create_new_atomic_with(
    path: &Path,
    read_only: bool,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    let dir = parent_of(path);
    let temp = write_temp_with(dir, read_only.then_some(()), write)?;
    temp.persist_noclobber(path).map_err(|e| SessionError::Io {
        path: path.to_path_buf(),
        source: e.error,
    })?;
    sync_dir(dir)
}

/// Writes several files of one directory so that all change or none does.
pub fn commit_files(dir: &Path, files: &[(&str, &[u8])]) -> Result<()> {
    if let [(name, contents)] = files {
        return write_atomic(&dir.join(name), contents);
    }
    let mut temps: Vec<(TempPath, &str)> = Vec::with_capacity(files.len());
    for (name, contents) in files {
        temps.push((write_temp(dir, contents, None)?.into_temp_path(), name));
    }
    let journal = Journal {
        renames: temps
            .iter()
            .map(|(temp, name)| Rename {
                from: file_name(temp),
                to: (*name).to_string(),
            })
            .collect(),
    };
    let journal_bytes = serde_json::to_vec(&journal).map_err(|e| SessionError::Io {
        path: dir.join(JOURNAL),
        source: e.into(),
    })?;
    // From here on the commit is decided: the temps must outlive this process if it dies.
    let kept: Vec<PathBuf> = temps
        .into_iter()
        .map(|(temp, _)| temp.keep())
        .collect::<Result<_, _>>()
        .map_err(|e| SessionError::Io {
            path: dir.to_path_buf(),
            source: e.error,
        })?;
    write_atomic(&dir.join(JOURNAL), &journal_bytes).inspect_err(|_| {
        for path in &kept {
            let _ = fs::remove_file(path);
        }
    })?;
    roll_forward(dir, &journal)
}

/// Completes a multi-file commit that a killed process left behind. Call under the write lock.
pub fn recover(dir: &Path) -> Result<()> {
    let journal_path = dir.join(JOURNAL);
    match fs::read(&journal_path) {
        Ok(bytes) => match serde_json::from_slice::<Journal>(&bytes) {
            Ok(journal) => roll_forward(dir, &journal)?,
            // The journal itself is written atomically, so this is a hand edit: leave it.
            Err(e) => {
                return Err(SessionError::Corrupt {
                    path: journal_path,
                    pos: None,
                    message: e.to_string(),
                });
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(SessionError::io(journal_path)(e)),
    }
    remove_abandoned(dir)
}

pub fn has_pending_commit(dir: &Path) -> bool {
    dir.join(JOURNAL).exists()
}

fn roll_forward(dir: &Path, journal: &Journal) -> Result<()> {
    for rename in &journal.renames {
        let from = dir.join(&rename.from);
        match fs::rename(&from, dir.join(&rename.to)) {
            Ok(()) => {}
            // Already renamed before a crash.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(SessionError::io(from)(e)),
        }
    }
    sync_dir(dir)?;
    let journal_path = dir.join(JOURNAL);
    fs::remove_file(&journal_path).map_err(SessionError::io(&journal_path))?;
    sync_dir(dir)
}

/// Removes the temporary files and directories in `dir` that no live process holds: what a
/// killed writer left. One still being built is held by its builder and stays.
pub(crate) fn remove_abandoned(dir: &Path) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let entries = fs::read_dir(dir).map_err(SessionError::io(dir))?;
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(TEMP_PREFIX) {
            continue;
        }
        let path = entry.path();
        let file = match fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(&path)
        {
            Ok(file) => file,
            // A symlink: no builder of ours makes one.
            Err(e) if e.raw_os_error() == Some(nix::errno::Errno::ELOOP as i32) => {
                let _ = fs::remove_file(&path);
                continue;
            }
            // Cannot tell whether someone holds it (out of descriptors, no permission): leave it.
            Err(_) => continue,
        };
        if file.try_lock().is_err() || !still_named(&path, &file) {
            continue;
        }
        let is_dir = file.metadata().is_ok_and(|m| m.is_dir());
        let removed = if is_dir {
            fs::remove_dir_all(&path)
        } else {
            fs::remove_file(&path)
        };
        if let Err(e) = removed {
            tracing::warn!(path = %path.display(), error = %e, "could not remove a temporary entry a killed process left");
        }
    }
    Ok(())
}

/// Takes the builder's hold on a temporary entry just created at `path` through `file`. `false`
/// when a cleaner removed the entry between its creation and the lock (it looked abandoned for
/// that instant); the caller makes another.
pub(crate) fn claim(path: &Path, file: &File) -> std::io::Result<bool> {
    file.lock()?;
    Ok(still_named(path, file))
}

/// Whether `path` still names the inode open as `file`.
fn still_named(path: &Path, file: &File) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    match (fs::symlink_metadata(path), file.metadata()) {
        (Ok(named), Ok(open)) => named.dev() == open.dev() && named.ino() == open.ino(),
        _ => false,
    }
}

fn write_temp(dir: &Path, contents: &[u8], read_only: Option<()>) -> Result<NamedTempFile> {
    write_temp_with(dir, read_only, |out| out.write_all(contents))
}

fn write_temp_with(
    dir: &Path,
    read_only: Option<()>,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<NamedTempFile> {
    let temp = loop {
        let temp = Builder::new()
            .prefix(TEMP_PREFIX)
            .tempfile_in(dir)
            .map_err(SessionError::io(dir))?;
        if claim(temp.path(), temp.as_file()).map_err(SessionError::io(temp.path()))? {
            break temp;
        }
    };
    let path = temp.path().to_path_buf();
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, temp.as_file());
    write(&mut out)
        .and_then(|()| out.flush())
        .map_err(SessionError::io(&path))?;
    drop(out);
    if read_only.is_some() {
        let mut perms = temp
            .as_file()
            .metadata()
            .map_err(SessionError::io(&path))?
            .permissions();
        perms.set_readonly(true);
        temp.as_file()
            .set_permissions(perms)
            .map_err(SessionError::io(&path))?;
    }
    temp.as_file().sync_all().map_err(SessionError::io(&path))?;
    Ok(temp)
}

/// Makes a rename or a new directory entry durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(SessionError::io(dir))
}

fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[derive(Serialize, Deserialize)]
struct Journal {
    renames: Vec<Rename>,
}

#[derive(Serialize, Deserialize)]
struct Rename {
    from: String,
    to: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_of_several_files_leaves_no_temps_or_journal() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        fs::write(dir.path().join("a"), "old a")?;
        commit_files(dir.path(), &[("a", b"new a"), ("b", b"new b")])?;
        assert_eq!(fs::read_to_string(dir.path().join("a"))?, "new a");
        assert_eq!(fs::read_to_string(dir.path().join("b"))?, "new b");
        let names: Vec<_> = fs::read_dir(dir.path())?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<Result<_, _>>()?;
        assert_eq!(names.len(), 2, "{names:?}");
        Ok(())
    }

    #[test]
    fn recover_rolls_an_interrupted_commit_forward() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        fs::write(dir.path().join("a"), "old a")?;
        fs::write(dir.path().join("b"), "old b")?;
        // As a process killed after the first rename would leave it.
        fs::write(dir.path().join("a"), "new a")?;
        fs::write(dir.path().join(".tmp-b1"), "new b")?;
        fs::write(dir.path().join(".tmp-orphan"), "half")?;
        let journal = r#"{"renames":[{"from":".tmp-a1","to":"a"},{"from":".tmp-b1","to":"b"}]}"#;
        fs::write(dir.path().join(JOURNAL), journal)?;
        assert!(has_pending_commit(dir.path()));
        recover(dir.path())?;
        assert_eq!(fs::read_to_string(dir.path().join("a"))?, "new a");
        assert_eq!(fs::read_to_string(dir.path().join("b"))?, "new b");
        assert!(!has_pending_commit(dir.path()));
        assert!(!dir.path().join(".tmp-orphan").exists());
        Ok(())
    }

    #[test]
    fn create_new_refuses_to_replace() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("snap.json");
        create_new_atomic(&path, b"one", true)?;
        assert!(create_new_atomic(&path, b"two", true).is_err());
        assert_eq!(fs::read_to_string(&path)?, "one");
        assert!(fs::metadata(&path)?.permissions().readonly());
        Ok(())
    }
}

#[cfg(test)]
mod check_tests {
    use crate::session::Store;

    /// What a kill between the renames of a two-file commit leaves: the check completes it and
    /// finds nothing wrong, as the next read or write would.
    #[test]
    fn a_half_done_commit_is_completed_by_the_check_not_reported() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let store = Store::new(dir.path(), std::time::Duration::from_secs(5));
        let session = store.create("coder", chrono::Utc::now())?;
        let id = session.session_id;
        let session_dir = store.dir(&id);
        let plan = b"<tasks><task id=\"a\" title=\"done at last\" status=\"completed\"/></tasks>\n";
        std::fs::write(session_dir.join(".tmp-plan"), plan)?;
        std::fs::write(
            session_dir.join(super::JOURNAL),
            r#"{"renames": [{"from": ".tmp-plan", "to": "plan.xml"}]}"#,
        )?;
        assert_eq!(store.check(&id)?, Vec::new());
        assert!(!session_dir.join(super::JOURNAL).exists());
        assert_eq!(std::fs::read(session_dir.join("plan.xml"))?, plan);
        Ok(())
    }
}
