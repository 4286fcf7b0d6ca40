//! `--output-format text` where stdout is not a terminal: the answer as it streams on stdout,
//! one line per tool call and result, retries, warnings and notes on stderr. (On a terminal,
//! text is the transcript of `transcript.rs`.)

use std::io::Write;

use nop::protocol::events::{Event, RunStatus};

use crate::cli::term::style::{one_line, visible};
use crate::cli::transcript::{brief_arguments, note};

/// Lines of a command's output shown under it.
const SHOWN_LINES: usize = 8;

/// The plain text renderer.
pub struct Text {
    /// Whether stdout is at the start of a line.
    line_start: bool,
}

impl Text {
    pub fn new() -> Text {
        Text { line_start: true }
    }

    pub fn event(&mut self, event: &Event) {
        let mut out = std::io::stdout().lock();
        match event {
            Event::SessionStarted { .. } => {
                if let Some((line, _)) = note(event) {
                    eprintln!("{line}");
                }
            }
            Event::TurnStarted { .. } | Event::ToolOutput { .. } => {}
            Event::Text { delta } => {
                let _ = out.write_all(visible(delta).as_bytes());
                let _ = out.flush();
                self.line_start = delta.ends_with('\n');
            }
            Event::Retrying {
                attempt,
                delay_ms,
                error,
            } => {
                self.end_line(&mut out);
                eprintln!(
                    "  ↻ attempt {attempt} failed ({}); retrying in {:.1} s",
                    visible(error),
                    *delay_ms as f64 / 1000.0
                );
            }
            Event::ToolCall {
                name, arguments, ..
            } => {
                self.end_line(&mut out);
                eprintln!("⏺ {} {}", one_line(name), brief_arguments(name, arguments));
            }
            Event::ToolResult {
                ok,
                output,
                duration_ms,
                name,
                outcome,
                ..
            } => {
                let first = output.lines().next().unwrap_or_default();
                let first: String = first.chars().take(160).collect();
                let first = visible(&first);
                let mark = if *ok { "⎿" } else { "⎿ ✗" };
                // The shell's own first line already says how long it ran.
                if name == "shell" && *ok {
                    eprintln!("  {mark} {first}");
                    // What a CI log needs of a command, as `codex exec` shows it: the end of its
                    // output, or where it failed (the header line is the one above).
                    let shown = crate::cli::term::output::summarize(
                        name,
                        *ok,
                        output,
                        outcome.as_ref(),
                        SHOWN_LINES,
                    );
                    for line in shown.iter().skip(1) {
                        eprintln!("    {line}");
                    }
                } else {
                    eprintln!("  {mark} {first} ({:.1} s)", *duration_ms as f64 / 1000.0);
                }
            }
            // Answered by whoever drives the handle before the renderer sees anything else.
            Event::ApprovalRequested { .. } => {}
            Event::Warning { message } => {
                self.end_line(&mut out);
                eprintln!("warning: {}", visible(message));
            }
            Event::Refused { reason, .. } => refused(reason),
            Event::Queued { .. }
            | Event::SubagentStarted { .. }
            | Event::SubagentFinished { .. }
            | Event::Paused { .. }
            | Event::Resumed { .. }
            | Event::MessagesInjected { .. }
            | Event::Compacted { .. } => {
                self.end_line(&mut out);
                if let Some((line, _)) = note(event) {
                    eprintln!("{line}");
                }
            }
            Event::Error { message } => {
                self.end_line(&mut out);
                eprintln!("error: {}", visible(message));
            }
            // Shown by whoever drives an open handle: it is the prompt's turn.
            Event::Idle { .. } => {}
            // Shown by the terminal renderer (issue 16, in progress).
            Event::Usage { .. } | Event::PlanUpdated { .. } => {}
            // A chat's events (`nop chat` renders them); a run has none.
            Event::BatchWaiting { .. } | Event::BatchAnswered { .. } | Event::Reply { .. } => {}
            Event::Result(outcome) => {
                self.end_line(&mut out);
                let id = &outcome.session_id;
                match outcome.status {
                    RunStatus::Completed => {}
                    RunStatus::WaitingInput => {
                        let question = outcome.question.as_deref().unwrap_or_default();
                        let _ = writeln!(out, "{}", visible(question));
                        eprintln!("(waiting for your answer: nop run --session {id} \"…\")");
                    }
                    RunStatus::Error => eprintln!("error: {}", visible(&outcome.final_message)),
                    RunStatus::BudgetExceeded => eprintln!(
                        "{}; continue with: nop run --session {id} --max-budget-usd …",
                        visible(&outcome.final_message)
                    ),
                    RunStatus::Cancelled => {
                        eprintln!("cancelled; continue with: nop run --session {id} \"…\"")
                    }
                }
            }
        }
    }

    fn end_line(&mut self, out: &mut impl Write) {
        if !self.line_start {
            let _ = writeln!(out);
            let _ = out.flush();
            self.line_start = true;
        }
    }

    /// Ends the answer's last line.
    pub fn finish(&mut self) {
        let mut out = std::io::stdout().lock();
        self.end_line(&mut out);
    }
}

/// A chat batch's replies, one after the other.
pub fn batch_answered(event: &Event) {
    if let Event::BatchAnswered { replies, .. } = event {
        for r in replies {
            println!("{}", visible(&r.content));
        }
    }
}

/// A run refused because another session has priority.
pub fn refused(reason: &str) {
    eprintln!("refused: {}", visible(reason));
}

/// A message queued for the process running session `id`, or a stop requested of it.
pub fn queued(id: &str, position: usize, stop: bool) {
    if stop {
        println!("stop requested: session {id} stops at its next checkpoint")
    } else {
        println!("queued (position {position})")
    }
}
