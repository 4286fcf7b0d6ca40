//! The user's session hooks as a per-run behaviour, for runs and chats alike: `session-start`
//! as the session opens (after the hook settings set aside are named); `notification` (a
//! question waits, or the task is done) and `session-end` once the closing write is made. A
//! failed run fires neither.

use futures_util::future::BoxFuture;

use super::{Around, Closing, Opening};
use crate::hooks::{self, About, HookEvent};
use crate::protocol::SessionStatus;
use crate::protocol::events::Event;

/// Fires the session's start and end hooks.
pub(in crate::agent) struct UserHooks {
    hooks: crate::config::HooksConfig,
    root: std::path::PathBuf,
}

impl UserHooks {
    pub fn new(hooks: crate::config::HooksConfig, root: std::path::PathBuf) -> UserHooks {
        UserHooks { hooks, root }
    }
}

/// What the `notification` hooks are told as a session closes: a question waits, or the task
/// is done.
fn notification(closing: &Closing<'_>) -> Option<(&'static str, String)> {
    match (closing.question, closing.status) {
        (Some(q), _) => Some(("question", format!("nop is waiting for your answer: {q}"))),
        (None, SessionStatus::Completed) => Some(("done", "nop finished the task".to_string())),
        _ => None,
    }
}

impl Around for UserHooks {
    fn on_open<'a>(&'a mut self, opening: &'a mut Opening<'_>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            for message in &self.hooks.warnings {
                tracing::warn!(session = %opening.session_id, op = "hook", result = "set aside", "{message}");
                let _ = opening.events.send(Event::Warning {
                    message: message.clone(),
                });
            }
            let event = HookEvent::SessionStart {
                about: About {
                    session_id: opening.session_id,
                    agent: opening.agent,
                },
                resumed: opening.resumed,
                mode: opening.mode,
            };
            hooks::fire(&self.hooks, &self.root, &event).await;
        })
    }

    fn on_closed<'a>(&'a mut self, closing: &'a Closing<'a>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if closing.failed {
                return;
            }
            let about = About {
                session_id: closing.session_id,
                agent: closing.agent,
            };
            if let Some((kind, text)) = notification(closing) {
                let event = HookEvent::Notification {
                    about,
                    kind,
                    message: text.into(),
                };
                hooks::fire(&self.hooks, &self.root, &event).await;
            }
            let event = HookEvent::SessionEnd {
                about,
                status: closing.status.as_str(),
                mode: closing.mode,
            };
            hooks::fire(&self.hooks, &self.root, &event).await;
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::turn::EventSink;
    use pretty_assertions::assert_eq;

    /// Hooks of every session event that append what they read to `hooks.log` in `root`.
    fn logging() -> crate::config::HooksConfig {
        let log = || vec!["cat >> hooks.log; echo >> hooks.log".into()];
        crate::config::HooksConfig {
            session_start: log(),
            notification: log(),
            session_end: log(),
            ..crate::config::HooksConfig::default()
        }
    }

    fn events_in(root: &std::path::Path) -> Vec<serde_json::Value> {
        std::fs::read_to_string(root.join("hooks.log"))
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).expect("a hook's JSON"))
            .collect()
    }

    fn closing<'a>(
        events: &'a EventSink,
        status: SessionStatus,
        question: Option<&'a str>,
        failed: bool,
    ) -> Closing<'a> {
        Closing {
            session_id: "s1",
            agent: "coder",
            mode: crate::hooks::Mode::Run(Some("all done")),
            status,
            question,
            failed,
            tool_calls: 0,
            events,
        }
    }

    #[tokio::test]
    async fn a_chat_opens_with_its_mode_and_a_run_closes_with_a_notification_then_its_end() {
        let root = tempfile::tempdir().expect("temp");
        let mut hooks = UserHooks::new(logging(), root.path().to_path_buf());
        let (events, _rx) = tokio::sync::mpsc::unbounded_channel();
        let mut opening = Opening {
            session_id: "s1",
            agent: "coder",
            resumed: true,
            mode: crate::hooks::Mode::Chat,
            events: &events,
            run: None,
        };
        hooks.on_open(&mut opening).await;
        hooks
            .on_closed(&closing(&events, SessionStatus::Completed, None, false))
            .await;
        let seen = events_in(root.path());
        let names: Vec<&str> = seen.iter().map(|e| e["event"].as_str().unwrap()).collect();
        assert_eq!(names, ["session-start", "notification", "session-end"]);
        assert_eq!(seen[0]["mode"], "chat");
        assert_eq!(seen[0]["resumed"], true);
        assert_eq!(seen[1]["message"], "nop finished the task");
        assert_eq!(seen[2]["status"], "completed");
        assert_eq!(seen[2]["final_message"], "all done");
    }

    #[tokio::test]
    async fn a_question_is_notified_and_a_failed_run_fires_nothing() {
        let root = tempfile::tempdir().expect("temp");
        let mut hooks = UserHooks::new(logging(), root.path().to_path_buf());
        let (events, _rx) = tokio::sync::mpsc::unbounded_channel();
        hooks
            .on_closed(&closing(&events, SessionStatus::Error, None, true))
            .await;
        assert!(events_in(root.path()).is_empty());
        hooks
            .on_closed(&closing(
                &events,
                SessionStatus::WaitingInput,
                Some("which file?"),
                false,
            ))
            .await;
        let seen = events_in(root.path());
        assert_eq!(
            seen[0]["message"],
            "nop is waiting for your answer: which file?"
        );
        assert_eq!(seen[0]["kind"], "question");
        assert_eq!(seen[1]["status"], "waiting_input");
        // Neither a question nor done: the end only.
        std::fs::remove_file(root.path().join("hooks.log")).expect("rm");
        hooks
            .on_closed(&closing(&events, SessionStatus::Cancelled, None, false))
            .await;
        let names: Vec<String> = events_in(root.path())
            .iter()
            .map(|e| e["event"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(names, ["session-end"]);
    }
}
