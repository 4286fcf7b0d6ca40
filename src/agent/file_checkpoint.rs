//! The file checkpoint of a run, as a task beside it: recorded in the background as the run
//! begins (the first tool call waits for it, the first model request does not) and again as it
//! ends, when the git repositories the run created are named.

use chrono::Utc;

use super::runtime::Runtime;
use super::turn::EventSink;
use crate::protocol::events::Event;

impl Runtime {
    /// Records the working files as the run begins, in a new turn of session.json's
    /// `checkpoints`, in the background: the first model request does not wait for it, the
    /// first tool call does (`ready`, opened when it is done). Returns what [`Runtime::end_turn`]
    /// waits for: the nested repositories found, or `None` when there is no checkpoint (a
    /// failure is a warning: the run goes on without one).
    pub(super) async fn begin_turn(
        &self,
        session_id: &str,
        checkpoints: Option<&crate::checkpoint::Checkpoints>,
        input: Option<&str>,
        events: &EventSink,
    ) -> (Option<TurnStart>, crate::tools::Ready) {
        let Some(checkpoints) = checkpoints.cloned() else {
            return (None, crate::tools::Ready::default());
        };
        let started_at = Utc::now();
        let messages_before = match self.store.read_recent_async(session_id).await {
            Ok(recent) => recent.message_count(),
            Err(e) => {
                tracing::warn!(session = %session_id, op = "checkpoint", result = "error", "{e}");
                return (None, crate::tools::Ready::default());
            }
        };
        let prompt: String = match input {
            Some(text) => {
                let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
                let mut cut: String = line.chars().take(80).collect();
                if line.chars().count() > 80 {
                    cut.push('…');
                }
                cut
            }
            None => "(queued messages)".to_string(),
        };
        let (open, ready) = crate::tools::Ready::new();
        let store = self.store.clone();
        let id = session_id.to_string();
        let events = events.clone();
        let task = tokio::spawn(async move {
            let recorded = tokio::task::spawn_blocking(move || checkpoints.record_full()).await;
            let recorded = match recorded {
                Ok(Ok(recorded)) => recorded,
                Ok(Err(e)) => {
                    tracing::warn!(session = %id, op = "checkpoint", result = "error", "{e}");
                    let _ = events.send(Event::Warning {
                        message: format!(
                            "no file checkpoint for this run (`nop undo` cannot undo it): {e}"
                        ),
                    });
                    return None;
                }
                Err(_) => return None,
            };
            let before = recorded.tree;
            let written = store
                .update_async(&id, started_at, move |state| {
                    state
                        .session
                        .checkpoints
                        .push(crate::protocol::TurnCheckpoint {
                            before,
                            after: None,
                            started_at,
                            ended_at: None,
                            messages_before,
                            prompt,
                            undone_at: None,
                        });
                    Ok(())
                })
                .await;
            drop(open);
            match written {
                Ok(_) => Some(recorded.nested),
                Err(e) => {
                    tracing::warn!(session = %id, op = "checkpoint", result = "error", "{e}");
                    None
                }
            }
        });
        (Some(TurnStart(task)), ready)
    }

    /// Records the working files as the run ends, closing the turn [`Runtime::begin_turn`]
    /// opened, and names the git repositories the run created.
    pub(super) async fn end_turn(
        &self,
        session_id: &str,
        checkpoints: Option<&crate::checkpoint::Checkpoints>,
        begun: Option<TurnStart>,
        events: &EventSink,
        tool_calls: u32,
    ) {
        if let Some(closing) = self
            .close_files(session_id, checkpoints, begun, events, tool_calls)
            .await
        {
            self.close_turn(session_id, closing).await;
        }
    }

    /// The working files as the run ends: the tree to close the turn with (`Closing(None)`: the
    /// tree it began with), and a warning naming the git repositories the run created. `None`:
    /// there is no turn to close (no checkpoint began, or it failed).
    pub(super) async fn close_files(
        &self,
        session_id: &str,
        checkpoints: Option<&crate::checkpoint::Checkpoints>,
        begun: Option<TurnStart>,
        events: &EventSink,
        tool_calls: u32,
    ) -> Option<Closing> {
        let TurnStart(task) = begun?;
        let Ok(Some(nested_before)) = task.await else {
            return None;
        };
        if tool_calls == 0 {
            // The agent called no tool: it changed no file, so the run ends where it began, and
            // nothing needs recording again (the next run's first checkpoint sees any change of
            // yours).
            return Some(Closing(None));
        }
        let checkpoints = checkpoints.cloned()?;
        let recorded = match tokio::task::spawn_blocking(move || checkpoints.record_full()).await {
            Ok(Ok(recorded)) => recorded,
            Ok(Err(e)) => {
                tracing::warn!(session = %session_id, op = "checkpoint", result = "error", "{e}");
                return None;
            }
            Err(_) => return None,
        };
        let created: Vec<&String> = recorded
            .nested
            .iter()
            .filter(|n| !nested_before.contains(n))
            .collect();
        if !created.is_empty() {
            let names: Vec<String> = created.iter().map(|n| format!("{n}/")).collect();
            let message = format!(
                "this run created a git repository at {}: git commands run there (yours too) \
                 read its own configuration and hooks, which the agent wrote and nop does not \
                 check; look at its .git/config and .git/hooks before you run git in it",
                names.join(", ")
            );
            tracing::warn!(session = %session_id, op = "checkpoint", result = "nested-repository", "{message}");
            let _ = events.send(Event::Warning { message });
        }
        Some(Closing(Some(recorded.tree)))
    }

    /// Records the run's closing tree in a write of its own.
    async fn close_turn(&self, session_id: &str, closing: Closing) {
        let now = Utc::now();
        let closed = self
            .store
            .update_async(session_id, now, move |state| {
                closing.apply(&mut state.session, now);
                Ok(())
            })
            .await;
        if let Err(e) = closed {
            tracing::warn!(session = %session_id, op = "checkpoint", result = "error", "{e}");
        }
    }
}

/// The run's first file checkpoint, being recorded: the nested repositories it found, or
/// `None` when it failed ([`Runtime::begin_turn`]).
pub(super) struct TurnStart(tokio::task::JoinHandle<Option<Vec<String>>>);

/// The tree a run's turn closes with; `None`: the tree it began with.
pub(super) struct Closing(Option<String>);

impl Closing {
    /// Closes the session's open turn (the last, without an `after`).
    pub(super) fn apply(
        self,
        session: &mut crate::protocol::SessionFile,
        now: chrono::DateTime<Utc>,
    ) {
        if let Some(turn) = session.checkpoints.last_mut()
            && turn.after.is_none()
        {
            turn.after = Some(self.0.unwrap_or_else(|| turn.before.clone()));
            turn.ended_at = Some(now);
        }
    }
}
