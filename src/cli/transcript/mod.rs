//! The renderer of a session's events ([`Renderer`]): it hands each event to the output format's
//! renderer (`output/`: stream-json, json, plain text), or, for text on a terminal, to the
//! transcript for a person ([`Live`], in `live.rs`); it also replays a resumed session's last
//! exchanges, and words the approval questions asked on the terminal.

mod live;

use std::io::IsTerminal;
use std::time::Instant;

use live::Live;

use super::OutputFormat;
use super::output::json::Json;
use super::output::stream_json::StreamJson;
use super::output::text::Text;
use super::term::notes::brief_arguments;
use super::term::style::{Style, one_line, visible};
use super::term::{diff, markdown};
use nop::protocol::events::Event;

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

/// Whether renderers start verbose (`--verbose`): the command line's, for the whole process.
static VERBOSE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The renderer of each output format; text on a terminal is the transcript ([`Live`]).
enum Format {
    StreamJson(StreamJson),
    Claude(super::output::claude_stream::ClaudeStream),
    Codex(super::output::codex_json::CodexJson),
    Json(Json),
    Text(Text),
    Live(Box<Live>),
}

impl Renderer {
    pub fn new(format: OutputFormat) -> Renderer {
        let terminal = std::io::stdout().is_terminal() && std::io::stderr().is_terminal();
        let format = match format {
            OutputFormat::StreamJson => Format::StreamJson(StreamJson),
            OutputFormat::ClaudeStream => Format::Claude(Default::default()),
            OutputFormat::CodexJson => Format::Codex(Default::default()),
            OutputFormat::Json => Format::Json(Json),
            OutputFormat::Text if terminal => Format::Live(Box::new(Live::new())),
            OutputFormat::Text | OutputFormat::Plain => Format::Text(Text::new()),
        };
        Renderer {
            format,
            verbose: VERBOSE.load(std::sync::atomic::Ordering::Relaxed),
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

    /// Renderers made from now on show whole results and diffs (`--verbose`), as `/verbose`
    /// does for one.
    pub fn verbose_from_now() {
        VERBOSE.store(true, std::sync::atomic::Ordering::Relaxed);
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

    /// The advisors nop consulted lately (not shown as they worked), oldest first.
    pub fn advisors(&self) -> Vec<String> {
        self.live_ref()
            .map(|l| l.advisors.iter().cloned().collect())
            .unwrap_or_default()
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
    /// Enter queued `text`: the `queued` line that follows shows it.
    pub fn queueing(&mut self, text: &str) {
        if let Some(live) = self.live() {
            live.queued_text = Some(text.to_string());
        }
    }

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
            Format::Claude(r) => r.event(event),
            Format::Codex(r) => r.event(event),
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
            Format::StreamJson(_) | Format::Json(_) | Format::Claude(_) | Format::Codex(_) => {}
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
    let reason = super::term::style::wrap_words(
        &one_line(reason),
        super::term::style::screen_columns().saturating_sub(3),
    )
    .join("\n  ");
    let mut out = format!(
        "\n{} {} wants to: {}\n  {reason}\n",
        style.bold("?"),
        one_line(tool),
        one_line(detail),
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
        // Broken between the answers, never inside one, at the terminal's width.
        let items = [
            "allow? [y] yes".to_string(),
            format!("[a] always: {scope}"),
            "[n] no".to_string(),
            "[t] no, and tell it what to do instead".to_string(),
        ];
        let width = super::term::style::screen_columns().saturating_sub(2);
        super::term::style::wrap_items(&items, width, 9)
            .into_iter()
            .map(|line| format!("  {line}"))
            .collect::<Vec<_>>()
            .join("\n")
    } else {
        format!("  allow? [y]es once, [a]lways ({scope}), [n]o: ")
    }
}

/// Lines of a diff shown by default.
const DIFF_LINES: usize = 40;
