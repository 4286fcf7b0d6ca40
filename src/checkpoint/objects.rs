//! Git objects of the store written in process: a blob or a tree, named as git names it (the
//! SHA-1 of its header and content). A checkpoint's objects go into one pack
//! (`objects/pack/pack-<id>.pack` and its `.idx`, as git writes them, each object whole in a
//! zlib stream of stored blocks, which every zlib reads): two new files however many objects,
//! where loose objects would be one each (a new file is most of what writing a small object
//! costs). No git process runs for them. The store's packs are rolled up by [`roll_up`].

use std::collections::HashSet;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

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

/// A pack's object types, as its entries name them.
const TREE: u8 = 2;
const BLOB: u8 = 3;

/// A zlib stream of stored blocks, computed as the content comes.
struct Deflate {
    adler: (u32, u32),
    /// Bytes waiting for a full block.
    pending: Vec<u8>,
}

impl Deflate {
    fn start(out: &mut impl Write) -> std::io::Result<Deflate> {
        // zlib: deflate with a 32 KiB window, no dictionary (0x7801 is a multiple of 31).
        out.write_all(&[0x78, 0x01])?;
        Ok(Deflate {
            adler: (1, 0),
            pending: Vec::with_capacity(BLOCK),
        })
    }

    fn feed(&mut self, mut data: &[u8], out: &mut impl Write) -> std::io::Result<()> {
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
                self.block(false, out)?;
            }
        }
        Ok(())
    }

    /// A stored block of what is pending.
    fn block(&mut self, last: bool, out: &mut impl Write) -> std::io::Result<()> {
        let len = self.pending.len() as u16;
        let mut head = vec![u8::from(last)];
        head.extend_from_slice(&len.to_le_bytes());
        head.extend_from_slice(&(!len).to_le_bytes());
        out.write_all(&head)?;
        out.write_all(&self.pending)?;
        self.pending.clear();
        Ok(())
    }

    fn finish(mut self, out: &mut impl Write) -> std::io::Result<()> {
        self.block(true, out)?;
        let (a, b) = self.adler;
        out.write_all(&((b << 16) | a).to_be_bytes())
    }
}

/// Where a blob's content comes from.
enum Content<'a> {
    /// A regular file, of this size by its stat data.
    File(&'a Path, u64),
    /// A symbolic link's target.
    Bytes(Vec<u8>),
}

impl<'a> Content<'a> {
    /// The blob content of `path`: its target for a symbolic link, else the file of `size`
    /// bytes by its stat data.
    fn of(path: &'a Path, link: bool, size: u64) -> std::io::Result<Content<'a>> {
        if link {
            use std::os::unix::ffi::OsStrExt;
            let target = std::fs::read_link(path)?;
            return Ok(Content::Bytes(target.as_os_str().as_bytes().to_vec()));
        }
        Ok(Content::File(path, size))
    }

    fn size(&self) -> u64 {
        match self {
            Content::File(_, size) => *size,
            Content::Bytes(bytes) => bytes.len() as u64,
        }
    }

    /// Gives the content to `feed` piece by piece. A file that is not the size its stat data
    /// gave when read is an error (it changed meanwhile).
    fn read(&self, feed: &mut dyn FnMut(&[u8]) -> std::io::Result<()>) -> std::io::Result<()> {
        let (path, size) = match self {
            Content::Bytes(bytes) => return feed(bytes),
            Content::File(path, size) => (*path, *size),
        };
        // Never blocks on a named pipe swapped in since the stat: only a regular file is read.
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(
                nix::fcntl::OFlag::O_NOFOLLOW.bits() | nix::fcntl::OFlag::O_NONBLOCK.bits(),
            )
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
        let mut buf = vec![0u8; BLOCK.min(size as usize + 1)];
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
            feed(&buf[..n])?;
        }
        if read != size {
            return Err(std::io::Error::other("the file shrank while it was read"));
        }
        Ok(())
    }
}

fn sha_of(kind: &str, size: u64) -> Context {
    let mut sha = Context::new(&SHA1_FOR_LEGACY_USE_ONLY);
    sha.update(format!("{kind} {size}\0").as_bytes());
    sha
}

fn id_of(sha: Context) -> Id {
    let mut id = [0u8; 20];
    id.copy_from_slice(sha.finish().as_ref());
    id
}

