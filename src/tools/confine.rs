//! Confining a command as the agent's `shell` is confined: the environment it gets, the
//! mechanism chosen for this machine, the [`ShellView`] of the agent's rules, and notes that
//! name the rule behind a refusal. Used by the shell tool, command plugins and
//! `nop sandbox run`.

use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use super::SandboxSettings;
use crate::config::{NamespacesMode, NetworkMode, SandboxMode};
use crate::permissions::{Effect, Policy, ShellOptions, ShellView};
use crate::sandbox::{self, Enforcement, Mechanism};

/// Messages of the errors a confined command meets when the sandbox refuses it something.
const REFUSALS: [&str; 4] = [
    "Permission denied",
    "Read-only file system",
    "Operation not permitted",
    "Device or resource busy",
];

/// Notes on refusals at most in one result.
const MAX_NOTES: usize = 5;

static WARNED: AtomicBool = AtomicBool::new(false);

/// A command ready to start, and what confines it.
#[derive(Debug)]
pub struct Confined {
    pub command: std::process::Command,
    /// The view the command runs under; `None` when it runs unconfined.
    pub view: Option<ShellView>,
    /// A warning for the model and the user (once per process): partial or no confinement.
    pub note: Option<String>,
    /// The names of the variables removed from its environment.
    pub removed_env: Vec<String>,
}

/// Why a command cannot be run.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    /// `sandbox: required` and this machine cannot confine it.
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    Setup(String),
}

/// How commands are confined on this machine, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    /// `None`: not at all.
    pub mechanism: Option<Mechanism>,
    pub landlock: sandbox::Support,
    /// Whether user namespaces work here, or why not (`None` when not asked: `namespaces: off`).
    pub namespaces: Option<sandbox::namespace::Probe>,
}

impl Machine {
    /// Probes this machine (once per process for the namespaces) under `settings`.
    pub fn probe(settings: &SandboxSettings) -> Result<Machine, ConfineError> {
        let landlock = sandbox::support();
        let namespaces = match settings.namespaces {
            NamespacesMode::Off => None,
            NamespacesMode::Auto => Some(sandbox::namespace::probe(&exe()?)),
        };
        let mechanism = if namespaces.as_ref().is_some_and(|p| p.available) {
            Some(Mechanism::Namespaces)
        } else if landlock.filesystem != Enforcement::None {
            Some(Mechanism::Landlock)
        } else {
            None
        };
        Ok(Machine {
            mechanism,
            landlock,
            namespaces,
        })
    }

    /// The mechanism in words.
    pub fn describe(&self) -> String {
        let abi = self.landlock.abi.map_or_else(
            || "no Landlock".to_string(),
            |a| format!("Landlock ABI {a}"),
        );
        let why_not = match &self.namespaces {
            None => "shell.namespaces: off".to_string(),
            Some(p) => p
                .error
                .clone()
                .unwrap_or_else(|| "user namespaces unavailable".into()),
        };
        match self.mechanism {
            Some(Mechanism::Namespaces) => {
                format!("namespaces: user, mount and PID namespaces under {abi}")
            }
            Some(Mechanism::Landlock) => {
                format!("landlock: {abi} alone (no namespaces: {why_not})")
            }
            None => format!("none: {abi}, and no namespaces ({why_not})"),
        }
    }

    /// What this machine cannot enforce that `settings` ask for, one phrase each.
    fn gaps(&self, settings: &SandboxSettings) -> Vec<String> {
        let mut gaps = Vec::new();
        if self.landlock.filesystem != Enforcement::Full {
            gaps.push(format!(
                "file rules ({:?} enforcement: Landlock {})",
                self.landlock.filesystem,
                self.landlock
                    .abi
                    .map_or("unavailable".to_string(), |a| format!("ABI {a}"))
            ));
        }
        let tcp_by_landlock = self.mechanism != Some(Mechanism::Namespaces);
        if settings.network == NetworkMode::Deny
            && tcp_by_landlock
            && self.landlock.network != Enforcement::Full
        {
            gaps.push("shell.network: deny (needs Landlock ABI 4 or namespaces)".to_string());
        }
        // With `namespaces: off` Landlock alone is the user's choice, not a shortfall.
        if let Some(probe) = &self.namespaces
            && !probe.available
        {
            gaps.push(format!(
                "the namespace view ({})",
                probe
                    .error
                    .as_deref()
                    .unwrap_or("user namespaces unavailable")
            ));
        }
        gaps
    }
}

