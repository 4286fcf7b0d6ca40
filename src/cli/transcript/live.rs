//! The transcript of a run on a terminal ([`Live`]), for a person: the answer as markdown as
//! its blocks complete, each tool call and its result cut to what matters, diffs of edits, the
//! plan as a checklist, notes of the run's course, and a status line (spinner, elapsed time,
//! context, the tail of a running command, subagents) while work is under way.

use std::io::Write;
use std::time::Instant;

use super::DIFF_LINES;
use crate::cli::term::notes::{brief_arguments, note};
use crate::cli::term::style::{Style, one_line, visible, wrap_words};
use crate::cli::term::{diff, markdown, output, plan};
use nop::protocol::events::{Event, RunStatus};

/// Spinner frames of the status line.
const SPINNER: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];

/// Lines of a result shown by default (`/verbose` shows all).
const RESULT_LINES: usize = 6;
/// How many of the advisors consulted `/status` lists (the latest).
const ADVISORS_KEPT: usize = 8;

/// The transcript on a terminal.
pub(super) struct Live {
    /// Colour on stdout (the answer) and on stderr (everything else).
    pub(super) out: Style,
    err: Style,
    /// Answer text not shown yet: the markdown block it is in has not ended.
    pending: String,
    /// A block of this answer is already shown (the next one is set off by a blank line).
    shown_block: bool,
    /// The rows this turn's answer takes at the bottom of the screen, nothing printed under
    /// them: what a retried request erases. `None` once something else was printed.
    answer_rows: Option<usize>,
    /// What is under way and since when; `None`: nothing (the status line is off).
    pub(super) status: Option<(String, Instant)>,
    /// The status line is on the screen (the last line of stderr).
    drawn: bool,
    frame: usize,
    /// Tokens: the last request's input (the context it used), and the run's totals.
    pub(super) context: u64,
    /// Whether `context` is nop's estimate (the server reported no usage): shown as `~N`.
    context_estimated: bool,
    run_in: u64,
    run_out: u64,
    started: Instant,
    /// The advisors consulted lately, off the screen: `/status` lists them.
    pub(super) advisors: std::collections::VecDeque<String>,
    /// Typed while the agent works, not queued yet.
    pub(super) input: String,
    /// What Enter just queued, for the `queued` event's line.
    pub(super) queued_text: Option<String>,
    /// Keys are read while the agent works (the interactive session): Esc interrupts.
    pub(super) keys: bool,
    /// An approval question waits for a key: the status line shows this instead of the work.
    pub(super) waiting: Option<String>,
    /// Changes whose diff an approval question showed: not shown again with the result.
    pub(super) previewed: Vec<nop::protocol::events::FileChange>,
    /// The last lines of the command under way, shown under the status line.
    tail: Vec<String>,
    /// The subagents running now, each with a status line of its own under the run's:
    /// `(session, agent, since)`.
    subagents: Vec<(String, String, Instant)>,
    /// Lines drawn under the status line (its tail).
    drawn_below: usize,
}

impl Live {
    pub(super) fn new() -> Live {
        Live {
            out: Style::detect(true),
            err: Style::detect(true),
            pending: String::new(),
            shown_block: false,
            answer_rows: None,
            status: None,
            drawn: false,
            frame: 0,
            context: 0,
            context_estimated: false,
            run_in: 0,
            run_out: 0,
            started: Instant::now(),
            advisors: std::collections::VecDeque::new(),
            queued_text: None,
            input: String::new(),
            keys: false,
            waiting: None,
            previewed: Vec::new(),
            tail: Vec::new(),
            subagents: Vec::new(),
            drawn_below: 0,
        }
    }

    pub(super) fn width() -> usize {
        crossterm::terminal::size()
            .map(|(w, _)| usize::from(w))
            .unwrap_or(80)
            .clamp(20, 160)
    }

