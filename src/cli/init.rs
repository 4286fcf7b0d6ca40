//! `nop init`: the templates written into `.nop/`, and what was done with each file.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use chrono::Utc;

use nop::workspace::{self, InitAction, Workspace};

use super::context::{Outside, home_of, start_logging};

/// `nop init [--force]`.
pub fn init(
    force: bool,
    cwd: &Path,
    outside: Outside,
    cli_settings: Vec<(String, String, String)>,
    out: &mut impl Write,
) -> Result<ExitCode> {
    let home = home_of(&outside.env);
    let root = Workspace::discover(cwd, home)?.root;
    let report = workspace::init(&root, force, Utc::now())?;
    let ws = Workspace::discover(cwd, home)?;
    // The root is canonical; so are the paths shown relative to the working directory.
    let cwd = std::fs::canonicalize(cwd).unwrap_or(cwd.to_path_buf());
    let resolved = ws.config(None, None, outside.env, cli_settings)?;
    start_logging(&ws, &resolved);
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
