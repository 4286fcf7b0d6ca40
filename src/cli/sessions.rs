//! `nop sessions …` (list, show, check, new, append, delete, stack; export and import in
//! `travel.rs`) and the commands that read
//! one session's files: `nop plan`, `nop log`, `nop snapshot`.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::process::ExitCode;

use anyhow::{Context as _, Result, anyhow};
use chrono::Utc;

use nop::protocol::{Message, Role};
use nop::session::{Problem, Store};

use super::args::AppendArgs;
use super::context::Context;
use super::{SessionsCommand, exit_code, render, slash};

/// `nop sessions …`.
pub fn sessions(ctx: &Context, command: SessionsCommand, out: &mut impl Write) -> Result<ExitCode> {
    let store = &ctx.store;
    match command {
        SessionsCommand::List { json, all, limit } => list(store, json, all, limit, out),
        SessionsCommand::Show { id, json } => show(store, &id, json, out),
        SessionsCommand::Check { id, json } => check(ctx, id, json, out),
        SessionsCommand::New { agent } => new(ctx, &agent, out),
        SessionsCommand::Append(args) => append(store, args, out),
        SessionsCommand::Delete { id, force, json } => delete(ctx, &id, force, json, out),
        SessionsCommand::Stack { json } => stack(ctx, json, out),
        SessionsCommand::Export { id, output } => {
            super::travel::export(ctx, &id, output.as_deref(), out)
        }
        SessionsCommand::Import { file, json } => super::travel::import(ctx, &file, json, out),
        SessionsCommand::Push { id, remote } => super::travel::push(ctx, &id, &remote),
        SessionsCommand::Pull { id, remote } => super::travel::pull(ctx, &id, &remote, out),
    }
}

fn list(
    store: &Store,
    json: bool,
    all: bool,
    limit: Option<usize>,
    out: &mut impl Write,
) -> Result<ExitCode> {
    let (mut summaries, failed) = store.summaries()?;
    // A run that failed before the model said anything is noise in the list (`--all` shows it).
    summaries.retain(|s| {
        all || !(s.called || (s.status == nop::protocol::SessionStatus::Error && !s.answered))
    });
    summaries.sort_by_key(|s| std::cmp::Reverse(s.updated_at));
    summaries.truncate(limit.unwrap_or(usize::MAX));
    // "running" on disk with no process running it: its process was killed (or the machine
    // stopped); said as interrupted, and `nop resume` goes on with it.
    let interrupted: Vec<String> = summaries
        .iter()
        .filter(|s| {
            matches!(
                s.status,
                nop::protocol::SessionStatus::Running | nop::protocol::SessionStatus::Paused
            ) && !nop::session::RunGuard::is_busy(&store.dir(&s.id))
        })
        .map(|s| s.id.clone())
        .collect();
    render::session_list(out, &summaries, &interrupted, json)?;
    for e in &failed {
        eprintln!("error: {e}");
    }
    Ok(exit_code(failed.is_empty()))
}

fn show(store: &Store, id: &str, json: bool, out: &mut impl Write) -> Result<ExitCode> {
    let id = store.resolve(id)?;
    let state = store.read(&id)?;
    let snapshots = store.snapshots(&id)?;
    render::session_show(out, &state, &snapshots, &store.dir(&id), json)?;
    Ok(ExitCode::SUCCESS)
}

fn check(ctx: &Context, id: Option<String>, json: bool, out: &mut impl Write) -> Result<ExitCode> {
    let store = &ctx.store;
    let ids = match id {
        Some(prefix) => vec![store.resolve(&prefix)?],
        None => store.ids()?,
    };
    let mut report = Vec::new();
    for id in ids {
        let problems = store.check(&id)?;
        report.push((id, problems));
    }
    check_checkpoints(ctx, &mut report)?;
    let all_ok = report.iter().all(|(_, problems)| problems.is_empty());
    render::check(out, &report, json)?;
    Ok(exit_code(all_ok))
}