    #[expect(clippy::too_many_lines, reason = "a debt: listed in AGENTS.md")]
    pub(super) fn event(&mut self, event: &Event, verbose: bool, interactive: bool) {
        let err = self.err;
        match event {
            Event::Text { delta } => {
                self.pending.push_str(delta);
                let done = markdown::complete_prefix(&self.pending);
                if done > 0 {
                    let block: String = self.pending.drain(..done).collect();
                    self.show_text(&block);
                }
                self.set_status("writing");
                return;
            }
            Event::Usage {
                input_tokens,
                estimated,
                run_input_tokens,
                run_output_tokens,
                ..
            } => {
                self.context = *input_tokens;
                self.context_estimated = *estimated;
                self.run_in = *run_input_tokens;
                self.run_out = *run_output_tokens;
                return;
            }
            // Typed while the answer streams: the note goes above the part of the answer not
            // shown yet, which is not cut mid-word to make room for it.
            Event::Queued { .. } if !self.pending.is_empty() => {
                self.answer_rows = None;
                self.clear_status();
                if let Some(line) = self.queued_line(event) {
                    eprintln!("{}", err.dim(&line));
                }
                self.set_status("writing");
                return;
            }
            // The request failed and goes again: what it streamed is void, and the answer comes
            // whole with the retry. The part shown is erased where it is still on the screen.
            Event::Retrying {
                attempt,
                delay_ms,
                error,
            } => {
                self.pending.clear();
                self.clear_status();
                self.erase_answer();
                let line = format!(
                    "  ↻ attempt {attempt} failed ({}); retrying in {:.1} s",
                    visible(error),
                    *delay_ms as f64 / 1000.0
                );
                wrapped(&line, |l| err.yellow(l));
                self.shown_block = false;
                self.set_status("thinking");
                return;
            }
            // A command's last lines, under the status line while it runs.
            Event::ToolOutput { tail } => {
                self.tail = tail.clone();
                self.draw_status();
                return;
            }
            _ => {}
        }
        self.flush_text();
        self.clear_status();
        self.tail.clear();
        self.answer_rows = None;
        match event {
            Event::SessionStarted { .. } => {
                self.started = Instant::now();
                if let Some((line, _)) = note(event) {
                    eprintln!("{}", err.dim(&line));
                }
            }
            Event::TurnStarted { .. } => {
                self.shown_block = false;
                self.answer_rows = Some(0);
                self.set_status("thinking");
            }
            Event::Retrying { .. } => {}
            // What the model wrote stays shown; the call lines follow.
            Event::TextWasCalls { .. } => {
                eprintln!(
                    "{}",
                    err.dim("  (tool calls written as text, run as calls)")
                );
            }
            // The question is shown once, when the run waits for its answer.
            Event::ToolCall { name, .. } | Event::ToolResult { name, .. } if name == "ask-user" => {
            }
            Event::ToolCall {
                name, arguments, ..
            } => {
                let brief = brief_arguments(name, arguments);
                let name = one_line(name);
                eprintln!("{} {} {brief}", err.cyan("⏺"), err.bold(&name));
                let doing = match name.as_str() {
                    "shell" => format!("running {}", short(&brief, 40)),
                    _ => format!("{name} {}", short(&brief, 40)),
                };
                self.set_status(&doing);
            }
            Event::ToolResult {
                name,
                ok,
                output: text,
                duration_ms,
                change,
                outcome,
                ..
            } => {
                // The person's own "no" (or plan mode holding a change) is their choice, not
                // a failure.
                if let Some(why) = text.strip_prefix(nop::tools::orchestrator::DECLINED) {
                    let what = if why.starts_with("plan mode") {
                        "not run: plan mode changes nothing"
                    } else {
                        "you declined"
                    };
                    eprintln!("  ⎿ {}", err.dim(what));
                    self.set_status("thinking");
                    return;
                }
                // Stopped by the user (Esc, Ctrl-C): what it printed until then, not an error.
                let stopped = (!*ok)
                    .then(|| text.strip_prefix("error (Aborted): "))
                    .flatten()
                    .map(|rest| {
                        let rest = rest.trim_end();
                        match rest.rsplit_once('\n') {
                            Some((before, last)) if last.starts_with("[details: ") => before,
                            _ => rest,
                        }
                        .replacen("aborted by user", "stopped by you", 1)
                    });
                let (ok, text) = match &stopped {
                    Some(rest) => (&true, rest),
                    None => (ok, text),
                };
                let lines = if verbose { usize::MAX } else { RESULT_LINES };
                // A new plan is shown as its checklist (`plan_updated`), not as its echo.
                let summary = if *ok && name == "update-plan" {
                    Vec::new()
                } else {
                    output::summarize(name, *ok, text, outcome.as_ref(), lines)
                };
                let mut summary = summary;
                // How long a slow tool took, on its own line no more; a write's time is the
                // time the approval question waited, which says nothing about the write.
                if *duration_ms >= 1000
                    && !matches!(name.as_str(), "shell" | "write-file" | "edit-file")
                    && let Some(first) = summary.first_mut()
                {
                    first.push_str(&format!(" ({:.1} s)", *duration_ms as f64 / 1000.0));
                }
                let failed = !ok || summary.first().is_some_and(|l| l.starts_with("failed"));
                // A hint of the sandbox's, wrapped to the screen, never cut.
                let width = Live::width().saturating_sub(5);
                // A hint of the sandbox's and a failure's message, wrapped between words; a
                // command's output lines as they are (cut to the width by `summarize`).
                let summary: Vec<String> = summary
                    .into_iter()
                    .enumerate()
                    .flat_map(|(i, l)| {
                        if crate::cli::term::style::is_hint(&l) || (failed && i == 0) {
                            wrap_words(&l, width)
                        } else {
                            vec![l]
                        }
                    })
                    .collect();
                for (i, line) in summary.iter().enumerate() {
                    let mark = if i == 0 { "  ⎿ " } else { "    " };
                    let line = if i == 0 && failed {
                        err.red(line)
                    } else if i == 0 {
                        line.clone()
                    } else {
                        err.dim(line)
                    };
                    eprintln!("{mark}{line}");
                }
                let previewed = change
                    .as_ref()
                    .and_then(|c| self.previewed.iter().position(|p| p == c));
                if let Some(i) = previewed {
                    self.previewed.remove(i);
                } else if let Some(change) = change {
                    let before = change.before.as_deref().unwrap_or_default();
                    let lines = diff::unified(&change.path, before, &change.after, 3, err);
                    let shown = if verbose { lines.len() } else { DIFF_LINES };
                    for line in lines.iter().take(shown) {
                        eprintln!("    {line}");
                    }
                    if lines.len() > shown {
                        eprintln!(
                            "    {}",
                            err.dim(&format!(
                                "… {} more lines (/verbose shows all)",
                                lines.len() - shown
                            ))
                        );
                    }
                }
                self.set_status("thinking");
            }
            Event::PlanUpdated { plan: p } => {
                eprintln!("  {}", err.bold("Plan"));
                for line in plan::checklist(p, err) {
                    eprintln!("    {line}");
                }
                self.set_status("thinking");
            }
            Event::ApprovalRequested { .. }
            | Event::Idle { .. }
            | Event::Usage { .. }
            | Event::ToolOutput { .. } => {}
            Event::Text { .. } => {}
            Event::AdvisorFallback { advisor, message } => {
                if verbose {
                    eprintln!("{}", err.dim(&format!("  ↳ {}", visible(message))));
                } else {
                    self.advisors
                        .push_back(format!("{advisor}: no usable answer, safe default"));
                    if self.advisors.len() > ADVISORS_KEPT {
                        self.advisors.pop_front();
                    }
                }
                self.set_status("thinking");
            }
            Event::Warning { message } | Event::Untrusted { message, .. } => {
                wrapped(&format!("warning: {}", visible(message)), |l| err.yellow(l))
            }
            Event::Error { message } => {
                wrapped(&format!("error: {}", visible(message)), |l| err.red(l))
            }
            Event::Refused { reason, .. } => {
                wrapped(&format!("refused: {}", visible(reason)), |l| err.red(l))
            }
            Event::SubagentFinished {
                agent,
                status,
                duration_ms,
                advisor: true,
                ..
            } if !verbose => {
                self.advisors.push_back(format!(
                    "{agent} {status} ({:.1} s)",
                    *duration_ms as f64 / 1000.0
                ));
                if self.advisors.len() > ADVISORS_KEPT {
                    self.advisors.pop_front();
                }
                self.set_status("thinking");
            }
            Event::SubagentStarted {
                agent,
                advisor: true,
                ..
            } if !verbose => self.set_status(&format!("{agent} working")),
            Event::SubagentStarted { .. } | Event::SubagentFinished { .. } => {
                match event {
                    Event::SubagentStarted {
                        session_id, agent, ..
                    } => self
                        .subagents
                        .push((session_id.clone(), agent.clone(), Instant::now())),
                    Event::SubagentFinished { session_id, .. } => {
                        self.subagents.retain(|(id, _, _)| id != session_id)
                    }
                    _ => {}
                }
                if let Some((line, doing)) = note(event) {
                    eprintln!("{line}");
                    if let Some(doing) = doing {
                        self.set_status(&doing);
                    }
                }
            }
            Event::Queued { .. } => {
                if let Some(line) = self.queued_line(event) {
                    eprintln!("{line}");
                }
                self.set_status("working");
            }
            Event::GoalChecked { .. }
            | Event::Paused { .. }
            | Event::Resumed { .. }
            | Event::MessagesInjected { .. }
            | Event::Unqueued { .. }
            | Event::Compacted { .. } => {
                if let Some((line, doing)) = note(event) {
                    eprintln!("{line}");
                    if let Some(doing) = doing {
                        self.set_status(&doing);
                    }
                }
            }
            Event::Result(outcome) => {
                // A person at the prompt goes on by typing: no command to continue with, but
                // the budget, which only a new run can raise.
                let then = crate::cli::output::continue_with(outcome)
                    .filter(|_| !interactive || outcome.status == RunStatus::BudgetExceeded)
                    .map(|c| format!("; continue with: {c}"))
                    .unwrap_or_default();
                let message = visible(&outcome.final_message);
                match outcome.status {
                    RunStatus::Completed => {}
                    RunStatus::WaitingInput => {
                        let question = outcome.question.as_deref().unwrap_or_default();
                        println!("{} {}", self.out.bold("?"), visible(question));
                        if !interactive {
                            eprintln!("(waiting for your answer{then})");
                        }
                    }
                    RunStatus::Error => {
                        eprintln!("{}", err.red(&format!("error: {message}{then}")))
                    }
                    RunStatus::BudgetExceeded => {
                        eprintln!("{}", err.yellow(&format!("{message}{then}")))
                    }
                    RunStatus::Cancelled if interactive => {
                        eprintln!("{}", err.yellow("interrupted"))
                    }
                    RunStatus::Cancelled => eprintln!("cancelled{then}"),
                    RunStatus::GoalNotMet => {
                        eprintln!("{}", err.yellow(&format!("goal not met: {message}{then}")))
                    }
                }
                let used = if self.run_in + self.run_out > 0 {
                    format!(
                        "{} in{} · {} out · {} · context {} · ",
                        tokens(self.run_in),
                        cached_share(&outcome.usage.own),
                        tokens(self.run_out),
                        cost(outcome.total_cost_usd),
                        self.context_text()
                    )
                } else {
                    String::new()
                };
                eprintln!(
                    "{}",
                    err.dim(&format!(
                        "  {used}{} turn{} · {:.1} s",
                        outcome.turns,
                        if outcome.turns == 1 { "" } else { "s" },
                        self.started.elapsed().as_secs_f64()
                    ))
                );
            }
            Event::BatchWaiting { .. } | Event::BatchAnswered { .. } | Event::Reply { .. } => {}
        }
    }

