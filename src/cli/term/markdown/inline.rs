//! Inline content: runs of text, each with its formatting ([`Fmt`], [`Span`]), wrapped into
//! lines of a width in display columns and painted for the terminal.

use unicode_width::UnicodeWidthChar;

use crate::cli::term::style::{self, BOLD, CYAN, DIM, ITALIC, STRIKE, Style, UNDERLINE};

/// Inline formatting in effect for a run of text.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Fmt {
    pub(super) bold: bool,
    pub(super) italic: bool,
    pub(super) strike: bool,
    pub(super) code: bool,
    pub(super) link: bool,
    pub(super) url: bool,
}

impl Fmt {
    fn sgr(self) -> Vec<u8> {
        let mut codes = Vec::new();
        if self.bold {
            codes.push(BOLD);
        }
        if self.italic {
            codes.push(ITALIC);
        }
        if self.strike {
            codes.push(STRIKE);
        }
        if self.link {
            codes.push(UNDERLINE);
        }
        if self.code {
            codes.push(CYAN);
        }
        if self.url {
            codes.push(DIM);
        }
        codes
    }
}

/// A run of text with one formatting. A `\n` in `text` is a hard line break.
#[derive(Debug, Clone)]
pub(super) struct Span {
    pub(super) text: String,
    pub(super) fmt: Fmt,
}

/// `spans` without leading and trailing whitespace.
pub(super) fn trim_spans(mut spans: Vec<Span>) -> Vec<Span> {
    if let Some(first) = spans.first_mut() {
        first.text = first.text.trim_start().to_string();
    }
    if let Some(last) = spans.last_mut() {
        last.text = last.text.trim_end().to_string();
    }
    spans
}

/// A piece of inline content for wrapping.
enum Token {
    Word(Vec<Span>),
    Space(Fmt),
    Break,
}

/// Splits inline content into lines of at most `width` columns at spaces (runs of spaces count
/// as one); a word wider than a line is cut where it must.
pub(super) fn wrap(spans: &[Span], width: usize) -> Vec<Vec<Span>> {
    let mut tokens = Vec::new();
    let mut word: Vec<Span> = Vec::new();
    let end_word = |word: &mut Vec<Span>, tokens: &mut Vec<Token>| {
        if !word.is_empty() {
            tokens.push(Token::Word(std::mem::take(word)));
        }
    };
    for span in spans {
        for c in span.text.chars() {
            if c == '\n' {
                end_word(&mut word, &mut tokens);
                tokens.push(Token::Break);
            } else if c.is_whitespace() {
                end_word(&mut word, &mut tokens);
                tokens.push(Token::Space(span.fmt));
            } else {
                append(&mut word, c.encode_utf8(&mut [0; 4]), span.fmt);
            }
        }
    }
    end_word(&mut word, &mut tokens);

    let mut lines = Vec::new();
    let mut line: Vec<Span> = Vec::new();
    let mut used = 0;
    let mut space: Option<Fmt> = None;
    for token in tokens {
        match token {
            Token::Space(fmt) => space = space.or(Some(fmt)),
            Token::Break => {
                lines.push(std::mem::take(&mut line));
                used = 0;
                space = None;
            }
            Token::Word(word) => {
                let w: usize = word.iter().map(|s| style::width(&s.text)).sum();
                if used > 0 && used + 1 + w > width {
                    lines.push(std::mem::take(&mut line));
                    used = 0;
                }
                if used > 0
                    && let Some(fmt) = space
                {
                    append(&mut line, " ", fmt);
                    used += 1;
                }
                space = None;
                for span in word {
                    for c in span.text.chars() {
                        let cw = c.width().unwrap_or(0);
                        if used > 0 && used + cw > width {
                            lines.push(std::mem::take(&mut line));
                            used = 0;
                        }
                        append(&mut line, c.encode_utf8(&mut [0; 4]), span.fmt);
                        used += cw;
                    }
                }
            }
        }
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// Adds `text` to the last span if it has the same formatting, else as a new span.
pub(super) fn append(spans: &mut Vec<Span>, text: &str, fmt: Fmt) {
    match spans.last_mut() {
        Some(last) if last.fmt == fmt => last.text.push_str(text),
        _ => spans.push(Span {
            text: text.to_string(),
            fmt,
        }),
    }
}

pub(super) fn paint(spans: &[Span], style: Style) -> String {
    spans
        .iter()
        .map(|s| style.paint(&s.text, &s.fmt.sgr()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::render;
    use crate::cli::term::style::{self, Style};

    #[test]
    fn wide_characters_count_two_columns_when_wrapping() {
        let out = render(
            "日本語の文章 はこのように 折り返されます 正しく",
            14,
            Style::PLAIN,
        );
        assert!(out.iter().all(|l| style::width(l) <= 14), "{out:#?}");
        assert_eq!(
            out,
            ["日本語の文章", "はこのように", "折り返されます", "正しく"]
        );
    }
}
