//! `shell`: runs a command with `bash -c` in the repository, confined to the agent's rules
//! ([`confine`]), in a session and process group of its own with no controlling terminal (the
//! sandbox helper calls setsid), so that it cannot reach the user's terminal and a timeout or
//! Ctrl-C kills everything it started; a refusal by the sandbox is explained in the result.

use std::process::Stdio;
use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt};

use std::ffi::{OsStr, OsString};

use super::output::{Capture, MARKER_ROOM, Stream, share, shown_path};
use super::{ToolContext, ToolError, ToolOutput, TypedTool, confine, paths};
use crate::permissions::ShellView;
use crate::tools::ToolErrorKind;

pub struct Shell;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShellArgs {
    /// The command line, run with `bash -c` in the repository root (or `workdir`).
    command: String,
    /// Seconds before the command and everything it started are killed (default: the
    /// configured tools.timeout_s, 300 unless changed).
    #[serde(default)]
    timeout_s: Option<f64>,
    /// Directory to run in, relative to the repository root.
    #[serde(default)]
    workdir: Option<String>,
    /// Run this command outside the sandbox, with the user's rights. Only after it failed for a
    /// sandbox reason and must do what the sandbox stops (publish, write outside the
    /// repository); the user is asked, and sees `justification`.
    #[serde(default)]
    outside_sandbox: bool,
    /// With `outside_sandbox`: one line saying why it must run outside the sandbox (the
    /// question the user is asked shows it).
    #[serde(default)]
    justification: Option<String>,
}

/// How much of a pipe is read at a time.
const CHUNK: usize = 64 * 1024;

/// What a confined command did.
pub(crate) struct Ran {
    pub status: std::process::ExitStatus,
    /// Head and tail of its standard output and error (the whole of short ones).
    pub output: Capture,
    /// The session's `out-<ts>.log` holding the whole output, when a stream was longer than
    /// what is kept of it.
    pub log: Option<std::path::PathBuf>,
    /// A warning for the model when confinement is partial (once per run).
    pub note: Option<String>,
    /// The view it ran under (`None`: unconfined).
    pub view: Option<ShellView>,
    /// What became of its changes to `.git` that were not kept, for the model.
    pub git: Option<String>,
}

