//! A small highlighter for code blocks: keywords, strings and line comments of Rust, Python,
//! shell and JavaScript, by a code fence's info string; only when colour is on.

use crate::cli::term::style::{DIM, GREEN, ITALIC, MAGENTA, Style};

/// The languages the highlighter knows, by a code fence's info string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lang {
    Rust,
    Python,
    Shell,
    Js,
    Other,
}

impl Lang {
    pub(super) fn of(info: &str) -> Lang {
        let name = info.split_whitespace().next().unwrap_or("");
        match name.to_ascii_lowercase().as_str() {
            "rust" | "rs" => Lang::Rust,
            "python" | "py" => Lang::Python,
            "sh" | "bash" | "shell" | "zsh" | "console" => Lang::Shell,
            "js" | "javascript" | "jsx" | "ts" | "typescript" | "tsx" => Lang::Js,
            _ => Lang::Other,
        }
    }

    fn keywords(self) -> &'static [&'static str] {
        match self {
            Lang::Rust => &[
                "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else",
                "enum", "false", "fn", "for", "if", "impl", "in", "let", "loop", "match", "mod",
                "move", "mut", "pub", "ref", "return", "self", "Self", "static", "struct", "super",
                "trait", "true", "type", "unsafe", "use", "where", "while",
            ],
            Lang::Python => &[
                "and", "as", "assert", "async", "await", "break", "class", "continue", "def",
                "del", "elif", "else", "except", "False", "finally", "for", "from", "global", "if",
                "import", "in", "is", "lambda", "None", "nonlocal", "not", "or", "pass", "raise",
                "return", "True", "try", "while", "with", "yield",
            ],
            Lang::Shell => &[
                "case", "do", "done", "elif", "else", "esac", "export", "fi", "for", "function",
                "if", "in", "local", "return", "then", "until", "while",
            ],
            Lang::Js => &[
                "async",
                "await",
                "break",
                "case",
                "catch",
                "class",
                "const",
                "continue",
                "default",
                "delete",
                "do",
                "else",
                "export",
                "extends",
                "false",
                "finally",
                "for",
                "from",
                "function",
                "if",
                "import",
                "in",
                "instanceof",
                "let",
                "new",
                "null",
                "of",
                "return",
                "switch",
                "this",
                "throw",
                "true",
                "try",
                "typeof",
                "undefined",
                "var",
                "while",
                "yield",
            ],
            Lang::Other => &[],
        }
    }

    fn line_comment(self) -> Option<&'static str> {
        match self {
            Lang::Rust | Lang::Js => Some("//"),
            Lang::Python | Lang::Shell => Some("#"),
            Lang::Other => None,
        }
    }

    fn quotes(self) -> &'static [char] {
        match self {
            // A Rust `'` starts a lifetime as often as a character.
            Lang::Rust => &['"'],
            Lang::Python | Lang::Shell => &['"', '\''],
            Lang::Js => &['"', '\'', '`'],
            Lang::Other => &[],
        }
    }
}

/// One line of code with keywords, strings and line comments coloured; line by line, so a
/// string or comment spanning lines is only coloured on its first.
pub(super) fn highlight(line: &str, lang: Lang, style: Style) -> String {
    if !style.color || lang == Lang::Other {
        return line.to_string();
    }
    let chars: Vec<(usize, char)> = line.char_indices().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        let (at, c) = chars[i];
        let rest = &line[at..];
        let word_start = i == 0 || chars[i - 1].1.is_whitespace();
        if let Some(marker) = lang.line_comment()
            && rest.starts_with(marker)
            && (lang != Lang::Shell || word_start)
        {
            out.push_str(&style.paint(rest, &[DIM, ITALIC]));
            break;
        }
        if lang.quotes().contains(&c) {
            let mut j = i + 1;
            while j < chars.len() && chars[j].1 != c {
                j += if chars[j].1 == '\\' { 2 } else { 1 };
            }
            let end = chars.get(j + 1).map_or(line.len(), |(at, _)| *at);
            out.push_str(&style.paint(&line[at..end], &[GREEN]));
            i = j + 1;
            continue;
        }
        if c.is_alphabetic() || c == '_' {
            let mut j = i;
            while j < chars.len() && (chars[j].1.is_alphanumeric() || chars[j].1 == '_') {
                j += 1;
            }
            let end = chars.get(j).map_or(line.len(), |(at, _)| *at);
            let word = &line[at..end];
            if lang.keywords().contains(&word) {
                out.push_str(&style.paint(word, &[MAGENTA]));
            } else {
                out.push_str(word);
            }
            i = j;
            continue;
        }
        out.push(c);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn highlighting_knows_python_shell_and_js_comments_and_strings() {
        let c = Style::COLOR;
        assert_eq!(
            highlight("def f(): return 'x' # c", Lang::Python, c),
            "\x1b[35mdef\x1b[0m f(): \x1b[35mreturn\x1b[0m \x1b[32m'x'\x1b[0m \x1b[2;3m# c\x1b[0m"
        );
        // `$#` is not a comment in a shell.
        assert_eq!(
            highlight("echo $# # n", Lang::Shell, c),
            "echo $# \x1b[2;3m# n\x1b[0m"
        );
        assert_eq!(
            highlight("const s = `t`; // c", Lang::Js, c),
            "\x1b[35mconst\x1b[0m s = \x1b[32m`t`\x1b[0m; \x1b[2;3m// c\x1b[0m"
        );
        // An unclosed string runs to the end of the line.
        assert_eq!(
            highlight("let s = \"open", Lang::Rust, c),
            "\x1b[35mlet\x1b[0m s = \x1b[32m\"open\x1b[0m"
        );
    }
}
