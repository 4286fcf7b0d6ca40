//! Seed 002 §3.3's checks on load as a per-run behaviour: as a resumed session opens, its
//! parent reference is followed (a fork) and plan.xml is checked against the messages, unless
//! nothing changed since the last check; a run that found them consistent records, with its
//! closing write, what it leaves, so that the next load with nothing changed skips the check.

use chrono::Utc;
use futures_util::future::BoxFuture;

use super::{Around, Change, Closing, Opening};
use crate::agent::turn::EventSink;
use crate::protocol::events::Event;
use crate::protocol::session::ConsistencyChecked;
use crate::session::Store;

/// Checks a resumed session as it opens.
pub(in crate::agent) struct ChecksOnLoad {
    store: Store,
    /// The plan and the conversation were found in agreement (or repaired, or as the last
    /// checked run left them).
    consistent: bool,
}

impl ChecksOnLoad {
    pub fn new(store: Store) -> ChecksOnLoad {
        ChecksOnLoad {
            store,
            consistent: false,
        }
    }
}

impl Around for ChecksOnLoad {
    fn on_open<'a>(&'a mut self, opening: &'a mut Opening<'_>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let Some(run) = opening.run.as_ref() else {
                return;
            };
            if !opening.resumed {
                return;
            }
            check_parent(&self.store, opening.session_id, opening.events).await;
            if !run.ctx.advisors {
                return;
            }
            if run.unchanged {
                // Nobody changed the session since a check: asking again would cost a model
                // round trip for the same answer.
                tracing::info!(session = %opening.session_id, op = "consistency", result = "skipped", "unchanged since the last check");
                self.consistent = true;
                return;
            }
            // Warnings only.
            self.consistent = crate::advisors::check_consistency(run.engine, run.ctx, None)
                .await
                .is_some_and(|checked| checked.decision.consistent || !checked.repairs.is_empty());
        })
    }

    fn on_close<'a>(&'a mut self, closing: &'a Closing<'a>) -> BoxFuture<'a, Option<Change>> {
        let record = self.consistent && !closing.failed;
        Box::pin(async move {
            if !record {
                return None;
            }
            Some(Box::new(|state: &mut crate::session::Recent| {
                state.session.consistency_checked = Some(ConsistencyChecked::of(
                    &state.plan,
                    &state.session.earlier_messages,
                    &state.session.messages,
                    Utc::now(),
                ));
            }) as Change)
        })
    }
}

/// Follows a forked session's `parentSession` reference to the snapshot it came from (its own
/// copy first, then the parent's directory). A snapshot that is gone, or that is not of the
/// session it names, is a warning: the session's own conversation is what runs.
async fn check_parent(store: &Store, session_id: &str, events: &EventSink) {
    let store = store.clone();
    let id = session_id.to_string();
    let checked = tokio::task::spawn_blocking(move || {
        let session = store.read_recent(&id)?.session;
        let found = store.parent_snapshot(&session)?;
        Ok::<_, crate::session::SessionError>(session.parent_session.zip(found))
    })
    .await;
    let problem = match checked {
        Ok(Ok(Some((parent, snapshot)))) if snapshot.session_id != parent.id => Some(format!(
            "snapshot {} that session {session_id} was forked from belongs to session {}, not to its parent {}",
            parent.snapshot_id, snapshot.session_id, parent.id
        )),
        Ok(Ok(_)) => None,
        Ok(Err(e)) => Some(format!(
            "session {session_id}'s parent reference cannot be followed: {e}"
        )),
        Err(e) => Some(e.to_string()),
    };
    if let Some(problem) = problem {
        let message = format!("{problem}; the session's own copy of the conversation runs");
        tracing::warn!(session = %session_id, op = "load", result = "parent-missing", "{message}");
        let _ = events.send(Event::Warning { message });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::SessionStatus;
    use crate::protocol::session::ParentSession;

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().expect("temp");
        let store = Store::new(
            dir.path().join("sessions"),
            std::time::Duration::from_secs(5),
        );
        (dir, store)
    }

    fn closing(events: &EventSink, failed: bool) -> Closing<'_> {
        Closing {
            session_id: "s1",
            agent: "coder",
            mode: crate::hooks::Mode::Run(None),
            status: SessionStatus::Completed,
            question: None,
            failed,
            tool_calls: 0,
            events,
        }
    }

    #[tokio::test]
    async fn only_a_consistent_run_that_did_not_fail_records_the_check() {
        let (_dir, store) = store();
        let id = store
            .create("coder", Utc::now())
            .expect("create")
            .session_id;
        let (events, _rx) = tokio::sync::mpsc::unbounded_channel();
        let mut checks = ChecksOnLoad::new(store.clone());
        assert!(checks.on_close(&closing(&events, false)).await.is_none());
        checks.consistent = true;
        assert!(checks.on_close(&closing(&events, true)).await.is_none());
        let change = checks
            .on_close(&closing(&events, false))
            .await
            .expect("a change");
        store
            .update(&id, Utc::now(), |state| {
                change(state);
                Ok(())
            })
            .expect("update");
        let state = store.read(&id).expect("read");
        let checked = state.session.consistency_checked.clone().expect("recorded");
        assert!(checked.covers(&state.plan, state.sealed(), state.recent_messages()));
    }

    #[tokio::test]
    async fn a_fork_whose_snapshot_is_gone_is_a_warning_and_a_session_without_a_parent_is_not() {
        let (_dir, store) = store();
        let (events, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let plain = store
            .create("coder", Utc::now())
            .expect("create")
            .session_id;
        check_parent(&store, &plain, &events).await;
        assert!(rx.try_recv().is_err());
        let fork = store
            .create("coder", Utc::now())
            .expect("create")
            .session_id;
        store
            .update(&fork, Utc::now(), |state| {
                state.session.parent_session = Some(ParentSession {
                    id: plain.clone(),
                    snapshot_id: "gone".into(),
                    timestamp: Utc::now(),
                });
                Ok(())
            })
            .expect("update");
        check_parent(&store, &fork, &events).await;
        let Ok(Event::Warning { message }) = rx.try_recv() else {
            panic!("no warning");
        };
        assert!(
            message.contains("the session's own copy of the conversation runs"),
            "{message}"
        );
    }
}
