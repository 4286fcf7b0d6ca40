//! `--output-format json`: one JSON object, the run's outcome, when it ends. The lines for a run
//! that did not start (refused, queued) and a chat batch's replies are the same in both JSON
//! formats.

use crate::cli::term::style::json_safe;
use nop::protocol::events::Event;

/// The json renderer: silent until the `result` event.
pub struct Json;

impl Json {
    pub fn event(&mut self, event: &Event) {
        if let Event::Result(outcome) = event {
            println!("{}", json_safe(super::outcome_json(outcome).to_string()));
        }
    }
}

/// The result of a run that failed before it could report one (its configuration, its
/// session, its model could not be had): an error result in the shape of every other, so
/// that a script reading `is_error` or `status` sees the failure.
pub fn failed(format: crate::cli::OutputFormat, message: &str) {
    if format == crate::cli::OutputFormat::CodexJson {
        // `codex exec --json`'s fatal error.
        let line = serde_json::json!({"type": "error", "message": message});
        println!("{}", json_safe(line.to_string()));
        return;
    }
    let line = serde_json::json!({
        "type": "result",
        "subtype": "error_during_execution",
        "is_error": true,
        "result": message,
        "num_turns": 0,
        "session_id": null,
        "status": "error",
        "final_message": message,
    });
    println!("{}", json_safe(line.to_string()));
}

/// A run refused a place on the session stack: the `refused` line, with Claude Code's error
/// fields (`is_error`, `subtype`, `result`) so that a script checking them sees nothing ran.
pub fn refused(reason: &str) {
    let line = serde_json::json!({
        "type": "refused",
        "status": "refused",
        "reason": reason,
        "subtype": "error_during_execution",
        "is_error": true,
        "result": reason,
    });
    println!("{}", json_safe(line.to_string()));
}

/// A chat batch's replies as one object (the same in both JSON formats).
pub fn batch_answered(event: &Event) {
    let Event::BatchAnswered {
        session_id,
        batch_id,
        via,
        replies,
    } = event
    else {
        return;
    };
    let replies: Vec<serde_json::Value> = replies
        .iter()
        .map(|r| serde_json::json!({"id": r.id, "content": r.content, "send_delay_seconds": r.send_delay_seconds, "order": r.order}))
        .collect();
    let line = serde_json::json!({"session_id": session_id, "batch_id": batch_id, "via": via, "replies": replies});
    println!("{}", json_safe(line.to_string()));
}

/// An event on its own line (`refused`, `queued`: what is said of a run that did not start).
pub fn event(event: &Event) {
    if let Ok(line) = serde_json::to_string(event).map(json_safe) {
        println!("{line}");
    }
}
