//! Text and JSON renderings of sessions, plans, checks and configuration.

use std::io::Write;
use std::path::Path;

use chrono::{DateTime, Utc};
use serde_json::json;

use super::term::style::{json_safe, one_line, visible};
use nop::config::Resolved;
use nop::protocol::{Plan, Role, TaskStatus};
use nop::session::{Problem, SessionState, SessionSummary};

type Out<'a> = &'a mut dyn Write;

/// A time as people read it: in the local time zone (as the resume picker shows it).
fn time(t: DateTime<Utc>) -> String {
    t.with_timezone(&chrono::Local)
        .format("%Y-%m-%d %H:%M:%S")
        .to_string()
}

/// A time in JSON: local, with its offset (RFC 3339).
fn json_time(t: DateTime<Utc>) -> String {
    t.with_timezone(&chrono::Local)
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, false)
}

pub(super) fn print_json(out: Out<'_>, value: &impl serde::Serialize) -> std::io::Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    writeln!(out, "{}", json_safe(text))
}

/// `interrupted`: the sessions said to be running that no process runs.
pub fn session_list(
    out: Out<'_>,
    sessions: &[SessionSummary],
    interrupted: &[String],
    json: bool,
) -> std::io::Result<()> {
    if json {
        let local: Vec<serde_json::Value> = sessions
            .iter()
            .map(|s| {
                let mut value = serde_json::to_value(s).unwrap_or_default();
                value["createdAt"] = json!(json_time(s.created_at));
                value["updatedAt"] = json!(json_time(s.updated_at));
                if interrupted.contains(&s.id) {
                    value["interrupted"] = json!(true);
                }
                value
            })
            .collect();
        return print_json(out, &local);
    }
    if sessions.is_empty() {
        return writeln!(out, "no sessions yet");
    }
    let agent_width = sessions
        .iter()
        .map(|s| s.agent.len())
        .max()
        .unwrap_or(5)
        .max(5);
    writeln!(
        out,
        "{:<15}  {:<agent_width$}  {:<13}  {:<20}  {:>5}  {:<15}  TITLE",
        "ID", "AGENT", "STATUS", "UPDATED", "MSGS", "PARENT"
    )?;
    for s in sessions {
        let title: String = s.title.chars().take(60).collect();
        let title = one_line(&title);
        let cut = if s.title.chars().count() > 60 {
            "…"
        } else {
            ""
        };
        writeln!(
            out,
            "{:<15}  {:<agent_width$}  {:<13}  {:<20}  {:>5}  {:<15}  {title}{cut}",
            s.id,
            s.agent,
            if interrupted.contains(&s.id) {
                "interrupted"
            } else {
                s.status.as_str()
            },
            time(s.updated_at),
            s.messages,
            s.parent.as_deref().unwrap_or("-")
        )?;
    }
    Ok(())
}

