//! Advisor agents (seed 002 §2): decisions that need judgement — is the plan consistent with the
//! chat, should a failed call be retried, should the context be compacted — are made by ordinary
//! agents called like any subagent, whose JSON answers are validated here. Anything else
//! (invalid JSON, a schema mismatch, an error, a timeout) yields the safe default, a WARN in the
//! log, and the main flow goes on.
//!
//! Asking them is `consult.rs`'s (with the retry and consistency questions); running a
//! compaction is `compress.rs`'s. Both serve a [`Host`], the run that uses them: this module
//! depends on no part of the agent loop; the loop depends on it.

pub mod compaction;
mod compress;
mod consult;

pub use compress::{compact, wants_compaction};
pub use consult::{
    AdvisorAnswer, COMPRESSION_ADVISOR, CONSISTENCY_CHECKER, Checked, GOAL_CHECKER, Host,
    RETRY_ADVISOR, advise_retry, check_consistency, consult,
};

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The JSON object in an advisor's answer: the whole text, or the first `{…}` in it (models
/// like to wrap JSON in prose or code fences).
pub fn extract_json(text: &str) -> Option<Value> {
    let trimmed = text.trim();
    if let Ok(value @ Value::Object(_)) = serde_json::from_str(trimmed) {
        return Some(value);
    }
    let start = trimmed.find('{')?;
    let mut stream = serde_json::Deserializer::from_str(&trimmed[start..]).into_iter::<Value>();
    match stream.next() {
        Some(Ok(value @ Value::Object(_))) => Some(value),
        _ => None,
    }
}

/// Why an advisor's decision could not be had; the caller takes its safe default.
#[derive(Debug, thiserror::Error)]
pub enum AdvisorError {
    #[error("advisors are off here")]
    Off,
    /// The calling agent may not call it (seed 002 §2.1: advisors are called with `call-agent`).
    #[error("{advisor} was not consulted: {reason}")]
    Denied { advisor: String, reason: Refusal },
    #[error("{advisor} did not answer with a JSON object")]
    NotJson { advisor: String },
    #[error("{advisor} answered with JSON that does not match its schema: {detail}")]
    Schema { advisor: String, detail: String },
    /// Its session ended otherwise than completed (an error, a timeout, the user's stop).
    #[error("{advisor} {status}: {message}")]
    Ended {
        advisor: String,
        status: crate::protocol::SessionStatus,
        message: String,
    },
    #[error("{advisor} could not be called: {source}")]
    Call {
        advisor: String,
        source: crate::tools::ToolError,
    },
}

/// Why the calling agent may not consult an advisor: its rules for `call-agent`, read afresh.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error("the permission files cannot be read: {0}")]
    Unreadable(crate::permissions::PermissionError),
    /// A rule denies the call (and where that rule is, unless it is nop's own).
    #[error("{reason}{}", rule.as_ref().map(|r| format!(" ({r})")).unwrap_or_default())]
    Denied {
        reason: String,
        rule: Option<crate::permissions::Source>,
    },
    /// A rule asks a person, and nobody is asked about an advisor.
    #[error("calling `{tool}` needs approval ({rule})")]
    NeedsApproval {
        tool: String,
        rule: crate::permissions::Source,
    },
}

