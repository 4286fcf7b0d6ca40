//! Confining a command as the agent's `shell` is confined: the environment it gets, the
//! mechanism chosen for this machine, the [`ShellView`] of the agent's rules, and notes that
//! name the rule behind a refusal. Used by the shell tool, command plugins and
//! `nop sandbox run`.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use super::{SandboxSettings, shown};
use crate::config::{NamespacesMode, NetworkMode, SandboxMode};
use crate::permissions::{Effect, Layers, Policy, ShellOptions, ShellView};
use crate::sandbox::{self, Enforcement, Mechanism};

/// Messages of the errors a confined command meets when the sandbox refuses it something, in
/// lower case (as libc words them, and as Node and Python name them).
const REFUSALS: [&str; 8] = [
    "permission denied",
    "read-only file system",
    "operation not permitted",
    "device or resource busy",
    "eacces",
    "erofs",
    "eperm",
    "ebusy",
];

fn is_refusal(line: &str) -> bool {
    let lower = line.to_lowercase();
    REFUSALS.iter().any(|r| lower.contains(r))
}

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
    /// The sandbox spec the command inherits: keep it open until the command is spawned.
    pub spec_fd: Option<std::os::fd::OwnedFd>,
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
    /// The program that confines commands (`None`: none could be found).
    pub helper: Option<PathBuf>,
    /// Where that program was copied from.
    pub helper_origin: Option<PathBuf>,
}

impl Machine {
    /// Probes this machine (once per process for the namespaces) under `settings`.
    pub fn probe(settings: &SandboxSettings) -> Result<Machine, ConfineError> {
        let landlock = sandbox::support();
        let helper = sandbox::namespace::helper(&exe()?);
        let namespaces = match settings.namespaces {
            NamespacesMode::Off => None,
            NamespacesMode::Auto => Some(helper.probe),
        };
        let mechanism = if helper.path.is_none() {
            None
        } else if namespaces.as_ref().is_some_and(|p| p.available) {
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
            helper: helper.path,
            helper_origin: helper.origin,
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
            None | Some(Mechanism::Unconfined) => {
                format!("none: {abi}, and no namespaces ({why_not})")
            }
        }
    }

    /// Why shell commands are refused here: `sandbox: required` never falls back (Landlock alone
    /// is accepted only when chosen with `shell.namespaces: off`).
    pub fn refusal(&self, settings: &SandboxSettings) -> Option<String> {
        let gaps = self.gaps(settings);
        (settings.mode == SandboxMode::Required && !gaps.is_empty()).then(|| {
            format!(
                "sandbox: required, but this machine cannot enforce {}; shell commands are \
                 refused (`nop sandbox check` shows why)",
                gaps.join(" and ")
            )
        })
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

/// Variables the name globs never remove: the working directory, and ordinary variables that
/// only look like credentials (`*PWD*`, `*AUTH*`). XAUTHORITY names the X11 cookie file, which a
/// command can read at its usual place anyway: removing it would break graphical tools and
/// protect nothing. (SSH_AUTH_SOCK is removed: it hands the command the user's ssh agent.)
const ORDINARY_NAMES: [&str; 6] = [
    "PWD",
    "OLDPWD",
    "XAUTHORITY",
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_AUTHOR_DATE",
];

/// The environment of a confined command: nop's own, less the provider key variables (always),
/// the names `settings` exclude (except the [`ORDINARY_NAMES`]) and the variables whose value is
/// a URL with a password (`postgres://user:secret@host/db`), unless `settings` keep them.
/// Returns the variables and the names removed. See `docs/sandbox-environment.md`.
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
        let by_name = exclude.is_match(text.as_ref()) && !ORDINARY_NAMES.contains(&text.as_ref());
        let by_shape = url_with_password(&value.to_string_lossy());
        if is_key || ((by_name || by_shape) && !keep.is_match(text.as_ref())) {
            removed.push(text.into_owned());
        } else {
            kept.push((name, value));
        }
    }
    removed.sort();
    (kept, removed)
}

/// Whether `value` holds a URL whose user information has a password (`scheme://user:pw@host`),
/// anywhere in it.
fn url_with_password(value: &str) -> bool {
    value.match_indices("://").any(|(at, sep)| {
        let after = &value[at + sep.len()..];
        let authority = after
            .split(|c: char| matches!(c, '/' | '?' | '#') || c.is_whitespace())
            .next()
            .unwrap_or_default();
        authority
            .rsplit_once('@')
            .and_then(|(user_info, _)| user_info.split_once(':'))
            .is_some_and(|(_, password)| !password.is_empty())
    })
}

