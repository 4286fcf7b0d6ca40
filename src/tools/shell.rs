//! `shell`: runs a command with `bash -c` in the repository, confined to the agent's rules
//! ([`confine`]), in a session and process group of its own with no controlling terminal (the
//! sandbox helper calls setsid), so that it cannot reach the user's terminal and a timeout or
//! Ctrl-C kills everything it started; a refusal by the sandbox is explained in the result.

use std::process::Stdio;
use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::Deserialize;
use tokio::io::AsyncReadExt;

use std::ffi::{OsStr, OsString};

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
}

/// What a confined command did.
pub(crate) struct Ran {
    pub status: std::process::ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// A warning for the model when confinement is partial (once per run).
    pub note: Option<String>,
    /// The view it ran under (`None`: unconfined).
    pub view: Option<ShellView>,
}

/// Runs `bash -c command` in `dir`, confined like every shell command of the agent (with the
/// filtered environment), in a new session and process group without a controlling terminal
/// (killed whole on timeout or cancellation), with `stdin` as its input.
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
    let policy = ctx.policy.clone();
    let settings = ctx.sandbox.clone();
    let args = [OsString::from("-c"), OsString::from(command_line)];
    let confined = tokio::task::spawn_blocking(move || {
        confine::confine(&policy, &settings, OsStr::new("bash"), &args)
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
    let collect = async {
        let mut out = Vec::new();
        let mut err = Vec::new();
        let read_out = async {
            if let Some(s) = stdout.as_mut() {
                let _ = s.read_to_end(&mut out).await;
            }
        };
        let read_err = async {
            if let Some(s) = stderr.as_mut() {
                let _ = s.read_to_end(&mut err).await;
            }
        };
        tokio::join!(read_out, read_err);
        let status = child.wait().await;
        (status, out, err)
    };
    let stopped = tokio::select! {
        r = collect => Ok(r),
        () = tokio::time::sleep(timeout) => Err(ToolError::model(
            ToolErrorKind::Timeout,
            format!("`{command_line}` did not finish within {:.1} s and was killed", timeout.as_secs_f64()),
        )),
        () = ctx.cancel.cancelled() => Err(ToolError::Aborted),
    };
    let (status, out, err) = match stopped {
        Ok(r) => r,
        Err(e) => {
            _guard.stop(&mut child).await;
            return Err(e);
        }
    };
    let status = status.map_err(|e| ToolError::model(ToolErrorKind::WaitFailed, e.to_string()))?;
    Ok(Ran {
        status,
        stdout: out,
        stderr: err,
        note,
        view,
    })
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

impl TypedTool for Shell {
    type Args = ShellArgs;
    const NAME: &'static str = "shell";
    const MUTATING: bool = true;
    const DESCRIPTION: &'static str = "Run a shell command (bash -c) in the repository and get its exit code, standard output and standard error. Use it to build, test, run git and other programs. Long output is cut in the middle; the whole is kept in the session's out-<ts>.log.";

    async fn run(&self, args: ShellArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let dir = match &args.workdir {
            Some(dir) => {
                paths::resolve(ctx, Self::NAME, dir, crate::permissions::Access::Read).await?
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
        let ran = run_confined(ctx, &args.command, &dir, None, timeout).await?;
        let (status, out, err, note) = (ran.status, ran.stdout, ran.stderr, ran.note);
        let refusals = match &ran.view {
            Some(view) => {
                let both = format!(
                    "{}\n{}",
                    String::from_utf8_lossy(&out),
                    String::from_utf8_lossy(&err)
                );
                confine::refusal_notes(view, &ctx.root, &dir, &both)
            }
            None => Vec::new(),
        };
        let code = status
            .code()
            .map_or_else(|| "killed by a signal".to_string(), |c| c.to_string());
        let mut content = format!(
            "exit code: {code} ({:.1} s)\n",
            started.elapsed().as_secs_f64()
        );
        if let Some(note) = note {
            content.push_str(&note);
            content.push('\n');
        }
        let out = String::from_utf8_lossy(&out);
        let err = String::from_utf8_lossy(&err);
        if !out.is_empty() {
            content.push_str("stdout:\n");
            content.push_str(&out);
            if !out.ends_with('\n') {
                content.push('\n');
            }
        }
        if !err.is_empty() {
            content.push_str("stderr:\n");
            content.push_str(&err);
            if !err.ends_with('\n') {
                content.push('\n');
            }
        }
        for note in refusals {
            content.push_str(&note);
            content.push('\n');
        }
        Ok(ToolOutput::text(content))
    }
}
