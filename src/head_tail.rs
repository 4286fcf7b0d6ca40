//! The head and tail of a stream in bounded memory ([`HeadTail`]), and the stream as the model
//! reads it: whole, or head and tail around a marker. A leaf: command output (`tools::output`)
//! and hook commands (`hooks`) both keep their streams in it. What the model reads of a cut
//! stream keeps the lines of its middle that say why a command failed ([`key_lines`]).

pub mod key_lines;

use std::collections::VecDeque;

use key_lines::{KeyLine, KeyLines};

/// The first `head_cap` and the last `tail_cap` bytes of a stream, its length, how many lines
/// it has and its key lines ([`KeyLines`]). While the stream is no longer than both together,
/// head and tail are the whole of it.
#[derive(Debug, Clone)]
pub struct HeadTail {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    head_cap: usize,
    tail_cap: usize,
    total: u64,
    keys: KeyLines,
}

impl HeadTail {
    pub fn new(head_cap: usize, tail_cap: usize) -> HeadTail {
        HeadTail {
            head: Vec::new(),
            tail: VecDeque::new(),
            head_cap,
            tail_cap,
            total: 0,
            keys: KeyLines::default(),
        }
    }

    /// A collector keeping `capacity` bytes: half head, half tail.
    pub fn with_capacity(capacity: usize) -> HeadTail {
        HeadTail::new(capacity / 2, capacity - capacity / 2)
    }

    pub fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        self.keys.push(bytes);
        let room = self.head_cap - self.head.len();
        if room > 0 {
            let (now, rest) = bytes.split_at(room.min(bytes.len()));
            self.head.extend_from_slice(now);
            bytes = rest;
        }
        if bytes.len() >= self.tail_cap {
            self.tail.clear();
            self.tail
                .extend(&bytes[bytes.len() - self.tail_cap..bytes.len()]);
            return;
        }
        let over = (self.tail.len() + bytes.len()).saturating_sub(self.tail_cap);
        self.tail.drain(..over);
        self.tail.extend(bytes);
    }

    /// The stream's length so far.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// How many lines the stream has so far (a last one without a newline counts).
    pub fn lines(&self) -> u64 {
        self.keys.lines()
    }

    /// The lines that say why a command failed, the first of them.
    pub fn keys(&self) -> &KeyLines {
        &self.keys
    }

    /// How many bytes it keeps at most.
    pub fn capacity(&self) -> usize {
        self.head_cap + self.tail_cap
    }

    /// Whether nothing was dropped.
    pub fn is_whole(&self) -> bool {
        self.total == (self.head.len() + self.tail.len()) as u64
    }

    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// Head and tail together: the whole stream when [`HeadTail::is_whole`].
    pub fn kept(&self) -> Vec<u8> {
        let mut all = Vec::with_capacity(self.head.len() + self.tail.len());
        all.extend_from_slice(&self.head);
        all.extend(self.tail.iter());
        all
    }

    /// The stream as text in at most about `budget` bytes: whole if it fits (and was kept
    /// whole), else its first and last bytes (half of `budget` each, fewer where a UTF-8
    /// sequence or a line was cut: see [`HeadTail::cut`]) around `None`, and the number of
    /// bytes left out. Bytes that are not UTF-8 become U+FFFD, as `String::from_utf8_lossy`
    /// makes them.
    pub fn text(&self, budget: usize) -> Shown {
        if self.is_whole() && self.total <= budget as u64 {
            return Shown::Whole(String::from_utf8_lossy(&self.kept()).into_owned());
        }
        let (head, tail) = self.cut(budget);
        Shown::Cut {
            head: String::from_utf8_lossy(&self.head[..head]).into_owned(),
            omitted: self.total - (head + tail) as u64,
            tail: String::from_utf8_lossy(&self.tail_bytes(tail)).into_owned(),
        }
    }

    /// How many bytes of the head and of the tail are shown within `budget`: at most half of
    /// it each, never part of a UTF-8 sequence, and, where a line ends near the cut, whole lines
    /// (the head ends after a newline, the tail starts after one).
    fn cut(&self, budget: usize) -> (usize, usize) {
        let head = &self.head[..self.head.len().min(budget / 2)];
        let mut head_len = complete_prefix(head);
        let near = head_len - (head_len / 2).min(ALIGN);
        if let Some(newline) = head[near..head_len].iter().rposition(|b| *b == b'\n') {
            head_len = near + newline + 1;
        }
        let tail_len = self.tail.len().min(budget - budget / 2);
        let skipped = self.tail.len() - tail_len;
        let tail = self.tail_bytes(tail_len);
        let mut skip = continuation_prefix(&tail);
        // What came just before the tail shown, if it is known: a newline there means the tail
        // starts a line.
        let before = match skipped {
            0 if self.is_whole() => Some(self.head.last().copied().unwrap_or(b'\n')),
            0 => None,
            n => self.tail.get(n - 1).copied(),
        };
        if before != Some(b'\n')
            && let Some(newline) = tail[..tail.len().min(ALIGN)]
                .iter()
                .position(|b| *b == b'\n')
                .filter(|n| *n < tail.len() / 2)
        {
            skip = skip.max(newline + 1);
        }
        (head_len, tail_len - skip)
    }

    /// The last `len` bytes of the tail.
    fn tail_bytes(&self, len: usize) -> Vec<u8> {
        self.tail
            .iter()
            .skip(self.tail.len() - len)
            .copied()
            .collect()
    }

    /// The key lines wholly inside what a cut to `head` and `tail` bytes leaves out.
    fn middle(&self, head: usize, tail: usize) -> Vec<&KeyLine> {
        let end = self.total - tail as u64;
        self.keys
            .kept()
            .iter()
            .filter(|l| l.start >= head as u64 && l.end <= end)
            .collect()
    }
}

