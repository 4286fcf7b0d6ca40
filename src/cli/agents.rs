//! `nop agents list` and `nop plugins list`.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;

use super::context::Context;

use super::{exit_code, render};

/// `nop agents list`: each agent with its priority as it stands now for `user`.
pub fn agents(ctx: &Context, json: bool, out: &mut impl Write) -> Result<ExitCode> {
    let agents = ctx.ws.agents()?;
    let minute = {
        use chrono::Timelike;
        let now = chrono::Local::now();
        now.hour() * 60 + now.minute()
    };
    render::agents(out, &agents, &ctx.user, minute, json)?;
    Ok(ExitCode::SUCCESS)
}

/// `nop plugins list`: each plugin's state, source file and tools (MCP servers started and
/// stopped), in order of precedence.
pub fn plugins(ctx: &Context, json: bool, out: &mut impl Write) -> Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let (_, statuses) = rt.block_on(nop::plugins::load_all(
        &ctx.ws.root,
        &nop::tools::SandboxSettings::from_config(ctx.config()),
        &ctx.env,
    ));
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&statuses)?)?;
    } else if statuses.is_empty() {
        writeln!(
            out,
            "no plugins (add one under .nop/plugins/<name>/config.yml)"
        )?;
    } else {
        for s in &statuses {
            writeln!(out, "{:<16} {}  ({})", s.name, s.state, s.source)?;
            for note in &s.notes {
                writeln!(out, "  note: {note}")?;
            }
            for t in &s.tools {
                writeln!(out, "  {t}")?;
            }
        }
    }
    Ok(exit_code(!statuses.iter().any(|s| s.failed())))
}
