//! The one loop of a run and of a subagent, and the per-run behaviours around it (goose's
//! `on_loop_exit`, codex's goal continuation as glue): the agent is driven until it answers;
//! then each behaviour, in order, is asked whether the session goes on with a new input or the
//! run ends. The first that does not pass decides; when all pass, the answer stands. One turn
//! budget covers the loop: a continuation gets the turns left, a queued message (a new task,
//! seed 004) the run's whole turns.
//!
//! A behaviour also has a say as the session opens ([`Around::on_open`]: its input is written)
//! and as it closes ([`Around::on_close`]: what it adds to the closing write of session.json;
//! [`Around::on_closed`]: once that is written). Runs and chats open and close their sessions
//! through these points.
//!
//! A new behaviour is one file here implementing [`Around`] and one line where the session
//! lists them (`Runtime::behaviours` for a run, `ChatSession::open` for a chat,
//! `Engine::run_subagent` for a subagent).

mod checkpoint;
mod checks;
mod goal;
mod isolation;
mod priority;
mod queue;
mod stop_hooks;
mod trust;
mod user_hooks;

pub(super) use checkpoint::FileCheckpoint;
pub(super) use checks::ChecksOnLoad;
pub(super) use goal::GoalCheck;
pub(super) use isolation::OwnWorktree;
pub(super) use priority::Priority;
pub(super) use queue::QueueDrain;
pub(super) use stop_hooks::StopHooks;
pub(super) use trust::Trust;
pub(super) use user_hooks::UserHooks;

use chrono::Utc;
use futures_util::future::BoxFuture;

use super::conversation::HeldAnswer;
use super::engine::Engine;
use super::turn::{EventSink, TurnStats};
use super::{AgentResponse, AgentStatus, Interrupted};
use crate::hooks::Mode;
use crate::protocol::{Message, Role, SessionStatus};
use crate::session::Recent;
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

/// What a behaviour is told as the session opens: its input is written (a chat has none).
pub(super) struct Opening<'a> {
    pub session_id: &'a str,
    pub agent: &'a str,
    pub resumed: bool,
    pub mode: Mode<'a>,
    pub events: &'a EventSink,
    /// A run's engine and tools (`None` for a chat).
    pub run: Option<RunOpening<'a>>,
}

/// What a run adds to [`Opening`].
pub(super) struct RunOpening<'a> {
    pub engine: &'a Engine,
    pub ctx: &'a mut ToolContext,
    /// The session's messages before this run's.
    pub messages_before: usize,
    /// The plan and the conversation are as the last checked run left them.
    pub unchanged: bool,
}

/// What a behaviour is told as the session closes.
pub(super) struct Closing<'a> {
    pub session_id: &'a str,
    pub agent: &'a str,
    pub mode: Mode<'a>,
    /// The status session.json is given.
    pub status: SessionStatus,
    /// The question the agent waits on.
    pub question: Option<&'a str>,
    /// The run failed (the session could not be carried on).
    pub failed: bool,
    /// The tools the run called.
    pub tool_calls: u32,
    pub events: &'a EventSink,
}

/// What a behaviour adds to the closing write of session.json.
pub(super) type Change = Box<dyn FnOnce(&mut Recent) + Send>;

/// A per-run behaviour: told as the session opens and closes, and asked, each time the agent
/// answers, whether the run goes on. Each point does nothing unless the behaviour says.
pub(super) trait Around: Send + Sync {
    fn on_open<'a>(&'a mut self, _opening: &'a mut Opening<'_>) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }

    fn on_stop<'a>(
        &'a mut self,
        _stopped: &'a Stopped<'a>,
    ) -> BoxFuture<'a, Result<Next, ToolError>> {
        Box::pin(async { Ok(Next::Pass) })
    }

    fn on_close<'a>(&'a mut self, _closing: &'a Closing<'a>) -> BoxFuture<'a, Option<Change>> {
        Box::pin(async { None })
    }

    fn on_closed<'a>(&'a mut self, _closing: &'a Closing<'a>) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }
}

/// Each behaviour told, in order, that the session opened.
pub(super) async fn opened(behaviours: &mut [Box<dyn Around>], opening: &mut Opening<'_>) {
    for behaviour in behaviours {
        behaviour.on_open(opening).await;
    }
}

/// What the behaviours add, in order, to the closing write.
pub(super) async fn closing(
    behaviours: &mut [Box<dyn Around>],
    closing: &Closing<'_>,
) -> Vec<Change> {
    let mut changes = Vec::new();
    for behaviour in behaviours.iter_mut() {
        changes.extend(behaviour.on_close(closing).await);
    }
    changes
}