/// The id of a blob of `path`'s content (its target, for a symbolic link), written nowhere.
/// `size`: the size its stat data gave; a file that is not that size when read is an error.
pub(super) fn blob_id(path: &Path, link: bool, size: u64) -> std::io::Result<Id> {
    let content = Content::of(path, link, size)?;
    let mut sha = sha_of("blob", content.size());
    content.read(&mut |data| {
        sha.update(data);
        Ok(())
    })?;
    Ok(id_of(sha))
}

/// CRC-32 (IEEE), as a pack's index keeps it for each entry.
fn crc32(mut crc: u32, data: &[u8]) -> u32 {
    static TABLE: std::sync::OnceLock<[u32; 256]> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut table = [0u32; 256];
        for (i, slot) in table.iter_mut().enumerate() {
            let mut c = i as u32;
            for _ in 0..8 {
                c = if c & 1 == 1 {
                    0xEDB8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
            }
            *slot = c;
        }
        table
    });
    crc = !crc;
    for byte in data {
        crc = table[((crc ^ u32::from(*byte)) & 0xFF) as usize] ^ (crc >> 8);
    }
    !crc
}

/// What an entry being written goes through: the pack file; the entry's length and CRC-32 so
/// far.
struct Counted<'a> {
    out: &'a mut std::io::BufWriter<std::fs::File>,
    written: u64,
    crc: u32,
}

impl Write for Counted<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.out.write(buf)?;
        self.crc = crc32(self.crc, &buf[..n]);
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// An entry of a pack: its object's id, its CRC-32 and where it begins.
#[derive(Clone, Copy)]
struct Entry {
    id: Id,
    crc: u32,
    offset: u64,
}

/// The objects of one checkpoint, written to one pack of the store (`objects`, its object
/// directory) as they come; the pack is named and seen by git only at [`Pack::finish`].
pub(super) struct Pack {
    dir: PathBuf,
    temp: Option<(tempfile::NamedTempFile, std::io::BufWriter<std::fs::File>)>,
    len: u64,
    entries: Vec<Entry>,
    ids: HashSet<Id>,
}

impl Pack {
    pub(super) fn new(objects: &Path) -> Pack {
        Pack {
            dir: objects.join("pack"),
            temp: None,
            // The header, written as the file is made.
            len: 12,
            entries: Vec::new(),
            ids: HashSet::new(),
        }
    }

    /// The blob of `path`'s content (its target, for a symbolic link), written to the pack.
    /// `size`: the size its stat data gave; a file that is not that size when read is an
    /// error (it changed meanwhile).
    pub(super) fn blob_of(&mut self, path: &Path, link: bool, size: u64) -> std::io::Result<Id> {
        let content = Content::of(path, link, size)?;
        self.put(BLOB, &content)
    }

    /// The tree of `body` (its entries, as git writes them), written to the pack.
    pub(super) fn tree(&mut self, body: &[u8]) -> std::io::Result<Id> {
        self.put(TREE, &Content::Bytes(body.to_vec()))
    }

    /// An entry of another pack, as it is (`bytes`, of this CRC-32), for the object `id`.
    fn put_raw(&mut self, id: Id, crc: u32, bytes: &[u8]) -> std::io::Result<()> {
        let out = self.out()?;
        out.write_all(bytes)?;
        let offset = self.len;
        self.len += bytes.len() as u64;
        self.ids.insert(id);
        self.entries.push(Entry { id, crc, offset });
        Ok(())
    }

    /// The pack being written, begun when its first object comes.
    fn out(&mut self) -> std::io::Result<&mut std::io::BufWriter<std::fs::File>> {
        if self.temp.is_none() {
            std::fs::create_dir_all(&self.dir)?;
            let temp = tempfile::Builder::new()
                .prefix("tmp_pack_")
                .tempfile_in(&self.dir)?;
            let mut out =
                std::io::BufWriter::with_capacity(BLOCK + 64, temp.as_file().try_clone()?);
            // The number of objects is written over at the end.
            out.write_all(b"PACK\0\0\0\x02\0\0\0\0")?;
            self.temp = Some((temp, out));
        }
        match self.temp.as_mut() {
            Some((_, out)) => Ok(out),
            None => Err(std::io::Error::other("no pack")),
        }
    }

