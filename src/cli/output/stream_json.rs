//! `--output-format stream-json`: every event as one JSON line, flushed as it happens.

use std::io::Write;

use crate::cli::term::style::json_safe;
use nop::protocol::events::Event;

/// The stream-json renderer.
pub struct StreamJson;

impl StreamJson {
    pub fn event(&mut self, event: &Event) {
        // A command's live tail would swamp the stream; its result carries the output.
        if matches!(event, Event::ToolOutput { .. }) {
            return;
        }
        let line = match event {
            Event::Result(outcome) => Some(super::outcome_json(outcome).to_string()),
            _ => serde_json::to_string(event).ok(),
        };
        if let Some(line) = line.map(json_safe) {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        }
    }
}
