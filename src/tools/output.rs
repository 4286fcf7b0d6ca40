//! What nop keeps of a command's output, whatever it prints: the head and tail of each stream
//! in memory ([`HeadTail`]), and, once a stream outgrows that, the whole streamed to a new
//! `out-<ts>.log` of the session as it arrives ([`Capture`]). The model gets head and tail with
//! a marker naming the log (`docs/output-limits.md`).

use std::io::SeekFrom;
use std::path::PathBuf;

use tokio::io::{AsyncSeekExt, AsyncWriteExt};

pub use crate::head_tail::{HeadTail, MARKER_ROOM, Shown};
use crate::session::Store;

/// The most of one stream kept in memory, whatever `tools.output_max_bytes` says: a larger
/// stream is cut to head and tail, the whole kept in the out log.
pub const KEPT_MAX: usize = 4 << 20;

/// `path` as the model reads it: relative to the repository `root` when it is inside (a path
/// the model's commands and tools, which start there, can open), else whole.
pub fn shown_path(root: &std::path::Path, path: &std::path::Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .to_string_lossy()
        .into_owned()
}

/// Splits `budget` between two streams of `a` and `b` bytes: the shorter gets all it needs up
/// to half, the longer the rest.
pub fn share(budget: usize, a: u64, b: u64) -> (usize, usize) {
    let half = budget / 2;
    if a <= b {
        let first = usize::try_from(a).unwrap_or(usize::MAX).min(half);
        (first, budget - first)
    } else {
        let second = usize::try_from(b).unwrap_or(usize::MAX).min(half);
        (budget - second, second)
    }
}

/// One of a command's two output streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// The output of one command as it arrives: head and tail of each stream in memory and, from
/// the moment either outgrows [`HeadTail::capacity`], the whole in a new `out-<ts>.log`:
/// `stdout:` and standard output as it arrives, then `stderr:` and standard error (kept in an
/// unnamed file of the session directory meanwhile), then a last line on how the command ended.
pub struct Capture {
    pub stdout: HeadTail,
    pub stderr: HeadTail,
    store: Store,
    session_id: String,
    spill: Option<Spill>,
    /// The first failure to write the log; the rest of the output is then only counted.
    failed: Option<std::io::Error>,
}

struct Spill {
    path: PathBuf,
    log: tokio::fs::File,
    /// Standard error until the command ends.
    spool: tokio::fs::File,
    /// Whether the last byte written of each stream was a newline (or nothing was written).
    out_ended: bool,
    err_ended: bool,
}

impl Capture {
    /// Keeps `capacity` bytes of each stream (at most [`KEPT_MAX`]); a log, if needed, goes to
    /// session `session_id` of `store`.
    pub fn new(store: Store, session_id: String, capacity: usize) -> Capture {
        let capacity = capacity.min(KEPT_MAX);
        Capture {
            stdout: HeadTail::with_capacity(capacity),
            stderr: HeadTail::with_capacity(capacity),
            store,
            session_id,
            spill: None,
            failed: None,
        }
    }

    /// Takes the next piece of `stream`.
    pub async fn push(&mut self, stream: Stream, bytes: &[u8]) {
        let kept = match stream {
            Stream::Stdout => &self.stdout,
            Stream::Stderr => &self.stderr,
        };
        if self.spill.is_none()
            && self.failed.is_none()
            && kept.total() + bytes.len() as u64 > kept.capacity() as u64
            && let Err(e) = self.open().await
        {
            self.failed = Some(e);
        }
        match stream {
            Stream::Stdout => self.stdout.push(bytes),
            Stream::Stderr => self.stderr.push(bytes),
        }
        if let Some(spill) = &mut self.spill
            && self.failed.is_none()
            && let Err(e) = spill.write(stream, bytes).await
        {
            self.failed = Some(e);
        }
    }

