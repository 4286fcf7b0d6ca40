//! Hooks: the user's commands run at points of a run (`session-start`, `user-prompt-submit`,
//! `before-tool`, `permission-request`, `after-tool`, `before-compact`, `notification`, `stop`,
//! `subagent-stop`, `session-end`), each with a JSON event on standard input, in the
//! repository root. They are the user's own commands, so they run with the user's rights (not
//! in the agent's sandbox) and environment, less the provider's key, and with no controlling
//! terminal. Exit code 2 is a block (of the call, the prompt, the stop: its standard error says
//! why), standard output may carry a decision as JSON; any other failure, and a hook still
//! running after its time limit, is logged and the run goes on.
//!
//! Hooks from nop's `hooks:` get nop's JSON; those from Claude Code's settings files get Claude
//! Code's, with its tool names and fields ([`claude`]), so its hook scripts run unchanged.

mod claude;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::config::HooksConfig;
use crate::head_tail::HeadTail;

pub use crate::protocol::{About, Hook, HookEvent, Mode};
pub use claude::claude_tool_name;

/// What the hooks of one event decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookOutcome {
    Continue,
    /// A hook blocked: the call (`before-tool`), the prompt (`user-prompt-submit`), the stop
    /// (`stop`, `subagent-stop`: the reason is the agent's next input) or the approval
    /// (`permission-request`), saying why.
    Blocked(String),
    /// `user-prompt-submit`: text to give the model with the prompt.
    Context(String),
    /// `permission-request`: the hook approved the call; nobody is asked.
    Allowed,
}

impl Hook {
    /// Whether a hook of this event can block something (exit code 2, `decision: "block"`).
    fn can_block(self) -> bool {
        matches!(
            self,
            Hook::UserPromptSubmit
                | Hook::BeforeTool
                | Hook::PermissionRequest
                | Hook::Stop
                | Hook::SubagentStop
        )
    }
}

/// Whose JSON a hook reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Nop,
    Claude,
}

/// One command to run for an event.
struct Entry<'a> {
    command: &'a str,
    matcher: &'a str,
    timeout: Duration,
    shape: Shape,
    /// The Claude Code settings file it comes from.
    origin: Option<&'a Path>,
}

/// Whether any command is set for `hook` (nop's own or Claude Code's).
pub fn configured(config: &HooksConfig, hook: Hook) -> bool {
    !entries(config, hook).is_empty()
}

fn entries<'a>(config: &'a HooksConfig, hook: Hook) -> Vec<Entry<'a>> {
    let own = config.commands(hook.name()).iter().map(|c| Entry {
        command: c.command(),
        matcher: c.matcher(),
        timeout: c.timeout_s().map_or(config.timeout(), seconds),
        shape: Shape::Nop,
        origin: None,
    });
    let claude = config
        .claude
        .iter()
        .filter(|c| c.event == hook.name())
        .map(|c| Entry {
            command: &c.command,
            matcher: &c.matcher,
            timeout: c.timeout_s.map_or(config.timeout(), seconds),
            shape: Shape::Claude,
            origin: Some(c.origin.as_path()),
        });
    own.chain(claude).collect()
}

fn seconds(s: f64) -> Duration {
    Duration::from_secs_f64(s.clamp(0.001, 86_400.0))
}

/// What a matcher is matched against: the tool's name (nop's, or Claude Code's for its
/// hooks), how a session started, what started a compaction; `None` for events without
/// matchers.
fn subject(event: &HookEvent<'_>, shape: Shape) -> Option<String> {
    if let Some((tool, _)) = event.tool() {
        return Some(match shape {
            Shape::Nop => tool.to_string(),
            Shape::Claude => claude_tool_name(tool),
        });
    }
    match event {
        HookEvent::SessionStart { resumed, .. } => Some(claude::session_source(*resumed).into()),
        HookEvent::BeforeCompact { manual, .. } => Some(claude::compact_trigger(*manual).into()),
        _ => None,
    }
}

fn matches(matcher: &str, subject: Option<&str>) -> bool {
    let Some(subject) = subject else {
        return true;
    };
    // Checked when the configuration was read; one that no longer compiles matches nothing.
    regex::Regex::new(&crate::config::matcher_pattern(matcher)).is_ok_and(|r| r.is_match(subject))
}