/// How far back from a cut a newline is looked for.
const ALIGN: usize = 2048;

impl HeadTail {
    /// What is kept as text, head and tail on lines of their own when the middle was dropped.
    pub fn kept_text(&self) -> String {
        if self.is_whole() {
            return String::from_utf8_lossy(&self.kept()).into_owned();
        }
        match self.text(self.capacity()) {
            Shown::Whole(text) => text,
            Shown::Cut { head, tail, .. } => format!("{head}\n{tail}"),
        }
    }

    /// The stream for the model in about `budget` bytes: whole, or head and tail around a
    /// marker saying how many lines and bytes of `what` were left out and which log (if any)
    /// holds the whole. Key lines from the part left out (a third of `budget` at most) follow
    /// the marker, each as `line N: text`, ended by [`PICKED_END`].
    pub fn render(&self, budget: usize, what: &str, log: Option<&str>) -> String {
        if self.is_whole() && self.total <= budget as u64 {
            return String::from_utf8_lossy(&self.kept()).into_owned();
        }
        let (head, tail) = self.cut(budget);
        if self.middle(head, tail).is_empty() {
            return self.around(head, tail, what, log, &[]);
        }
        // The key lines come first: head and tail get what they leave.
        let room = (budget / 3).saturating_sub(PICKED_ROOM);
        let all: usize = self.keys.kept().iter().map(|l| picked_line(l).len()).sum();
        let reserve = all.min(room);
        let (head, tail) = self.cut(budget.saturating_sub(reserve + PICKED_ROOM));
        let middle = self.middle(head, tail);
        let picked = choose(&middle, reserve);
        self.around(head, tail, what, log, &picked)
    }

    /// Head and tail around the marker and the `picked` lines.
    fn around(
        &self,
        head: usize,
        tail: usize,
        what: &str,
        log: Option<&str>,
        picked: &[&KeyLine],
    ) -> String {
        let head_text = String::from_utf8_lossy(&self.head[..head]).into_owned();
        let tail_bytes = self.tail_bytes(tail);
        let newlines = |b: &[u8]| b.iter().filter(|c| **c == b'\n').count() as u64;
        let lines = self
            .keys
            .newlines()
            .saturating_sub(newlines(&self.head[..head]) + newlines(&tail_bytes));
        let bytes = self.total - (head + tail) as u64;
        let mut text = head_text;
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        let counted = match lines {
            0 => format!("{bytes} bytes"),
            1 => format!("1 line ({bytes} bytes)"),
            n => format!("{n} lines ({bytes} bytes)"),
        };
        text.push_str(&format!("[… {counted} of {what} omitted"));
        if let Some(name) = log {
            text.push_str(&format!("; the whole output is in {name}"));
        }
        if picked.is_empty() {
            text.push_str(" …]\n");
        } else {
            text.push_str(&format!("; {PICKED_FOLLOW} …]\n"));
            for line in picked {
                text.push_str(&picked_line(line));
            }
            text.push_str(PICKED_END);
            text.push('\n');
        }
        text.push_str(&String::from_utf8_lossy(&tail_bytes));
        text
    }
}