/// `program args…` confined as `settings` say for an agent with `policy` (in its repository,
/// `policy.root()`), with the filtered environment of this process. Blocking: it probes the
/// machine (once) and reads the tree for the view.
pub fn confine(
    policy: &Policy,
    settings: &SandboxSettings,
    program: &OsStr,
    args: &[OsString],
    layers: Layers,
) -> Result<Confined, ConfineError> {
    let (env, removed_env) = filtered_env(settings, std::env::vars_os());
    let machine = Machine::probe(settings)?;
    // Unconfined, but through the helper all the same: what the command starts ends with it.
    let plain = |env: Vec<(OsString, OsString)>| -> Result<_, ConfineError> {
        let Some(helper) = &machine.helper else {
            let mut command = std::process::Command::new(program);
            command.args(args).env_clear().envs(env);
            // Without the helper, no controlling terminal all the same.
            sandbox::in_new_session(&mut command);
            return Ok((command, None));
        };
        let spec = sandbox::Spec {
            mechanism: Mechanism::Unconfined,
            required: false,
            grants: Vec::new(),
            mounts: Vec::new(),
            network: true,
            parent: Some(std::process::id()),
        };
        let (mut command, spec_fd) = sandbox::command(helper, &spec, program, args)
            .map_err(|e| ConfineError::Setup(e.to_string()))?;
        command.env_clear().envs(env);
        Ok((command, Some(spec_fd)))
    };
    if settings.mode == SandboxMode::Off {
        let (command, spec_fd) = plain(env)?;
        return Ok(Confined {
            command,
            view: None,
            note: None,
            removed_env,
            spec_fd,
        });
    }
    if let Some(why) = machine.refusal(settings) {
        return Err(ConfineError::Unavailable(why));
    }
    let gaps = machine.gaps(settings);
    let Some(mechanism) = machine.mechanism else {
        let note = (!WARNED.swap(true, Ordering::Relaxed)).then(|| {
            warn_once(format!(
                "warning: shell commands run unconfined on this machine: {} \
                 (sandbox: best-effort)",
                machine.describe()
            ))
        });
        let (command, spec_fd) = plain(env)?;
        return Ok(Confined {
            command,
            view: None,
            note,
            removed_env,
            spec_fd,
        });
    };
    protect_git_hooks(policy.root());
    let mut options = shell_options(mechanism, settings);
    options.read_only = layers.read_only;
    options.layers = layers;
    let view = crate::permissions::shell_view(policy, &options);
    // The layers the view mounts, made now: the helper mounts them before the rest of the view.
    for layer in view.spec.mounts.iter().filter_map(|m| m.layer.as_ref()) {
        for sub in ["upper", "work"] {
            std::fs::create_dir_all(layer.join(sub))
                .map_err(|e| ConfineError::Setup(format!("{}: {e}", layer.display())))?;
        }
    }
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
    let Some(helper) = &machine.helper else {
        return Err(ConfineError::Setup("no sandbox helper".into()));
    };
    let (mut command, spec_fd) = sandbox::command(helper, &view.spec, program, args)
        .map_err(|e| ConfineError::Setup(e.to_string()))?;
    command.env_clear().envs(env);
    Ok(Confined {
        command,
        view: Some(view),
        note,
        removed_env,
        spec_fd: Some(spec_fd),
    })
}

