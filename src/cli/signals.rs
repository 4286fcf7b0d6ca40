//! The signals a session's process answers: Ctrl-C, SIGTERM and SIGHUP interrupt a run (a
//! second one exits at once), and in the interactive session a hang-up or SIGTERM ends it in
//! order, with the terminal gone.

use nop::agent::Op;

use super::exit;

/// Interrupts the session on the first SIGINT, SIGTERM or SIGHUP; a second one exits at once.
/// A hang-up (the terminal closed) ends the run in the same order as SIGTERM: what nop would
/// print goes to /dev/null from then on, since the terminal is gone.
pub(super) fn interrupt_on_signals(session: nop::agent::handle::Submitter) {
    use tokio::signal::unix::{SignalKind, signal};
    tokio::spawn(async move {
        let mut term = signal(SignalKind::terminate()).ok();
        let mut hangup = signal(SignalKind::hangup()).ok();
        for round in 0..2 {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                () = received(term.as_mut()) => {}
                () = received(hangup.as_mut()) => detach_from_terminal(),
            }
            if round > 0 {
                eprintln!("stopped again: exiting without waiting");
                std::process::exit(i32::from(exit::CANCELLED));
            }
            session.submit(Op::Interrupt);
        }
    });
}

/// The interactive session's end on SIGHUP (the terminal closed) or SIGTERM: what nop prints
/// goes to /dev/null from then on, the running turn (if any) is stopped as Esc stops it, and
/// reading the prompt ends as at Ctrl-D, so the session closes in order. The flag says it
/// happened.
pub(super) fn end_on_hangup(
    rt: &tokio::runtime::Runtime,
    current: std::sync::Arc<std::sync::Mutex<Option<nop::agent::handle::Submitter>>>,
) -> std::sync::Arc<std::sync::atomic::AtomicBool> {
    use tokio::signal::unix::{SignalKind, signal};
    let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let set = std::sync::Arc::clone(&flag);
    rt.spawn(async move {
        let mut term = signal(SignalKind::terminate()).ok();
        let mut hangup = signal(SignalKind::hangup()).ok();
        tokio::select! {
            () = received(term.as_mut()) => {}
            () = received(hangup.as_mut()) => {}
        }
        set.store(true, std::sync::atomic::Ordering::SeqCst);
        detach_from_terminal();
        if let Some(session) = current.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            session.submit(Op::Interrupt);
        }
    });
    flag
}

/// The next of signal `s`, or never when it could not be set up.
async fn received(s: Option<&mut tokio::signal::unix::Signal>) {
    match s {
        Some(s) => {
            s.recv().await;
        }
        None => std::future::pending::<()>().await,
    }
}

/// Points standard input, output and error at /dev/null: after a hang-up, writing to the
/// terminal fails, and a failed write must not stop the run from ending in order.
fn detach_from_terminal() {
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        let _ = nix::unistd::dup2_stdin(&null);
        let _ = nix::unistd::dup2_stdout(&null);
        let _ = nix::unistd::dup2_stderr(&null);
    }
}
