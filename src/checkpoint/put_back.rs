//! Writing a checkpoint's files back into a directory (`nop undo`, `nop rewind`, `fork
//! --worktree`, an isolated subagent's worktree) so that no failure ever leaves a file empty or
//! half-written: every object is read from the store in one `git cat-file --batch`, its id
//! computed again from its bytes (a damaged pack or loose object is an error naming it, before
//! anything is written), streamed into a temporary file beside its place, and only when every
//! file is staged are they renamed into place, each whole. A link on the way to a file is
//! replaced by a directory, never written through (as git does). Restores of one repository run
//! one at a time (a lock in the store).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::{CheckpointError, Checkpoints, Result};

/// One file to write: its path under the directory, its mode (`100644`, `100755`, `120000`)
/// and its blob id.
pub(super) struct Want<'a> {
    pub path: &'a str,
    pub mode: &'a str,
    pub id: &'a str,
}

/// A file staged beside its place, ready to be renamed in.
struct Staged {
    temp: tempfile::TempPath,
    target: PathBuf,
    /// For a link: where it points (the blob's bytes); the temp file is unused then.
    link: Option<Vec<u8>>,
}

impl Checkpoints {
    /// Writes `files` (from `entries`: path → "mode type id") of checkpoint `tree` under `dir`,
    /// verified and whole, as the module says. Nothing is renamed into place unless every object
    /// read back right.
    pub(super) fn put_back(&self, tree: &str, dir: &Path, files: &[Want<'_>]) -> Result<()> {
        if files.is_empty() {
            return Ok(());
        }
        let _one = self.restore_lock()?;
        sweep(dir, files);
        let mut staged: Vec<Staged> = Vec::with_capacity(files.len());
        let ids: String = files.iter().map(|f| format!("{}\n", f.id)).collect();
        let read = self.cat_batch(ids, |out| {
            for want in files {
                staged.push(self.stage(out, tree, dir, want)?);
            }
            Ok(())
        });
        read?;
        for file in staged {
            match file.link {
                Some(target) => {
                    use std::os::unix::ffi::OsStrExt;
                    let temp = file
                        .target
                        .with_file_name(format!(".nop-link-{}", uuid::Uuid::now_v7().simple()));
                    std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(&target), &temp)
                        .map_err(super::io(&temp))?;
                    std::fs::rename(&temp, &file.target).map_err(super::io(&file.target))?;
                }
                None => file
                    .temp
                    .persist(&file.target)
                    .map_err(|e| super::io(&file.target)(e.error))?,
            }
        }
        Ok(())
    }

    /// Runs `read` on the answers of one `git cat-file --batch` for `ids` (one per line), fed
    /// from a thread of its own so neither side waits for the other; the process ends when
    /// `read` returns, whatever it read.
    pub(super) fn cat_batch<T>(
        &self,
        ids: String,
        read: impl FnOnce(&mut BufReader<std::process::ChildStdout>) -> Result<T>,
    ) -> Result<T> {
        let mut child = self
            .command(
                &["cat-file", "--batch"],
                &self.dir.join("index"),
                &self.root,
                true,
            )
            .spawn()
            .map_err(CheckpointError::NoGit)?;
        let mut stdin = child.stdin.take();
        let writer = std::thread::spawn(move || {
            if let Some(stdin) = stdin.as_mut() {
                let _ = stdin.write_all(ids.as_bytes());
            }
        });
        let result = match child.stdout.take() {
            Some(stdout) => read(&mut BufReader::with_capacity(256 * 1024, stdout)),
            None => Err(self.failed("cat-file", b"no output")),
        };
        let _ = child.kill();
        let _ = writer.join();
        let _ = child.wait();
        result
    }

    /// Streams the next object of a `cat-file --batch` answer (its header read: `kind`, `id`,
    /// `size` bytes) through `each`, then its closing newline; whether its bytes hash to `id`.
    pub(super) fn read_object(
        &self,
        out: &mut impl BufRead,
        (kind, id, size): (&str, &str, u64),
        mut each: impl FnMut(&[u8]) -> Result<()>,
    ) -> Result<bool> {
        let mut hasher = Hasher::new(kind, id, size);
        let mut buf = vec![0u8; 64 * 1024];
        let mut left = size;
        while left > 0 {
            let n = usize::try_from(left.min(buf.len() as u64)).unwrap_or(buf.len());
            out.read_exact(&mut buf[..n])
                .map_err(|e| self.failed("cat-file", e.to_string().as_bytes()))?;
            hasher.update(&buf[..n]);
            each(&buf[..n])?;
            left -= n as u64;
        }
        let mut newline = [0u8; 1];
        let _ = out.read_exact(&mut newline);
        Ok(hasher.matches(id))
    }

