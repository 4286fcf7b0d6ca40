//! `nop init`: the templates written into `.nop/`, and what was done with each file.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use chrono::Utc;

use nop::workspace::{self, InitAction, Workspace};

use super::context::Invocation;

/// `nop init [--force]`.
/// The repository's configuration is resolved after the files are written, so that it is theirs.
pub fn init(inv: Invocation, force: bool, out: &mut impl Write) -> Result<ExitCode> {
    let root = Workspace::discover(&inv.cwd, inv.home())?.root;
    let report = workspace::init(&root, force, Utc::now())?;
    let ws = Workspace::discover(&inv.cwd, inv.home())?;
    // The root is canonical; so are the paths shown relative to the working directory.
    let cwd = std::fs::canonicalize(&inv.cwd).unwrap_or(inv.cwd.clone());
    let ctx = inv.in_workspace(ws)?;
    let ws = &ctx.ws;
    for (path, action) in &report {
        let shown = path.strip_prefix(&cwd).unwrap_or(path).display();
        match action {
            InitAction::Created => writeln!(out, "created  {shown}")?,
            InitAction::Kept => writeln!(out, "kept     {shown}")?,
            InitAction::Replaced { backup } => writeln!(
                out,
                "replaced {shown} (your version: {})",
                backup.strip_prefix(&cwd).unwrap_or(backup).display()
            )?,
        }
    }
    let kept_differing = report.iter().any(|(_, a)| *a == InitAction::Kept) && !force;
    tracing::info!(op = "init", result = "ok", root = %ws.root.display(), "initialised .nop/");
    if kept_differing {
        writeln!(
            out,
            "existing files were kept; `nop init --force` replaces them and keeps backups"
        )?;
    }
    Ok(ExitCode::SUCCESS)
}
