//! The repository's `.nop/` directory: finding it from any sub-directory, creating it
//! (`nop init`), and opening the configuration, agents and session store it holds.

mod templates;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};

use crate::config::{AgentsFile, ConfigError, ConfigInputs, Resolved};
use crate::protocol::timestamp_for_file;
use crate::session::{Store, write_atomic};

pub const NOP_DIR: &str = ".nop";
pub const CONFIG_FILE: &str = "config.yml";
pub const AGENTS_FILE: &str = "agents.yml";

#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error("no .nop/ directory in {} or any parent directory; run `nop init` in your repository first", start.display())]
    NotFound { start: PathBuf },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Session(#[from] crate::session::SessionError),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> WorkspaceError + '_ {
    move |source| WorkspaceError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A configuration file's text, or an error naming the byte where it stops being UTF-8.
fn text_of(path: &Path, bytes: Vec<u8>) -> Result<String, WorkspaceError> {
    crate::protocol::decode_utf8(bytes).map_err(|(pos, message)| {
        WorkspaceError::Config(ConfigError::Parse {
            path: path.to_path_buf(),
            pos: Some(pos),
            message,
        })
    })
}

/// A repository that has a `.nop/` directory.
#[derive(Debug, Clone)]
pub struct Workspace {
    /// The repository root: the directory that holds `.nop/`.
    pub root: PathBuf,
}

impl Workspace {
    /// Finds `.nop/config.yml` in `start` or the nearest parent that has one, as git finds
    /// `.git`. A `.nop/` without config.yml (such as a user's `~/.nop/` of personal skills) is
    /// passed over.
    pub fn discover(start: &Path) -> Result<Workspace, WorkspaceError> {
        let start = fs::canonicalize(start).map_err(io(start))?;
        start
            .ancestors()
            .find(|dir| dir.join(NOP_DIR).join(CONFIG_FILE).is_file())
            .map(|dir| Workspace {
                root: dir.to_path_buf(),
            })
            .ok_or(WorkspaceError::NotFound { start })
    }

    pub fn nop_dir(&self) -> PathBuf {
        self.root.join(NOP_DIR)
    }

    pub fn config_path(&self) -> PathBuf {
        self.nop_dir().join(CONFIG_FILE)
    }

    pub fn agents_path(&self) -> PathBuf {
        self.nop_dir().join(AGENTS_FILE)
    }

    pub fn sessions_dir(&self) -> PathBuf {
        self.nop_dir().join("sessions")
    }

    pub fn logs_dir(&self) -> PathBuf {
        self.nop_dir().join("logs")
    }

    pub fn system_log(&self) -> PathBuf {
        self.logs_dir().join("system.log")
    }

    /// Reads and validates `.nop/agents.yml` (a missing file means no agents defined).
    pub fn agents(&self) -> Result<AgentsFile, WorkspaceError> {
        let path = self.agents_path();
        match fs::read(&path) {
            Ok(bytes) => Ok(AgentsFile::parse(&path, &text_of(&path, bytes)?)?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(AgentsFile::default()),
            Err(e) => Err(io(&path)(e)),
        }
    }

    /// The effective configuration: config.yml, then the given agent's and session's overrides,
    /// the environment and the command line.
    pub fn config(
        &self,
        agent: Option<&str>,
        session: Option<&crate::protocol::SessionFile>,
        env: BTreeMap<String, String>,
        cli: Vec<(String, String, String)>,
    ) -> Result<Resolved, WorkspaceError> {
        let path = self.config_path();
        let text = text_of(&path, fs::read(&path).map_err(io(&path))?)?;
        let agents = self.agents()?;
        let agent_name = agent.or(session.map(|s| s.agent.as_str()));
        let agent_def = agent_name.and_then(|name| agents.get(name));
        let inputs = ConfigInputs {
            file: Some((&path, &text)),
            agent: agent_def.map(|a| (a.name.as_str(), &a.config)),
            session: session.map(|s| (s.session_id.as_str(), &s.config)),
            env,
            cli,
        };
        Ok(Resolved::from_inputs(&inputs)?)
    }

    pub fn store(&self, config: &crate::config::Config) -> Store {
        Store::new(self.sessions_dir(), config.lock_timeout())
    }
}

/// What `nop init` did with one file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum InitAction {
    Created,
    /// The user's file was left as it is.
    Kept,
    /// Replaced under `--force`; the user's version is at `backup`.
    Replaced {
        backup: PathBuf,
    },
}

/// Creates `.nop/` in `dir` from the templates this build carries (this repository's own
/// `.nop/`). Existing files are kept unless `force`, which backs each one up first.
pub fn init(
    dir: &Path,
    force: bool,
    now: DateTime<Utc>,
) -> Result<Vec<(PathBuf, InitAction)>, WorkspaceError> {
    let nop = dir.join(NOP_DIR);
    for sub in [
        "sessions",
        "logs",
        ".system/skills",
        ".system/tools",
        ".system/agents",
        ".permissions",
    ] {
        let path = nop.join(sub);
        fs::create_dir_all(&path).map_err(io(&path))?;
    }
    let mut report = Vec::new();
    for (relative, contents) in templates::FILES {
        let path = nop.join(relative);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(io(parent))?;
        }
        let action = if !path.exists() {
            crate::session::create_new_atomic(&path, contents.as_bytes(), false)?;
            InitAction::Created
        } else if fs::read(&path).map_err(io(&path))? == contents.as_bytes() || !force {
            InitAction::Kept
        } else {
            let backup = backup_path(&path, now);
            fs::copy(&path, &backup).map_err(io(&backup))?;
            write_atomic(&path, contents.as_bytes())?;
            InitAction::Replaced { backup }
        };
        report.push((path, action));
    }
    Ok(report)
}

fn backup_path(path: &Path, now: DateTime<Utc>) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!("{name}.bak-{}", timestamp_for_file(now)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file of this repository's `.nop/` (but local state) is a template, and no more.
    #[test]
    fn templates_are_exactly_the_repository_nop_dir() -> anyhow::Result<()> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(NOP_DIR);
        let mut on_disk = Vec::new();
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            for entry in fs::read_dir(&dir)? {
                let path = entry?.path();
                let relative = path.strip_prefix(&root)?.to_string_lossy().into_owned();
                if ["sessions", "logs", "state", "memory"].contains(&relative.as_str()) {
                    continue;
                }
                if path.is_dir() {
                    stack.push(path);
                } else {
                    on_disk.push(relative);
                }
            }
        }
        on_disk.sort();
        let mut listed: Vec<String> = templates::FILES
            .iter()
            .map(|(p, _)| p.to_string())
            .collect();
        listed.sort();
        assert_eq!(on_disk, listed, "update src/workspace/templates.rs");
        Ok(())
    }

    #[test]
    fn discovery_skips_a_nop_dir_without_config() -> anyhow::Result<()> {
        let home = tempfile::tempdir()?;
        fs::create_dir_all(home.path().join(".nop/skills"))?;
        let repo = home.path().join("repo");
        init(&repo, false, Utc::now())?;
        fs::create_dir_all(repo.join("src/deep"))?;
        let found = Workspace::discover(&repo.join("src/deep"))?;
        assert_eq!(found.root, fs::canonicalize(&repo)?);
        assert!(matches!(
            Workspace::discover(home.path()),
            Err(WorkspaceError::NotFound { .. })
        ));
        Ok(())
    }
}