    fn put(&mut self, kind: u8, content: &Content) -> std::io::Result<Id> {
        let size = content.size();
        let offset = self.len;
        let mut sha = sha_of(if kind == BLOB { "blob" } else { "tree" }, size);
        let mut entry = Counted {
            out: self.out()?,
            written: 0,
            crc: 0,
        };
        // The entry's header: its type and size, seven bits at a time after the first four.
        let mut head = vec![(kind << 4) | (size & 0x0F) as u8];
        let mut rest = size >> 4;
        while rest > 0 {
            if let Some(last) = head.last_mut() {
                *last |= 0x80;
            }
            head.push((rest & 0x7F) as u8);
            rest >>= 7;
        }
        entry.write_all(&head)?;
        let mut deflate = Deflate::start(&mut entry)?;
        content.read(&mut |data| {
            sha.update(data);
            deflate.feed(data, &mut entry)
        })?;
        deflate.finish(&mut entry)?;
        let (crc, written) = (entry.crc, entry.written);
        let id = id_of(sha);
        if !self.ids.insert(id) {
            // Already in this pack: the entry is taken back.
            let out = self.out()?;
            out.flush()?;
            out.get_mut().set_len(offset)?;
            out.seek(SeekFrom::Start(offset))?;
            return Ok(id);
        }
        self.len = offset + written;
        self.entries.push(Entry { id, crc, offset });
        Ok(id)
    }

    /// Names the pack and its index as git does, which makes its objects seen; nothing when
    /// the pack holds none.
    pub(super) fn finish(self) -> std::io::Result<()> {
        let Some((temp, out)) = self.temp else {
            return Ok(());
        };
        if self.entries.is_empty() {
            return Ok(());
        }
        let mut file = out.into_inner().map_err(|e| e.into_error())?;
        file.seek(SeekFrom::Start(8))?;
        file.write_all(&(self.entries.len() as u32).to_be_bytes())?;
        file.seek(SeekFrom::Start(0))?;
        let mut sha = Context::new(&SHA1_FOR_LEGACY_USE_ONLY);
        let mut buf = vec![0u8; BLOCK];
        loop {
            let n = file.read(&mut buf)?;
            if n == 0 {
                break;
            }
            sha.update(&buf[..n]);
        }
        let checksum = id_of(sha);
        file.write_all(&checksum)?;
        publish(&self.dir, temp, &checksum, self.entries)
    }
}

/// More packs than this in the store and the smallest are rolled into one ([`roll_up`]).
const MOST_PACKS: usize = 16;

/// Temporary files of a pack older than this are a writer's that was killed.
const ABANDONED: std::time::Duration = std::time::Duration::from_secs(600);

/// Rolls the smallest of the store's packs into one once there are more than
/// [`MOST_PACKS`], chosen as `git repack --geometric=2` chooses them: afterwards each pack
/// holds at least twice the objects of all smaller ones together, so there are few, and an
/// object is copied again only when the packs about it double. Entries are copied as they
/// are (nothing is decompressed), each checked against its CRC-32 first; a pack that is not
/// one of whole objects (git's deltas) or does not read back is left alone. Every object of
/// the packs rolled up is kept: the store has no refs, so reachability says nothing here.
/// Also removes what killed writers left. Whether packs were rolled up.
pub(super) fn roll_up(objects: &Path) -> std::io::Result<bool> {
    let dir = objects.join("pack");
    let Ok(listing) = std::fs::read_dir(&dir) else {
        return Ok(false);
    };
    let mut names = Vec::new();
    for entry in listing.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("tmp_") {
            let old = entry
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > ABANDONED));
            if old {
                let _ = std::fs::remove_file(entry.path());
            }
        } else if let Some(stem) = name.strip_suffix(".idx") {
            names.push(dir.join(stem));
        }
    }
    if names.len() <= MOST_PACKS {
        return Ok(false);
    }
    let mut packs: Vec<(PathBuf, Vec<Entry>)> = names
        .into_iter()
        .filter_map(|name| Some((read_index(&name.with_extension("idx"))?, name)))
        .map(|(entries, name)| (name, entries))
        .collect();
    packs.sort_by_key(|(_, entries)| entries.len());
    let weights: Vec<u64> = packs.iter().map(|(_, e)| e.len() as u64).collect();
    let split = geometric_split(&weights);
    if split < 2 {
        return Ok(false);
    }
    let rolled = &packs[..split];
    let mut pack = Pack::new(objects);
    for (name, entries) in rolled {
        if copy_entries(&mut pack, &name.with_extension("pack"), entries).is_err() {
            tracing::warn!(
                op = "checkpoint",
                result = "partial",
                "{}: not a pack of whole objects that reads back; left as it is",
                name.display()
            );
            return Ok(false);
        }
    }
    pack.finish()?;
    for (name, _) in rolled {
        // The index first: git never finds an index without its pack.
        std::fs::remove_file(name.with_extension("idx"))?;
        std::fs::remove_file(name.with_extension("pack"))?;
    }
    Ok(true)
}