/// Runs `bash -c command` in `dir`, confined like every shell command of the agent (with the
/// filtered environment), in a new session and process group without a controlling terminal
/// (killed whole on timeout or cancellation), with `stdin` as its input. Its output is read as
/// it comes: [`Capture`] keeps head and tail and streams a long one whole to a new
/// `out-<ts>.log`.
#[expect(clippy::too_many_lines, reason = "a debt: listed in AGENTS.md")]
pub(crate) async fn run_confined(
    ctx: &ToolContext,
    command_line: &str,
    dir: &std::path::Path,
    stdin: Option<String>,
    timeout: Duration,
) -> Result<Ran, ToolError> {
    if !ctx.nop_dir().is_dir() {
        // The view protects .nop/ only if it exists: a command must not create it with rules
        // of its own.
        return Err(ToolError::FatalMessage(format!(
            "{} is missing; shell commands need it to be confined",
            ctx.nop_dir().display()
        )));
    }
    let started = Instant::now();
    let policy = ctx.policy.clone();
    let settings = ctx.sandbox.clone();
    let args = [OsString::from("-c"), OsString::from(command_line)];
    // The command's git work and the session's caches go through layers of the session's.
    let session_dir = ctx.store.dir(&ctx.session_id);
    let git_layer =
        super::git_layer::scratch_dir(&session_dir).join(super::git_layer::layer_name());
    // Plan mode: commands read; nothing of the repository is written, git's included.
    let read_only = ctx.approver.mode() == crate::permissions::ApprovalMode::Plan;
    let layers = crate::permissions::Layers {
        git: (!read_only).then(|| git_layer.clone()),
        caches: confine::cache_layers(&settings, &session_dir),
        read_only,
    };
    let _layer = LayerGuard(git_layer);
    let confined = tokio::task::spawn_blocking(move || {
        confine::confine(&policy, &settings, OsStr::new("bash"), &args, layers)
    })
    .await
    .map_err(ToolError::fatal("preparing the sandbox failed"))?
    .map_err(|e| match e {
        confine::ConfineError::Unavailable(m) => {
            ToolError::model(ToolErrorKind::SandboxUnavailable, m)
        }
        setup @ confine::ConfineError::Setup(_) => ToolError::fatal_from(setup),
    })?;
    let confine::Confined {
        command,
        view,
        note,
        spec_fd,
        ..
    } = confined;
    let mut command = tokio::process::Command::from(command);
    let spawned = command
        .current_dir(dir)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // No `process_group(0)`: the helper calls setsid (a process group leader could not),
        // which makes it the leader of a new session and process group whose id is its pid.
        .kill_on_drop(true)
        .spawn();
    // The child has its copy of the spec now (or never will).
    drop(spec_fd);
    let mut child = spawned.map_err(|e| {
        ToolError::model(
            ToolErrorKind::SpawnFailed,
            format!("could not start bash: {e}"),
        )
    })?;
    let _guard = GroupGuard(child.id().and_then(|id| i32::try_from(id).ok()));
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        use tokio::io::AsyncWriteExt;
        // A command that does not read its input is fine.
        let _ = pipe.write_all(input.as_bytes()).await;
    }
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let mut capture = Capture::new(
        ctx.store.clone(),
        ctx.session_id.clone(),
        ctx.output_max_bytes,
    );
    let collect = async {
        read_both(&mut stdout, &mut stderr, &mut capture, ctx.events.as_ref()).await;
        child.wait().await
    };
    let stopped = tokio::select! {
        r = collect => Ok(r),
        () = tokio::time::sleep(timeout) => Err(ToolError::model(
            ToolErrorKind::Timeout,
            format!("`{command_line}` did not finish within {:.1} s and was killed", timeout.as_secs_f64()),
        )),
        () = ctx.cancel.cancelled() => Err(ToolError::aborted()),
    };
    let status = match stopped {
        Ok(r) => r,
        Err(e) => {
            _guard.stop(&mut child).await;
            // What it printed until then stays in the log, if it had one.
            let log = capture
                .finish(&format!("(stopped: {e})"))
                .await
                .ok()
                .flatten()
                .map(|p| shown_path(&ctx.root, &p));
            return Err(match e {
                // The model and the user see what it printed until then.
                ToolError::Aborted { .. } => ToolError::Aborted {
                    output: Some(streams(&capture, log.as_deref(), 0, ctx.output_max_bytes))
                        .filter(|o| !o.is_empty()),
                },
                e => e,
            });
        }
    };
    let status = match status {
        Ok(status) => status,
        Err(e) => {
            let _ = capture
                .finish(&format!("(waiting for it failed: {e})"))
                .await;
            return Err(ToolError::model(ToolErrorKind::WaitFailed, e.to_string()));
        }
    };
    let log = capture
        .finish(&format!(
            "exit code: {} ({:.1} s)",
            exit_code(status),
            started.elapsed().as_secs_f64()
        ))
        .await
        .map_err(ToolError::fatal("keeping the output of a command failed"))?;
    // The command has ended, and with it everything it started (its PID namespace is gone):
    // what it did to git's directories is applied now, or refused.
    let git = match view.as_ref().map(|v| v.git_layers.clone()) {
        Some(layers) if !layers.is_empty() => {
            let root = ctx.root.clone();
            tokio::task::spawn_blocking(move || super::git_layer::apply(&layers, &root).note())
                .await
                .ok()
                .flatten()
        }
        _ => None,
    };
    Ok(Ran {
        status,
        output: capture,
        log,
        note,
        view,
        git,
    })
}

/// Removes a command's git layer, whichever way `run_confined` ends.
struct LayerGuard(std::path::PathBuf);