/// Closes a session, a run's, a chat's or a subagent's alike: one write of what `more`
/// changes (its value is returned), what the behaviours add and the status; then the
/// behaviours told, whether or not the write could be made.
pub(super) async fn close<T: Send + 'static>(
    store: &crate::session::Store,
    closing: &Closing<'_>,
    behaviours: &mut [Box<dyn Around>],
    more: impl FnOnce(&mut Recent) -> T + Send + 'static,
) -> Result<T, crate::session::SessionError> {
    let changes = self::closing(behaviours, closing).await;
    let status = closing.status;
    let written = store
        .update_async(closing.session_id, chrono::Utc::now(), move |state| {
            let value = more(state);
            for change in changes {
                change(state);
            }
            state.session.status = status;
            Ok(value)
        })
        .await;
    closed(behaviours, closing).await;
    written
}

/// Each behaviour told, in order, that the closing write is made.
pub(super) async fn closed(behaviours: &mut [Box<dyn Around>], closing: &Closing<'_>) {
    for behaviour in behaviours {
        behaviour.on_closed(closing).await;
    }
}

/// What the loop drives: the agent on its session ([`Drive`]; a fake in tests).
pub(super) trait Driven {
    /// Drives the agent, at most `turns` model requests, until it answers.
    fn drive(&mut self, turns: u32) -> BoxFuture<'_, Answer>;
    /// Adds `text` to the session as the user's next message.
    fn push_input(&mut self, text: String) -> BoxFuture<'_, Result<(), ToolError>>;
    /// The model requests this run has made.
    fn turns_used(&self) -> u32;
    /// Asks the per-run behaviours, in order, about the agent's `answer`: the first that does
    /// not pass decides.
    fn ask<'a>(
        &'a mut self,
        answer: &'a str,
        turns_left: u32,
    ) -> BoxFuture<'a, Result<Next, ToolError>>;
}

/// The one loop: drives the agent, then asks what comes next each time it answers (completed),
/// within one budget of `max_turns` model requests (a queued message, a new task, gets them
/// all again).
pub(super) async fn run_loop(driven: &mut impl Driven, max_turns: u32) -> Answer {
    let mut answer = driven.drive(max_turns).await;
    loop {
        let last = match &answer {
            Ok(Ok(r)) if r.status == AgentStatus::Completed => r.message.clone(),
            _ => return answer,
        };
        let turns_left = max_turns.saturating_sub(driven.turns_used());
        answer = match driven.ask(&last, turns_left).await? {
            Next::Pass => return answer,
            Next::Exit(answer) => return answer,
            Next::NewTask => driven.drive(max_turns).await,
            Next::Continue(text) => {
                driven.push_input(text).await?;
                driven.drive(turns_left).await
            }
        };
    }
}

/// How a run or a subagent drives its agent: its session, its events and counts, its turns and
/// its behaviours.
pub(super) struct Drive<'a, 'b> {
    pub engine: &'a Engine,
    pub ctx: &'a ToolContext,
    pub events: &'a EventSink,
    pub stats: &'a mut TurnStats,
    pub held: Option<HeldAnswer>,
    pub max_turns: u32,
    /// A new session's first write, waited for by the first drive.
    pub first: Option<super::conversation::FirstWrite>,
    pub behaviours: &'a mut [Box<dyn Around + 'b>],
}

impl Drive<'_, '_> {
    /// Drives the agent and asks the behaviours, as the module says.
    pub async fn run(mut self) -> Answer {
        let max_turns = self.max_turns;
        run_loop(&mut self, max_turns).await
    }
}

