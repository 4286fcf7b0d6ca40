//! The interactive session's slash commands that read or show something: their list and help,
//! the nearest one to a mistyped name, recent sessions for `/resume`, `/status`, and `/diff`.

use std::path::Path;

use super::term::diff;
use super::term::style::Style;
use nop::protocol::{Message, SessionFile};
use nop::session::{SessionSummary, Store};

/// Every slash command with what it does, as `/help` lists them.
pub const COMMANDS: &[(&str, &str)] = &[
    ("/help", "this list"),
    ("/status", "model, session, tokens and context (also /cost)"),
    ("/cost", "the same as /status"),
    (
        "/model",
        "the model; /model NAME uses NAME from the next prompt on",
    ),
    ("/plan", "the session's tasks"),
    (
        "/goal",
        "TEXT: an objective checked whenever the agent stops; alone: the goal and its checks; clear",
    ),
    (
        "/mode",
        "the approval mode; /mode never|on-request|always|plan switches it (also /approvals)",
    ),
    ("/approvals", "the same as /mode"),
    ("/diff", "the files this session changed, as diffs"),
    (
        "/compact",
        "summarise the older part of the conversation now",
    ),
    ("/clear", "a new session (this one stays on disk)"),
    ("/resume", "pick a recent session to go on with"),
    (
        "/fork",
        "go on in a copy of this session (the original stays as it is)",
    ),
    (
        "/snapshot",
        "save a snapshot you can fork from or rewind to",
    ),
    (
        "/undo",
        "go back to before a prompt that changed files (also Esc Esc); --force: the last one at once",
    ),
    (
        "/rewind",
        "pick a run to go back to; /rewind SNAP|--turn N [--files|--conversation|--both] [--force]",
    ),
    ("/verbose", "whole tool results and diffs (again: cut)"),
    (
        "/exit",
        "leave (the session stays on disk; also /quit, Ctrl-D)",
    ),
];

/// The help text.
pub fn help() -> String {
    let commands = COMMANDS
        .iter()
        .map(|(name, what)| format!("{name:<10} {what}"))
        .collect::<Vec<_>>()
        .join("\n");
    let keys = KEYS
        .iter()
        .map(|(key, what)| format!("{key:<14} {what}"))
        .collect::<Vec<_>>()
        .join("\n");
    format!("{commands}\n\nkeys:\n{keys}")
}

/// The interactive session's keys, as `/help` lists them.
pub const KEYS: &[(&str, &str)] = &[
    (
        "Enter",
        "send (while the agent works: queue it for the agent)",
    ),
    ("Alt-Enter", "a new line (also Ctrl-J)"),
    (
        "Esc",
        "stop the agent; what you queued comes back to the prompt",
    ),
    (
        "Esc Esc",
        "on an empty prompt: go back to before a prompt (/undo)",
    ),
    (
        "Shift+Tab",
        "the next approval mode (on-request, always, plan, never)",
    ),
    (
        "/ or @",
        "a menu of commands or files: ↑/↓ choose, Tab takes, Enter runs",
    ),
    ("Tab", "complete a path"),
    ("↑/↓", "earlier prompts"),
    ("Ctrl-O", "the last tool result in full"),
    (
        "y a n t",
        "at a question: yes, always, no, no and say what instead",
    ),
    (
        "Ctrl-C Ctrl-C",
        "leave (also Ctrl-D); the session stays on disk",
    ),
];

/// The command nearest to a mistyped `name` (at most two edits away).
pub fn nearest(name: &str) -> Option<&'static str> {
    COMMANDS
        .iter()
        .map(|(command, _)| (*command, nop::config::edit_distance(name, command)))
        .filter(|(_, d)| *d <= 2)
        .min_by_key(|(_, d)| *d)
        .map(|(command, _)| command)
}

/// The `n` most recently used sessions a person started and the model answered in, or that
/// were interrupted before its answer (not subagents' or advisors', nor a run that failed
/// before any answer), newest first.
pub fn recent(store: &Store, n: usize) -> Vec<SessionSummary> {
    use nop::protocol::SessionStatus;
    let Ok((mut summaries, _)) = store.summaries() else {
        return Vec::new();
    };
    summaries.retain(|s| {
        let interrupted = matches!(
            s.status,
            SessionStatus::Cancelled
                | SessionStatus::Running
                | SessionStatus::Paused
                | SessionStatus::WaitingInput
        );
        !s.called && !s.title.is_empty() && (s.answered || interrupted)
    });
    summaries.sort_by_key(|s| std::cmp::Reverse(s.updated_at));
    summaries.truncate(n);
    summaries
}

