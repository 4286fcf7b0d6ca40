//! What every command starts from, resolved in one place: the outside world and the global
//! options ([`Invocation`]), then the repository, its configuration (the environment and `--set`
//! always included), logging and the session store ([`Context`]). No command resolves the
//! configuration itself, so none can leave the environment or the command line out.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow};

use nop::config::{Config, LogLevel, Resolved};
use nop::permissions::Approver;
use nop::protocol::SessionFile;
use nop::session::Store;
use nop::workspace::Workspace;

use super::Cli;

/// Everything a command needs from the outside world, passed in so the engine never reads it.
pub struct Outside {
    pub cwd: PathBuf,
    pub env: BTreeMap<String, String>,
}

/// The command line's global options and the outside world, read once for every command.
#[derive(Clone)]
pub struct Invocation {
    /// Where the command was given (`-C` applied).
    pub cwd: PathBuf,
    pub env: BTreeMap<String, String>,
    /// Who runs it: `--user`, else NOP_USER, USER, LOGNAME, else "user".
    pub user: String,
    /// `--set` and `--log-level` as configuration-layer entries.
    settings: Vec<(String, String, String)>,
}

impl Invocation {
    pub fn new(cli: &Cli, outside: Outside) -> Result<Invocation> {
        let cwd = match &cli.directory {
            Some(dir) => outside.cwd.join(dir),
            None => outside.cwd,
        };
        let user = cli
            .user
            .clone()
            .or_else(|| outside.env.get("NOP_USER").cloned())
            .or_else(|| outside.env.get("USER").cloned())
            .or_else(|| outside.env.get("LOGNAME").cloned())
            .filter(|u| !u.trim().is_empty())
            .unwrap_or_else(|| "user".to_string());
        // What the user trusts is found from this environment, by the library too.
        nop::trust::use_env(&outside.env);
        Ok(Invocation {
            cwd,
            env: outside.env,
            user,
            settings: cli_settings(cli)?,
        })
    }

    /// The command-line layer of the configuration (`--set`, `--log-level`).
    pub fn settings(&self) -> &[(String, String, String)] {
        &self.settings
    }

    /// HOME as the environment gives it.
    pub fn home(&self) -> Option<&Path> {
        home_of(&self.env)
    }

    /// The repository the command was given in ([`workspace_at`]: `.nop/` created on first use),
    /// opened by [`Invocation::in_workspace`].
    pub fn open(self) -> Result<Context> {
        let ws = workspace_at(&self.cwd, &self.env)?;
        self.in_workspace(ws)
    }

    /// The configuration of `ws` (files, environment, command line), logging started with it,
    /// and its session store.
    pub fn in_workspace(self, ws: Workspace) -> Result<Context> {
        let resolved = ws.config(None, None, self.env.clone(), self.settings.clone())?;
        start_logging(&ws, &resolved);
        let store = ws.store(&resolved.config);
        Ok(Context {
            inv: self,
            ws,
            resolved,
            store,
        })
    }
}

/// What a command works with, resolved once ([`Invocation::open`]).
pub struct Context {
    inv: Invocation,
    pub ws: Workspace,
    /// The configuration without an agent's or a session's overrides.
    pub resolved: Resolved,
    pub store: Store,
}

impl std::ops::Deref for Context {
    type Target = Invocation;

    fn deref(&self) -> &Invocation {
        &self.inv
    }
}

impl Context {
    /// What the context was opened from, to open it again (after the configuration changed).
    pub fn into_invocation(self) -> Invocation {
        self.inv
    }

    pub fn config(&self) -> &Config {
        &self.resolved.config
    }

    /// The configuration with `agent`'s and `session`'s overrides (seed 002 §11.2 precedence:
    /// the environment and the command line still above them).
    pub fn config_for(
        &self,
        agent: Option<&str>,
        session: Option<&SessionFile>,
    ) -> Result<Resolved> {
        if agent.is_none() && session.is_none() {
            // What the context resolved as it opened: the same files, environment and flags.
            return Ok(self.resolved.clone());
        }
        Ok(self
            .ws
            .config(agent, session, self.env.clone(), self.settings.clone())?)
    }

    /// The session an id or unique prefix names: session.json as it is, its state (agent,
    /// configuration, status), not its sealed messages (a long conversation is not read).
    pub fn session_json(&self, prefix: &str) -> Result<SessionFile> {
        Ok(self
            .store
            .read_recent(&self.store.resolve(prefix)?)?
            .session)
    }

    /// The session `session` names (if any), and the configuration for `agent` and that session.
    pub fn open_session(
        &self,
        agent: Option<&str>,
        session: Option<&str>,
    ) -> Result<(Option<SessionFile>, Resolved)> {
        let session = session
            .map(|prefix| self.session_json(prefix))
            .transpose()?;
        let resolved = self.config_for(agent, session.as_ref())?;
        Ok((session, resolved))
    }

    /// A runtime on this repository with `config`, asking through `approver`.
    pub fn runtime(&self, config: Config, approver: Approver) -> nop::agent::Runtime {
        nop::agent::Runtime::new(
            self.ws.clone(),
            config,
            self.env.clone(),
            approver,
            self.user.clone(),
        )
    }
}

/// `--set key=value` and `--log-level` as configuration-layer entries.
fn cli_settings(cli: &Cli) -> Result<Vec<(String, String, String)>> {
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

/// HOME as the environment gives it, for finding the repository root.
fn home_of(env: &BTreeMap<String, String>) -> Option<&Path> {
    env.get("HOME").filter(|h| !h.is_empty()).map(Path::new)
}

/// The repository `cwd` is in (see `Workspace::discover`), with `.nop/` created for sessions and
/// logs if it has none; that is said once, when it happens.
fn workspace_at(cwd: &Path, env: &BTreeMap<String, String>) -> Result<Workspace> {
    let ws = Workspace::discover(cwd, home_of(env))?;
    if ws.create_nop_dir()? {
        let sessions = ws.sessions_dir();
        let at_cwd = std::fs::canonicalize(cwd).is_ok_and(|c| c == ws.root);
        let shown = if at_cwd {
            sessions.strip_prefix(&ws.root).unwrap_or(&sessions)
        } else {
            &sessions
        };
        super::term::style::say(&format!(
            "nop: using the built-in configuration; sessions go to {} (run `nop init` to customise)",
            shown.display()
        ));
    }
    Ok(ws)
}

fn start_logging(ws: &Workspace, resolved: &Resolved) {
    let level: LogLevel = resolved.config.log.level;
    nop::logging::init(Some((&ws.logs_dir(), &ws.sessions_dir())), level);
}
