//! The namespace mechanism: a user, mount and PID namespace (and a network namespace when the
//! network is off) holding a view of the filesystem, under Landlock.
//!
//! Runs in `nop __sandbox` (process A, single-threaded, as unshare of a user namespace needs):
//! 1. unshare the namespaces; map the caller's uid and gid to themselves; make every mount
//!    private so that nothing done here reaches the rest of the system;
//! 2. build the view from [`Spec::mounts`], shallow paths first: read-only bind mounts, writable
//!    bind mounts (which also pin a directory: a mount point cannot be renamed or removed), and
//!    masks (an empty tmpfs no one may list over a directory, an empty file no one may read over
//!    a file). A mask keeps "holes" for deeper paths the rules make reachable again: the
//!    originals are bind-mounted into the tmpfs before it is made read-only;
//! 3. fork B, PID 1 of the new PID namespace, which mounts a `/proc` of that namespace (so the
//!    command sees only its own processes), applies Landlock and no_new_privs, drops every
//!    capability, and forks C, the command. B reaps orphans until C ends, then exits with C's
//!    status; the kernel then kills whatever is left in the namespace.
//!
//! Landlock forbids a sandboxed process to mount or unmount anything, so the view cannot be
//! undone from inside, and the capabilities the user namespace gave are gone before the command
//! starts.
#![allow(unsafe_code)]

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sched::{CloneFlags, unshare};
use nix::sys::signal::Signal;
use nix::sys::statvfs::{FsFlags, statvfs};
use nix::sys::wait::waitpid;
use nix::unistd::{ForkResult, Pid, fork};

use super::{Mount, MountKind, SandboxError, Spec};

fn fail(step: &str, error: impl std::fmt::Display) -> SandboxError {
    SandboxError::Namespace(format!("{step}: {error}"))
}

/// Runs `program args…` confined by `spec` with the namespace mechanism. Only returns on
/// failure (before the command started); otherwise exits with the command's status.
pub(super) fn run(spec: &Spec, program: &OsStr, args: &[OsString]) -> SandboxError {
    match prepare(spec) {
        Ok(()) => {}
        Err(e) => return e,
    }
    // B learns that A is gone from this pipe: A holds its writing end until it exits.
    let (alive, holder) = match nix::unistd::pipe() {
        Ok(ends) => ends,
        Err(e) => return fail("making the parent-death pipe", e),
    };
    // SAFETY: this process is single-threaded (`nop __sandbox` starts no threads), so the child
    // may do anything the parent could.
    match unsafe { fork() } {
        Err(e) => SandboxError::Fork(e),
        Ok(ForkResult::Parent { child }) => {
            drop(alive);
            let code = wait_for(child);
            drop(holder);
            std::process::exit(code)
        }
        Ok(ForkResult::Child) => {
            drop(holder);
            let error = init(spec, program, args, alive);
            eprintln!("nop sandbox: {error}");
            std::process::exit(super::EXIT_SANDBOX_FAILURE);
        }
    }
}

/// Steps 1 and 2: the namespaces and the view, then back to the working directory as seen
/// through the view (a directory mounted over keeps the old one as the current directory).
fn prepare(spec: &Spec) -> Result<(), SandboxError> {
    let cwd = std::env::current_dir().map_err(|e| fail("reading the working directory", e))?;
    enter(!spec.network)?;
    build_view(&spec.mounts)?;
    nix::unistd::chdir(&cwd).map_err(|e| fail(&format!("entering {}", cwd.display()), e))
}

/// Step 3, in B (PID 1 of the new namespace): `/proc`, Landlock, capabilities, then the command
/// as B's child.
fn init(spec: &Spec, program: &OsStr, args: &[OsString], alive: OwnedFd) -> SandboxError {
    // If A is killed (the tool's time limit kills its process group), B follows, and with B
    // everything in the namespace.
    if let Err(e) = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL) {
        return fail("setting the parent-death signal", e);
    }
    // A may have died before the line above (nop killed at once, and A with it): then no
    // signal comes, and B would run on alone. A's end of the pipe is closed only when A is gone.
    let mut fds = [nix::poll::PollFd::new(
        std::os::fd::AsFd::as_fd(&alive),
        nix::poll::PollFlags::POLLIN,
    )];
    if nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO).is_ok_and(|n| n > 0) {
        std::process::exit(super::EXIT_SANDBOX_FAILURE);
    }
    drop(alive);
    // Without a /proc of its own namespace the command would see every process of the machine
    // (some container runtimes forbid this mount; Landlock still keeps it from the others'
    // memory and environment).
    if let Err(e) = mount_proc() {
        tracing::debug!(
            op = "sandbox",
            "cannot mount /proc for the PID namespace: {e}"
        );
    }
    // TCP: a network namespace already holds no route out; Landlock would also refuse loopback
    // connections to servers the command starts itself.
    let landlock_tcp = false;
    if let Err(e) = super::rules::confine(spec, spec.required, landlock_tcp) {
        return e;
    }
    if let Err(e) = super::caps::drop_all() {
        return SandboxError::Capabilities(e);
    }
    // SAFETY: single-threaded, as above.
    match unsafe { fork() } {
        Err(e) => SandboxError::Fork(e),
        Ok(ForkResult::Parent { child }) => std::process::exit(reap_until(child)),
        Ok(ForkResult::Child) => super::exec(program, args),
    }
}

