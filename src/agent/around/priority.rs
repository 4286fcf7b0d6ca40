//! Seed 000's session stack as a per-run behaviour: a session that took a place on the user's
//! stack (an agent with a priority) gives it up as it closes, or keeps it while it waits for
//! the user's answer.

use futures_util::future::BoxFuture;

use super::{Around, Closing};
use crate::protocol::SessionStatus;
use crate::queue::priority::Coordinator;

/// Leaves the session stack (or waits on it) as the session closes.
pub(in crate::agent) struct Priority {
    coordinator: Option<Coordinator>,
}

impl Priority {
    /// The behaviour of a session admitted to the stack of `coordinator` (`None`: it has no
    /// priority, and nothing to give up).
    pub fn new(coordinator: Option<Coordinator>) -> Priority {
        Priority { coordinator }
    }
}

impl Around for Priority {
    fn on_closed<'a>(&'a mut self, closing: &'a Closing<'a>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let Some(coordinator) = self.coordinator.clone() else {
                return;
            };
            let (id, waits) = (
                closing.session_id.to_string(),
                closing.status == SessionStatus::WaitingInput && !closing.failed,
            );
            let left = tokio::task::spawn_blocking(move || {
                if waits {
                    coordinator.set_waiting(&id)
                } else {
                    coordinator.finish(&id)
                }
            })
            .await;
            if let Ok(Err(e)) = left {
                tracing::warn!(session = %closing.session_id, op = "priority", result = "error", "the session stack could not be told the session closed: {e}");
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::priority::{Admission, EntryState};
    use std::time::Duration;

    fn closing<'a>(
        id: &'a str,
        status: SessionStatus,
        failed: bool,
        events: &'a crate::agent::turn::EventSink,
    ) -> Closing<'a> {
        Closing {
            session_id: id,
            agent: "coder",
            mode: crate::hooks::Mode::Run(None),
            status,
            question: None,
            failed,
            tool_calls: 0,
            events,
        }
    }

    #[tokio::test]
    async fn a_session_waiting_for_an_answer_keeps_its_place_and_one_that_ended_leaves() {
        let dir = tempfile::tempdir().expect("temp");
        let coordinator = Coordinator::new(dir.path(), "me", Duration::from_secs(60));
        let (events, _rx) = tokio::sync::mpsc::unbounded_channel();
        // Each pauses the one below it.
        for (id, level) in [("s1", 3), ("s2", 5), ("s3", 7)] {
            let admitted = coordinator.admit(id, "coder", level, true).expect("admit");
            assert!(matches!(admitted, Admission::Admitted { .. }), "{id}");
        }
        let mut priority = Priority::new(Some(coordinator.clone()));
        // A failed run waits for nobody's answer.
        priority
            .on_closed(&closing("s3", SessionStatus::WaitingInput, true, &events))
            .await;
        priority
            .on_closed(&closing("s2", SessionStatus::Completed, false, &events))
            .await;
        priority
            .on_closed(&closing("s1", SessionStatus::WaitingInput, false, &events))
            .await;
        assert_eq!(
            coordinator.state_of("s1").expect("read"),
            Some(EntryState::WaitingInput)
        );
        assert_eq!(coordinator.state_of("s2").expect("read"), None);
        assert_eq!(coordinator.state_of("s3").expect("read"), None);
    }
}
