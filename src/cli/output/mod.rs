//! One renderer per `--output-format` of a run's events: [`stream_json`] (every event, one line
//! each), [`json`] (the outcome at the end) and [`text`] (plain, where stdout is not a terminal;
//! on a terminal, text is the transcript of `transcript.rs`). `transcript::Renderer` picks one
//! and hands it each event; what is said of a run that did not start (refused, queued) and of a
//! chat batch (`nop run --message`) is here too, once per format.

pub mod claude_stream;
pub mod codex_json;
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
        (RunStatus::WaitingInput | RunStatus::Cancelled, _) | (_, Some(RunLimit::RepeatedCall)) => {
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

/// Claude Code's `subtype` of a result (`claude -p --output-format json`) for how a run ended.
fn subtype(outcome: &RunOutcome) -> &'static str {
    match (outcome.status, outcome.limit) {
        (RunStatus::Completed, _) => "success",
        (_, Some(RunLimit::MaxTurns)) => "error_max_turns",
        (_, Some(RunLimit::MaxBudgetUsd)) | (RunStatus::BudgetExceeded, _) => {
            "error_max_budget_usd"
        }
        _ => "error_during_execution",
    }
}

/// The outcome as the JSON formats give it: Claude Code's result fields first (`type`,
/// `subtype`, `is_error`, `result`, `num_turns`, `duration_ms`, `duration_api_ms`, and its
/// names in `usage` and `permission_denials`), so that a filter written for `claude -p` works
/// unchanged; then nop's own, and `continue_with` when the session can go on. `is_error` is
/// true exactly when the exit code is not 0.
pub fn outcome_json(outcome: &RunOutcome) -> serde_json::Value {
    let mut object = serde_json::Map::new();
    object.insert("type".into(), "result".into());
    object.insert("subtype".into(), subtype(outcome).into());
    object.insert(
        "is_error".into(),
        (outcome.status != RunStatus::Completed).into(),
    );
    let result = match (&outcome.question, outcome.status) {
        (Some(question), RunStatus::WaitingInput) => question.clone(),
        _ => outcome.final_message.clone(),
    };
    object.insert("result".into(), result.into());
    object.insert("num_turns".into(), outcome.turns.into());
    if let serde_json::Value::Object(fields) = serde_json::to_value(outcome).unwrap_or_default() {
        object.extend(fields);
    }
    if let Some(serde_json::Value::Object(usage)) = object.get_mut("usage") {
        let copy = |from: &str| usage.get(from).cloned().unwrap_or(0.into());
        let (read, write) = (copy("cache_read_tokens"), copy("cache_write_tokens"));
        usage.insert("cache_read_input_tokens".into(), read);
        usage.insert("cache_creation_input_tokens".into(), write);
    }
    if let Some(serde_json::Value::Array(denials)) = object.get_mut("permission_denials") {
        for denial in denials.iter_mut().filter_map(|d| d.as_object_mut()) {
            let tool = denial.get("tool").cloned().unwrap_or_default();
            denial.insert("tool_name".into(), tool);
        }
    }
    if let Some(command) = continue_with(outcome) {
        object.insert("continue_with".into(), command.into());
    }
    serde_json::Value::Object(object)
}

/// A chat batch's replies (`nop run --message`), in `format`: a `batch_answered` event; others
/// are not shown.
pub fn batch_answered(format: OutputFormat, event: &nop::protocol::events::Event) {
    match format {
        OutputFormat::Text | OutputFormat::Plain => text::batch_answered(event),
        _ => json::batch_answered(event),
    }
}

/// A run refused because another session has priority, in `format`.
pub fn refused(format: OutputFormat, reason: &str) {
    match format {
        OutputFormat::Text | OutputFormat::Plain => text::refused(reason),
        _ => json::refused(reason),
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
        _ => json::event(&Event::Queued {
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
            sandbox: "namespaces".into(),
            usage: Default::default(),
            total_cost_usd: None,
            turns: 1,
            duration_ms: 0,
            duration_api_ms: 0,
            tool_calls: 0,
            permission_denials: Vec::new(),
        }
    }

    #[test]
    fn the_command_to_go_on_and_claude_codes_subtype_follow_how_the_run_ended() {
        let cases = [
            (RunStatus::Completed, None, None, "success"),
            (RunStatus::Error, None, None, "error_during_execution"),
            (
                RunStatus::Error,
                Some(RunLimit::MaxTurns),
                Some("nop run --session s1"),
                "error_max_turns",
            ),
            (
                RunStatus::Error,
                Some(RunLimit::RepeatedCall),
                Some("nop run --session s1 \"…\""),
                "error_during_execution",
            ),
            (
                RunStatus::BudgetExceeded,
                Some(RunLimit::MaxBudgetUsd),
                Some("nop run --session s1 --max-budget-usd …"),
                "error_max_budget_usd",
            ),
            (
                RunStatus::GoalNotMet,
                None,
                Some("nop run --session s1"),
                "error_during_execution",
            ),
            (
                RunStatus::WaitingInput,
                None,
                Some("nop run --session s1 \"…\""),
                "error_during_execution",
            ),
            (
                RunStatus::Cancelled,
                None,
                Some("nop run --session s1 \"…\""),
                "error_during_execution",
            ),
        ];
        for (status, limit, expected, subtype) in cases {
            let outcome = outcome(status, limit);
            assert_eq!(continue_with(&outcome).as_deref(), expected, "{status:?}");
            let json = outcome_json(&outcome);
            assert_eq!(json["continue_with"].as_str(), expected);
            assert_eq!(json["subtype"], subtype, "{status:?}");
            assert_eq!(json["is_error"], status != RunStatus::Completed);
            // Claude Code's fields come first; nop's own follow, unchanged.
            let keys: Vec<&String> = json.as_object().unwrap().keys().collect();
            assert_eq!(
                keys[..6],
                [
                    "type",
                    "subtype",
                    "is_error",
                    "result",
                    "num_turns",
                    "session_id"
                ]
            );
            assert_eq!(json["status"], serde_json::to_value(status).unwrap());
        }
    }

    #[test]
    fn a_question_is_the_result_and_usage_and_denials_carry_claude_codes_names_too() {
        let mut outcome = outcome(RunStatus::WaitingInput, None);
        outcome.question = Some("which file?".into());
        outcome.usage.own.cache_read_tokens = 7;
        outcome.permission_denials = vec![nop::protocol::events::Denial {
            tool: "shell".into(),
            reason: "denied by rule".into(),
        }];
        let json = outcome_json(&outcome);
        assert_eq!(json["result"], "which file?");
        assert_eq!(json["usage"]["cache_read_input_tokens"], 7);
        assert_eq!(json["usage"]["cache_read_tokens"], 7);
        assert_eq!(json["usage"]["cache_creation_input_tokens"], 0);
        assert_eq!(json["permission_denials"][0]["tool_name"], "shell");
        assert_eq!(json["permission_denials"][0]["tool"], "shell");
    }
}
