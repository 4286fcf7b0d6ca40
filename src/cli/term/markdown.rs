//! Markdown (the model's answers) to terminal lines: headings, emphasis, lists, quotes, code
//! with a small highlighter, aligned tables, links and rules, with words wrapped at the
//! terminal's width. Readable without colour: markers (`#`, `•`, `│`) carry the structure and
//! no markdown punctuation (`**`, backticks) is left over.
//!
//! An answer arrives in pieces; [`complete_prefix`] says how much of it is complete blocks, so
//! the caller renders those and keeps the rest until more text (or the end) arrives.
//!
//! This file reads the parser's events into blocks (the renderer); the runs of inline text and
//! their wrapping are `markdown/inline.rs`, tables and code blocks `markdown/blocks.rs`, the
//! code highlighter `markdown/highlight.rs`.

mod blocks;
mod highlight;
mod inline;

use pulldown_cmark::{CodeBlockKind, Event, Options, Parser, Tag, TagEnd};

use super::style::{self, Style};
use blocks::{CodeBlock, Table};
use highlight::Lang;
use inline::{Fmt, Span, append, paint, wrap};

/// Narrowest column prose is wrapped to, however deep the nesting.
const MIN_WIDTH: usize = 10;

/// `text` rendered for a terminal `width` columns wide, one string per line (no newlines), with
/// no blank lines at either end. Code blocks and tables are not wrapped.
pub fn render(text: &str, width: usize, style: Style) -> Vec<String> {
    let options =
        Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    let mut r = Renderer::new(width, style);
    // Sanitized whole: the parser splits text at `[` and `]`, which would leave the tail of an
    // escape sequence in a piece of its own.
    let text = style::sanitize(text);
    for event in Parser::new_ext(&text, options) {
        r.event(event);
    }
    r.flush_inline();
    while r.lines.last().is_some_and(|l| l.is_empty()) {
        r.lines.pop();
    }
    r.lines
}

/// Byte length of the leading part of a streamed answer made of complete blocks: up to a blank
/// line outside a code fence, or the end of a closed fence. A blank line only counts once the
/// line after it has begun and is not indented: an indented line may continue a list item
/// (rendered alone it would become a code block), so the blank line must wait for it.
pub fn complete_prefix(text: &str) -> usize {
    let mut complete = 0;
    // The opening fence's character, length and indentation while inside a fence.
    let mut fence: Option<(char, usize, usize)> = None;
    let mut after_blank = false;
    let mut start = 0;
    for line in text.split_inclusive('\n') {
        let whole = line.ends_with('\n');
        let content = line.trim_end_matches(['\n', '\r']);
        let trimmed = content.trim_start();
        let indent = content.len() - trimmed.len();
        match fence {
            Some((c, n, fence_indent)) => {
                let closes = whole
                    && trimmed.chars().take_while(|&x| x == c).count() >= n
                    && trimmed.trim_start_matches(c).trim().is_empty();
                if closes {
                    fence = None;
                    if fence_indent == 0 {
                        complete = start + line.len();
                    }
                }
            }
            None => {
                if after_blank && !trimmed.is_empty() && indent == 0 {
                    complete = start;
                }
                if trimmed.is_empty() {
                    after_blank = whole;
                } else {
                    after_blank = false;
                    if let Some(c) = ['`', '~'].into_iter().find(|&c| trimmed.starts_with(c)) {
                        let n = trimmed.chars().take_while(|&x| x == c).count();
                        if n >= 3 {
                            fence = Some((c, n, indent));
                        }
                    }
                }
            }
        }
        start += line.len();
    }
    complete
}

/// What the lines of a block sit inside, outermost first.
enum Container {
    Quote,
    Item {
        marker: String,
        /// Whether a line has shown the marker yet (later lines get spaces instead).
        shown: bool,
    },
}

struct Renderer {
    width: usize,
    style: Style,
    lines: Vec<String>,
    containers: Vec<Container>,
    /// Per open list, the number of its next item (`None`: bullets).
    lists: Vec<Option<u64>>,
    /// The inline content of the block being read.
    spans: Vec<Span>,
    bold: usize,
    italic: usize,
    strike: usize,
    /// Open links: destination and where their text starts (bytes into the text of `spans`).
    links: Vec<(String, usize)>,
    heading: bool,
    code: Option<CodeBlock>,
    table: Option<Table>,
    /// A block ended: the next one starts after a blank line.
    blank: bool,
}

