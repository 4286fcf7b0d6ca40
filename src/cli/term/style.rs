//! Whether to colour, the few ANSI attributes the renderers use, display widths, and making
//! untrusted text (model answers, command output) safe to print on a terminal.

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

/// `text` as it may be printed: escape sequences and other control characters removed (a
/// model or a command must not be able to move the cursor, retitle the window or hide text),
/// tabs expanded, and of a line redrawn with `\r` (progress bars) only its last state.
pub fn sanitize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let line = line.strip_suffix('\r').unwrap_or(line);
        let line = line.rsplit('\r').next().unwrap_or(line);
        let mut column = 0;
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\t' => {
                    let n = TAB - column % TAB;
                    out.extend(std::iter::repeat_n(' ', n));
                    column += n;
                }
                '\x1b' => skip_escape(&mut chars),
                c if c.is_control() => {}
                c => {
                    out.push(c);
                    column += c.width().unwrap_or(0);
                }
            }
        }
    }
    out
}

/// Consumes the rest of an escape sequence whose ESC was just read: CSI (`ESC [ … final`), OSC
/// (`ESC ] … BEL` or `ESC ] … ESC \`), or a two-character escape.
fn skip_escape(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    match chars.next() {
        Some('[') => {
            for c in chars.by_ref() {
                if ('\x40'..='\x7e').contains(&c) {
                    break;
                }
            }
        }
        Some(']') => {
            while let Some(c) = chars.next() {
                if c == '\x07' {
                    break;
                }
                if c == '\x1b' {
                    if chars.peek() == Some(&'\\') {
                        chars.next();
                    }
                    break;
                }
            }
        }
        _ => {}
    }
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
    fn width_counts_wide_characters_twice() {
        assert_eq!(width("abc"), 3);
        assert_eq!(width("東京"), 4);
        assert_eq!(truncate("東京タワー", 5), "東京…");
        assert_eq!(truncate("short", 5), "short");
    }

    #[test]
    fn sanitize_removes_escapes_and_keeps_the_last_state_of_a_redrawn_line() {
        let raw = "\x1b[1;32mok\x1b[0m\n\x1b]0;title\x07a\tb\r\n10%\r50%\r100%\nbell\x07!";
        assert_eq!(sanitize(raw), "ok\na   b\n100%\nbell!");
    }
}