/// Waits for `child` and returns the exit code a shell would show for it.
fn wait_for(child: Pid) -> i32 {
    loop {
        match waitpid(child, None) {
            Ok(status) => {
                if let Some(code) = super::exit_code(status) {
                    return code;
                }
            }
            Err(nix::errno::Errno::EINTR) => {}
            Err(_) => return super::EXIT_SANDBOX_FAILURE,
        }
    }
}

/// As PID 1: reaps every child (orphans are reparented to PID 1) until `child` ends.
fn reap_until(child: Pid) -> i32 {
    loop {
        match waitpid(None::<Pid>, None) {
            Ok(status) if status.pid() == Some(child) => {
                if let Some(code) = super::exit_code(status) {
                    return code;
                }
            }
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(_) => return super::EXIT_SANDBOX_FAILURE,
        }
    }
}

/// Step 1: the namespaces, the uid/gid maps and private mounts.
fn enter(isolate_network: bool) -> Result<(), SandboxError> {
    let uid = nix::unistd::getuid();
    let gid = nix::unistd::getgid();
    let mut flags = CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWPID;
    if isolate_network {
        flags |= CloneFlags::CLONE_NEWNET;
    }
    unshare(flags).map_err(|e| fail("creating the user, mount and PID namespaces", e))?;
    // Writing gid_map needs setgroups denied first (kernels before 3.19 lack the file).
    match std::fs::write("/proc/self/setgroups", "deny") {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(fail("denying setgroups", e));
        }
        _ => {}
    }
    std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1"))
        .map_err(|e| fail("writing the uid map", e))?;
    std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1"))
        .map_err(|e| fail("writing the gid map", e))?;
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| fail("making mounts private", e))?;
    if isolate_network {
        // Servers the command starts for itself (tests) need loopback; without it they fail,
        // but nothing is less confined, so a failure here is not fatal.
        if let Err(e) = loopback_up() {
            tracing::debug!(op = "sandbox", "cannot bring up loopback: {e}");
        }
    }
    Ok(())
}

/// Step 2: the view, in order.
fn build_view(mounts: &[Mount]) -> Result<(), SandboxError> {
    let has_file_mask = mounts
        .iter()
        .any(|m| m.kind == MountKind::Mask && !m.path.is_dir());
    let staging = if has_file_mask {
        Some(Staging::new()?)
    } else {
        None
    };
    // Layers first: their upper directories are nop's (beneath `.nop/`), which the view makes
    // read-only next; an overlay keeps the upper directory it was given.
    for m in mounts.iter().filter(|m| m.kind == MountKind::Overlay) {
        overlay_or_read_only(&m.path, m.layer.as_deref())?;
    }
    // Masked directories and the holes kept in them.
    let mut masked: Vec<(&Path, Vec<&Path>)> = Vec::new();
    for (i, m) in mounts.iter().enumerate() {
        let hidden = masked.iter().any(|(dir, holes)| {
            m.path.starts_with(dir)
                && m.path != *dir
                && !holes.iter().any(|h| m.path.starts_with(h))
        });
        if hidden {
            continue;
        }
        match m.kind {
            MountKind::ReadOnly => bind(&m.path, true)?,
            MountKind::Writable => bind(&m.path, false)?,
            MountKind::Overlay => {}
            MountKind::Mask if m.path.is_dir() => {
                let holes = holes_under(&mounts[i + 1..], &m.path);
                mask_dir(&m.path, &holes)?;
                masked.push((&m.path, holes));
            }
            MountKind::Mask => match &staging {
                Some(staging) => mask_file(&m.path, staging)?,
                None => return Err(fail("masking", "no staging file")),
            },
        }
    }
    if let Some(staging) = staging {
        staging.remove()?;
    }
    Ok(())
}

