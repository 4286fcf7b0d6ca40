//! Whether to colour, the few ANSI attributes the renderers use, display widths, and making
//! untrusted text (model answers, command output) safe to print on a terminal ([`visible`]).

use std::borrow::Cow;
use std::ffi::OsStr;

use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

/// Columns between tab stops when tabs are expanded for display.
const TAB: usize = 4;

/// Whether output gets ANSI colours and attributes. Renderers take it as an argument and never
/// look at the environment themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Style {
    pub color: bool,
}

// SGR parameters.
pub const BOLD: u8 = 1;
pub const DIM: u8 = 2;
pub const ITALIC: u8 = 3;
pub const UNDERLINE: u8 = 4;
pub const STRIKE: u8 = 9;
pub const RED: u8 = 31;
pub const GREEN: u8 = 32;
pub const YELLOW: u8 = 33;
pub const MAGENTA: u8 = 35;
pub const CYAN: u8 = 36;

impl Style {
    /// No escapes at all: for pipes, files, `NO_COLOR` and snapshots.
    #[cfg(test)]
    pub const PLAIN: Style = Style { color: false };
    /// ANSI colours and attributes.
    #[cfg(test)]
    pub const COLOR: Style = Style { color: true };

    /// Colour for a stream, unless `NO_COLOR` is set to something (<https://no-color.org>).
    pub fn detect(stream_is_terminal: bool) -> Style {
        Style::decide(stream_is_terminal, std::env::var_os("NO_COLOR").as_deref())
    }

    /// [`Style::detect`] with the value of `NO_COLOR` given: colour only on a terminal and when
    /// `NO_COLOR` is unset or empty.
    pub fn decide(stream_is_terminal: bool, no_color: Option<&OsStr>) -> Style {
        let refused = no_color.is_some_and(|v| !v.is_empty());
        Style {
            color: stream_is_terminal && !refused,
        }
    }

    /// `text` with the SGR attributes `sgr` (e.g. `[BOLD, RED]`), reset after it; `text` itself
    /// when colour is off, nothing is asked, or there is nothing to paint.
    pub fn paint(self, text: &str, sgr: &[u8]) -> String {
        if !self.color || sgr.is_empty() || text.is_empty() {
            return text.to_string();
        }
        let codes: Vec<String> = sgr.iter().map(u8::to_string).collect();
        format!("\x1b[{}m{text}\x1b[0m", codes.join(";"))
    }

    pub fn bold(self, text: &str) -> String {
        self.paint(text, &[BOLD])
    }

    pub fn dim(self, text: &str) -> String {
        self.paint(text, &[DIM])
    }

    pub fn red(self, text: &str) -> String {
        self.paint(text, &[RED])
    }

    pub fn green(self, text: &str) -> String {
        self.paint(text, &[GREEN])
    }

    pub fn yellow(self, text: &str) -> String {
        self.paint(text, &[YELLOW])
    }

    pub fn cyan(self, text: &str) -> String {
        self.paint(text, &[CYAN])
    }
}

/// Columns `text` takes on a terminal (East Asian wide characters count 2). `text` must hold
/// no escapes.
pub fn width(text: &str) -> usize {
    UnicodeWidthStr::width(text)
}

/// Writes `text` to standard error, each of its lines broken between words at the terminal's
/// width, a line's continuation indented as its first word is when it begins with spaces or
/// is a table row (`/help`): what the interactive session says is never cut mid-word.
pub fn say(text: &str) {
    use std::io::IsTerminal;
    // Not a terminal (a log, a pipe): the text as it is, one line each.
    if !std::io::stderr().is_terminal() {
        eprintln!("{text}");
        return;
    }
    let width = screen_columns().saturating_sub(1);
    for line in text.lines() {
        for part in wrap_hanging(line, width) {
            eprintln!("{part}");
        }
    }
}

/// `line` in lines of at most `max` columns broken between words; lines after the first are
/// indented to where the line's text begins after a leading label (`/help   this list`).
pub fn wrap_hanging(line: &str, max: usize) -> Vec<String> {
    if width(line) <= max {
        return vec![line.to_string()];
    }
    // The indent: leading spaces, then a first word followed by two spaces or more.
    let lead = line.len() - line.trim_start().len();
    let indent = line[lead..]
        .find("  ")
        .map(|i| {
            let after = &line[lead + i..];
            lead + i + (after.len() - after.trim_start().len())
        })
        .filter(|i| *i < max / 2)
        .unwrap_or(lead);
    let mut parts = wrap_words(line, max).into_iter();
    let mut lines = vec![parts.next().unwrap_or_default()];
    let rest: Vec<String> = parts.collect();
    if !rest.is_empty() {
        let rest = rest.join(" ");
        for part in wrap_words(&rest, max.saturating_sub(indent)) {
            lines.push(format!("{}{part}", " ".repeat(indent)));
        }
    }
    lines
}

/// The terminal's width in columns (80 when it cannot be told).
pub fn screen_columns() -> usize {
    crossterm::terminal::size()
        .map(|(w, _)| usize::from(w))
        .unwrap_or(80)
        .clamp(20, 400)
}

