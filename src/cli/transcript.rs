//! The renderer of a session's events ([`Renderer`]): it hands each event to the output format's
//! renderer (`output/`: stream-json, json, plain text), or, for text on a terminal, to the
//! transcript for a person ([`Live`]): the answer as markdown, each result cut to what matters,
//! diffs of edits, the plan as a checklist, and a status line while work is under way.

use std::io::{IsTerminal, Write};
use std::time::Instant;

use super::OutputFormat;
use super::output::json::Json;
use super::output::stream_json::StreamJson;
use super::output::text::Text;
use super::term::notes::{brief_arguments, note};
use super::term::style::{Style, one_line, visible};
use super::term::{diff, markdown, output, plan};
use nop::protocol::events::{Event, RunStatus};

/// Renders events as they come, in the output format's renderer.
pub struct Renderer {
    format: Format,
    /// Whole results and diffs rather than their ends (`/verbose`).
    verbose: bool,
    /// A person drives the session here (the interactive session): no hints about how to go on
    /// with `nop run`.
    interactive: bool,
    /// The last tool result's tool and text, for Ctrl-O.
    last_result: Option<(String, String)>,
}

/// The renderer of each output format; text on a terminal is the transcript ([`Live`]).
enum Format {
    StreamJson(StreamJson),
    Json(Json),
    Text(Text),
    Live(Box<Live>),
}

impl Renderer {
    pub fn new(format: OutputFormat) -> Renderer {
        let terminal = std::io::stdout().is_terminal() && std::io::stderr().is_terminal();
        let format = match format {
            OutputFormat::StreamJson => Format::StreamJson(StreamJson),
            OutputFormat::Json => Format::Json(Json),
            OutputFormat::Text if terminal => Format::Live(Box::new(Live::new())),
            OutputFormat::Text | OutputFormat::Plain => Format::Text(Text::new()),
        };
        Renderer {
            format,
            verbose: false,
            interactive: false,
            last_result: None,
        }
    }

    /// The transcript, where text goes to a terminal.
    fn live(&mut self) -> Option<&mut Live> {
        match &mut self.format {
            Format::Live(live) => Some(live),
            _ => None,
        }
    }

    fn live_ref(&self) -> Option<&Live> {
        match &self.format {
            Format::Live(live) => Some(live),
            _ => None,
        }
    }

    /// For the interactive session: what to do next is the prompt's business.
    pub fn interactive(mut self) -> Renderer {
        self.interactive = true;
        if let Some(live) = self.live() {
            live.keys = true;
        }
        self
    }

    /// Flips whole results on or off; says which it is now.
    pub fn toggle_verbose(&mut self) -> bool {
        self.verbose = !self.verbose;
        self.verbose
    }

    /// The last tool result as the model read it (Ctrl-O), whole up to what a `tool_result`
    /// event carries (8,000 characters; a longer one is its head and tail).
    pub fn show_last_result(&mut self) {
        let text = match &self.last_result {
            Some((name, output)) => {
                let output = super::term::style::sanitize(output);
                format!("── last result ({name}) ──\n{}\n──", output.trim_end())
            }
            None => "no tool result yet".to_string(),
        };
        match self.live() {
            Some(live) => {
                live.clear_status();
                eprintln!("{text}");
                live.draw_status();
            }
            None => eprintln!("{text}"),
        }
    }

    /// Whether the status line wants [`Renderer::tick`] calls (work is under way).
    pub fn wants_tick(&self) -> bool {
        self.live_ref()
            .is_some_and(|l| l.status.is_some() || l.waiting.is_some())
    }

    /// Redraws the status line (spinner, elapsed time).
    pub fn tick(&mut self) {
        if let Some(live) = self.live() {
            live.draw_status();
        }
    }

    /// The context the last model request used, once one was made here.
    pub fn context(&self) -> Option<u64> {
        self.live_ref().map(|l| l.context).filter(|c| *c > 0)
    }

