//! `--output-format json`: one JSON object, the run's outcome, when it ends. The lines for a run
//! that did not start (refused, queued) and a chat batch's replies are the same in both JSON
//! formats.

use crate::cli::term::style::json_safe;
use nop::protocol::events::Event;

/// The json renderer: silent until the `result` event.
pub struct Json;

impl Json {
    pub fn event(&mut self, event: &Event) {
        if let Event::Result(outcome) = event
            && let Ok(line) = serde_json::to_string(outcome).map(json_safe)
        {
            println!("{line}");
        }
    }
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

/// A run refused because another session has priority.
pub fn refused(reason: &str) {
    let line = serde_json::json!({"type": "refused", "status": "refused", "reason": reason});
    println!("{}", json_safe(line.to_string()));
}

/// A message queued for the process running session `id`, or a stop requested of it.
pub fn queued(id: &str, position: usize, priority: nop::queue::QueuePriority, stop: bool) {
    println!(
        "{}",
        serde_json::json!({"type": "queued", "session_id": id, "position": position, "priority": priority.as_str(), "stop": stop})
    );
}