/// `/status`: the model, the session, its tokens and the context its last request used.
pub fn status(model: &str, session: Option<&SessionFile>, context: Option<u64>) -> Vec<String> {
    let mut lines = vec![format!("model    {model}")];
    let Some(session) = session else {
        lines.push("session  none yet: say something first".into());
        return lines;
    };
    let usage = session.usage;
    lines.push(format!(
        "session  {} · {} · {} messages",
        session.session_id,
        session.agent,
        session.messages.len()
    ));
    let own = usage.own;
    lines.push(format!(
        "tokens   {} in ({} cached) · {} out · {} requests",
        own.input_tokens, own.cache_read_tokens, own.output_tokens, own.requests
    ));
    let total = usage.total();
    let apart = [("subagents", usage.subagents), ("advisors", usage.advisors)]
        .iter()
        .filter(|(_, s)| !s.is_empty())
        .map(|(who, s)| format!("{who} {}", s.cost_text()))
        .collect::<Vec<_>>();
    lines.push(if apart.is_empty() {
        format!("cost     {}", total.cost_text())
    } else {
        format!(
            "cost     {} ({}; theirs: {})",
            total.cost_text(),
            own.cost_text(),
            apart.join(", ")
        )
    });
    if let Some(context) = context {
        lines.push(format!("context  {context} tokens in the last request"));
    }
    if let Some(goal) = &session.goal {
        lines.push(format!(
            "goal     {} · {} · {} checks",
            super::term::style::one_line(&goal.objective),
            goal.status.as_str(),
            goal.checks.len()
        ));
    }
    lines
}