/// Adds to each session's problems its checkpoints the store cannot give back whole: every
/// object each names is read once and its id computed again (`Checkpoints::check`).
fn check_checkpoints(ctx: &Context, report: &mut [(String, Vec<Problem>)]) -> Result<()> {
    let Some(checkpoints) = ctx.ws.checkpoints(ctx.config()) else {
        return Ok(());
    };
    // tree → what names it: (index in the report, "run 3 (before)", …).
    let mut named: BTreeMap<String, Vec<(usize, String)>> = BTreeMap::new();
    for (at, (id, problems)) in report.iter_mut().enumerate() {
        if !problems.is_empty() {
            continue;
        }
        let recent = match ctx.store.read_recent(id) {
            Ok(recent) => recent,
            Err(e) => {
                problems.push(Problem {
                    path: ctx.store.dir(id),
                    message: e.to_string(),
                });
                continue;
            }
        };
        for (n, run) in recent.session.checkpoints.iter().enumerate() {
            let mut name = |tree: &String, side: &str| {
                named
                    .entry(tree.clone())
                    .or_default()
                    .push((at, format!("run {} ({side})", n + 1)));
            };
            name(&run.before, "before");
            if let Some(after) = &run.after {
                name(after, "after");
            }
        }
        match ctx.store.snapshot_checkpoints(id) {
            Ok(snapshots) => {
                for (snapshot, tree) in snapshots {
                    if let Some(tree) = tree {
                        named
                            .entry(tree)
                            .or_default()
                            .push((at, format!("snapshot {snapshot}")));
                    }
                }
            }
            Err(e) => problems.push(Problem {
                path: ctx.store.dir(id),
                message: e.to_string(),
            }),
        }
    }
    let trees = named.keys().cloned().collect();
    let damaged = match checkpoints.check(&trees) {
        Ok(damaged) => damaged,
        Err(e) => {
            // Without git the store cannot be read: the sessions' own report still stands.
            eprintln!("warning: checkpoints not checked: {e}");
            return Ok(());
        }
    };
    for damage in damaged {
        for (at, what) in named.get(&damage.tree).into_iter().flatten() {
            report[*at].1.push(Problem {
                path: checkpoints.store_dir().to_path_buf(),
                message: format!(
                    "the checkpoint of {what}, {}, {}",
                    damage.tree, damage.message
                ),
            });
        }
    }
    Ok(())
}

fn new(ctx: &Context, agent: &str, out: &mut impl Write) -> Result<ExitCode> {
    let (ws, store) = (&ctx.ws, &ctx.store);
    ws.agents()?
        .for_new_session(agent, &ws.agents_path())
        .map_err(|e| anyhow!(e))?;
    let session = store.create(agent, Utc::now())?;
    tracing::info!(session = %session.session_id, agent = %agent, op = "create", result = "ok", "session created");
    writeln!(out, "{}", session.session_id)?;
    Ok(ExitCode::SUCCESS)
}

fn append(store: &Store, args: AppendArgs, out: &mut impl Write) -> Result<ExitCode> {
    let id = store.resolve(&args.id)?;
    let role: Role = args
        .role
        .parse()
        .map_err(|e: nop::protocol::session::UnknownRole| anyhow!("--role: {e}"))?;
    let text = match args.text.as_deref() {
        None | Some("-") => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("reading the message from standard input")?;
            text
        }
        Some(text) => text.to_string(),
    };
    let now = Utc::now();
    let count = store.append(&id, vec![Message::new(role, text, now)], now)?;
    tracing::debug!(session = %id, op = "append", result = "ok", messages = count, "message appended");
    writeln!(out, "{count}")?;
    Ok(ExitCode::SUCCESS)
}

