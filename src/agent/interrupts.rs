//! The queue checkpoints of a run (seed 004) with pause and resume (seed 000): between tool
//! calls, never inside one, the agent looks at its session's queue: a stop word ends the task,
//! waiting messages are put into the conversation in priority order, and a session paused for
//! a higher-priority one waits here until it may go on.

use std::time::Duration;

use chrono::Utc;

use super::engine::Engine;
use super::turn::Checkpoint;
use crate::protocol::events::Event;
use crate::protocol::{Message, Role, SessionStatus};
use crate::tools::{ToolContext, ToolError};

impl Engine {
    pub(super) fn inbox(&self, session_id: &str) -> crate::queue::Inbox {
        crate::queue::Inbox::new(&self.0.store.dir(session_id))
    }

    /// The messages queued for the session of `ctx`, in order; a file that is not a message is
    /// set aside (see [`crate::queue::Inbox::list`]) with a warning event. Read off the async
    /// threads.
    pub async fn queued(&self, ctx: &ToolContext) -> Vec<(String, crate::queue::QueuedMessage)> {
        let listing = self.inbox(&ctx.session_id).list_async().await;
        for bad in &listing.set_aside {
            self.emit(Event::Warning {
                message: bad.to_string(),
            });
        }
        listing.messages
    }

    pub(super) fn interrupts_enabled(&self) -> bool {
        self.0.queue.interrupt_enabled
    }

    /// Whether a message is waiting that should end the current batch of tool calls: a stop word,
    /// or (when this agent takes interrupts) a high or urgent message. Only the top-level run
    /// reads the queue; subagents and advisors never do.
    pub async fn wants_checkpoint(&self, ctx: &ToolContext) -> bool {
        if ctx.depth > 0 {
            return false;
        }
        let interrupts = self.interrupts_enabled();
        if self.is_paused(ctx).await {
            return true;
        }
        self.queued(ctx).await.iter().any(|(_, m)| {
            m.stop || (interrupts && m.priority != crate::queue::QueuePriority::Normal)
        })
    }

    /// Writes the session's status (paused while a higher-priority session runs, running again
    /// after).
    /// A status that cannot be written is a warning: the pause itself is the stack's, and the
    /// run goes on (as the newcomer's write of it does).
    pub(super) async fn record_status(&self, ctx: &ToolContext, status: SessionStatus) {
        let written = self.0.store.set_status_async(&ctx.session_id, status).await;
        if let Err(e) = written {
            tracing::warn!(session = %ctx.session_id, op = "priority", error = %e, "could not record the status {}", status.as_str());
            self.emit(Event::Warning {
                message: format!("session.json could not record `{}`: {e}", status.as_str()),
            });
        }
    }

    /// Whether a higher-priority session paused this one. A priority stack that cannot be read
    /// cannot pause anything: the run goes on, and says so once (a warning event and the log).
    pub(super) async fn is_paused(&self, ctx: &ToolContext) -> bool {
        let Some(coordinator) = self.0.queue.coordinator.as_ref() else {
            return false;
        };
        match coordinator.state_of_async(&ctx.session_id).await {
            Ok(state) => state == Some(crate::queue::priority::EntryState::Paused),
            Err(e) => {
                if !self
                    .0
                    .priority_unreadable
                    .swap(true, std::sync::atomic::Ordering::Relaxed)
                {
                    tracing::warn!(session = %ctx.session_id, op = "priority", error = %e, "the priority stack cannot be read; this run is not paused by it");
                    self.emit(Event::Warning {
                        message: format!(
                            "the priority stack cannot be read, so no session can pause this one: {e}"
                        ),
                    });
                }
                false
            }
        }
    }

    /// A checkpoint (between tool calls and before each model request; never inside a tool):
    /// wait while a higher-priority session has paused this one, then stop on a stop word or
    /// put high and urgent messages into the conversation (seed 004).
    pub async fn checkpoint(&self, ctx: &ToolContext) -> Result<Checkpoint, ToolError> {
        if ctx.depth > 0 {
            return Ok(Checkpoint::Continue);
        }
        if self.is_paused(ctx).await {
            tracing::info!(session = %ctx.session_id, op = "priority", result = "paused", "paused by a higher-priority session");
            self.record_status(ctx, SessionStatus::Paused).await;
            self.emit(Event::Paused {
                session_id: ctx.session_id.clone(),
            });
            // Woken when the stack changes; at least once a second for a newcomer killed with
            // -9, which changes nothing on disk (its entry is dropped when the stack is read).
            let watch = self.0.queue.coordinator.as_ref().and_then(|c| c.watch());
            while self.is_paused(ctx).await {
                let changed = async {
                    match &watch {
                        Some(w) => w.changed(Duration::from_secs(1)).await,
                        None => tokio::time::sleep(Duration::from_millis(100)).await,
                    }
                };
                tokio::select! {
                    () = ctx.cancel.cancelled() => return Ok(Checkpoint::Continue),
                    () = changed => {}
                }
            }
            tracing::info!(session = %ctx.session_id, op = "priority", result = "resumed", "resumed");
            self.record_status(ctx, SessionStatus::Running).await;
            self.emit(Event::Resumed {
                session_id: ctx.session_id.clone(),
            });
        }
        let queued = self.queued(ctx).await;
        if let Some((name, stop)) = queued
            .iter()
            .find(|(_, m)| m.stop || crate::queue::is_stop_word(&m.text, &self.0.queue.stop_words))
        {
            self.record_stop(ctx, name, stop).await?;
            return Ok(Checkpoint::Stop(stop.text.clone()));
        }
        if self.interrupts_enabled() {
            let urgent: Vec<(String, crate::queue::QueuedMessage)> = queued
                .into_iter()
                .filter(|(_, m)| m.priority != crate::queue::QueuePriority::Normal)
                .collect();
            self.inject(ctx, urgent).await?;
        }
        Ok(Checkpoint::Continue)
    }

