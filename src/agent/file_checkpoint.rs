//! The file checkpoint of a run, as a task beside it: recorded in the background as the run's
//! first model request goes out (nothing of it runs before that request; the first tool call
//! waits for it) and again as the run ends, when the git repositories the run created are
//! named. A run that ends before its first checkpoint is written writes it with its end.

use chrono::Utc;

use super::turn::EventSink;
use crate::protocol::events::Event;
use crate::session::Store;

/// Opens a new turn of session.json's `checkpoints` with the working files as the run
/// begins, recorded in the background as the first model request goes out (the turn
/// loop says so through the returned gate): nothing of it runs before that request, and
/// the first tool call waits for it. `messages_before`: the session's messages before this
/// run's. Returns what [`close_files`] waits for, `None` without checkpoints (a
/// failure is a warning: the run goes on without one).
pub(super) fn begin_turn(
    store: &Store,
    session_id: &str,
    checkpoints: Option<&crate::checkpoint::Checkpoints>,
    input: Option<&str>,
    events: &EventSink,
    messages_before: usize,
) -> (Option<TurnStart>, crate::tools::Ready) {
    let Some(checkpoints) = checkpoints.cloned() else {
        return (None, crate::tools::Ready::default());
    };
    let started_at = Utc::now();
    let prompt = short_prompt(input);
    let (gate, ready) = crate::tools::Ready::new();
    let closing = std::sync::Arc::new(tokio::sync::Mutex::new(false));
    let store = store.clone();
    let id = session_id.to_string();
    let events = events.clone();
    let claimed = std::sync::Arc::clone(&closing);
    let task = tokio::spawn(async move {
        let crate::tools::Gate {
            open,
            mut requested,
        } = gate;
        // Every `Ready` gone (the run ended before asking) counts as asked.
        let _ = requested.wait_for(|asked| *asked).await;
        let recorded = record_start(checkpoints, &id, &events).await?;
        tracing::debug!(session = %id, op = "checkpoint", result = ?recorded.how, "began");
        let turn = crate::protocol::TurnCheckpoint {
            before: recorded.tree,
            after: None,
            started_at,
            ended_at: None,
            messages_before,
            prompt,
            undone_at: None,
        };
        // A run that is already closing writes the turn with its end: one write.
        let closing = claimed.lock().await;
        if *closing {
            drop(open);
            return Some(Begun {
                nested: recorded.nested,
                unwritten: Some(turn),
            });
        }
        let written = store
            .update_async(&id, started_at, move |state| {
                state.session.checkpoints.push(turn);
                Ok(())
            })
            .await;
        drop(closing);
        drop(open);
        match written {
            Ok(_) => Some(Begun {
                nested: recorded.nested,
                unwritten: None,
            }),
            Err(e) => {
                tracing::warn!(session = %id, op = "checkpoint", result = "error", "{e}");
                None
            }
        }
    });
    let start = TurnStart {
        task,
        ready: ready.clone(),
        closing,
    };
    (Some(start), ready)
}