fn delete(
    ctx: &Context,
    id: &str,
    force: bool,
    json: bool,
    out: &mut impl Write,
) -> Result<ExitCode> {
    let store = &ctx.store;
    let id = store.resolve(id)?;
    let deleted = match store.delete(&id, force) {
        Ok(deleted) => deleted,
        Err(e) => {
            if let nop::session::SessionError::Referenced { references, .. } = &e {
                tracing::info!(session = %id, op = "delete", result = "refused", referenced_by = references.len(), "session not deleted: other sessions refer to it");
                if json {
                    render::print_json(
                        out,
                        &serde_json::json!({"id": id, "deleted": false, "referencedBy": references}),
                    )?;
                }
            }
            return Err(e.into());
        }
    };
    tracing::info!(session = %id, op = "delete", result = "ok", forced = force, referenced_by = deleted.referenced_by.len(), "session deleted");
    let coordinator = nop::queue::priority::Coordinator::new(
        &ctx.ws.nop_dir(),
        &ctx.user,
        std::time::Duration::from_secs_f64(ctx.config().queue.idle_timeout_s),
    );
    if let Err(e) = coordinator.forget(&id) {
        tracing::warn!(session = %id, error = %e, "deleted session left in the priority stack");
        eprintln!(
            "warning: session {id} was deleted but may still count as active in the priority stack: {e}"
        );
    }
    if let Some((path, e)) = &deleted.leftover {
        eprintln!(
            "warning: session {id} is deleted, but {} could not be removed ({e}); the next write of any nop process removes it",
            path.display()
        );
    }
    if json {
        let mut said =
            serde_json::json!({"id": id, "deleted": true, "referencedBy": deleted.referenced_by});
        if !deleted.with.is_empty() {
            said["with"] = serde_json::json!(deleted.with);
        }
        render::print_json(out, &said)?;
    } else {
        match deleted.with.len() {
            0 => writeln!(out, "deleted {id}")?,
            n => writeln!(
                out,
                "deleted {id} and the {n} advisor session(s) nop consulted for it"
            )?,
        }
        for r in &deleted.referenced_by {
            writeln!(out, "  still referring to it: {r}")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn stack(ctx: &Context, json: bool, out: &mut impl Write) -> Result<ExitCode> {
    let coordinator = nop::queue::priority::Coordinator::new(
        &ctx.ws.nop_dir(),
        &ctx.user,
        std::time::Duration::from_secs_f64(ctx.config().queue.idle_timeout_s),
    );
    let (stack, events) = coordinator.stack()?;
    render::stack(out, &ctx.user, &stack, &events, json)?;
    Ok(ExitCode::SUCCESS)
}

/// `nop plan ID`.
pub fn plan(store: &Store, id: &str, json: bool, out: &mut impl Write) -> Result<ExitCode> {
    let id = store.resolve(id)?;
    let state = store.read_recent(&id)?;
    render::plan(out, &state.plan, json)?;
    Ok(ExitCode::SUCCESS)
}

/// `nop log ID`: the session's session.log as it is.
pub fn log(store: &Store, id: &str, out: &mut impl Write) -> Result<ExitCode> {
    let id = store.resolve(id)?;
    let path = store.session_log(&id);
    match std::fs::read(&path) {
        Ok(bytes) => out.write_all(&bytes)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| path.display().to_string()),
    }
    Ok(ExitCode::SUCCESS)
}

/// `nop snapshot ID`.
pub fn snapshot(store: &Store, id: &str, out: &mut impl Write) -> Result<ExitCode> {
    let id = store.resolve(id)?;
    let snapshot = store.snapshot(&id, Utc::now())?;
    tracing::info!(session = %id, op = "snapshot", result = "ok", snapshot = %snapshot, "snapshot taken");
    writeln!(out, "{snapshot}")?;
    Ok(ExitCode::SUCCESS)
}

/// The most recently used session a person started (not a subagent's or an advisor's).
pub fn last_session(store: &nop::session::Store) -> Option<String> {
    slash::recent(store, 1).pop().map(|s| s.id)
}
