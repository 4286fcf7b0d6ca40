//! Opening a run: the engine, the input, the session written (new or resumed), its goal, the
//! announcement and the checks on load.

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use crate::agent::around::{
    self, Around, ChecksOnLoad, FileCheckpoint, GoalCheck, Opening, Priority, QueueDrain,
    RunOpening, StopHooks, Trust, UserHooks,
};
use crate::agent::engine::Engine;
use crate::agent::error::RunError;
use crate::agent::prompt;
use crate::agent::runtime::{RunRequest, Runtime, resume_messages};
use crate::agent::turn::EventSink;
use crate::hooks::{self, Hook, Mode};
use crate::protocol::events::Event;
use crate::protocol::{Message, Role, SessionStatus};
use crate::tools::ToolContext;

use super::{Admitted, Opened};

/// What opening wrote of the session.
struct Written {
    /// The session's messages before this run's.
    messages_before: usize,
    /// The plan and conversation are as the last checked run left them.
    unchanged: bool,
    /// The session's goal was not met by the last run: this one takes it up again.
    reactivate: bool,
    /// A new session's first write, made while the first request goes out.
    first: Option<crate::agent::conversation::FirstWrite>,
}

impl Runtime {
    /// Opens a run's session: the engine and the tools' context, the input (mentions attached,
    /// a goal announced), the session written (a new one's first messages, or a resumed one's
    /// closing of what a killed process left and its queue), `session_started` sent, and the
    /// run's behaviours told (the file checkpoint begun, the session-start hooks, the checks on
    /// load: [`Runtime::behaviours`]).
    pub(in crate::agent) async fn open(
        &self,
        admitted: &mut Admitted,
        request: &RunRequest,
        events: &EventSink,
        cancel: &CancellationToken,
    ) -> Result<Opened, RunError> {
        let engine = self.engine_for(admitted, events, cancel).await;
        let mut ctx = engine.tool_context(
            &admitted.session_id,
            &admitted.agent_name,
            Vec::new(),
            0,
            cancel.clone(),
            true,
        )?;
        let input = self.input_of(admitted, request, &ctx, events).await?;
        // A goal set now is told to the agent with the input (or as the input).
        let goal = request
            .goal
            .clone()
            .map(|spec| spec.into_goal(admitted.now));
        let input = match (&goal, input) {
            (Some(goal), Some(text)) => {
                Some(format!("{text}\n\n{}", crate::agent::goal::announce(goal)))
            }
            (Some(goal), None) => Some(crate::agent::goal::announce(goal)),
            (None, input) => input,
        };
        let written = if admitted.resumed {
            self.write_resumed(admitted, request, &engine, &ctx, input)
                .await?
        } else {
            self.write_new(admitted, request, &engine, input, events)
                .await?
        };
        self.set_goal(&admitted.session_id, admitted.now, goal, written.reactivate)
            .await?;
        self.announce(admitted, &engine, events);
        let mut behaviours = self.behaviours(admitted.coordinator.clone());
        let mut opening = Opening {
            session_id: &admitted.session_id,
            agent: &admitted.agent_name,
            resumed: admitted.resumed,
            mode: Mode::Run(request.input.as_deref()),
            events,
            run: Some(RunOpening {
                engine: &engine,
                ctx: &mut ctx,
                messages_before: written.messages_before,
                unchanged: written.unchanged,
            }),
        };
        around::opened(&mut behaviours, &mut opening).await;
        Ok(Opened {
            engine,
            ctx,
            behaviours,
            held: Default::default(),
            first: written.first,
        })
    }

    /// The behaviours of a run, in the order they are told and asked (`agent/around/`): one
    /// line each.
    pub(in crate::agent) fn behaviours(
        &self,
        coordinator: Option<crate::queue::priority::Coordinator>,
    ) -> Vec<Box<dyn Around>> {
        vec![
            Box::new(Trust::new(self.ws.clone(), self.env.clone())),
            Box::new(FileCheckpoint::new(self.store.clone(), self.checkpoints())),
            Box::new(Priority::new(coordinator)),
            Box::new(UserHooks::new(
                self.config.hooks.clone(),
                self.ws.root.clone(),
            )),
            Box::new(ChecksOnLoad::new(self.store.clone())),
            Box::new(QueueDrain),
            Box::new(StopHooks::new(
                self.config.hooks.clone(),
                self.ws.root.clone(),
                None,
            )),
            Box::new(GoalCheck::new(self.config.agent.goal_timeout_s)),
        ]
    }

    /// The run's engine: its provider, approver, queue settings and plugins; memory's daily
    /// summaries brought up to date first when configured.
    async fn engine_for(
        &self,
        admitted: &Admitted,
        events: &EventSink,
        cancel: &CancellationToken,
    ) -> Engine {
        let def = admitted.def.as_ref();
        let engine = Engine::new(
            self.ws.clone(),
            self.cwd.clone(),
            self.config.clone(),
            self.store.clone(),
            admitted.provider.clone(),
            self.approver.clone(),
            events.clone(),
            crate::agent::engine::QueueSettings {
                coordinator: admitted.coordinator.clone(),
                stop_words: self.config.queue.stop_words.clone(),
                interrupt_enabled: def.is_none_or(|d| d.interrupt_enabled),
            },
        );
        engine.load_plugins(&self.plugins, &self.env).await;
        if self.config.memory.auto_summarize {
            self.auto_summarize(&engine, &admitted.agent_name, cancel)
                .await;
        }
        engine
    }

