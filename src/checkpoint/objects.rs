//! Git objects of the store written in process: a blob or a tree, named as git names it (the
//! SHA-1 of its header and content) and stored as git stores a loose object (a zlib stream;
//! here of stored blocks, which every zlib reads). No git process runs for them.

use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use ring::digest::{Context, SHA1_FOR_LEGACY_USE_ONLY};

/// An object id.
pub(super) type Id = [u8; 20];

pub(super) fn hex(id: &Id) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

pub(super) fn from_hex(text: &str) -> Option<Id> {
    let mut id = [0u8; 20];
    if text.len() != 40 {
        return None;
    }
    for (i, byte) in id.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(i * 2..i * 2 + 2)?, 16).ok()?;
    }
    Some(id)
}

/// The largest stored block of a deflate stream.
const BLOCK: usize = 65_535;

/// A loose object being written: its id and its zlib stream computed as the content comes.
struct Writer {
    sha: Context,
    adler: (u32, u32),
    /// The stream so far, `None` when only the id is wanted.
    out: Option<std::fs::File>,
    /// Bytes waiting for a full block.
    pending: Vec<u8>,
}

impl Writer {
    fn new(kind: &str, size: u64, out: Option<std::fs::File>) -> std::io::Result<Writer> {
        let mut writer = Writer {
            sha: Context::new(&SHA1_FOR_LEGACY_USE_ONLY),
            adler: (1, 0),
            out,
            pending: Vec::with_capacity(BLOCK),
        };
        if let Some(out) = writer.out.as_mut() {
            // zlib: deflate with a 32 KiB window, no dictionary (0x7801 is a multiple of 31).
            out.write_all(&[0x78, 0x01])?;
        }
        writer.feed(format!("{kind} {size}\0").as_bytes())?;
        Ok(writer)
    }

    fn feed(&mut self, mut data: &[u8]) -> std::io::Result<()> {
        self.sha.update(data);
        // Only an object written needs zlib's checksum (a file verified is only named).
        if self.out.is_none() {
            return Ok(());
        }
        // Adler-32, reduced every 5,552 bytes as zlib does: the most that keeps `b` in a u32.
        let (mut a, mut b) = self.adler;
        for chunk in data.chunks(5_552) {
            for byte in chunk {
                a += u32::from(*byte);
                b += a;
            }
            a %= 65_521;
            b %= 65_521;
        }
        self.adler = (a, b);
        while !data.is_empty() {
            let room = BLOCK - self.pending.len();
            let (now, later) = data.split_at(room.min(data.len()));
            self.pending.extend_from_slice(now);
            data = later;
            if self.pending.len() == BLOCK {
                self.block(false)?;
            }
        }
        Ok(())
    }

    /// A stored block of what is pending.
    fn block(&mut self, last: bool) -> std::io::Result<()> {
        let Some(out) = self.out.as_mut() else {
            return Ok(());
        };
        let len = self.pending.len() as u16;
        let mut head = vec![u8::from(last)];
        head.extend_from_slice(&len.to_le_bytes());
        head.extend_from_slice(&(!len).to_le_bytes());
        out.write_all(&head)?;
        out.write_all(&self.pending)?;
        self.pending.clear();
        Ok(())
    }

    fn finish(mut self) -> std::io::Result<(Id, Option<std::fs::File>)> {
        self.block(true)?;
        let (a, b) = self.adler;
        if let Some(out) = self.out.as_mut() {
            out.write_all(&((b << 16) | a).to_be_bytes())?;
        }
        let mut id = [0u8; 20];
        id.copy_from_slice(self.sha.finish().as_ref());
        Ok((id, self.out))
    }
}

/// The id of a blob of `file`'s content (its target, for a symbolic link), and, with
/// `objects` (the store's object directory), the blob written there. `size`: the size its
/// stat data gave; a file that is not that size when read is an error (it changed meanwhile).
pub(super) fn blob_of(
    path: &Path,
    link: bool,
    size: u64,
    objects: Option<&Path>,
) -> std::io::Result<Id> {
    if link {
        use std::os::unix::ffi::OsStrExt;
        let target = std::fs::read_link(path)?;
        return blob(target.as_os_str().as_bytes(), objects);
    }
    // Never blocks on a named pipe swapped in since the stat: only a regular file is read.
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits() | nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    // The file opened is the one named, not one a directory swapped for a link since the
    // stat leads to (O_NOFOLLOW guards the last name only).
    use std::os::fd::AsRawFd;
    if std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))? != path {
        return Err(std::io::Error::other("reached through a link"));
    }
    let temp = temp_in(objects)?;
    let mut writer = Writer::new("blob", size, temp.as_ref().map(|t| t.reopen()).transpose()?)?;
    let mut buf = vec![0u8; BLOCK];
    let mut read = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        read += n as u64;
        if read > size {
            return Err(std::io::Error::other("the file grew while it was read"));
        }
        writer.feed(&buf[..n])?;
    }
    if read != size {
        return Err(std::io::Error::other("the file shrank while it was read"));
    }
    let (id, _) = writer.finish()?;
    place(objects, temp, &id)?;
    Ok(id)
}

