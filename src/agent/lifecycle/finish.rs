//! Finishing a run: its status from the agent's answer, the closing write (with what the
//! run's behaviours add: the closing file checkpoint, what the checks on load found), the
//! priority stack told, the behaviours told (the session-end hooks), the outcome.

use crate::agent::around::{self, Around, Closing};
use crate::agent::engine::Engine;
use crate::agent::error::RunError;
use crate::agent::runtime::Runtime;
use crate::agent::turn::{EventSink, TurnStats};
use crate::agent::{AgentResponse, AgentStatus, Interrupted};
use crate::hooks::Mode;
use crate::protocol::SessionStatus;
use crate::protocol::events::{Event, RunLimit, RunOutcome, RunSpent, RunStatus, RunUsage};
use crate::tools::ToolError;

use super::{Admitted, Answer, Opened};

/// How a run that did not fail ended: its status for the caller and for session.json, its
/// final message, or the question it waits on.
struct Ending {
    status: RunStatus,
    session_status: SessionStatus,
    message: String,
    question: Option<String>,
    limit: Option<RunLimit>,
}

impl Ending {
    fn of(answer: Result<AgentResponse, Interrupted>, engine: &Engine) -> Ending {
        let mut limit = None;
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
                AgentStatus::MaxTurns => {
                    limit = Some(RunLimit::MaxTurns);
                    (
                        RunStatus::Error,
                        SessionStatus::Error,
                        response.message,
                        None,
                    )
                }
                AgentStatus::RepeatedCall => {
                    limit = Some(RunLimit::RepeatedCall);
                    (
                        RunStatus::Error,
                        SessionStatus::Error,
                        response.message,
                        None,
                    )
                }
                AgentStatus::GoalNotMet => (
                    RunStatus::GoalNotMet,
                    SessionStatus::Idle,
                    response.message,
                    None,
                ),
                // Nothing failed: the session waits for more budget.
                AgentStatus::OverBudget => {
                    limit = Some(RunLimit::MaxBudgetUsd);
                    (
                        RunStatus::BudgetExceeded,
                        SessionStatus::Idle,
                        response.message,
                        None,
                    )
                }
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
            limit,
        }
    }
}

impl Runtime {
    /// Finishes a run: its status from the agent's answer, the closing file checkpoint, the
    /// priority stack told, the session-end hooks, and the outcome sent as `result`.
    pub(in crate::agent) async fn finish(
        &self,
        mut admitted: Admitted,
        opened: Opened,
        answer: Answer,
        stats: TurnStats,
        started: std::time::Instant,
        events: &EventSink,
    ) -> Result<RunOutcome, RunError> {
        let answer = match answer {
            Ok(answer) => answer,
            Err(fatal) => return Err(self.fail(&admitted, opened, fatal, &stats, events).await),
        };
        let ending = Ending::of(answer, &opened.engine);
        let Opened {
            engine,
            held,
            mut behaviours,
            ..
        } = opened;
        let session_id = &admitted.session_id;
        let closing = Closing {
            session_id,
            agent: &admitted.agent_name,
            mode: Mode::Run(Some(&ending.message)),
            status: ending.session_status,
            question: ending.question.as_deref(),
            failed: false,
            tool_calls: stats.tool_calls,
            events,
        };
        // The final answer, when the run held it, what the behaviours add (the closing file
        // checkpoint, what the checks on load found) and the status: one write of session.json;
        // then the behaviours told (the session stack, the session-end hooks).
        self.close(&closing, &mut behaviours, held).await?;
        tracing::info!(session = %session_id, agent = %admitted.agent_name, op = "run", result = closing.status.as_str(), turns = stats.turns, tool_calls = stats.tool_calls, "run ended");
        let mut outcome = self.outcome(admitted.session_id.clone(), ending, &engine, &stats);
        outcome.duration_ms = started.elapsed().as_millis() as u64;
        outcome.sandbox = (&mut admitted.sandbox).await.unwrap_or("none").to_string();
        let _ = events.send(Event::Result(outcome.clone()));
        Ok(outcome)
    }

    /// Closes the run's session ([`around::close`]) with its held answer.
    async fn close(
        &self,
        closing: &Closing<'_>,
        behaviours: &mut [Box<dyn Around>],
        held: crate::agent::conversation::HeldAnswer,
    ) -> Result<(), RunError> {
        let answer = held.take();
        around::close(&self.store, closing, behaviours, move |state| {
            if let Some(answer) = answer {
                crate::agent::conversation::HeldAnswer::apply(answer, &mut state.session);
            }
        })
        .await?;
        Ok(())
    }

    /// Ends a run that failed: the session marked so as far as it can be (it may be
    /// unwritable), the priority stack told, the behaviours told (the file checkpoint
    /// closed); the real failure reported.
    async fn fail(
        &self,
        admitted: &Admitted,
        opened: Opened,
        fatal: ToolError,
        stats: &TurnStats,
        events: &EventSink,
    ) -> RunError {
        let session_id = &admitted.session_id;
        let Opened {
            held,
            mut behaviours,
            ..
        } = opened;
        let closing = Closing {
            session_id,
            agent: &admitted.agent_name,
            mode: Mode::Run(None),
            status: SessionStatus::Error,
            question: None,
            failed: true,
            tool_calls: stats.tool_calls,
            events,
        };
        if let Err(e) = self.close(&closing, &mut behaviours, held).await {
            tracing::warn!(session = %session_id, op = "run", result = "error", "the failed run's closing write failed too: {e}");
        }
        tracing::error!(session = %session_id, agent = %admitted.agent_name, op = "run", result = "error", "{fatal}");
        fatal.into()
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
            limit: ending.limit,
            sandbox: String::new(),
            usage,
            total_cost_usd: total.cost_usd,
            turns: stats.turns,
            duration_ms: 0,
            duration_api_ms: stats.api_ms,
            tool_calls: stats.tool_calls,
            permission_denials: self.approver.denials(),
        }
    }
}
