//! Following a session handle's events to the renderer until the run ends or the handle waits
//! for input: approval questions asked on the terminal (a line for an answer, or a key each in
//! the interactive session, with "no, do this instead"), and, while the agent works, the keys
//! typed: Esc interrupts, Enter queues the line for the agent, Ctrl-O shows the last result.

use super::keys::{Key, Keys};
use super::transcript::Renderer;

use nop::agent::{Op, SessionHandle};
use nop::permissions::ApprovalAnswer;
use nop::protocol::events::Event;

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

/// Shows a session's events until it ends or, an open handle, waits for input (then the
/// session it has, if any). Approval questions are asked on the terminal.
/// In key mode (`keys`), what is typed and not yet queued is kept in `typed`: the next prompt
/// starts with it.
pub(super) async fn show(
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
            // Esc took back what was queued and not read: it starts the next prompt.
            Event::Unqueued { text } => {
                *typed = if typed.is_empty() {
                    text.clone()
                } else {
                    format!("{text} {typed}")
                };
                renderer.event(&event);
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
                renderer.queueing(text.trim());
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