    /// The last `exchanges` prompts of a resumed session and what the agent did and said.
    pub fn replay(&mut self, messages: &[nop::protocol::Message], exchanges: usize) {
        use nop::protocol::Role;
        let starts: Vec<usize> = messages
            .iter()
            .enumerate()
            .filter(|(_, m)| m.role == Role::User && !m.content.trim().is_empty())
            .map(|(i, _)| i)
            .collect();
        let Some(&from) = starts.get(starts.len().saturating_sub(exchanges.max(1))) else {
            return;
        };
        let style = self.live_ref().map_or(Style::detect(false), |l| l.out);
        let width = if self.live_ref().is_some() {
            Live::width()
        } else {
            100
        };
        if from > 0 {
            eprintln!("{}", style.dim("  … earlier messages in the session file"));
        }
        for m in &messages[from..] {
            match m.role {
                Role::User => {
                    // What was typed; the files attached with @ are not shown again.
                    let (typed, attached) = nop::agent::mentions::as_typed(&m.content);
                    println!("{} {}", style.bold("›"), visible(typed.trim()));
                    if attached {
                        println!("{}", style.dim("  (files attached with @)"));
                    }
                }
                Role::Assistant => {
                    if !m.content.trim().is_empty() {
                        for line in markdown::render(&m.content, width, style) {
                            println!("{line}");
                        }
                    }
                    for call in &m.tool_calls {
                        let brief = brief_arguments(&call.name, &call.arguments);
                        let name = one_line(&call.name);
                        println!("{} {} {brief}", style.cyan("⏺"), style.bold(&name));
                    }
                }
                _ => {}
            }
        }
        eprintln!("{}", style.dim("  ─── resumed ───"));
    }

    /// What is typed while the agent works, shown on the status line until Enter queues it.
    pub fn set_input(&mut self, typed: &str) {
        if let Some(live) = self.live() {
            live.input = typed.to_string();
            live.draw_status();
        }
    }

    /// Takes the status line away before something else reads the terminal (an approval).
    pub fn pause(&mut self) {
        if let Some(live) = self.live() {
            live.flush_text();
            live.clear_status();
        }
    }

    /// An approval question is about to be shown: its diff, if any, is not shown again with the
    /// call's result.
    pub fn asking(&mut self, event: &Event) {
        self.pause();
        if let (Some(live), Event::ApprovalRequested { preview, .. }) = (self.live(), event)
            && let Some(change) = preview
        {
            live.previewed.push(change.clone());
        }
    }

    /// While a question waits for a key, the status line says so (`line`: what it shows, such
    /// as the text typed for "tell it instead"); `None` when there is no question.
    pub fn waiting(&mut self, line: Option<&str>) {
        if let Some(live) = self.live() {
            live.waiting = line.map(str::to_string);
            if line.is_some() {
                live.draw_status();
            }
        }
    }

    /// The question was answered: the status line goes, the answer `said` takes its place (no
    /// spinner line is left behind), and the status line starts again from now.
    pub fn answered(&mut self, said: &str) {
        if let Some(live) = self.live() {
            live.waiting = None;
            live.clear_status();
            if let Some((_, since)) = &mut live.status {
                *since = Instant::now();
            }
        }
        if !said.is_empty() {
            eprintln!("{said}");
        }
    }

    pub fn event(&mut self, event: &Event) {
        if let Event::ToolResult { name, output, .. } = event {
            self.last_result = Some((name.clone(), output.clone()));
        }
        match &mut self.format {
            Format::StreamJson(r) => r.event(event),
            Format::Json(r) => r.event(event),
            Format::Text(r) => r.event(event),
            Format::Live(live) => live.event(event, self.verbose, self.interactive),
        }
    }

    pub fn finish(&mut self) {
        match &mut self.format {
            Format::Live(live) => {
                live.flush_text();
                live.clear_status();
                live.input.clear();
            }
            Format::Text(r) => r.finish(),
            Format::StreamJson(_) | Format::Json(_) => {}
        }
    }
}

