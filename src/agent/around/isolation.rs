//! `isolation: worktree` as a behaviour on a subagent's session: once its closing write is
//! made, what it changed in its worktree is committed on its branch (or the empty worktree
//! removed), and what the caller's model reads of it is left in [`OwnWorktree::report`].

use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;

use super::{Around, Closing};
use crate::checkpoint::Isolated;

/// Finishes an isolated subagent's worktree as its session closes.
pub(in crate::agent) struct OwnWorktree {
    isolated: Option<Isolated>,
    caller: String,
    report: Arc<Mutex<Option<String>>>,
}

impl OwnWorktree {
    /// The behaviour for the worktree `isolated` of a subagent called by session `caller`.
    pub fn new(isolated: Isolated, caller: String) -> OwnWorktree {
        OwnWorktree {
            isolated: Some(isolated),
            caller,
            report: Arc::default(),
        }
    }

    /// Where what became of the worktree is left once the session is closed.
    pub fn report(&self) -> Arc<Mutex<Option<String>>> {
        Arc::clone(&self.report)
    }
}

impl Around for OwnWorktree {
    fn on_closed<'a>(&'a mut self, closing: &'a Closing<'a>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let Some(isolated) = self.isolated.take() else {
                return;
            };
            let summary = finish(isolated, closing.agent, closing.session_id, &self.caller).await;
            if let Ok(mut report) = self.report.lock() {
                *report = Some(summary);
            }
        })
    }
}

/// Commits an isolated subagent's changes on its branch (or removes its empty worktree); what
/// the caller's model reads of it.
async fn finish(isolated: Isolated, target: &str, child: &str, caller: &str) -> String {
    let message = format!(
        "nop: changes of agent {target} (session {child})\n\nMade by nop's subagent `{target}` in session {child}, called by session {caller}.\n"
    );
    let path = isolated.path.clone();
    let branch = isolated.branch.clone();
    let ended = tokio::task::spawn_blocking(move || isolated.finish(&message)).await;
    match ended {
        Ok(Ok(ended)) => {
            let result = match ended {
                crate::checkpoint::Ended::Committed { .. } => "committed",
                crate::checkpoint::Ended::Unchanged => "unchanged",
            };
            tracing::info!(session = %child, agent = %target, op = "isolation", branch = %branch, result, "{}", ended.summary());
            ended.summary()
        }
        Ok(Err(e)) => {
            tracing::error!(session = %child, agent = %target, op = "isolation", branch = %branch, error = %e, "the worktree's changes could not be committed");
            format!(
                "its changes could not be committed on branch {branch} ({e}); they are still in the worktree {}",
                path.display()
            )
        }
        Err(e) => format!(
            "its worktree {} (branch {branch}) was not finished: {e}",
            path.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::fixture::Fixture;
    use crate::protocol::SessionStatus;

    fn git(root: &std::path::Path, args: &[&str]) {
        let out = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .current_dir(root)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .expect("git");
        assert!(out.status.success(), "{out:?}");
    }

    #[tokio::test]
    async fn the_worktree_is_finished_once_the_session_is_closed_and_its_report_kept() {
        let f = Fixture::new();
        let root = f.dir.path();
        std::fs::write(root.join("a.txt"), "one\n").expect("write");
        git(root, &["init", "-q"]);
        git(root, &["add", "a.txt"]);
        git(root, &["commit", "-qm", "first"]);
        let checkpoints = f
            .runtime
            .workspace()
            .checkpoints(f.runtime.config())
            .expect("checkpoints");
        let policy = crate::permissions::load_chain(root, "coder", &[]).expect("rules");
        let isolated =
            crate::checkpoint::isolate(&checkpoints, "coder-s2", &policy).expect("a worktree");
        let worktree = isolated.path.clone();
        std::fs::write(worktree.join("a.txt"), "two\n").expect("write");
        let mut behaviour = OwnWorktree::new(isolated, "s1".into());
        let report = behaviour.report();
        let closing = Closing {
            session_id: "s2",
            agent: "coder",
            mode: crate::hooks::Mode::Run(None),
            status: SessionStatus::Completed,
            question: None,
            failed: false,
            tool_calls: 1,
            events: &f.events,
        };
        assert!(behaviour.on_close(&closing).await.is_none());
        assert!(
            report.lock().expect("lock").is_none(),
            "finished before the closing write"
        );
        behaviour.on_closed(&closing).await;
        let said = report.lock().expect("lock").clone().unwrap_or_default();
        let _ = std::fs::remove_dir_all(&worktree);
        assert!(said.starts_with("changes on branch nop/coder-s2"), "{said}");
        assert!(said.ends_with("a.txt"), "{said}");
    }
}