/// `/diff`: each file the session wrote or edited, as it was at the last commit (or nothing,
/// untracked) against how it is now.
pub fn session_diff(root: &Path, messages: &[Message], style: Style) -> Vec<String> {
    let mut paths: Vec<String> = Vec::new();
    for call in messages.iter().flat_map(|m| &m.tool_calls) {
        if matches!(call.name.as_str(), "write-file" | "edit-file")
            && let Some(path) = call.arguments.get("path").and_then(|p| p.as_str())
            && !paths.iter().any(|p| p == path)
        {
            paths.push(path.to_string());
        }
    }
    if paths.is_empty() {
        return vec!["this session has not changed any file".into()];
    }
    let mut lines = Vec::new();
    for path in paths {
        let now = std::fs::read_to_string(root.join(&path)).unwrap_or_default();
        let committed = std::process::Command::new("git")
            .args(["show", &format!("HEAD:./{path}")])
            .current_dir(root)
            .stderr(std::process::Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        lines.extend(diff::unified(&path, &committed, &now, 3, style));
    }
    lines
}

/// `/rewind` without a snapshot: the snapshots to go back to, newest last.
pub fn rewind_points(store: &Store, id: &str) -> Vec<String> {
    let snapshots = match store.snapshots(id) {
        Ok(s) if !s.is_empty() => s,
        Ok(_) => return vec!["no snapshots yet: /snapshot takes one".to_string()],
        Err(e) => return vec![format!("error: {e}")],
    };
    snapshots
        .iter()
        .filter_map(|snap| store.read_snapshot(id, snap).ok())
        .map(|snap| {
            let prompt = snap
                .session
                .messages
                .iter()
                .rev()
                .find(|m| m.role == nop::protocol::Role::User)
                .map(|m| m.content.chars().take(50).collect::<String>())
                .unwrap_or_default();
            format!(
                "{}  {}  {} messages{}  {}",
                snap.snapshot_id,
                snap.created_at
                    .with_timezone(&chrono::Local)
                    .format("%H:%M:%S"),
                snap.session.messages.len(),
                if snap.checkpoint.is_some() {
                    ", files"
                } else {
                    ""
                },
                super::term::style::visible(&prompt.replace('\n', " "))
            )
        })
        .collect()
}

/// `/rewind`'s picker: the session's runs, newest first, each as its 1-based number and a line
/// (number, time, prompt, the files it changed).
pub fn turn_entries(
    file: &SessionFile,
    checkpoints: Option<&nop::checkpoint::Checkpoints>,
) -> Vec<(usize, String)> {
    const FILES: usize = 4;
    file.checkpoints
        .iter()
        .enumerate()
        .rev()
        .map(|(i, turn)| {
            let files = match (&turn.after, checkpoints) {
                (Some(after), Some(c)) => match c.changes(&turn.before, after) {
                    Ok(changed) if changed.is_empty() => "no files changed".to_string(),
                    Ok(changed) => {
                        let mut shown = changed
                            .iter()
                            .take(FILES)
                            .cloned()
                            .collect::<Vec<_>>()
                            .join(", ");
                        if changed.len() > FILES {
                            shown.push_str(&format!(" +{}", changed.len() - FILES));
                        }
                        shown
                    }
                    Err(_) => "files unknown".to_string(),
                },
                (None, Some(_)) => "did not end; files unknown".to_string(),
                (_, None) => String::new(),
            };
            let files = if files.is_empty() {
                files
            } else {
                format!("  · {}", super::term::style::visible(&files))
            };
            let prompt: String = turn.prompt.chars().take(60).collect();
            let line = format!(
                "{:>3}  {}  {}{}{}",
                i + 1,
                turn.started_at
                    .with_timezone(&chrono::Local)
                    .format("%m-%d %H:%M"),
                super::term::style::visible(&prompt.replace('\n', " ")),
                if turn.undone_at.is_some() {
                    " (undone)"
                } else {
                    ""
                },
                files,
            );
            (i + 1, line)
        })
        .collect()
}

/// Where `/rewind` goes: a snapshot, or the start of a run (1-based).
#[derive(Debug, PartialEq, Eq)]
pub enum RewindTo {
    Snapshot(String),
    Turn(usize),
}

/// `/rewind SNAP|--turn N [--files|--conversation|--both] [--force]`.
pub fn rewind_arguments(
    argument: &str,
) -> Result<(RewindTo, nop::checkpoint::RewindMode, bool), String> {
    use nop::checkpoint::RewindMode;
    let (mut to, mut mode, mut force) = (None, RewindMode::Both, false);
    let mut words = argument.split_whitespace();
    while let Some(word) = words.next() {
        match word {
            "--files" => mode = RewindMode::Files,
            "--conversation" => mode = RewindMode::Conversation,
            "--both" => mode = RewindMode::Both,
            "--force" => force = true,
            "--turn" => to = Some(RewindTo::Turn(turn_number("/rewind", words.next())?)),
            flag if flag.starts_with("--") => {
                return Err(format!(
                    "/rewind: unknown flag {flag} (--turn N, --files, --conversation, --both, --force)"
                ));
            }
            other => to = Some(RewindTo::Snapshot(other.to_string())),
        }
    }
    let to = to.ok_or("/rewind SNAP: which snapshot (/rewind alone lists them)")?;
    Ok((to, mode, force))
}

/// The run number after `--turn`.
fn turn_number(command: &str, word: Option<&str>) -> Result<usize, String> {
    match word.map(str::parse::<usize>) {
        Some(Ok(n)) if n > 0 => Ok(n),
        _ => Err(format!(
            "{command}: --turn takes the number of a run (1 for the first)"
        )),
    }
}

/// `/undo --force` and `/undo --turn N [--force]` (`/undo` alone opens the picker): the run
/// (`None`: the last that changed files) and whether to force.
pub fn undo_arguments(argument: &str) -> Result<(Option<usize>, bool), String> {
    let (mut turn, mut force) = (None, false);
    let mut words = argument.split_whitespace();
    while let Some(word) = words.next() {
        match word {
            "--force" => force = true,
            "--turn" => turn = Some(turn_number("/undo", words.next())?),
            other => {
                return Err(format!(
                    "/undo: unknown argument {other} (/undo alone picks a point; --turn N, --force)"
                ));
            }
        }
    }
    Ok((turn, force))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mistyped_command_has_a_nearest_one() {
        assert_eq!(nearest("/stauts"), Some("/status"));
        assert_eq!(nearest("/comapct"), Some("/compact"));
        assert_eq!(nearest("/resum"), Some("/resume"));
        assert_eq!(nearest("/frobnicate"), None);
    }

    #[test]
    fn help_lists_every_command() {
        let help = help();
        for (name, _) in COMMANDS {
            assert!(help.contains(name));
        }
    }

    #[test]
    fn rewind_arguments_take_a_snapshot_or_a_turn_a_mode_and_force_in_any_order() {
        use nop::checkpoint::RewindMode;
        let snap = || RewindTo::Snapshot("abc".to_string());
        assert_eq!(
            rewind_arguments("--files abc --force"),
            Ok((snap(), RewindMode::Files, true))
        );
        assert_eq!(
            rewind_arguments("abc"),
            Ok((snap(), RewindMode::Both, false))
        );
        assert_eq!(
            rewind_arguments("--turn 2 --files --force"),
            Ok((RewindTo::Turn(2), RewindMode::Files, true))
        );
        assert!(rewind_arguments("--files").is_err());
        assert!(rewind_arguments("--turn").is_err_and(|e| e.contains("--turn")));
        assert!(rewind_arguments("--turn 0").is_err());
        assert!(rewind_arguments("abc --all").is_err_and(|e| e.contains("--all")));
    }

    #[test]
    fn undo_arguments_take_a_turn_and_force() {
        assert_eq!(undo_arguments("--force"), Ok((None, true)));
        assert_eq!(undo_arguments("--turn 3 --force"), Ok((Some(3), true)));
        assert_eq!(undo_arguments("--turn 3"), Ok((Some(3), false)));
        assert!(undo_arguments("--turn x").is_err_and(|e| e.contains("number of a run")));
        assert!(undo_arguments("all").is_err_and(|e| e.contains("unknown argument all")));
    }
}