/// How many of the packs of these weights (fewest objects first) to roll into one: git's
/// geometric split with a factor of two.
fn geometric_split(weights: &[u64]) -> usize {
    let mut split = weights.len().saturating_sub(1);
    while split > 0 && weights[split] >= weights[split - 1].saturating_mul(2) {
        split -= 1;
    }
    if split > 0 {
        split += 1;
    }
    let mut total: u64 = weights[..split].iter().sum();
    while split < weights.len() && weights[split] <= total.saturating_mul(2) {
        total += weights[split];
        split += 1;
    }
    split
}

/// Copies the entries of the pack `path` into `pack`, as they are.
fn copy_entries(pack: &mut Pack, path: &Path, entries: &[Entry]) -> std::io::Result<()> {
    let mut file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    let mut head = [0u8; 12];
    file.read_exact(&mut head)?;
    if &head[..8] != b"PACK\0\0\0\x02"
        || u32::from_be_bytes([head[8], head[9], head[10], head[11]]) as usize != entries.len()
    {
        return Err(std::io::Error::other("not a pack this reads"));
    }
    let mut by_offset = entries.to_vec();
    by_offset.sort_by_key(|e| e.offset);
    let ends: Vec<u64> = by_offset
        .iter()
        .skip(1)
        .map(|e| e.offset)
        .chain([len.saturating_sub(20)])
        .collect();
    let mut buf = Vec::new();
    for (e, end) in by_offset.iter().zip(ends) {
        // An index that names places outside its pack is not followed (nor read into memory).
        if end <= e.offset || e.offset < 12 || end > len.saturating_sub(20) {
            return Err(std::io::Error::other("entries out of place"));
        }
        if pack.ids.contains(&e.id) {
            continue;
        }
        buf.resize((end - e.offset) as usize, 0);
        file.seek(SeekFrom::Start(e.offset))?;
        file.read_exact(&mut buf)?;
        // Whole objects only: a delta names another entry by where it is.
        if !(1..=4).contains(&((buf[0] >> 4) & 0x07)) {
            return Err(std::io::Error::other("a delta"));
        }
        if crc32(0, &buf) != e.crc {
            return Err(std::io::Error::other("an entry does not match its CRC-32"));
        }
        pack.put_raw(e.id, e.crc, &buf)?;
    }
    Ok(())
}

/// The ids (hex) of the objects the pack index at `path` lists; none when it is not one nop
/// reads (version 2).
pub(super) fn index_ids(path: &Path) -> Vec<String> {
    read_index(path)
        .map(|entries| entries.iter().map(|e| hex(&e.id)).collect())
        .unwrap_or_default()
}