/// An approval question for the terminal: what the call would do, why it is asked, the diff of
/// a write, and the answers (`keys`: one key each; otherwise a line).
pub fn approval_question(event: &Event, keys: bool) -> String {
    let Event::ApprovalRequested {
        tool,
        detail,
        reason,
        scope,
        preview,
        ..
    } = event
    else {
        return String::new();
    };
    let style = Style::detect(std::io::stderr().is_terminal());
    // Whole, on one line each: what is approved must be what is shown.
    let mut out = format!(
        "\n{} {} wants to: {}\n  {}\n",
        style.bold("?"),
        one_line(tool),
        one_line(detail),
        one_line(reason)
    );
    if let Some(change) = preview {
        let before = change.before.as_deref().unwrap_or_default();
        let lines = diff::unified(&change.path, before, &change.after, 3, style);
        for line in lines.iter().take(DIFF_LINES) {
            out.push_str(&format!("    {line}\n"));
        }
        if lines.len() > DIFF_LINES {
            let more = format!("… {} more lines", lines.len() - DIFF_LINES);
            out.push_str(&format!("    {}\n", style.dim(&more)));
        }
    }
    out.push_str(&approval_answers(scope, keys));
    out
}

/// The answers to an approval question, with what "always" covers.
pub fn approval_answers(scope: &str, keys: bool) -> String {
    let scope = one_line(scope);
    if keys {
        format!(
            "  allow? [y] yes  [a] always: {scope}  [n] no  [t] no, and tell it what to do instead"
        )
    } else {
        format!("  allow? [y]es once, [a]lways ({scope}), [n]o: ")
    }
}

/// Spinner frames of the status line.
const SPINNER: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];

/// Lines of a result shown by default (`/verbose` shows all).
const RESULT_LINES: usize = 6;

/// Lines of a diff shown by default.
const DIFF_LINES: usize = 40;

/// The transcript on a terminal.
struct Live {
    /// Colour on stdout (the answer) and on stderr (everything else).
    out: Style,
    err: Style,
    /// Answer text not shown yet: the markdown block it is in has not ended.
    pending: String,
    /// A block of this answer is already shown (the next one is set off by a blank line).
    shown_block: bool,
    /// What is under way and since when; `None`: nothing (the status line is off).
    status: Option<(String, Instant)>,
    /// The status line is on the screen (the last line of stderr).
    drawn: bool,
    frame: usize,
    /// Tokens: the last request's input (the context it used), and the run's totals.
    context: u64,
    /// Whether `context` is nop's estimate (the server reported no usage): shown as `~N`.
    context_estimated: bool,
    run_in: u64,
    run_out: u64,
    started: Instant,
    /// Typed while the agent works, not queued yet.
    input: String,
    /// Keys are read while the agent works (the interactive session): Esc interrupts.
    keys: bool,
    /// An approval question waits for a key: the status line shows this instead of the work.
    waiting: Option<String>,
    /// Changes whose diff an approval question showed: not shown again with the result.
    previewed: Vec<nop::protocol::events::FileChange>,
    /// The last lines of the command under way, shown under the status line.
    tail: Vec<String>,
    /// The subagents running now, each with a status line of its own under the run's:
    /// `(session, agent, since)`.
    subagents: Vec<(String, String, Instant)>,
    /// Lines drawn under the status line (its tail).
    drawn_below: usize,
}

impl Live {
    fn new() -> Live {
        Live {
            out: Style::detect(true),
            err: Style::detect(true),
            pending: String::new(),
            shown_block: false,
            status: None,
            drawn: false,
            frame: 0,
            context: 0,
            context_estimated: false,
            run_in: 0,
            run_out: 0,
            started: Instant::now(),
            input: String::new(),
            keys: false,
            waiting: None,
            previewed: Vec::new(),
            tail: Vec::new(),
            subagents: Vec::new(),
            drawn_below: 0,
        }
    }

    fn width() -> usize {
        crossterm::terminal::size()
            .map(|(w, _)| usize::from(w))
            .unwrap_or(80)
            .clamp(20, 160)
    }

