//! `nop config show` (every key, its value and origin) and `nop config set KEY VALUE [--user]`:
//! one key written to the repository's `.nop/config.yml` or to the user's
//! `~/.config/nop/config.yml`, the rest of the file kept.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Result, anyhow, bail};

use nop::config::{ConfigInputs, Origin, Resolved, read_config_text, set_key, user_config_path};
use nop::workspace::Workspace;

use super::context::{Context, Invocation};
use super::render;

/// `nop config set`.
/// It needs no repository with `--user`, so it resolves the configuration itself (to check the
/// value), from the environment and the command line of `inv`.
#[expect(clippy::too_many_lines, reason = "a debt: listed in AGENTS.md")]
pub fn set(
    inv: &Invocation,
    key: &str,
    value: &str,
    user_file: bool,
    out: &mut impl Write,
) -> Result<ExitCode> {
    let env = &inv.env;
    let ws = Workspace::discover(&inv.cwd, inv.home());
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
                    cli: inv.settings().to_vec(),
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
    // The user's own command: a workspace they trusted (or one with nothing to trust yet) stays
    // trusted with this value; one they have not trusted is not trusted by it.
    let trusted_before = match &ws {
        Ok(ws) if !user_file => Some(ws.root.clone()).filter(|root| {
            nop::trust::workspace_check_in(root, nop::trust::Store::from_env(env).as_ref()).is_ok()
        }),
        _ => None,
    };
    nop::session::replace_file(&path, edit.text.as_bytes())?;
    if let Some(root) = trusted_before {
        // The scripts a hook set here names are the user's choice too.
        let commands = nop::config::hook_commands_of(&[(edit.key.clone(), edit.value.clone())]);
        let accepted = nop::trust::accept_workspace(env, &root)
            .and_then(|()| nop::trust::accept_commands(env, &root, &commands));
        if let Err(e) = accepted {
            eprintln!("warning: {e}");
        }
    }
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
    ctx: &Context,
    json: bool,
    session: Option<String>,
    agent: Option<String>,
    out: &mut impl Write,
) -> Result<ExitCode> {
    let session = session
        .map(|prefix| ctx.session_json(&prefix))
        .transpose()?;
    if let Some(name) = &agent
        && ctx.ws.agents()?.get(name).is_none()
    {
        bail!("no agent `{name}` in {}", ctx.ws.agents_path().display());
    }
    let resolved = ctx.config_for(agent.as_deref(), session.as_ref())?;
    render::config(out, &resolved, json)?;
    Ok(ExitCode::SUCCESS)
}
