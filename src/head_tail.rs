//! The head and tail of a stream in bounded memory ([`HeadTail`]), and the stream as the model
//! reads it: whole, or head and tail around a marker. A leaf: command output (`tools::output`)
//! and hook commands (`hooks`) both keep their streams in it.

use std::collections::VecDeque;

/// The first `head_cap` and the last `tail_cap` bytes of a stream, and its length. While the
/// stream is no longer than both together, they are the whole of it.
#[derive(Debug, Clone)]
pub struct HeadTail {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    head_cap: usize,
    tail_cap: usize,
    total: u64,
}

impl HeadTail {
    pub fn new(head_cap: usize, tail_cap: usize) -> HeadTail {
        HeadTail {
            head: Vec::new(),
            tail: VecDeque::new(),
            head_cap,
            tail_cap,
            total: 0,
        }
    }

    /// A collector keeping `capacity` bytes: half head, half tail.
    pub fn with_capacity(capacity: usize) -> HeadTail {
        HeadTail::new(capacity / 2, capacity - capacity / 2)
    }

    pub fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
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
    /// sequence was cut) around `None`, and the number of bytes left out. Bytes that are not
    /// UTF-8 become U+FFFD, as `String::from_utf8_lossy` makes them.
    pub fn text(&self, budget: usize) -> Shown {
        if self.is_whole() && self.total <= budget as u64 {
            return Shown::Whole(String::from_utf8_lossy(&self.kept()).into_owned());
        }
        let head = &self.head[..self.head.len().min(budget / 2)];
        let head = &head[..complete_prefix(head)];
        let tail_len = self.tail.len().min(budget - budget / 2);
        let tail: Vec<u8> = self
            .tail
            .iter()
            .skip(self.tail.len() - tail_len)
            .copied()
            .collect();
        let tail = &tail[continuation_prefix(&tail)..];
        Shown::Cut {
            head: String::from_utf8_lossy(head).into_owned(),
            omitted: self.total - (head.len() + tail.len()) as u64,
            tail: String::from_utf8_lossy(tail).into_owned(),
        }
    }
}

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
    /// marker saying how much of `what` was left out and which log (if any) holds the whole.
    pub fn render(&self, budget: usize, what: &str, log: Option<&str>) -> String {
        match self.text(budget) {
            Shown::Whole(text) => text,
            Shown::Cut {
                head,
                omitted,
                tail,
            } => {
                let whole = match log {
                    Some(name) => format!("; the whole output is in {name}"),
                    None => String::new(),
                };
                format!("{head}\n[… {omitted} bytes of {what} omitted{whole} …]\n{tail}")
            }
        }
    }
}

/// Room for a marker of [`HeadTail::render`], its log's name aside.
pub const MARKER_ROOM: usize = 96;

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
}