impl Renderer {
    fn new(width: usize, style: Style) -> Renderer {
        Renderer {
            width,
            style,
            lines: Vec::new(),
            containers: Vec::new(),
            lists: Vec::new(),
            spans: Vec::new(),
            bold: 0,
            italic: 0,
            strike: 0,
            links: Vec::new(),
            heading: false,
            code: None,
            table: None,
            blank: false,
        }
    }

    fn event(&mut self, event: Event<'_>) {
        match event {
            Event::Start(tag) => self.start(tag),
            Event::End(tag) => self.end(tag),
            Event::Text(text) => match &mut self.code {
                Some(code) => code.text.push_str(&text),
                None => self.push(&text, self.fmt()),
            },
            Event::Code(text) => {
                let fmt = Fmt {
                    code: true,
                    ..self.fmt()
                };
                self.push(&text, fmt);
            }
            Event::Html(html) => {
                for line in html.lines() {
                    self.emit(self.style.dim(line));
                }
            }
            Event::InlineHtml(text)
            | Event::InlineMath(text)
            | Event::DisplayMath(text)
            | Event::FootnoteReference(text) => self.push(&text, self.fmt()),
            Event::SoftBreak => self.push(" ", self.fmt()),
            Event::HardBreak => self.push("\n", self.fmt()),
            Event::Rule => {
                self.begin_block();
                let rule = "─".repeat(self.available());
                let rule = self.style.dim(&rule);
                self.emit(rule);
                self.blank = true;
            }
            Event::TaskListMarker(done) => {
                let mark = if done { "☑ " } else { "☐ " };
                // The box takes the place of the item's bullet.
                match self.containers.last_mut() {
                    Some(Container::Item {
                        marker,
                        shown: false,
                    }) if self.lists.last() == Some(&None) => *marker = mark.to_string(),
                    _ => self.push(mark, Fmt::default()),
                }
            }
        }
    }