/// The nop binary, to run `nop __sandbox`.
fn exe() -> Result<PathBuf, ConfineError> {
    std::env::current_exe()
        .map_err(|e| ConfineError::Setup(format!("cannot find the nop executable: {e}")))
}

/// The environment of a confined command: nop's own, less the provider key variables and the
/// names `settings` exclude. Returns the variables and the names removed.
pub fn filtered_env(
    settings: &SandboxSettings,
    env: impl IntoIterator<Item = (OsString, OsString)>,
) -> (Vec<(OsString, OsString)>, Vec<String>) {
    let set = |globs: &[String]| {
        let mut builder = globset::GlobSetBuilder::new();
        for g in globs {
            // Checked when the configuration was loaded.
            if let Ok(glob) = globset::GlobBuilder::new(g).case_insensitive(true).build() {
                builder.add(glob);
            }
        }
        builder
            .build()
            .unwrap_or_else(|_| globset::GlobSet::empty())
    };
    let exclude = set(&settings.env_exclude);
    let keep = set(&settings.env_keep);
    let mut kept = Vec::new();
    let mut removed = Vec::new();
    for (name, value) in env {
        let text = name.to_string_lossy();
        let is_key = settings.key_vars.iter().any(|k| *k == text);
        if is_key || (exclude.is_match(text.as_ref()) && !keep.is_match(text.as_ref())) {
            removed.push(text.into_owned());
        } else {
            kept.push((name, value));
        }
    }
    removed.sort();
    (kept, removed)
}

/// `program args…` confined as `settings` say for an agent with `policy` (in its repository,
/// `policy.root()`), with the filtered environment of this process. Blocking: it probes the
/// machine (once) and reads the tree for the view.
pub fn confine(
    policy: &Policy,
    settings: &SandboxSettings,
    program: &OsStr,
    args: &[OsString],
) -> Result<Confined, ConfineError> {
    let (env, removed_env) = filtered_env(settings, std::env::vars_os());
    let plain = |env: Vec<(OsString, OsString)>| {
        let mut c = std::process::Command::new(program);
        c.args(args).env_clear().envs(env);
        c
    };
    if settings.mode == SandboxMode::Off {
        return Ok(Confined {
            command: plain(env),
            view: None,
            note: None,
            removed_env,
        });
    }
    let required = settings.mode == SandboxMode::Required;
    let machine = Machine::probe(settings)?;
    let gaps = machine.gaps(settings);
    // `required` never falls back; Landlock alone is accepted only when chosen (namespaces: off).
    if required && !gaps.is_empty() {
        return Err(ConfineError::Unavailable(format!(
            "sandbox: required, but this machine cannot enforce {}; shell commands are refused \
             (`nop sandbox check` shows why)",
            gaps.join(" and ")
        )));
    }
    let Some(mechanism) = machine.mechanism else {
        let note = (!WARNED.swap(true, Ordering::Relaxed)).then(|| {
            warn_once(format!(
                "warning: shell commands run unconfined on this machine: {} \
                 (sandbox: best-effort)",
                machine.describe()
            ))
        });
        return Ok(Confined {
            command: plain(env),
            view: None,
            note,
            removed_env,
        });
    };
    protect_git_hooks(policy.root());
    let view = crate::permissions::shell_view(
        policy,
        &ShellOptions {
            mechanism,
            required,
            network: settings.network == NetworkMode::Allow,
            temp_dirs: ShellOptions::temp_dirs(
                std::env::var_os("TMPDIR").as_deref().map(Path::new),
            ),
        },
    );
    let partial = !gaps.is_empty() || mechanism == Mechanism::Landlock;
    let note = (partial && !WARNED.swap(true, Ordering::Relaxed)).then(|| {
        let mut message = if gaps.is_empty() {
            "note: shell commands run under Landlock alone (shell.namespaces: off)".to_string()
        } else {
            format!(
                "warning: shell commands are not fully confined here: {} is not enforced \
                 (sandbox: best-effort)",
                gaps.join(" and ")
            )
        };
        for limit in &view.limits {
            message.push_str("\n  - ");
            message.push_str(limit);
        }
        warn_once(message)
    });
    let mut command = sandbox::command(&exe()?, &view.spec, program, args)
        .map_err(|e| ConfineError::Setup(e.to_string()))?;
    command.env_clear().envs(env);
    Ok(Confined {
        command,
        view: Some(view),
        note,
        removed_env,
    })
}

