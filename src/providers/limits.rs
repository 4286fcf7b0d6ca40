//! The limits of a reply: the output cap each request carries, the one request that continues a
//! reply the cap cut, and the cut of a reply that repeats itself (a small model in a loop).

/// The smallest output cap sent, however full the context: a reply needs some room.
const MIN_OUTPUT: u64 = 256;

/// What the user asks the model when its reply was cut by the output cap.
pub(super) const CONTINUE: &str = "Your reply was cut off by the output limit. Continue exactly where it stopped, without repeating anything already written.";

/// The output cap of a request: `configured` (`provider.max_tokens`), at most an eighth of the
/// server's context `window` when one is known (a small model on a CPU writes 5–10 tokens a
/// second: a quarter of a 16k window was eight minutes of a loop), and at most what the prompt
/// leaves of it (with a floor of 256 tokens). `None`: send no cap (`provider.max_tokens: 0`, a server's own limit).
pub(super) fn output_cap(configured: u32, window: Option<u64>, prompt: u64) -> Option<u32> {
    let mut cap = u64::from(configured);
    if let Some(w) = window {
        let share = (w / 8).max(MIN_OUTPUT);
        let room = w.saturating_sub(prompt).max(MIN_OUTPUT);
        cap = if cap == 0 { share } else { cap.min(share) }.min(room);
    }
    (cap > 0).then(|| u32::try_from(cap).unwrap_or(u32::MAX))
}

/// Why a reply is not whole: the output cap cut it (OpenAI's `length`, Anthropic's
/// `max_tokens`), or nop cut it for repeating itself. `None` for a whole reply.
pub fn cut_reason(stop_reason: Option<&str>) -> Option<Cut> {
    match stop_reason? {
        "length" | "max_tokens" | "model_length" => Some(Cut::Cap),
        REPETITION => Some(Cut::Repetition),
        _ => None,
    }
}

/// How a reply was cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// The output cap (`max_tokens`) ended it.
    Cap,
    /// It repeated the same text over and over; the repetition was dropped.
    Repetition,
}

/// The stop reason nop gives a reply it cut for repeating itself.
pub(super) const REPETITION: &str = "repetition";

/// How often (in bytes of new text) the stream is checked for repetition.
pub(super) const CHECK_EVERY: usize = 256;

/// Where to cut `text` when it ends in a degenerate repetition: the same piece (1 to 1,024
/// bytes) at least ten times in a row over at least 600 bytes. The cut keeps one copy of the
/// piece (whole lines, when it holds a line break). `None` when the end of `text` does not repeat so.
pub(super) fn repetition_cut(text: &str) -> Option<usize> {
    const MIN_REPEATS: usize = 10;
    const MIN_SPAN: usize = 600;
    let bytes = text.as_bytes();
    let len = bytes.len();
    let tail_start = len.saturating_sub(16 * 1024);
    let tail = &bytes[tail_start..];
    for period in 1..=1024.min(tail.len() / MIN_REPEATS) {
        // How far back from the end the text repeats itself `period` bytes earlier.
        let matching = (period..tail.len())
            .rev()
            .take_while(|&i| tail[i] == tail[i - period])
            .count();
        let span = matching + period;
        if span >= MIN_REPEATS * period && span >= MIN_SPAN {
            let start = tail_start + (tail.len() - span);
            let mut keep = start + period;
            // A piece of whole lines is kept as whole lines, whichever line the run began in.
            if bytes[keep - 1] != b'\n'
                && bytes[start..keep].contains(&b'\n')
                && let Some(newline) = bytes[keep..].iter().position(|b| *b == b'\n')
            {
                keep += newline + 1;
            }
            while !text.is_char_boundary(keep) {
                keep += 1;
            }
            return Some(keep);
        }
    }
    None
}

/// Up to this context (tokens) the tools go out compact ([`compact_tools`]): 16k is what a
/// small model is served with on a laptop (llama-server `-c 16384`).
pub const SMALL_WINDOW: u64 = 16_384;

/// How long a compact tool description may be (characters).
const COMPACT_DESCRIPTION: usize = 160;