    fn event(&mut self, event: &Event, verbose: bool, interactive: bool) {
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
                self.clear_status();
                if let Some((line, _)) = note(event) {
                    eprintln!("{}", err.dim(&line));
                }
                self.set_status("writing");
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
        match event {
            Event::SessionStarted { .. } => {
                self.started = Instant::now();
                if let Some((line, _)) = note(event) {
                    eprintln!("{}", err.dim(&line));
                }
            }
            Event::TurnStarted { .. } => {
                self.shown_block = false;
                self.set_status("thinking");
            }
            Event::Retrying {
                attempt,
                delay_ms,
                error,
            } => {
                eprintln!(
                    "{}",
                    err.yellow(&format!(
                        "  ↻ attempt {attempt} failed ({}); retrying in {:.1} s",
                        visible(error),
                        *delay_ms as f64 / 1000.0
                    ))
                );
                self.set_status("thinking");
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
                let summary: Vec<String> = summary
                    .into_iter()
                    .flat_map(|l| {
                        if super::term::style::is_hint(&l) {
                            super::term::style::wrap_words(&l, width)
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
            Event::Warning { message } | Event::Untrusted { message, .. } => {
                eprintln!("{}", err.yellow(&format!("warning: {}", visible(message))))
            }
            Event::Error { message } => {
                eprintln!("{}", err.red(&format!("error: {}", visible(message))))
            }
            Event::Refused { reason, .. } => {
                eprintln!("{}", err.red(&format!("refused: {}", visible(reason))))
            }
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
            Event::Queued { .. }
            | Event::GoalChecked { .. }
            | Event::Paused { .. }
            | Event::Resumed { .. }
            | Event::MessagesInjected { .. }
            | Event::Compacted { .. } => {
                if let Some((line, doing)) = note(event) {
                    eprintln!("{line}");
                    if let Some(doing) = doing {
                        self.set_status(&doing);
                    }
                }
            }
            Event::Result(outcome) => {
                let id = &outcome.session_id;
                match outcome.status {
                    RunStatus::Completed => {}
                    RunStatus::WaitingInput => {
                        let question = outcome.question.as_deref().unwrap_or_default();
                        println!("{} {}", self.out.bold("?"), visible(question));
                        if !interactive {
                            eprintln!("(waiting for your answer: nop run --session {id} \"…\")");
                        }
                    }
                    RunStatus::Error => eprintln!(
                        "{}",
                        err.red(&format!("error: {}", visible(&outcome.final_message)))
                    ),
                    RunStatus::BudgetExceeded => eprintln!(
                        "{}",
                        err.yellow(&format!(
                            "{}; continue with: nop run --session {} --max-budget-usd …",
                            visible(&outcome.final_message),
                            outcome.session_id
                        ))
                    ),
                    RunStatus::Cancelled if interactive => {
                        eprintln!("{}", err.yellow("interrupted"))
                    }
                    RunStatus::Cancelled => {
                        eprintln!("cancelled; continue with: nop run --session {id} \"…\"")
                    }
                    RunStatus::GoalNotMet => eprintln!(
                        "{}",
                        err.yellow(&format!(
                            "goal not met: {}",
                            visible(&outcome.final_message)
                        ))
                    ),
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
        for line in lines {
            let _ = writeln!(out, "{line}");
        }
        let _ = out.flush();
        self.shown_block = true;
    }

    /// Shows what is left of the answer (its turn ended).
    fn flush_text(&mut self) {
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

    fn draw_status(&mut self) {
        if let Some(line) = &self.waiting {
            let line = super::term::style::truncate(line, Live::width().saturating_sub(1));
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
            let line = super::term::style::truncate(&line, Live::width().saturating_sub(1));
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
        let line = super::term::style::truncate(&line, width);
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
            let l = super::term::style::truncate(&l, width);
            below.push_str(&format!("\n\x1b[2K{}", self.err.dim(&l)));
        }
        for l in &self.tail {
            let l = super::term::style::truncate(&format!("  │ {}", one_line(l)), width);
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
    fn clear_status(&mut self) {
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