    /// The run's input with its `@path` mentions attached: session.json holds what the model
    /// is sent.
    async fn input_of(
        &self,
        admitted: &mut Admitted,
        request: &RunRequest,
        ctx: &ToolContext,
        events: &EventSink,
    ) -> Result<Option<String>, RunError> {
        let Some(text) = &request.input else {
            return Ok(None);
        };
        if text.contains('@') {
            // What attaches a file may ask, log or run a hook about the session.
            admitted.created().await?;
        }
        let expanded = crate::agent::mentions::expand(ctx, &self.cwd, text).await;
        for message in expanded.warnings {
            let _ = events.send(Event::Warning { message });
        }
        Ok(Some(expanded.text))
    }

    /// A resumed session: what a killed process left open closed (or the agent's question
    /// answered), then the messages queued while nobody ran it (they came first), then the
    /// input.
    async fn write_resumed(
        &self,
        admitted: &Admitted,
        request: &RunRequest,
        engine: &Engine,
        ctx: &ToolContext,
        input: Option<String>,
    ) -> Result<Written, RunError> {
        let session_id = &admitted.session_id;
        let state = self.store.read_async(session_id).await?;
        let messages_before = state.session.messages.len();
        // The plan and the conversation are as the last checked run left them.
        let unchanged = state
            .session
            .consistency_checked
            .as_ref()
            .is_some_and(|c| c.covers(&state.plan, state.sealed(), state.recent_messages()));
        let session = state.session;
        // A goal the last run did not meet, taken up again by this one.
        let reactivate = session
            .goal
            .as_ref()
            .is_some_and(|g| g.status == crate::protocol::GoalStatus::NotMet);
        let (before, mut after) = resume_messages(&session, input.as_deref());
        if let Some(recall) = self.recall(&admitted.agent_name, request.input.as_deref()) {
            after.insert(0, recall);
        }
        self.update_status(session_id, SessionStatus::Running, before)
            .await?;
        let pending = engine.queued(ctx).await;
        engine.inject(ctx, pending).await?;
        self.update_status(session_id, SessionStatus::Running, after)
            .await?;
        Ok(Written {
            messages_before,
            unchanged,
            reactivate,
            first: None,
        })
    }

    /// A new session's first messages (system prompt, recalled memory, input), written while
    /// the first request goes out unless a session-start hook must read them first.
    async fn write_new(
        &self,
        admitted: &mut Admitted,
        request: &RunRequest,
        engine: &Engine,
        input: Option<String>,
        events: &EventSink,
    ) -> Result<Written, RunError> {
        let (session_id, now) = (admitted.session_id.clone(), admitted.now);
        let (system, warnings) = prompt::system_prompt_noting(
            &self.ws,
            &self.cwd,
            &admitted.agent_name,
            admitted.def.as_ref(),
            now,
        )?;
        for message in warnings {
            let _ = events.send(Event::Warning { message });
        }
        let mut first = vec![Message::new(Role::System, system, now)];
        if let Some(recall) = self.recall(&admitted.agent_name, request.input.as_deref()) {
            first.push(recall);
        }
        if let Some(input) = input {
            first.push(Message::new(Role::User, input, now));
        }
        // The tools' schemas the first request carries are made (once per process) while the
        // new session is still being written.
        let _ = engine.registry().specs();
        admitted.created().await?;
        let mut first_write = None;
        if hooks::configured(&self.config.hooks, Hook::SessionStart) {
            // Its hooks may read the session.
            self.update_status(&session_id, SessionStatus::Running, first)
                .await?;
        } else {
            // Written while the first request goes out, which is sent them from memory.
            first_write = Some(
                crate::agent::conversation::FirstWrite::start(
                    &self.store,
                    &session_id,
                    first,
                    SessionStatus::Running,
                )
                .await?,
            );
        }
        Ok(Written {
            messages_before: 0,
            unchanged: false,
            reactivate: false,
            first: first_write,
        })
    }

    /// The session's goal: the one set now, or the one it had, taken up again by this run (a
    /// write only when there is one: most runs have none).
    async fn set_goal(
        &self,
        session_id: &str,
        now: DateTime<Utc>,
        goal: Option<crate::protocol::Goal>,
        reactivate: bool,
    ) -> Result<(), RunError> {
        if goal.is_none() && !reactivate {
            return Ok(());
        }
        self.store
            .update_async(session_id, now, move |state| {
                match goal {
                    Some(goal) => state.session.goal = Some(goal),
                    None => {
                        if let Some(g) = state.session.goal.as_mut()
                            && g.status == crate::protocol::GoalStatus::NotMet
                        {
                            g.status = crate::protocol::GoalStatus::Active;
                        }
                    }
                }
                Ok(())
            })
            .await?;
        Ok(())
    }

    /// Tells that the run started: `session_started`.
    fn announce(&self, admitted: &Admitted, engine: &Engine, events: &EventSink) {
        let (session_id, agent_name) = (&admitted.session_id, &admitted.agent_name);
        tracing::info!(session = %session_id, agent = %agent_name, op = "run", result = "started", resumed = admitted.resumed, model = engine.provider().model(), "run started");
        let _ = events.send(Event::SessionStarted {
            session_id: session_id.clone(),
            agent: agent_name.clone(),
            model: engine.provider().model().to_string(),
            resumed: admitted.resumed,
            priority: admitted.priority,
            emergency: admitted.emergency.clone(),
        });
    }
}
