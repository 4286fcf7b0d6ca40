//! `nop instructions`: which instruction files a session started here would read, in the
//! prompt's order, and what became of each (used, cut, left out, refused and why).

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;

use nop::agent::instructions::{Origin, Status};

use super::context::Context;
use super::term::style::one_line;

/// `nop instructions [--agent NAME] [--json]`.
pub fn list(ctx: &Context, agent: &str, json: bool, out: &mut impl Write) -> Result<ExitCode> {
    let found = nop::agent::prompt::instructions_for(&ctx.ws, &ctx.cwd, agent, &[]);
    if json {
        let value = serde_json::json!({"files": found.files, "warnings": found.warnings});
        writeln!(out, "{}", serde_json::to_string_pretty(&value)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    if found.files.is_empty() {
        writeln!(out, "no instruction files")?;
    }
    for file in &found.files {
        let origin = match &file.origin {
            Origin::User => "yours".to_string(),
            Origin::Project => "repository".to_string(),
            Origin::Local => "personal".to_string(),
            Origin::Import { by } => format!("imported by {}", one_line(by)),
        };
        let status = match &file.status {
            Status::Used => format!("used, {} bytes", file.size),
            Status::Cut { kept } => format!("cut to {kept} of {} bytes", file.size),
            Status::LeftOut => format!("left out ({} bytes, over the limit)", file.size),
            Status::Refused { reason } => format!("not read: {}", one_line(reason)),
        };
        writeln!(out, "{}  ({origin}): {status}", one_line(&file.label))?;
    }
    for warning in &found.warnings {
        writeln!(out, "warning: {}", one_line(warning))?;
    }
    Ok(ExitCode::SUCCESS)
}