    /// Reads the next object of `out` (answering `want.id`), checks its id, and stages it beside
    /// its place under `dir`.
    fn stage(
        &self,
        out: &mut impl BufRead,
        tree: &str,
        dir: &Path,
        want: &Want<'_>,
    ) -> Result<Staged> {
        let mut header = String::new();
        out.read_line(&mut header)
            .map_err(|e| self.failed("cat-file", e.to_string().as_bytes()))?;
        let fields: Vec<&str> = header.split_whitespace().collect();
        let size = match fields.as_slice() {
            [id, "blob", size] if *id == want.id => size.parse::<u64>().ok(),
            _ => None,
        }
        .ok_or_else(|| {
            CheckpointError::Refused(format!(
                "the checkpoint store at {} cannot give back {} ({}) of checkpoint {tree}: {}; \
                 nothing was put back (`nop sessions check` names every damaged checkpoint)",
                self.dir.display(),
                want.path,
                want.id,
                header.trim()
            ))
        })?;
        let target = dir.join(want.path);
        let parent = target.parent().unwrap_or(dir).to_path_buf();
        make_dirs(dir, &parent)?;
        let mut temp = tempfile::Builder::new()
            .prefix(".nop-restore-")
            .tempfile_in(&parent)
            .map_err(super::io(&parent))?;
        let mut link = Vec::new();
        let whole = self.read_object(out, ("blob", want.id, size), |bytes| {
            if want.mode == "120000" {
                link.extend_from_slice(bytes);
                Ok(())
            } else {
                temp.write_all(bytes).map_err(super::io(temp.path()))
            }
        })?;
        if !whole {
            return Err(CheckpointError::Refused(format!(
                "the checkpoint store at {} holds damaged data for {} (object {} of checkpoint \
                 {tree} does not hash to its id); nothing was put back (`nop sessions check` names \
                 every damaged checkpoint)",
                self.dir.display(),
                want.path,
                want.id
            )));
        }
        temp.as_file().sync_all().map_err(super::io(temp.path()))?;
        if want.mode != "120000" {
            use std::os::unix::fs::PermissionsExt;
            let mode = if want.mode == "100755" { 0o777 } else { 0o666 } & !umask();
            temp.as_file()
                .set_permissions(std::fs::Permissions::from_mode(mode))
                .map_err(super::io(temp.path()))?;
        }
        Ok(Staged {
            temp: temp.into_temp_path(),
            target,
            link: (want.mode == "120000").then_some(link),
        })
    }

    /// The store's restore lock, waited for (a second `nop undo` of the repository waits for the
    /// first, and says after a second which process it waits for: the holder's pid is in the
    /// file).
    fn restore_lock(&self) -> Result<nix::fcntl::Flock<std::fs::File>> {
        let path = self.dir.join("restore.lock");
        std::fs::create_dir_all(&self.dir).map_err(super::io(&self.dir))?;
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(super::io(&path))?;
        let started = std::time::Instant::now();
        let mut said = false;
        loop {
            match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
                Ok(lock) => {
                    // Who holds it, for the next one to name; the lock is what counts.
                    let _ = lock.set_len(0);
                    let _ = lock.write_all_at(std::process::id().to_string().as_bytes(), 0);
                    return Ok(lock);
                }
                Err((back, _)) => {
                    file = back;
                    let holder = || {
                        let mut text = String::new();
                        let _ = std::io::Read::read_to_string(&mut (&file).take(20), &mut text);
                        match text.trim().parse::<u32>() {
                            Ok(pid) => format!("nop (pid {pid})"),
                            Err(_) => "another nop".to_string(),
                        }
                    };
                    if !said && started.elapsed() > std::time::Duration::from_secs(1) {
                        let message = format!(
                            "waiting for {}, which is putting files back in this repository",
                            holder()
                        );
                        tracing::info!(op = "restore", "{message}");
                        notice(&message);
                        said = true;
                    }
                    if started.elapsed() > std::time::Duration::from_secs(600) {
                        return Err(CheckpointError::Refused(format!(
                            "{} has held {} for ten minutes; nothing was put back",
                            holder(),
                            path.display()
                        )));
                    }
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
            }
        }
    }
}

