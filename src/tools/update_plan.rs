//! `update-plan`: replaces the session's plan.xml with the given tasks.

use chrono::Utc;
use schemars::JsonSchema;
use serde::Deserialize;

use super::{ToolContext, ToolEffect, ToolError, ToolOutput, TypedTool};
use crate::protocol::{Plan, Task, TaskStatus};
use crate::tools::ToolErrorKind;

pub struct UpdatePlan;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdatePlanArgs {
    /// The whole plan, in order; tasks left out are removed.
    tasks: Vec<PlanTask>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanTask {
    /// A short stable id, e.g. "1" or "tests".
    id: String,
    /// What the task is, in a few words.
    title: String,
    /// More detail, if useful.
    #[serde(default)]
    description: Option<String>,
    /// pending, in_progress, completed or failed.
    status: TaskStatus,
}

impl TypedTool for UpdatePlan {
    type Args = UpdatePlanArgs;
    const NAME: &'static str = "update-plan";
    const MUTATING: bool = false;
    const DESCRIPTION: &'static str = "Set the session's plan: the full list of tasks with their status (pending, in_progress, completed, failed). Keep it current as you work; the user sees it with `nop plan`.";

    async fn run(&self, args: UpdatePlanArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let mut seen = std::collections::HashSet::new();
        for task in &args.tasks {
            if task.id.trim().is_empty() {
                return Err(ToolError::model(
                    ToolErrorKind::InvalidArguments,
                    "a task has an empty id",
                ));
            }
            if !seen.insert(task.id.as_str()) {
                return Err(ToolError::model(
                    ToolErrorKind::InvalidArguments,
                    format!("task id `{}` is used twice", task.id),
                ));
            }
        }
        let plan = Plan {
            tasks: args
                .tasks
                .into_iter()
                .map(|t| Task {
                    id: t.id,
                    title: t.title,
                    description: t.description.filter(|d| !d.is_empty()),
                    status: t.status,
                })
                .collect(),
        };
        let summary = plan
            .tasks
            .iter()
            .map(|t| format!("{} [{}] {}", t.id, t.status, t.title))
            .collect::<Vec<_>>()
            .join("\n");
        let stored = plan.clone();
        ctx.store
            .update_async(&ctx.session_id, Utc::now(), move |state| {
                state.plan = stored;
                Ok(())
            })
            .await?;
        Ok(ToolOutput {
            content: format!("plan updated:\n{summary}"),
            effect: ToolEffect::PlanChanged(plan),
            outcome: super::ToolOutcome::default(),
        })
    }
}
