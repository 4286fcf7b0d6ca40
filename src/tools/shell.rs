//! `shell`: runs a command with `bash -c` in the repository, in its own process group so that a
//! timeout or Ctrl-C kills everything it started.

use std::process::Stdio;
use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::Deserialize;
use tokio::io::AsyncReadExt;

use std::sync::atomic::{AtomicBool, Ordering};

use super::{ToolContext, ToolError, ToolOutput, TypedTool, paths};
use crate::config::{NetworkMode, SandboxMode};
use crate::sandbox::{self, Enforcement};

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

static WARNED: AtomicBool = AtomicBool::new(false);

/// `bash -c COMMAND`, confined by re-executing nop as `nop __sandbox SPEC REQUIRED -- bash -c
/// COMMAND` when the sandbox is on; with a note for the model when confinement is partial or
/// missing (once per run).
fn confined_command(
    ctx: &ToolContext,
    command: &str,
) -> Result<(tokio::process::Command, Option<String>), ToolError> {
    let plain = || {
        let mut c = tokio::process::Command::new("bash");
        c.arg("-c").arg(command);
        c
    };
    if ctx.sandbox.mode == SandboxMode::Off {
        return Ok((plain(), None));
    }
    let required = ctx.sandbox.mode == SandboxMode::Required;
    let network = ctx.sandbox.network == NetworkMode::Allow;
    let support = sandbox::support();
    let mut gaps = Vec::new();
    if support.filesystem != Enforcement::Full {
        gaps.push(format!(
            "file rules ({:?} enforcement: Landlock {})",
            support.filesystem,
            support
                .abi
                .map_or("unavailable".to_string(), |a| format!("ABI {a}"))
        ));
    }
    if !network && support.network != Enforcement::Full {
        gaps.push("shell.network: deny (needs Landlock ABI 4)".to_string());
    }
    if required && !gaps.is_empty() {
        return Err(ToolError::model(
            "SandboxUnavailable",
            format!(
                "sandbox: required, but this kernel cannot enforce {}; shell commands are refused",
                gaps.join(" and ")
            ),
        ));
    }
    let note = (!gaps.is_empty() && !WARNED.swap(true, Ordering::Relaxed)).then(|| {
        let message = format!("warning: shell commands are not fully confined on this kernel: {} is not enforced (sandbox: best-effort)", gaps.join(" and "));
        tracing::warn!(session = %ctx.session_id, op = "sandbox", result = "partial", "{message}");
        message
    });
    if support.filesystem == Enforcement::None && (network || support.network == Enforcement::None)
    {
        return Ok((plain(), note));
    }
    let spec = crate::permissions::shell_spec(&ctx.policy, network);
    let spec_file = tempfile::Builder::new()
        .prefix("nop-sandbox-")
        .suffix(".json")
        .tempfile()
        .map_err(|e| ToolError::Fatal(format!("cannot write the sandbox rules: {e}")))?;
    serde_json::to_writer(spec_file.as_file(), &spec)
        .map_err(|e| ToolError::Fatal(format!("cannot write the sandbox rules: {e}")))?;
    // `nop __sandbox` deletes the file once it has read it.
    let (_, spec_path) = spec_file
        .keep()
        .map_err(|e| ToolError::Fatal(e.to_string()))?;
    let exe = std::env::current_exe()
        .map_err(|e| ToolError::Fatal(format!("cannot find the nop executable: {e}")))?;
    let mut c = tokio::process::Command::new(exe);
    c.arg("__sandbox")
        .arg(&spec_path)
        .arg(if required { "1" } else { "0" })
        .arg("--")
        .arg("bash")
        .arg("-c")
        .arg(command);
    Ok((c, note))
}

/// What a confined command did.
pub(crate) struct Ran {
    pub status: std::process::ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// A warning for the model when confinement is partial (once per run).
    pub note: Option<String>,
}

/// Runs `bash -c command` in `dir`, confined like every shell command of the agent, in its own
/// process group (killed whole on timeout or cancellation), with `stdin` as its input.
pub(crate) async fn run_confined(
    ctx: &ToolContext,
    command_line: &str,
    dir: &std::path::Path,
    stdin: Option<String>,
    timeout: Duration,
) -> Result<Ran, ToolError> {
    let (mut command, note) = confined_command(ctx, command_line)?;
    let mut child = command
        .current_dir(dir)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| ToolError::model("SpawnFailed", format!("could not start bash: {e}")))?;
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
    let (status, out, err) = tokio::select! {
        r = collect => r,
        () = tokio::time::sleep(timeout) => {
            return Err(ToolError::model(
                "Timeout",
                format!("`{command_line}` did not finish within {:.1} s and was killed", timeout.as_secs_f64()),
            ));
        }
        () = ctx.cancel.cancelled() => return Err(ToolError::Aborted),
    };
    let status = status.map_err(|e| ToolError::model("WaitFailed", e.to_string()))?;
    Ok(Ran {
        status,
        stdout: out,
        stderr: err,
        note,
    })
}

/// Kills the whole process group when dropped, so no path out of `run` leaves processes behind.
struct GroupGuard(Option<i32>);

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
                    "InvalidArguments",
                    format!("timeout_s must be positive, not {s}"),
                ));
            }
            None => ctx.timeout,
        };
        let started = Instant::now();
        let ran = run_confined(ctx, &args.command, &dir, None, timeout).await?;
        let (status, out, err, note) = (ran.status, ran.stdout, ran.stderr, ran.note);
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
        }
        Ok(ToolOutput::text(content))
    }
}