/// The entries a pack's index (version 2) lists; `None` for anything else.
fn read_index(path: &Path) -> Option<Vec<Entry>> {
    let bytes = std::fs::read(path).ok()?;
    let be32 = |at: usize| -> Option<u32> {
        Some(u32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
    };
    if bytes.get(..8)? != b"\xfftOc\0\0\0\x02" {
        return None;
    }
    let n = be32(8 + 255 * 4)? as usize;
    let ids = 8 + 1024;
    let (crcs, offsets, large) = (ids + 20 * n, ids + 24 * n, ids + 28 * n);
    if bytes.len() < large + 40 {
        return None;
    }
    (0..n)
        .map(|i| {
            let id: Id = bytes
                .get(ids + 20 * i..ids + 20 * (i + 1))?
                .try_into()
                .ok()?;
            let small = be32(offsets + 4 * i)?;
            let offset = if small & 0x8000_0000 == 0 {
                u64::from(small)
            } else {
                let at = large + 8 * (small & 0x7FFF_FFFF) as usize;
                u64::from_be_bytes(bytes.get(at..at + 8)?.try_into().ok()?)
            };
            Some(Entry {
                id,
                crc: be32(crcs + 4 * i)?,
                offset,
            })
        })
        .collect()
}

/// Writes the index of the pack `temp` (of checksum `checksum`, holding `entries`) and names
/// both: the pack first, as git finds a pack by its index.
fn publish(
    dir: &Path,
    temp: tempfile::NamedTempFile,
    checksum: &Id,
    mut entries: Vec<Entry>,
) -> std::io::Result<()> {
    entries.sort_by_key(|e| e.id);
    let mut idx = Vec::with_capacity(8 + 1024 + entries.len() * 28 + 40);
    idx.extend_from_slice(b"\xfftOc\0\0\0\x02");
    let mut fanout = [0u32; 256];
    for e in &entries {
        fanout[usize::from(e.id[0])] += 1;
    }
    let mut total = 0;
    for n in fanout {
        total += n;
        idx.extend_from_slice(&total.to_be_bytes());
    }
    for e in &entries {
        idx.extend_from_slice(&e.id);
    }
    for e in &entries {
        idx.extend_from_slice(&e.crc.to_be_bytes());
    }
    let mut large = Vec::new();
    for e in &entries {
        let small = match u32::try_from(e.offset) {
            Ok(offset) if offset < 0x8000_0000 => offset,
            _ => {
                large.push(e.offset);
                0x8000_0000 | (large.len() as u32 - 1)
            }
        };
        idx.extend_from_slice(&small.to_be_bytes());
    }
    for offset in large {
        idx.extend_from_slice(&offset.to_be_bytes());
    }
    idx.extend_from_slice(checksum);
    let mut sha = Context::new(&SHA1_FOR_LEGACY_USE_ONLY);
    sha.update(&idx);
    idx.extend_from_slice(&id_of(sha));
    let name = dir.join(format!("pack-{}", hex(checksum)));
    let index = name.with_extension("idx");
    if index.exists() {
        // The same pack is there already.
        return Ok(());
    }
    let mut idx_temp = tempfile::Builder::new()
        .prefix("tmp_idx_")
        .tempfile_in(dir)?;
    idx_temp.write_all(&idx)?;
    // On disk before anything names them: a power cut must not leave a checkpoint recorded
    // whose objects were still in the page cache.
    temp.as_file().sync_all()?;
    idx_temp.as_file().sync_all()?;
    temp.persist(name.with_extension("pack"))
        .map_err(|e| e.error)?;
    idx_temp.persist(index).map_err(|e| e.error)?;
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use std::process::Command;

    fn git_in(store: &Path, args: &[&str]) -> std::process::Output {
        Command::new("git")
            .arg("--git-dir")
            .arg(store)
            .args(args)
            .output()
            .expect("git")
    }

    #[test]
    fn objects_are_named_and_packed_as_git_reads_them() {
        let _serial = crate::checkpoint::serial();
        let (dir, store) = crate::checkpoint::bare_store();
        let git = |args: &[&str]| git_in(&store, args);
        let objects = store.join("objects");
        let mut pack = Pack::new(&objects);
        // Empty, small, larger than a stored block; the same content twice is packed once.
        let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let mut ids = Vec::new();
        for (i, content) in [&b""[..], b"hello\n", &big, b"hello\n"].iter().enumerate() {
            let file = dir.path().join(format!("file{i}"));
            std::fs::write(&file, content).expect("write");
            let id = pack
                .blob_of(&file, false, content.len() as u64)
                .expect("blob");
            assert_eq!(blob_id(&file, false, content.len() as u64).ok(), Some(id));
            let hashed = Command::new("git")
                .args(["hash-object", "--no-filters"])
                .arg(&file)
                .output()
                .expect("git");
            assert_eq!(hex(&id), String::from_utf8_lossy(&hashed.stdout).trim());
            ids.push((id, content.to_vec()));
        }
        std::os::unix::fs::symlink("file1", dir.path().join("link")).expect("link");
        let link = pack
            .blob_of(&dir.path().join("link"), true, 5)
            .expect("link blob");
        let mut body = b"100644 a\0".to_vec();
        body.extend_from_slice(&ids[1].0);
        body.extend_from_slice(b"120000 l\0");
        body.extend_from_slice(&link);
        let tree = pack.tree(&body).expect("tree");
        assert!(
            !git(&["cat-file", "-e", &hex(&tree)]).status.success(),
            "not seen before the pack is named"
        );
        pack.finish().expect("finish");
        let mut names: Vec<String> = std::fs::read_dir(objects.join("pack"))
            .expect("pack dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names.len(), 2, "one pack and its index: {names:?}");
        assert!(names[0].ends_with(".idx") && names[1].ends_with(".pack"));
        for (id, content) in &ids {
            let back = git(&["cat-file", "blob", &hex(id)]);
            assert!(back.status.success(), "{back:?}");
            assert_eq!(&back.stdout, content);
        }
        let listed = git(&["ls-tree", &hex(&tree)]);
        assert_eq!(
            String::from_utf8_lossy(&listed.stdout),
            format!(
                "100644 blob {}\ta\n120000 blob {}\tl\n",
                hex(&ids[1].0),
                hex(&link)
            )
        );
        let idx = objects.join("pack").join(&names[0]);
        let verify = git(&["verify-pack", "-v", &idx.to_string_lossy()]);
        assert!(verify.status.success(), "{verify:?}");
        assert!(
            String::from_utf8_lossy(&verify.stdout).contains("non delta: 5 objects"),
            "{verify:?}"
        );
        let fsck = git(&["fsck", "--strict"]);
        assert!(fsck.status.success(), "{fsck:?}");
        assert_eq!(from_hex(&hex(&tree)), Some(tree));
    }

    #[test]
    fn packs_roll_up_geometrically_and_keep_every_object() {
        let _serial = crate::checkpoint::serial();
        let (dir, store) = crate::checkpoint::bare_store();
        let git = |args: &[&str]| git_in(&store, args);
        let objects = store.join("objects");
        let packs = || -> Vec<String> {
            let mut names: Vec<String> = std::fs::read_dir(objects.join("pack"))
                .expect("pack dir")
                .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".idx"))
                .collect();
            names.sort();
            names
        };
        let mut ids = Vec::new();
        let mut checkpoint = |n: usize| {
            let mut pack = Pack::new(&objects);
            for i in 0..3 {
                // Each pack holds one object of the one before it again.
                let file = dir.path().join("file");
                let content = format!("content {}\n", n + i);
                std::fs::write(&file, &content).expect("write");
                let id = pack
                    .blob_of(&file, false, content.len() as u64)
                    .expect("blob");
                ids.push((id, content));
            }
            pack.finish().expect("finish");
        };
        for n in 0..MOST_PACKS {
            checkpoint(n * 2);
        }
        assert!(!roll_up(&objects).expect("roll up"), "not yet");
        assert_eq!(packs().len(), MOST_PACKS);
        checkpoint(100);
        // One killed writer's leftovers, and a live one's.
        let old = objects.join("pack/tmp_pack_old");
        std::fs::write(&old, "x").expect("write");
        let an_hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        std::fs::File::options()
            .write(true)
            .open(&old)
            .and_then(|f| f.set_modified(an_hour_ago))
            .expect("mtime");
        std::fs::write(objects.join("pack/tmp_pack_live"), "x").expect("write");
        assert!(roll_up(&objects).expect("roll up"));
        assert_eq!(packs().len(), 1, "{:?}", packs());
        assert!(!old.exists());
        assert!(objects.join("pack/tmp_pack_live").exists());
        for (id, content) in &ids {
            let back = git(&["cat-file", "blob", &hex(id)]);
            assert_eq!(String::from_utf8_lossy(&back.stdout), *content, "{back:?}");
        }
        let idx = objects.join("pack").join(&packs()[0]);
        let verify = git(&["verify-pack", "-v", &idx.to_string_lossy()]);
        assert!(verify.status.success(), "{verify:?}");
        // An object that was in two packs is in the one once.
        let distinct: std::collections::BTreeSet<_> = ids.iter().map(|(id, _)| *id).collect();
        assert!(
            String::from_utf8_lossy(&verify.stdout)
                .contains(&format!("non delta: {} objects", distinct.len())),
            "{verify:?}"
        );
        assert!(git(&["fsck", "--strict"]).status.success());
    }

    #[test]
    fn a_pack_that_does_not_read_back_is_left_alone() {
        let dir = tempfile::tempdir().expect("temp");
        let objects = dir.path().join("objects");
        for n in 0..=MOST_PACKS {
            let mut pack = Pack::new(&objects);
            pack.tree(format!("{n}").as_bytes()).expect("object");
            pack.finish().expect("finish");
        }
        let pack_files = || -> Vec<PathBuf> {
            let mut files: Vec<PathBuf> = std::fs::read_dir(objects.join("pack"))
                .expect("pack dir")
                .map(|e| e.expect("entry").path())
                .collect();
            files.sort();
            files
        };
        let before = pack_files();
        // One byte of one entry's content changed on disk.
        let victim = before
            .iter()
            .find(|p| p.extension().is_some_and(|e| e == "pack"))
            .expect("a pack");
        let mut bytes = std::fs::read(victim).expect("read");
        bytes[20] ^= 0xFF;
        std::fs::write(victim, bytes).expect("write");
        assert!(!roll_up(&objects).expect("roll up"));
        assert_eq!(pack_files(), before, "nothing removed, nothing added");
        // An index naming a place far beyond its pack: refused, never read up to there.
        let mut pack = Pack::new(&objects);
        pack.tree(b"one").expect("object");
        pack.tree(b"two").expect("object");
        let mut entries = pack.entries.clone();
        pack.finish().expect("finish");
        let written = pack_files()
            .into_iter()
            .find(|p| !before.contains(p) && p.extension().is_some_and(|e| e == "pack"))
            .expect("the new pack");
        entries.sort_by_key(|e| e.offset);
        entries[1].offset = 1 << 40;
        let copied = copy_entries(
            &mut Pack::new(&dir.path().join("other")),
            &written,
            &entries,
        );
        assert!(copied.is_err(), "{copied:?}");
    }

    #[test]
    fn the_geometric_split_rolls_up_what_breaks_the_progression() {
        assert_eq!(geometric_split(&[3; 17]), 17);
        assert_eq!(geometric_split(&[1, 2, 4, 8, 16]), 0);
        let mut small_then_big = vec![10; 16];
        small_then_big.push(1000);
        assert_eq!(geometric_split(&small_then_big), 16);
        assert_eq!(geometric_split(&[1, 1, 100, 1000]), 2);
        assert_eq!(geometric_split(&[]), 0);
    }

    #[test]
    fn a_pack_left_unfinished_or_empty_leaves_nothing() {
        let dir = tempfile::tempdir().expect("temp");
        let objects = dir.path().join("objects");
        std::fs::write(dir.path().join("f"), "x").expect("write");
        let mut pack = Pack::new(&objects);
        pack.blob_of(&dir.path().join("f"), false, 1).expect("blob");
        drop(pack);
        Pack::new(&objects).finish().expect("finish");
        let left: Vec<_> = std::fs::read_dir(objects.join("pack"))
            .expect("pack dir")
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn a_file_reached_through_a_link_or_a_pipe_is_not_read() {
        let dir = tempfile::tempdir().expect("temp");
        // A directory the agent swapped for a link to somewhere outside, after the stat.
        std::fs::create_dir(dir.path().join("outside")).expect("mkdir");
        std::fs::write(dir.path().join("outside/secret"), "s3cret").expect("write");
        std::os::unix::fs::symlink(dir.path().join("outside"), dir.path().join("src"))
            .expect("link");
        let through = blob_id(&dir.path().join("src/secret"), false, 6);
        assert!(through.is_err(), "{through:?}");
        let mut pack = Pack::new(&dir.path().join("objects"));
        assert!(
            pack.blob_of(&dir.path().join("src/secret"), false, 6)
                .is_err()
        );
        assert!(blob_id(&dir.path().join("outside/secret"), false, 6).is_ok());
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
        assert!(blob_id(&fifo, false, 0).is_err());
        assert!(pack.blob_of(&fifo, false, 0).is_err());
    }
}
