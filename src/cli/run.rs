//! `nop run` headless and the commands that drive a session without the interactive loop: the
//! prompt (an argument, stdin, or piped input attached to it), the approver, a session handle's
//! events driven to the renderer of the output format (`transcript::Renderer`, `output/`) until
//! the run ends, and its exit code; `nop send`'s delivery, `nop stop`, `nop compact`. The
//! interactive session is `interactive/`.

use std::io::Read;
use std::process::ExitCode;

use anyhow::{Result, bail};
use tokio_util::sync::CancellationToken;

use super::follow::show;
use super::signals::interrupt_on_signals;
use super::transcript::Renderer;
use super::{OutputFormat, exit};

use tokio::sync::mpsc;

use nop::agent::{RunRequest, Runtime, SessionHandle};
use nop::permissions::{ApprovalMode, Approver};
use nop::protocol::events::{Event, RunOutcome, RunStatus};

/// The exit code of a finished run.
pub fn exit_code(status: RunStatus) -> ExitCode {
    ExitCode::from(match status {
        RunStatus::Completed => exit::OK,
        RunStatus::Error => exit::ERROR,
        RunStatus::WaitingInput => exit::WAITING_INPUT,
        RunStatus::Cancelled => exit::CANCELLED,
        RunStatus::BudgetExceeded => exit::BUDGET_EXCEEDED,
        RunStatus::GoalNotMet => exit::GOAL_NOT_MET,
    })
}

pub(super) fn tokio_runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers())
        .enable_all()
        .build()?)
}

/// The runtime's worker threads: one per CPU this process may use, at most four. nop waits on
/// the model, files and child processes, and runs what takes CPU on blocking threads; tokio's
/// own count reads the cgroup files at every start and starts a thread per core.
fn workers() -> usize {
    use nix::sched::{CpuSet, sched_getaffinity};
    let usable = sched_getaffinity(nix::unistd::Pid::from_raw(0)).map_or(1, |set| {
        (0..CpuSet::count())
            .filter(|&cpu| set.is_set(cpu).unwrap_or(false))
            .count()
    });
    usable.clamp(1, 4)
}

/// The prompt of `nop run`: the argument, `-` for stdin, or none (interactive on a terminal).
pub fn read_prompt(prompt: Option<String>) -> Result<Option<String>> {
    match prompt.as_deref() {
        Some("-") => {
            let mut text = String::new();
            std::io::stdin().read_to_string(&mut text)?;
            if text.trim().is_empty() {
                bail!("the prompt read from standard input is empty");
            }
            Ok(Some(text))
        }
        Some(p) if p.trim().is_empty() => bail!("the prompt is empty"),
        Some(p) => Ok(Some(match piped_input()? {
            Some(piped) => attach_piped(p, &piped),
            None => p.to_string(),
        })),
        None => Ok(None),
    }
}

/// How much piped input goes with a prompt.
const PIPED_MAX_BYTES: usize = 100 * 1024;

/// How long piped input may take to begin.
const PIPED_WAIT_MS: u16 = 2000;

/// What is piped into nop along with a prompt (`cat error.log | nop run "explain this"`): read
/// when standard input is a pipe or a file, never from a terminal or a device (a CI runner's
/// `/dev/null`), at most [`PIPED_MAX_BYTES`] and one more byte to know it was cut.
fn piped_input() -> Result<Option<Vec<u8>>> {
    use nix::sys::stat::{SFlag, fstat};
    use std::os::fd::AsFd;
    let stdin = std::io::stdin();
    let Ok(stat) = fstat(stdin.as_fd()) else {
        return Ok(None);
    };
    let kind = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT;
    if kind != SFlag::S_IFIFO && kind != SFlag::S_IFREG {
        return Ok(None);
    }
    // A pipe nobody writes to or closes (`ssh host nop "…"`, some task runners) would hold the
    // run forever: what is piped has to start within a moment.
    if kind == SFlag::S_IFIFO {
        use nix::poll::{PollFd, PollFlags, poll};
        let mut fds = [PollFd::new(stdin.as_fd(), PollFlags::POLLIN)];
        if !poll(&mut fds, PIPED_WAIT_MS).is_ok_and(|n| n > 0) {
            eprintln!(
                "nop: nothing came on the standard input pipe within {} s; going on without it",
                PIPED_WAIT_MS / 1000
            );
            return Ok(None);
        }
    }
    let mut bytes = Vec::new();
    stdin
        .lock()
        .take(PIPED_MAX_BYTES as u64 + 1)
        .read_to_end(&mut bytes)?;
    Ok((!bytes.iter().all(u8::is_ascii_whitespace)).then_some(bytes))
}

/// `prompt` with `piped` after it as a fenced block, cut to [`PIPED_MAX_BYTES`] with a note.
fn attach_piped(prompt: &str, piped: &[u8]) -> String {
    let cut = piped.len() > PIPED_MAX_BYTES;
    let text = String::from_utf8_lossy(&piped[..piped.len().min(PIPED_MAX_BYTES)]);
    let fence = if text.contains("```") { "~~~~" } else { "```" };
    let mut out = format!("{prompt}\n\n{fence}\n{}\n{fence}", text.trim_end());
    if cut {
        out.push_str(&format!(
            "\n(the input piped to nop was cut to its first {} KiB)",
            PIPED_MAX_BYTES / 1024
        ));
    }
    out
}