/// The caches of `settings` that exist, canonical, each with its layer in `session_dir`
/// (`layers/cache-<name>`): kept for the session, removed with it. The first time a nop process
/// uses a session's layers, they are measured: over `caches_max_mb` they start anew.
pub fn cache_layers(settings: &SandboxSettings, session_dir: &Path) -> Vec<(PathBuf, PathBuf)> {
    static MEASURED: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
    let layers_dir = session_dir.join("layers");
    let first = {
        let mut measured = MEASURED.lock().unwrap_or_else(|e| e.into_inner());
        let first = !measured.contains(&layers_dir);
        if first {
            measured.push(layers_dir.clone());
        }
        first
    };
    if first {
        let used = size_of(&layers_dir);
        if used > settings.caches_max_mb.saturating_mul(1 << 20) {
            tracing::info!(
                op = "sandbox",
                "the session's cache layers hold {} MB, over shell.caches_max_mb: started anew",
                used >> 20
            );
            for entry in std::fs::read_dir(&layers_dir)
                .into_iter()
                .flatten()
                .flatten()
            {
                if entry.file_name().to_string_lossy().starts_with("cache") {
                    super::git_layer::remove_layer(&entry.path());
                }
            }
        }
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute());
    settings
        .caches
        .iter()
        .filter_map(|cache| {
            let path = match cache.strip_prefix("~/") {
                Some(rest) => home.as_ref()?.join(rest),
                None => PathBuf::from(cache),
            };
            let real = std::fs::canonicalize(&path).ok().filter(|p| p.is_dir())?;
            let name: String = real
                .to_string_lossy()
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .collect();
            Some((
                real,
                session_dir.join("layers").join(format!("cache{name}")),
            ))
        })
        .collect()
}

/// Bytes of the files beneath `dir` (bounded walk: a layer past a million entries counts as
/// over any limit).
fn size_of(dir: &Path) -> u64 {
    let mut total = 0u64;
    let mut seen = 0usize;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            seen += 1;
            if seen > 1_000_000 {
                return u64::MAX;
            }
            match entry.metadata() {
                Ok(m) if m.is_dir() => stack.push(entry.path()),
                Ok(m) => total = total.saturating_add(m.len()),
                Err(_) => {}
            }
        }
    }
    total
}

