//! `--output-format text` where stdout is not a terminal: the answer on stdout, each model
//! reply once it is whole (an attempt that fails mid-stream and is retried never reaches the
//! output); one line per tool call and result, retries, warnings and notes on stderr. (On a
//! terminal, text is the transcript of `transcript.rs`.)

use std::io::Write;

use nop::protocol::events::{Event, RunStatus};

use crate::cli::term::notes::{brief_arguments, note};
use crate::cli::term::style::{one_line, visible};

/// Lines of a command's output shown under it.
const SHOWN_LINES: usize = 8;

/// The plain text renderer.
pub struct Text {
    /// Whether stdout is at the start of a line.
    line_start: bool,
    /// The text of the model request streaming now, written when the request is whole.
    pending: String,
}

impl Text {
    pub fn new() -> Text {
        Text {
            line_start: true,
            pending: String::new(),
        }
    }

    /// Writes the reply the model finished.
    fn flush_reply(&mut self, out: &mut impl Write) {
        if self.pending.is_empty() {
            return;
        }
        let _ = out.write_all(visible(&self.pending).as_bytes());
        let _ = out.flush();
        self.line_start = self.pending.ends_with('\n');
        self.pending.clear();
    }

    #[expect(clippy::too_many_lines, reason = "a debt: listed in AGENTS.md")]
    pub fn event(&mut self, event: &Event) {
        let mut out = std::io::stdout().lock();
        match event {
            Event::SessionStarted { .. } => {
                if let Some((line, _)) = note(event) {
                    eprintln!("{line}");
                }
            }
            Event::TurnStarted { .. } | Event::ToolOutput { .. } => {}
            Event::Text { delta } => self.pending.push_str(delta),
            // Calls written as text are not the answer: the call lines follow.
            Event::TextWasCalls { .. } => self.pending.clear(),
            Event::Retrying {
                attempt,
                delay_ms,
                error,
            } => {
                // What the failed attempt streamed is void: the retry answers again.
                self.pending.clear();
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
                self.flush_reply(&mut out);
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
            Event::Warning { message } | Event::Untrusted { message, .. } => {
                self.end_line(&mut out);
                eprintln!("warning: {}", visible(message));
            }
            Event::Refused { reason, .. } => refused(reason),
            // An advisor at work is nop's machinery, not the run's course.
            event if crate::cli::term::notes::internal(event) => {}
            Event::AdvisorFallback { .. } => {}
            Event::Queued { .. }
            | Event::SubagentStarted { .. }
            | Event::SubagentFinished { .. }
            | Event::Paused { .. }
            | Event::Resumed { .. }
            | Event::MessagesInjected { .. }
            | Event::Unqueued { .. }
            | Event::GoalChecked { .. }
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
            // The request is whole.
            Event::Usage { .. } => self.flush_reply(&mut out),
            Event::PlanUpdated { .. } => {}
            // A chat's events (`nop chat` renders them); a run has none.
            Event::BatchWaiting { .. } | Event::BatchAnswered { .. } | Event::Reply { .. } => {}
            Event::Result(outcome) => {
                // A reply is written when its request is whole; what is left is an attempt
                // that failed or was cut short.
                self.pending.clear();
                self.end_line(&mut out);
                let then = super::continue_with(outcome)
                    .map(|c| format!("; continue with: {c}"))
                    .unwrap_or_default();
                let message = visible(&outcome.final_message);
                match outcome.status {
                    RunStatus::Completed => {}
                    RunStatus::WaitingInput => {
                        let question = outcome.question.as_deref().unwrap_or_default();
                        let _ = writeln!(out, "{}", visible(question));
                        eprintln!("(waiting for your answer{then})");
                    }
                    RunStatus::Error => eprintln!("error: {message}{then}"),
                    RunStatus::BudgetExceeded => eprintln!("{message}{then}"),
                    RunStatus::Cancelled => eprintln!("cancelled{then}"),
                    RunStatus::GoalNotMet => eprintln!("goal not met: {message}{then}"),
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
