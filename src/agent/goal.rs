//! A goal that outlives one prompt (issue 30): `nop run --goal "…" [--until CMD]` and `/goal`
//! store an objective in session.json. Whenever the agent stops, the `goal-checker` advisor
//! (an ordinary advisor agent, asked through `call-agent` like the three of seed 002) decides
//! from the goal, the plan, the last answer and the `until` command's exit code and output tail
//! (run in the agent's sandbox) whether it is met; if not, its reason is the agent's next input,
//! within the run's turns, budget and `agent.goal_timeout_s`.

use chrono::Utc;
use serde_json::json;

use super::engine::Engine;
use super::turn::EventSink;
use crate::advisors::{GOAL_CHECKER, GoalDecision, Host, consult};
use crate::protocol::events::Event;
use crate::protocol::{Goal, GoalCheck, GoalStatus};
use crate::tools::{ToolContext, ToolError};

/// How much of the `until` command's output the goal-checker reads: its end.
const TAIL_BYTES: usize = 4_000;

/// What a goal asks for when it is set: the objective and the command that checks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoalSpec {
    pub objective: String,
    pub until: Option<String>,
}

impl GoalSpec {
    /// The goal as session.json keeps it, active from `now`.
    pub fn into_goal(self, now: chrono::DateTime<Utc>) -> Goal {
        Goal {
            objective: self.objective,
            until: self.until,
            set_at: now,
            status: GoalStatus::Active,
            checks: Vec::new(),
        }
    }
}

/// Sets `spec` as the goal of the existing session `id` (replacing any it had): for a message
/// delivered to a session that already exists. The text that tells the agent is
/// [`announce`]'s.
pub fn set(
    store: &crate::session::Store,
    id: &str,
    spec: GoalSpec,
) -> Result<Goal, crate::session::SessionError> {
    let goal = spec.into_goal(Utc::now());
    let kept = goal.clone();
    store.update(id, Utc::now(), move |state| {
        state.session.goal = Some(kept);
        Ok(())
    })?;
    Ok(goal)
}

/// Clears the goal of session `id` (`/goal clear`); whether it had an active one.
pub fn clear(
    store: &crate::session::Store,
    id: &str,
) -> Result<bool, crate::session::SessionError> {
    store.update(id, Utc::now(), |state| {
        Ok(match state.session.goal.as_mut() {
            Some(goal) if goal.status != GoalStatus::Cleared => {
                goal.status = GoalStatus::Cleared;
                true
            }
            _ => false,
        })
    })
}

/// The text that tells the agent its goal, after the user's prompt (or alone).
pub fn announce(goal: &Goal) -> String {
    let check = match &goal.until {
        Some(cmd) => format!(
            " It is checked when you stop: `{cmd}` is run (it should exit 0) and a goal-checker reads the result."
        ),
        None => {
            " It is checked when you stop, by a goal-checker reading your last answer and the plan."
                .to_string()
        }
    };
    format!("Goal: {}\n{check}", goal.objective)
}

/// What a check decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Verdict {
    Met(String),
    /// Not met: the reason is the agent's next input.
    NotMet(String),
    /// It could not be checked (no goal-checker, and no `until` to go by): going on would be
    /// blind.
    Unchecked(String),
}

/// Checks the session's active goal now that the agent stopped with `last_answer`; `None`
/// when there is none. The check is recorded in session.json and sent as an event.
pub(super) async fn check(
    engine: &Engine,
    ctx: &ToolContext,
    last_answer: &str,
    events: &EventSink,
    held: &super::conversation::HeldAnswer,
) -> Result<Option<Verdict>, ToolError> {
    let state = engine.store().read_recent_async(&ctx.session_id).await?;
    let Some(goal) = state
        .session
        .goal
        .clone()
        .filter(|g| g.status == GoalStatus::Active)
    else {
        return Ok(None);
    };
    // The check (and what follows it) writes the session: the answer goes first.
    held.flush(engine.store(), &ctx.session_id).await?;
    let (exit_code, tail) = match &goal.until {
        Some(cmd) => run_until(ctx, cmd).await,
        None => (None, None),
    };
    let arguments = json!({
        "goal": goal.objective,
        "until": goal.until,
        "exitCode": exit_code,
        "outputTail": tail,
        "plan": state.plan.to_xml(),
        "lastAnswer": last_answer,
        "checksSoFar": goal.checks.len(),
    });
    // The user asked for the goal: it is checked even where advisors are off.
    let mut asking = ctx.clone();
    asking.advisors = true;
    let decision = consult::<GoalDecision>(engine, &asking, GOAL_CHECKER, arguments).await;
    let verdict = verdict(decision, goal.until.as_deref(), exit_code);
    let (met, reason) = match &verdict {
        Verdict::Met(r) => (true, r.clone()),
        Verdict::NotMet(r) | Verdict::Unchecked(r) => (false, r.clone()),
    };
    let record = GoalCheck {
        at: Utc::now(),
        met,
        reason: reason.clone(),
        exit_code,
    };
    let checks = engine
        .store()
        .update_async(&ctx.session_id, Utc::now(), move |state| {
            let Some(goal) = state.session.goal.as_mut() else {
                return Ok(0);
            };
            goal.checks.push(record);
            if met {
                goal.status = GoalStatus::Met;
            }
            Ok(goal.checks.len())
        })
        .await?;
    tracing::info!(session = %ctx.session_id, op = "goal", met, checks, "{reason}");
    let _ = events.send(Event::GoalChecked {
        met,
        reason,
        checks: checks as u32,
    });
    Ok(Some(verdict))
}

