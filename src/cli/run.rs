//! `nop run` (headless) and the interactive session: a session handle's events driven to the
//! renderer of the output format (`transcript::Renderer`, `output/`), approvals asked on the
//! terminal; `nop send`'s delivery, `nop stop`, `nop compact`.

use std::io::{IsTerminal, Read};
use std::process::ExitCode;

use anyhow::{Result, bail};
use tokio_util::sync::CancellationToken;

use super::keys::{Key, Keys};
use super::transcript::Renderer;
use super::{OutputFormat, exit};

use tokio::sync::mpsc;

use nop::agent::{Op, RunRequest, Runtime, SessionHandle};
use nop::permissions::{ApprovalAnswer, ApprovalMode, Approver};
use nop::protocol::events::{Event, RunOutcome, RunStatus};
use nop::workspace::Workspace;

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

/// Asks the person on the terminal, a line for an answer, the question of `event`.
async fn ask_on_terminal(event: &Event) -> ApprovalAnswer {
    eprint!("{}", super::transcript::approval_question(event, false));
    tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        match std::io::stdin().read_line(&mut line) {
            Ok(0) | Err(_) => ApprovalAnswer::No,
            Ok(_) => match line.trim().to_lowercase().as_str() {
                "y" | "yes" => ApprovalAnswer::Once,
                "a" | "always" => ApprovalAnswer::Always,
                _ => ApprovalAnswer::No,
            },
        }
    })
    .await
    .unwrap_or(ApprovalAnswer::No)
}

