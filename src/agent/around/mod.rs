//! The one loop of a run and of a subagent, and the per-run behaviours around it (goose's
//! `on_loop_exit`, codex's goal continuation as glue): the agent is driven until it answers;
//! then each behaviour, in order, is asked whether the session goes on with a new input or the
//! run ends. The first that does not pass decides; when all pass, the answer stands. One turn
//! budget covers the loop: a continuation gets the turns left, a queued message (a new task,
//! seed 004) the run's whole turns.
//!
//! A new behaviour is one file here implementing [`Around`] and one line where the run lists
//! them (`Runtime::drive`, `Engine::run_subagent`).

mod goal;
mod queue;
mod stop_hooks;

pub(super) use goal::GoalCheck;
pub(super) use queue::QueueDrain;
pub(super) use stop_hooks::StopHooks;

use chrono::Utc;
use futures_util::future::BoxFuture;

use super::conversation::HeldAnswer;
use super::engine::Engine;
use super::turn::{EventSink, TurnStats};
use super::{AgentResponse, AgentStatus, Interrupted};
use crate::protocol::{Message, Role, SessionStatus};
use crate::tools::{ToolContext, ToolError};

/// What a drive of the agent ends with.
pub(super) type Answer = Result<Result<AgentResponse, Interrupted>, ToolError>;

/// What a behaviour decides once the agent has answered.
#[derive(Debug)]
pub(super) enum Next {
    /// Nothing to say: the next behaviour is asked.
    Pass,
    /// A new task is already in the session (a queued message taken): driven with the run's
    /// whole turns.
    NewTask,
    /// The agent goes on with this text as the user's next message, within the turns left.
    Continue(String),
    /// The run ends with this answer instead of the agent's.
    Exit(Answer),
}

/// What a behaviour is told when the agent has answered (completed).
pub(super) struct Stopped<'a> {
    pub engine: &'a Engine,
    pub ctx: &'a ToolContext,
    pub events: &'a EventSink,
    /// The run's final answer while it waits for the run's closing write.
    pub held: Option<&'a HeldAnswer>,
    /// The agent's answer.
    pub answer: &'a str,
    /// The run's model requests, and those left of them.
    pub max_turns: u32,
    pub turns_left: u32,
}

impl Stopped<'_> {
    /// Writes the held answer, for a behaviour about to read the session or add to it.
    pub async fn flush(&self) -> Result<(), ToolError> {
        match self.held {
            Some(held) => held.flush(&self.engine.0.store, &self.ctx.session_id).await,
            None => Ok(()),
        }
    }
}

/// A per-run behaviour: asked, each time the agent answers, whether the run goes on.
pub(super) trait Around: Send {
    fn on_stop<'a>(
        &'a mut self,
        stopped: &'a Stopped<'a>,
    ) -> BoxFuture<'a, Result<Next, ToolError>>;
}

/// How a loop drives the agent: its session, its events and counts, its turns.
pub(super) struct Drive<'a> {
    pub engine: &'a Engine,
    pub ctx: &'a ToolContext,
    pub events: &'a EventSink,
    pub stats: &'a mut TurnStats,
    pub held: Option<HeldAnswer>,
    pub max_turns: u32,
}

impl Drive<'_> {
    fn agent(&mut self, turns: u32) -> BoxFuture<'_, Answer> {
        self.engine.drive_holding(
            self.ctx,
            turns,
            self.events,
            self.stats,
            self.held.clone(),
            None,
        )
    }

    /// Drives the agent (its first drive with `first`, a new session's first write), then asks
    /// `behaviours` each time it answers, as the module says.
    pub async fn run(
        mut self,
        first: Option<super::conversation::FirstWrite>,
        behaviours: &mut [Box<dyn Around + '_>],
    ) -> Answer {
        let mut answer = self
            .engine
            .drive_holding(
                self.ctx,
                self.max_turns,
                self.events,
                self.stats,
                self.held.clone(),
                first,
            )
            .await;
        'answered: loop {
            let last = match &answer {
                Ok(Ok(r)) if r.status == AgentStatus::Completed => r.message.clone(),
                _ => return answer,
            };
            let turns_left = self.max_turns.saturating_sub(self.stats.turns);
            let stopped = Stopped {
                engine: self.engine,
                ctx: self.ctx,
                events: self.events,
                held: self.held.as_ref(),
                answer: &last,
                max_turns: self.max_turns,
                turns_left,
            };
            for behaviour in behaviours.iter_mut() {
                match behaviour.on_stop(&stopped).await? {
                    Next::Pass => continue,
                    Next::Exit(answer) => return answer,
                    Next::NewTask => {
                        answer = self.agent(self.max_turns).await;
                        continue 'answered;
                    }
                    Next::Continue(text) => {
                        let message = Message::new(Role::User, text, Utc::now());
                        let pushed = self
                            .engine
                            .0
                            .store
                            .update_async(&self.ctx.session_id, Utc::now(), move |state| {
                                state.session.status = SessionStatus::Running;
                                state.session.messages.push(message);
                                Ok(())
                            })
                            .await;
                        if let Err(e) = pushed {
                            return Err(ToolError::fatal_from(e));
                        }
                        answer = self.agent(turns_left).await;
                        continue 'answered;
                    }
                }
            }
            return answer;
        }
    }
}
