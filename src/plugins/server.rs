//! How an MCP server is started: its environment (the one shell commands get, plus what its
//! configuration names, `${VAR}` expanded from nop's environment) and its working directory (a
//! fresh, empty directory of nop's own outside the repository). See
//! `docs/sandbox-environment.md`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::McpConfig;
use crate::permissions::ShellOptions;
use crate::tools::SandboxSettings;
use crate::tools::confine::filtered_env;

/// The program, arguments, environment and working directory of a server, `${VAR}` expanded.
#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    pub command: String,
    pub args: Vec<String>,
    pub env: Vec<(OsString, OsString)>,
    /// The configured `cwd` (relative to the repository root), `None` for a private directory.
    pub cwd: Option<PathBuf>,
}

/// The variables that name the repository root in a server's configuration, and that it gets
/// in its environment (`CLAUDE_PROJECT_DIR` as Claude Code's `.mcp.json` writes it).
pub const PROJECT_VARS: [&str; 2] = ["NOP_PROJECT_DIR", "CLAUDE_PROJECT_DIR"];

/// What `config` starts for the repository at `root`, given nop's environment `env`: the
/// filtered environment of shell commands, then the configuration's `env` on top; `${NAME}` (or
/// `${NAME:-default}`) in `command`, `args`, `env` values and `cwd` is taken from `env`, except
/// `${NOP_PROJECT_DIR}` and `${CLAUDE_PROJECT_DIR}`, the root. Naming the provider's key, or a
/// variable that is unset and has no default, is an error.
pub fn launch(
    settings: &SandboxSettings,
    config: &McpConfig,
    env: &[(OsString, OsString)],
    root: &Path,
) -> Result<Launch, String> {
    let root_text = root.to_string_lossy().into_owned();
    let lookup = lookup_in(settings, env, &root_text);
    let (mut vars, _) = filtered_env(settings, env.iter().cloned());
    vars.retain(|(k, _)| !PROJECT_VARS.iter().any(|p| k == p));
    for name in PROJECT_VARS {
        vars.push((OsString::from(name), OsString::from(&root_text)));
    }
    for (name, value) in &config.env {
        let value = expand(value, &lookup).map_err(|e| format!("env.{name}: {e}"))?;
        vars.retain(|(k, _)| k != name.as_str());
        vars.push((OsString::from(name), OsString::from(value)));
    }
    let args = config
        .args
        .iter()
        .enumerate()
        .map(|(i, a)| expand(a, &lookup).map_err(|e| format!("args[{i}]: {e}")))
        .collect::<Result<_, _>>()?;
    let cwd = config
        .cwd
        .as_deref()
        .map(|c| expand(c, &lookup).map_err(|e| format!("cwd: {e}")))
        .transpose()?
        .map(|c| root.join(c));
    Ok(Launch {
        command: expand(&config.command, &lookup).map_err(|e| format!("command: {e}"))?,
        args,
        env: vars,
        cwd,
    })
}

/// A remote server's endpoint, headers and bearer token, `${VAR}` expanded.
#[derive(Clone, PartialEq)]
pub struct Remote {
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub bearer: Option<String>,
}