/// `items` joined by two spaces, in lines of at most `max` columns broken only between items
/// (an item longer than a line is broken between its words); lines after the first are indented
/// by `indent` columns.
pub fn wrap_items(items: &[String], max: usize, indent: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for item in items {
        let needed = width(&line) + if line.trim().is_empty() { 0 } else { 2 } + width(item);
        if needed > max && !line.trim().is_empty() {
            lines.push(std::mem::take(&mut line));
            line = " ".repeat(indent);
        }
        if !line.trim().is_empty() {
            line.push_str("  ");
        }
        if width(&line) + width(item) > max {
            let room = max.saturating_sub(width(&line));
            let mut parts = wrap_words(item, room.max(10)).into_iter();
            line.push_str(&parts.next().unwrap_or_default());
            for part in parts {
                lines.push(std::mem::take(&mut line));
                line = format!("{}{part}", " ".repeat(indent));
            }
        } else {
            line.push_str(item);
        }
    }
    if !line.trim().is_empty() {
        lines.push(line);
    }
    lines
}

/// `text` in lines of at most `max` columns, broken between words (a word longer than a line is
/// broken where the line ends): for what must be read whole, such as what the sandbox says.
pub fn wrap_words(text: &str, max: usize) -> Vec<String> {
    let max = max.max(10);
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        let needed = if line.is_empty() {
            width(word)
        } else {
            width(&line) + 1 + width(word)
        };
        if needed > max && !line.is_empty() {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
        while width(&line) > max {
            let mut head = String::new();
            let mut used = 0;
            let mut rest = line.chars();
            for c in rest.by_ref() {
                let w = c.width().unwrap_or(0);
                if used + w > max {
                    // Put the character back: it starts the next line.
                    let remaining: String = std::iter::once(c).chain(rest).collect();
                    lines.push(head);
                    line = remaining;
                    break;
                }
                head.push(c);
                used += w;
            }
            if width(&line) <= max {
                break;
            }
        }
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// Whether `line` is something nop says about a refusal that must be read whole (never cut):
/// the sandbox's hints and plan mode's.
pub fn is_hint(line: &str) -> bool {
    line.starts_with("sandbox: ") || line.starts_with("plan mode: ")
}

/// `text` cut to at most `max` columns, with `…` as the last column when something was cut.
pub fn truncate(text: &str, max: usize) -> String {
    if width(text) <= max {
        return text.to_string();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in text.chars() {
        let w = c.width().unwrap_or(0);
        if used + w + 1 > max {
            break;
        }
        out.push(c);
        used += w;
    }
    out.push('…');
    out
}

/// `text` with every control character that could drive a terminal made visible: C0 controls
/// but `\n` and `\t` (ESC, BEL, `\r`, backspace…), DEL and the C1 controls U+0080–U+009F
/// (a terminal may read U+009B as CSI) become `\u{1b}`, `\u{7}`, `\u{d}`, `\u{7f}`, `\u{9b}`.
/// The one way nop prints a string the model (or a command it ran) controls: an escape sequence
/// could otherwise set the clipboard (OSC 52), retitle the window (OSC 2) or erase and rewrite
/// the line a person is about to approve (`\r`, `ESC[2K`). nop's own styling is added after.
pub fn visible(text: &str) -> Cow<'_, str> {
    if !text.chars().any(hidden) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if hidden(c) {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// A control character [`visible`] shows as an escape.
fn hidden(c: char) -> bool {
    c.is_control() && c != '\n' && c != '\t'
}

/// [`visible`] on one line: a newline shows as `⏎`, so that a string cannot make up lines of
/// its own (an approval question's `allow?`) or push its start off the screen.
pub fn one_line(text: &str) -> String {
    visible(text).replace('\n', "⏎")
}

/// `json` (serde_json's text) with DEL and the C1 controls escaped as well (`\u009b`): serde_json
/// escapes only the C0 controls, and a terminal may act on U+009B (CSI) when the output is shown.
/// Outside its strings JSON holds only ASCII, so every such character is inside a string, where
/// the escape means the same character to a reader.
pub fn json_safe(json: String) -> String {
    let raw = |c: char| c == '\u{7f}' || (c.is_control() && !c.is_ascii());
    if !json.chars().any(raw) {
        return json;
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if raw(c) {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

/// `text` as the transcript prints it, line by line: [`visible`], with tabs expanded (so that
/// widths can be measured) and the `\r` of a `\r\n` line end dropped (it hides nothing).
pub fn sanitize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let line = line.strip_suffix('\r').unwrap_or(line);
        let mut column = 0;
        for c in visible(line).chars() {
            if c == '\t' {
                let n = TAB - column % TAB;
                out.extend(std::iter::repeat_n(' ', n));
                column += n;
            } else {
                out.push(c);
                column += c.width().unwrap_or(0);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_needs_a_terminal_and_no_no_color() {
        assert_eq!(Style::decide(true, None), Style::COLOR);
        assert_eq!(Style::decide(false, None), Style::PLAIN);
        assert_eq!(Style::decide(true, Some(OsStr::new("1"))), Style::PLAIN);
        // An empty NO_COLOR does not count (no-color.org).
        assert_eq!(Style::decide(true, Some(OsStr::new(""))), Style::COLOR);
    }

    #[test]
    fn plain_style_paints_nothing_and_colour_wraps_in_sgr() {
        assert_eq!(Style::PLAIN.paint("x", &[BOLD, RED]), "x");
        assert_eq!(Style::COLOR.paint("x", &[BOLD, RED]), "\x1b[1;31mx\x1b[0m");
        assert_eq!(Style::COLOR.bold(""), "");
    }

    #[test]
    fn a_long_row_wraps_under_its_text() {
        let row = "/mode      the approval mode; /mode never|on-request|always|plan switches it (also /approvals)";
        let lines = wrap_hanging(row, 60);
        assert_eq!(lines[0], "/mode      the approval mode; /mode");
        assert!(
            lines[1..]
                .iter()
                .all(|l| l.starts_with("           ") && width(l) <= 60),
            "{lines:?}"
        );
        assert_eq!(
            lines.concat().split_whitespace().count(),
            row.split_whitespace().count()
        );
        assert_eq!(wrap_hanging("short", 60), vec!["short"]);
    }

    #[test]
    fn items_wrap_between_items_never_inside_one() {
        let items: Vec<String> = [
            "allow? [y] yes",
            "[a] always: writing files under notes/",
            "[n] no",
            "[t] no, and tell it what to do instead",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let lines = wrap_items(&items, 60, 9);
        assert_eq!(
            lines,
            vec![
                "allow? [y] yes  [a] always: writing files under notes/",
                "         [n] no  [t] no, and tell it what to do instead",
            ]
        );
        for line in wrap_items(&items, 30, 2) {
            assert!(width(&line) <= 30, "{line}");
        }
        assert_eq!(wrap_items(&items, 200, 9).len(), 1);
    }

    #[test]
    fn width_counts_wide_characters_twice() {
        assert_eq!(width("abc"), 3);
        assert_eq!(width("東京"), 4);
        assert_eq!(truncate("東京タワー", 5), "東京…");
        assert_eq!(truncate("short", 5), "short");
        assert_eq!(
            wrap_words("sandbox: `x` is read-only to shell commands here", 20),
            ["sandbox: `x` is", "read-only to shell", "commands here"]
        );
        assert_eq!(
            wrap_words("abcdefghijklmnopqrstuvwxyz", 10),
            ["abcdefghij", "klmnopqrst", "uvwxyz"]
        );
    }

    #[test]
    fn visible_shows_every_terminal_control_and_keeps_newlines_tabs_and_text() {
        assert!(matches!(
            visible("plain\ttext\nnext 東京 é"),
            Cow::Borrowed(_)
        ));
        assert_eq!(
            visible("a\x1b]52;c;Y3VybA==\x07b\x1b]2;pwned\x1b\\c"),
            "a\\u{1b}]52;c;Y3VybA==\\u{7}b\\u{1b}]2;pwned\\u{1b}\\c"
        );
        assert_eq!(
            visible("cargo test\r\x1b[2Krm -rf ~"),
            "cargo test\\u{d}\\u{1b}[2Krm -rf ~"
        );
        // Every C0 control but \n and \t, DEL, and C1 (U+009B is CSI on some terminals).
        for c in (0u32..0x20).chain(0x7f..0xa0).filter_map(char::from_u32) {
            let shown = visible(&c.to_string()).into_owned();
            if c == '\n' || c == '\t' {
                assert_eq!(shown, c.to_string());
            } else {
                assert_eq!(shown, format!("\\u{{{:x}}}", u32::from(c)));
                assert!(!shown.chars().any(char::is_control), "{shown:?}");
            }
        }
        assert_eq!(visible("\u{a0}\u{100}"), "\u{a0}\u{100}");
    }

    #[test]
    fn json_safe_escapes_del_and_c1_and_reads_back_the_same() {
        let text = "a\u{1b}]2;x\u{7}\u{7f}\u{9b}31m\u{85}é東";
        let json = json_safe(serde_json::to_string(&serde_json::json!({ "t": text })).unwrap());
        assert_eq!(json, r#"{"t":"a\u001b]2;x\u0007\u007f\u009b31m\u0085é東"}"#);
        assert!(!json.chars().any(char::is_control), "{json}");
        let back: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(back["t"], text);
    }

    #[test]
    fn one_line_shows_newlines_too() {
        assert_eq!(one_line("a\nb\r"), "a⏎b\\u{d}");
    }

    #[test]
    fn sanitize_shows_escapes_expands_tabs_and_drops_only_a_line_ending_cr() {
        let raw = "\x1b[1;32mok\x1b[0m\n\x1b]0;title\x07a\tb\r\n10%\r100%\nbell\x07!";
        assert_eq!(
            sanitize(raw),
            "\\u{1b}[1;32mok\\u{1b}[0m\n\\u{1b}]0;title\\u{7}a    b\n10%\\u{d}100%\nbell\\u{7}!"
        );
    }
}
