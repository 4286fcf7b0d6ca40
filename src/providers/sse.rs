//! A server-sent-events parser (the subset model APIs use): `event:` and `data:` fields, comments,
//! events separated by a blank line, lines ending in `\n`, `\r\n` or `\r`, input arriving in
//! arbitrary pieces. An event left incomplete when the stream ends is dropped, as the SSE
//! specification says; callers detect the missing end of stream themselves.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    pub event: Option<String>,
    pub data: String,
}

#[derive(Debug, Default)]
pub struct SseParser {
    buf: Vec<u8>,
    event: Option<String>,
    data: Vec<String>,
}

impl SseParser {
    pub fn new() -> SseParser {
        SseParser::default()
    }

    /// Feeds bytes; returns the events completed by them.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        self.buf.extend_from_slice(bytes);
        let mut events = Vec::new();
        let mut start = 0;
        let mut i = 0;
        while i < self.buf.len() {
            let b = self.buf[i];
            if b == b'\n' || b == b'\r' {
                // A `\r` at the very end may be the first half of `\r\n`: wait for more.
                if b == b'\r' && i + 1 == self.buf.len() {
                    break;
                }
                let line = String::from_utf8_lossy(&self.buf[start..i]).into_owned();
                if b == b'\r' && self.buf.get(i + 1) == Some(&b'\n') {
                    i += 1;
                }
                i += 1;
                start = i;
                if let Some(event) = self.line(&line) {
                    events.push(event);
                }
            } else {
                i += 1;
            }
        }
        self.buf.drain(..start);
        events
    }

    fn line(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            if self.data.is_empty() && self.event.is_none() {
                return None;
            }
            let data = std::mem::take(&mut self.data).join("\n");
            return Some(SseEvent {
                event: self.event.take(),
                data,
            });
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "data" => self.data.push(value.to_string()),
            "event" => self.event = Some(value.to_string()),
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    const STREAM: &str = ": comment\r\nevent: message_start\r\ndata: {\"a\":1}\r\n\r\ndata: first\ndata: second\n\ndata:no-space\r\rdata: [DONE]\n\ndata: cut";

    fn expected() -> Vec<SseEvent> {
        vec![
            SseEvent {
                event: Some("message_start".into()),
                data: "{\"a\":1}".into(),
            },
            SseEvent {
                event: None,
                data: "first\nsecond".into(),
            },
            SseEvent {
                event: None,
                data: "no-space".into(),
            },
            SseEvent {
                event: None,
                data: "[DONE]".into(),
            },
        ]
    }

    #[test]
    fn parses_whole_input() {
        let mut parser = SseParser::new();
        assert_eq!(parser.push(STREAM.as_bytes()), expected());
    }

    /// Every way of cutting the stream into two or three pieces gives the same events.
    #[test]
    fn any_chunking_gives_the_same_events() {
        let bytes = STREAM.as_bytes();
        for i in 0..=bytes.len() {
            for j in i..=bytes.len() {
                let mut parser = SseParser::new();
                let mut events = parser.push(&bytes[..i]);
                events.extend(parser.push(&bytes[i..j]));
                events.extend(parser.push(&bytes[j..]));
                assert_eq!(events, expected(), "cut at {i} and {j}");
            }
        }
    }

    #[test]
    fn byte_at_a_time() {
        let mut parser = SseParser::new();
        let events: Vec<SseEvent> = STREAM
            .as_bytes()
            .iter()
            .flat_map(|b| parser.push(&[*b]))
            .collect();
        assert_eq!(events, expected());
    }
}