/// The options of the view of shell commands confined with `mechanism` under `settings`.
pub fn shell_options(mechanism: Mechanism, settings: &SandboxSettings) -> ShellOptions {
    ShellOptions {
        layers: Default::default(),
        read_only: false,
        mechanism,
        required: settings.mode == SandboxMode::Required,
        network: settings.network == NetworkMode::Allow,
        temp_dirs: ShellOptions::temp_dirs(std::env::var_os("TMPDIR").as_deref().map(Path::new)),
    }
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
/// stderr, run in `dir`): for lines with "Permission denied", "Read-only file system", EACCES and
/// the like, the paths they mention that the view protects or that lie outside the writable
/// roots. Where a refusal names no path on its line (npm prints it on another), the paths
/// anywhere in the output are looked at.
pub fn refusal_notes(view: &ShellView, root: &Path, dir: &Path, output: &str) -> Vec<String> {
    let mut notes: Vec<(PathBuf, String)> = Vec::new();
    let mut add = |found: Option<(PathBuf, String)>| match found {
        Some((key, note)) => {
            if !notes.iter().any(|(k, _)| *k == key) {
                notes.push((key, note));
            }
            true
        }
        None => false,
    };
    let explain = |candidates: Vec<String>, busy: bool| {
        candidates.into_iter().find_map(|candidate| {
            let joined = if Path::new(&candidate).is_absolute() {
                PathBuf::from(&candidate)
            } else {
                dir.join(&candidate)
            };
            let resolved = crate::permissions::resolve(root, &joined.to_string_lossy()).ok()?;
            note_for(view, root, &resolved, busy)
        })
    };
    let mut unexplained = false;
    for line in output.lines().filter(|l| is_refusal(l)) {
        let busy = line.to_lowercase().contains("busy");
        if !add(explain(path_candidates(line), busy)) {
            unexplained = true;
        }
    }
    if unexplained {
        for line in output.lines() {
            let absolute: Vec<String> = line
                .split_whitespace()
                .map(|t| t.trim_matches(|c: char| "'\"`‘’,;:()[]".contains(c)))
                .filter(|t| t.starts_with('/') && t.len() > 1)
                .map(str::to_string)
                .collect();
            add(explain(absolute, false));
        }
    }
    let mut notes: Vec<String> = notes.into_iter().map(|(_, n)| n).collect();
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

/// The note for a refused `path`, keyed by what refused it (so that one protection is named
/// once however many of its paths were refused).
fn note_for(view: &ShellView, root: &Path, path: &Path, busy: bool) -> Option<(PathBuf, String)> {
    let shown_path = shown(root, path);
    let is_mount = view.spec.mounts.iter().any(|m| m.path == path);
    if busy && is_mount {
        let why = view
            .protections
            .iter()
            .find(|p| p.path == path)
            .map_or_else(|| "it is protected".to_string(), |p| p.reason.clone());
        return Some((
            path.to_path_buf(),
            format!("sandbox: `{shown_path}` cannot be moved or removed by shell commands: {why}"),
        ));
    }
    match view.protection_of(path) {
        Some(p) if p.effect == Effect::ReadOnly && p.path == root.join(".git") => Some((
            p.path.clone(),
            format!(
                "sandbox: `{shown_path}` is read-only to shell commands here: {} (this machine \
                 confines with Landlock alone, which cannot give git a layer of its own). Git \
                 commands that only read (status, diff, log) work; to stage or commit, ask \
                 to run the command outside the sandbox, or leave it to the user",
                p.reason
            ),
        )),
        Some(p) if p.effect == Effect::ReadOnly => Some((
            p.path.clone(),
            format!(
                "sandbox: `{shown_path}` is read-only to shell commands: {}",
                p.reason
            ),
        )),
        Some(p) if p.effect == Effect::Hidden => Some((
            p.path.clone(),
            format!(
                "sandbox: `{shown_path}` is hidden from shell commands: {}",
                p.reason
            ),
        )),
        _ if !view.under_writable_root(path) => {
            let roots = view
                .writable_roots
                .iter()
                .map(|r| shown(root, r))
                .collect::<Vec<_>>()
                .join(", ");
            let home = std::env::var_os("HOME").map(PathBuf::from);
            let in_home = home.as_deref().and_then(|h| {
                let first = path.strip_prefix(h).ok()?.components().next()?;
                Some(h.join(first))
            });
            Some(match in_home {
                Some(area) => {
                    let name = area
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    (
                        area,
                        format!(
                            "sandbox: `{shown_path}` is outside the places shell commands may \
                             write ({roots}); to let them, add `~/{name}` to shell.caches \
                             (written through a layer of the session's) or an absolute `read` \
                             rule for `~/{name}/**` to the agent's permissions"
                        ),
                    )
                }
                None => (
                    path.to_path_buf(),
                    format!(
                        "sandbox: `{shown_path}` is outside the places shell commands may write \
                         ({roots})"
                    ),
                ),
            })
        }
        _ => None,
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
            && !is_refusal(field)
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
    fn refusals_are_explained_by_the_rule_or_the_writable_roots() {
        let (_dir, root) = crate::permissions::test_support::repo();
        let view = crate::permissions::test_support::view_of(&root, "coder");
        let notes = refusal_notes(
            &view,
            &root,
            &root,
            "bash: line 1: .nop/config.yml: Read-only file system\n\
             sed: couldn't open temporary file .nop/sedX1: Read-only file system\n",
        );
        assert_eq!(
            notes,
            vec![
                "sandbox: `.nop/config.yml` is read-only to shell commands: `.nop/**` is \
                 read-only (nop's built-in floor)"
            ]
        );
        // npm names the path on another line than the error.
        let home = std::env::var("HOME").unwrap_or_default();
        if !home.is_empty() && !view.under_writable_root(Path::new(&home)) {
            let npm = format!(
                "npm error code EACCES\nnpm error syscall open\n\
                 npm error path {home}/.npm/_cacache/tmp/1a2b\n\
                 npm error Log files were not written to the directory: {home}/.npm/_logs\n"
            );
            let notes = refusal_notes(&view, &root, &root, &npm);
            assert_eq!(notes.len(), 1, "{notes:?}");
            assert!(
                notes[0].contains("is outside the places shell commands may write")
                    && notes[0].contains("add `~/.npm` to shell.caches")
                    && notes[0].ends_with(
                        "an absolute `read` rule for `~/.npm/**` to the agent's permissions"
                    ),
                "{notes:?}"
            );
        }
        // A refusal the sandbox did not cause gets the general reminder, once.
        let notes = refusal_notes(&view, &root, &root, "ssh: Permission denied (publickey).\n");
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].starts_with("sandbox: if that refusal came from the sandbox"));
    }

    /// Common credential variables of every shape the default filter knows, with values.
    const CREDENTIALS: [(&str, &str); 22] = [
        ("GH_PAT", "github_pat_11AAAA"),
        ("AZURE_DEVOPS_PAT", "ado-pat"),
        ("DATABASE_URL", "postgres://app:s3cret@db.internal:5432/app"),
        ("REDIS_URL", "redis://default:hunter2@cache:6379/0"),
        ("AMQP_ADDR", "amqps://guest:guest@mq/vhost"),
        (
            "GIT_REMOTE",
            "https://x-access-token:ghs_abc@github.com/o/r.git",
        ),
        ("SENTRY_DSN", "https://abc@o1.ingest.sentry.io/1"),
        ("DB_DSN", "host=db user=app"),
        ("NPM_CONFIG__AUTH", "dXNlcjpwYXNz"),
        ("MYSQL_PWD", "hunter2"),
        ("PGPASSWORD", "hunter2"),
        ("LDAP_PASSWD", "hunter2"),
        ("HTTP_AUTHORIZATION", "Basic dXNlcjpwYXNz"),
        ("BASIC_AUTH", "user:pass"),
        ("GOOGLE_APPLICATION_CREDENTIALS", "/home/u/gcp.json"),
        ("DOCKER_CREDENTIAL_HELPER", "pass"),
        ("SSH_PRIVATE_KEY_PATH", "/home/u/.ssh/id"),
        ("PRIVATE_REGISTRY_LOGIN", "u:p"),
        ("SSH_AUTH_SOCK", "/tmp/ssh-XXXX/agent.1"),
        ("AWS_SECRET_ACCESS_KEY", "aws"),
        ("SLACK_BOT_TOKEN", "xoxb"),
        ("stripe_api_key", "sk_live"),
    ];

    /// Ordinary variables that look like credentials to a careless filter.
    const ORDINARY: [(&str, &str); 12] = [
        ("PWD", "/home/u/project"),
        ("OLDPWD", "/home/u"),
        ("XAUTHORITY", "/run/user/1000/xauth"),
        ("GIT_AUTHOR_NAME", "Ann"),
        ("GIT_AUTHOR_EMAIL", "ann@example.com"),
        ("GIT_AUTHOR_DATE", "2024-01-01T00:00:00"),
        ("PATH", "/usr/bin:/bin"),
        ("HOME", "/home/u"),
        ("PUBLIC_URL", "https://example.com/app"),
        ("GIT_SSH_URL", "ssh://git@github.com/o/r.git"),
        ("HTTP_PROXY", "http://proxy:3128"),
        ("NOTE", "see http://a.b/c?x=1:2@3 and mailto:x@y"),
    ];

    #[test]
    fn credentials_are_removed_by_name_and_by_shape_and_ordinary_variables_kept() {
        let settings = SandboxSettings::from_config(&Default::default());
        let env = CREDENTIALS
            .iter()
            .chain(ORDINARY.iter())
            .map(|(n, v)| (OsString::from(n), OsString::from(v)));
        let (kept, removed) = filtered_env(&settings, env);
        let kept: Vec<_> = kept
            .iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        assert_eq!(kept, ORDINARY.map(|(n, _)| n.to_string()));
        let mut wanted = CREDENTIALS.map(|(n, _)| n.to_string()).to_vec();
        wanted.sort();
        assert_eq!(removed, wanted);
    }

    #[test]
    fn env_keep_lets_one_credential_through() {
        let settings = SandboxSettings {
            env_keep: vec!["database_url".into(), "SSH_AUTH_SOCK".into()],
            ..SandboxSettings::from_config(&Default::default())
        };
        let env = CREDENTIALS
            .iter()
            .map(|(n, v)| (OsString::from(n), OsString::from(v)));
        let (kept, _) = filtered_env(&settings, env);
        let kept: Vec<_> = kept
            .iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        assert_eq!(kept, vec!["DATABASE_URL", "SSH_AUTH_SOCK"]);
    }

    #[test]
    fn a_url_carries_a_password_only_in_its_user_info() {
        for (value, secret) in [
            ("postgres://u:p@h/db", true),
            ("mysql://u:p@h:3306", true),
            ("a,b redis://:p@h", true),
            ("https://u:p@h/x@y", true),
            ("postgres://u@h/db", false),
            ("postgres://u:@h/db", false),
            ("https://h/path?q=a:b@c", false),
            ("https://h/a:b@c", false),
            ("user:pass@host", false),
            ("", false),
        ] {
            assert_eq!(url_with_password(value), secret, "{value}");
        }
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