/// Where a restore that waits says so to the user: set by a command that has a terminal's
/// standard error to itself (`nop undo`, `nop rewind`); otherwise the log alone has it.
static NOTICE: std::sync::OnceLock<fn(&str)> = std::sync::OnceLock::new();

/// Sets where a restore's notices go (once per process).
pub fn set_notice(notice: fn(&str)) {
    let _ = NOTICE.set(notice);
}

fn notice(message: &str) {
    if let Some(notice) = NOTICE.get() {
        notice(message);
    }
}

/// Removes what a restore killed before renaming left beside the files it staged: temporary
/// files named as [`Checkpoints::put_back`] names them, in the directories of `files` (only
/// those reached without a link: nothing outside `dir` is looked at). Called with the restore
/// lock held, so no other restore is staging there.
fn sweep(dir: &Path, files: &[Want<'_>]) {
    let parents: std::collections::BTreeSet<&Path> = files
        .iter()
        .map(|f| Path::new(f.path).parent().unwrap_or(Path::new("")))
        .collect();
    for rel in parents {
        let mut at = dir.to_path_buf();
        let real = rel.components().all(|part| {
            at.push(part);
            at.symlink_metadata().is_ok_and(|m| m.is_dir())
        });
        let Ok(entries) = std::fs::read_dir(&at) else {
            continue;
        };
        if !real {
            continue;
        }
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(".nop-restore-") || name.starts_with(".nop-link-") {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

/// Makes the directories from `base` down to `dir`: a link or a file where a directory should be
/// is replaced by one (never followed).
fn make_dirs(base: &Path, dir: &Path) -> Result<()> {
    let Ok(rel) = dir.strip_prefix(base) else {
        return Ok(());
    };
    let mut at = base.to_path_buf();
    for part in rel.components() {
        at.push(part);
        match at.symlink_metadata() {
            Ok(m) if m.is_dir() => continue,
            Ok(_) => std::fs::remove_file(&at).map_err(super::io(&at))?,
            Err(_) => {}
        }
        std::fs::create_dir(&at).map_err(super::io(&at))?;
    }
    Ok(())
}

/// The process's umask, read without changing it for long.
fn umask() -> u32 {
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
    nix::sys::stat::umask(old);
    old.bits()
}

/// An object id computed again from a blob's bytes (SHA-1, or SHA-256 for a 64-digit id).
struct Hasher(ring::digest::Context);

impl Hasher {
    /// For an object of type `kind` (`blob`, `tree`, …) and `size` bytes said to be `id`.
    fn new(kind: &str, id: &str, size: u64) -> Hasher {
        let algorithm = if id.len() == 64 {
            &ring::digest::SHA256
        } else {
            &ring::digest::SHA1_FOR_LEGACY_USE_ONLY
        };
        let mut context = ring::digest::Context::new(algorithm);
        context.update(format!("{kind} {size}\0").as_bytes());
        Hasher(context)
    }

    fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    fn matches(self, id: &str) -> bool {
        let hex: String = self
            .0
            .finish()
            .as_ref()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        hex == id
    }
}

/// The blobs of `entries` (path → "mode type id") at `paths`, as [`Want`]s.
pub(super) fn wants<'a>(
    entries: &'a BTreeMap<String, String>,
    paths: impl IntoIterator<Item = &'a String>,
) -> Vec<Want<'a>> {
    paths
        .into_iter()
        .filter_map(|path| {
            let meta = entries.get(path)?;
            let mut parts = meta.split(' ');
            let (mode, kind, id) = (parts.next()?, parts.next()?, parts.next()?);
            (kind == "blob").then_some(Want { path, mode, id })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_computed_again_from_the_bytes() {
        // `echo hello | git hash-object --stdin`
        let mut h = Hasher::new("blob", "ce013625030ba8dba906f756967f9e9ca394464a", 6);
        h.update(b"hello\n");
        assert!(h.matches("ce013625030ba8dba906f756967f9e9ca394464a"));
        let mut h = Hasher::new("blob", "ce013625030ba8dba906f756967f9e9ca394464a", 6);
        h.update(b"HELLO\n");
        assert!(!h.matches("ce013625030ba8dba906f756967f9e9ca394464a"));
    }
}