/// The working files as the run ends: the tree to close the turn with (`TurnEnd(None)`: the
/// tree it began with), and a warning naming the git repositories the run created. `None`:
/// there is no turn to close (no checkpoint began, or it failed).
pub(super) async fn close_files(
    session_id: &str,
    checkpoints: Option<&crate::checkpoint::Checkpoints>,
    begun: Option<TurnStart>,
    events: &EventSink,
    tool_calls: u32,
) -> Option<TurnEnd> {
    if tool_calls > 0
        && let Some(checkpoints) = checkpoints
    {
        checkpoints.tools_ran();
    }
    let TurnStart {
        task,
        ready,
        closing,
    } = begun?;
    // A run that ended before its first request went out still records how it began.
    ready.requested();
    *closing.lock().await = true;
    let Ok(Some(Begun {
        nested: nested_before,
        unwritten,
    })) = task.await
    else {
        return None;
    };
    if tool_calls == 0 {
        // The agent called no tool: it changed no file, so the run ends where it began, and
        // nothing needs recording again (the next run's first checkpoint sees any change of
        // yours).
        return Some(TurnEnd {
            unwritten,
            after: None,
        });
    }
    let checkpoints = checkpoints.cloned()?;
    let recorded = match tokio::task::spawn_blocking(move || checkpoints.record_full()).await {
        Ok(Ok(recorded)) => recorded,
        Ok(Err(e)) => {
            tracing::warn!(session = %session_id, op = "checkpoint", result = "error", "{e}");
            let _ = events.send(Event::Warning {
                message: format!(
                    "no file checkpoint at the end of this run (`nop undo` cannot undo it): {e}"
                ),
            });
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
    tracing::debug!(session = %session_id, op = "checkpoint", result = ?recorded.how, "ended");
    Some(TurnEnd {
        unwritten,
        after: Some(recorded.tree),
    })
}

/// The run's first file checkpoint, waiting for the first request or being recorded
/// ([`begin_turn`]).
pub(super) struct TurnStart {
    task: tokio::task::JoinHandle<Option<Begun>>,
    /// Tells the task the run asked the model (or is over).
    ready: crate::tools::Ready,
    /// Set when the run closes: the task then leaves the turn for the closing write.
    closing: std::sync::Arc<tokio::sync::Mutex<bool>>,
}

/// What the run's first checkpoint found: the nested repositories, and the turn when the run
/// was closing before it was written.
struct Begun {
    nested: Vec<String>,
    unwritten: Option<crate::protocol::TurnCheckpoint>,
}

/// How a run's turn closes: the turn itself when it is not written yet, and the tree it ends
/// with (`None`: the tree it began with).
pub(super) struct TurnEnd {
    unwritten: Option<crate::protocol::TurnCheckpoint>,
    after: Option<String>,
}

impl TurnEnd {
    /// Closes the session's open turn (the last, without an `after`), or adds it closed.
    pub(super) fn apply(
        self,
        session: &mut crate::protocol::SessionFile,
        now: chrono::DateTime<Utc>,
    ) {
        if let Some(mut turn) = self.unwritten {
            turn.after = Some(self.after.unwrap_or_else(|| turn.before.clone()));
            turn.ended_at = Some(now);
            session.checkpoints.push(turn);
        } else if let Some(turn) = session.checkpoints.last_mut()
            && turn.after.is_none()
        {
            turn.after = Some(self.after.unwrap_or_else(|| turn.before.clone()));
            turn.ended_at = Some(now);
        }
    }
}

/// The run's prompt as its checkpoint names it: on one line, cut at 80 characters.
fn short_prompt(input: Option<&str>) -> String {
    let Some(text) = input else {
        return "(queued messages)".to_string();
    };
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut cut: String = line.chars().take(80).collect();
    if line.chars().count() > 80 {
        cut.push('…');
    }
    cut
}

/// Records the files as a run begins, on a blocking thread; a failure is a warning (the run
/// goes on without a checkpoint) and `None`.
async fn record_start(
    checkpoints: crate::checkpoint::Checkpoints,
    id: &str,
    events: &EventSink,
) -> Option<crate::checkpoint::Recorded> {
    match tokio::task::spawn_blocking(move || checkpoints.record_at_start()).await {
        Ok(Ok(recorded)) => Some(recorded),
        Ok(Err(e)) => {
            tracing::warn!(session = %id, op = "checkpoint", result = "error", "{e}");
            let _ = events.send(Event::Warning {
                message: format!(
                    "no file checkpoint for this run (`nop undo` cannot undo it): {e}"
                ),
            });
            None
        }
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{SessionFile, TurnCheckpoint};

    fn turn(before: &str) -> TurnCheckpoint {
        TurnCheckpoint {
            before: before.to_string(),
            after: None,
            started_at: Utc::now(),
            ended_at: None,
            messages_before: 2,
            prompt: "p".to_string(),
            undone_at: None,
        }
    }

    #[test]
    fn a_turn_not_yet_written_is_added_closed_and_a_written_one_is_closed_in_place() {
        let now = Utc::now();
        // TurnEnd before the first checkpoint was written: the turn comes with the closing.
        let mut session = SessionFile::new("s".into(), "coder".into(), now);
        let closing = TurnEnd {
            unwritten: Some(turn("t0")),
            after: None,
        };
        closing.apply(&mut session, now);
        assert_eq!(session.checkpoints.len(), 1);
        assert_eq!(session.checkpoints[0].after.as_deref(), Some("t0"));
        assert_eq!(session.checkpoints[0].ended_at, Some(now));
        // Written already: the open turn is closed with the tree the run ends with.
        session.checkpoints.push(turn("t1"));
        let closing = TurnEnd {
            unwritten: None,
            after: Some("t2".to_string()),
        };
        closing.apply(&mut session, now);
        assert_eq!(session.checkpoints.len(), 2);
        assert_eq!(session.checkpoints[1].after.as_deref(), Some("t2"));
        // Nothing open: nothing changes.
        let closing = TurnEnd {
            unwritten: None,
            after: Some("t3".to_string()),
        };
        closing.apply(&mut session, now);
        assert_eq!(session.checkpoints[1].after.as_deref(), Some("t2"));
    }
}
