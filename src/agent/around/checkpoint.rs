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
