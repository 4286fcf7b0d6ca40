//! One renderer per `--output-format` of a run's events: [`stream_json`] (every event, one line
//! each), [`json`] (the outcome at the end) and [`text`] (plain, where stdout is not a terminal;
//! on a terminal, text is the transcript of `transcript.rs`). `transcript::Renderer` picks one
//! and hands it each event; what is said of a run that did not start (refused, queued) and of a
//! chat batch (`nop run --message`) is here too, once per format.

pub mod json;
pub mod stream_json;
pub mod text;

use super::OutputFormat;
use nop::protocol::events::{Event, RunLimit, RunOutcome, RunStatus};

/// The command that goes on with a run that ended as `outcome` did, when one can: the hint
/// every renderer words (the engine reports how the run ended, not what to type).
pub fn continue_with(outcome: &RunOutcome) -> Option<String> {
    let id = &outcome.session_id;
    match (outcome.status, outcome.limit) {
        (RunStatus::WaitingInput | RunStatus::Cancelled, _) => {
            Some(format!("nop run --session {id} \"…\""))
        }
        (_, Some(RunLimit::MaxBudgetUsd)) | (RunStatus::BudgetExceeded, _) => {
            Some(format!("nop run --session {id} --max-budget-usd …"))
        }
        (RunStatus::GoalNotMet, _) | (_, Some(RunLimit::MaxTurns)) => {
            Some(format!("nop run --session {id}"))
        }
        (RunStatus::Completed | RunStatus::Error, None) => None,
    }
}

/// The outcome as the JSON formats give it: its fields, and `continue_with` when the session
/// can go on.
pub fn outcome_json(outcome: &RunOutcome) -> serde_json::Value {
    let mut value = serde_json::to_value(outcome).unwrap_or_default();
    if let (Some(command), Some(object)) = (continue_with(outcome), value.as_object_mut()) {
        object.insert("continue_with".into(), command.into());
    }
    value
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn outcome(status: RunStatus, limit: Option<RunLimit>) -> RunOutcome {
        RunOutcome {
            session_id: "s1".into(),
            status,
            final_message: "m".into(),
            question: None,
            limit,
            usage: Default::default(),
            total_cost_usd: None,
            turns: 1,
            tool_calls: 0,
            permission_denials: Vec::new(),
        }
    }

    #[test]
    fn the_command_to_go_on_follows_how_the_run_ended() {
        let cases = [
            (RunStatus::Completed, None, None),
            (RunStatus::Error, None, None),
            (
                RunStatus::Error,
                Some(RunLimit::MaxTurns),
                Some("nop run --session s1"),
            ),
            (
                RunStatus::BudgetExceeded,
                Some(RunLimit::MaxBudgetUsd),
                Some("nop run --session s1 --max-budget-usd …"),
            ),
            (RunStatus::GoalNotMet, None, Some("nop run --session s1")),
            (
                RunStatus::WaitingInput,
                None,
                Some("nop run --session s1 \"…\""),
            ),
            (
                RunStatus::Cancelled,
                None,
                Some("nop run --session s1 \"…\""),
            ),
        ];
        for (status, limit, expected) in cases {
            let outcome = outcome(status, limit);
            assert_eq!(continue_with(&outcome).as_deref(), expected, "{status:?}");
            let json = outcome_json(&outcome);
            assert_eq!(json["continue_with"].as_str(), expected);
            // The outcome's own fields come first, in their order.
            assert_eq!(
                json.as_object().unwrap().keys().next().unwrap(),
                "session_id"
            );
        }
    }
}