/// The end of a marker after which key lines of the part left out follow.
pub const PICKED_FOLLOW: &str = "the lines among them that say why it failed follow";

/// The line after the key lines of a part left out.
pub const PICKED_END: &str = "[… end of the lines picked …]";

/// Room for what comes with picked lines beside them.
const PICKED_ROOM: usize = PICKED_FOLLOW.len() + PICKED_END.len() + 8;

/// A key line as the model reads it.
fn picked_line(line: &KeyLine) -> String {
    format!("line {}: {}\n", line.number, line.text)
}

/// The lines of `middle` to show in `room` bytes: all if they fit, else the weightiest (a
/// cause before which test, which test before a summary, context last), earliest first, in
/// their order.
fn choose<'a>(middle: &[&'a KeyLine], room: usize) -> Vec<&'a KeyLine> {
    let len = |l: &KeyLine| picked_line(l).len();
    if middle.iter().map(|l| len(l)).sum::<usize>() <= room {
        return middle.to_vec();
    }
    let mut by_weight = middle.to_vec();
    by_weight.sort_by_key(|l| (std::cmp::Reverse(l.weight), l.number));
    let mut used = 0;
    let mut chosen: Vec<&KeyLine> = by_weight
        .into_iter()
        .filter(|l| {
            let fits = used + len(l) <= room;
            if fits {
                used += len(l);
            }
            fits
        })
        .collect();
    chosen.sort_by_key(|l| l.number);
    chosen
}

/// What [`excerpt`] keeps of a text's middle at most, in bytes.
const EXCERPT_MIDDLE: usize = 12_000;

/// `text` (a tool's result) for a front end, in bounded room: whole up to `whole` bytes; else
/// its first lines (about `head` bytes), its last lines (about `tail` bytes) and, from between,
/// the markers of cuts, the lines picked after them and the lines that say why a command
/// failed (at most 12,000 bytes of them); each run of other lines left out becomes a marker
/// `[… N lines (B bytes) omitted from this view …]`, so that every line is shown or counted.
pub fn excerpt(text: &str, whole: usize, head: usize, tail: usize) -> String {
    if text.len() <= whole {
        return text.to_string();
    }
    let mut head_end = head.min(text.len());
    while !text.is_char_boundary(head_end) {
        head_end -= 1;
    }
    head_end = text[..head_end].rfind('\n').map_or(head_end, |i| i + 1);
    let mut tail_start = text.len().saturating_sub(tail).max(head_end);
    while !text.is_char_boundary(tail_start) {
        tail_start += 1;
    }
    if let Some(i) = text[tail_start..]
        .find('\n')
        .filter(|_| tail_start > 0 && text.as_bytes()[tail_start - 1] != b'\n')
    {
        tail_start += i + 1;
    }
    let mut shown = text[..head_end].to_string();
    let (mut lines, mut bytes, mut used) = (0u64, 0usize, 0usize);
    let mut picking = false;
    for line in text[head_end..tail_start].split_inclusive('\n') {
        let bare = line.trim_end_matches('\n');
        let marker = bare.starts_with("[… ") && bare.ends_with(" …]");
        let keep = (marker || picking || key_lines::weight(bare).is_some())
            && used + line.len() <= EXCERPT_MIDDLE;
        if marker {
            picking = bare.ends_with(&format!("{PICKED_FOLLOW} …]"));
        }
        if !keep {
            lines += 1;
            bytes += line.len();
            continue;
        }
        if lines > 0 {
            shown.push_str(&omitted_from_view(lines, bytes));
            (lines, bytes) = (0, 0);
        }
        used += line.len();
        shown.push_str(line);
        if !line.ends_with('\n') {
            shown.push('\n');
        }
    }
    if lines > 0 {
        shown.push_str(&omitted_from_view(lines, bytes));
    }
    shown.push_str(&text[tail_start..]);
    shown
}