fn warn_once(message: String) -> String {
    tracing::warn!(op = "sandbox", result = "partial", "{message}");
    message
}

/// Makes sure `.git/hooks` exists in a repository, so that the view can protect it: a command
/// must not be able to create it with a hook inside.
fn protect_git_hooks(root: &Path) {
    let git = root.join(".git");
    if git.is_dir()
        && !git.join("hooks").exists()
        && let Err(e) = std::fs::create_dir(git.join("hooks"))
    {
        tracing::warn!(
            op = "sandbox",
            "cannot create .git/hooks to protect it: {e}"
        );
    }
}

/// Notes that name the rule behind each refusal in `output` (a confined command's stdout and
/// stderr, run in `dir`): for lines with "Permission denied", "Read-only file system" and the
/// like, the paths they mention that the view protects or that lie outside the writable roots.
pub fn refusal_notes(view: &ShellView, root: &Path, dir: &Path, output: &str) -> Vec<String> {
    let mut notes = Vec::new();
    let mut seen = BTreeSet::new();
    let mut unexplained = false;
    for line in output
        .lines()
        .filter(|l| REFUSALS.iter().any(|r| l.contains(r)))
    {
        let busy = line.contains("Device or resource busy");
        let explained = path_candidates(line).into_iter().find_map(|candidate| {
            let joined = if Path::new(&candidate).is_absolute() {
                PathBuf::from(&candidate)
            } else {
                dir.join(&candidate)
            };
            let resolved = crate::permissions::resolve(root, &joined.to_string_lossy()).ok()?;
            let note = note_for(view, root, &resolved, busy)?;
            Some((resolved, note))
        });
        match explained {
            Some((path, note)) => {
                if seen.insert(path) {
                    notes.push(note);
                }
            }
            None => unexplained = true,
        }
    }
    notes.truncate(MAX_NOTES);
    if notes.is_empty() && unexplained {
        let roots: Vec<String> = view.writable_roots.iter().map(|r| shown(root, r)).collect();
        let protected: Vec<String> = view
            .protections
            .iter()
            .filter(|p| matches!(p.effect, Effect::ReadOnly | Effect::Hidden))
            .take(6)
            .map(|p| format!("{} ({})", shown(root, &p.path), p.effect.as_str()))
            .collect();
        notes.push(format!(
            "sandbox: if that refusal came from the sandbox: shell commands may write only \
             beneath {}, except {}",
            roots.join(", "),
            if protected.is_empty() {
                "nothing".to_string()
            } else {
                protected.join(", ")
            }
        ));
    }
    notes
}