/// Interrupts the session on the first SIGINT, SIGTERM or SIGHUP; a second one exits at once.
/// A hang-up (the terminal closed) ends the run in the same order as SIGTERM: what nop would
/// print goes to /dev/null from then on, since the terminal is gone.
fn interrupt_on_signals(session: nop::agent::handle::Submitter) {
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
fn end_on_hangup(
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

/// Shows a session's events until it ends or, an open handle, waits for input (then the
/// session it has, if any). Approval questions are asked on the terminal.
/// In key mode (`keys`), what is typed and not yet queued is kept in `typed`: the next prompt
/// starts with it.
async fn show(
    session: &mut SessionHandle,
    renderer: &mut Renderer,
    mut keys: Option<&mut Keys>,
    typed: &mut String,
) -> Option<String> {
    // The approval being answered by key.
    let mut asking: Option<Asking> = None;
    loop {
        let tick = renderer.wants_tick();
        let event = tokio::select! {
            event = session.next_event() => event,
            () = tokio::time::sleep(std::time::Duration::from_millis(100)), if tick => {
                renderer.tick();
                continue;
            }
            key = next_key(&mut keys) => {
                match asking.take() {
                    Some(question) => asking = answer_by_key(session, renderer, question, key),
                    None => typing(session, renderer, typed, key),
                }
                continue;
            }
        };
        let event = event?;
        match &event {
            Event::ApprovalRequested { id, scope, .. } => {
                renderer.asking(&event);
                if keys.is_some() {
                    eprintln!("{}", super::transcript::approval_question(&event, true));
                    renderer.waiting(Some(WAITING));
                    asking = Some(Asking {
                        id: *id,
                        scope: scope.clone(),
                        instead: None,
                    });
                } else {
                    let answer = ask_on_terminal(&event).await;
                    session.submit(Op::Approval { id: *id, answer });
                }
            }
            Event::Idle { session_id } => {
                renderer.finish();
                return session_id.clone();
            }
            _ => renderer.event(&event),
        }
    }
}

/// An approval question answered with keys: its id, and the text of a "no, do this instead"
/// being typed.
struct Asking {
    id: u64,
    /// What "always" covers, in words.
    scope: String,
    instead: Option<String>,
}

async fn next_key(keys: &mut Option<&mut Keys>) -> Key {
    match keys {
        Some(keys) => keys.next().await,
        None => std::future::pending().await,
    }
}

/// The status line while an approval question waits for a key.
const WAITING: &str = "⏸ waiting for your answer · esc stops the run";

/// A key while an approval waits: y, a, n, t and then what to do instead, or Esc, which stops
/// the run (nop then waits for the next prompt). Returns the question while it is still open.
fn answer_by_key(
    session: &SessionHandle,
    renderer: &mut Renderer,
    mut question: Asking,
    key: Key,
) -> Option<Asking> {
    let answer = match (&mut question.instead, key) {
        (None, Key::Char('y' | 'Y')) => ApprovalAnswer::Once,
        (None, Key::Char('a' | 'A')) => ApprovalAnswer::Always,
        (None, Key::Char('n' | 'N')) => ApprovalAnswer::No,
        (None, Key::Esc) => {
            renderer.answered("  ■ no; stopping the run");
            session.submit(Op::Interrupt);
            return None;
        }
        (None, Key::Char('t' | 'T')) => {
            renderer.waiting(Some(&instead_line("")));
            question.instead = Some(String::new());
            return Some(question);
        }
        (None, _) => return Some(question),
        (Some(text), Key::Enter) if !text.trim().is_empty() => {
            ApprovalAnswer::Instead(text.trim().to_string())
        }
        // Back to the question's answers.
        (Some(_), Key::Esc) => {
            renderer.waiting(Some(WAITING));
            question.instead = None;
            return Some(question);
        }
        (Some(text), Key::Backspace) => {
            text.pop();
            renderer.waiting(Some(&instead_line(text)));
            return Some(question);
        }
        (Some(text), Key::Char(c)) => {
            text.push(c);
            renderer.waiting(Some(&instead_line(text)));
            return Some(question);
        }
        (Some(_), _) => return Some(question),
    };
    let said = match &answer {
        ApprovalAnswer::Once => "  ✓ yes".to_string(),
        ApprovalAnswer::Always => format!(
            "  ✓ yes, and from now on: {}",
            super::term::style::one_line(&question.scope)
        ),
        ApprovalAnswer::No => "  ✗ no".to_string(),
        ApprovalAnswer::Instead(text) => {
            format!("  ✗ no; instead: {}", super::term::style::one_line(text))
        }
    };
    renderer.answered(&said);
    session.submit(Op::Approval {
        id: question.id,
        answer,
    });
    None
}

/// The status line while the text of "no, do this instead" is typed: the text so far.
fn instead_line(text: &str) -> String {
    format!(
        "  instead (enter sends it, esc goes back): {}",
        super::term::style::one_line(text)
    )
}

/// A key while the agent works: Esc interrupts, Enter queues the line typed, Ctrl-O shows the
/// last tool result in full.
fn typing(session: &SessionHandle, renderer: &mut Renderer, typed: &mut String, key: Key) {
    match key {
        Key::Esc => session.submit(Op::Interrupt),
        Key::Enter => {
            let text = std::mem::take(typed);
            if !text.trim().is_empty() {
                session.submit(Op::Queue {
                    text: text.trim().to_string(),
                    priority: nop::queue::QueuePriority::High,
                });
            }
        }
        Key::Backspace => {
            typed.pop();
        }
        Key::Char(c) => typed.push(c),
        Key::Verbose => renderer.show_last_result(),
    }
    renderer.set_input(typed);
}

/// The interactive session: a line editor, the transcript of each run, slash commands. One
/// open session handle runs every prompt; `/clear`, `/resume`, `/fork` and `/model` open another.
pub fn interactive(
    runtime: Runtime,
    prompts: Prompts,
    ws: &Workspace,
    session: Option<String>,
    agent: Option<String>,
    max_turns: Option<u32>,
    command_dirs: Vec<std::path::PathBuf>,
) -> Result<ExitCode> {
    if !std::io::stdin().is_terminal() {
        bail!(
            "no prompt given and standard input is not a terminal: pass a PROMPT, or `-` to read it from standard input"
        );
    }
    let rt = tokio_runtime()?;
    let (mut editor, switch) = super::editor::editor(runtime.cwd())?;
    let _enter = super::editor::EnterKept::start();
    let history = ws.nop_dir().join("logs").join("history.txt");
    let _ = editor.load_history(&history);
    eprintln!(
        "nop · {} · /help for commands · Esc stops the agent, Ctrl-D leaves",
        ws.root.display()
    );
    let mode = runtime.approver().mode();
    eprintln!(
        "approval: {} · {} · Shift+Tab or /mode to change",
        mode.as_str(),
        mode.describe()
    );
    let mut here = Interactive {
        handle: None,
        runtime,
        prompts,
        agent,
        max_turns,
        session: None,
        renderer: Renderer::new(OutputFormat::Text).interactive(),
        root: ws.root.clone(),
        command_dirs,
        current: Default::default(),
    };
    let hung_up = end_on_hangup(&rt, std::sync::Arc::clone(&here.current));
    here.switch(&rt, session);
    let mut interrupted = false;
    // Typed while the last answer came, not queued: the next prompt begins with it.
    let mut typed = String::new();
    // After the cursor, when Shift+Tab ended the line.
    let mut after = String::new();
    loop {
        // Custom commands read afresh for each prompt: one added meanwhile is in the menu.
        if let Some(helper) = editor.helper_mut() {
            helper.custom = here.custom_commands().menu();
        }
        let prompt = super::editor::prompt(here.runtime.approver().mode());
        let initial = (std::mem::take(&mut typed), std::mem::take(&mut after));
        let line = match editor.readline_with_initial(&prompt, (&initial.0, &initial.1)) {
            Ok(line) => {
                interrupted = false;
                line
            }
            Err(rustyline::error::ReadlineError::Interrupted)
                if switch.show_result(&mut typed, &mut after) =>
            {
                interrupted = false;
                here.renderer.show_last_result();
                continue;
            }
            Err(rustyline::error::ReadlineError::Interrupted)
                if switch.cycle(here.runtime.approver(), &mut typed, &mut after) =>
            {
                interrupted = false;
                continue;
            }
            Err(rustyline::error::ReadlineError::Interrupted) => {
                // Twice in a row at the prompt leaves; once clears the line.
                if std::mem::replace(&mut interrupted, true) {
                    break;
                }
                eprintln!("(Ctrl-C again or Ctrl-D to leave)");
                continue;
            }
            Err(rustyline::error::ReadlineError::Eof) => break,
            // After a hang-up the terminal is gone: reading it fails, and the session closes
            // as at Ctrl-D.
            Err(_) if hung_up.load(std::sync::atomic::Ordering::SeqCst) => break,
            Err(e) => return Err(e.into()),
        };
        let input = line.trim();
        if input.is_empty() {
            continue;
        }
        let _ = editor.add_history_entry(input);
        let op = if input.starts_with('/') {
            match here.command(&rt, input) {
                Command::Leave => break,
                Command::Done => continue,
                Command::Run(op) => op,
            }
        } else {
            Op::UserInput {
                text: input.to_string(),
            }
        };
        here.run(&rt, op, &mut typed);
        // Plan mode: the plan is shown for approval; a yes switches the mode and goes on.
        if here.runtime.approver().mode() == nop::permissions::ApprovalMode::Plan
            && typed.is_empty()
            && let Ok(answer) = editor
                .readline("carry out the plan? (y: switch to on-request and go on) ")
                .inspect_err(|_| {
                    let _ = switch.cycle(here.runtime.approver(), &mut typed, &mut after);
                })
            && matches!(answer.trim(), "y" | "yes")
        {
            here.runtime
                .approver()
                .set_mode(nop::permissions::ApprovalMode::OnRequest);
            eprintln!("approval: on-request · carrying out the plan");
            let op = Op::UserInput {
                text: "The plan is approved: carry it out now.".to_string(),
            };
            here.run(&rt, op, &mut typed);
        }
    }
    let _ = editor.save_history(&history);
    here.close(&rt);
    if let Some(id) = here.session {
        // `-c` takes the most recent session: the short form is right only when that is this one.
        let last = super::sessions::last_session(here.runtime.store());
        if last.as_deref() == Some(id.as_str()) {
            eprintln!("session {id} saved; continue with: nop run -c");
        } else {
            eprintln!("session {id} saved; continue with: nop run --session {id}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The interactive session's state.
struct Interactive {
    /// The open handle (always set between calls; taken while it is being replaced).
    handle: Option<SessionHandle>,
    runtime: Runtime,
    prompts: Prompts,
    agent: Option<String>,
    max_turns: Option<u32>,
    session: Option<String>,
    renderer: Renderer,
    /// The repository root, where custom slash commands are looked for first.
    root: std::path::PathBuf,
    /// The user's folders of custom slash commands (after the repository's).
    command_dirs: Vec<std::path::PathBuf>,
    /// Where a hang-up or SIGTERM finds the open handle, to stop its run in order.
    current: std::sync::Arc<std::sync::Mutex<Option<nop::agent::handle::Submitter>>>,
}

/// What a slash command leaves to do.
enum Command {
    Done,
    Leave,
    Run(Op),
}

impl Interactive {
    /// The custom slash commands as they are now.
    fn custom_commands(&self) -> super::commands::Custom {
        super::commands::load(&self.root, &self.command_dirs)
    }

    /// Closes the open handle, if any, and opens one on `session` (`None`: a new one with the
    /// next prompt); a session that has history shows its last exchanges.
    fn switch(&mut self, rt: &tokio::runtime::Runtime, session: Option<String>) {
        if let Some(id) = &session {
            match self.runtime.store().read_session(id) {
                Ok(file) => self.renderer.replay(&file.messages, 3),
                Err(e) => eprintln!("error: {e}"),
            }
            eprintln!("continuing session {id}");
        }
        self.reopen(rt, session);
    }

    fn close(&mut self, rt: &tokio::runtime::Runtime) {
        if let Some(handle) = self.handle.take() {
            handle.submit(Op::Shutdown);
            // How the last run ended was shown as it ended.
            let _ = rt.block_on(handle.finish());
        }
    }

    /// Runs `op` and shows what happens until the handle waits for input again. While the
    /// agent works the terminal is in key mode: Esc interrupts, what is typed is queued for
    /// the agent with Enter, and never echoed into the answer.
    fn run(&mut self, rt: &tokio::runtime::Runtime, op: Op, typed: &mut String) {
        let Some(handle) = self.handle.as_mut() else {
            return;
        };
        let renderer = &mut self.renderer;
        let idle = rt.block_on(async {
            let listener = {
                let session = handle.submitter();
                tokio::spawn(async move {
                    if tokio::signal::ctrl_c().await.is_ok() {
                        session.submit(Op::Interrupt);
                    }
                })
            };
            let mut keys = Keys::start();
            handle.submit(op);
            let idle = show(handle, renderer, keys.as_mut(), typed).await;
            drop(keys);
            listener.abort();
            idle
        });
        if idle.is_some() {
            self.session = idle;
        }
    }

    fn command(&mut self, rt: &tokio::runtime::Runtime, input: &str) -> Command {
        let (name, argument) = match input.split_once(char::is_whitespace) {
            Some((name, rest)) => (name, rest.trim()),
            None => (input, ""),
        };
        let store = self.runtime.store().clone();
        match name {
            "/exit" | "/quit" => return Command::Leave,
            "/help" => {
                eprintln!("{}", super::slash::help());
                let custom = self.custom_commands().menu();
                if !custom.is_empty() {
                    eprintln!("\ncustom commands (nop commands list shows their files):");
                    for (name, help) in custom {
                        eprintln!("{name:<10} {help}");
                    }
                }
            }
            "/compact" => return Command::Run(Op::Compact),
            "/goal" => return self.goal(argument),
            "/verbose" => {
                let on = self.renderer.toggle_verbose();
                eprintln!(
                    "{}",
                    if on {
                        "whole tool results and diffs from now on"
                    } else {
                        "tool results cut to their last lines from now on"
                    }
                );
            }
            "/status" | "/cost" => {
                let file = self
                    .session
                    .as_ref()
                    .and_then(|id| store.read_session(id).ok());
                let model = self.model();
                for line in super::slash::status(&model, file.as_ref(), self.renderer.context()) {
                    eprintln!("{line}");
                }
            }
            "/mode" | "/approvals" if argument.is_empty() => {
                let mode = self.runtime.approver().mode();
                eprintln!("approval: {} · {}", mode.as_str(), mode.describe());
            }
            "/mode" | "/approvals" => match nop::config::ApprovalSetting::parse(argument) {
                Some(setting) => {
                    let mode: nop::permissions::ApprovalMode = setting.into();
                    self.runtime.approver().set_mode(mode);
                    eprintln!("approval: {} · {}", mode.as_str(), mode.describe());
                }
                None => eprintln!(
                    "unknown approval mode `{argument}`: never, on-request, always or plan"
                ),
            },
            "/model" if argument.is_empty() => eprintln!("model {}", self.model()),
            "/model" => {
                self.runtime = self.runtime.clone().with_model(argument);
                let session = self.session.clone();
                self.reopen(rt, session);
                eprintln!("model {argument} from the next prompt on");
            }
            "/clear" => {
                self.reopen(rt, None);
                eprintln!("new session: it starts with your next prompt");
            }
            "/resume" => match pick_session(&store) {
                Ok(Some(id)) => self.switch(rt, Some(id)),
                Ok(None) => {}
                Err(e) => eprintln!("error: {e}"),
            },
            "/fork" => {
                let Some(id) = self.session.clone() else {
                    eprintln!("no session yet: say something first");
                    return Command::Done;
                };
                match store.fork(&id, None, chrono::Utc::now()) {
                    Ok(fork) => {
                        eprintln!("forked {id} → {}; you are in the fork", fork.session_id);
                        self.reopen(rt, Some(fork.session_id));
                    }
                    Err(e) => eprintln!("error: {e}"),
                }
            }
            "/diff" => {
                let Some(id) = &self.session else {
                    eprintln!("no session yet: say something first");
                    return Command::Done;
                };
                match store.read_session(id) {
                    Ok(file) => {
                        let root = self.runtime.workspace().root.clone();
                        let style = super::term::style::Style::detect(true);
                        for line in super::slash::session_diff(&root, &file.messages, style) {
                            eprintln!("{line}");
                        }
                    }
                    Err(e) => eprintln!("error: {e}"),
                }
            }
            "/undo" | "/rewind" => {
                let Some(id) = self.session.clone() else {
                    eprintln!("no session yet: say something first");
                    return Command::Done;
                };
                let ws = self.runtime.workspace().clone();
                let checkpoints = ws.checkpoints(self.runtime.config());
                if name == "/rewind" && argument.is_empty() {
                    return self.rewind_to_a_turn(rt, &store, &id, checkpoints.as_ref());
                }
                // The session's run lock is free only with the handle closed.
                self.close(rt);
                let now = chrono::Utc::now();
                let mut err = std::io::stderr();
                let shown = match (name, &checkpoints) {
                    ("/undo", Some(c)) => {
                        let force = argument == "--force";
                        nop::checkpoint::undo_turn(&store, c, &id, force, now)
                            .map_err(|e| e.to_string())
                            .and_then(|u| {
                                super::render::undo(&mut err, &u, false).map_err(|e| e.to_string())
                            })
                    }
                    ("/undo", None) => {
                        Err("file checkpoints are off (checkpoints.enabled)".to_string())
                    }
                    _ => {
                        super::slash::rewind_arguments(argument).and_then(|(snap, mode, force)| {
                            nop::checkpoint::rewind(
                                &store,
                                checkpoints.as_ref(),
                                &id,
                                &snap,
                                mode,
                                force,
                                now,
                            )
                            .map_err(|e| e.to_string())
                            .and_then(|r| {
                                super::render::rewind(&mut err, &r, false)
                                    .map_err(|e| e.to_string())
                            })
                        })
                    }
                };
                if let Err(e) = shown {
                    eprintln!("error: {e}");
                }
                self.reopen(rt, Some(id));
            }
            "/plan" | "/snapshot" => {
                let Some(id) = &self.session else {
                    eprintln!("no session yet: say something first");
                    return Command::Done;
                };
                if name == "/plan" {
                    match store.read(id) {
                        Ok(state) => {
                            let style = super::term::style::Style::detect(true);
                            let lines = super::term::plan::checklist(&state.plan, style);
                            if lines.is_empty() {
                                eprintln!("no tasks");
                            }
                            for line in lines {
                                eprintln!("{line}");
                            }
                        }
                        Err(e) => eprintln!("error: {e}"),
                    }
                } else {
                    match store.snapshot(id, chrono::Utc::now()) {
                        Ok(snap) => println!("snapshot {snap} (nop fork {id} --snapshot {snap})"),
                        Err(e) => eprintln!("error: {e}"),
                    }
                }
            }
            other => {
                let custom = self.custom_commands();
                for w in &custom.found.warnings {
                    eprintln!("warning: {}", super::term::style::one_line(w));
                }
                if let Some(text) = custom.expand(input) {
                    return Command::Run(Op::UserInput { text });
                }
                match super::slash::nearest(other) {
                    Some(near) => eprintln!("unknown command {other}; did you mean {near}?"),
                    None => eprintln!("unknown command {other}; /help lists them"),
                }
            }
        }
        Command::Done
    }

    /// `/rewind` alone: the session's runs in a picker, newest first; the one picked has its files
    /// and conversation taken back to where it began.
    fn rewind_to_a_turn(
        &mut self,
        rt: &tokio::runtime::Runtime,
        store: &nop::session::Store,
        id: &str,
        checkpoints: Option<&nop::checkpoint::Checkpoints>,
    ) -> Command {
        let file = match store.read_session(id) {
            Ok(file) => file,
            Err(e) => {
                eprintln!("error: {e}");
                return Command::Done;
            }
        };
        let turns = super::slash::turn_entries(&file, checkpoints);
        if turns.is_empty() {
            eprintln!("no runs to go back to yet; /rewind SNAP goes back to a snapshot:");
            for line in super::slash::rewind_points(store, id) {
                eprintln!("{line}");
            }
            return Command::Done;
        }
        let lines: Vec<String> = turns.iter().map(|(_, line)| line.clone()).collect();
        let turn = match super::picker::pick("rewind to before which run", &lines) {
            Ok(Some(i)) => match turns.get(i) {
                Some((turn, _)) => *turn,
                None => return Command::Done,
            },
            Ok(None) => return Command::Done,
            Err(e) => {
                eprintln!("error: {e}");
                return Command::Done;
            }
        };
        // The session's run lock is free only with the handle closed.
        self.close(rt);
        let rewound = nop::checkpoint::rewind_turn(
            store,
            checkpoints,
            id,
            turn,
            if checkpoints.is_some() {
                nop::checkpoint::RewindMode::Both
            } else {
                nop::checkpoint::RewindMode::Conversation
            },
            false,
            chrono::Utc::now(),
        )
        .map_err(|e| e.to_string())
        .and_then(|r| {
            super::render::rewind_turn(&mut std::io::stderr(), &r, false).map_err(|e| e.to_string())
        });
        if let Err(e) = rewound {
            eprintln!("error: {e}");
        }
        self.reopen(rt, Some(id.to_string()));
        Command::Done
    }

    /// Opens a new handle on `session` without replaying it (it is on the screen already).
    fn reopen(&mut self, rt: &tokio::runtime::Runtime, session: Option<String>) {
        self.close(rt);
        self.session = session.clone();
        let _inside = rt.enter();
        let open = nop::agent::Open {
            session,
            agent: self.agent.clone(),
            max_turns: self.max_turns,
        };
        let handle = SessionHandle::open(self.runtime.clone(), self.prompts.clone(), open);
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = Some(handle.submitter());
        self.handle = Some(handle);
    }

    /// `/goal`: the session's goal and its checks; `/goal clear`; `/goal TEXT` sets one and
    /// starts working toward it.
    fn goal(&mut self, argument: &str) -> Command {
        let store = self.runtime.store().clone();
        let goal = self
            .session
            .as_ref()
            .and_then(|id| store.read_session(id).ok())
            .and_then(|s| s.goal);
        match argument {
            "" => match goal {
                None => eprintln!("no goal: /goal TEXT sets one"),
                Some(goal) => {
                    eprintln!(
                        "goal: {} ({}, {} checks)",
                        super::term::style::visible(&goal.objective),
                        goal.status.as_str(),
                        goal.checks.len()
                    );
                    if let Some(last) = goal.checks.last() {
                        eprintln!(
                            "  last check: {}",
                            super::term::style::visible(&last.reason)
                        );
                    }
                }
            },
            "clear" => match &self.session {
                Some(id) => match nop::agent::goal::clear(&store, id) {
                    Ok(true) => eprintln!("goal cleared"),
                    Ok(false) => eprintln!("no goal to clear"),
                    Err(e) => eprintln!("error: {e}"),
                },
                None => eprintln!("no goal to clear"),
            },
            objective => {
                return Command::Run(Op::Goal {
                    spec: nop::agent::goal::GoalSpec {
                        objective: objective.to_string(),
                        until: None,
                    },
                });
            }
        }
        Command::Done
    }

    fn model(&self) -> String {
        self.runtime
            .config()
            .provider
            .model
            .clone()
            .unwrap_or_else(|| "the provider's default".into())
    }
}

/// The recent sessions as the resume picker and the headless list show them: newest first, one
/// line each (time, id, title).
pub fn resumable(store: &nop::session::Store) -> Vec<(String, String)> {
    super::slash::recent(store, 50)
        .into_iter()
        .map(|r| {
            let when = r
                .updated_at
                .with_timezone(&chrono::Local)
                .format("%b %d %H:%M");
            let title: String = r.title.chars().take(70).collect();
            let title = super::term::style::one_line(&title);
            let line = format!("{when}  {}  {title}", r.id);
            (r.id, line)
        })
        .collect()
}

/// The picker of recent sessions (`nop resume` on a terminal, `/resume`): the session picked
/// (`None`: none, or cancelled).
pub fn pick_session(store: &nop::session::Store) -> Result<Option<String>> {
    let recent = resumable(store);
    if recent.is_empty() {
        eprintln!("no sessions to resume yet");
        return Ok(None);
    }
    let lines: Vec<String> = recent.iter().map(|(_, line)| line.clone()).collect();
    let picked = super::picker::pick("resume which", &lines)?;
    Ok(picked.and_then(|i| recent.get(i)).map(|(id, _)| id.clone()))
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
