//! `nop permissions check`, `nop permissions explain` and `nop permissions import`.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{Result, bail};

use nop::permissions::{Access, Decision, load_policy, validate_all};

use super::context::Context;
use super::{AccessArg, PermissionsCommand, exit_code, sandbox};

/// `nop permissions …`.
pub fn permissions(
    ctx: &Context,
    command: PermissionsCommand,
    out: &mut impl Write,
) -> Result<ExitCode> {
    let ws = &ctx.ws;
    match command {
        PermissionsCommand::Check => {
            let mut ok = true;
            for (path, result) in validate_all(&ws.root) {
                let shown = path
                    .strip_prefix(&ws.root)
                    .unwrap_or(&path)
                    .display()
                    .to_string();
                let shown = if path.exists() {
                    shown
                } else {
                    format!("{shown} (built in: no such file)")
                };
                match result {
                    Ok(()) => writeln!(out, "ok       {shown}")?,
                    Err(e) => {
                        ok = false;
                        writeln!(out, "problem  {e}")?;
                    }
                }
            }
            Ok(exit_code(ok))
        }
        PermissionsCommand::Import {
            from,
            agent,
            dry_run,
            allow_outside,
        } => super::permissions_import::import(
            ctx,
            from.as_deref(),
            &agent,
            dry_run,
            allow_outside,
            out,
        ),
        PermissionsCommand::Explain {
            agent,
            within,
            tool,
            path,
            access,
            json,
        } => {
            let mut policy = load_policy(&ws.root, &agent)?;
            if let Some(parent) = &within {
                policy = policy.narrowed_by(&load_policy(&ws.root, parent)?);
            }
            let access = match access {
                AccessArg::Read => Access::Read,
                AccessArg::Write => Access::Write,
            };
            let (subject, resolved, decision) = match (&tool, &path) {
                (Some(tool), _) => (format!("call {tool}"), None, policy.check_tool(tool)),
                (None, Some(path)) => {
                    let (resolved, decision) = policy.check_path(path, access);
                    let verb = if access == Access::Read {
                        "read"
                    } else {
                        "write"
                    };
                    (format!("{verb} {path}"), resolved, decision)
                }
                (None, None) => bail!("give --tool or --path"),
            };
            let shell = match &resolved {
                Some(path) => {
                    let settings = nop::tools::SandboxSettings::from_config(ctx.config());
                    Some(sandbox::shell_line(&policy, &settings, path)?)
                }
                None => None,
            };
            if json {
                let value = serde_json::json!({
                    "agent": agent, "within": within, "subject": subject,
                    "resolved": resolved, "decision": decision, "shell": shell,
                });
                writeln!(out, "{}", serde_json::to_string_pretty(&value)?)?;
            } else {
                writeln!(
                    out,
                    "{}",
                    decision_line(&agent, within.as_deref(), &subject, &decision)
                )?;
                if let Some(resolved) = resolved {
                    writeln!(out, "path: {}", resolved.display())?;
                }
                if let Some(shell) = shell {
                    writeln!(out, "shell: {shell}")?;
                }
            }
            Ok(exit_code(decision.is_allowed()))
        }
    }
}

/// The decision of `nop permissions explain` as one sentence.
fn decision_line(agent: &str, within: Option<&str>, subject: &str, decision: &Decision) -> String {
    let who = match within {
        Some(parent) => format!("{agent} (called by {parent})"),
        None => agent.to_string(),
    };
    match decision {
        Decision::Allow { source } => format!("allow: {who} may {subject} ({source})"),
        Decision::Ask { source } => format!("ask: {who} needs approval to {subject} ({source})"),
        Decision::Deny { reason, source } => format!(
            "deny: {who} may not {subject}: {reason}{}",
            source
                .as_ref()
                .map(|s| format!(" ({s})"))
                .unwrap_or_default()
        ),
    }
}