#[expect(clippy::too_many_lines, reason = "a debt: listed in AGENTS.md")]
pub fn session_show(
    out: Out<'_>,
    state: &SessionState,
    snapshots: &[String],
    dir: &Path,
    json: bool,
) -> std::io::Result<()> {
    let s = &state.session;
    if json {
        return print_json(
            out,
            &json!({
                "session": s,
                "plan": state.plan,
                "snapshots": snapshots,
                "dir": dir,
            }),
        );
    }
    writeln!(out, "session   {}", s.session_id)?;
    writeln!(out, "agent     {}", s.agent)?;
    writeln!(out, "status    {}", s.status)?;
    writeln!(out, "created   {}", time(s.created_at))?;
    writeln!(out, "updated   {}", time(s.updated_at))?;
    if let Some(p) = &s.parent_session {
        writeln!(
            out,
            "parent    {} (snapshot {}, {})",
            p.id,
            p.snapshot_id,
            time(p.timestamp)
        )?;
    }
    for (label, spent) in [
        ("usage    ", s.usage.own),
        ("subagents", s.usage.subagents),
        ("advisors ", s.usage.advisors),
    ] {
        if label.starts_with("usage") || !spent.is_empty() {
            writeln!(out, "{label} {}", spent_line(&spent))?;
        }
    }
    if !s.usage.subagents.is_empty() || !s.usage.advisors.is_empty() {
        writeln!(out, "cost      {} in all", s.usage.total().cost_text())?;
    }
    if !s.compressions.is_empty() {
        writeln!(out, "compacted {} times", s.compressions.len())?;
    }
    if let Some(goal) = &s.goal {
        writeln!(
            out,
            "goal      {} ({})",
            one_line(&goal.objective),
            goal.status.as_str()
        )?;
        if let Some(cmd) = &goal.until {
            writeln!(out, "  until   {}", one_line(cmd))?;
        }
        for (i, check) in goal.checks.iter().enumerate() {
            let code = check
                .exit_code
                .map(|c| format!(", exit {c}"))
                .unwrap_or_default();
            writeln!(
                out,
                "  check {} {} {}{code}: {}",
                i + 1,
                time(check.at),
                if check.met { "met" } else { "not met" },
                one_line(&check.reason)
            )?;
        }
    }
    writeln!(
        out,
        "snapshots {}",
        if snapshots.is_empty() {
            "-".to_string()
        } else {
            snapshots.join(", ")
        }
    )?;
    if !s.checkpoints.is_empty() {
        let undone = s
            .checkpoints
            .iter()
            .filter(|t| t.undone_at.is_some())
            .count();
        writeln!(
            out,
            "files     checkpoints of {} runs ({undone} undone): nop undo --session {}",
            s.checkpoints.len(),
            s.session_id
        )?;
    }
    let done = state
        .plan
        .tasks
        .iter()
        .filter(|t| t.status == TaskStatus::Completed)
        .count();
    writeln!(
        out,
        "plan      {done}/{} tasks completed",
        state.plan.tasks.len()
    )?;
    writeln!(out, "dir       {}", dir.display())?;
    writeln!(out, "messages  {}", s.messages.len())?;
    for m in &s.messages {
        writeln!(out)?;
        let when = m.timestamp.map(time).unwrap_or_default();
        let call = match (m.role, &m.tool_call) {
            (Role::Tool, Some(call)) => format!(" ({} {})", call.name, call.id),
            _ => String::new(),
        };
        writeln!(out, "── {}{} {when}", m.role.as_str(), visible(&call))?;
        if !m.content.is_empty() {
            writeln!(out, "{}", visible(m.content.trim_end()))?;
        }
        for call in &m.tool_calls {
            let shown = format!("{} {}", call.name, call.arguments);
            writeln!(out, "→ {}", one_line(&shown))?;
        }
    }
    Ok(())
}

pub fn plan(out: Out<'_>, plan: &Plan, json: bool) -> std::io::Result<()> {
    if json {
        return print_json(out, plan);
    }
    if plan.tasks.is_empty() {
        return writeln!(out, "no tasks");
    }
    for task in &plan.tasks {
        let mark = match task.status {
            TaskStatus::Pending => "[ ]",
            TaskStatus::InProgress => "[~]",
            TaskStatus::Completed => "[x]",
            TaskStatus::Failed => "[!]",
        };
        writeln!(
            out,
            "{mark} {}  {}  ({})",
            one_line(&task.id),
            one_line(&task.title),
            task.status
        )?;
        if let Some(d) = &task.description {
            for line in visible(d).lines() {
                writeln!(out, "      {line}")?;
            }
        }
    }
    Ok(())
}

pub fn check(out: Out<'_>, report: &[(String, Vec<Problem>)], json: bool) -> std::io::Result<()> {
    if json {
        let value: Vec<_> = report
            .iter()
            .map(
                |(id, problems)| json!({"id": id, "ok": problems.is_empty(), "problems": problems}),
            )
            .collect();
        return print_json(out, &value);
    }
    for (id, problems) in report {
        if problems.is_empty() {
            writeln!(out, "ok       {id}")?;
        }
        for p in problems {
            writeln!(out, "problem  {id}  {}", p.message)?;
        }
    }
    Ok(())
}

pub fn config(out: Out<'_>, resolved: &Resolved, json: bool) -> std::io::Result<()> {
    if json {
        let value: serde_json::Map<String, serde_json::Value> = resolved
            .entries
            .iter()
            .map(|(k, (v, origin))| (k.clone(), json!({"value": v, "origin": origin.to_string()})))
            .collect();
        return print_json(out, &value);
    }
    let width = resolved.entries.keys().map(String::len).max().unwrap_or(0);
    for (key, (value, origin)) in &resolved.entries {
        let value = match value {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Null => "(unset)".to_string(),
            other => other.to_string(),
        };
        writeln!(out, "{key:<width$} = {value:<12} # {origin}")?;
    }
    Ok(())
}

