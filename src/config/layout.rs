//! The layout of a block-style YAML file as lines: each line's indent, key and kind, and where
//! a dotted key is written (or would go). Read by `nop config set` (`edit.rs`) and by the
//! errors that point at a key's line (`file.rs`).

use crate::protocol::TextPos;

/// One line of the file as the edit sees it.
pub(super) struct Line<'a> {
    pub text: &'a str,
    pub indent: usize,
    /// Neither blank nor a comment.
    pub content: bool,
    /// A sequence item (`- …`).
    pub item: bool,
    /// The mapping key it starts with, unquoted, and the byte offset of its colon.
    pub key: Option<(String, usize)>,
}

pub(super) fn parse_lines(text: &str) -> Vec<Line<'_>> {
    text.split('\n')
        .map(|text| {
            let body = text.trim_start_matches(' ');
            let indent = text.len() - body.len();
            let trimmed = body.trim();
            let content = !trimmed.is_empty() && !trimmed.starts_with('#');
            let item = trimmed == "-" || trimmed.starts_with("- ");
            let key = if content && !item {
                key_of(body).map(|(k, colon)| (k, colon + indent))
            } else {
                None
            };
            Line {
                text,
                indent,
                content,
                item,
                key,
            }
        })
        .collect()
}

/// `key: …` → the key and the offset of its colon; quoted keys are unquoted.
pub(super) fn key_of(body: &str) -> Option<(String, usize)> {
    let (key, rest_at) = match body.chars().next()? {
        quote @ ('"' | '\'') => {
            let end = body[1..].find(quote)? + 1;
            (body[1..end].to_string(), end + 1)
        }
        '[' | '{' | '&' | '*' | '!' | '|' | '>' | '%' | '@' | '`' => return None,
        _ => {
            let colon = body
                .match_indices(':')
                .map(|(i, _)| i)
                .find(|&i| body[i + 1..].is_empty() || body[i + 1..].starts_with([' ', '\r']))?;
            let key = body[..colon].trim_end();
            if key.contains(" #") {
                return None;
            }
            (key.to_string(), colon)
        }
    };
    let colon = rest_at + body[rest_at..].find(':')?;
    body[rest_at..colon]
        .trim()
        .is_empty()
        .then_some((key, colon))
}

/// Where the key `path` is in the file, or where it would go.
pub(super) enum Place {
    /// The key's line, and the last line of its value (a list under it).
    Found { line: usize, last: usize },
    /// `path[depth..]` is missing: insert it after line `after` (`None`: at the end of the
    /// file) at `indent`. `parent` is the line of `path[depth - 1]`.
    Missing {
        depth: usize,
        after: Option<usize>,
        indent: usize,
        parent: Option<usize>,
    },
}

pub(super) fn locate(lines: &[Line<'_>], path: &[&str]) -> Place {
    let (mut start, mut end, mut parent_indent) = (0, lines.len(), None::<usize>);
    for (depth, part) in path.iter().enumerate() {
        let parent = (depth > 0).then(|| start - 1);
        let children: Vec<usize> = (start..end).filter(|&i| lines[i].content).collect();
        let (Some(&first), Some(&last)) = (children.first(), children.last()) else {
            return Place::Missing {
                depth,
                after: parent,
                indent: parent_indent.map_or(0, |p| p + 2),
                parent,
            };
        };
        let indent = lines[first].indent;
        let found = children.iter().copied().find(|&i| {
            lines[i].indent == indent && lines[i].key.as_ref().is_some_and(|(k, _)| k == part)
        });
        let Some(line) = found else {
            return Place::Missing {
                depth,
                after: parent.map(|_| last),
                indent,
                parent,
            };
        };
        // Its block: the content lines indented deeper, and list items at its own indent.
        let mut block_last = line;
        for (j, l) in lines.iter().enumerate().take(end).skip(line + 1) {
            if !l.content {
                continue;
            }
            if l.indent > indent || (l.indent == indent && l.item) {
                block_last = j;
            } else {
                break;
            }
        }
        if depth + 1 == path.len() {
            return Place::Found {
                line,
                last: block_last,
            };
        }
        (start, end, parent_indent) = (line + 1, block_last + 1, Some(indent));
    }
    Place::Missing {
        depth: path.len(),
        after: None,
        indent: 0,
        parent: None,
    }
}

/// Where `key` (dotted) is written in `text`: its line and column, 1-based.
pub(crate) fn position_of(text: &str, key: &str) -> Option<TextPos> {
    let lines = parse_lines(text);
    let parts: Vec<&str> = key.split('.').collect();
    match locate(&lines, &parts) {
        Place::Found { line, .. } => Some(TextPos {
            line: line + 1,
            column: lines[line].indent + 1,
        }),
        Place::Missing { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_of_keys() {
        let text = "log:\n  level: info\nagent:\n  # x\n  max_turns: -5\n";
        assert_eq!(
            position_of(text, "agent.max_turns"),
            Some(TextPos { line: 5, column: 3 })
        );
        assert_eq!(position_of(text, "agent.default"), None);
    }
}