/// The id of a blob of `bytes`, written to `objects` when given.
pub(super) fn blob(bytes: &[u8], objects: Option<&Path>) -> std::io::Result<Id> {
    object("blob", bytes, objects)
}

/// The id of a tree of `body` (its entries, as git writes them), written to `objects`.
pub(super) fn tree(body: &[u8], objects: &Path) -> std::io::Result<Id> {
    object("tree", body, Some(objects))
}

fn object(kind: &str, bytes: &[u8], objects: Option<&Path>) -> std::io::Result<Id> {
    let temp = temp_in(objects)?;
    let mut writer = Writer::new(
        kind,
        bytes.len() as u64,
        temp.as_ref().map(|t| t.reopen()).transpose()?,
    )?;
    writer.feed(bytes)?;
    let (id, _) = writer.finish()?;
    place(objects, temp, &id)?;
    Ok(id)
}

fn temp_in(objects: Option<&Path>) -> std::io::Result<Option<tempfile::NamedTempFile>> {
    objects
        .map(|dir| tempfile::Builder::new().prefix("tmp_obj_").tempfile_in(dir))
        .transpose()
}

/// Moves a written object to its name (`objects/ab/cdef…`), unless one is there already.
fn place(
    objects: Option<&Path>,
    temp: Option<tempfile::NamedTempFile>,
    id: &Id,
) -> std::io::Result<()> {
    let (Some(objects), Some(temp)) = (objects, temp) else {
        return Ok(());
    };
    let name = hex(id);
    let dir = objects.join(&name[..2]);
    let path = dir.join(&name[2..]);
    if path.exists() {
        return Ok(());
    }
    std::fs::create_dir_all(&dir)?;
    temp.persist(&path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use std::process::Command;

    #[test]
    fn objects_are_named_and_stored_as_git_reads_them() {
        let _serial = crate::checkpoint::serial();
        std::fs::create_dir_all("/var/tmp/nop-tests").expect("/var/tmp/nop-tests");
        let dir = tempfile::tempdir_in("/var/tmp/nop-tests").expect("temp");
        let store = dir.path().join("store");
        let out = Command::new("git")
            .args(["init", "-q", "--bare"])
            .arg(&store)
            .output()
            .expect("git");
        assert!(out.status.success());
        let objects = store.join("objects");
        let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        for content in [&b""[..], b"hello\n", &big] {
            let file = dir.path().join("file");
            std::fs::write(&file, content).expect("write");
            let id = blob_of(&file, false, content.len() as u64, Some(&objects)).expect("blob");
            let git = Command::new("git")
                .args(["hash-object", "--no-filters"])
                .arg(&file)
                .output()
                .expect("git");
            assert_eq!(hex(&id), String::from_utf8_lossy(&git.stdout).trim());
            let back = Command::new("git")
                .arg("--git-dir")
                .arg(&store)
                .args(["cat-file", "blob", &hex(&id)])
                .output()
                .expect("git");
            assert!(back.status.success(), "{back:?}");
            assert_eq!(back.stdout, content);
        }
        let blob_id = blob(b"x", Some(&objects)).expect("blob");
        let mut body = b"100644 a\0".to_vec();
        body.extend_from_slice(&blob_id);
        let id = tree(&body, &objects).expect("tree");
        let listed = Command::new("git")
            .arg("--git-dir")
            .arg(&store)
            .args(["ls-tree", &hex(&id)])
            .output()
            .expect("git");
        assert_eq!(
            String::from_utf8_lossy(&listed.stdout),
            format!("100644 blob {}\ta\n", hex(&blob_id))
        );
        let fsck = Command::new("git")
            .arg("--git-dir")
            .arg(&store)
            .args(["fsck", "--strict"])
            .output()
            .expect("git");
        assert!(fsck.status.success(), "{fsck:?}");
        assert_eq!(from_hex(&hex(&id)), Some(id));
    }

    #[test]
    fn a_file_reached_through_a_link_or_a_pipe_is_not_read() {
        let dir = tempfile::tempdir().expect("temp");
        // A directory the agent swapped for a link to somewhere outside, after the stat.
        std::fs::create_dir(dir.path().join("outside")).expect("mkdir");
        std::fs::write(dir.path().join("outside/secret"), "s3cret").expect("write");
        std::os::unix::fs::symlink(dir.path().join("outside"), dir.path().join("src"))
            .expect("link");
        let through = blob_of(&dir.path().join("src/secret"), false, 6, None);
        assert!(through.is_err(), "{through:?}");
        assert!(blob_of(&dir.path().join("outside/secret"), false, 6, None).is_ok());
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
        assert!(blob_of(&fifo, false, 0, None).is_err());
    }
}