impl std::fmt::Debug for Remote {
    /// Never the headers' values or the token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("url", &self.url)
            .field(
                "headers",
                &self.headers.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

/// What a remote server of `config` is sent, given nop's environment `env`: `${NAME}` in `url`
/// and header values expanded as for [`launch`], and the token in `bearer_token_env_var`. The
/// provider's key is never sent.
pub fn remote(
    settings: &SandboxSettings,
    config: &McpConfig,
    env: &[(OsString, OsString)],
    root: &Path,
) -> Result<Remote, String> {
    let root_text = root.to_string_lossy().into_owned();
    let lookup = lookup_in(settings, env, &root_text);
    let url = config.url.as_deref().unwrap_or_default();
    let url = expand(url, &lookup).map_err(|e| format!("url: {e}"))?;
    if !(url.starts_with("https://") || url.starts_with("http://")) {
        return Err(format!("url: `{url}` is not an http:// or https:// URL"));
    }
    let headers = config
        .headers
        .iter()
        .map(|(k, v)| {
            expand(v, &lookup)
                .map(|v| (k.clone(), v))
                .map_err(|e| format!("headers.{k}: {e}"))
        })
        .collect::<Result<_, _>>()?;
    let bearer = match &config.bearer_token_env_var {
        None => None,
        Some(name) => Some(lookup(name)?.filter(|v| !v.is_empty()).ok_or_else(|| {
            format!("bearer_token_env_var: `{name}` is not set in nop's environment")
        })?),
    };
    Ok(Remote {
        url,
        headers,
        bearer,
    })
}

/// Looks a variable up in `env` for a server's configuration: the repository root for the
/// project variables, an error for the provider's key.
fn lookup_in<'a>(
    settings: &'a SandboxSettings,
    env: &'a [(OsString, OsString)],
    root: &'a str,
) -> impl Fn(&str) -> Result<Option<String>, String> + 'a {
    move |name: &str| {
        if PROJECT_VARS.contains(&name) {
            return Ok(Some(root.to_string()));
        }
        if settings.key_vars.iter().any(|k| k == name) {
            return Err(format!(
                "`${{{name}}}` names the provider's key variable, which plugins never get"
            ));
        }
        env.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| {
                v.to_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("`${{{name}}}` is not valid UTF-8"))
            })
            .transpose()
    }
}

/// What the start-up warning says of a server whose program or working directory lies inside
/// the repository at `root` (files the agent can write): `npx`, `uvx` or `python` started there,
/// or a program found there, would run what the model planted.
pub fn inside_repository(launch: &Launch, root: &Path) -> Vec<String> {
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let inside = |p: &Path| {
        p.canonicalize()
            .unwrap_or_else(|_| p.to_path_buf())
            .starts_with(&root)
    };
    let mut notes = Vec::new();
    if let Some(cwd) = &launch.cwd
        && inside(cwd)
    {
        notes.push(format!(
            "starts in {}, inside the repository, where the agent can write: a program it              finds there (node_modules, a virtualenv, a module of its name) runs unconfined",
            cwd.display()
        ));
    }
    let base = launch.cwd.clone().unwrap_or_else(|| PathBuf::from("/"));
    let program = Path::new(&launch.command);
    let found = if launch.command.contains('/') {
        Some(base.join(program))
    } else {
        launch
            .env
            .iter()
            .find(|(k, _)| k == "PATH")
            .and_then(|(_, path)| {
                std::env::split_paths(path)
                    .map(|dir| base.join(dir).join(program))
                    .find(|p| p.is_file())
            })
    };
    if let Some(found) = found
        && inside(&found)
    {
        notes.push(format!(
            "its program {} lies inside the repository, where the agent can write",
            found.display()
        ));
    }
    notes
}

