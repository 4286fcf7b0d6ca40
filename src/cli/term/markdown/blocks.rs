//! The blocks of an answer that are not prose: code blocks (indented, never wrapped, highlighted
//! in colour) and tables (columns aligned by display width, the header row bold and ruled).

use pulldown_cmark::Alignment;

use super::Renderer;
use super::highlight::{Lang, highlight};
use super::inline::{Fmt, Span, paint, trim_spans};
use crate::cli::term::style;

/// Code blocks are indented this much, as markdown itself indents code.
const CODE_INDENT: &str = "    ";

pub(super) struct Table {
    pub(super) aligns: Vec<Alignment>,
    pub(super) rows: Vec<Vec<Vec<Span>>>,
    pub(super) row: Vec<Vec<Span>>,
}

pub(super) struct CodeBlock {
    pub(super) lang: Lang,
    pub(super) text: String,
}

impl Renderer {
    pub(super) fn code_block(&mut self, code: &CodeBlock) {
        let text = code.text.strip_suffix('\n').unwrap_or(&code.text);
        for line in text.split('\n') {
            let line = highlight(line, code.lang, self.style);
            self.emit(format!("{CODE_INDENT}{line}"));
        }
    }

    pub(super) fn table(&mut self, table: &Table) {
        let cells: Vec<Vec<(String, String)>> = table
            .rows
            .iter()
            .enumerate()
            .map(|(r, row)| {
                row.iter()
                    .map(|spans| {
                        let plain: String = spans
                            .iter()
                            .map(|s| s.text.replace('\n', " "))
                            .collect::<String>()
                            .trim()
                            .to_string();
                        let spans: Vec<Span> = spans
                            .iter()
                            .map(|s| Span {
                                text: s.text.replace('\n', " "),
                                fmt: Fmt {
                                    bold: s.fmt.bold || r == 0,
                                    ..s.fmt
                                },
                            })
                            .collect();
                        (plain, paint(&trim_spans(spans), self.style))
                    })
                    .collect()
            })
            .collect();
        let columns = cells.iter().map(Vec::len).max().unwrap_or(0);
        let mut widths = vec![0; columns];
        for row in &cells {
            for (i, (plain, _)) in row.iter().enumerate() {
                widths[i] = widths[i].max(style::width(plain));
            }
        }
        for (r, row) in cells.iter().enumerate() {
            let line = (0..columns)
                .map(|i| {
                    let (plain, painted) = row
                        .get(i)
                        .map_or(("", ""), |(p, s)| (p.as_str(), s.as_str()));
                    let gap = widths[i] - style::width(plain);
                    let (left, right) = match table.aligns.get(i) {
                        Some(Alignment::Right) => (gap, 0),
                        Some(Alignment::Center) => (gap / 2, gap - gap / 2),
                        _ => (0, gap),
                    };
                    format!("{}{painted}{}", " ".repeat(left), " ".repeat(right))
                })
                .collect::<Vec<_>>()
                .join(&self.style.dim(" │ "));
            self.emit(line);
            if r == 0 {
                let rule = widths
                    .iter()
                    .map(|w| "─".repeat(*w))
                    .collect::<Vec<_>>()
                    .join("─┼─");
                let rule = self.style.dim(&rule);
                self.emit(rule);
            }
        }
    }
}
