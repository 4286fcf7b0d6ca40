//! Handing a [`Spec`] to `nop __sandbox`: a sealed memfd inherited as a descriptor.
//!
//! A spec written to a file could be rewritten between nop writing it and the child reading it
//! by anything that can write the directory (a process a previous command left behind in `/tmp`
//! did exactly that). A memfd has no path; sealed against writing, growing and shrinking, its
//! contents are fixed before the child exists, and the child refuses a descriptor that is not.
#![allow(unsafe_code)] // reading the inherited descriptor; the setsid hook

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::Write as _;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};

use nix::fcntl::{FcntlArg, SealFlag, fcntl};
use nix::sys::memfd::{MFdFlags, memfd_create};

use super::{SandboxError, Spec};

/// `exe __sandbox FD -- program args…` with `spec` readable at descriptor FD of the child. `exe`
/// is the nop binary or the `nop-sandbox` helper (see [`super::namespace::helper`]). Set the environment, directory
/// and stdio on the returned command as for any other; keep the returned descriptor open until
/// the command has been spawned, and drop it then.
///
/// The memfd is inheritable (not close-on-exec) so that no code has to run between fork and exec
/// to pass it on, which lets the standard library spawn with posix_spawn (much cheaper than fork
/// in a large multi-threaded nop). Another process nop spawns in the meantime may inherit a copy
/// too; it can only read the rules, which are no secret, never change them.
pub fn command(
    exe: &Path,
    spec: &Spec,
    program: &OsStr,
    args: &[OsString],
) -> Result<(std::process::Command, OwnedFd), SandboxError> {
    let memfd = sealed_memfd(&serde_json::to_vec(spec)?).map_err(SandboxError::PassSpec)?;
    let mut command = std::process::Command::new(exe);
    command
        .arg("__sandbox")
        .arg(memfd.as_raw_fd().to_string())
        .arg("--")
        .arg(program)
        .args(args);
    Ok((command, memfd))
}

/// Makes `command` start in a new session with no controlling terminal (`setsid` between fork
/// and exec), as the helper does for itself: for a command run without the helper (none could be
/// found). Its process group id is then its pid.
pub fn in_new_session(command: &mut std::process::Command) {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: the hook runs in the child between fork and exec, where only async-signal-safe
    // functions may be called: it calls setsid(2) alone and allocates nothing.
    unsafe {
        command.pre_exec(|| {
            nix::unistd::setsid()
                .map(drop)
                .map_err(std::io::Error::from)
        });
    }
}

/// A sealed in-memory copy of the executable at `path`, to run as `/proc/self/fd/N` (the returned
/// path) for the rest of this process. Left open and inheritable on purpose: every child must
/// be able to exec it. What was copied, and then checked, is what runs: replacing or rewriting
/// the file afterwards (a confined command can, where nop lives in a writable place) changes
/// nothing.
pub(super) fn sealed_copy(path: &Path) -> std::io::Result<PathBuf> {
    use std::os::fd::IntoRawFd as _;
    // MFD_EXEC (Linux 6.3): executable even where `vm.memfd_noexec` makes memfds
    // non-executable by default; older kernels refuse the flag and need none.
    const MFD_EXEC: MFdFlags = MFdFlags::from_bits_retain(0x0010);
    let fd = match memfd_create("nop-sandbox", MFdFlags::MFD_ALLOW_SEALING | MFD_EXEC) {
        Err(nix::errno::Errno::EINVAL) => memfd_create("nop-sandbox", MFdFlags::MFD_ALLOW_SEALING)?,
        fd => fd?,
    };
    let mut file = File::from(fd);
    std::io::copy(&mut File::open(path)?, &mut file)?;
    let fd = seal(file)?.into_raw_fd();
    Ok(PathBuf::from(format!("/proc/self/fd/{fd}")))
}

/// A memfd holding `bytes`, sealed so that nothing can change it any more.
fn sealed_memfd(bytes: &[u8]) -> std::io::Result<OwnedFd> {
    let fd = memfd_create("nop-sandbox-spec", MFdFlags::MFD_ALLOW_SEALING)?;
    let mut file = File::from(fd);
    file.write_all(bytes)?;
    seal(file)
}

/// Seals `file` (a memfd) against every change.
fn seal(file: File) -> std::io::Result<OwnedFd> {
    fcntl(
        &file,
        FcntlArg::F_ADD_SEALS(
            SealFlag::F_SEAL_WRITE
                | SealFlag::F_SEAL_GROW
                | SealFlag::F_SEAL_SHRINK
                | SealFlag::F_SEAL_SEAL,
        ),
    )?;
    Ok(OwnedFd::from(file))
}

/// Reads the spec from descriptor `fd` (inherited from nop) and closes it. Refuses anything but
/// a memfd sealed against writes.
pub(super) fn read_spec(fd: i32) -> Result<Spec, SandboxError> {
    // Check before taking ownership: a number that is not open must not be closed later.
    let seals = fcntl(
        // SAFETY: only used for this one fcntl call while `fd` is open (checked by the call).
        unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) },
        FcntlArg::F_GET_SEALS,
    )
    .map_err(|e| match e {
        // Not a memfd (a file, a pipe): it cannot be sealed at all.
        nix::errno::Errno::EINVAL => SandboxError::Unsealed { fd },
        e => SandboxError::ReadSpec {
            fd,
            source: e.into(),
        },
    })?;
    // SAFETY: `fd` is open (fcntl succeeded) and nothing else in this process owns it: it was
    // inherited for this purpose alone. The `File` closes it when dropped.
    let file = unsafe { File::from_raw_fd(fd) };
    let needed = SealFlag::F_SEAL_WRITE | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SHRINK;
    if !SealFlag::from_bits_truncate(seals).contains(needed) {
        return Err(SandboxError::Unsealed { fd });
    }
    let mut bytes = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        // Positioned reads: the descriptor's offset is where nop's write left it.
        let n = file
            .read_at(&mut buf, bytes.len() as u64)
            .map_err(|source| SandboxError::ReadSpec { fd, source })?;
        if n == 0 {
            break;
        }
        bytes.extend_from_slice(&buf[..n]);
    }
    drop(file);
    Ok(serde_json::from_slice(&bytes)?)
}
