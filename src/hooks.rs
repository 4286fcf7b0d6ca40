//! Hooks: the user's commands run at `session-start`, `before-tool`, `after-tool`,
//! `before-compact` and `session-end`, each with a JSON event on standard input, in the
//! repository root. They are the user's own commands, so they run with the user's rights (not
//! in the agent's sandbox) and environment, less the provider's key, and with no controlling
//! terminal. A `before-tool` hook exiting with code 2 blocks the call and its
//! standard error is what the model is told; any other failure, and a hook still running after
//! `hooks.timeout_s`, is logged and the run goes on.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::config::HooksConfig;
use crate::head_tail::HeadTail;

/// What the hooks of one event decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookOutcome {
    Continue,
    /// A `before-tool` hook blocked the call, saying why.
    Blocked(String),
}

/// The events hooks run at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    SessionStart,
    BeforeTool,
    AfterTool,
    BeforeCompact,
    SessionEnd,
}

impl Hook {
    /// The event's name, as in the configuration and the hook's JSON (`"event"`).
    pub fn name(self) -> &'static str {
        match self {
            Hook::SessionStart => "session-start",
            Hook::BeforeTool => "before-tool",
            Hook::AfterTool => "after-tool",
            Hook::BeforeCompact => "before-compact",
            Hook::SessionEnd => "session-end",
        }
    }

    fn commands(self, config: &HooksConfig) -> &[String] {
        match self {
            Hook::SessionStart => &config.session_start,
            Hook::BeforeTool => &config.before_tool,
            Hook::AfterTool => &config.after_tool,
            Hook::BeforeCompact => &config.before_compact,
            Hook::SessionEnd => &config.session_end,
        }
    }
}

/// Runs the commands `config` has for `hook`, within its `timeout_s`. `payload` is only built
/// when there is a command to read it (most runs have no hooks, and a tool call's payload copies
/// its arguments and output).
pub async fn fire(
    config: &HooksConfig,
    hook: Hook,
    root: &Path,
    payload: impl FnOnce() -> Value,
) -> HookOutcome {
    let commands = hook.commands(config);
    if commands.is_empty() {
        return HookOutcome::Continue;
    }
    run(
        hook.name(),
        commands,
        &payload(),
        root,
        config.timeout(),
        &config.key_vars,
    )
    .await
}

/// Runs `commands` for `event` with `payload` on their standard input, one after another.
pub async fn run(
    event: &str,
    commands: &[String],
    payload: &Value,
    root: &Path,
    timeout: Duration,
    key_vars: &[String],
) -> HookOutcome {
    let mut input = payload.clone();
    if let Value::Object(map) = &mut input {
        map.insert("event".into(), Value::String(event.to_string()));
    }
    let input = input.to_string();
    for command in commands {
        match run_one(command, &input, root, timeout, key_vars).await {
            Ok((code, stderr)) if code == Some(2) && event == "before-tool" => {
                let reason = if stderr.trim().is_empty() {
                    format!("blocked by the hook `{command}`")
                } else {
                    stderr.trim().to_string()
                };
                tracing::info!(op = "hook", event, result = "blocked", hook = %command, "{reason}");
                return HookOutcome::Blocked(reason);
            }
            Ok((Some(0), _)) => {
                tracing::debug!(op = "hook", event, result = "ok", hook = %command, "hook ran")
            }
            Ok((code, stderr)) => {
                tracing::warn!(op = "hook", event, result = "failed", hook = %command, code = ?code, "{}", stderr.trim())
            }
            Err(why) => {
                tracing::warn!(op = "hook", event, result = "error", hook = %command, "{why}")
            }
        }
    }
    HookOutcome::Continue
}

/// The most of a hook's standard error kept: head and tail.
const STDERR_KEPT: usize = 64 * 1024;

async fn run_one(
    command: &str,
    input: &str,
    root: &Path,
    timeout: Duration,
    key_vars: &[String],
) -> Result<(Option<i32>, String), String> {
    let mut command_line = tokio::process::Command::new("bash");
    for var in key_vars {
        command_line.env_remove(var);
    }
    let mut child = command_line
        .arg("-c")
        .arg(command)
        .current_dir(root)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("could not start: {e}"))?;
    let pid = child.id().and_then(|p| i32::try_from(p).ok());
    if let Some(mut stdin) = child.stdin.take() {
        // A hook that does not read its input is fine.
        let _ = stdin.write_all(input.as_bytes()).await;
    }
    let mut stderr = child.stderr.take();
    let work = async {
        // Bounded: a hook's message is short, and a hook may echo a tool's output.
        let mut kept = HeadTail::with_capacity(STDERR_KEPT);
        if let Some(s) = stderr.as_mut() {
            let mut buf = vec![0; 16 * 1024];
            while let Ok(n @ 1..) = s.read(&mut buf).await {
                kept.push(&buf[..n]);
            }
        }
        let status = child.wait().await;
        (
            status,
            kept.render(STDERR_KEPT, "the hook's standard error", None),
        )
    };
    match tokio::time::timeout(timeout, work).await {
        Ok((Ok(status), text)) => Ok((status.code(), text)),
        Ok((Err(e), _)) => Err(e.to_string()),
        Err(_) => {
            if let Some(pid) = pid {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            Err(format!(
                "still running after {:.1} s; killed",
                timeout.as_secs_f64()
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[tokio::test]
    async fn fire_runs_the_commands_of_its_event_and_builds_no_payload_without_any()
    -> anyhow::Result<()> {
        let root = tempfile::tempdir()?;
        let config = HooksConfig {
            before_tool: vec!["echo \"no: $(cat)\" >&2; exit 2".into()],
            ..HooksConfig::default()
        };
        let blocked = fire(
            &config,
            Hook::BeforeTool,
            root.path(),
            || json!({"tool": "x"}),
        )
        .await;
        assert_eq!(
            blocked,
            HookOutcome::Blocked(r#"no: {"tool":"x","event":"before-tool"}"#.into())
        );
        let ran = fire(&config, Hook::AfterTool, root.path(), || {
            unreachable!("no after-tool hook: no payload")
        })
        .await;
        assert_eq!(ran, HookOutcome::Continue);
        Ok(())
    }

    #[tokio::test]
    async fn a_hook_that_prints_a_lot_is_kept_to_its_head_and_tail() -> anyhow::Result<()> {
        let root = tempfile::tempdir()?;
        let config = HooksConfig {
            before_tool: vec![
                "head -c 1000000 /dev/zero | tr '\\0' x >&2; echo end >&2; exit 2".into(),
            ],
            ..HooksConfig::default()
        };
        let HookOutcome::Blocked(reason) =
            fire(&config, Hook::BeforeTool, root.path(), || json!({})).await
        else {
            anyhow::bail!("not blocked");
        };
        assert!(reason.len() < STDERR_KEPT + 100, "{}", reason.len());
        assert!(
            reason.starts_with("xxx") && reason.ends_with("xxend"),
            "{:?} … {:?}",
            &reason[..10],
            &reason[reason.len() - 10..]
        );
        assert!(reason.contains("[… 934468 bytes of the hook's standard error omitted …]"));
        Ok(())
    }
}
