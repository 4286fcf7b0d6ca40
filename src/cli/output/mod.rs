//! One renderer per `--output-format` of a run's events: [`stream_json`] (every event, one line
//! each), [`json`] (the outcome at the end) and [`text`] (plain, where stdout is not a terminal;
//! on a terminal, text is the transcript of `transcript.rs`). `transcript::Renderer` picks one
//! and hands it each event; what is said of a run that did not start (refused, queued) and of a
//! chat batch (`nop run --message`) is here too, once per format.

pub mod json;
pub mod stream_json;
pub mod text;

use super::OutputFormat;
use nop::protocol::events::Event;

/// A chat batch's replies (`nop run --message`), in `format`: a `batch_answered` event; others
/// are not shown.
pub fn batch_answered(format: OutputFormat, event: &nop::protocol::events::Event) {
    match format {
        OutputFormat::Text | OutputFormat::Plain => text::batch_answered(event),
        OutputFormat::Json | OutputFormat::StreamJson => json::batch_answered(event),
    }
}

/// A run refused because another session has priority, in `format`.
pub fn refused(format: OutputFormat, reason: &str) {
    match format {
        OutputFormat::Text | OutputFormat::Plain => text::refused(reason),
        OutputFormat::Json | OutputFormat::StreamJson => json::event(&Event::Refused {
            status: nop::protocol::events::Refusal::Refused,
            reason: reason.to_string(),
        }),
    }
}

/// A message queued for the process running session `id` (at `position`), or a stop requested
/// of it, in `format`.
pub fn queued(
    format: OutputFormat,
    id: &str,
    position: usize,
    priority: nop::queue::QueuePriority,
    stop: bool,
) {
    match format {
        OutputFormat::Text | OutputFormat::Plain => text::queued(id, position, stop),
        OutputFormat::Json | OutputFormat::StreamJson => json::event(&Event::Queued {
            session_id: id.to_string(),
            position,
            priority,
            stop,
        }),
    }
}