/// What the goal-checker's `decision` (or its failure) and the `until` command's exit code
/// say: a command that fails is not met, whatever the checker read into the answer; without an
/// answer, the command's exit code decides, and without a command the goal is unchecked.
fn verdict(
    decision: Result<GoalDecision, impl std::fmt::Display>,
    until: Option<&str>,
    exit_code: Option<i32>,
) -> Verdict {
    let command_failed = until.is_some() && exit_code != Some(0);
    match decision {
        Ok(d) if d.met && command_failed => Verdict::NotMet(format!(
            "`{}` exited {}: {}",
            until.unwrap_or_default(),
            exit_code.map_or("without running".to_string(), |c| c.to_string()),
            d.reason
        )),
        Ok(d) if d.met => Verdict::Met(d.reason),
        Ok(d) => Verdict::NotMet(d.reason),
        Err(why) => match (until, exit_code) {
            (Some(cmd), Some(0)) => Verdict::Met(format!(
                "`{cmd}` exited 0 (no answer from goal-checker: {why})"
            )),
            (Some(cmd), Some(code)) => Verdict::NotMet(format!(
                "`{cmd}` exited {code} (no answer from goal-checker: {why})"
            )),
            _ => Verdict::Unchecked(format!("the goal could not be checked: {why}")),
        },
    }
}

/// The agent's next input when the goal is not met.
pub(super) fn next_input(objective: &str, reason: &str) -> String {
    format!("The goal is not met yet: {reason}\n\nKeep working toward the goal: {objective}")
}

/// Marks the session's goal as not met by this run (its turns, budget or time ran out); the
/// next run of the session takes it up again.
pub(super) async fn give_up(engine: &Engine, session_id: &str) -> Result<(), ToolError> {
    engine
        .store()
        .update_async(session_id, Utc::now(), |state| {
            if let Some(goal) = state.session.goal.as_mut()
                && goal.status == GoalStatus::Active
            {
                goal.status = GoalStatus::NotMet;
            }
            Ok(())
        })
        .await?;
    Ok(())
}

/// Runs the `until` command as the shell tool runs commands (the agent's sandbox, its time
/// limit): its exit code and the end of its output (stdout, then stderr).
async fn run_until(ctx: &ToolContext, command: &str) -> (Option<i32>, Option<String>) {
    match crate::tools::shell::run_confined(ctx, command, &ctx.root, None, ctx.timeout).await {
        Ok(ran) => {
            let mut text = ran.output.stdout.kept_text();
            let err = ran.output.stderr.kept_text();
            if !err.trim().is_empty() {
                text.push_str("\n[stderr]\n");
                text.push_str(&err);
            }
            let start = text.len().saturating_sub(TAIL_BYTES);
            let start = (start..text.len())
                .find(|i| text.is_char_boundary(*i))
                .unwrap_or(text.len());
            (ran.status.code(), Some(text[start..].to_string()))
        }
        Err(e) => (None, Some(format!("the command could not run: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn said(met: bool, reason: &str) -> Result<GoalDecision, String> {
        Ok(GoalDecision {
            met,
            reason: reason.to_string(),
        })
    }

    #[test]
    fn a_failing_command_outweighs_the_checker_and_decides_without_it() {
        assert_eq!(
            verdict(said(true, "looks done"), Some("cargo test"), Some(101)),
            Verdict::NotMet("`cargo test` exited 101: looks done".into())
        );
        assert_eq!(
            verdict(said(true, "done"), Some("cargo test"), Some(0)),
            Verdict::Met("done".into())
        );
        assert_eq!(
            verdict(said(false, "two left"), None, None),
            Verdict::NotMet("two left".into())
        );
        let silent = || Err::<GoalDecision, _>("timed out");
        assert_eq!(
            verdict(silent(), Some("make"), Some(0)),
            Verdict::Met("`make` exited 0 (no answer from goal-checker: timed out)".into())
        );
        assert_eq!(
            verdict(silent(), Some("make"), Some(2)),
            Verdict::NotMet("`make` exited 2 (no answer from goal-checker: timed out)".into())
        );
        assert_eq!(
            verdict(silent(), None, None),
            Verdict::Unchecked("the goal could not be checked: timed out".into())
        );
    }
}