impl Drop for LayerGuard {
    fn drop(&mut self) {
        if self.0.exists() {
            super::git_layer::remove_layer(&self.0);
        }
    }
}

/// Both streams as the model reads them (`stdout:` and `stderr:` sections, an empty one left
/// out), head and tail within `max` bytes with `fixed` of them taken already when a stream was
/// cut (`log` names the whole).
fn streams(capture: &Capture, log: Option<&str>, fixed: usize, max: usize) -> String {
    let (out, err) = (&capture.stdout, &capture.stderr);
    let (out_budget, err_budget) = match log {
        // Short enough to keep whole; the orchestrator cuts it if the whole is too long.
        None => (usize::MAX, usize::MAX),
        Some(name) => {
            let fixed = fixed + 2 * (MARKER_ROOM + name.len() + "stdout:\n\n".len());
            share(max.saturating_sub(fixed), out.total(), err.total())
        }
    };
    let mut content = String::new();
    for (label, stream, budget) in [("stdout", out, out_budget), ("stderr", err, err_budget)] {
        if stream.is_empty() {
            continue;
        }
        let text = stream.render(budget, label, log);
        content.push_str(label);
        content.push_str(":\n");
        content.push_str(&text);
        if !text.ends_with('\n') {
            content.push('\n');
        }
    }
    content
}

/// How often at most a command's live tail is sent.
const TAIL_EVERY: Duration = Duration::from_millis(250);

/// Lines in a command's live tail.
const TAIL_LINES: usize = 3;

/// The last bytes a command printed (both streams as they came), for its live tail.
#[derive(Default)]
struct Recent {
    bytes: Vec<u8>,
    /// Something came since the tail was last sent.
    fresh: bool,
}

impl Recent {
    const KEEP: usize = 4096;

    fn push(&mut self, bytes: &[u8]) {
        self.bytes.extend_from_slice(bytes);
        if self.bytes.len() > Self::KEEP {
            self.bytes.drain(..self.bytes.len() - Self::KEEP);
        }
        self.fresh = true;
    }

    /// The last non-blank lines (a carriage return starts a line over, as a progress bar does).
    fn tail(&self) -> Vec<String> {
        let text = String::from_utf8_lossy(&self.bytes);
        let mut lines: Vec<String> = text
            .lines()
            .map(|l| l.rsplit('\r').next().unwrap_or(l).trim_end().to_string())
            .filter(|l| !l.trim().is_empty())
            .collect();
        lines.drain(..lines.len().saturating_sub(TAIL_LINES));
        lines
    }
}

/// Reads both pipes until they close, each piece into `capture` as it arrives; the last lines
/// go to `events` as `ToolOutput` at most every [`TAIL_EVERY`].
async fn read_both(
    stdout: &mut Option<impl AsyncRead + Unpin>,
    stderr: &mut Option<impl AsyncRead + Unpin>,
    capture: &mut Capture,
    events: Option<&tokio::sync::mpsc::UnboundedSender<crate::protocol::events::Event>>,
) {
    let mut out_buf = vec![0; CHUNK];
    let mut err_buf = vec![0; CHUNK];
    let mut recent = Recent::default();
    let mut every = tokio::time::interval(TAIL_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // `read` is cancel-safe: the pipe that loses the race keeps its bytes for the next turn.
        let (stream, read) = tokio::select! {
            r = read_some(stdout, &mut out_buf), if stdout.is_some() => (Stream::Stdout, r),
            r = read_some(stderr, &mut err_buf), if stderr.is_some() => (Stream::Stderr, r),
            _ = every.tick(), if events.is_some() && (stdout.is_some() || stderr.is_some()) => {
                if let Some(events) = events.filter(|_| recent.fresh) {
                    recent.fresh = false;
                    let _ = events.send(crate::protocol::events::Event::ToolOutput { tail: recent.tail() });
                }
                continue;
            }
            else => return,
        };
        match (stream, read) {
            (Stream::Stdout, Ok(n)) if n > 0 => {
                recent.push(&out_buf[..n]);
                capture.push(stream, &out_buf[..n]).await;
            }
            (Stream::Stderr, Ok(n)) if n > 0 => {
                recent.push(&err_buf[..n]);
                capture.push(stream, &err_buf[..n]).await;
            }
            (Stream::Stdout, _) => *stdout = None,
            (Stream::Stderr, _) => *stderr = None,
        }
    }
}

