//! Multi-message conversation (seed 001 §2.2): wait until the person has finished typing (a
//! random quiet period, reset by every new message), answer the whole batch at once, and reply in
//! several messages with delays, like a person chatting.
//!
//! The timing logic ([`Batcher`]) takes the time as an argument, so it is tested with an
//! injected clock; the front end (`nop chat`) supplies the real one.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The quiet period before a batch is answered.
#[derive(Debug, Clone)]
pub struct Batcher {
    min: Duration,
    max: Duration,
    pending: Vec<String>,
    deadline: Option<Duration>,
}

impl Batcher {
    pub fn new(min: Duration, max: Duration) -> Batcher {
        Batcher {
            min,
            max: max.max(min),
            pending: Vec::new(),
            deadline: None,
        }
    }

    /// A message arrived at `now` (time since any fixed origin); `random` in [0, 1] picks the
    /// wait. Returns the new deadline: every message starts the quiet period again.
    pub fn push(&mut self, text: String, now: Duration, random: f64) -> Duration {
        self.pending.push(text);
        let span = self.max.saturating_sub(self.min);
        let wait = self.min + span.mul_f64(random.clamp(0.0, 1.0));
        let deadline = now + wait;
        self.deadline = Some(deadline);
        deadline
    }

    /// Seconds left at `now`, if a batch is waiting.
    pub fn remaining(&self, now: Duration) -> Option<Duration> {
        self.deadline.map(|d| d.saturating_sub(now))
    }

    /// The batch, once its quiet period is over.
    pub fn take_if_ready(&mut self, now: Duration) -> Option<Vec<String>> {
        match self.deadline {
            Some(d) if now >= d && !self.pending.is_empty() => {
                self.deadline = None;
                Some(std::mem::take(&mut self.pending))
            }
            _ => None,
        }
    }

    pub fn is_waiting(&self) -> bool {
        !self.pending.is_empty()
    }
}

/// One reply of a batch, as the model gives it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    pub content: String,
    #[serde(default)]
    pub send_delay_seconds: f64,
}

#[derive(Debug, Deserialize)]
struct Replies {
    replies: Vec<Reply>,
}

/// Parses `{"replies":[{"content","send_delay_seconds"}]}` (also inside prose or a code fence);
/// delays are clamped to [0, `max_delay`]. `None` when the text is not of that shape.
pub fn parse_replies(text: &str, max_delay: f64) -> Option<Vec<Reply>> {
    let value = crate::advisors::extract_json(text)?;
    let replies: Replies = serde_json::from_value(value).ok()?;
    let replies: Vec<Reply> = replies
        .replies
        .into_iter()
        .filter(|r| !r.content.trim().is_empty())
        .map(|r| Reply {
            send_delay_seconds: if r.send_delay_seconds.is_finite() {
                r.send_delay_seconds.clamp(0.0, max_delay)
            } else {
                0.0
            },
            content: r.content,
        })
        .collect();
    (!replies.is_empty()).then_some(replies)
}

/// The instruction that asks the model for several replies (seed 001 §2.2.5).
pub fn batch_instruction(max_delay: f64) -> String {
    format!(
        "The person may have sent several messages in a row. Answer like a person chatting: one or several short replies, each about one message or topic, each sent send_delay_seconds after the first reply (0 for the first, then growing: a natural pause for typing and thinking, at most {max_delay}). Answer with one JSON object and nothing else:\n{{\"replies\": [{{\"content\": \"first reply\", \"send_delay_seconds\": 0}}, {{\"content\": \"second reply\", \"send_delay_seconds\": 2}}, {{\"content\": \"third reply\", \"send_delay_seconds\": 5}}]}}"
    )
}

pub use crate::protocol::events::ScheduledReply;

/// The times each reply is due. Delays count from the first reply (seed 001 §2.2.2
/// `send_delay_seconds`, "从第一条回复开始计算"), whose moment is `start`, the time the batch was
/// answered: delays 0, 2 and 3 put the replies at `start`, `start` + 2 s and `start` + 3 s. Replies
/// keep their order (seed 001 §2.2.1 "按顺序发送"): a delay smaller than the one before it is
/// raised to it, and stored so.
pub fn schedule(replies: &[Reply], start: DateTime<Utc>) -> Vec<ScheduledReply> {
    let mut delay: f64 = 0.0;
    replies
        .iter()
        .enumerate()
        .map(|(order, r)| {
            delay = delay.max(r.send_delay_seconds);
            ScheduledReply {
                id: crate::protocol::new_id(),
                content: r.content.clone(),
                send_delay_seconds: delay,
                order,
                scheduled_send_at: start
                    + chrono::Duration::milliseconds((delay * 1000.0).round() as i64),
            }
        })
        .collect()
}