/// `text` with each `${NAME}` replaced by the variable's value and each `${NAME:-default}` by
/// the value or, when unset or empty, the default (which is not expanded further). Any other
/// `$` is kept as it is.
fn expand(
    text: &str,
    lookup: &impl Fn(&str) -> Result<Option<String>, String>,
) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| format!("`${{` without a closing `}}` in `{text}`"))?;
        let inner = &after[..end];
        let (name, default) = match inner.split_once(":-") {
            Some((name, default)) => (name, Some(default)),
            None => (inner, None),
        };
        let valid = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(format!("`${{{inner}}}` does not name a variable"));
        }
        match (lookup(name)?, default) {
            (Some(value), Some(default)) if value.is_empty() => out.push_str(default),
            (Some(value), _) => out.push_str(&value),
            (None, Some(default)) => out.push_str(default),
            (None, None) => {
                return Err(format!(
                    "`${{{name}}}` is not set in nop's environment (write `${{{name}:-}}` for \
                     empty)"
                ));
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The working directory of a server: a fresh, empty, private directory (removed when dropped),
/// or `/` where no place for one fits.
#[derive(Debug)]
pub struct WorkDir {
    path: PathBuf,
    _owned: Option<tempfile::TempDir>,
}

impl WorkDir {
    /// A directory the configuration names, kept when dropped.
    pub fn given(path: &Path) -> WorkDir {
        WorkDir {
            path: path.to_path_buf(),
            _owned: None,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A working directory for a server of the repository at `root`, given nop's environment `env`.
///
/// A server must not start inside the repository: the model may write there, and `npx`, `node`
/// or `python -m` would run what it planted (`node_modules/`, a module of the server's name),
/// unconfined. Nor beneath a directory shell commands may write (`/tmp`, `$TMPDIR`, `/dev/shm`).
/// The directory is `nop/mcp-XXXXXX` beneath the first of `$XDG_RUNTIME_DIR`, `$XDG_STATE_HOME`
/// (or `~/.local/state`) that is neither; else `/`.
pub fn work_dir(root: &Path, env: &[(OsString, OsString)]) -> WorkDir {
    use std::os::unix::fs::PermissionsExt;
    let var = |name: &str| {
        env.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| PathBuf::from(v))
            .filter(|p| p.is_absolute())
    };
    let state = var("XDG_STATE_HOME").or_else(|| var("HOME").map(|h| h.join(".local/state")));
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let avoid: Vec<PathBuf> = std::iter::once(root)
        .chain(ShellOptions::temp_dirs(var("TMPDIR").as_deref()))
        .collect();
    let fits = |path: &Path| !avoid.iter().any(|a| path.starts_with(a));
    for base in [var("XDG_RUNTIME_DIR"), state].into_iter().flatten() {
        // Judged before anything is created (the parts that exist, resolved) and after.
        if !fits(&resolved(&base)) {
            continue;
        }
        let parent = base.join("nop");
        if let Err(e) = private_dir(&parent) {
            tracing::warn!(op = "plugin", "cannot create {}: {e}", parent.display());
            continue;
        }
        let created = tempfile::Builder::new()
            .prefix("mcp-")
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir_in(&parent);
        match created {
            Ok(dir) => match dir.path().canonicalize() {
                Ok(path) if fits(&path) => {
                    return WorkDir {
                        path,
                        _owned: Some(dir),
                    };
                }
                _ => continue,
            },
            Err(e) => {
                tracing::warn!(
                    op = "plugin",
                    "cannot create a directory in {}: {e}",
                    parent.display()
                );
            }
        }
    }
    WorkDir {
        path: PathBuf::from("/"),
        _owned: None,
    }
}

/// `path` with its longest existing prefix resolved (symbolic links followed).
fn resolved(path: &Path) -> PathBuf {
    let mut existing = path.to_path_buf();
    let mut rest = Vec::new();
    while !existing.exists() {
        match (existing.file_name(), existing.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name.to_os_string());
                existing = parent.to_path_buf();
            }
            _ => break,
        }
    }
    let mut out = existing.canonicalize().unwrap_or(existing);
    for name in rest.iter().rev() {
        out.push(name);
    }
    out
}

/// Creates `path` (and its parents) if missing, itself with mode 0700.
fn private_dir(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(path) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && path.is_dir() => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    fn config(args: &[&str], vars: &[(&str, &str)]) -> McpConfig {
        McpConfig {
            command: "server".into(),
            args: args.iter().map(|a| a.to_string()).collect(),
            env: vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            startup_timeout_s: 1.0,
            timeout_s: None,
            cwd: None,
            url: None,
            headers: Default::default(),
            bearer_token_env_var: None,
        }
    }

    fn settings() -> SandboxSettings {
        SandboxSettings {
            key_vars: vec!["NOP_API_KEY".into(), "LLM_KEY_VAR".into()],
            ..SandboxSettings::from_config(&Default::default())
        }
    }

    #[test]
    fn the_environment_is_filtered_and_named_variables_are_expanded() {
        let nop_env = env(&[
            ("PATH", "/usr/bin"),
            ("NOP_API_KEY", "sk-1"),
            ("LLM_KEY_VAR", "sk-2"),
            ("GITHUB_TOKEN", "ghp-3"),
            ("EMPTY", ""),
        ]);
        let launch = launch(
            &settings(),
            &config(
                &["--user=${USER:-nobody}", "$HOME", "${PATH}"],
                &[
                    ("GITHUB_TOKEN", "${GITHUB_TOKEN}"),
                    ("LITERAL", "a$b ${EMPTY:-d} ${EMPTY}."),
                    ("PATH", "/opt/bin:${PATH}"),
                ],
            ),
            &nop_env,
            Path::new("/repo"),
        )
        .expect("launch");
        assert_eq!(launch.args, vec!["--user=nobody", "$HOME", "/usr/bin"]);
        assert_eq!(
            launch.env,
            env(&[
                ("EMPTY", ""),
                ("NOP_PROJECT_DIR", "/repo"),
                ("CLAUDE_PROJECT_DIR", "/repo"),
                ("GITHUB_TOKEN", "ghp-3"),
                ("LITERAL", "a$b d ."),
                ("PATH", "/opt/bin:/usr/bin"),
            ])
        );
    }

    #[test]
    fn the_key_unset_variables_and_bad_references_are_refused() {
        let nop_env = env(&[("NOP_API_KEY", "sk-1"), ("LLM_KEY_VAR", "sk-2")]);
        for (value, wanted) in [
            ("${NOP_API_KEY}", "provider's key"),
            ("${LLM_KEY_VAR:-x}", "provider's key"),
            ("${MISSING}", "is not set"),
            ("${unclosed", "without a closing"),
            ("${1X}", "does not name a variable"),
            ("${}", "does not name a variable"),
        ] {
            let error = launch(
                &settings(),
                &config(&[], &[("K", value)]),
                &nop_env,
                Path::new("/r"),
            )
            .expect_err(value);
            assert!(
                error.starts_with("env.K: ") && error.contains(wanted),
                "{value}: {error}"
            );
        }
        let error = launch(
            &settings(),
            &config(&["${NOP_API_KEY}"], &[]),
            &nop_env,
            Path::new("/r"),
        )
        .expect_err("args");
        assert!(error.starts_with("args[0]: "), "{error}");
    }

    #[test]
    fn the_work_dir_is_private_empty_and_outside_the_repository() {
        std::fs::create_dir_all("/var/tmp/nop-tests").expect("/var/tmp/nop-tests");
        let base = tempfile::tempdir_in("/var/tmp/nop-tests").expect("base");
        let root = base.path().join("repo");
        let runtime = base.path().join("run");
        std::fs::create_dir_all(&root).expect("root");
        std::fs::create_dir_all(&runtime).expect("runtime");
        let dir = work_dir(
            &root,
            &env(&[
                ("XDG_RUNTIME_DIR", &runtime.to_string_lossy()),
                ("HOME", &root.to_string_lossy()),
            ]),
        );
        let path = dir.path().to_path_buf();
        assert!(path.starts_with(runtime.canonicalize().expect("c").join("nop")));
        assert_eq!(std::fs::read_dir(&path).expect("read").count(), 0);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o077, 0, "{mode:o}");
        drop(dir);
        assert!(!path.exists());
        // HOME is the repository and no runtime directory: nothing beneath HOME will do, and
        // nothing is created there.
        let dir = work_dir(&root, &env(&[("HOME", &root.to_string_lossy())]));
        assert_eq!(dir.path(), Path::new("/"));
        assert!(!root.join(".local").exists());
        // A runtime directory inside the repository is passed over for the state directory.
        let inside = root.join("run");
        std::fs::create_dir_all(&inside).expect("inside");
        let home = base.path().join("home");
        let dir = work_dir(
            &root,
            &env(&[
                ("XDG_RUNTIME_DIR", &inside.to_string_lossy()),
                ("HOME", &home.to_string_lossy()),
            ]),
        );
        assert!(
            dir.path()
                .starts_with(home.canonicalize().expect("c").join(".local/state/nop")),
            "{}",
            dir.path().display()
        );
    }
}
