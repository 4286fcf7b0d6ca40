//! What an edit or a write does to a file, as a unified diff for the transcript and the
//! approval prompt: a header with the counts, then hunks with old and new line numbers.

use std::time::Duration;

use similar::{ChangeTag, TextDiff};

use super::style::{self, Style};

/// Diff lines shown at most; the rest is counted in a last line.
pub const MAX_LINES: usize = 200;

/// How long the diff may search for the smallest edit before settling for a larger one: a
/// rewrite of a huge file must not hold up the approval prompt.
const TIMEOUT: Duration = Duration::from_millis(500);

/// The change from `old` to `new` of the file at `path`, with `context` unchanged lines around
/// each change. A new file (`old` empty) is all added lines; identical content is one line
/// saying so.
pub fn unified(path: &str, old: &str, new: &str, context: usize, style: Style) -> Vec<String> {
    let diff = TextDiff::configure().timeout(TIMEOUT).diff_lines(old, new);
    let (mut added, mut removed) = (0, 0);
    for change in diff.iter_all_changes() {
        match change.tag() {
            ChangeTag::Insert => added += 1,
            ChangeTag::Delete => removed += 1,
            ChangeTag::Equal => {}
        }
    }
    let path = style::sanitize(path);
    if added == 0 && removed == 0 {
        return vec![format!(
            "{} {}",
            style.bold(&path),
            style.dim("(no changes)")
        )];
    }
    let counts = if old.is_empty() {
        format!("new file, {}", style.green(&format!("+{added}")))
    } else {
        format!(
            "{} {}",
            style.green(&format!("+{added}")),
            style.red(&format!("−{removed}"))
        )
    };
    let mut lines = vec![format!("{} ({counts})", style.bold(&path))];

    let digits = diff.old_len().max(diff.new_len()).to_string().len();
    let number = |n: Option<usize>| n.map_or(String::new(), |i| (i + 1).to_string());
    let mut shown = 0;
    let mut hidden = 0;
    let mut add = |line: String, lines: &mut Vec<String>| {
        if shown < MAX_LINES {
            lines.push(line);
            shown += 1;
        } else {
            hidden += 1;
        }
    };
    for (i, group) in diff.grouped_ops(context).iter().enumerate() {
        if i > 0 {
            let gap = format!("{:>digits$} {:>digits$} ⋮", "", "");
            add(style.dim(&gap), &mut lines);
        }
        for op in group {
            for change in diff.iter_changes(op) {
                let gutter = format!(
                    "{:>digits$} {:>digits$}",
                    number(change.old_index()),
                    number(change.new_index())
                );
                // Without its line end (sanitize drops a `\r` too).
                let text = change.value();
                let text = &style::sanitize(text.strip_suffix('\n').unwrap_or(text));
                let line = match change.tag() {
                    ChangeTag::Equal => format!("{}   {}", style.dim(&gutter), style.dim(text)),
                    ChangeTag::Delete => {
                        format!("{} {}", style.dim(&gutter), style.red(&format!("- {text}")))
                    }
                    ChangeTag::Insert => {
                        format!(
                            "{} {}",
                            style.dim(&gutter),
                            style.green(&format!("+ {text}"))
                        )
                    }
                };
                add(line.trim_end().to_string(), &mut lines);
                if change.missing_newline() && change.tag() != ChangeTag::Equal {
                    let note = format!(
                        "{:>digits$} {:>digits$}   \\ no newline at end of file",
                        "", ""
                    );
                    add(style.dim(&note), &mut lines);
                }
            }
        }
    }
    if hidden > 0 {
        lines.push(style.dim(&format!("… {hidden} more lines")));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use insta::assert_snapshot;

    fn numbered(n: usize) -> String {
        (1..=n).map(|i| format!("line {i}\n")).collect()
    }

    #[test]
    fn an_edit_in_the_middle_shows_its_hunk_with_line_numbers() {
        let old = numbered(20);
        let new = old
            .replace("line 10\n", "line ten\nline ten and a half\n")
            .replace("line 3\n", "");
        let out = unified("src/lib.rs", &old, &new, 2, Style::PLAIN);
        assert_snapshot!(out.join("\n"));
    }

    #[test]
    fn a_new_file_is_all_additions() {
        let new = "fn main() {\n    println!(\"hi\");\n}\n";
        assert_snapshot!(unified("src/main.rs", "", new, 3, Style::PLAIN).join("\n"));
    }

    #[test]
    fn identical_content_says_no_changes() {
        let text = numbered(5);
        assert_eq!(
            unified("a.txt", &text, &text, 3, Style::PLAIN),
            ["a.txt (no changes)"]
        );
    }

    #[test]
    fn a_missing_final_newline_is_said() {
        let out = unified("a.txt", "a\nb\n", "a\nc", 3, Style::PLAIN);
        assert_eq!(
            out,
            [
                "a.txt (+1 −1)",
                "1 1   a",
                "2   - b",
                "  2 + c",
                "      \\ no newline at end of file",
            ]
        );
    }

    #[test]
    fn a_long_diff_is_capped() {
        let new = numbered(250);
        let out = unified("big.txt", "", &new, 3, Style::PLAIN);
        assert_eq!(out.len(), 1 + MAX_LINES + 1);
        assert_eq!(out.last().map(String::as_str), Some("… 50 more lines"));
    }

    #[test]
    fn colour_marks_additions_green_and_removals_red() {
        let out = unified("a.txt", "a\nb\n", "a\nc\n", 3, Style::COLOR).join("\n");
        assert!(out.contains("\x1b[31m- b\x1b[0m"), "{out}");
        assert!(out.contains("\x1b[32m+ c\x1b[0m"), "{out}");
        let plain = unified("a.txt", "a\nb\n", "a\nc\n", 3, Style::PLAIN).join("\n");
        assert!(!plain.contains('\x1b'), "{plain}");
    }
}
