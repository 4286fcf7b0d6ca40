//! `nop fork`, `nop undo` and `nop rewind`: sessions forked, and files and conversations taken
//! back through the file checkpoints.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Result, anyhow};
use chrono::Utc;

use nop::session::Store;

use super::context::Context;
use super::render;
use super::sessions::last_session;

/// `nop fork ID --worktree [PATH]`.
pub fn fork_worktree(
    ctx: &Context,
    id: &str,
    snapshot: Option<String>,
    path: Option<PathBuf>,
    json: bool,
    out: &mut impl Write,
) -> Result<ExitCode> {
    let store = &ctx.store;
    let id = store.resolve(id)?;
    let checkpoints = ctx.ws.checkpoints(ctx.config()).ok_or_else(|| {
        anyhow!("--worktree needs file checkpoints, which are off (checkpoints.enabled)")
    })?;
    // A relative PATH is taken from where the command was given (`-C` included).
    let path = path.map(|p| ctx.cwd.join(p));
    let fork = nop::checkpoint::fork_worktree(
        &checkpoints,
        store,
        &id,
        snapshot.as_deref(),
        path.as_deref(),
        Utc::now(),
    )?;
    tracing::info!(session = %id, op = "fork", result = "ok", child = %fork.child.session_id, snapshot = %fork.snapshot_id, worktree = %fork.path.display(), "forked into a worktree");
    render::worktree_fork(out, &fork, json)?;
    Ok(ExitCode::SUCCESS)
}

/// `nop fork ID`.
pub fn fork(
    store: &Store,
    id: &str,
    snapshot: Option<String>,
    out: &mut impl Write,
) -> Result<ExitCode> {
    let id = store.resolve(id)?;
    let child = store.fork(&id, snapshot.as_deref(), Utc::now())?;
    let snap = child
        .parent_session
        .as_ref()
        .map(|p| p.snapshot_id.clone())
        .unwrap_or_default();
    tracing::info!(session = %id, op = "fork", result = "ok", child = %child.session_id, snapshot = %snap, "forked");
    tracing::info!(session = %child.session_id, agent = %child.agent, op = "fork", result = "ok", parent = %id, snapshot = %snap, "created by fork");
    writeln!(out, "{}", child.session_id)?;
    Ok(ExitCode::SUCCESS)
}

/// `nop undo`.
pub fn undo(
    ctx: &Context,
    session: Option<String>,
    turn: Option<usize>,
    force: bool,
    json: bool,
    out: &mut impl Write,
) -> Result<ExitCode> {
    let (ws, store) = (&ctx.ws, &ctx.store);
    let id = match session {
        Some(prefix) => store.resolve(&prefix)?,
        None => last_session(store)
            .ok_or_else(|| anyhow!("no session to undo in {}", ws.root.display()))?,
    };
    let checkpoints = ws
        .checkpoints(ctx.config())
        .ok_or_else(|| anyhow!("file checkpoints are off (checkpoints.enabled)"))?;
    nop::checkpoint::set_restore_notice(say_on_stderr);
    let undo = nop::checkpoint::undo_turn(store, &checkpoints, &id, turn, force, Utc::now())?;
    render::undo(out, &undo, json, render::TypedIn::Shell)?;
    Ok(ExitCode::SUCCESS)
}

/// A restore's notice (it waits for another), for a headless command: on standard error.
fn say_on_stderr(message: &str) {
    eprintln!("nop: {message}");
}

/// Where `nop rewind` goes.
pub enum RewindTo {
    Snapshot(String),
    /// 1-based.
    Turn(usize),
}

/// `nop rewind`.
pub fn rewind(
    ctx: &Context,
    session: &str,
    to: RewindTo,
    (files, conversation): (bool, bool),
    force: bool,
    json: bool,
    out: &mut impl Write,
) -> Result<ExitCode> {
    let store = &ctx.store;
    use nop::checkpoint::RewindMode;
    let id = store.resolve(session)?;
    let mode = match (files, conversation) {
        (true, _) => RewindMode::Files,
        (_, true) => RewindMode::Conversation,
        _ => RewindMode::Both,
    };
    nop::checkpoint::set_restore_notice(say_on_stderr);
    let checkpoints = ctx.ws.checkpoints(ctx.config());
    match to {
        RewindTo::Snapshot(to) => {
            let rewind = nop::checkpoint::rewind(
                store,
                checkpoints.as_ref(),
                &id,
                &to,
                mode,
                force,
                Utc::now(),
            )?;
            render::rewind(out, &rewind, json, render::TypedIn::Shell)?;
        }
        RewindTo::Turn(turn) => {
            let rewind = nop::checkpoint::rewind_turn(
                store,
                checkpoints.as_ref(),
                &id,
                turn,
                mode,
                force,
                Utc::now(),
            )?;
            render::rewind_turn(out, &rewind, json, render::TypedIn::Shell)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