    /// Starts the log with what both streams held so far (each still whole).
    async fn open(&mut self) -> std::io::Result<()> {
        let (path, log) = self
            .store
            .create_tool_output(&self.session_id, chrono::Utc::now())
            .map_err(std::io::Error::other)?;
        let spool = tempfile::tempfile_in(self.store.dir(&self.session_id))?;
        let mut spill = Spill {
            path,
            log: tokio::fs::File::from_std(log),
            spool: tokio::fs::File::from_std(spool),
            out_ended: true,
            err_ended: true,
        };
        spill.log.write_all(b"stdout:\n").await?;
        spill.write(Stream::Stdout, &self.stdout.kept()).await?;
        spill.write(Stream::Stderr, &self.stderr.kept()).await?;
        self.spill = Some(spill);
        Ok(())
    }

    /// The log holding the whole output, if one was needed.
    pub fn log_path(&self) -> Option<PathBuf> {
        self.spill.as_ref().map(|s| s.path.clone())
    }

    /// Completes the log, if there is one, with standard error and `last_line` (how the command
    /// ended). Returns the log's path, or the first error writing it.
    pub async fn finish(&mut self, last_line: &str) -> std::io::Result<Option<PathBuf>> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        let name = self.log_path();
        let Some(spill) = self.spill.as_mut() else {
            return Ok(None);
        };
        let log = &mut spill.log;
        if !spill.out_ended {
            log.write_all(b"\n").await?;
        }
        log.write_all(b"stderr:\n").await?;
        spill.spool.flush().await?;
        spill.spool.seek(SeekFrom::Start(0)).await?;
        tokio::io::copy(&mut spill.spool, log).await?;
        if !spill.err_ended {
            log.write_all(b"\n").await?;
        }
        log.write_all(last_line.as_bytes()).await?;
        log.write_all(b"\n").await?;
        log.flush().await?;
        Ok(name)
    }
}

impl Spill {
    async fn write(&mut self, stream: Stream, bytes: &[u8]) -> std::io::Result<()> {
        let Some(last) = bytes.last() else {
            return Ok(());
        };
        let (file, ended) = match stream {
            Stream::Stdout => (&mut self.log, &mut self.out_ended),
            Stream::Stderr => (&mut self.spool, &mut self.err_ended),
        };
        file.write_all(bytes).await?;
        *ended = *last == b'\n';
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_stream_longer_than_kept_goes_whole_to_the_log() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let store = Store::new(dir.path(), std::time::Duration::from_secs(1));
        let id = store.create("coder", chrono::Utc::now())?.session_id;
        let mut capture = Capture::new(store.clone(), id.clone(), 10);
        capture.push(Stream::Stderr, b"warn\n").await;
        capture.push(Stream::Stdout, b"0123").await;
        assert_eq!(capture.log_path(), None);
        capture.push(Stream::Stdout, b"456789abc").await;
        capture.push(Stream::Stderr, b"late").await;
        capture.push(Stream::Stdout, b"def").await;
        let path = capture.finish("exit code: 0").await?;
        let path = path.ok_or_else(|| anyhow::anyhow!("no log"))?;
        assert_eq!(path.parent(), Some(store.dir(&id).as_path()));
        assert_eq!(
            std::fs::read_to_string(&path)?,
            "stdout:\n0123456789abcdef\nstderr:\nwarn\nlate\nexit code: 0\n"
        );
        assert_eq!(
            capture.stdout.text(10),
            Shown::Cut {
                head: "01234".into(),
                omitted: 6,
                tail: "bcdef".into(),
            }
        );
        Ok(())
    }

    #[tokio::test]
    async fn short_output_writes_no_log() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let store = Store::new(dir.path(), std::time::Duration::from_secs(1));
        let id = store.create("coder", chrono::Utc::now())?.session_id;
        let files = std::fs::read_dir(store.dir(&id))?.count();
        let mut capture = Capture::new(store.clone(), id.clone(), 10);
        capture.push(Stream::Stdout, b"0123456789").await;
        capture.push(Stream::Stderr, b"0123456789").await;
        assert_eq!(capture.finish("exit code: 0").await?, None);
        assert_eq!(std::fs::read_dir(store.dir(&id))?.count(), files);
        Ok(())
    }
}
