//! `nop config show` (every key, its value and origin) and `nop config set KEY VALUE [--user]`:
//! one key written to the repository's `.nop/config.yml` or to the user's
//! `~/.config/nop/config.yml`, the rest of the file kept.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Result, anyhow, bail};

use nop::config::{ConfigInputs, Origin, Resolved, read_config_text, set_key, user_config_path};
use nop::workspace::Workspace;

use super::context::{home_of, start_logging, workspace_at};
use super::render;

/// What `--user` of `nop config set` stores. The flag shares its id with the global
/// `--user NAME` (clap would not have two `--user`s on one command), so it stores a value no
/// person is called, and a name given to the global flag is told apart from it.
pub const USER_FILE: &str = "\u{0}user-file";

/// `nop config set`.
pub fn set(
    cwd: &Path,
    env: &BTreeMap<String, String>,
    cli_settings: Vec<(String, String, String)>,
    key: &str,
    value: &str,
    user_file: bool,
    out: &mut impl Write,
) -> Result<ExitCode> {
    let ws = Workspace::discover(cwd, home_of(env));
    let user_path = user_config_path(env);
    let path: PathBuf = if user_file {
        user_path.clone().ok_or_else(|| {
            anyhow!(
                "no place for the user configuration: set HOME (or XDG_CONFIG_HOME) to an \
                 absolute path"
            )
        })?
    } else {
        ws.as_ref().map_err(|e| anyhow!("{e}"))?.config_path()
    };
    let origin = if user_file {
        Origin::User(path.clone())
    } else {
        Origin::File(path.clone())
    };
    let old = read_config_text(&path)?;
    let edit = set_key(&origin, old.as_deref(), key, value)?;

    // In a repository, the value must also leave its whole configuration loadable (a wait
    // in one file and its bound in the other), unless it did not load before either.
    let here = match &ws {
        Ok(ws) => {
            let repo_path = ws.config_path();
            let user_text = match &user_path {
                Some(p) => read_config_text(p)?,
                None => None,
            };
            let repo_text = read_config_text(&repo_path)?;
            let resolve = |user: Option<&str>, repo: Option<&str>| {
                let inputs = ConfigInputs {
                    file: repo.map(|text| (repo_path.as_path(), text)),
                    env: env.clone(),
                    cli: cli_settings.clone(),
                    ..Default::default()
                };
                Resolved::with_user_file(&inputs, user_path.as_deref().zip(user))
            };
            let before = resolve(user_text.as_deref(), repo_text.as_deref());
            let after = if user_file {
                resolve(Some(&edit.text), repo_text.as_deref())
            } else {
                resolve(user_text.as_deref(), Some(&edit.text))
            };
            match (before, after) {
                (Ok(_), Err(e)) => bail!(
                    "{} was not changed: with {} = {value} the configuration of {} would not load: {e}",
                    path.display(),
                    edit.key,
                    ws.root.display()
                ),
                (_, after) => Some(after),
            }
        }
        Err(_) => None,
    };

    match &ws {
        // A repository used without `nop init` gets its `.nop/` as a first run makes it
        // (sessions, logs and the .gitignore that keeps them out of git).
        Ok(ws) if !user_file => {
            ws.create_nop_dir()?;
        }
        _ => {}
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| anyhow!("{}: {e}", dir.display()))?;
    }
    nop::session::replace_file(&path, edit.text.as_bytes())?;
    let shown = match &edit.value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    writeln!(out, "{} = {shown} in {}", edit.key, path.display())?;
    if !edit.comments_kept {
        eprintln!(
            "warning: {} was written anew from its values (its layout is more than `config set` \
             edits in place), so its comments are gone",
            path.display()
        );
    }
    match here {
        Some(Ok(resolved)) => {
            // Where the value does not take effect here, say what overrides it.
            if let Some((_, from)) = resolved.entries.get(&edit.key)
                && *from != origin
            {
                eprintln!(
                    "note: here {} still comes from {from}, which takes precedence over {}",
                    edit.key,
                    path.display()
                );
            }
        }
        Some(Err(e)) => eprintln!("warning: the configuration here does not load: {e}"),
        None => {}
    }
    Ok(ExitCode::SUCCESS)
}

/// `nop config show`.
pub fn show(
    json: bool,
    session: Option<String>,
    agent: Option<String>,
    cwd: &Path,
    outside: super::context::Outside,
    cli_settings: Vec<(String, String, String)>,
    out: &mut impl Write,
) -> Result<ExitCode> {
    let ws = workspace_at(cwd, &outside.env)?;
    let base = ws.config(None, None, outside.env.clone(), cli_settings.clone())?;
    start_logging(&ws, &base);
    let session = match session {
        Some(prefix) => {
            let store = ws.store(&base.config);
            let id = store.resolve(&prefix)?;
            Some(store.read_session(&id)?)
        }
        None => None,
    };
    if let Some(name) = &agent
        && ws.agents()?.get(name).is_none()
    {
        bail!("no agent `{name}` in {}", ws.agents_path().display());
    }
    let resolved = ws.config(
        agent.as_deref(),
        session.as_ref(),
        outside.env,
        cli_settings,
    )?;
    render::config(out, &resolved, json)?;
    Ok(ExitCode::SUCCESS)
}
