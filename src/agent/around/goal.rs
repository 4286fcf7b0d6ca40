//! The session's goal (issue 30) as a per-run behaviour: when the agent stops, the goal-checker
//! decides whether the goal is met; if not, its reason is the next input, within the run's
//! turns and `agent.goal_timeout_s` (from the run's start); past them, or when the goal cannot
//! be checked, the run ends `goal_not_met` and the goal waits for the next run.

use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;

use super::{Around, Next, Stopped};
use crate::agent::goal::{self, Verdict};
use crate::agent::{AgentResponse, AgentStatus};
use crate::tools::ToolError;

/// Checks the session's goal each time the agent stops.
pub(in crate::agent) struct GoalCheck {
    deadline: Instant,
}

impl GoalCheck {
    /// A check for a run that may go on toward its goal for `timeout_s` seconds from now.
    pub fn new(timeout_s: f64) -> GoalCheck {
        GoalCheck {
            deadline: Instant::now() + Duration::from_secs_f64(timeout_s),
        }
    }
}

impl Around for GoalCheck {
    fn on_stop<'a>(
        &'a mut self,
        stopped: &'a Stopped<'a>,
    ) -> BoxFuture<'a, Result<Next, ToolError>> {
        Box::pin(async move {
            let held = stopped.held.cloned().unwrap_or_default();
            let verdict = goal::check(
                stopped.engine,
                stopped.ctx,
                stopped.answer,
                stopped.events,
                &held,
            )
            .await?;
            let reason = match verdict {
                None | Some(Verdict::Met(_)) => return Ok(Next::Pass),
                Some(Verdict::NotMet(reason)) => reason,
                Some(Verdict::Unchecked(why)) => {
                    return not_met(stopped, format!("{why}; the run stops here")).await;
                }
            };
            let cancelled = stopped.ctx.cancel.is_cancelled();
            if stopped.turns_left == 0 || Instant::now() >= self.deadline || cancelled {
                let message = out_of_room(&reason, stopped.turns_left, stopped.max_turns);
                return not_met(stopped, message).await;
            }
            let objective = stopped
                .engine
                .0
                .store
                .read_recent_async(&stopped.ctx.session_id)
                .await
                .ok()
                .and_then(|s| s.session.goal.map(|g| g.objective))
                .unwrap_or_default();
            Ok(Next::Continue(goal::next_input(&objective, &reason)))
        })
    }
}

/// Why a run whose goal is not met (`reason`) stops: its turns are used up (none left of
/// `max_turns`) or its time has passed.
fn out_of_room(reason: &str, turns_left: u32, max_turns: u32) -> String {
    let limit = if turns_left == 0 {
        format!("its {max_turns} model requests (--max-turns) are used up")
    } else {
        "agent.goal_timeout_s has passed".to_string()
    };
    format!("the goal is not met ({reason}) and {limit}")
}

/// Ends a run whose goal is not met: the goal is marked so (the next run takes it up) and the
/// answer says why.
async fn not_met(stopped: &Stopped<'_>, message: String) -> Result<Next, ToolError> {
    goal::give_up(stopped.engine, &stopped.ctx.session_id).await?;
    Ok(Next::Exit(Ok(Ok(AgentResponse {
        status: AgentStatus::GoalNotMet,
        message,
    }))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn a_goal_out_of_room_says_which_limit() {
        assert_eq!(
            out_of_room("tests fail", 0, 30),
            "the goal is not met (tests fail) and its 30 model requests (--max-turns) are used up"
        );
        assert_eq!(
            out_of_room("tests fail", 4, 30),
            "the goal is not met (tests fail) and agent.goal_timeout_s has passed"
        );
    }
}
