//! The shell sandbox: confines one command before it runs, in a short-lived child of nop.
//!
//! nop never confines its own process. The shell tool runs `nop __sandbox FD -- PROGRAM ARGS…`
//! ([`sandbox_main`]) built by [`command`], which hands the [`Spec`] over in a sealed memfd at
//! descriptor FD: the rules never pass through a path that anything else could write.
//!
//! Two mechanisms ([`Mechanism`]):
//! - **namespaces** (Codex CLI's design, [`namespace`]): a new user, mount and PID namespace (and a
//!   network namespace for `network: false`). In it the view is built: protected paths are
//!   bind-mounted read-only over themselves, denied paths are masked (an empty, unreadable tmpfs
//!   over a directory, an empty unreadable file over a file), and the directories that hold them
//!   are pinned (mount points cannot be renamed or removed). Then Landlock: read everywhere, write
//!   only beneath the writable roots, TCP per `network`; no_new_privs; every capability dropped.
//!   The command runs as the child of a small init (PID 1 of the namespace); when it ends, the
//!   kernel kills everything else still running in the namespace, `setsid` or not.
//! - **landlock** (the fallback where user namespaces are unavailable): Landlock alone, with
//!   grants computed per directory by the permissions module. Landlock cannot take a right back
//!   below a directory, so a directory with a protected path beneath it gets no rights to create
//!   or remove entries (see [`crate::permissions::shell_view`]). A child subreaper kills what the
//!   command leaves running.
//!
//! Either way (and unconfined too) the helper first calls `setsid`: the command runs in a session
//! of its own with no controlling terminal, so it cannot open `/dev/tty` to push keys into the
//! user's terminal or answer nop's questions (see `docs/sandbox-terminal.md`).
//!
//! What Landlock cannot express, so callers should not promise it:
//! - `network: false` refuses TCP `connect` and `bind` (Landlock ABI 4, Linux 6.7) and connecting
//!   to abstract UNIX sockets created outside the sandbox (scoped, ABI 6, Linux 6.12), not UDP;
//!   with the namespace mechanism a network namespace refuses all traffic but loopback, and
//!   abstract sockets belong to the network namespace.
//! - Connecting to a named UNIX socket (an ssh agent, a docker socket) is controlled only from
//!   ABI 9 (Linux 7.1), and then only a [`Access::ReadWrite`] grant allows it.
//! - Metadata is not covered: `stat` works on any path the command can name.
//! - File descriptors opened before confinement (the command's stdin, stdout and stderr) keep
//!   working whatever they point to.

// `nop __sandbox` is its own process, run by nop: it prints why it could not run a command
// (stderr, before exiting 125) and its `--probe` answer (stdout, read by nop).
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod caps;
mod launch;
pub mod namespace;
mod reap;
mod rules;

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

pub use launch::{command, in_new_session};

/// Exit status of `nop __sandbox` when it could not run the command (as `env` and `docker` do).
pub const EXIT_SANDBOX_FAILURE: i32 = 125;

/// What a confined command may do. Built by the permissions module from the agent's rules.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Spec {
    pub mechanism: Mechanism,
    /// Refuse to run the command unless everything here is enforced.
    pub required: bool,
    /// Landlock: paths (absolute) and what may be done at and beneath them. Anything not
    /// granted here is refused by the kernel (Landlock is an allow-list).
    pub grants: Vec<Grant>,
    /// The namespace view, applied in order (shallow paths first); empty for
    /// [`Mechanism::Landlock`].
    #[serde(default)]
    pub mounts: Vec<Mount>,
    /// Whether the command may open network connections.
    pub network: bool,
    /// The pid of the nop process that asked: if it is gone before the command starts (or goes
    /// while it runs), the command is ended.
    #[serde(default)]
    pub parent: Option<u32>,
}

/// How a command is confined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mechanism {
    /// User, mount and PID namespaces with a view of the filesystem, under Landlock.
    Namespaces,
    /// Landlock alone.
    Landlock,
    /// Nothing confined (`sandbox: off`, or a machine that can confine nothing): the helper only
    /// makes sure that everything the command starts ends with it, and with nop.
    Unconfined,
}

/// One path of the namespace view.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Mount {
    /// An absolute, canonical path that exists when the view is computed.
    pub path: PathBuf,
    pub kind: MountKind,
    /// For [`MountKind::Overlay`]: a directory of nop's holding `upper/` and `work/`, where the
    /// command's writes land instead of `path`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer: Option<PathBuf>,
}

impl Mount {
    pub fn new(path: PathBuf, kind: MountKind) -> Mount {
        Mount {
            path,
            kind,
            layer: None,
        }
    }
}

/// The file a layer holds when the kernel would not mount it (an upper directory on a file
/// system overlayfs cannot write to, say): the path was mounted read-only instead, and the file
/// says why.
pub const LAYER_UNAVAILABLE: &str = "unavailable";