impl Driven for Drive<'_, '_> {
    fn drive(&mut self, turns: u32) -> BoxFuture<'_, Answer> {
        let first = self.first.take();
        self.engine.drive_holding(
            self.ctx,
            turns,
            self.events,
            self.stats,
            self.held.clone(),
            first,
        )
    }

    fn push_input(&mut self, text: String) -> BoxFuture<'_, Result<(), ToolError>> {
        Box::pin(async move {
            let message = Message::new(Role::User, text, Utc::now());
            self.engine
                .0
                .store
                .update_async(&self.ctx.session_id, Utc::now(), move |state| {
                    state.session.status = SessionStatus::Running;
                    state.session.messages.push(message);
                    Ok(())
                })
                .await
                .map_err(ToolError::fatal_from)
        })
    }

    fn turns_used(&self) -> u32 {
        self.stats.turns
    }

    fn ask<'a>(
        &'a mut self,
        answer: &'a str,
        turns_left: u32,
    ) -> BoxFuture<'a, Result<Next, ToolError>> {
        Box::pin(async move {
            let stopped = Stopped {
                engine: self.engine,
                ctx: self.ctx,
                events: self.events,
                held: self.held.as_ref(),
                answer,
                max_turns: self.max_turns,
                turns_left,
            };
            for behaviour in self.behaviours.iter_mut() {
                match behaviour.on_stop(&stopped).await? {
                    Next::Pass => continue,
                    decided => return Ok(decided),
                }
            }
            Ok(Next::Pass)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    /// A session that answers from a script, spending `per_drive` turns each time.
    #[derive(Default)]
    struct Fake {
        answers: Vec<Answer>,
        decisions: Vec<Result<Next, ToolError>>,
        per_drive: u32,
        used: u32,
        driven: Vec<u32>,
        pushed: Vec<String>,
        asked: Vec<(String, u32)>,
        push_fails: bool,
    }

    fn completed(text: &str) -> Answer {
        Ok(Ok(AgentResponse {
            status: AgentStatus::Completed,
            message: text.to_string(),
        }))
    }

    impl Driven for Fake {
        fn drive(&mut self, turns: u32) -> BoxFuture<'_, Answer> {
            self.driven.push(turns);
            self.used += self.per_drive.min(turns);
            let answer = self.answers.remove(0);
            Box::pin(async move { answer })
        }

        fn push_input(&mut self, text: String) -> BoxFuture<'_, Result<(), ToolError>> {
            self.pushed.push(text);
            let fails = self.push_fails;
            Box::pin(async move {
                if fails {
                    Err(ToolError::fatal_from(std::io::Error::other("disk full")))
                } else {
                    Ok(())
                }
            })
        }

        fn turns_used(&self) -> u32 {
            self.used
        }

        fn ask<'a>(
            &'a mut self,
            answer: &'a str,
            turns_left: u32,
        ) -> BoxFuture<'a, Result<Next, ToolError>> {
            self.asked.push((answer.to_string(), turns_left));
            let decision = self.decisions.remove(0);
            Box::pin(async move { decision })
        }
    }

    fn message(answer: &Answer) -> String {
        match answer {
            Ok(Ok(r)) => format!("{:?}: {}", r.status, r.message),
            Ok(Err(Interrupted)) => "interrupted".to_string(),
            Err(e) => format!("error: {e}"),
        }
    }

    #[tokio::test]
    async fn a_continuation_gets_the_turns_left_and_a_new_task_the_whole_budget() {
        let mut fake = Fake {
            answers: vec![completed("one"), completed("two"), completed("three")],
            decisions: vec![
                Ok(Next::Continue("the hook says go on".into())),
                Ok(Next::NewTask),
                Ok(Next::Pass),
            ],
            per_drive: 3,
            ..Fake::default()
        };
        let answer = run_loop(&mut fake, 10).await;
        assert_eq!(message(&answer), "Completed: three");
        assert_eq!(fake.driven, [10, 7, 10]);
        assert_eq!(fake.pushed, ["the hook says go on"]);
        assert_eq!(
            fake.asked,
            [
                ("one".to_string(), 7),
                ("two".to_string(), 4),
                ("three".to_string(), 1)
            ]
        );
    }

    #[tokio::test]
    async fn an_answer_that_is_not_completed_ends_the_loop_unasked() {
        for answer in [
            Ok(Ok(AgentResponse {
                status: AgentStatus::WaitingInput,
                message: "which file?".into(),
            })),
            Ok(Err(Interrupted)),
            Err(ToolError::aborted()),
        ] {
            let expected = message(&answer);
            let mut fake = Fake {
                answers: vec![answer],
                ..Fake::default()
            };
            assert_eq!(message(&run_loop(&mut fake, 5).await), expected);
            assert!(fake.asked.is_empty());
        }
    }

    #[tokio::test]
    async fn an_exit_replaces_the_answer_and_a_failure_ends_the_run() {
        let mut fake = Fake {
            answers: vec![completed("done")],
            decisions: vec![Ok(Next::Exit(Ok(Ok(AgentResponse {
                status: AgentStatus::GoalNotMet,
                message: "the goal is not met".into(),
            }))))],
            ..Fake::default()
        };
        assert_eq!(
            message(&run_loop(&mut fake, 5).await),
            "GoalNotMet: the goal is not met"
        );
        let mut fake = Fake {
            answers: vec![completed("done")],
            decisions: vec![Err(ToolError::aborted())],
            ..Fake::default()
        };
        assert!(run_loop(&mut fake, 5).await.is_err());
        // The next input cannot be written: the run ends with that error, not driven again.
        let mut fake = Fake {
            answers: vec![completed("done")],
            decisions: vec![Ok(Next::Continue("more".into()))],
            push_fails: true,
            ..Fake::default()
        };
        let answer = run_loop(&mut fake, 5).await;
        assert!(
            message(&answer).contains("disk full"),
            "{}",
            message(&answer)
        );
        assert_eq!(fake.driven, [5]);
    }
}
