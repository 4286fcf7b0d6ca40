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
    // What init wrote is the user's own: trusted, unless it kept a file of someone else's
    // (a cloned repository's) that differs from what it would have written.
    let nop_dir = root.join(workspace::NOP_DIR);
    let foreign = report.iter().any(|(path, action)| {
        *action == InitAction::Kept
            && path
                .strip_prefix(&nop_dir)
                .ok()
                .and_then(|rel| nop::templates::get(&rel.to_string_lossy()))
                .is_none_or(|text| std::fs::read(path).ok().as_deref() != Some(text.as_bytes()))
    });
    if !foreign && let Err(e) = nop::trust::accept_workspace(&inv.env, &root) {
        writeln!(out, "warning: {e}")?;
    }
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
