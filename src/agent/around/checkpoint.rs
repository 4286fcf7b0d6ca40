//! The run's file checkpoint (`nop undo`, `nop rewind`) as a per-run behaviour: a turn of
//! session.json's `checkpoints` begun as the run opens (recorded as its first model request
//! goes out; the first tool call waits for it) and closed with the run's closing write. The
//! mechanics are in `agent/file_checkpoint.rs`.

use futures_util::future::BoxFuture;

use super::{Around, Change, Closing, Opening};
use crate::agent::file_checkpoint::{self, TurnStart};
use crate::checkpoint::Checkpoints;
use crate::protocol::events::Event;
use crate::session::Store;

/// Records the files as the run finds them and as it leaves them.
pub(in crate::agent) struct FileCheckpoint {
    store: Store,
    /// `None`: the repository has no checkpoints (checkpoints off, or not a place to keep them).
    checkpoints: Option<Checkpoints>,
    turn: Option<TurnStart>,
}

impl FileCheckpoint {
    pub fn new(store: Store, checkpoints: Option<Checkpoints>) -> FileCheckpoint {
        FileCheckpoint {
            store,
            checkpoints,
            turn: None,
        }
    }
}

impl Around for FileCheckpoint {
    fn on_open<'a>(&'a mut self, opening: &'a mut Opening<'_>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let input = match opening.mode {
                crate::hooks::Mode::Run(input) => input,
                crate::hooks::Mode::Chat => return,
            };
            let Some(run) = opening.run.as_mut() else {
                return;
            };
            // The files as the run finds them, before anything it does (`nop undo`).
            (self.turn, run.ctx.ready) = file_checkpoint::begin_turn(
                &self.store,
                opening.session_id,
                self.checkpoints.as_ref(),
                input,
                opening.events,
                run.messages_before,
            );
            // Worktrees of subagents whose nop was killed while they worked: named, once.
            if let Some(c) = &self.checkpoints {
                for message in crate::checkpoint::left_behind(c) {
                    tracing::warn!(op = "isolation", result = "left behind", "{message}");
                    let _ = opening.events.send(Event::Warning { message });
                }
            }
        })
    }

    fn on_close<'a>(&'a mut self, closing: &'a Closing<'a>) -> BoxFuture<'a, Option<Change>> {
        Box::pin(async move {
            let end = file_checkpoint::close_files(
                closing.session_id,
                self.checkpoints.as_ref(),
                self.turn.take(),
                closing.events,
                closing.tool_calls,
            )
            .await?;
            Some(Box::new(move |state: &mut crate::session::Recent| {
                end.apply(&mut state.session, chrono::Utc::now());
            }) as Change)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::around::{self, RunOpening};
    use crate::agent::fixture::Fixture;
    use crate::hooks::Mode;
    use crate::protocol::{Role, SessionStatus};

    /// Opens a run on a session with a file checkpoint, then closes it having called `tools`
    /// tools (after `work`): the turn the session records.
    async fn a_run(
        work: impl FnOnce(&std::path::Path),
        tools: u32,
    ) -> crate::protocol::TurnCheckpoint {
        let f = Fixture::new();
        std::fs::write(f.dir.path().join("a.txt"), "one\n").expect("write");
        let mut ctx = f.session(&[(Role::User, "fix it")]);
        let id = ctx.session_id.clone();
        let mut behaviours: Vec<Box<dyn Around>> = vec![Box::new(FileCheckpoint::new(
            f.runtime.store().clone(),
            f.runtime.workspace().checkpoints(f.runtime.config()),
        ))];
        let mut opening = Opening {
            session_id: &id,
            agent: "coder",
            resumed: false,
            mode: Mode::Run(Some("fix it")),
            events: &f.events,
            run: Some(RunOpening {
                engine: &f.engine,
                ctx: &mut ctx,
                messages_before: 1,
                unchanged: false,
            }),
        };
        around::opened(&mut behaviours, &mut opening).await;
        // The first model request goes out; the first tool call waits for the checkpoint.
        ctx.ready.requested();
        ctx.ready.wait().await;
        work(f.dir.path());
        let closing = Closing {
            session_id: &id,
            agent: "coder",
            mode: Mode::Run(Some("done")),
            status: SessionStatus::Completed,
            question: None,
            failed: false,
            tool_calls: tools,
            events: &f.events,
        };
        let changes = around::closing(&mut behaviours, &closing).await;
        f.runtime
            .store()
            .update(&id, chrono::Utc::now(), |state| {
                for change in changes {
                    change(state);
                }
                Ok(())
            })
            .expect("closing write");
        let mut turns = f
            .runtime
            .store()
            .read(&id)
            .expect("read")
            .session
            .checkpoints;
        assert_eq!(turns.len(), 1, "{turns:?}");
        turns.remove(0)
    }

    #[tokio::test]
    async fn a_run_without_tools_ends_where_it_began_and_one_that_wrote_records_its_end() {
        let turn = a_run(|_| {}, 0).await;
        assert_eq!(turn.after.as_deref(), Some(turn.before.as_str()));
        assert_eq!(turn.prompt, "fix it");
        assert_eq!(turn.messages_before, 1);
        assert!(turn.ended_at.is_some());
        let turn = a_run(
            |root| std::fs::write(root.join("a.txt"), "two\n").expect("write"),
            1,
        )
        .await;
        assert_ne!(turn.after.as_deref(), Some(turn.before.as_str()));
    }

    #[tokio::test]
    async fn a_chat_has_no_file_checkpoint() {
        let f = Fixture::new();
        let mut checkpoint = FileCheckpoint::new(
            f.runtime.store().clone(),
            f.runtime.workspace().checkpoints(f.runtime.config()),
        );
        let mut opening = Opening {
            session_id: "s1",
            agent: "coder",
            resumed: false,
            mode: Mode::Chat,
            events: &f.events,
            run: None,
        };
        checkpoint.on_open(&mut opening).await;
        assert!(checkpoint.turn.is_none());
    }
}