/// What the view does at a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MountKind {
    /// Bind-mounted read-only over itself: nothing at or beneath it can be changed.
    ReadOnly,
    /// Bind-mounted writable over itself: writable again beneath a read-only path, or pinned (a
    /// mount point cannot be renamed or removed, so what it holds cannot be swapped away).
    Writable,
    /// Hidden: an empty tmpfs no one may list over a directory, an empty file no one may read
    /// over a file; both read-only.
    Mask,
    /// Copy-on-write: an overlay whose lower layer is the path itself and whose upper layer is
    /// [`Mount::layer`]: the command reads the path and writes the layer; the path is never
    /// changed. What becomes of the layer is nop's to decide after the command (a git
    /// directory's objects and refs are applied, its configuration never; a cache is kept for
    /// the session). Where the kernel refuses the overlay, read-only instead.
    Overlay,
}

/// One path and what may be done at and beneath it (Landlock).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Grant {
    /// An absolute path; symbolic links are followed when the rules are built. A path that does
    /// not exist then is skipped.
    pub path: PathBuf,
    /// What may be done there.
    pub access: Access,
}

/// What a [`Grant`] allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Access {
    /// Read files, list directories, execute.
    Read,
    /// Read plus write/truncate files (for a directory: everything beneath it: create, remove,
    /// rename, write).
    ReadWrite,
    /// Write to existing files only (no create/remove), plus read: used for device files like
    /// /dev/null.
    ReadWriteExisting,
}

/// What this kernel can enforce with Landlock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Support {
    /// Filesystem rules: `Full` when every file right this build knows is enforced (reading,
    /// writing, creating, removing, renaming, truncating, device ioctl), `Partial` on kernels
    /// that have only some of them, `None` without Landlock.
    pub filesystem: Enforcement,
    /// Refusing TCP when [`Spec::network`] is false: `Full` from Landlock ABI 4, else `None`.
    pub network: Enforcement,
    /// The Landlock ABI version the kernel reports, if it has Landlock enabled.
    pub abi: Option<i32>,
}

/// How much of a kind of rule the kernel enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enforcement {
    /// Everything of that kind is enforced.
    Full,
    /// Some of it is enforced; the rest is allowed.
    Partial,
    /// Nothing of it is enforced.
    None,
}

/// Why a command could not be run confined.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("usage: nop __sandbox FD -- PROGRAM [ARGS...]: {0}")]
    Usage(String),
    #[error("cannot read the sandbox spec from descriptor {fd}: {source}")]
    ReadSpec { fd: i32, source: std::io::Error },
    #[error("descriptor {fd} is not a sealed memfd; the sandbox spec is accepted only that way")]
    Unsealed { fd: i32 },
    #[error("invalid sandbox spec: {0}")]
    ParseSpec(#[from] serde_json::Error),
    #[error("cannot pass the sandbox spec to the child: {0}")]
    PassSpec(std::io::Error),
    /// `required` was set and the kernel cannot enforce everything the spec asks for.
    #[error("the sandbox is required but cannot be enforced here: {}", missing.join("; "))]
    NotEnforceable { missing: Vec<String> },
    #[error("cannot apply the Landlock rules: {0}")]
    Landlock(#[from] landlock::RulesetError),
    #[error("cannot set no_new_privs on the sandboxed process")]
    NoNewPrivs,
    /// A step of the namespace view failed; nothing ran.
    #[error("cannot build the sandbox view: {0}")]
    Namespace(String),
    #[error("cannot start the sandboxed command: {0}")]
    Fork(nix::Error),
    #[error("cannot drop capabilities: {0}")]
    Capabilities(std::io::Error),
    #[error("nop exited before the command could start")]
    ParentGone,
    /// The helper could not leave nop's session (it was started as a process group leader).
    #[error("cannot start a new session without a controlling terminal: {0}")]
    Session(nix::Error),
    #[error("cannot execute {}: {source}{}", program.to_string_lossy(), exec_hint(source))]
    Exec {
        program: OsString,
        source: std::io::Error,
    },
}

fn exec_hint(error: &std::io::Error) -> &'static str {
    if error.kind() == std::io::ErrorKind::PermissionDenied {
        " (the sandbox allows executing only beneath granted paths)"
    } else {
        ""
    }
}

/// Makes this process's memory and environment (which holds the provider's key) unreadable to
/// other processes of the same user, such as a confined command reading `/proc/<pid>/environ`
/// where it can see nop's processes (Landlock alone does not stop that). Its children get their
/// own setting back when they exec.
pub fn protect_this_process() {
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        tracing::warn!(op = "sandbox", "cannot make nop non-dumpable: {e}");
    }
}

/// Probes Landlock support without restricting this process.
pub fn support() -> Support {
    Support::from_status(rules::probe())
}

/// Why, on this kernel, a command under Landlock alone without network could still connect to
/// abstract UNIX sockets created outside the sandbox; `None` where Landlock scopes them (ABI 6).
pub fn abstract_socket_shortfall() -> Option<String> {
    rules::abstract_socket_shortfall(rules::probe())
}