    fn start(&mut self, tag: Tag<'_>) {
        match tag {
            Tag::Paragraph | Tag::HtmlBlock => self.begin_block(),
            // A heading is its text in bold (as Claude Code and Codex show it), not its `##`.
            Tag::Heading { .. } => {
                self.begin_block();
                self.heading = true;
            }
            Tag::BlockQuote(_) => {
                self.begin_block();
                self.containers.push(Container::Quote);
            }
            Tag::CodeBlock(kind) => {
                self.begin_block();
                let lang = match kind {
                    CodeBlockKind::Fenced(info) => Lang::of(&info),
                    CodeBlockKind::Indented => Lang::Other,
                };
                self.code = Some(CodeBlock {
                    lang,
                    text: String::new(),
                });
            }
            Tag::List(first) => {
                self.begin_block();
                self.lists.push(first);
            }
            Tag::Item => {
                let marker = match self.lists.last_mut() {
                    Some(Some(n)) => {
                        *n += 1;
                        format!("{}. ", *n - 1)
                    }
                    _ => {
                        let bullets = ["•", "◦", "▪"];
                        let depth = self.lists.len().saturating_sub(1);
                        format!("{} ", bullets[depth % bullets.len()])
                    }
                };
                self.containers.push(Container::Item {
                    marker,
                    shown: false,
                });
            }
            Tag::Table(aligns) => {
                self.begin_block();
                self.table = Some(Table {
                    aligns,
                    rows: Vec::new(),
                    row: Vec::new(),
                });
            }
            Tag::TableHead | Tag::TableRow | Tag::TableCell => {}
            Tag::Emphasis => self.italic += 1,
            Tag::Strong => self.bold += 1,
            Tag::Strikethrough => self.strike += 1,
            Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. } => {
                let at = self.spans.iter().map(|s| s.text.len()).sum();
                self.links.push((dest_url.to_string(), at));
            }
            Tag::FootnoteDefinition(_)
            | Tag::DefinitionList
            | Tag::DefinitionListTitle
            | Tag::DefinitionListDefinition
            | Tag::Superscript
            | Tag::Subscript
            | Tag::MetadataBlock(_) => {}
        }
    }

    fn end(&mut self, tag: TagEnd) {
        match tag {
            TagEnd::Paragraph | TagEnd::HtmlBlock => {
                self.flush_inline();
                self.blank = true;
            }
            TagEnd::Heading(_) => {
                self.flush_inline();
                self.heading = false;
                self.blank = true;
            }
            TagEnd::BlockQuote(_) => {
                self.flush_inline();
                self.containers.pop();
                self.blank = true;
            }
            TagEnd::CodeBlock => {
                if let Some(code) = self.code.take() {
                    self.code_block(&code);
                }
                self.blank = true;
            }
            TagEnd::List(_) => {
                self.lists.pop();
                // A nested list ends inside an item: the outer list goes on without a gap.
                self.blank = self.lists.is_empty();
            }
            TagEnd::Item => {
                self.flush_inline();
                if let Some(Container::Item { shown: false, .. }) = self.containers.last() {
                    // An empty item still shows its marker.
                    self.emit(String::new());
                }
                self.containers.pop();
            }
            TagEnd::Table => {
                if let Some(table) = self.table.take() {
                    self.table(&table);
                }
                self.blank = true;
            }
            TagEnd::TableHead | TagEnd::TableRow => {
                if let Some(table) = &mut self.table {
                    let row = std::mem::take(&mut table.row);
                    table.rows.push(row);
                }
            }
            TagEnd::TableCell => {
                let cell = std::mem::take(&mut self.spans);
                if let Some(table) = &mut self.table {
                    table.row.push(cell);
                }
            }
            TagEnd::Emphasis => self.italic = self.italic.saturating_sub(1),
            TagEnd::Strong => self.bold = self.bold.saturating_sub(1),
            TagEnd::Strikethrough => self.strike = self.strike.saturating_sub(1),
            TagEnd::Link | TagEnd::Image => {
                if let Some((url, from)) = self.links.pop() {
                    let all: String = self.spans.iter().map(|s| s.text.as_str()).collect();
                    let text = all.get(from..).unwrap_or_default();
                    let same = url == text || url.strip_prefix("mailto:") == Some(text);
                    if !url.is_empty() && !same {
                        let fmt = Fmt {
                            url: true,
                            ..Fmt::default()
                        };
                        self.push(&format!(" ({url})"), fmt);
                    }
                }
            }
            TagEnd::FootnoteDefinition
            | TagEnd::DefinitionList
            | TagEnd::DefinitionListTitle
            | TagEnd::DefinitionListDefinition
            | TagEnd::Superscript
            | TagEnd::Subscript
            | TagEnd::MetadataBlock(_) => {}
        }
    }

    fn fmt(&self) -> Fmt {
        Fmt {
            bold: self.bold > 0 || self.heading,
            italic: self.italic > 0,
            strike: self.strike > 0,
            code: false,
            link: !self.links.is_empty(),
            url: false,
        }
    }

    fn push(&mut self, text: &str, fmt: Fmt) {
        append(&mut self.spans, text, fmt);
    }

    /// Separates a new block from the one before it by a blank line. Text waiting in a tight
    /// list item (which has no paragraph of its own) is its first block.
    fn begin_block(&mut self) {
        self.flush_inline();
        if self.blank && !self.lines.is_empty() {
            // Only quotes' bars continue through a blank line; it does not use up an item's
            // marker.
            let bars = self
                .containers
                .iter()
                .filter(|c| matches!(c, Container::Quote))
                .map(|_| self.style.dim("│"))
                .collect::<Vec<_>>()
                .join(" ");
            self.lines.push(bars);
        }
        self.blank = false;
    }

    /// Columns left for content inside the open containers.
    fn available(&self) -> usize {
        let used: usize = self
            .containers
            .iter()
            .map(|c| match c {
                Container::Quote => 2,
                Container::Item { marker, .. } => style::width(marker),
            })
            .sum();
        self.width.saturating_sub(used).max(MIN_WIDTH)
    }

    /// Adds a line of content behind the containers' prefix (quote bars, an item's marker on
    /// its first line and its hanging indent after).
    fn emit(&mut self, content: String) {
        let mut prefix = String::new();
        for c in &mut self.containers {
            match c {
                Container::Quote => prefix.push_str(&self.style.dim("│ ")),
                Container::Item { marker, shown } => {
                    if *shown {
                        prefix.push_str(&" ".repeat(style::width(marker)));
                    } else {
                        prefix.push_str(marker);
                        *shown = true;
                    }
                }
            }
        }
        let line = prefix + &content;
        self.lines.push(line.trim_end().to_string());
    }

    /// Wraps and emits the inline content read so far.
    fn flush_inline(&mut self) {
        if self.spans.is_empty() || self.table.is_some() {
            return;
        }
        let spans = std::mem::take(&mut self.spans);
        for line in wrap(&spans, self.available()) {
            let painted = paint(&line, self.style);
            self.emit(painted);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use insta::assert_snapshot;
    use proptest::prelude::*;
    use unicode_width::UnicodeWidthChar;

    fn plain(text: &str, width: usize) -> String {
        render(text, width, Style::PLAIN).join("\n")
    }

    #[test]
    fn inline_formatting_leaves_no_markdown_punctuation() {
        let text = "Some **bold**, *italic*, ***both***, ~~gone~~ and `code`; \
                    see [the docs](https://example.com/docs) or <https://example.com>.";
        let out = plain(text, 80);
        assert_snapshot!(out);
        assert!(!out.contains("**") && !out.contains('`') && !out.contains("~~"));
    }

    #[test]
    fn headings_lists_and_quotes() {
        let text = "\
# Plan

## Steps

1. Read the code
2. Fix the bug, which is in a function whose name is long enough to wrap
   - nested bullet
   - another one
     1. deeper
3. Run the tests

- [x] done task
- [ ] open task

> A quote that is long enough to be wrapped inside the quote bar.
>
> Second paragraph.

---

After the rule.";
        assert_snapshot!(plain(text, 40));
    }

    #[test]
    fn a_loose_list_keeps_its_blank_lines_and_hanging_indent() {
        let text = "\
1. **First step**

   Its explanation, long enough to wrap onto a second line here.

2. **Second step**";
        assert_snapshot!(plain(text, 40));
    }

    #[test]
    fn long_paragraph_wraps_at_40_columns_without_breaking_words() {
        let text = "The quick brown fox jumps over the lazy dog, and then keeps running \
                    across the whole field until the sun goes down behind the distant hills. \
                    A URL like https://example.com/a/very/long/path/that/cannot/fit/on/one/line \
                    is cut only because it is longer than a line.";
        let out = render(text, 40, Style::PLAIN);
        assert!(out.iter().all(|l| style::width(l) <= 40), "{out:#?}");
        assert_snapshot!(out.join("\n"));
    }

    #[test]
    fn table_columns_align_by_display_width() {
        let text = "\
| City | Population | Note |
|:-----|-----------:|:----:|
| 東京 | 13,960,000 | capital |
| Paris | 2,100,000 | **big** |
| Zürich | 420,000 | `zh` |";
        let out = plain(text, 80);
        assert_snapshot!(out);
        let widths: Vec<usize> = out.lines().map(style::width).collect();
        // Every row but the last column's padding is as wide as the header.
        let bars: Vec<Vec<usize>> = out
            .lines()
            .map(|l| {
                let mut col = 0;
                let mut at = Vec::new();
                for c in l.chars() {
                    if c == '│' || c == '┼' {
                        at.push(col);
                    }
                    col += c.width().unwrap_or(0);
                }
                at
            })
            .collect();
        assert!(bars.iter().all(|b| b == &bars[0]), "{bars:?} {widths:?}");
    }

    #[test]
    fn code_fences_are_indented_not_wrapped_and_highlighted_only_in_colour() {
        let text = "\
Run this:

```rust
// the entry point
fn main() { let s = \"a string that is much longer than the forty columns of this test\"; }
```

```
plain block
```";
        assert_snapshot!(plain(text, 40));
        let coloured = render(text, 40, Style::COLOR).join("\n");
        assert!(coloured.contains("\x1b[35mfn\x1b[0m"), "{coloured}");
        assert!(coloured.contains("\x1b[32m\"a string"), "{coloured}");
        assert!(
            coloured.contains("\x1b[2;3m// the entry point\x1b[0m"),
            "{coloured}"
        );
    }

    #[test]
    fn colour_on_emits_escapes_and_colour_off_none() {
        let text = "# Title\n\nSome **bold** and `code`.\n\n> quote";
        let coloured = render(text, 80, Style::COLOR).join("\n");
        assert!(coloured.contains("\x1b[1mTitle\x1b[0m"), "{coloured}");
        assert!(coloured.contains("\x1b[1mbold\x1b[0m"), "{coloured}");
        assert!(coloured.contains("\x1b[36mcode\x1b[0m"), "{coloured}");
        let plain = render(text, 80, Style::PLAIN).join("\n");
        assert!(!plain.contains('\x1b'), "{plain}");
    }

    #[test]
    fn escape_sequences_in_the_text_are_shown_not_passed_to_the_terminal() {
        let out = plain("hello \x1b]0;pwned\x07world \x1b[2J\u{9b}1m", 80);
        assert_eq!(out, "hello \\u{1b}]0;pwned\\u{7}world \\u{1b}[2J\\u{9b}1m");
    }

    /// Markdown-like text from pieces that open and close blocks and spans in any order.
    fn markdownish() -> impl Strategy<Value = String> {
        let pieces = vec![
            "# ",
            "**",
            "*",
            "`",
            "```rust\n",
            "```\n",
            "~~",
            "\n",
            "\n\n",
            "- ",
            "1. ",
            "  ",
            "> ",
            "| a | b |\n|---|--:|\n| 東 | x |\n",
            "[x](u)",
            "<b>",
            "---\n",
            "word ",
            "東京 ",
            "\x1b[31m",
            "\t",
            "\r",
        ];
        proptest::collection::vec(proptest::sample::select(pieces), 0..40).prop_map(|v| v.concat())
    }

    proptest! {
        #[test]
        fn any_text_renders_without_escapes_and_splits_at_a_line_start(
            text in markdownish(),
            width in 0usize..60,
        ) {
            let out = render(&text, width, Style::PLAIN);
            prop_assert!(out.iter().all(|l| !l.contains(['\x1b', '\n', '\r'])), "{out:?}");
            let n = complete_prefix(&text);
            prop_assert!(n == 0 || text[..n].ends_with('\n'), "{n}");
        }

        #[test]
        fn prose_fits_the_width_and_keeps_every_word(
            // At most 12 columns a word, so that none has to be cut.
            words in proptest::collection::vec("[a-z東é]{1,6}", 1..60),
            width in 12usize..60,
        ) {
            let text = words.join(" ");
            let out = render(&text, width, Style::PLAIN);
            prop_assert!(out.iter().all(|l| style::width(l) <= width), "{out:?}");
            let rewrapped: Vec<&str> = out.iter().flat_map(|l| l.split(' ')).collect();
            prop_assert_eq!(rewrapped, words.iter().map(String::as_str).collect::<Vec<_>>());
        }
    }

    #[test]
    fn complete_prefix_stops_at_the_last_finished_block() {
        // Nothing finished yet.
        assert_eq!(complete_prefix("A paragraph still stream"), 0);
        // A blank line followed by the start of the next block.
        assert_eq!(complete_prefix("First.\n\nSec"), 8);
        // The blank line is there but what follows is unknown: it could continue an item.
        assert_eq!(complete_prefix("1. item\n\n"), 0);
        assert_eq!(complete_prefix("1. item\n\n   more of the item"), 0);
        // Blank lines inside an open fence do not count; a closed fence ends a block.
        let open = "Intro.\n\n```sh\nls\n\nmore";
        assert_eq!(complete_prefix(open), 8);
        let closed = "Intro.\n\n```sh\nls\n\nmore\n```\nnext";
        assert_eq!(complete_prefix(closed), closed.len() - "next".len());
        // A fence closed by a longer fence, and one that a shorter run does not close.
        assert_eq!(complete_prefix("````\n```\n````\n"), 14);
        assert_eq!(complete_prefix("````\n```\n"), 0);
    }
}