    /// Shows a complete markdown block of the answer.
    fn show_text(&mut self, block: &str) {
        let lines = markdown::render(block, Live::width(), self.out);
        if lines.is_empty() {
            return;
        }
        self.clear_status();
        let mut out = std::io::stdout().lock();
        if self.shown_block {
            let _ = writeln!(out);
        }
        let rows = lines.len() + usize::from(self.shown_block);
        for line in lines {
            let _ = writeln!(out, "{line}");
        }
        let _ = out.flush();
        self.shown_block = true;
        if let Some(shown) = &mut self.answer_rows {
            *shown += rows;
        }
    }

    /// The line a `queued` event is shown as: with the text typed for it, when this terminal
    /// queued it.
    fn queued_line(&mut self, event: &Event) -> Option<String> {
        let (line, _) = note(event)?;
        match (event, self.queued_text.take()) {
            (
                Event::Queued {
                    position,
                    stop: false,
                    ..
                },
                Some(text),
            ) => Some(format!(
                "  ✉ queued (position {position}): {}",
                short(&one_line(&text), Live::width().saturating_sub(30))
            )),
            _ => Some(line),
        }
    }

    /// Takes the part of the answer shown by a request that failed off the screen (the lines
    /// are the markdown renderer's, each one row wide); says so where it has scrolled away.
    fn erase_answer(&mut self) {
        let rows = self.answer_rows.take().unwrap_or(0);
        if rows == 0 && !self.shown_block {
            return;
        }
        let height = crossterm::terminal::size().map_or(0, |(_, h)| usize::from(h));
        if rows > 0 && rows < height {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\x1b[{rows}A\x1b[J");
            let _ = err.flush();
        } else {
            eprintln!(
                "{}",
                self.err
                    .dim("  ↻ the answer above was cut off: it comes again in full")
            );
        }
        self.answer_rows = Some(0);
    }

    /// Shows what is left of the answer (its turn ended).
    pub(super) fn flush_text(&mut self) {
        if !self.pending.trim().is_empty() {
            let rest = std::mem::take(&mut self.pending);
            self.show_text(&rest);
        }
        self.pending.clear();
    }

    /// The context's size, `~` before an estimate.
    fn context_text(&self) -> String {
        let mark = if self.context_estimated { "~" } else { "" };
        format!("{mark}{}", tokens(self.context))
    }

    fn set_status(&mut self, doing: &str) {
        match &mut self.status {
            Some((what, _)) if what == doing => {}
            Some((what, _)) if doing == "writing" => *what = doing.to_string(),
            _ => self.status = Some((doing.to_string(), Instant::now())),
        }
        self.draw_status();
    }

    pub(super) fn draw_status(&mut self) {
        if let Some(line) = &self.waiting {
            let line = crate::cli::term::style::truncate(line, Live::width().saturating_sub(1));
            eprint!("\r\x1b[2K{line}");
            let _ = std::io::stderr().flush();
            self.drawn = true;
            return;
        }
        let Some((what, since)) = &self.status else {
            return;
        };
        self.frame = (self.frame + 1) % SPINNER.len();
        if !self.input.is_empty() {
            let line = format!(
                "✎ {}  (enter: queue it for the agent)",
                one_line(&self.input)
            );
            let line = crate::cli::term::style::truncate(&line, Live::width().saturating_sub(1));
            self.clear_status();
            eprint!("\r\x1b[2K{line}");
            let _ = std::io::stderr().flush();
            self.drawn = true;
            return;
        }
        // What was cut already ends with its own `…`.
        let what = one_line(what);
        let dots = if what.ends_with('…') { "" } else { "…" };
        let mut line = format!(
            "{} {what}{dots} {}s",
            SPINNER[self.frame],
            since.elapsed().as_secs()
        );
        if self.run_in > 0 {
            line.push_str(&format!(" · context {}", self.context_text()));
        }
        line.push_str(if self.keys {
            " · esc to interrupt"
        } else {
            " · ctrl-c to interrupt"
        });
        let width = Live::width().saturating_sub(1);
        let line = crate::cli::term::style::truncate(&line, width);
        let mut below = String::new();
        // Subagents side by side: one line each while more than one runs.
        let side_by_side = if self.subagents.len() > 1 {
            self.subagents.len()
        } else {
            0
        };
        for (id, agent, since) in &self.subagents[..side_by_side] {
            let l = format!(
                "  ↳ {} {} working… {}s",
                one_line(agent),
                short_id(id),
                since.elapsed().as_secs()
            );
            let l = crate::cli::term::style::truncate(&l, width);
            below.push_str(&format!("\n\x1b[2K{}", self.err.dim(&l)));
        }
        for l in &self.tail {
            let l = crate::cli::term::style::truncate(&format!("  │ {}", one_line(l)), width);
            below.push_str(&format!("\n\x1b[2K{}", self.err.dim(&l)));
        }
        self.clear_status();
        eprint!("\r\x1b[2K{}{below}", self.err.dim(&line));
        let _ = std::io::stderr().flush();
        self.drawn = true;
        self.drawn_below = self.tail.len() + side_by_side;
    }

    /// Takes the status line and the tail under it away; the cursor is left where the status
    /// line was.
    pub(super) fn clear_status(&mut self) {
        if self.drawn {
            eprint!("\r\x1b[2K");
            for _ in 0..self.drawn_below {
                eprint!("\x1b[1A\x1b[2K");
            }
            let _ = std::io::stderr().flush();
            self.drawn = false;
            self.drawn_below = 0;
        }
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.clear_status();
    }
}

/// ` (92% cached)`: the share of the input the prompt cache served, when it served any.
fn cached_share(used: &nop::protocol::events::RunSpent) -> String {
    if used.cache_read_tokens == 0 || used.input_tokens == 0 {
        return String::new();
    }
    format!(
        " ({}% cached)",
        used.cache_read_tokens * 100 / used.input_tokens
    )
}

/// A run's cost: `$0.0123`, or `cost unknown` (no price for the model: see `pricing`).
fn cost(usd: Option<f64>) -> String {
    match usd {
        Some(_) => nop::protocol::usage::cost_text(usd),
        None => "cost unknown".to_string(),
    }
}

/// A token count the way people read it: 950, 12.3k, 1.2M.
fn tokens(n: u64) -> String {
    match n {
        0..1_000 => n.to_string(),
        1_000..1_000_000 => format!("{:.1}k", n as f64 / 1_000.0),
        _ => format!("{:.1}M", n as f64 / 1_000_000.0),
    }
}

/// `text` cut to `max` characters.
fn short(text: &str, max: usize) -> String {
    if text.chars().count() > max {
        format!("{}…", text.chars().take(max).collect::<String>())
    } else {
        text.to_string()
    }
}

/// `text` on standard error, broken between words at the screen's width, each row painted.
fn wrapped(text: &str, paint: impl Fn(&str) -> String) {
    for line in wrap_words(text, Live::width()) {
        eprintln!("{}", paint(&line));
    }
}

/// The last part of a session id, enough to tell sessions apart on a status line.
fn short_id(id: &str) -> &str {
    let start = id.len().saturating_sub(4);
    id.get(start..).unwrap_or(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_counts_read_as_people_say_them() {
        assert_eq!(tokens(950), "950");
        assert_eq!(tokens(12_345), "12.3k");
        assert_eq!(tokens(1_200_000), "1.2M");
    }
}
