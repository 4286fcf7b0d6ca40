//! `shell`: runs a command with `bash -c` in the repository, in its own process group so that a
//! timeout or Ctrl-C kills everything it started.

use std::process::Stdio;
use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::Deserialize;
use tokio::io::AsyncReadExt;

use super::{ToolContext, ToolError, ToolOutput, TypedTool, paths};

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
            Some(dir) => paths::resolve(&ctx.root, dir, paths::Access::Read)?,
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
        let mut child = tokio::process::Command::new("bash")
            .arg("-c")
            .arg(&args.command)
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| ToolError::model("SpawnFailed", format!("could not start bash: {e}")))?;
        let _guard = GroupGuard(child.id().and_then(|id| i32::try_from(id).ok()));
        let mut stdout = child.stdout.take();
        let mut stderr = child.stderr.take();
        let started = Instant::now();
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
                    format!("`{}` did not finish within {:.1} s and was killed", args.command, timeout.as_secs_f64()),
                ));
            }
            () = ctx.cancel.cancelled() => return Err(ToolError::Aborted),
        };
        let status = status.map_err(|e| ToolError::model("WaitFailed", e.to_string()))?;
        let code = status
            .code()
            .map_or_else(|| "killed by a signal".to_string(), |c| c.to_string());
        let mut content = format!(
            "exit code: {code} ({:.1} s)\n",
            started.elapsed().as_secs_f64()
        );
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