fn omitted_from_view(lines: u64, bytes: usize) -> String {
    let noun = if lines == 1 { "line" } else { "lines" };
    format!("[… {lines} {noun} ({bytes} bytes) omitted from this view …]\n")
}

/// Room for a marker of [`HeadTail::render`], its log's name aside.
pub const MARKER_ROOM: usize = 128;

/// A stream as the model reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shown {
    Whole(String),
    Cut {
        head: String,
        omitted: u64,
        tail: String,
    },
}

/// The length of `bytes` without a UTF-8 sequence cut off at its end.
fn complete_prefix(bytes: &[u8]) -> usize {
    let len = bytes.len();
    for i in (len.saturating_sub(3)..len).rev() {
        let b = bytes[i];
        if b & 0xC0 == 0x80 {
            continue;
        }
        let needs = match b {
            0xF0.. => 4,
            0xE0.. => 3,
            0xC0.. => 2,
            _ => 1,
        };
        return if len - i < needs { i } else { len };
    }
    len
}

/// How many continuation bytes (the rest of a sequence cut off before it) `bytes` starts with,
/// at most 3.
fn continuation_prefix(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .take(3)
        .take_while(|b| *b & 0xC0 == 0x80)
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn collect(input: &[u8], cuts: &[usize], head: usize, tail: usize) -> HeadTail {
        let mut kept = HeadTail::new(head, tail);
        let mut start = 0;
        for &cut in cuts {
            let end = (start + cut).min(input.len());
            kept.push(&input[start..end]);
            start = end;
        }
        kept.push(&input[start..]);
        kept
    }

    proptest! {
        #[test]
        fn keeps_the_first_and_last_bytes_in_bounded_memory(
            input in proptest::collection::vec(any::<u8>(), 0..2000),
            cuts in proptest::collection::vec(0usize..300, 0..20),
            head in 0usize..400,
            tail in 0usize..400,
        ) {
            let kept = collect(&input, &cuts, head, tail);
            prop_assert_eq!(kept.total(), input.len() as u64);
            prop_assert!(kept.head.len() <= head && kept.tail.len() <= tail);
            if input.len() <= head + tail {
                prop_assert!(kept.is_whole());
                prop_assert_eq!(kept.kept(), input);
            } else {
                prop_assert!(!kept.is_whole());
                prop_assert_eq!(&kept.head[..], &input[..head]);
                let tail_now: Vec<u8> = kept.tail.iter().copied().collect();
                prop_assert_eq!(&tail_now[..], &input[input.len() - tail..]);
            }
        }

        #[test]
        fn text_cut_anywhere_stays_whole_characters(
            text in "(\\PC|\\n){0,300}",
            cuts in proptest::collection::vec(0usize..50, 0..10),
            capacity in 4usize..200,
            budget in 4usize..200,
        ) {
            let kept = collect(text.as_bytes(), &cuts, capacity / 2, capacity - capacity / 2);
            match kept.text(budget) {
                Shown::Whole(whole) => prop_assert_eq!(whole, text),
                Shown::Cut { head, omitted, tail } => {
                    prop_assert!(text.starts_with(&head), "head {:?} of {:?}", head, text);
                    prop_assert!(text.ends_with(&tail), "tail {:?} of {:?}", tail, text);
                    prop_assert!(head.len() <= budget / 2 && tail.len() <= budget - budget / 2);
                    prop_assert_eq!(head.len() + tail.len() + omitted as usize, text.len());
                }
            }
        }
    }

    #[test]
    fn a_cut_never_splits_a_character_and_bytes_that_are_not_utf8_are_replaced() {
        // "é" is two bytes, "€" three: 2 bytes of head and tail keep "a" + half of "é" and
        // the end of "€" + "b".
        let mut kept = HeadTail::with_capacity(4);
        kept.push("aé€€b".as_bytes());
        assert_eq!(
            kept.text(4),
            Shown::Cut {
                head: "a".into(),
                omitted: 8,
                tail: "b".into(),
            }
        );
        assert_eq!(
            kept.render(4, "stdout", Some("out-1.log")),
            "a\n[… 8 bytes of stdout omitted; the whole output is in out-1.log …]\nb"
        );
        let mut binary = HeadTail::with_capacity(100);
        binary.push(b"ok \xff\xfe end");
        assert_eq!(
            binary.text(100),
            Shown::Whole("ok \u{FFFD}\u{FFFD} end".into())
        );
    }

    #[test]
    fn a_cut_in_the_middle_of_a_failure_keeps_its_lines_and_counts_the_rest() {
        let mut kept = HeadTail::with_capacity(30_000);
        let mut stream = String::new();
        for i in 1..=20_000 {
            if i == 10_000 {
                stream.push_str(
                    "---- parser::tests::unicode stdout ----\n\
                     thread 'parser::tests::unicode' panicked at src/parser.rs:88:9:\n\
                     assertion `left == right` failed\n  left: 3\n right: 4\n",
                );
            }
            stream.push_str(&format!("ok line {i}\n"));
        }
        for piece in stream.as_bytes().chunks(65_536) {
            kept.push(piece);
        }
        assert_eq!(kept.lines(), 20_005);
        let text = kept.render(30_000, "stdout", Some(".nop/sessions/s/out-1.log"));
        assert!(text.len() <= 30_000 + MARKER_ROOM, "{}", text.len());
        // Whole lines on both sides of the cut.
        assert!(text.starts_with("ok line 1\n") && text.ends_with("ok line 20000\n"));
        let marker = text
            .lines()
            .find(|l| l.starts_with("[… "))
            .expect("a marker");
        let omitted: u64 = marker
            .strip_prefix("[… ")
            .and_then(|m| m.split(' ').next())
            .and_then(|n| n.parse().ok())
            .expect("a count");
        let shown = text.lines().filter(|l| l.starts_with("ok line")).count() as u64;
        assert_eq!(shown + omitted, 20_005, "{marker}");
        assert!(
            marker.ends_with(&format!(
                "of stdout omitted; the whole output is in .nop/sessions/s/out-1.log; {PICKED_FOLLOW} …]"
            )),
            "{marker}"
        );
        for line in [
            "line 10000: ---- parser::tests::unicode stdout ----",
            "line 10002: assertion `left == right` failed",
            "line 10003:   left: 3",
            "line 10004:  right: 4",
            PICKED_END,
        ] {
            assert!(text.lines().any(|l| l == line), "{line}");
        }
        // Nothing to pick: one marker, as before.
        let mut plain = HeadTail::with_capacity(100);
        plain.push("a\nb\n".repeat(100).as_bytes());
        let text = plain.render(100, "stdout", None);
        assert!(
            text.contains("\n[… 151 lines (302 bytes) of stdout omitted …]\n"),
            "{text}"
        );
        assert_eq!(text.lines().count(), 200 - 151 + 1);
    }

    #[test]
    fn an_excerpt_keeps_the_cuts_and_the_failure_and_counts_the_rest() {
        let mut text = String::new();
        for i in 1..=300 {
            text.push_str(&format!("ok {i}\n"));
            if i == 100 {
                text.push_str("[… 9000 lines (90000 bytes) of stdout omitted …]\n");
            }
            if i == 150 {
                text.push_str("AssertionError: 2.0 != 3\n");
            }
        }
        assert_eq!(excerpt(&text, 10_000, 10, 20), text);
        let shown = excerpt(&text, 100, 100, 200);
        assert!(
            shown.starts_with("ok 1\n") && shown.ends_with("ok 300\n"),
            "{shown}"
        );
        let kept: Vec<&str> = shown
            .lines()
            .filter(|l| l.starts_with("[…") || !l.starts_with("ok"))
            .collect();
        assert_eq!(
            kept[1..4],
            [
                "[… 9000 lines (90000 bytes) of stdout omitted …]",
                "[… 50 lines (350 bytes) omitted from this view …]",
                "AssertionError: 2.0 != 3",
            ]
        );
        // Every line is shown or counted.
        let counted: u64 = shown
            .lines()
            .filter_map(|l| {
                l.strip_prefix("[… ")?
                    .split(' ')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum();
        let plain = shown.lines().filter(|l| !l.starts_with("[…")).count() as u64;
        assert_eq!(counted + plain, 300 + 9000 + 1);
    }
}