/// Runs the commands `config` has for `event` (nop's own, then Claude Code's), within their
/// time limits. Its JSON is only written when there is a command to read it (most runs have no
/// hooks, and a tool call's copies its arguments and output).
pub async fn fire(config: &HooksConfig, root: &Path, event: &HookEvent<'_>) -> HookOutcome {
    let hook = event.hook();
    let entries = entries(config, hook);
    if entries.is_empty() {
        return HookOutcome::Continue;
    }
    let payload = event.to_json();
    let nop_input = payload.to_string();
    let mut claude_input = None;
    let mut context = Vec::new();
    let mut allowed = false;
    let gate = crate::trust::Gate::new(config.trust_dir.clone().map(crate::trust::Store::at));
    for entry in entries {
        if !matches(entry.matcher, subject(event, entry.shape).as_deref()) {
            continue;
        }
        // Decided now, from the record and what the files hold now: a settings file or a
        // script changed since the user trusted it (by the agent, a merge, an undo) never runs.
        if let Err(untrusted) = gate.hook(root, entry.command, entry.origin) {
            tracing::warn!(op = "hook", event = hook.name(), result = "untrusted", hook = %entry.command, "{}", untrusted.warning());
            continue;
        }
        let input = match entry.shape {
            Shape::Nop => &nop_input,
            Shape::Claude => {
                claude_input.get_or_insert_with(|| claude::input(event, root).to_string())
            }
        };
        let command = entry.command;
        let event = hook.name();
        let ran = run_one(command, input, root, entry.timeout, &config.key_vars).await;
        let (code, stdout, stderr) = match ran {
            Ok(ran) => ran,
            Err(why) => {
                tracing::warn!(op = "hook", event, result = "error", hook = %command, "{why}");
                continue;
            }
        };
        match code {
            Some(2) if hook.can_block() => {
                let reason = if stderr.trim().is_empty() {
                    format!("blocked by the hook `{command}`")
                } else {
                    stderr.trim().to_string()
                };
                tracing::info!(op = "hook", event, result = "blocked", hook = %command, "{reason}");
                return HookOutcome::Blocked(reason);
            }
            Some(0) => {
                tracing::debug!(op = "hook", event, result = "ok", hook = %command, "hook ran");
                match claude::decision(hook, &stdout) {
                    claude::Decision::None => {}
                    claude::Decision::Block(reason) => {
                        let reason =
                            reason.unwrap_or_else(|| format!("blocked by the hook `{command}`"));
                        tracing::info!(op = "hook", event, result = "blocked", hook = %command, "{reason}");
                        return HookOutcome::Blocked(reason);
                    }
                    claude::Decision::Halt(reason) => {
                        tracing::info!(op = "hook", event, result = "halt", hook = %command, "{reason}");
                        // A stop that must not be kept going: no later hook may.
                        if matches!(hook, Hook::Stop | Hook::SubagentStop) {
                            return HookOutcome::Continue;
                        }
                        return HookOutcome::Blocked(reason);
                    }
                    claude::Decision::Allow => allowed = true,
                    claude::Decision::Context(text) => context.push(text),
                }
            }
            code => {
                tracing::warn!(op = "hook", event, result = "failed", hook = %command, code = ?code, "{}", stderr.trim())
            }
        }
    }
    if !context.is_empty() {
        HookOutcome::Context(context.join("\n"))
    } else if allowed {
        HookOutcome::Allowed
    } else {
        HookOutcome::Continue
    }
}

/// The most of a hook's standard output or error kept: head and tail.
const STDERR_KEPT: usize = 64 * 1024;

async fn run_one(
    command: &str,
    input: &str,
    root: &Path,
    timeout: Duration,
    key_vars: &[String],
) -> Result<(Option<i32>, String, String), String> {
    let mut command_line = tokio::process::Command::new("bash");
    for var in key_vars {
        command_line.env_remove(var);
    }
    let mut child = command_line
        .arg("-c")
        .arg(command)
        .current_dir(root)
        .env("NOP_PROJECT_DIR", root)
        .env("CLAUDE_PROJECT_DIR", root)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("could not start: {e}"))?;
    let pid = child.id().and_then(|p| i32::try_from(p).ok());
    let mut stdin = child.stdin.take();
    let input = input.as_bytes().to_vec();
    let feed = async move {
        if let Some(stdin) = stdin.as_mut() {
            // A hook that does not read its input is fine.
            let _ = stdin.write_all(&input).await;
        }
        drop(stdin);
    };
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let work = async {
        // Bounded: a hook's message is short, and a hook may echo a tool's output.
        let (_, out, err) = tokio::join!(
            feed,
            keep(stdout, "the hook's standard output"),
            keep(stderr, "the hook's standard error")
        );
        let status = child.wait().await;
        (status, out, err)
    };
    match tokio::time::timeout(timeout, work).await {
        Ok((Ok(status), out, err)) => Ok((status.code(), out, err)),
        Ok((Err(e), _, _)) => Err(e.to_string()),
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

async fn keep(stream: Option<impl tokio::io::AsyncRead + Unpin>, what: &str) -> String {
    let mut kept = HeadTail::with_capacity(STDERR_KEPT);
    if let Some(mut s) = stream {
        let mut buf = vec![0; 16 * 1024];
        while let Ok(n @ 1..) = s.read(&mut buf).await {
            kept.push(&buf[..n]);
        }
    }
    kept.render(STDERR_KEPT, what, None)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    const ABOUT: About<'static> = About {
        session_id: "s1",
        agent: "coder",
    };

    fn before_tool(arguments: &Value) -> HookEvent<'_> {
        HookEvent::BeforeTool {
            about: ABOUT,
            tool: "x",
            call_id: None,
            arguments: std::borrow::Cow::Borrowed(arguments),
            mention: false,
        }
    }

    #[tokio::test]
    async fn fire_runs_the_commands_of_its_event_only() -> anyhow::Result<()> {
        let root = tempfile::tempdir()?;
        let config = HooksConfig {
            before_tool: vec!["echo \"no: $(cat)\" >&2; exit 2".into()],
            ..HooksConfig::default()
        };
        let blocked = fire(&config, root.path(), &before_tool(&json!({}))).await;
        assert_eq!(
            blocked,
            HookOutcome::Blocked(
                r#"no: {"session_id":"s1","agent":"coder","tool":"x","arguments":{},"event":"before-tool"}"#
                    .into()
            )
        );
        let after = HookEvent::AfterTool {
            about: ABOUT,
            tool: "x",
            call_id: "c1",
            arguments: &Value::Null,
            ok: true,
            output: "".into(),
        };
        assert_eq!(
            fire(&config, root.path(), &after).await,
            HookOutcome::Continue
        );
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
            fire(&config, root.path(), &before_tool(&json!({}))).await
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