/// The hidden entry point used by the shell tool: `nop __sandbox FD -- PROGRAM ARGS...` (`args`
/// starts at FD). Reads the JSON [`Spec`] from the sealed memfd FD, confines itself as the spec
/// says and runs the command; exits with the command's status. Only returns when it could not
/// run the command: prints the error to stderr prefixed "nop sandbox: " and returns
/// [`EXIT_SANDBOX_FAILURE`] as the exit code to use.
///
/// `nop __sandbox --probe` instead reports whether this machine can build the namespace view
/// (see [`namespace::probe`]).
pub fn sandbox_main(args: &[OsString]) -> i32 {
    if args.first().is_some_and(|a| a == "--probe") {
        return namespace::probe_main();
    }
    let error = match Invocation::parse(args).and_then(|i| new_session().map(|()| i)) {
        Ok(invocation) => match launch::read_spec(invocation.fd) {
            Ok(spec) => match follow_parent(&spec) {
                Ok(()) => run(&spec, &invocation.program, &invocation.args),
                Err(e) => e,
            },
            Err(e) => e,
        },
        Err(e) => e,
    };
    eprintln!("nop sandbox: {error}");
    EXIT_SANDBOX_FAILURE
}

/// Leaves nop's session for a new one with no controlling terminal, before anything else runs:
/// a command that could open the terminal (`/dev/tty`) could push keys into its input
/// (TIOCSTI), which the user's shell would run after nop exits, or answer nop's own questions.
/// The helper becomes the leader of the session and of its process group (pgid = its pid), which
/// holds everything the command starts unless that leaves the group itself; nop ends the group
/// through that id. Fails where the helper leads a process group already (it must not be
/// spawned with `process_group(0)`).
fn new_session() -> Result<(), SandboxError> {
    nix::unistd::setsid()
        .map(drop)
        .map_err(SandboxError::Session)
}

/// Asks for SIGTERM when nop exits (killed or crashed), so that the command ends with it: with
/// namespaces this process dies and takes the namespace along; with Landlock alone it ends every
/// process beneath it first. Fails if nop is already gone.
fn follow_parent(spec: &Spec) -> Result<(), SandboxError> {
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM)
        .map_err(SandboxError::Fork)?;
    match spec.parent {
        Some(parent) if nix::unistd::getppid().as_raw() != parent as i32 => {
            Err(SandboxError::ParentGone)
        }
        _ => Ok(()),
    }
}

/// Confines this (single-threaded) process as `spec` says and runs `program`; only returns on
/// failure, otherwise exits with the command's status.
fn run(spec: &Spec, program: &OsStr, args: &[OsString]) -> SandboxError {
    match spec.mechanism {
        Mechanism::Namespaces => namespace::run(spec, program, args),
        Mechanism::Landlock => reap::run(
            || {
                rules::confine(spec, spec.required, !spec.network)?;
                caps::drop_all().map_err(SandboxError::Capabilities)
            },
            program,
            args,
        ),
        Mechanism::Unconfined => reap::run(|| Ok(()), program, args),
    }
}

/// Replaces this process with `program args…` (looked up in `PATH`); returns only on failure.
fn exec(program: &OsStr, args: &[OsString]) -> SandboxError {
    use std::os::unix::process::CommandExt as _;
    let source = std::process::Command::new(program).args(args).exec();
    SandboxError::Exec {
        program: program.to_owned(),
        source,
    }
}

/// The exit code a shell would report for a child's wait status.
fn exit_code(status: nix::sys::wait::WaitStatus) -> Option<i32> {
    use nix::sys::wait::WaitStatus;
    match status {
        WaitStatus::Exited(_, code) => Some(code),
        WaitStatus::Signaled(_, signal, _) => Some(128 + signal as i32),
        _ => None,
    }
}

/// The arguments of `nop __sandbox`.
#[derive(Debug, PartialEq)]
struct Invocation {
    fd: i32,
    program: OsString,
    args: Vec<OsString>,
}

impl Invocation {
    fn parse(args: &[OsString]) -> Result<Invocation, SandboxError> {
        let [fd, separator, program, rest @ ..] = args else {
            return Err(SandboxError::Usage(format!(
                "expected at least 3 arguments, got {}",
                args.len()
            )));
        };
        let fd = fd
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
            .filter(|fd| *fd > 2)
            .ok_or_else(|| {
                SandboxError::Usage(format!(
                    "FD must be a descriptor number above 2, not {}",
                    fd.to_string_lossy()
                ))
            })?;
        if separator != "--" {
            return Err(SandboxError::Usage(format!(
                "expected -- before the program, not {}",
                separator.to_string_lossy()
            )));
        }
        Ok(Invocation {
            fd,
            program: program.clone(),
            args: rest.to_vec(),
        })
    }
}

#[cfg(test)]
mod tests;
