//! The Landlock-only mechanism's way to end everything a command started: `nop __sandbox`
//! becomes a child subreaper, runs the command as its child, and when the command ends kills
//! every process left beneath it. A process that detaches (`setsid -f`, a double fork) is
//! reparented to the nearest subreaper, this one, and so is still found.
#![allow(unsafe_code)]

use std::ffi::{OsStr, OsString};

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid, fork};

use super::SandboxError;

/// Runs `program args…` as a child confined by `confine`; only returns on failure, otherwise
/// exits with the command's status once everything it started is gone.
pub(super) fn run(
    confine: impl FnOnce() -> Result<(), SandboxError>,
    program: &OsStr,
    args: &[OsString],
) -> SandboxError {
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        return SandboxError::Fork(e);
    }
    // SAFETY: `nop __sandbox` is single-threaded.
    match unsafe { fork() } {
        Err(e) => SandboxError::Fork(e),
        Ok(ForkResult::Child) => {
            let error = match confine() {
                Ok(()) => match super::caps::drop_all() {
                    Ok(()) => super::exec(program, args),
                    Err(e) => SandboxError::Capabilities(e),
                },
                Err(e) => e,
            };
            eprintln!("nop sandbox: {error}");
            std::process::exit(super::EXIT_SANDBOX_FAILURE);
        }
        Ok(ForkResult::Parent { child }) => {
            let code = loop {
                match waitpid(child, None) {
                    Ok(status) => {
                        if let Some(code) = super::exit_code(status) {
                            break code;
                        }
                    }
                    Err(Errno::EINTR) => {}
                    Err(_) => break super::EXIT_SANDBOX_FAILURE,
                }
            };
            kill_descendants();
            std::process::exit(code);
        }
    }
}

/// Kills and reaps every remaining child until there is none. Killing a child reparents its
/// children here, so they show up in the next round.
fn kill_descendants() {
    loop {
        for pid in children() {
            let _ = kill(pid, Signal::SIGKILL);
        }
        match waitpid(None::<Pid>, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => std::thread::sleep(std::time::Duration::from_millis(1)),
            Ok(_) | Err(Errno::EINTR) => {}
            // ECHILD: nothing left.
            Err(_) => return,
        }
    }
}

/// This process's children: from `/proc/self/task/*/children` where the kernel has it, else by
/// scanning every process's parent.
fn children() -> Vec<Pid> {
    let me = std::process::id();
    let listed = std::fs::read_to_string(format!("/proc/self/task/{me}/children"));
    if let Ok(text) = listed {
        return text
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .map(Pid::from_raw)
            .collect();
    }
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    // The command name may hold spaces and parentheses: parse after the last ')'.
                    let rest = &stat[stat.rfind(')')? + 1..];
                    rest.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(me)
        })
        .map(Pid::from_raw)
        .collect()
}