/// Why an advisor's answer is not a decision.
#[derive(Debug, thiserror::Error)]
pub enum DecisionError {
    #[error("the answer is not a JSON object")]
    NotJson,
    #[error("the answer does not match the schema: {0}")]
    Schema(#[from] serde_json::Error),
}

/// Parses an advisor's answer into its decision type; `Err` says what was wrong.
pub fn parse_decision<T: DeserializeOwned>(text: &str) -> Result<T, DecisionError> {
    let value = extract_json(text).ok_or(DecisionError::NotJson)?;
    Ok(serde_json::from_value(value)?)
}

/// consistency-checker (§2.4).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsistencyDecision {
    pub consistent: bool,
    #[serde(default)]
    pub inconsistencies: Vec<Inconsistency>,
    pub summary: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Inconsistency {
    #[serde(rename = "type")]
    pub kind: InconsistencyKind,
    pub task_id: String,
    pub description: String,
    pub severity: Severity,
    #[serde(default)]
    pub suggestion: String,
    /// The status the conversation shows for the task (for `status_mismatch` and
    /// `missing_in_plan`): what an automatic repair sets.
    #[serde(default)]
    pub expected_status: Option<crate::protocol::TaskStatus>,
    /// The task's title as the conversation names it (for `missing_in_plan`).
    #[serde(default)]
    pub title: Option<String>,
}

/// Applies consistency-checker's findings to `plan` (seed 002 §3.3, `consistency.auto_repair`):
/// a status the conversation contradicts is set to what it shows, a task the conversation works
/// on that the plan lacks is added. A task the plan has and the conversation never mentions
/// (`missing_in_chat`) is left: only a person knows whether it is still wanted. Returns one line
/// per change.
pub fn repair(plan: &mut crate::protocol::Plan, decision: &ConsistencyDecision) -> Vec<String> {
    let mut changes = Vec::new();
    for finding in &decision.inconsistencies {
        let Some(status) = finding.expected_status else {
            continue;
        };
        match finding.kind {
            InconsistencyKind::StatusMismatch => {
                if let Some(task) = plan.tasks.iter_mut().find(|t| t.id == finding.task_id)
                    && task.status != status
                {
                    changes.push(format!(
                        "task {}: status {} -> {}",
                        task.id, task.status, status
                    ));
                    task.status = status;
                }
            }
            InconsistencyKind::MissingInPlan => {
                let Some(title) = finding.title.as_deref().filter(|t| !t.trim().is_empty()) else {
                    continue;
                };
                if finding.task_id.trim().is_empty()
                    || plan.tasks.iter().any(|t| t.id == finding.task_id)
                {
                    continue;
                }
                changes.push(format!(
                    "task {}: added \"{}\" ({status})",
                    finding.task_id,
                    title.trim()
                ));
                plan.tasks.push(crate::protocol::Task {
                    id: finding.task_id.clone(),
                    title: title.trim().to_string(),
                    description: None,
                    status,
                });
            }
            InconsistencyKind::MissingInChat => {}
        }
    }
    changes
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InconsistencyKind {
    MissingInChat,
    MissingInPlan,
    StatusMismatch,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Low,
    Medium,
    High,
}

/// retry-advisor (§2.5).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetryDecision {
    pub should_retry: bool,
    pub reason: String,
    pub suggested_action: RetryAction,
    #[serde(default)]
    pub modified_params: Option<Value>,
}

impl RetryDecision {
    /// The safe default: no retry.
    pub fn default_no_retry(why: &str) -> RetryDecision {
        RetryDecision {
            should_retry: false,
            reason: why.to_string(),
            suggested_action: RetryAction::Skip,
            modified_params: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetryAction {
    Retry,
    ModifyParams,
    Skip,
    Abort,
}

/// goal-checker: whether a session's goal is met when the agent stops (issue 30).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GoalDecision {
    pub met: bool,
    #[serde(default)]
    pub reason: String,
}

/// compression-advisor (§2.6).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompressionDecision {
    pub should_compress: bool,
    pub reason: String,
    pub priority: Priority,
    #[serde(default)]
    pub suggestions: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    Low,
    Medium,
    High,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repair_sets_contradicted_statuses_adds_missing_tasks_and_leaves_the_rest() {
        use crate::protocol::{Plan, Task, TaskStatus};
        let task = |id: &str, status| Task {
            id: id.into(),
            title: format!("t{id}"),
            description: None,
            status,
        };
        let mut plan = Plan {
            tasks: vec![
                task("1", TaskStatus::Pending),
                task("2", TaskStatus::Completed),
            ],
        };
        let decision: ConsistencyDecision = parse_decision(
            r#"{"consistent": false, "summary": "x", "inconsistencies": [
              {"type": "status_mismatch", "taskId": "1", "description": "done in chat", "severity": "high", "expectedStatus": "completed"},
              {"type": "status_mismatch", "taskId": "9", "description": "no such task", "severity": "low", "expectedStatus": "failed"},
              {"type": "missing_in_chat", "taskId": "2", "description": "never done", "severity": "high", "expectedStatus": "pending"},
              {"type": "missing_in_plan", "taskId": "3", "description": "tests written", "severity": "medium", "expectedStatus": "in_progress", "title": "Write tests"},
              {"type": "missing_in_plan", "taskId": "4", "description": "no title", "severity": "low", "expectedStatus": "pending"},
              {"type": "status_mismatch", "taskId": "2", "description": "no status given", "severity": "low"}
            ]}"#,
        )
        .expect("decision");
        let changes = repair(&mut plan, &decision);
        assert_eq!(
            changes,
            vec![
                "task 1: status pending -> completed",
                "task 3: added \"Write tests\" (in_progress)"
            ]
        );
        let statuses: Vec<(&str, TaskStatus)> = plan
            .tasks
            .iter()
            .map(|t| (t.id.as_str(), t.status))
            .collect();
        assert_eq!(
            statuses,
            vec![
                ("1", TaskStatus::Completed),
                ("2", TaskStatus::Completed),
                ("3", TaskStatus::InProgress)
            ]
        );
        // Applying the same findings again changes nothing.
        assert!(repair(&mut plan, &decision).is_empty());
    }

    #[test]
    fn json_is_found_in_prose_and_fences() {
        let text = "Here you go:\n```json\n{\"shouldRetry\": true, \"reason\": \"timeout\", \"suggestedAction\": \"retry\"}\n```\nthanks";
        let d: RetryDecision = parse_decision(text).expect("decision");
        assert_eq!(d.suggested_action, RetryAction::Retry);
        assert!(parse_decision::<RetryDecision>("no json here").is_err());
        assert!(parse_decision::<RetryDecision>("{\"shouldRetry\": \"yes\"}").is_err());
        let e = parse_decision::<RetryDecision>(
            "{\"shouldRetry\": true, \"reason\": \"x\", \"suggestedAction\": \"maybe\"}",
        );
        assert!(e.is_err_and(|e| e.to_string().contains("maybe")));
        let c: ConsistencyDecision = parse_decision(r#"{"consistent": false, "inconsistencies": [{"type": "status_mismatch", "taskId": "1", "description": "d", "severity": "high", "suggestion": "s"}], "summary": "x"}"#).expect("consistency");
        assert_eq!(c.inconsistencies[0].kind, InconsistencyKind::StatusMismatch);
        let p: CompressionDecision = parse_decision(
            r#"{"shouldCompress": true, "reason": "long", "priority": "high", "suggestions": []}"#,
        )
        .expect("compression");
        assert!(p.should_compress);
    }
}
