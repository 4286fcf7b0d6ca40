//! The interactive session: a line editor, the transcript of each run, slash commands (in
//! `slash_commands.rs`). One open session handle runs every prompt; `/clear`, `/resume`,
//! `/fork` and `/model` open another. The picker of recent sessions (`nop resume`, `/resume`)
//! is here too.

mod slash_commands;

use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::{Result, bail};

use crate::cli::OutputFormat;
use crate::cli::follow::show;
use crate::cli::keys::Keys;
use crate::cli::run::{Prompts, tokio_runtime};
use crate::cli::signals::end_on_hangup;
use crate::cli::transcript::Renderer;

use nop::agent::{Op, Runtime, SessionHandle};
use nop::workspace::Workspace;

/// The interactive session: a line editor, the transcript of each run, slash commands. One
/// open session handle runs every prompt; `/clear`, `/resume`, `/fork` and `/model` open another.
#[expect(clippy::too_many_lines, reason = "a debt: listed in AGENTS.md")]
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
    let (mut editor, switch) = crate::cli::editor::editor(runtime.cwd())?;
    let _enter = crate::cli::editor::EnterKept::start();
    let history = ws.nop_dir().join("logs").join("history.txt");
    let _ = editor.load_history(&history);
    // Broken between words at the terminal's width (80 columns included).
    let say = |text: String| {
        let width = crate::cli::term::style::screen_columns().saturating_sub(1);
        for line in crate::cli::term::style::wrap_words(&text, width) {
            eprintln!("{line}");
        }
    };
    say(format!(
        "nop · {} · /help for commands and keys · Esc stops the agent, Ctrl-D leaves",
        ws.root.display()
    ));
    let mode = runtime.approver().mode();
    say(format!(
        "approval: {} · {} · Shift+Tab or /mode to change",
        mode.as_str(),
        mode.describe()
    ));
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
            helper.menu.set_custom(here.custom_commands().menu());
        }
        let prompt = crate::cli::editor::prompt(here.runtime.approver().mode());
        let initial = (std::mem::take(&mut typed), std::mem::take(&mut after));
        let line = match editor.readline_with_initial(&prompt, (&initial.0, &initial.1)) {
            Ok(line) => {
                interrupted = false;
                // Enter on a slash command the menu highlighted runs that command.
                match editor.helper() {
                    Some(helper) => helper.menu.sent(line),
                    None => line,
                }
            }
            Err(rustyline::error::ReadlineError::Interrupted)
                if switch.show_result(&mut typed, &mut after) =>
            {
                interrupted = false;
                here.renderer.show_last_result();
                continue;
            }
            Err(rustyline::error::ReadlineError::Interrupted) if switch.undo_asked() => {
                interrupted = false;
                if let Command::Leave = here.command(&rt, "/undo") {
                    break;
                }
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
        // Plan mode: the plan is shown for approval, one key; a yes switches the mode and goes
        // on, any other key keeps planning.
        if here.runtime.approver().mode() == nop::permissions::ApprovalMode::Plan
            && typed.is_empty()
            && carry_out_the_plan()
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
        let last = crate::cli::sessions::last_session(here.runtime.store());
        if last.as_deref() == Some(id.as_str()) {
            eprintln!("session {id} saved; continue with: nop run -c");
        } else {
            eprintln!("session {id} saved; continue with: nop run --session {id}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Asks, one key, whether to carry out the plan just shown.
fn carry_out_the_plan() -> bool {
    eprint!("carry out the plan? [y] yes (mode on-request) · other keys: keep planning ");
    let yes = matches!(crate::cli::keys::read_key(), Ok(Some('y' | 'Y')));
    eprintln!("{}", if yes { "y" } else { "no" });
    if !yes {
        eprintln!("still in plan mode: say what to change, or /mode on-request");
    }
    yes
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
    fn custom_commands(&self) -> crate::cli::commands::Custom {
        crate::cli::commands::load(&self.root, &self.command_dirs)
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
    crate::cli::slash::recent(store, 50)
        .into_iter()
        .map(|r| {
            let when = r
                .updated_at
                .with_timezone(&chrono::Local)
                .format("%b %d %H:%M");
            let title: String = r.title.chars().take(70).collect();
            let title = crate::cli::term::style::one_line(&title);
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
    let picked = crate::cli::picker::pick("resume which", &lines)?;
    Ok(picked.and_then(|i| recent.get(i)).map(|(id, _)| id.clone()))
}