/// How long from `now` until `reply` is due (zero if it is due already).
pub fn due_in(reply: &ScheduledReply, now: DateTime<Utc>) -> Duration {
    (reply.scheduled_send_at - now).to_std().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn the_quiet_period_resets_on_each_message() {
        let mut b = Batcher::new(S(5), S(15));
        assert_eq!(b.push("a".into(), S(0), 0.0), S(5));
        assert_eq!(b.take_if_ready(S(4)), None);
        // A second message at 4 s starts the wait again: 4 + 10 (random 0.5 of 5..15).
        assert_eq!(b.push("b".into(), S(4), 0.5), S(14));
        assert_eq!(b.take_if_ready(S(13)), None);
        assert_eq!(b.remaining(S(13)), Some(S(1)));
        assert_eq!(b.push("c".into(), S(13), 1.0), S(28));
        assert_eq!(b.take_if_ready(S(27)), None);
        assert_eq!(
            b.take_if_ready(S(28)),
            Some(vec!["a".to_string(), "b".to_string(), "c".to_string()])
        );
        assert!(!b.is_waiting());
        assert_eq!(b.take_if_ready(S(100)), None);
    }

    #[test]
    fn zero_wait_is_allowed() {
        let mut b = Batcher::new(S(0), S(0));
        b.push("now".into(), S(7), 0.3);
        assert_eq!(b.take_if_ready(S(7)), Some(vec!["now".to_string()]));
    }

    #[test]
    fn replies_are_validated_and_delays_clamped() {
        let r = parse_replies(r#"{"replies":[{"content":"hi","send_delay_seconds":0},{"content":"more","send_delay_seconds":99}]}"#, 10.0).expect("replies");
        assert_eq!(r[1].send_delay_seconds, 10.0);
        assert!(parse_replies("just text", 10.0).is_none());
        assert!(parse_replies(r#"{"replies": []}"#, 10.0).is_none());
        assert!(parse_replies(r#"{"answer": "x"}"#, 10.0).is_none());
        let at = chrono::DateTime::parse_from_rfc3339("2026-11-22T10:00:00Z")
            .expect("t")
            .with_timezone(&Utc);
        let s = schedule(&r, at);
        assert_eq!(s[1].scheduled_send_at, at + chrono::Duration::seconds(10));
        assert_eq!((s[0].order, s[1].order), (0, 1));
    }

    fn replies(delays: &[f64]) -> Vec<Reply> {
        delays
            .iter()
            .enumerate()
            .map(|(i, d)| Reply {
                content: format!("reply {i}"),
                send_delay_seconds: *d,
            })
            .collect()
    }

    #[test]
    fn delays_count_from_the_first_reply() {
        let at = chrono::DateTime::parse_from_rfc3339("2026-11-22T10:00:00Z")
            .expect("t")
            .with_timezone(&Utc);
        let s = schedule(&replies(&[0.0, 2.0, 3.0]), at);
        let offsets: Vec<i64> = s
            .iter()
            .map(|r| (r.scheduled_send_at - at).num_milliseconds())
            .collect();
        assert_eq!(offsets, vec![0, 2000, 3000], "not 0, 2 and 5 s");
        // What `nop chat` waits before showing each, from the moment the batch was answered…
        let waits: Vec<Duration> = s.iter().map(|r| due_in(r, at)).collect();
        assert_eq!(waits, vec![S(0), S(2), S(3)]);
        // …and a second later: one second less, never negative.
        let later = at + chrono::Duration::seconds(1);
        let waits: Vec<Duration> = s.iter().map(|r| due_in(r, later)).collect();
        assert_eq!(waits, vec![S(0), S(1), S(2)]);
    }

    #[test]
    fn a_delay_smaller_than_the_one_before_keeps_the_order() {
        let at = Utc::now();
        let s = schedule(&replies(&[1.0, 4.0, 2.5, 6.0]), at);
        let delays: Vec<f64> = s.iter().map(|r| r.send_delay_seconds).collect();
        assert_eq!(delays, vec![1.0, 4.0, 4.0, 6.0]);
        assert!(
            s.windows(2)
                .all(|w| w[0].scheduled_send_at <= w[1].scheduled_send_at)
        );
    }
}
