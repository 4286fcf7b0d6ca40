//! The message mix of a coding session, for the benchmarks that build long sessions: a user
//! turn now and then, assistant turns with a `read-file` call, and its result, whose text is
//! the bench's own (`result`, from the message's number).

use chrono::Utc;
use nop::protocol::{Message, Role, ToolCall};

/// Message `n` of the mix: a user turn, an assistant turn calling `read-file`, or that call's
/// result holding `result(n)`.
pub fn message(n: usize, result: impl Fn(usize) -> String) -> Message {
    let now = Utc::now();
    let call = |n: usize| ToolCall {
        id: format!("call_{n}"),
        name: "read-file".into(),
        arguments: serde_json::json!({"path": format!("src/module_{n}.rs")}),
        extra: Default::default(),
    };
    match n % 3 {
        0 => Message::new(
            Role::User,
            format!("Please look at step {n} of the refactor and keep the tests green."),
            now,
        ),
        1 => {
            let mut m = Message::new(
                Role::Assistant,
                "I'll read the file first, then run the tests. ".repeat(4),
                now,
            );
            m.tool_calls.push(call(n));
            m
        }
        _ => {
            let mut m = Message::new(Role::Tool, result(n), now);
            m.tool_call = Some(call(n - 1));
            m
        }
    }
}
