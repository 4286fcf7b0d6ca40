//! The Landlock-only mechanism's way to end everything a command started: `nop __sandbox`
//! becomes a child subreaper, runs the command as its child, and when the command ends kills
//! every process left beneath it. A process that detaches (`setsid -f`, a double fork) is
//! reparented to the nearest subreaper, this one, and so is still found.
#![allow(unsafe_code)]

use std::ffi::{OsStr, OsString};

use nix::errno::Errno;
use nix::sys::signal::{SigSet, SigmaskHow, Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid, fork};

use super::SandboxError;

/// Runs `program args…` as a child confined by `confine`; only returns on failure, otherwise
/// exits with the command's status once everything it started is gone. SIGTERM, SIGINT or SIGHUP
/// (nop stopping the call, or gone) end the command and everything beneath it the same way.
pub(super) fn run(
    confine: impl FnOnce() -> Result<(), SandboxError>,
    program: &OsStr,
    args: &[OsString],
) -> SandboxError {
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        return SandboxError::Fork(e);
    }
    // Blocked before the fork so that none is lost; the child unblocks them before it execs.
    let mut waited = SigSet::empty();
    for signal in [
        Signal::SIGCHLD,
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
    ] {
        waited.add(signal);
    }
    let old = match waited.thread_swap_mask(SigmaskHow::SIG_BLOCK) {
        Ok(old) => old,
        Err(e) => return SandboxError::Fork(e),
    };
    // SAFETY: `nop __sandbox` is single-threaded.
    match unsafe { fork() } {
        Err(e) => SandboxError::Fork(e),
        Ok(ForkResult::Child) => {
            let error = match old
                .thread_set_mask()
                .map_err(SandboxError::Fork)
                .and_then(|()| confine())
            {
                // `confine` drops capabilities where it confines; unconfined (sandbox off), the
                // command keeps the user's rights, as `nop sandbox check` says.
                Ok(()) => super::exec(program, args),
                Err(e) => e,
            };
            eprintln!("nop sandbox: {error}");
            std::process::exit(super::EXIT_SANDBOX_FAILURE);
        }
        Ok(ForkResult::Parent { child }) => {
            let code = wait_or_stop(child, &waited);
            kill_descendants();
            std::process::exit(code);
        }
    }
}

/// Waits for `child` (reaping orphans meanwhile) or a stop signal, whichever comes first; the exit
/// code a shell would show.
fn wait_or_stop(child: Pid, waited: &SigSet) -> i32 {
    loop {
        loop {
            match waitpid(None::<Pid>, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) | Err(_) => break,
                Ok(status) if status.pid() == Some(child) => {
                    if let Some(code) = super::exit_code(status) {
                        return code;
                    }
                }
                Ok(_) => {}
            }
        }
        match waited.wait() {
            Ok(Signal::SIGCHLD) => {}
            Ok(signal) => return 128 + signal as i32,
            Err(_) => return super::EXIT_SANDBOX_FAILURE,
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
