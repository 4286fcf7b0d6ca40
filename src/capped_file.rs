//! Reading a file nop did not write and the model may have planted (other agents' settings,
//! skills, commands, MCP configurations): a regular file only, opened without blocking (a named
//! pipe in its place must never hold nop up), and at most so many bytes. The one way to read
//! such a file.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Why a file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CappedError {
    #[error("it is not a regular file")]
    NotRegular,
    #[error("it is {0} bytes, over the limit of {1}")]
    TooLarge(u64, u64),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// The file at `path`, whole; `Ok(None)` when there is none. One larger than `max` bytes is
/// an error.
pub fn read(path: &Path, max: u64) -> Result<Option<Vec<u8>>, CappedError> {
    match read_prefix(path, max)? {
        None => Ok(None),
        Some((bytes, false)) => Ok(Some(bytes)),
        Some((_, true)) => {
            let len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(max + 1);
            Err(CappedError::TooLarge(len, max))
        }
    }
}

/// The first `max` bytes of the file at `path`, and whether it was longer; `Ok(None)` when there
/// is none.
pub fn read_prefix(path: &Path, max: u64) -> Result<Option<(Vec<u8>, bool)>, CappedError> {
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    if !file.metadata()?.is_file() {
        return Err(CappedError::NotRegular);
    }
    let mut bytes = Vec::new();
    file.take(max + 1).read_to_end(&mut bytes)?;
    let cut = bytes.len() as u64 > max;
    bytes.truncate(usize::try_from(max).unwrap_or(usize::MAX));
    Ok(Some((bytes, cut)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_named_pipe_is_refused_at_once_and_a_large_file_named() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let pipe = dir.path().join("settings.json");
        nix::unistd::mkfifo(&pipe, nix::sys::stat::Mode::S_IRWXU)?;
        assert!(matches!(read(&pipe, 10), Err(CappedError::NotRegular)));
        let big = dir.path().join("big");
        std::fs::write(&big, "x".repeat(20))?;
        assert!(matches!(read(&big, 10), Err(CappedError::TooLarge(20, 10))));
        let prefix = read_prefix(&big, 10)?;
        assert_eq!(prefix.map(|(b, cut)| (b.len(), cut)), Some((10, true)));
        assert!(read(&dir.path().join("none"), 10)?.is_none());
        Ok(())
    }
}
