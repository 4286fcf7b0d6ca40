//! Finishing a run: its status from the agent's answer, the closing file checkpoint, the
//! priority stack told, the session-end hooks, the outcome.

use chrono::Utc;

use crate::agent::engine::Engine;
use crate::agent::error::RunError;
use crate::agent::runtime::Runtime;
use crate::agent::turn::{EventSink, TurnStats};
use crate::agent::{AgentResponse, AgentStatus, Interrupted};
use crate::hooks::{self, About, HookEvent, Mode};
use crate::protocol::SessionStatus;
use crate::protocol::events::{Event, RunOutcome, RunSpent, RunStatus, RunUsage};
use crate::protocol::session::ConsistencyChecked;
use crate::tools::ToolError;

use super::{Admitted, Answer, Opened};

/// How a run that did not fail ended: its status for the caller and for session.json, its
/// final message, or the question it waits on.
struct Ending {
    status: RunStatus,
    session_status: SessionStatus,
    message: String,
    question: Option<String>,
}

impl Ending {
    fn of(answer: Result<AgentResponse, Interrupted>, engine: &Engine) -> Ending {
        let (status, session_status, message, question) = match answer {
            Ok(response) => match response.status {
                AgentStatus::Completed => (
                    RunStatus::Completed,
                    SessionStatus::Completed,
                    response.message,
                    None,
                ),
                AgentStatus::WaitingInput => (
                    RunStatus::WaitingInput,
                    SessionStatus::WaitingInput,
                    String::new(),
                    Some(response.message),
                ),
                AgentStatus::Error => (
                    RunStatus::Error,
                    SessionStatus::Error,
                    response.message,
                    None,
                ),
                AgentStatus::GoalNotMet => (
                    RunStatus::GoalNotMet,
                    SessionStatus::Idle,
                    response.message,
                    None,
                ),
                // Nothing failed: the session waits for more budget (`nop run --session ID`).
                AgentStatus::OverBudget => (
                    RunStatus::BudgetExceeded,
                    SessionStatus::Idle,
                    format!(
                        "{}; raise --max-budget-usd (agent.max_budget_usd) to go on",
                        response.message
                    ),
                    None,
                ),
            },
            Err(Interrupted) => {
                let why = match engine.stopped_by() {
                    Some(word) => format!("stopped by the message \"{}\"", word.trim()),
                    None => "cancelled by user".to_string(),
                };
                (RunStatus::Cancelled, SessionStatus::Cancelled, why, None)
            }
        };
        Ending {
            status,
            session_status,
            message,
            question,
        }
    }
}

impl Runtime {
    /// Finishes a run: its status from the agent's answer, the closing file checkpoint, the
    /// priority stack told, the session-end hooks, and the outcome sent as `result`.
    pub(in crate::agent) async fn finish(
        &self,
        admitted: Admitted,
        opened: Opened,
        answer: Answer,
        stats: TurnStats,
        events: &EventSink,
    ) -> Result<RunOutcome, RunError> {
        let answer = match answer {
            Ok(answer) => answer,
            Err(fatal) => return Err(self.fail(&admitted, opened, fatal, &stats, events).await),
        };
        let ending = Ending::of(answer, &opened.engine);
        let Opened {
            engine,
            checkpoints,
            turn,
            consistent,
            held,
            ..
        } = opened;
        let session_id = &admitted.session_id;
        // The closing checkpoint and the final answer, when the run held it, are written with
        // the status: one write of session.json.
        let closing = self
            .close_files(
                session_id,
                checkpoints.as_ref(),
                turn,
                events,
                stats.tool_calls,
            )
            .await;
        let answer = held.take();
        let session_status = ending.session_status;
        self.store
            .update_async(session_id, Utc::now(), move |state| {
                if let Some(answer) = answer {
                    crate::agent::conversation::HeldAnswer::apply(answer, &mut state.session);
                }
                if let Some(closing) = closing {
                    closing.apply(&mut state.session, Utc::now());
                }
                state.session.status = session_status;
                if consistent {
                    state.session.consistency_checked = Some(ConsistencyChecked::of(
                        &state.plan,
                        &state.session.earlier_messages,
                        &state.session.messages,
                        Utc::now(),
                    ));
                }
                Ok(())
            })
            .await?;
        if let Some(c) = &admitted.coordinator {
            if session_status == SessionStatus::WaitingInput {
                c.set_waiting(session_id)?;
            } else {
                c.finish(session_id)?;
            }
        }
        self.end_hooks(&admitted, &ending).await;
        tracing::info!(session = %session_id, agent = %admitted.agent_name, op = "run", result = session_status.as_str(), turns = stats.turns, tool_calls = stats.tool_calls, "run ended");
        let outcome = self.outcome(admitted.session_id, ending, &engine, &stats);
        let _ = events.send(Event::Result(outcome.clone()));
        Ok(outcome)
    }

    /// Ends a run that failed: the session marked so as far as it can be (it may be
    /// unwritable), the priority stack told, the file checkpoint closed; the real failure
    /// reported.
    async fn fail(
        &self,
        admitted: &Admitted,
        opened: Opened,
        fatal: ToolError,
        stats: &TurnStats,
        events: &EventSink,
    ) -> RunError {
        let session_id = &admitted.session_id;
        let _ = opened.held.flush(&self.store, session_id).await;
        let _ = self
            .store
            .set_status_async(session_id, SessionStatus::Error)
            .await;
        if let Some(c) = &admitted.coordinator {
            let _ = c.finish(session_id);
        }
        self.end_turn(
            session_id,
            opened.checkpoints.as_ref(),
            opened.turn,
            events,
            stats.tool_calls,
        )
        .await;
        tracing::error!(session = %session_id, agent = %admitted.agent_name, op = "run", result = "error", "{fatal}");
        fatal.into()
    }

    /// The `notification` hooks (a question waits, or the task is done) and the session-end
    /// hooks.
    async fn end_hooks(&self, admitted: &Admitted, ending: &Ending) {
        let waiting = match (&ending.question, ending.session_status) {
            (Some(q), _) => Some(("question", format!("nop is waiting for your answer: {q}"))),
            (None, SessionStatus::Completed) => Some(("done", "nop finished the task".to_string())),
            _ => None,
        };
        let about = About {
            session_id: &admitted.session_id,
            agent: &admitted.agent_name,
        };
        if let Some((kind, text)) = waiting {
            let event = HookEvent::Notification {
                about,
                kind,
                message: text.into(),
            };
            hooks::fire(&self.config.hooks, &self.ws.root, &event).await;
        }
        let event = HookEvent::SessionEnd {
            about,
            status: ending.session_status.as_str(),
            mode: Mode::Run(Some(&ending.message)),
        };
        hooks::fire(&self.config.hooks, &self.ws.root, &event).await;
    }

    /// The run's outcome (`result`): how it ended, what it and its subagents and advisors
    /// spent, what was refused.
    fn outcome(
        &self,
        session_id: String,
        ending: Ending,
        engine: &Engine,
        stats: &TurnStats,
    ) -> RunOutcome {
        let called = engine.meter().called();
        let usage = RunUsage {
            own: stats.spent.into(),
            subagents: called.subagents.into(),
            advisors: called.advisors.into(),
        };
        let total: RunSpent = crate::protocol::Usage {
            own: stats.spent,
            ..called
        }
        .total()
        .into();
        RunOutcome {
            session_id,
            status: ending.status,
            final_message: ending.message,
            question: ending.question,
            usage,
            total_cost_usd: total.cost_usd,
            turns: stats.turns,
            tool_calls: stats.tool_calls,
            permission_denials: self.approver.denials(),
        }
    }
}