pub fn agents(
    out: Out<'_>,
    agents: &nop::config::AgentsFile,
    user: &str,
    minute_of_day: u32,
    json: bool,
) -> std::io::Result<()> {
    let rows: Vec<_> = agents
        .agents
        .iter()
        .map(|a| {
            json!({
                "name": a.name,
                "priority": a.priority,
                "effectivePriority": agents.effective_priority(&a.name, user, minute_of_day, false),
                "interruptible": a.interruptible,
                "interruptEnabled": a.interrupt_enabled,
                "enabled": a.enabled,
                "capabilities": a.capabilities,
                "description": a.description,
            })
        })
        .collect();
    if json {
        return print_json(out, &rows);
    }
    let width = agents
        .agents
        .iter()
        .map(|a| a.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    writeln!(
        out,
        "{:<width$}  PRIORITY  NOW  INTERRUPTIBLE  ENABLED  DESCRIPTION",
        "NAME"
    )?;
    for a in &agents.agents {
        let p = a.priority.map_or("-".to_string(), |p| p.to_string());
        let now = agents
            .effective_priority(&a.name, user, minute_of_day, false)
            .map_or("-".to_string(), |p| p.to_string());
        writeln!(
            out,
            "{:<width$}  {p:>8}  {now:>3}  {:<13}  {:<7}  {}",
            a.name,
            if a.priority.is_some() {
                if a.interruptible { "yes" } else { "no" }
            } else {
                "-"
            },
            if a.enabled { "yes" } else { "no" },
            a.description
        )?;
    }
    writeln!(
        out,
        "(agents without a priority take no part in preemption: they are never paused or refused)"
    )
}

pub fn stack(
    out: Out<'_>,
    user: &str,
    stack: &[nop::queue::priority::Entry],
    events: &[nop::queue::priority::StackEvent],
    json: bool,
) -> std::io::Result<()> {
    if json {
        return print_json(
            out,
            &json!({"user": user, "stack": stack, "events": events}),
        );
    }
    if stack.is_empty() {
        writeln!(out, "no active session for {user}")?;
    }
    for e in stack.iter().rev() {
        let state = match e.state {
            nop::queue::priority::EntryState::Running => "running",
            nop::queue::priority::EntryState::Paused => "paused",
            nop::queue::priority::EntryState::WaitingInput => "waiting_input",
        };
        writeln!(
            out,
            "{state:<13}  {}  {} (priority {})  since {}",
            e.session_id,
            e.agent,
            e.priority,
            time(e.since)
        )?;
    }
    if !events.is_empty() {
        writeln!(out, "\nrecent events:")?;
        for e in events {
            writeln!(
                out,
                "{}  {:<8} {} {} {}",
                time(e.at),
                e.kind,
                e.agent,
                e.session_id.as_deref().unwrap_or(""),
                e.detail
            )?;
        }
    }
    Ok(())
}

/// `1200 input (1000 from cache, 100 written to it), 300 output tokens in 3 requests · $0.0123`.
fn spent_line(spent: &nop::protocol::Spent) -> String {
    let cache = if spent.cache_read_tokens + spent.cache_write_tokens > 0 {
        format!(
            " ({} from cache, {} written to it)",
            spent.cache_read_tokens, spent.cache_write_tokens
        )
    } else {
        String::new()
    };
    let estimated = match spent.estimated_requests {
        0 => String::new(),
        n => format!(" ({n} without usage from the server: estimated)"),
    };
    format!(
        "{} input{cache}, {} output tokens in {} requests{estimated} · cost {}",
        spent.input_tokens,
        spent.output_tokens,
        spent.requests,
        spent.cost_text()
    )
}

/// `nop fork --worktree`: the child, where it is and how to run it.
pub fn worktree_fork(
    out: Out<'_>,
    fork: &nop::checkpoint::WorktreeFork,
    json: bool,
) -> std::io::Result<()> {
    let id = &fork.child.session_id;
    if json {
        return print_json(
            out,
            &json!({
                "session_id": id,
                "snapshot_id": fork.snapshot_id,
                "worktree": fork.path,
                "branch": fork.branch,
                "skipped": fork.skipped,
            }),
        );
    }
    if !fork.skipped.is_empty() {
        eprintln!(
            "left out of the worktree (the agent's rules do not let it read them): {}",
            fork.skipped.join(", ")
        );
    }
    writeln!(out, "{id}")?;
    eprintln!(
        "forked from snapshot {} into worktree {} (branch {}); run it there: cd {} && nop run --session {id}",
        fork.snapshot_id,
        fork.path.display(),
        fork.branch,
        fork.path.display()
    );
    Ok(())
}

/// Where the user types commands: a shell (`nop undo --session ID …`) or the interactive
/// session (`/undo …`); a hint names the command as it is typed there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TypedIn {
    Shell,
    Session,
}