    /// Puts queued messages into the conversation as user messages marked as interrupts, then
    /// removes them from the queue. A message already in session.json (a crash between the two
    /// steps) is not added twice.
    pub async fn inject(
        &self,
        ctx: &ToolContext,
        messages: Vec<(String, crate::queue::QueuedMessage)>,
    ) -> Result<usize, ToolError> {
        if messages.is_empty() {
            return Ok(0);
        }
        let now = Utc::now();
        let names: Vec<String> = messages.iter().map(|(n, _)| n.clone()).collect();
        // `@path` mentions, from this process's working directory, before the message is stored.
        let mut queued: Vec<crate::queue::QueuedMessage> = Vec::with_capacity(messages.len());
        for (_, q) in &messages {
            let expanded = super::mentions::expand(ctx, &self.0.cwd, &q.text).await;
            for message in expanded.warnings {
                self.emit(Event::Warning { message });
            }
            queued.push(crate::queue::QueuedMessage {
                text: expanded.text,
                ..q.clone()
            });
        }
        let count = self
            .0
            .store
            .update_async(&ctx.session_id, now, move |state| {
                // Where a message stored by a write just before a crash can be: session.json,
                // or the sealed file a later write moved it to.
                let present: std::collections::HashSet<String> = state
                    .last_sealed()?
                    .iter()
                    .chain(&state.session.messages)
                    .filter_map(|m| m.inbox_id.clone())
                    .collect();
                let mut added = 0;
                for q in &queued {
                    if present.contains(&q.id) {
                        continue;
                    }
                    state.session.messages.push(queued_message(q, now));
                    added += 1;
                }
                Ok(added)
            })
            .await?;
        self.inbox(&ctx.session_id).remove_async(names).await?;
        if count > 0 {
            let latency: Vec<i64> = messages
                .iter()
                .map(|(_, q)| (now - q.queued_at).num_milliseconds())
                .collect();
            tracing::info!(session = %ctx.session_id, op = "queue", result = "injected", count, latency_ms = ?latency, "queued messages put into the conversation");
            self.emit(Event::MessagesInjected { count });
        }
        Ok(count)
    }

    /// The next queued message (any priority), for processing after the task: `None` when the
    /// queue is empty. A stop word found here is confirmed and dropped (nothing is running).
    pub async fn take_next(&self, ctx: &ToolContext) -> Result<Option<()>, ToolError> {
        loop {
            let Some((name, next)) = self.queued(ctx).await.into_iter().next() else {
                return Ok(None);
            };
            if next.stop || crate::queue::is_stop_word(&next.text, &self.0.queue.stop_words) {
                self.record_stop(ctx, &name, &next).await?;
                continue;
            }
            self.inject(ctx, vec![(name, next)]).await?;
            return Ok(Some(()));
        }
    }

    pub(super) async fn record_stop(
        &self,
        ctx: &ToolContext,
        name: &str,
        stop: &crate::queue::QueuedMessage,
    ) -> Result<(), ToolError> {
        let now = Utc::now();
        // What the conversation keeps: no command line in it (the front end says how to go on).
        let reply = format!(
            "Stopped, as you asked (\"{}\"). The session is kept.",
            stop.text.trim()
        );
        let (stopped, asked) = (queued_message(stop, now), stop.text.trim().to_string());
        self.0
            .store
            .update_async(&ctx.session_id, now, move |state| {
                state.session.messages.push(stopped);
                state
                    .session
                    .messages
                    .push(Message::new(Role::Assistant, reply, now));
                state.session.stop_reason =
                    Some(format!("stop word \"{asked}\" at {}", now.to_rfc3339()));
                Ok(())
            })
            .await?;
        self.inbox(&ctx.session_id)
            .remove_async(vec![name.to_string()])
            .await?;
        if let Ok(mut s) = self.0.stopped_by.lock() {
            *s = Some(stop.text.clone());
        }
        tracing::info!(session = %ctx.session_id, op = "queue", result = "stopped", "stop word received");
        Ok(())
    }
}

/// A queued message as it enters the conversation (seed 004: marked as an interrupt).
fn queued_message(q: &crate::queue::QueuedMessage, now: chrono::DateTime<Utc>) -> Message {
    let mut m = Message::new(Role::User, q.text.clone(), now);
    m.is_interrupt = Some(true);
    m.inbox_id = Some(q.id.clone());
    m.priority = Some(q.priority);
    m.queued_at = Some(q.queued_at);
    m.session_key = Some(q.session_key.clone());
    m
}
