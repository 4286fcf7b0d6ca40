//! The user's `stop` hooks (a run) and `subagent-stop` hooks (a subagent's run): a hook that
//! blocks keeps the agent going with its reason as the next input, a bounded number of times
//! (`hooks.max_stop_continuations`) and never past the run's turns.

use futures_util::future::BoxFuture;

use super::{Around, Next, Stopped};
use crate::hooks::{self, About, Hook, HookEvent, HookOutcome};
use crate::tools::ToolError;

/// Fires the stop hooks of a run (`caller` unset) or of a subagent called by session `caller`.
pub(in crate::agent) struct StopHooks {
    pub hooks: crate::config::HooksConfig,
    pub root: std::path::PathBuf,
    /// The session that called this subagent; `None` for a run.
    pub caller: Option<String>,
    kept_going: u32,
}

impl StopHooks {
    pub fn new(
        hooks: crate::config::HooksConfig,
        root: std::path::PathBuf,
        caller: Option<String>,
    ) -> StopHooks {
        StopHooks {
            hooks,
            root,
            caller,
            kept_going: 0,
        }
    }

    fn hook(&self) -> Hook {
        match self.caller {
            Some(_) => Hook::SubagentStop,
            None => Hook::Stop,
        }
    }

    /// The event its hooks read when the agent of session `session_id` answered `answer`.
    fn event<'a>(&'a self, session_id: &'a str, agent: &'a str, answer: &'a str) -> HookEvent<'a> {
        let about = About { session_id, agent };
        let active = self.kept_going > 0;
        match &self.caller {
            Some(caller) => HookEvent::SubagentStop {
                about,
                caller,
                final_message: answer,
                active,
            },
            None => HookEvent::Stop {
                about,
                final_message: answer,
                active,
            },
        }
    }
}

impl Around for StopHooks {
    fn on_stop<'a>(
        &'a mut self,
        stopped: &'a Stopped<'a>,
    ) -> BoxFuture<'a, Result<Next, ToolError>> {
        Box::pin(async move {
            let hook = self.hook();
            if self.kept_going >= self.hooks.max_stop_continuations
                || stopped.turns_left == 0
                || !hooks::configured(&self.hooks, hook)
            {
                return Ok(Next::Pass);
            }
            // The hook may read the session: the answer is in it.
            stopped.flush().await?;
            let event = self.event(&stopped.ctx.session_id, &stopped.ctx.agent, stopped.answer);
            let HookOutcome::Blocked(reason) = hooks::fire(&self.hooks, &self.root, &event).await
            else {
                return Ok(Next::Pass);
            };
            self.kept_going += 1;
            tracing::info!(session = %stopped.ctx.session_id, op = "hook", event = hook.name(), result = "continued", "{reason}");
            Ok(Next::Continue(reason))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn a_run_and_a_subagent_send_claude_codes_fields_in_its_order() {
        let run = StopHooks::new(Default::default(), "/r".into(), None);
        assert_eq!(run.hook(), Hook::Stop);
        assert_eq!(
            run.event("s1", "coder", "done").to_json().to_string(),
            r#"{"session_id":"s1","agent":"coder","final_message":"done","stop_hook_active":false,"event":"stop"}"#
        );
        let mut child = StopHooks::new(Default::default(), "/r".into(), Some("parent".into()));
        child.kept_going = 1;
        assert_eq!(child.hook(), Hook::SubagentStop);
        assert_eq!(
            child.event("s2", "reviewer", "ok").to_json().to_string(),
            r#"{"session_id":"s2","agent":"reviewer","caller_session_id":"parent","final_message":"ok","stop_hook_active":true,"event":"subagent-stop"}"#
        );
    }
}
