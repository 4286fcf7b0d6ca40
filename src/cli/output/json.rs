//! `--output-format json`: one JSON object, the run's outcome, when it ends. The lines for a run
//! that did not start (refused, queued) are the same in both JSON formats.

use nop::protocol::events::Event;

/// The json renderer: silent until the `result` event.
pub struct Json;

impl Json {
    pub fn event(&mut self, event: &Event) {
        if let Event::Result(outcome) = event
            && let Ok(line) = serde_json::to_string(outcome)
        {
            println!("{line}");
        }
    }
}

/// A run refused because another session has priority.
pub fn refused(reason: &str) {
    println!(
        "{}",
        serde_json::json!({"type": "refused", "status": "refused", "reason": reason})
    );
}

/// A message queued for the process running session `id`, or a stop requested of it.
pub fn queued(id: &str, position: usize, priority: nop::queue::QueuePriority, stop: bool) {
    println!(
        "{}",
        serde_json::json!({"type": "queued", "session_id": id, "position": position, "priority": priority.as_str(), "stop": stop})
    );
}
