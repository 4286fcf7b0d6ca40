//! `nop sandbox check` and `nop sandbox run`: the shell's confinement on this machine, and a
//! command run under it.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Result, bail};

use super::args::SandboxCommand;
use super::context::Context;
use super::exit;
use nop::config::{NetworkMode, SandboxMode};
use nop::permissions::{Effect, Policy, ShellView, load_policy};
use nop::sandbox::Mechanism;
use nop::tools::SandboxSettings;
use nop::tools::confine::{self, Machine};
use nop::tools::shown;
use nop::workspace::Workspace;

pub fn sandbox(
    ws: &Workspace,
    config: &nop::config::Config,
    cwd: &Path,
    command: SandboxCommand,
    out: &mut impl Write,
) -> Result<ExitCode> {
    let settings = SandboxSettings::from_config(config);
    match command {
        SandboxCommand::Check { agent, json } => {
            let agent = agent.unwrap_or_else(|| config.agent.default.clone());
            let policy = load_policy(&ws.root, &agent)?;
            check(&policy, &agent, &settings, json, out)
        }
        SandboxCommand::Run { agent, command } => {
            let agent = agent.unwrap_or_else(|| config.agent.default.clone());
            let policy = load_policy(&ws.root, &agent)?;
            let Some((program, args)) = command.split_first() else {
                return Ok(ExitCode::from(exit::USAGE));
            };
            let mut confined =
                match confine::confine(&policy, &settings, program, args, Default::default()) {
                    Ok(c) => c,
                    Err(e) => {
                        eprintln!("error: {e}");
                        return Ok(ExitCode::from(exit::ERROR));
                    }
                };
            if let Some(note) = &confined.note {
                eprintln!("{note}");
            }
            let status = confined.command.current_dir(cwd).status();
            drop(confined.spec_fd);
            let status = status?;
            let code = status.code().unwrap_or_else(|| {
                use std::os::unix::process::ExitStatusExt as _;
                128 + status.signal().unwrap_or(0)
            });
            Ok(ExitCode::from(u8::try_from(code).unwrap_or(u8::MAX)))
        }
    }
}

/// The view of `policy` on this machine, as the shell tool would compute it (`None`: the shell
/// runs unconfined).
pub fn view_here(
    policy: &Policy,
    settings: &SandboxSettings,
) -> Result<(Machine, Option<ShellView>)> {
    let machine = Machine::probe(settings)?;
    if settings.mode == SandboxMode::Off {
        return Ok((machine, None));
    }
    let view = machine.mechanism.map(|mechanism| {
        nop::permissions::shell_view(policy, &confine::shell_options(mechanism, settings))
    });
    Ok((machine, view))
}