/// The shallowest reachable paths beneath `dir` among the later mounts: what a mask of `dir` must
/// still show.
fn holes_under<'a>(later: &'a [Mount], dir: &Path) -> Vec<&'a Path> {
    let mut holes: Vec<&Path> = Vec::new();
    for m in later {
        if m.kind != MountKind::Mask
            && m.path.starts_with(dir)
            && m.path != dir
            && !holes.iter().any(|h| m.path.starts_with(h))
        {
            holes.push(&m.path);
        }
    }
    holes
}

/// The flags of the mount at `path` that a bind remount must repeat (the kernel refuses to
/// clear nosuid, nodev, noexec or atime flags locked by the parent namespace).
fn kept_flags(path: &Path) -> Result<(MsFlags, bool), SandboxError> {
    let flags = statvfs(path)
        .map_err(|e| fail(&format!("reading the mount flags of {}", path.display()), e))?
        .flags();
    let mut out = MsFlags::empty();
    for (fs, ms) in [
        (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
        (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
        (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
        (FsFlags::ST_RELATIME, MsFlags::MS_RELATIME),
    ] {
        if flags.contains(fs) {
            out |= ms;
        }
    }
    Ok((out, flags.contains(FsFlags::ST_RDONLY)))
}

/// Bind-mounts `path` over itself, read-only or writable.
fn bind(path: &Path, read_only: bool) -> Result<(), SandboxError> {
    let shown = path.display();
    mount(
        Some(path),
        path,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(|e| fail(&format!("bind-mounting {shown}"), e))?;
    let (flags, was_read_only) = kept_flags(path)?;
    if read_only || was_read_only {
        let rdonly = if read_only {
            MsFlags::MS_RDONLY
        } else {
            MsFlags::empty()
        };
        mount(
            None::<&str>,
            path,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REMOUNT | flags | rdonly,
            None::<&str>,
        )
        .map_err(|e| fail(&format!("remounting {shown}"), e))?;
    }
    Ok(())
}

/// Mounts an overlay over `path`: itself as the lower layer, `layer/upper` (with `layer/work`)
/// as the upper one, so that the command's writes land in the layer. Where the kernel refuses
/// (an upper directory on a file system overlayfs cannot use, a kernel without unprivileged
/// overlayfs), `path` is bind-mounted read-only instead, as it was before layers, and
/// `layer/unavailable` says why: confinement never depends on the layer.
fn overlay_or_read_only(path: &Path, layer: Option<&Path>) -> Result<(), SandboxError> {
    let Some(layer) = layer else {
        return bind(path, true);
    };
    let (upper, work) = (layer.join("upper"), layer.join("work"));
    let options = format!(
        "lowerdir={},upperdir={},workdir={},userxattr",
        escape_option(path),
        escape_option(&upper),
        escape_option(&work)
    );
    match mount(
        Some("overlay"),
        path,
        Some("overlay"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(options.as_str()),
    ) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::write(layer.join(super::LAYER_UNAVAILABLE), e.to_string());
            bind(path, true)
        }
    }
}

/// `path` as overlayfs reads it in its options: `,` and `:` separate, `\` escapes.
fn escape_option(path: &Path) -> String {
    let mut out = String::new();
    for c in path.to_string_lossy().chars() {
        if matches!(c, ',' | ':' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Whether directory `dir` of an overlay's upper layer is opaque: it hides what the lower
/// layer has there (it was removed and made again). Mounted with `userxattr`, the kernel marks
/// it with `user.overlay.opaque`.
pub fn is_opaque(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt as _;
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    let mut value = [0u8; 8];
    // SAFETY: `path` is a NUL-terminated string, the name a static one, and `value` a buffer
    // of the length passed; lgetxattr writes at most that many bytes into it.
    let n = unsafe {
        nix::libc::lgetxattr(
            path.as_ptr(),
            c"user.overlay.opaque".as_ptr(),
            value.as_mut_ptr().cast(),
            value.len(),
        )
    };
    n > 0 && value[0] == b'y'
}

/// Masks directory `dir` with an empty read-only tmpfs that shows only `holes` (the originals,
/// bind-mounted in). Without holes no one may even list it (mode 000); with them it may only be
/// crossed (mode 111).
fn mask_dir(dir: &Path, holes: &[&Path]) -> Result<(), SandboxError> {
    let shown = dir.display();
    // Opened (and told apart) before the tmpfs hides them.
    let originals = holes
        .iter()
        .map(|h| Ok((open_path(h)?, h.is_dir())))
        .collect::<Result<Vec<_>, SandboxError>>()?;
    let mode = if holes.is_empty() { "000" } else { "111" };
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    mount(
        Some("tmpfs"),
        dir,
        Some("tmpfs"),
        flags,
        Some(format!("mode={mode},size=64k,nr_inodes=4096").as_str()),
    )
    .map_err(|e| fail(&format!("masking {shown}"), e))?;
    for (hole, (original, is_dir)) in holes.iter().zip(&originals) {
        let Ok(relative) = hole.strip_prefix(dir) else {
            continue;
        };
        let mut at = dir.to_path_buf();
        let parts: Vec<_> = relative.components().collect();
        for (n, part) in parts.iter().enumerate() {
            at.push(part);
            let last = n + 1 == parts.len();
            if last && !is_dir {
                File::create(&at).map_err(|e| fail(&format!("creating {}", at.display()), e))?;
                std::fs::set_permissions(&at, std::fs::Permissions::from_mode(0o000))
                    .map_err(|e| fail(&format!("creating {}", at.display()), e))?;
            } else if !at.exists() {
                std::fs::DirBuilder::new()
                    .mode(0o111)
                    .create(&at)
                    .map_err(|e| fail(&format!("creating {}", at.display()), e))?;
            }
        }
        let source = format!("/proc/self/fd/{}", original.as_raw_fd());
        mount(
            Some(source.as_str()),
            &at,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            None::<&str>,
        )
        .map_err(|e| fail(&format!("keeping {} visible", hole.display()), e))?;
    }
    mount(
        None::<&str>,
        dir,
        None::<&str>,
        MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | flags,
        None::<&str>,
    )
    .map_err(|e| fail(&format!("making the mask of {shown} read-only"), e))
}

/// An `O_PATH` descriptor of `path`: a handle to bind-mount from later.
fn open_path(path: &Path) -> Result<OwnedFd, SandboxError> {
    nix::fcntl::open(
        path,
        nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(|e| fail(&format!("opening {}", path.display()), e))
}

/// Masks file `path` with the staging file: empty, mode 000, read-only.
fn mask_file(path: &Path, staging: &Staging) -> Result<(), SandboxError> {
    let shown = path.display();
    mount(
        Some(staging.file.as_path()),
        path,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(|e| fail(&format!("masking {shown}"), e))?;
    mount(
        None::<&str>,
        path,
        None::<&str>,
        MsFlags::MS_BIND
            | MsFlags::MS_REMOUNT
            | MsFlags::MS_RDONLY
            | MsFlags::MS_NOSUID
            | MsFlags::MS_NODEV
            | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .map_err(|e| fail(&format!("making the mask of {shown} read-only"), e))
}

/// A small tmpfs holding the empty file that masks files, mounted for the time the view is
/// built on a directory of the old `/proc` (which the PID namespace's own `/proc` replaces
/// anyway), and unmounted afterwards: the masks keep its file alive.
struct Staging {
    mount_point: PathBuf,
    file: PathBuf,
}

impl Staging {
    fn new() -> Result<Staging, SandboxError> {
        let mut last_error = None;
        for candidate in ["/proc/fs", "/proc/tty", "/proc/bus", "/proc/driver"] {
            let mount_point = PathBuf::from(candidate);
            if !mount_point.is_dir() {
                continue;
            }
            match mount(
                Some("tmpfs"),
                &mount_point,
                Some("tmpfs"),
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
                Some("mode=000,size=4k,nr_inodes=8"),
            ) {
                Ok(()) => {
                    let file = mount_point.join("nop-mask");
                    File::create(&file).map_err(|e| fail("creating the mask file", e))?;
                    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o000))
                        .map_err(|e| fail("creating the mask file", e))?;
                    return Ok(Staging { mount_point, file });
                }
                Err(e) => last_error = Some(e),
            }
        }
        Err(fail(
            "mounting a staging tmpfs for file masks",
            last_error.map_or_else(
                || "no mount point under /proc".to_string(),
                |e| e.to_string(),
            ),
        ))
    }

    fn remove(self) -> Result<(), SandboxError> {
        umount2(&self.mount_point, MntFlags::MNT_DETACH)
            .map_err(|e| fail("unmounting the staging tmpfs", e))
    }
}

/// A `/proc` of the current PID namespace over the old one.
fn mount_proc() -> nix::Result<()> {
    mount(
        Some("proc"),
        "/proc",
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
}

/// Brings up `lo` in the new network namespace.
fn loopback_up() -> std::io::Result<()> {
    use nix::libc;
    // SAFETY: a plain socket call; the descriptor is owned right away.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `raw` is a new descriptor nothing else owns.
    let socket = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: ifreq is plain old data; all zeroes is a valid value.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    for (to, from) in request.ifr_name.iter_mut().zip(b"lo\0") {
        *to = *from as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS and SIOCSIFFLAGS read and write an ifreq, which `request` is.
    unsafe {
        if libc::ioctl(socket.as_raw_fd(), libc::SIOCGIFFLAGS as _, &mut request) < 0 {
            return Err(std::io::Error::last_os_error());
        }
        request.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        if libc::ioctl(socket.as_raw_fd(), libc::SIOCSIFFLAGS as _, &request) < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Whether this machine can build the namespace view, as `nop __sandbox --probe` found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Probe {
    /// User, mount and PID namespaces can be created and mounts made in them.
    pub available: bool,
    /// Why not, when they cannot.
    pub error: Option<String>,
    /// The nop version of the binary that answered.
    #[serde(default)]
    pub version: Option<String>,
}

/// `nop __sandbox --probe`: tries step 1 and a tmpfs mount in a throwaway process, prints a
/// [`Probe`] as JSON, exits 0.
pub(super) fn probe_main() -> i32 {
    let result = enter(false).and_then(|()| {
        mount(
            Some("tmpfs"),
            "/proc/fs",
            Some("tmpfs"),
            MsFlags::empty(),
            Some("size=4k"),
        )
        .or_else(|_| {
            mount(
                Some("tmpfs"),
                "/tmp",
                Some("tmpfs"),
                MsFlags::empty(),
                Some("size=4k"),
            )
        })
        .map_err(|e| fail("mounting a tmpfs", e))
    });
    let version = Some(env!("CARGO_PKG_VERSION").to_string());
    let probe = match result {
        Ok(()) => Probe {
            available: true,
            error: None,
            version,
        },
        Err(e) => Probe {
            available: false,
            error: Some(e.to_string()),
            version,
        },
    };
    println!(
        "{}",
        serde_json::to_string(&probe).unwrap_or_else(|_| "{}".into())
    );
    0
}

/// Runs `exe __sandbox --probe` (about a millisecond).
pub fn probe(exe: &Path) -> Probe {
    let output = std::process::Command::new(exe)
        .args(["__sandbox", "--probe"])
        .env_clear()
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output();
    match output {
        Ok(out) => serde_json::from_slice(&out.stdout).unwrap_or_else(|e| Probe {
            available: false,
            error: Some(format!("the probe answered nothing readable: {e}")),
            version: None,
        }),
        Err(e) => Probe {
            available: false,
            error: Some(format!("cannot run the probe: {e}")),
            version: None,
        },
    }
}

/// The program that confines commands, and what it found this machine can do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Helper {
    /// What to execute: a sealed in-memory copy of the binary below, taken once per process,
    /// so that a confined command that replaces that file (nop may live in a writable place,
    /// such as a build directory inside the repository) cannot get its own program run
    /// unconfined by the next call. `None` when no binary answered as this version of nop (a
    /// test harness, a stale helper): nothing can be confined or supervised then.
    pub path: Option<PathBuf>,
    /// The file it was copied from: `nop-sandbox` beside the running nop when it is of the same
    /// version (it starts in a third of the time), else nop itself; run as `__sandbox …` either
    /// way.
    pub origin: Option<PathBuf>,
    pub probe: Probe,
}

/// The [`Helper`] for this process, found once: `exe` is the running nop.
pub fn helper(exe: &Path) -> Helper {
    static HELPER: OnceLock<Helper> = OnceLock::new();
    HELPER
        .get_or_init(|| {
            let ours = Some(env!("CARGO_PKG_VERSION").to_string());
            let small = exe.parent().map(|d| d.join("nop-sandbox"));
            let mut last = None;
            for candidate in small.into_iter().chain([exe.to_path_buf()]) {
                if !candidate.is_file() {
                    continue;
                }
                // The copy is what is checked and what runs.
                let probe = match super::launch::sealed_copy(&candidate) {
                    Ok(copy) => (probe(&copy), Some(copy)),
                    Err(e) => (
                        Probe {
                            available: false,
                            error: Some(format!("cannot copy {}: {e}", candidate.display())),
                            version: None,
                        },
                        None,
                    ),
                };
                match probe {
                    (probe, Some(copy)) if probe.version == ours => {
                        return Helper {
                            path: Some(copy),
                            origin: Some(candidate),
                            probe,
                        };
                    }
                    (probe, _) => last = Some(probe),
                }
            }
            Helper {
                path: None,
                origin: None,
                probe: last.unwrap_or(Probe {
                    available: false,
                    error: Some("no nop binary to confine commands with".into()),
                    version: None,
                }),
            }
        })
        .clone()
}