fn note_for(view: &ShellView, root: &Path, path: &Path, busy: bool) -> Option<String> {
    let shown_path = shown(root, path);
    let is_mount = view.spec.mounts.iter().any(|m| m.path == path);
    if busy && is_mount {
        let why = view
            .protections
            .iter()
            .find(|p| p.path == path)
            .map_or_else(|| "it is protected".to_string(), |p| p.reason.clone());
        return Some(format!(
            "sandbox: `{shown_path}` cannot be moved or removed by shell commands: {why}"
        ));
    }
    match view.protection_of(path) {
        Some(p) if p.effect == Effect::ReadOnly => Some(format!(
            "sandbox: `{shown_path}` is read-only to shell commands: {}",
            p.reason
        )),
        Some(p) if p.effect == Effect::Hidden => Some(format!(
            "sandbox: `{shown_path}` is hidden from shell commands: {}",
            p.reason
        )),
        _ if !view.under_writable_root(path) => Some(format!(
            "sandbox: `{shown_path}` is outside the places shell commands may write ({})",
            view.writable_roots
                .iter()
                .map(|r| shown(root, r))
                .collect::<Vec<_>>()
                .join(", ")
        )),
        _ => None,
    }
}

/// A path for a note: relative to the repository root when inside it.
fn shown(root: &Path, path: &Path) -> String {
    match path.strip_prefix(root) {
        Ok(relative) if relative.as_os_str().is_empty() => ".".to_string(),
        Ok(relative) => relative.display().to_string(),
        Err(_) => path.display().to_string(),
    }
}

/// The strings in an error line that may be paths: quoted parts first ('…', "…", ‘…’, `…'),
/// then the fields between ": ".
fn path_candidates(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (open, close) in [('\'', '\''), ('"', '"'), ('‘', '’'), ('`', '\'')] {
        let mut rest = line;
        while let Some(start) = rest.find(open) {
            let after = &rest[start + open.len_utf8()..];
            let Some(end) = after.find(close) else { break };
            let quoted = &after[..end];
            if !quoted.is_empty() && !out.iter().any(|o| o == quoted) {
                out.push(quoted.to_string());
            }
            rest = &after[end + close.len_utf8()..];
        }
    }
    for field in line.split(": ") {
        let field = field.trim().trim_matches(['\'', '"', '`', '‘', '’']);
        let plausible = !field.is_empty()
            && !REFUSALS.iter().any(|r| field.contains(r))
            && !field.contains(' ')
            && !out.iter().any(|o| o == field);
        if plausible {
            out.push(field.to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_candidates_come_from_quotes_and_fields() {
        assert_eq!(
            path_candidates("bash: line 1: .nop/config.yml: Read-only file system"),
            vec!["bash", ".nop/config.yml"]
        );
        assert_eq!(
            path_candidates("mv: cannot move '.git' to '.git2': Device or resource busy"),
            vec![".git", ".git2", "mv"]
        );
        assert_eq!(
            path_candidates("PermissionError: [Errno 13] Permission denied: '/etc/x'"),
            vec!["/etc/x", "PermissionError"]
        );
    }

    #[test]
    fn the_key_variables_and_secret_names_are_removed() {
        let settings = SandboxSettings {
            env_keep: vec!["GIT_ASKPASS_TOKEN_OK".into()],
            key_vars: vec!["MY_PROVIDER_VAR".into()],
            ..SandboxSettings::from_config(&Default::default())
        };
        let env = [
            "PATH",
            "HOME",
            "MY_PROVIDER_VAR",
            "NOP_API_KEY",
            "github_token",
            "AWS_SECRET_ACCESS_KEY",
            "DB_PASSWORD",
            "GIT_ASKPASS_TOKEN_OK",
        ]
        .map(|n| (OsString::from(n), OsString::from("v")));
        let (kept, removed) = filtered_env(&settings, env);
        let kept: Vec<_> = kept
            .iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        assert_eq!(kept, vec!["PATH", "HOME", "GIT_ASKPASS_TOKEN_OK"]);
        assert_eq!(
            removed,
            vec![
                "AWS_SECRET_ACCESS_KEY",
                "DB_PASSWORD",
                "MY_PROVIDER_VAR",
                "NOP_API_KEY",
                "github_token"
            ]
        );
    }
}