async fn read_some(
    pipe: &mut Option<impl AsyncRead + Unpin>,
    buf: &mut [u8],
) -> std::io::Result<usize> {
    match pipe {
        Some(pipe) => pipe.read(buf).await,
        None => Ok(0),
    }
}

fn exit_code(status: std::process::ExitStatus) -> String {
    status
        .code()
        .map_or_else(|| "killed by a signal".to_string(), |c| c.to_string())
}

/// Kills the whole process group when dropped, so no path out of `run` leaves processes behind.
/// The group's id is the child's pid: the child (the sandbox helper, or the command started with
/// [`crate::sandbox::in_new_session`]) leads a session and group of its own. Until the helper has
/// called setsid the group does not exist yet; `kill_on_drop` still kills the helper itself,
/// which has started nothing then.
struct GroupGuard(Option<i32>);

impl GroupGuard {
    /// Asks the process group to end (SIGTERM) and waits a moment for its leader: the sandbox
    /// helper then ends everything the command started, `setsid` or not, which a SIGKILL of the
    /// group would not let it do. The drop that follows kills what is left.
    async fn stop(&self, child: &mut tokio::process::Child) {
        if let Some(pgid) = self.0 {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pgid),
                nix::sys::signal::Signal::SIGTERM,
            );
            let _ = tokio::time::timeout(Duration::from_secs(2), child.wait()).await;
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.0 {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pgid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// A `workdir` that is missing or not a directory, named as such: starting bash there would
/// fail with "No such file or directory", which reads as if bash were missing.
async fn workdir_is_a_directory(
    ctx: &ToolContext,
    given: &str,
    resolved: &std::path::Path,
) -> Result<(), ToolError> {
    let relative = if std::path::Path::new(given).is_absolute() || given.starts_with('~') {
        String::new()
    } else {
        format!(" (relative to the repository root, {})", ctx.root.display())
    };
    match tokio::fs::metadata(resolved).await {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(ToolError::model(
            ToolErrorKind::InvalidArguments,
            format!("workdir `{given}` is not a directory{relative}"),
        )),
        Err(_) => Err(ToolError::model(
            ToolErrorKind::NotFound,
            format!(
                "workdir `{given}` does not exist{relative}; leave workdir out to run in the repository root"
            ),
        )),
    }
}

impl TypedTool for Shell {
    type Args = ShellArgs;
    const NAME: &'static str = "shell";
    const MUTATING: bool = true;
    const DESCRIPTION: &'static str = "Run a shell command (bash -c) in the repository and get its exit code, standard output and standard error. Use it to build, test, run git and other programs. Long output is cut in the middle (the lines there that say why it failed are kept); the whole is kept in the session's out-<ts>.log, whose path the cut names.";

    /// `timeout_s` is shell's own argument: it kills the command's process group when it is up.
    fn time_limit(args: &Value, configured: Duration) -> super::TimeLimit {
        super::TimeLimit::Own(
            args.get("timeout_s")
                .and_then(Value::as_f64)
                .filter(|s| s.is_finite() && *s > 0.0)
                .map_or(configured, |s| Duration::from_secs_f64(s.min(86_400.0))),
        )
    }

    async fn run(&self, args: ShellArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let dir = match &args.workdir {
            Some(dir) => {
                let resolved =
                    paths::resolve(ctx, Self::NAME, dir, crate::permissions::Access::Read).await?;
                workdir_is_a_directory(ctx, dir, &resolved).await?;
                resolved
            }
            None => ctx.root.clone(),
        };
        let timeout = match args.timeout_s {
            Some(s) if s.is_finite() && s > 0.0 => Duration::from_secs_f64(s.min(86_400.0)),
            Some(s) => {
                return Err(ToolError::model(
                    ToolErrorKind::InvalidArguments,
                    format!("timeout_s must be positive, not {s}"),
                ));
            }
            None => ctx.timeout,
        };
        let started = Instant::now();
        // Approved by the orchestrator (the user, or a `shell.outside_sandbox` rule) before it
        // got here: run with the user's rights, through the helper all the same (no terminal,
        // the filtered environment, everything it starts ends with it).
        let ran = if args.outside_sandbox {
            let mut outside = ctx.clone();
            outside.sandbox.mode = crate::config::SandboxMode::Off;
            run_confined(&outside, &args.command, &dir, None, timeout).await?
        } else {
            run_confined(ctx, &args.command, &dir, None, timeout).await?
        };
        let (out, err) = (&ran.output.stdout, &ran.output.stderr);
        // On what is kept: a refusal's message is near the start or the end of the output.
        let refusals = match &ran.view {
            Some(view) => {
                let both = format!("{}\n{}", out.kept_text(), err.kept_text());
                confine::refusal_notes(view, &ctx.root, &dir, &both)
            }
            None => Vec::new(),
        };
        let elapsed = started.elapsed();
        let mut content = format!(
            "exit code: {} ({:.1} s)\n",
            exit_code(ran.status),
            elapsed.as_secs_f64()
        );
        if args.outside_sandbox {
            content.push_str(&format!(
                "ran outside the sandbox, with the user's rights (approved): {}\n",
                args.justification.as_deref().unwrap_or("no reason given")
            ));
        }
        if let Some(note) = &ran.note {
            content.push_str(note);
            content.push('\n');
        }
        let blocked = !refusals.is_empty();
        let mut refusals: Vec<String> = refusals.into_iter().chain(ran.git.clone()).collect();
        let plan_mode = ctx.approver.mode() == crate::permissions::ApprovalMode::Plan;
        if blocked && !args.outside_sandbox && !plan_mode {
            refusals.push(
                "sandbox: if this command must do what the sandbox stops, call shell again with \
                 `outside_sandbox: true` and a one-line `justification`: the user is asked \
                 (headless, only commands shell.outside_sandbox lists run so)"
                    .to_string(),
            );
        }
        let plan = ctx.approver.mode() == crate::permissions::ApprovalMode::Plan;
        if plan && !ran.status.success() {
            refusals.push(
                "plan mode: nothing is changed: shell commands read the repository but cannot \
                 write it (the temp directory is writable). Write the plan with update-plan and \
                 stop; the user switches the mode to carry it out"
                    .to_string(),
            );
        }
        let fixed = content.len() + refusals.iter().map(|n| n.len() + 1).sum::<usize>();
        let log = ran.log.as_ref().map(|p| shown_path(&ctx.root, p));
        content.push_str(&streams(
            &ran.output,
            log.as_deref(),
            fixed,
            ctx.output_max_bytes,
        ));
        for note in refusals {
            content.push_str(&note);
            content.push('\n');
        }
        Ok(ToolOutput {
            content,
            effect: super::ToolEffect::None,
            outcome: super::ToolOutcome {
                whole_in: ran.log.map(|p| p.to_string_lossy().into_owned()),
                ..super::ToolOutcome::command(ran.status, elapsed)
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Recent;

    #[test]
    fn the_live_tail_is_the_last_lines_with_a_progress_bar_at_its_latest() {
        let mut recent = Recent::default();
        recent.push(b"one\ntwo\n\nthree\n10%\r50%\r");
        recent.push(b"90%\nfour");
        assert!(recent.fresh);
        assert_eq!(recent.tail(), ["three", "90%", "four"]);
    }
}
