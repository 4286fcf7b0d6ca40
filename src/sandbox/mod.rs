//! The shell sandbox: confines one command with Landlock and no_new_privs before it runs.
//!
//! Owns the [`Spec`] a confined command runs under, the probe of what this kernel can enforce
//! ([`support`]), and the confinement itself ([`exec_confined`]). nop never confines its own
//! process: the shell tool runs `nop __sandbox SPEC_FILE REQUIRED(0|1) -- PROGRAM ARGS…`
//! ([`sandbox_main`]), a short-lived process that restricts itself and then becomes the command
//! through `exec`. The restriction is inherited by everything the command starts and cannot be
//! lifted.
//!
//! Landlock is an allow-list: whatever no [`Grant`] covers is refused. What it cannot express,
//! so callers should not promise it:
//! - `network: false` refuses TCP `connect` and `bind` only (Landlock ABI 4, Linux 6.7). UDP,
//!   ICMP and other non-TCP traffic, and abstract UNIX sockets, are not restricted.
//! - Connecting to a named UNIX socket (an ssh agent, a docker socket) is controlled only from
//!   ABI 9 (Linux 7.1), and then only a [`Access::ReadWrite`] grant allows it. It is not counted
//!   in [`Enforcement::Full`] for the filesystem, so before 7.1 it is an open hole.
//! - Metadata is not covered: `stat`, `chmod`, `chown`, `utime` and extended attributes work
//!   on any path the command can name, so a refused file's existence, size and mode still show.
//! - A grant is resolved when the rules are built: a granted path that does not exist yet is
//!   skipped, and creating it later does not make it reachable (grant its parent instead).
//!   `sed -i` on a file granted on its own fails because it writes a new file in the directory.
//! - File descriptors opened before confinement (the command's stdin, stdout and stderr) keep
//!   working whatever they point to.

mod rules;

use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};

/// Exit status of `nop __sandbox` when it could not run the command (as `env` and `docker` do).
pub const EXIT_SANDBOX_FAILURE: i32 = 125;

/// What a confined command may do. Built by the permissions module from the agent's rules.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Spec {
    /// Paths (files or directories, absolute) and what may be done at and beneath them.
    /// Anything not granted here is refused by the kernel (Landlock is an allow-list).
    pub grants: Vec<Grant>,
    /// Whether the command may open network connections. `false` refuses TCP only: Landlock
    /// does not restrict UDP.
    pub network: bool,
}

/// One path and what may be done at and beneath it.
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

/// What this kernel can enforce.
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
    #[error("usage: nop __sandbox SPEC_FILE REQUIRED(0|1) -- PROGRAM [ARGS...]: {0}")]
    Usage(String),
    #[error("cannot read the sandbox spec {}: {source}", path.display())]
    ReadSpec {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot delete the sandbox spec {}: {source}", path.display())]
    RemoveSpec {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid sandbox spec {}: {source}", path.display())]
    ParseSpec {
        path: PathBuf,
        source: serde_json::Error,
    },
    /// `required` was set and the kernel cannot enforce everything the spec asks for.
    #[error("the sandbox is required but cannot be enforced here: {}", missing.join("; "))]
    NotEnforceable { missing: Vec<String> },
    #[error("cannot apply the Landlock rules: {0}")]
    Landlock(#[from] landlock::RulesetError),
    #[error("cannot set no_new_privs on the sandboxed process")]
    NoNewPrivs,
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

/// Probes Landlock support without restricting this process.
pub fn support() -> Support {
    Support::from_status(rules::probe())
}

/// Applies `spec` to the current process (Landlock restrict_self + no_new_privs), then replaces
/// it with `program args…` via exec (`program` is looked up in `PATH`). Only returns on failure.
///
/// With `required`, nothing is restricted and nothing runs unless the kernel fully enforces the
/// filesystem rules (and, for `network: false`, can refuse TCP); the error lists what it cannot.
/// Without it, the kernel applies what it can, possibly nothing (check [`support`] to warn).
///
/// The program, its interpreter and its libraries must lie beneath `Read` grants (usually `/usr`,
/// `/lib*`, `/etc`), or the exec itself is refused. Landlock confines the calling thread; exec
/// ends every other thread, so the command runs wholly confined.
pub fn exec_confined(
    spec: &Spec,
    required: bool,
    program: &OsStr,
    args: &[OsString],
) -> SandboxError {
    if let Err(e) = rules::confine(spec, required) {
        return e;
    }
    let source = std::process::Command::new(program).args(args).exec();
    SandboxError::Exec {
        program: program.to_owned(),
        source,
    }
}

/// The hidden entry point used by the shell tool: `nop __sandbox SPEC_FILE REQUIRED(0|1) --
/// PROGRAM ARGS...` (`args` starts at SPEC_FILE). Reads the JSON [`Spec`] from SPEC_FILE, deletes
/// that file, and calls [`exec_confined`]. Only returns on failure: prints the error to stderr
/// prefixed "nop sandbox: " and returns [`EXIT_SANDBOX_FAILURE`] as the exit code to use.
pub fn sandbox_main(args: &[OsString]) -> i32 {
    let error = match Invocation::parse(args) {
        Ok(invocation) => match load_spec(&invocation.spec_file) {
            Ok(spec) => exec_confined(
                &spec,
                invocation.required,
                &invocation.program,
                &invocation.args,
            ),
            Err(e) => e,
        },
        Err(e) => e,
    };
    eprintln!("nop sandbox: {error}");
    EXIT_SANDBOX_FAILURE
}

/// The arguments of `nop __sandbox`.
#[derive(Debug, PartialEq)]
struct Invocation {
    spec_file: PathBuf,
    required: bool,
    program: OsString,
    args: Vec<OsString>,
}

impl Invocation {
    fn parse(args: &[OsString]) -> Result<Invocation, SandboxError> {
        let [spec_file, required, separator, program, rest @ ..] = args else {
            return Err(SandboxError::Usage(format!(
                "expected at least 4 arguments, got {}",
                args.len()
            )));
        };
        let required = match required.to_str() {
            Some("0") => false,
            Some("1") => true,
            _ => {
                return Err(SandboxError::Usage(format!(
                    "REQUIRED must be 0 or 1, not {}",
                    required.to_string_lossy()
                )));
            }
        };
        if separator != "--" {
            return Err(SandboxError::Usage(format!(
                "expected -- before the program, not {}",
                separator.to_string_lossy()
            )));
        }
        Ok(Invocation {
            spec_file: PathBuf::from(spec_file),
            required,
            program: program.clone(),
            args: rest.to_vec(),
        })
    }
}

/// Reads the spec and deletes its file, before any restriction could forbid that; a spec that
/// does not parse is deleted too.
fn load_spec(path: &Path) -> Result<Spec, SandboxError> {
    let bytes = std::fs::read(path).map_err(|source| SandboxError::ReadSpec {
        path: path.to_owned(),
        source,
    })?;
    std::fs::remove_file(path).map_err(|source| SandboxError::RemoveSpec {
        path: path.to_owned(),
        source,
    })?;
    serde_json::from_slice(&bytes).map_err(|source| SandboxError::ParseSpec {
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests;