/// The tools as a small context can afford them: each description cut to its first sentence
/// (at most [`COMPACT_DESCRIPTION`] characters), the parameters' own descriptions left out
/// (their names, types, enums and what is required stay: the schema is whole).
pub fn compact_tools(tools: &[super::ToolSpec]) -> Vec<super::ToolSpec> {
    tools
        .iter()
        .map(|t| super::ToolSpec {
            name: t.name.clone(),
            description: first_sentence(&t.description),
            parameters: without_descriptions(&t.parameters),
        })
        .collect()
}

fn first_sentence(text: &str) -> String {
    let text = text.trim();
    let end = text
        .char_indices()
        .find(|(i, c)| {
            (*c == '.' || *c == '\n')
                && text[i + c.len_utf8()..]
                    .chars()
                    .next()
                    .is_none_or(char::is_whitespace)
        })
        .map_or(text.len(), |(i, c)| if c == '.' { i + 1 } else { i });
    let sentence = text[..end].trim();
    if sentence.chars().count() > COMPACT_DESCRIPTION {
        let cut: String = sentence.chars().take(COMPACT_DESCRIPTION - 1).collect();
        format!("{}…", cut.trim_end())
    } else {
        sentence.to_string()
    }
}

/// `schema` without the `description` of its properties (at any depth).
fn without_descriptions(schema: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match schema {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, v)| !(k.as_str() == "description" && v.is_string()))
                .map(|(k, v)| (k.clone(), without_descriptions(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_descriptions).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_tools_keep_the_first_sentence_and_the_whole_schema_but_its_descriptions() {
        let tool = super::super::ToolSpec {
            name: "shell".into(),
            description: "Runs a command in bash. Its output comes back cut to head and tail; \
                          version 1.2 of the rules applies."
                .into(),
            parameters: serde_json::json!({"type": "object", "properties": {
                "command": {"type": "string", "description": "the command"},
                "description": {"type": "string", "description": "a property named description stays"}
            }, "required": ["command"]}),
        };
        let compact = compact_tools(&[tool]);
        assert_eq!(compact[0].description, "Runs a command in bash.");
        let props = &compact[0].parameters["properties"];
        assert_eq!(props["command"], serde_json::json!({"type": "string"}));
        assert_eq!(props["description"], serde_json::json!({"type": "string"}));
        assert_eq!(
            compact[0].parameters["required"],
            serde_json::json!(["command"])
        );
        assert_eq!(first_sentence("v1.2 is out"), "v1.2 is out");
        assert!(first_sentence(&"x".repeat(500)).chars().count() <= COMPACT_DESCRIPTION);
    }

    #[test]
    fn the_cap_fits_the_window_and_the_room_the_prompt_leaves() {
        assert_eq!(output_cap(8192, None, 1000), Some(8192));
        assert_eq!(output_cap(8192, Some(128_000), 1000), Some(8192));
        assert_eq!(output_cap(8192, Some(8192), 1000), Some(1024));
        assert_eq!(output_cap(8192, Some(16_384), 1000), Some(2048));
        assert_eq!(output_cap(8192, Some(4096), 3700), Some(396));
        assert_eq!(output_cap(8192, Some(4096), 5000), Some(256));
        assert_eq!(output_cap(0, None, 1000), None);
        assert_eq!(output_cap(0, Some(4096), 100), Some(512));
    }

    #[test]
    fn a_reply_that_loops_is_cut_after_one_copy_of_its_loop() {
        let text = format!(
            "Here is the fix.\n{}",
            "I will now run the test.\n".repeat(40)
        );
        let keep = repetition_cut(&text);
        assert_eq!(
            keep.map(|k| &text[..k]),
            Some("Here is the fix.\nI will now run the test.\n")
        );
        let words = format!("ok {}", "the ".repeat(200));
        assert_eq!(repetition_cut(&words).map(|k| &words[..k]), Some("ok the"));
        let multibyte = format!("é{}", "ü".repeat(400));
        assert!(repetition_cut(&multibyte).is_some_and(|k| multibyte.is_char_boundary(k)));
    }

    #[test]
    fn ordinary_text_and_short_runs_are_not_repetition() {
        assert_eq!(repetition_cut("fn main() {}\n"), None);
        let separator = format!("# Title\n{}\ntext", "=".repeat(80));
        assert_eq!(repetition_cut(&separator), None);
        let few = "same line\n".repeat(5);
        assert_eq!(repetition_cut(&few), None);
        let code: String = (0..200).map(|i| format!("let x{i} = {i};\n")).collect();
        assert_eq!(repetition_cut(&code), None);
    }
}