/// Approval questions come to the terminal when there is one; otherwise nobody is asked.
pub type Prompts = Option<nop::agent::Approvals>;

/// The approver of a run and, when a person can answer on this terminal, its questions.
pub fn approver(mode: ApprovalMode, yes: bool, on_terminal: bool) -> (Approver, Prompts) {
    if yes || !on_terminal {
        return (Approver::headless(mode, yes), None);
    }
    let (tx, rx) = mpsc::unbounded_channel();
    (
        Approver::interactive(mode, tx),
        Some(nop::agent::handle::approvals(rx)),
    )
}

/// Runs one request headless: a renderer of the session handle's events in `format`.
pub fn headless(
    runtime: Runtime,
    prompts: Prompts,
    request: RunRequest,
    format: OutputFormat,
) -> Result<ExitCode> {
    let rt = tokio_runtime()?;
    let session = {
        let _inside = rt.enter();
        SessionHandle::start(runtime, prompts, request)
    };
    drive(&rt, session, format)
}

/// Renders `session` in `format` until it ends (Ctrl-C and SIGTERM interrupt it); the exit
/// code says how it ended.
fn drive(
    rt: &tokio::runtime::Runtime,
    session: SessionHandle,
    format: OutputFormat,
) -> Result<ExitCode> {
    rt.block_on(async move {
        interrupt_on_signals(session.submitter());
        match render(session, format).await {
            Ok(outcome) => Ok(exit_code(outcome.status)),
            Err(nop::agent::RunError::Refused(reason)) => {
                super::output::refused(format, &reason);
                Ok(ExitCode::from(exit::REFUSED))
            }
            Err(e) => Err(e.into()),
        }
    })
}

/// Renders a session's events in `format` until it ends, asking on the terminal where it
/// wants a person's yes. Returns how it ended.
async fn render(
    mut session: SessionHandle,
    format: OutputFormat,
) -> Result<RunOutcome, nop::agent::RunError> {
    let mut renderer = Renderer::new(format);
    show(&mut session, &mut renderer, None, &mut String::new()).await;
    renderer.finish();
    session.finish().await
}

/// `nop compact ID`: snapshot, CompactAgent summary, new messages.
pub fn compact(runtime: Runtime, id: &str) -> Result<ExitCode> {
    let (events, mut shown) = mpsc::unbounded_channel();
    let rt = tokio_runtime()?;
    let compacted = rt.block_on(runtime.compact(
        id,
        "requested with nop compact",
        events,
        CancellationToken::new(),
    ));
    while let Ok(event) = shown.try_recv() {
        match event {
            Event::Warning { message } | Event::Untrusted { message, .. } => {
                eprintln!("warning: {message}")
            }
            Event::Compacted {
                snapshot_id,
                messages_before,
                messages_after,
            } => println!(
                "compacted {messages_before} → {messages_after} messages; the full history is in snapshot {snapshot_id}"
            ),
            _ => {}
        }
    }
    if compacted?.is_none() {
        println!("nothing to compact: the conversation is short");
    }
    Ok(ExitCode::SUCCESS)
}

/// A message for session `id`: run now if no process runs the session, otherwise queued for
/// the one that does (seed 004); what became of it, rendered in `format`.
#[allow(clippy::too_many_arguments)]
pub fn deliver(
    runtime: Runtime,
    prompts: Prompts,
    id: &str,
    text: String,
    priority: nop::queue::QueuePriority,
    format: OutputFormat,
    max_turns: Option<u32>,
    emergency: bool,
) -> Result<ExitCode> {
    let rt = tokio_runtime()?;
    let delivery = {
        let _inside = rt.enter();
        nop::agent::deliver(runtime, prompts, id, text, priority, max_turns, emergency)?
    };
    let (position, priority, stop, then) = match delivery {
        nop::agent::Delivery::Running(session) => return drive(&rt, session, format),
        nop::agent::Delivery::NothingToStop => {
            println!("session {id} is not running; nothing to stop");
            return Ok(ExitCode::SUCCESS);
        }
        nop::agent::Delivery::Queued {
            position,
            priority,
            stop,
            then,
        } => (position, priority, stop, then),
    };
    super::output::queued(format, id, position, priority, stop);
    match then {
        Some(session) => drive(&rt, session, format),
        None => Ok(ExitCode::SUCCESS),
    }
}

/// `nop stop`: a stop for the process running session `id`.
pub fn stop(store: &nop::session::Store, id: &str, user: &str) -> Result<ExitCode> {
    match nop::queue::request_stop(&store.dir(id), id, user)? {
        Some(_) => println!("stop requested: session {id} stops at its next checkpoint"),
        None => println!("session {id} is not running; nothing to stop"),
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn piped_input_follows_the_prompt_fenced_and_cut_with_a_note() {
        assert_eq!(
            attach_piped("explain this", b"error: boom\n"),
            "explain this\n\n```\nerror: boom\n```"
        );
        let fenced = attach_piped("x", b"```rust\nfn f() {}\n```");
        assert!(fenced.starts_with("x\n\n~~~~\n```rust"));
        let big = vec![b'a'; PIPED_MAX_BYTES + 1];
        let cut = attach_piped("x", &big);
        assert!(cut.ends_with("(the input piped to nop was cut to its first 100 KiB)"));
        assert!(cut.contains(&"a".repeat(PIPED_MAX_BYTES)));
        assert!(!cut.contains(&"a".repeat(PIPED_MAX_BYTES + 1)));
    }
}
