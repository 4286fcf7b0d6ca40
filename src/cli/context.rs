//! What every command starts from: the outside world (working directory, environment), the
//! global options, the repository, its configuration and logging.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Result, anyhow};

use nop::config::{LogLevel, Resolved};
use nop::workspace::Workspace;

use super::Cli;

/// Everything a command needs from the outside world, passed in so the engine never reads it.
pub struct Outside {
    pub cwd: PathBuf,
    pub env: BTreeMap<String, String>,
}

/// `--set key=value` and `--log-level` as configuration-layer entries.
pub fn cli_settings(cli: &Cli) -> Result<Vec<(String, String, String)>> {
    let mut settings = Vec::new();
    for item in &cli.set {
        let (key, value) = item
            .split_once('=')
            .ok_or_else(|| anyhow!("--set {item}: expected KEY=VALUE"))?;
        settings.push((
            "--set".to_string(),
            key.trim().to_string(),
            value.to_string(),
        ));
    }
    if let Some(level) = &cli.log_level {
        settings.push((
            "--log-level".to_string(),
            "log.level".to_string(),
            level.clone(),
        ));
    }
    Ok(settings)
}

/// What a command that works on a session (or starts one) needs.
pub struct Opened {
    pub ws: Workspace,
    /// The session `session` named, read (its id prefix resolved).
    pub session: Option<nop::protocol::SessionFile>,
    /// The configuration for the agent (or the session's agent), the session's own settings
    /// included.
    pub resolved: Resolved,
}

/// HOME as the environment gives it, for finding the repository root.
pub fn home_of(env: &BTreeMap<String, String>) -> Option<&std::path::Path> {
    env.get("HOME")
        .filter(|h| !h.is_empty())
        .map(std::path::Path::new)
}

/// The repository `cwd` is in (see `Workspace::discover`), with `.nop/` created for sessions and
/// logs if it has none; that is said once, when it happens.
pub fn workspace_at(cwd: &std::path::Path, env: &BTreeMap<String, String>) -> Result<Workspace> {
    let ws = Workspace::discover(cwd, home_of(env))?;
    if ws.create_nop_dir()? {
        let sessions = ws.sessions_dir();
        let at_cwd = std::fs::canonicalize(cwd).is_ok_and(|c| c == ws.root);
        let shown = if at_cwd {
            sessions.strip_prefix(&ws.root).unwrap_or(&sessions)
        } else {
            &sessions
        };
        eprintln!(
            "nop: using the built-in configuration; sessions go to {} (run `nop init` to customise)",
            shown.display()
        );
    }
    Ok(ws)
}

/// Finds the workspace above `cwd`, starts logging, resolves the session prefix `session`, and
/// the configuration for `agent` and that session (seed 002 §11.2 precedence).
pub fn open(
    cwd: &std::path::Path,
    env: &std::collections::BTreeMap<String, String>,
    settings: Vec<(String, String, String)>,
    agent: Option<&str>,
    session: Option<&str>,
) -> Result<Opened> {
    let ws = workspace_at(cwd, env)?;
    let base = ws.config(None, None, env.clone(), settings.clone())?;
    start_logging(&ws, &base);
    let store = ws.store(&base.config);
    let session = match session {
        Some(prefix) => Some(store.read_session(&store.resolve(prefix)?)?),
        None => None,
    };
    let resolved = ws.config(agent, session.as_ref(), env.clone(), settings)?;
    Ok(Opened {
        ws,
        session,
        resolved,
    })
}

pub fn start_logging(ws: &Workspace, resolved: &Resolved) {
    let level: LogLevel = resolved.config.log.level;
    nop::logging::init(Some((&ws.logs_dir(), &ws.sessions_dir())), level);
}