/// What a restore did, one path a line: `restored`, `removed`, `kept` (with why), `skipped`;
/// then, when files were kept, `again`: the one command that puts them back too.
fn restored_lines(
    out: Out<'_>,
    files: &nop::checkpoint::Restored,
    again: &str,
) -> std::io::Result<()> {
    for path in &files.restored {
        writeln!(out, "restored  {}", one_line(path))?;
    }
    for path in &files.removed {
        writeln!(out, "removed   {}", one_line(path))?;
    }
    for path in &files.kept {
        writeln!(
            out,
            "kept      {} (changed since; your version stays)",
            one_line(path)
        )?;
    }
    for skipped in &files.skipped {
        writeln!(
            out,
            "skipped   {} ({})",
            one_line(&skipped.path),
            visible(&skipped.reason)
        )?;
    }
    if files.restored.is_empty()
        && files.removed.is_empty()
        && files.kept.is_empty()
        && files.skipped.is_empty()
    {
        writeln!(out, "no file needed to change")?;
    }
    if !files.kept.is_empty() {
        writeln!(
            out,
            "to put the kept files back too (your versions are lost): {}",
            one_line(again)
        )?;
    }
    Ok(())
}

/// `nop undo` / `/undo`.
pub fn undo(
    out: Out<'_>,
    undo: &nop::checkpoint::Undo,
    json: bool,
    typed_in: TypedIn,
) -> std::io::Result<()> {
    if json {
        return print_json(out, &json!(undo));
    }
    let passed = match undo.passed_over {
        0 => String::new(),
        1 => "; the run after it changed no file".to_string(),
        n => format!("; the {n} runs after it changed no file"),
    };
    writeln!(
        out,
        "undid run {} of session {}{} (\"{}\"{passed})",
        undo.turn,
        undo.session_id,
        if undo.again { " again" } else { "" },
        one_line(&undo.prompt)
    )?;
    let again = match typed_in {
        TypedIn::Shell => format!(
            "nop undo --session {} --turn {} --force",
            undo.session_id, undo.turn
        ),
        TypedIn::Session => format!("/undo --turn {} --force", undo.turn),
    };
    restored_lines(out, &undo.files, &again)
}

/// `nop rewind --turn N` / `/rewind`'s picker.
pub fn rewind_turn(
    out: Out<'_>,
    rewind: &nop::checkpoint::TurnRewind,
    json: bool,
    typed_in: TypedIn,
) -> std::io::Result<()> {
    if json {
        return print_json(out, &json!(rewind));
    }
    writeln!(
        out,
        "rewound session {} to before run {} (\"{}\"; as it was before: snapshot {})",
        rewind.session_id,
        rewind.turn,
        one_line(&rewind.prompt),
        rewind.saved_as
    )?;
    if let Some((before, after)) = rewind.messages {
        writeln!(out, "messages  {before} → {after}")?;
    }
    if let Some(files) = &rewind.files {
        let again = match typed_in {
            TypedIn::Shell => format!(
                "nop rewind --session {} --turn {} --files --force",
                rewind.session_id, rewind.turn
            ),
            TypedIn::Session => format!("/rewind --turn {} --files --force", rewind.turn),
        };
        restored_lines(out, files, &again)?;
    }
    Ok(())
}

/// `nop rewind` / `/rewind SNAP`.
pub fn rewind(
    out: Out<'_>,
    rewind: &nop::checkpoint::Rewind,
    json: bool,
    typed_in: TypedIn,
) -> std::io::Result<()> {
    if json {
        return print_json(out, &json!(rewind));
    }
    writeln!(
        out,
        "rewound session {} to snapshot {} (as it was before: snapshot {})",
        rewind.session_id, rewind.snapshot_id, rewind.saved_as
    )?;
    if let Some((before, after)) = rewind.messages {
        writeln!(out, "messages  {before} → {after}")?;
    }
    if let Some(files) = &rewind.files {
        let again = match typed_in {
            TypedIn::Shell => format!(
                "nop rewind --session {} --to {} --files --force",
                rewind.session_id, rewind.snapshot_id
            ),
            TypedIn::Session => format!("/rewind {} --files --force", rewind.snapshot_id),
        };
        restored_lines(out, files, &again)?;
    }
    Ok(())
}