#[expect(clippy::too_many_lines, reason = "a debt: listed in AGENTS.md")]
fn check(
    policy: &Policy,
    agent: &str,
    settings: &SandboxSettings,
    json: bool,
    out: &mut impl Write,
) -> Result<ExitCode> {
    let (machine, mut view) = view_here(policy, settings)?;
    let (_, removed) = confine::filtered_env(settings, std::env::vars_os());
    let tracked = nop::checkpoint::tracked_but_denied(policy.root(), policy);
    if let (Some(view), false) = (view.as_mut(), tracked.is_empty()) {
        let mut shown: Vec<String> = tracked.iter().take(10).cloned().collect();
        if tracked.len() > 10 {
            shown.push(format!("and {} more", tracked.len() - 10));
        }
        view.limits.push(format!(
            "git tracks files the rules deny ({}): their content is in git history, which \
             shell commands can read (`git show`); a deny rule cannot hide it",
            shown.join(", ")
        ));
    }
    let mechanism = match settings.mode {
        SandboxMode::Off => "off: shell commands run with your rights (sandbox: off)".to_string(),
        _ => machine.describe(),
    };
    let refused = machine.refusal(settings);
    let network = match (settings.network, machine.mechanism) {
        (NetworkMode::Allow, _) => "allowed",
        (NetworkMode::Deny, Some(Mechanism::Namespaces)) => {
            "denied: a network namespace with loopback only"
        }
        (NetworkMode::Deny, _) => match nop::sandbox::abstract_socket_shortfall() {
            None => {
                "denied: TCP connect and bind, and abstract UNIX sockets outside the sandbox, \
                 refused by Landlock (UDP is not)"
            }
            Some(_) => {
                "denied: TCP connect and bind refused by Landlock (UDP is not; nor are abstract \
                 UNIX sockets outside the sandbox: that needs Landlock ABI 6)"
            }
        },
    };
    let processes = match (settings.mode, machine.mechanism) {
        (SandboxMode::Off, _) | (_, None | Some(Mechanism::Unconfined)) => {
            "a subreaper: everything a command starts is killed when it ends"
        }
        (_, Some(Mechanism::Namespaces)) => {
            "a PID namespace: everything a command starts ends with it"
        }
        (_, Some(Mechanism::Landlock)) => {
            "a subreaper: everything a command starts is killed when it ends"
        }
    };
    if json {
        let value = serde_json::json!({
            "agent": agent,
            "sandbox": settings.mode,
            "mechanism": machine.mechanism,
            "description": mechanism,
            "landlock_abi": machine.landlock.abi,
            "helper": machine.helper_origin,
            "namespaces": machine.namespaces,
            "network": network,
            "processes": processes,
            "removed_env": removed,
            "writable_roots": view.as_ref().map(|v| &v.writable_roots),
            "protections": view.as_ref().map(|v| &v.protections),
            "limits": view.as_ref().map(|v| &v.limits),
            "refused": refused,
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&value)?)?;
        return Ok(super::exit_code(refused.is_none()));
    }
    writeln!(out, "agent:       {agent}")?;
    writeln!(out, "mechanism:   {mechanism}")?;
    if let Some(helper) = &machine.helper_origin {
        writeln!(
            out,
            "helper:      {} (run from a sealed copy)",
            helper.display()
        )?;
    }
    if let Some(why) = &refused {
        writeln!(out, "refused:     {why}")?;
    }
    let root = policy.root();
    if let Some(view) = &view {
        let roots: Vec<String> = view
            .writable_roots
            .iter()
            .map(|r| r.display().to_string())
            .collect();
        writeln!(out, "writable:    {}", roots.join(", "))?;
    }
    writeln!(out, "network:     {network}")?;
    writeln!(out, "processes:   {processes}")?;
    writeln!(
        out,
        "environment: {}",
        if removed.is_empty() {
            "nothing removed here".to_string()
        } else {
            format!("removed {}", removed.join(", "))
        }
    )?;
    if let Some(view) = &view {
        if !view.protections.is_empty() {
            writeln!(out, "protected:")?;
            let width = view
                .protections
                .iter()
                .map(|p| shown(root, &p.path).chars().count())
                .max()
                .unwrap_or(0);
            for p in &view.protections {
                writeln!(
                    out,
                    "  {:<9}  {:<width$}  {}",
                    p.effect.as_str(),
                    shown(root, &p.path),
                    p.reason
                )?;
            }
        }
        if !view.limits.is_empty() {
            writeln!(out, "limits:")?;
            for limit in &view.limits {
                writeln!(out, "  - {limit}")?;
            }
        }
    }
    Ok(super::exit_code(refused.is_none()))
}

/// What the shell may do at `path` (canonical) under `policy` here, for `permissions explain`.
pub fn shell_line(policy: &Policy, settings: &SandboxSettings, path: &Path) -> Result<String> {
    let (_, view) = view_here(policy, settings)?;
    Ok(match view {
        None => "unconfined (nothing is enforced for shell commands here)".to_string(),
        Some(view) => {
            let mut line = view.describe(path);
            if view.spec.mechanism == Mechanism::Landlock
                && view
                    .protections
                    .iter()
                    .any(|p| p.effect != Effect::Pinned && p.path.starts_with(path))
            {
                line.push_str("; Landlock alone cannot add or remove entries here");
            }
            line
        }
    })
}

/// `nop sandbox …` as the command line gives it: the agent's configuration resolved first.
pub fn command(ctx: &Context, command: SandboxCommand, out: &mut impl Write) -> Result<ExitCode> {
    let ws = &ctx.ws;
    let agent = match &command {
        SandboxCommand::Check { agent, .. } | SandboxCommand::Run { agent, .. } => agent.clone(),
    };
    if let Some(name) = &agent
        && ws.agents()?.get(name).is_none()
    {
        bail!("no agent `{name}` in {}", ws.agents_path().display());
    }
    let resolved = ctx.config_for(agent.as_deref(), None)?;
    sandbox(ws, &resolved.config, &ctx.cwd, command, out)
}
