//! `--output-format stream-json --events claude`: the run's events in Claude Code's
//! stream-json shapes (`claude -p --output-format stream-json --verbose`), one per line: a
//! `system`/`init` line, an `assistant` line per text answer and per tool call (a `text` or
//! `tool_use` block), a `user` line per tool result (a `tool_result` block), and the `result`.
//! nop's warnings are `system` lines (`subtype: warning`); its other events have no shape there
//! and are left out.

use std::io::Write;

use serde_json::{Value, json};

use crate::cli::term::style::json_safe;
use nop::protocol::events::Event;

/// The Claude Code stream-json renderer.
#[derive(Default)]
pub struct ClaudeStream {
    session_id: Option<String>,
    model: String,
    /// The answer streamed since the request went out.
    text: String,
}

impl ClaudeStream {
    pub fn event(&mut self, event: &Event) {
        let line = match event {
            Event::SessionStarted {
                session_id, model, ..
            } => {
                self.session_id = Some(session_id.clone());
                self.model = model.clone();
                let cwd = std::env::current_dir().unwrap_or_default();
                Some(json!({
                    "type": "system",
                    "subtype": "init",
                    "session_id": session_id,
                    "model": model,
                    "cwd": cwd.display().to_string(),
                }))
            }
            Event::Text { delta } => {
                self.text.push_str(delta);
                None
            }
            // What streamed before a retry is void.
            Event::TurnStarted { .. } | Event::Retrying { .. } | Event::TextWasCalls { .. } => {
                self.text.clear();
                None
            }
            Event::Usage { .. } if !self.text.is_empty() => {
                let text = std::mem::take(&mut self.text);
                Some(self.assistant(json!({"type": "text", "text": text})))
            }
            Event::ToolCall {
                id,
                name,
                arguments,
            } => Some(self.assistant(
                json!({"type": "tool_use", "id": id, "name": name, "input": arguments}),
            )),
            Event::ToolResult { id, ok, output, .. } => Some(json!({
                "type": "user",
                "message": {
                    "role": "user",
                    "content": [{
                        "type": "tool_result",
                        "tool_use_id": id,
                        "content": output,
                        "is_error": !ok,
                    }],
                },
                "parent_tool_use_id": null,
                "session_id": self.session_id,
            })),
            Event::Warning { message } | Event::Untrusted { message, .. } => Some(json!({
                "type": "system",
                "subtype": "warning",
                "message": message,
                "session_id": self.session_id,
            })),
            Event::Result(outcome) => Some(super::outcome_json(outcome)),
            _ => None,
        };
        if let Some(line) = line {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{}", json_safe(line.to_string()));
            let _ = out.flush();
        }
    }

    /// An `assistant` line holding one content block.
    fn assistant(&self, block: Value) -> Value {
        json!({
            "type": "assistant",
            "message": {
                "type": "message",
                "role": "assistant",
                "model": self.model,
                "content": [block],
            },
            "parent_tool_use_id": null,
            "session_id": self.session_id,
        })
    }
}
