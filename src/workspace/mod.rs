//! The repository's `.nop/` directory: finding the repository root from any sub-directory,
//! creating `.nop/` (on first use, or in full by `nop init`), and opening the configuration,
//! agents and session store it holds. A file `nop init` would install but that is missing reads
//! as its built-in template, so a repository works without `nop init`.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};

use crate::config::{AgentsFile, ConfigError, ConfigInputs, Resolved};
use crate::protocol::timestamp_for_file;
use crate::session::{Store, write_atomic};
use crate::templates;

mod git_exclude;

pub const NOP_DIR: &str = ".nop";
pub const CONFIG_FILE: &str = "config.yml";
pub const AGENTS_FILE: &str = "agents.yml";

#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
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

/// `agents.yml` parsed, once per process for the same text: a run asks for it several times
/// (the configuration, the admission, the system prompt), and the file rarely changes meanwhile.
fn parsed_agents(path: &Path, text: String) -> Result<AgentsFile, WorkspaceError> {
    type Parsed = (PathBuf, String, AgentsFile);
    static LAST: std::sync::Mutex<Option<Parsed>> = std::sync::Mutex::new(None);
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((p, t, agents)) = last.as_ref()
        && p == path
        && *t == text
    {
        return Ok(agents.clone());
    }
    let agents = AgentsFile::parse(path, &text)?;
    *last = Some((path.to_path_buf(), text, agents.clone()));
    Ok(agents)
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

/// A repository nop works in; its `.nop/` may not exist yet (see [`Workspace::create_nop_dir`]).
#[derive(Debug, Clone)]
pub struct Workspace {
    /// The repository root: the directory that holds (or will hold) `.nop/`.
    pub root: PathBuf,
    /// Directories below the repository's top whose `.nop/config.yml` would have made them the
    /// root, passed over because the user has not trusted them (`nop trust`).
    pub set_aside: Vec<PathBuf>,
}

impl Workspace {
    /// The repository root for a command run in `start`:
    /// 1. the nearest directory, from `start` upwards, that has `.nop/config.yml` — inside a git
    ///    repository only up to its root; outside one, not above `home`;
    /// 2. else the root of the git repository (the nearest directory with `.git`, a directory or
    ///    a file);
    /// 3. else `start`.
    ///
    /// The `.nop/` of `home` counts only when `start` is `home` itself: `nop init` run in `~` does
    /// not make `~` the root of everything beneath it. A `.nop/` without config.yml (such as a
    /// user's `~/.nop/` of personal skills, or one made by a first run) never marks a root.
    ///
    /// A `.nop/` below the repository's top (below the outermost one, outside git) marks a root
    /// only when the user trusts it (`crate::trust`, from the process's record): the agent can
    /// write such a directory, and a root of its own making would take the repository's rules
    /// (its deny rules too) away from what lies under it. One not trusted is named in
    /// `set_aside` and the search goes on upwards.
    pub fn discover(start: &Path, home: Option<&Path>) -> Result<Workspace, WorkspaceError> {
        let start = fs::canonicalize(start).map_err(io(start))?;
        let home = home.map(|h| fs::canonicalize(h).unwrap_or_else(|_| h.to_path_buf()));
        let git_root = start.ancestors().find(|dir| dir.join(".git").exists());
        let mut candidates: Vec<&Path> = Vec::new();
        for dir in start.ancestors() {
            let home_above = dir != start && home.as_deref() == Some(dir);
            if home_above && git_root.is_none() {
                break;
            }
            if !home_above && dir.join(NOP_DIR).join(CONFIG_FILE).is_file() {
                candidates.push(dir);
            }
            if Some(dir) == git_root {
                break;
            }
        }
        let outermost = git_root.or(candidates.last().copied());
        let mut set_aside = Vec::new();
        for dir in candidates {
            let trusted = |outer: &Path| crate::trust::nested_workspace_check(dir, outer).is_ok();
            if Some(dir) == outermost || outermost.is_some_and(trusted) {
                return Ok(Workspace {
                    root: dir.to_path_buf(),
                    set_aside,
                });
            }
            set_aside.push(dir.to_path_buf());
        }
        Ok(Workspace {
            root: git_root.map_or(start.clone(), Path::to_path_buf),
            set_aside,
        })
    }

    /// Creates `.nop/` for a repository used without `nop init`: only what nop writes there
    /// (`sessions/`, `logs/`) and the `.gitignore` that keeps them out of git; configuration,
    /// agents, permissions and prompts stay built in. Returns whether it created `.nop/` (false
    /// when it exists). Built under a temporary name and renamed into place, so a failure never
    /// leaves half of it, and of two nop processes starting at once only one creates it.
    pub fn create_nop_dir(&self) -> Result<bool, WorkspaceError> {
        let nop = self.nop_dir();
        if fs::symlink_metadata(&nop).is_ok() {
            return Ok(false);
        }
        let temp = self.root.join(format!(
            ".nop.new-{}-{}",
            std::process::id(),
            Utc::now().timestamp_nanos_opt().unwrap_or_default()
        ));
        // In a git repository what nop writes on its own goes into `info/exclude` (which the
        // agent cannot write), so `.nop/` never shows in `git status`; elsewhere a
        // `.nop/.gitignore` does it for a repository made later.
        let excluded = match git_exclude::ignore_local_state(&self.root) {
            Ok(excluded) => excluded,
            Err(e) => {
                tracing::warn!(
                    op = "init",
                    result = "partial",
                    "could not keep .nop/ out of git status: {e}"
                );
                false
            }
        };
        let built = (|| {
            fs::create_dir(&temp).map_err(io(&temp))?;
            for sub in ["sessions", "logs"] {
                let path = temp.join(sub);
                fs::create_dir(&path).map_err(io(&path))?;
            }
            if !excluded {
                let gitignore = templates::get(".gitignore").unwrap_or_default();
                crate::session::create_new_atomic(
                    &temp.join(".gitignore"),
                    gitignore.as_bytes(),
                    false,
                )?;
            }
            Ok::<(), WorkspaceError>(())
        })();
        if let Err(e) = built {
            let _ = fs::remove_dir_all(&temp);
            return Err(e);
        }
        match fs::rename(&temp, &nop) {
            Ok(()) => {
                crate::session::sync_dir(&self.root)?;
                Ok(true)
            }
            Err(e) => {
                let _ = fs::remove_dir_all(&temp);
                if nop.is_dir() {
                    Ok(false) // another nop process made it first
                } else {
                    Err(io(&nop)(e))
                }
            }
        }
    }

    /// The text of `.nop/<relative>`, or its built-in template when the file does not exist
    /// (a file that exists but cannot be read stays an error).
    pub fn read_file(&self, relative: &str) -> std::io::Result<String> {
        match fs::read_to_string(self.nop_dir().join(relative)) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                templates::get(relative).map(str::to_string).ok_or(e)
            }
            read => read,
        }
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

    /// Reads and validates `.nop/agents.yml`; without the file, the built-in one.
    pub fn agents(&self) -> Result<AgentsFile, WorkspaceError> {
        let path = self.agents_path();
        let text = match fs::read(&path) {
            Ok(bytes) => text_of(&path, bytes)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                templates::get(AGENTS_FILE).unwrap_or_default().to_string()
            }
            Err(e) => return Err(io(&path)(e)),
        };
        parsed_agents(&path, text)
    }

    /// The effective configuration: config.yml, then the given agent's and session's overrides,
    /// the environment and the command line. Without config.yml, the defaults (which are what
    /// the built-in config.yml says; a test holds them equal).
    pub fn config(
        &self,
        agent: Option<&str>,
        session: Option<&crate::protocol::SessionFile>,
        env: BTreeMap<String, String>,
        cli: Vec<(String, String, String)>,
    ) -> Result<Resolved, WorkspaceError> {
        let path = self.config_path();
        let text = match fs::read(&path) {
            Ok(bytes) => Some(text_of(&path, bytes)?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(io(&path)(e)),
        };
        let agents = self.agents()?;
        let agent_name = agent.or(session.map(|s| s.agent.as_str()));
        let agent_def = agent_name.and_then(|name| agents.get(name));
        let store = crate::trust::Store::from_env(&env);
        let untrusted = crate::trust::workspace_check_in(&self.root, store.as_ref())
            .err()
            .map(|_| "this .nop/ is not trusted (`nop trust` shows why)".to_string());
        let inputs = ConfigInputs {
            file: text.as_deref().map(|text| (path.as_path(), text)),
            agent: agent_def.map(|a| (a.name.as_str(), &a.config)),
            session: session.map(|s| (s.session_id.as_str(), &s.config)),
            env,
            cli,
            untrusted,
        };
        let mut resolved = Resolved::from_inputs(&inputs)?;
        resolved.config.hooks.trust_dir = store.map(|s| s.dir().to_path_buf());
        // Claude Code's hooks, as its users wrote them; a file that cannot be used is a warning.
        let (claude, warnings) = crate::config::claude_hooks(&self.root, &inputs.env);
        resolved.config.hooks.claude = claude;
        resolved.config.hooks.warnings = warnings;
        Ok(resolved)
    }

    pub fn store(&self, config: &crate::config::Config) -> Store {
        let store = Store::new(self.sessions_dir(), config.lock_timeout())
            .with_seal_bytes(config.seal_bytes());
        match self.checkpoints(config) {
            Some(c) => store.with_checkpointer(std::sync::Arc::new(c)),
            None => store,
        }
    }

    /// The file checkpoint store of this root, unless `checkpoints.enabled` is off.
    pub fn checkpoints(
        &self,
        config: &crate::config::Config,
    ) -> Option<crate::checkpoint::Checkpoints> {
        config.checkpoints.enabled.then(|| {
            crate::checkpoint::Checkpoints::new(
                &self.root,
                &self.nop_dir(),
                config.checkpoints.max_file_mb,
            )
        })
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
    // Sessions, logs and checkpoints stay out of `git status` whatever is committed of the rest.
    if let Err(e) = git_exclude::ignore_local_state(dir) {
        tracing::warn!(
            op = "init",
            result = "partial",
            "could not keep .nop/'s working state out of git status: {e}"
        );
    }
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
        assert_eq!(on_disk, listed, "update src/templates.rs");
        Ok(())
    }

    fn initialised(dir: &Path) -> anyhow::Result<PathBuf> {
        init(dir, false, Utc::now())?;
        Ok(fs::canonicalize(dir)?)
    }

    #[test]
    fn discovery_skips_a_nop_dir_without_config() -> anyhow::Result<()> {
        let home = tempfile::tempdir()?;
        fs::create_dir_all(home.path().join(".nop/skills"))?;
        let repo = home.path().join("repo");
        let root = initialised(&repo)?;
        fs::create_dir_all(repo.join("src/deep"))?;
        let found = Workspace::discover(&repo.join("src/deep"), None)?;
        assert_eq!(found.root, root);
        // No config.yml anywhere up: the working directory itself.
        let found = Workspace::discover(home.path(), None)?;
        assert_eq!(found.root, fs::canonicalize(home.path())?);
        Ok(())
    }

    /// `nop init` in `~`, then a git repository beneath it: the repository is the root, from
    /// its root and from deep inside it, and HOME's `.nop/` is passed over even when HOME is not
    /// known (the git root bounds the search).
    #[test]
    fn a_git_repository_below_an_initialised_home_is_its_own_root() -> anyhow::Result<()> {
        let home = tempfile::tempdir()?;
        let home_root = initialised(home.path())?;
        let project = home.path().join("src/project");
        fs::create_dir_all(project.join(".git"))?;
        fs::create_dir_all(project.join("lib/deep"))?;
        let project = fs::canonicalize(&project)?;
        for at in [project.clone(), project.join("lib/deep")] {
            for known in [Some(home.path()), None] {
                assert_eq!(Workspace::discover(&at, known)?.root, project, "{at:?}");
            }
        }
        // HOME itself is still a root when nop runs there.
        assert_eq!(
            Workspace::discover(home.path(), Some(home.path()))?.root,
            home_root
        );
        // A git worktree or submodule has a `.git` file: the same rule.
        let worktree = home.path().join("src/worktree");
        fs::create_dir_all(worktree.join("sub"))?;
        fs::write(worktree.join(".git"), "gitdir: /elsewhere\n")?;
        assert_eq!(
            Workspace::discover(&worktree.join("sub"), Some(home.path()))?.root,
            fs::canonicalize(&worktree)?
        );
        Ok(())
    }

    /// Inside a git repository, an initialised directory between the working directory and the
    /// git root is the root; outside git, the nearest initialised directory below HOME, else the
    /// working directory — never HOME above it.
    #[test]
    fn initialised_directories_inside_the_repository_and_outside_git() -> anyhow::Result<()> {
        let home = tempfile::tempdir()?;
        initialised(home.path())?;
        let repo = home.path().join("repo");
        fs::create_dir_all(repo.join(".git"))?;
        let nested = initialised(&repo.join("packages/web"))?;
        fs::create_dir_all(nested.join("src"))?;
        // Not before the user trusts it: anyone who can write the repository could make one.
        let found = Workspace::discover(&nested.join("src"), Some(home.path()))?;
        assert_eq!(
            (found.root, found.set_aside),
            (fs::canonicalize(&repo)?, vec![nested.clone()])
        );
        crate::trust::accept_workspace(&crate::trust::process_env(), &nested)?;
        assert_eq!(
            Workspace::discover(&nested.join("src"), Some(home.path()))?.root,
            nested
        );

        let notes = initialised(&home.path().join("notes"))?;
        fs::create_dir_all(notes.join("drafts"))?;
        assert_eq!(
            Workspace::discover(&notes.join("drafts"), Some(home.path()))?.root,
            notes
        );
        let downloads = home.path().join("downloads");
        fs::create_dir_all(&downloads)?;
        assert_eq!(
            Workspace::discover(&downloads, Some(home.path()))?.root,
            fs::canonicalize(&downloads)?
        );
        Ok(())
    }

    /// The built-in config.yml says exactly the defaults, so a repository without one is
    /// configured as an initialised one.
    #[test]
    fn the_built_in_config_file_is_the_defaults() -> anyhow::Result<()> {
        let path = Path::new(".nop/config.yml");
        let text = templates::get(CONFIG_FILE).unwrap_or_default();
        let with_file = Resolved::from_inputs(&ConfigInputs {
            file: Some((path, text)),
            agent: None,
            session: None,
            env: BTreeMap::new(),
            cli: Vec::new(),
            untrusted: None,
        })?;
        let without = Resolved::from_inputs(&ConfigInputs {
            file: None,
            agent: None,
            session: None,
            env: BTreeMap::new(),
            cli: Vec::new(),
            untrusted: None,
        })?;
        assert_eq!(
            serde_json::to_value(&with_file.config)?,
            serde_json::to_value(&without.config)?
        );
        Ok(())
    }

    #[test]
    fn missing_files_read_as_their_templates_and_broken_ones_stay_errors() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let ws = Workspace::discover(dir.path(), None)?;
        assert!(ws.create_nop_dir()?);
        assert!(!ws.create_nop_dir()?, "a second time creates nothing");
        let mut entries: Vec<String> = fs::read_dir(ws.nop_dir())?
            .map(|e| Ok(e?.file_name().to_string_lossy().into_owned()))
            .collect::<anyhow::Result<_>>()?;
        entries.sort();
        assert_eq!(entries, [".gitignore", "logs", "sessions"]);
        let leftovers = fs::read_dir(&ws.root)?
            .filter_map(Result::ok)
            .filter(|e| e.file_name() != NOP_DIR)
            .count();
        assert_eq!(leftovers, 0, "no temporary directory left beside .nop/");

        assert_eq!(
            ws.read_file(".system/agents/coder.md")?,
            templates::get(".system/agents/coder.md").unwrap_or_default()
        );
        assert!(ws.read_file(".system/agents/nobody.md").is_err());
        assert!(ws.agents()?.get("retry-advisor").is_some());
        assert_eq!(
            ws.config(None, None, BTreeMap::new(), Vec::new())?
                .config
                .agent
                .default,
            "coder"
        );

        fs::write(ws.agents_path(), "agents: [\n")?;
        assert!(ws.agents().is_err(), "a broken agents.yml is an error");
        fs::write(ws.config_path(), "log: [\n")?;
        assert!(ws.config(None, None, BTreeMap::new(), Vec::new()).is_err());
        Ok(())
    }
}
