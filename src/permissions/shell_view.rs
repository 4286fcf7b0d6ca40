//! What an agent's rules become for its `shell` commands: the sandbox [`Spec`] and an account of
//! it (writable roots, every protected path with the rule behind it, and what the mechanism in
//! force cannot express), for the tool, `nop sandbox check` and the notes on refused commands.
//!
//! With the namespace mechanism the rules map exactly onto paths that exist when the command
//! starts. Landlock grants `write` beneath whole writable roots (the repository, the temp
//! directories, absolute `read` rules) and `read` everywhere else; the view then takes back what
//! the rules do not allow beneath them:
//! - every path a rule names (a literal path, a `dir/**` subtree, each existing match of a glob
//!   such as `**/*.pem`) whose level (write, read, none) differs from the level around it gets a
//!   mount: read-only, writable, or a mask;
//! - every writable directory between a writable root and a protected path is pinned, so the
//!   command cannot rename it away and put an unprotected copy in its place.
//!
//! The level around a path is that of its nearest named ancestor, or "write" beneath a writable
//! root and "read" elsewhere (system files and toolchains stay readable, except what absolute
//! `deny` rules name). A directory's level for what lies beneath it is what its subtree rules
//! say about a new name in it; glob rules count only for the names that exist.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::policy::{Access, Decision, FileRule, Policy, floor};
use crate::sandbox::{Access as GrantAccess, Grant, Mechanism, Mount, MountKind, Spec};

/// Device files every shell needs to write (`> /dev/null`). Not `/dev/tty`: commands have no
/// controlling terminal (the helper calls setsid), and nothing is to reach the user's terminal.
pub(super) const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

/// Entries a glob rule outside the repository may make nop visit (a rule such as `/home/**/.env`
/// would otherwise walk a whole disk).
const OUTSIDE_GLOB_BUDGET: usize = 200_000;

/// A name no rule is expected to match except through a subtree (`dir/**`): the probe for the
/// level of what is created in a directory.
const PROBE_NAME: &str = "nop_sandbox_probe_name";

/// How shell commands are to be confined.
#[derive(Debug, Clone)]
pub struct ShellOptions {
    pub mechanism: Mechanism,
    /// Refuse to run rather than run with less confinement than the spec asks for.
    pub required: bool,
    /// Whether commands may use the network.
    pub network: bool,
    /// Scratch directories every command may write (`/tmp`, `$TMPDIR`, `/dev/shm`), unless a rule
    /// names them with less.
    pub temp_dirs: Vec<PathBuf>,
    /// Where writes that must not reach their place go instead (namespaces only).
    pub layers: Layers,
    /// Plan mode: nothing the rules make writable is, but the temp directories (and the
    /// layers' caches): commands read, nothing changes.
    pub read_only: bool,
}

/// The copy-on-write layers of one command ([`MountKind::Overlay`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Layers {
    /// A fresh directory of nop's for this command's git layers: `.git` (and the git directories
    /// a `.git` file names) are written through overlays whose upper layers are `git/<n>`
    /// beneath it; nop applies what git's objects, refs and index need after the command.
    /// `None`: read-only, as without layers.
    pub git: Option<PathBuf>,
    /// Caches outside the writable roots (`~/.cargo`, `~/.npm`, `~/.cache`…), each with the
    /// session's layer it is written through: the real one is never changed.
    pub caches: Vec<(PathBuf, PathBuf)>,
    /// Plan mode ([`ShellOptions::read_only`]): nothing of the repository is written.
    pub read_only: bool,
}

impl ShellOptions {
    /// The usual temp directories that exist here, canonical: `/tmp`, `tmpdir` (the value of
    /// `TMPDIR`) and `/dev/shm`.
    pub fn temp_dirs(tmpdir: Option<&Path>) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = Vec::new();
        for dir in [Some(Path::new("/tmp")), tmpdir, Some(Path::new("/dev/shm"))]
            .into_iter()
            .flatten()
        {
            if let Ok(canonical) = std::fs::canonicalize(dir)
                && canonical.is_dir()
                && canonical != Path::new("/")
                && !dirs.contains(&canonical)
            {
                dirs.push(canonical);
            }
        }
        dirs
    }
}

/// The confinement of shell commands under a policy.
#[derive(Debug, Clone, Serialize)]
pub struct ShellView {
    pub spec: Spec,
    /// Where commands may create, change and remove files (minus the protections beneath).
    pub writable_roots: Vec<PathBuf>,
    /// Paths the view treats apart from what is around them, and why.
    pub protections: Vec<Protection>,
    /// What the rules say that this mechanism cannot do for the shell, one sentence each.
    pub limits: Vec<String>,
    /// The git directories written through a layer, each with its layer: what nop applies
    /// after the command.
    #[serde(skip)]
    pub git_layers: Vec<(PathBuf, PathBuf)>,
}

/// A path the shell sees differently from what is around it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Protection {
    pub path: PathBuf,
    pub effect: Effect,
    /// The rule that decided it and where it comes from, or why a directory is pinned.
    pub reason: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Effect {
    /// Readable, not writable.
    ReadOnly,
    /// Neither readable nor listable nor writable.
    Hidden,
    /// Writable again beneath a read-only or hidden path.
    Writable,
    /// Writable, but cannot be renamed or removed: it holds protected paths.
    Pinned,
    /// Written through a layer of nop's: the real one is never changed by the command (a git
    /// directory: what git's objects, refs and index need is applied after it).
    Layered,
}

impl Effect {
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::ReadOnly => "read-only",
            Effect::Hidden => "hidden",
            Effect::Writable => "writable",
            Effect::Pinned => "pinned",
            Effect::Layered => "copy-on-write",
        }
    }
}

/// What the shell may do at a path, weakest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    None,
    Read,
    Write,
}

impl ShellView {
    /// The protection that decides what the shell may do at `path` (canonical): the deepest one
    /// at or above it.
    pub fn protection_of(&self, path: &Path) -> Option<&Protection> {
        self.protections
            .iter()
            .filter(|p| path.starts_with(&p.path) && p.effect != Effect::Pinned)
            .max_by_key(|p| p.path.components().count())
    }

    /// Whether `path` (canonical) lies beneath a writable root.
    pub fn under_writable_root(&self, path: &Path) -> bool {
        self.writable_roots.iter().any(|r| path.starts_with(r))
    }

    /// What the shell may do at `path` (canonical), in words, with the reason.
    pub fn describe(&self, path: &Path) -> String {
        if let Some(pin) = self
            .protections
            .iter()
            .find(|p| p.path == path && p.effect == Effect::Pinned)
        {
            return format!("writable, but cannot be moved or removed ({})", pin.reason);
        }
        match self.protection_of(path) {
            Some(p) => match p.effect {
                Effect::ReadOnly => format!("read-only ({})", p.reason),
                Effect::Hidden => {
                    format!("hidden: cannot be read, listed or written ({})", p.reason)
                }
                Effect::Writable | Effect::Pinned => format!("writable ({})", p.reason),
                Effect::Layered => format!("copy-on-write ({})", p.reason),
            },
            None if self.under_writable_root(path) => "writable".to_string(),
            None => "read-only: outside the places shell commands may write".to_string(),
        }
    }
}

/// Writable roots: the repository, the temp directories, and the subtrees absolute `read`
/// rules name, existing and canonical, outermost first.
pub(super) fn writable_roots(policy: &Policy, options: &ShellOptions) -> Vec<PathBuf> {
    if options.read_only {
        return options.temp_dirs.clone();
    }
    let mut roots = vec![policy.root().to_path_buf()];
    roots.extend(options.temp_dirs.iter().cloned());
    for set in policy.sets() {
        for rule in &set.rules {
            if rule.is_absolute() && rule.is_subtree() {
                let Ok(path) = std::fs::canonicalize(rule.literal_prefix()) else {
                    continue;
                };
                if level_beneath(policy, &path).0 == Level::Write && path != Path::new("/") {
                    roots.push(path);
                }
            }
        }
    }
    roots.sort_by_key(|p| p.components().count());
    let mut out: Vec<PathBuf> = Vec::new();
    for root in roots {
        if !out.iter().any(|r| root.starts_with(r)) {
            out.push(root);
        }
    }
    out
}

pub(super) fn namespace_view(policy: &Policy, options: &ShellOptions) -> ShellView {
    let root = policy.root();
    let roots = writable_roots(policy, options);
    let mut limits = Vec::new();

    // Every path some rule names, plus the repository root itself.
    let mut candidates: Vec<PathBuf> = vec![root.to_path_buf()];
    for set in policy.sets() {
        for rule in floor().iter().chain(set.rules.iter()) {
            named_paths(root, rule, &mut candidates, &mut limits);
        }
    }
    // The git directories a `.git` pointer file names (a worktree's, a submodule's).
    let git = policy.git_dirs().to_vec();
    candidates.extend(git.iter().cloned());
    candidates.sort_by(|a, b| {
        (a.components().count(), a.as_path()).cmp(&(b.components().count(), b.as_path()))
    });
    candidates.dedup();

    let under_root = |p: &Path| roots.iter().any(|r| p.starts_with(r));
    let mut levels: BTreeMap<PathBuf, Level> = BTreeMap::new();
    let level_around = |levels: &BTreeMap<PathBuf, Level>, p: &Path| {
        p.ancestors()
            .skip(1)
            .find_map(|a| levels.get(a).copied())
            .unwrap_or(if under_root(p) {
                Level::Write
            } else {
                Level::Read
            })
    };
    let mut mounts = Vec::new();
    let mut protections = Vec::new();
    for path in &candidates {
        let (mut level, mut reason) = level_at(policy, path, path == root);
        if git.contains(path) && level > Level::Read {
            level = Level::Read;
            reason = "git metadata that git runs later, outside any sandbox (nop's built-in floor)"
                .to_string();
        }
        let around = level_around(&levels, path);
        levels.insert(path.clone(), level);
        if level == around {
            continue;
        }
        let (kind, effect) = match level {
            // Plan mode: what the rules let be written is read-only as it lies.
            Level::Write if options.read_only => continue,
            Level::Write if !under_root(path) => {
                limits.push(format!(
                    "{} is writable by the rules but lies outside the writable roots; name it \
                     with an absolute `read` rule on its directory (`{}/**`)",
                    path.display(),
                    path.display()
                ));
                continue;
            }
            Level::Write => (MountKind::Writable, Effect::Writable),
            Level::Read => (MountKind::ReadOnly, Effect::ReadOnly),
            Level::None => (MountKind::Mask, Effect::Hidden),
        };
        mounts.push(Mount::new(path.clone(), kind));
        protections.push(Protection {
            path: path.clone(),
            effect,
            reason,
        });
    }

    // Pins: writable directories between a writable root and a protected path.
    let mut pins: Vec<PathBuf> = Vec::new();
    for m in &mounts {
        if m.kind == MountKind::Writable {
            continue;
        }
        let Some(base) = roots.iter().find(|r| m.path.starts_with(r)) else {
            continue;
        };
        for dir in m.path.ancestors().skip(1) {
            if !dir.starts_with(base) || dir == base {
                break;
            }
            let writable = levels
                .get(dir)
                .copied()
                .unwrap_or_else(|| level_around(&levels, dir))
                == Level::Write;
            if writable && !mounts.iter().any(|m| m.path == dir) && !pins.iter().any(|p| p == dir) {
                pins.push(dir.to_path_buf());
            }
        }
    }
    for pin in pins {
        protections.push(Protection {
            reason: "it holds protected paths".to_string(),
            path: pin.clone(),
            effect: Effect::Pinned,
        });
        mounts.push(Mount::new(pin, MountKind::Writable));
    }
    mounts.sort_by(|a, b| {
        (a.path.components().count(), &a.path).cmp(&(b.path.components().count(), &b.path))
    });
    protections.sort_by(|a, b| a.path.cmp(&b.path));

    let git_layers = layered(&mut mounts, &mut protections, root, &git, &roots, options);
    let mut grants = vec![Grant {
        path: PathBuf::from("/"),
        access: GrantAccess::Read,
    }];
    grants.extend(roots.iter().map(|r| Grant {
        path: r.clone(),
        access: GrantAccess::ReadWrite,
    }));
    // What is written through a layer outside the writable roots.
    grants.extend(
        mounts
            .iter()
            .filter(|m| m.kind == MountKind::Overlay && !under_root(&m.path))
            .map(|m| Grant {
                path: m.path.clone(),
                access: GrantAccess::ReadWrite,
            }),
    );
    grants.extend(DEVICES.iter().map(|d| Grant {
        path: PathBuf::from(d),
        access: GrantAccess::ReadWriteExisting,
    }));
    ShellView {
        spec: Spec {
            mechanism: Mechanism::Namespaces,
            required: options.required,
            grants,
            mounts,
            network: options.network,
            parent: Some(std::process::id()),
        },
        writable_roots: roots,
        protections,
        limits,
        git_layers,
    }
}

/// Puts `options.layers` into the view: the repository's `.git` and the git directories a
/// `.git` file names (`git`) written through overlays instead of read-only, and each cache that
/// the view leaves readable written through its session layer. Returns the git directories with
/// their layers.
fn layered(
    mounts: &mut Vec<Mount>,
    protections: &mut [Protection],
    root: &Path,
    git: &[PathBuf],
    roots: &[PathBuf],
    options: &ShellOptions,
) -> Vec<(PathBuf, PathBuf)> {
    let mut out = Vec::new();
    if let Some(base) = &options.layers.git {
        // The directory the layers are made in, when it lies where commands may write (a
        // temp directory): hidden, so that only the overlays write the layers.
        if let Some(parent) = base.parent()
            && roots.iter().any(|r| parent.starts_with(r))
            && parent.is_dir()
            && !mounts.iter().any(|m| m.path == parent)
        {
            mounts.push(Mount::new(parent.to_path_buf(), MountKind::Mask));
        }
        let dot_git = root.join(".git");
        let dirs = std::iter::once(&dot_git)
            .filter(|d| d.is_dir())
            .chain(git.iter());
        for (n, dir) in dirs.enumerate() {
            let layer = base.join(n.to_string());
            match mounts.iter_mut().find(|m| m.path == *dir) {
                Some(mount) if mount.kind == MountKind::ReadOnly => {
                    mount.kind = MountKind::Overlay;
                    mount.layer = Some(layer.clone());
                }
                // Hidden or writable by the rules: left as the view has it.
                Some(_) => continue,
                // Read-only as what is around it (a worktree's git directories, outside the
                // writable roots): a mount of its own.
                None => {
                    let mut mount = Mount::new(dir.clone(), MountKind::Overlay);
                    mount.layer = Some(layer.clone());
                    mounts.push(mount);
                }
            }
            if let Some(p) = protections.iter_mut().find(|p| p.path == *dir) {
                p.effect = Effect::Layered;
                p.reason = "git's objects, refs and index are applied after each command; its \
                            configuration, hooks and pointers never"
                    .to_string();
            }
            out.push((dir.clone(), layer));
        }
    }
    for (dir, layer) in &options.layers.caches {
        // Not where the command may write anyway, nor where the view already decides.
        let decided = mounts.iter().any(|m| dir.starts_with(&m.path));
        let writable = roots
            .iter()
            .any(|r| dir.starts_with(r) || r.starts_with(dir));
        if decided || writable || !dir.is_dir() {
            continue;
        }
        let mut mount = Mount::new(dir.clone(), MountKind::Overlay);
        mount.layer = Some(layer.clone());
        mounts.push(mount);
    }
    mounts.sort_by(|a, b| {
        (a.path.components().count(), &a.path).cmp(&(b.path.components().count(), &b.path))
    });
    out
}

/// The existing paths `rule` names, canonical: its literal path or subtree, or each match of a
/// glob (symbolic links are not followed: what they point at is judged where it is).
fn named_paths(root: &Path, rule: &FileRule, out: &mut Vec<PathBuf>, limits: &mut Vec<String>) {
    let prefix = if rule.is_absolute() {
        PathBuf::from(rule.literal_prefix())
    } else {
        root.join(rule.literal_prefix())
    };
    if !rule.is_glob() {
        if let Ok(path) = std::fs::canonicalize(&prefix) {
            out.push(path);
        }
        return;
    }
    let Ok(start) = std::fs::canonicalize(&prefix) else {
        return;
    };
    let mut budget = if start.starts_with(root) {
        usize::MAX
    } else {
        OUTSIDE_GLOB_BUDGET
    };
    let mut stack = vec![start];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if budget == 0 {
                limits.push(format!(
                    "`{}` was matched against the first {OUTSIDE_GLOB_BUDGET} entries beneath \
                     {} only",
                    rule.pattern,
                    prefix.display()
                ));
                return;
            }
            budget -= 1;
            let path = entry.path();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_symlink() {
                continue;
            }
            let relative = path
                .strip_prefix(root)
                .ok()
                .map(|r| r.to_string_lossy().into_owned());
            if rule.matches(relative.as_deref(), &path.to_string_lossy()) {
                out.push(path.clone());
            }
            if kind.is_dir() {
                stack.push(path);
            }
        }
    }
}

/// The level at `path` and the rule that decided it. For a directory, what may be done beneath
/// it (a new name in it, judged by the subtree rules); a directory the rules deny is hidden
/// whatever lies beneath. A writable root is judged by what lies beneath alone.
fn level_at(policy: &Policy, path: &Path, is_root: bool) -> (Level, String) {
    let own = level_of(policy, path, |_| true);
    if !path.is_dir() || (own.0 == Level::None && !is_root) {
        return own;
    }
    level_beneath(policy, path)
}

fn level_beneath(policy: &Policy, dir: &Path) -> (Level, String) {
    level_of(policy, &dir.join(PROBE_NAME), |r: &FileRule| !r.is_glob())
}

fn level_of(
    policy: &Policy,
    path: &Path,
    only: impl Fn(&FileRule) -> bool + Copy,
) -> (Level, String) {
    let write = policy.check_resolved_by(path, Access::Write, only);
    if let Decision::Allow { source } = &write {
        return (Level::Write, format!("allowed by {source}"));
    }
    let read = policy.check_resolved_by(path, Access::Read, only);
    let why = |d: &Decision| match d {
        Decision::Deny {
            reason,
            source: Some(source),
        } => format!("{reason} ({source})"),
        Decision::Deny {
            reason,
            source: None,
        } => reason.clone(),
        Decision::Ask { source } => {
            format!("an `ask` rule ({source}): shell commands cannot stop to ask")
        }
        Decision::Allow { source } => format!("allowed by {source}"),
    };
    match &read {
        Decision::Allow { .. } => (Level::Read, why(&write)),
        _ => (Level::None, why(&read)),
    }
}

/// A repository set up by `nop init` and the namespace view of an agent's rules in it, for unit
/// tests.
#[cfg(test)]
pub(crate) mod test_support {
    use super::*;

    /// A fresh repository after `nop init`, under /var/tmp (not /tmp, which the shipped rules
    /// make a writable root of its own); canonical root.
    pub(crate) fn repo() -> (tempfile::TempDir, PathBuf) {
        std::fs::create_dir_all("/var/tmp/nop-tests").unwrap();
        let dir = tempfile::tempdir_in("/var/tmp/nop-tests").unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        crate::workspace::init(&root, false, chrono::Utc::now()).unwrap();
        (dir, root)
    }

    /// The namespace view of `agent`'s rules in `root`, with no temp directories; its rules
    /// are trusted as they are.
    pub(crate) fn view_of(root: &Path, agent: &str) -> ShellView {
        crate::trust::accept_workspace(&crate::trust::process_env(), root).unwrap();
        let policy = crate::permissions::load_policy(root, agent).unwrap();
        crate::permissions::shell_view(
            &policy,
            &ShellOptions {
                layers: Default::default(),
                read_only: false,
                mechanism: Mechanism::Namespaces,
                required: false,
                network: true,
                temp_dirs: Vec::new(),
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::view_of;
    use super::*;

    /// The view's mounts but the one that masks the unit tests' trust record.
    fn mounts(view: &ShellView, root: &Path) -> Vec<(String, MountKind)> {
        let home = crate::trust::process_env()["HOME"].clone();
        view.spec
            .mounts
            .iter()
            .filter(|m| !m.path.starts_with(&home))
            .map(|m| {
                let shown = m.path.strip_prefix(root).unwrap_or(&m.path);
                (shown.display().to_string(), m.kind)
            })
            .collect()
    }

    fn repo() -> (tempfile::TempDir, PathBuf) {
        let (dir, root) = super::test_support::repo();
        std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
        std::fs::write(root.join(".git/config"), "[core]\n").unwrap();
        std::fs::create_dir_all(root.join("src")).unwrap();
        (dir, root)
    }

    #[test]
    fn the_default_rules_protect_nop_and_git() {
        let (_dir, root) = repo();
        std::fs::create_dir_all(root.join(".nop/checkpoints")).unwrap();
        let view = view_of(&root, "coder");
        assert_eq!(
            mounts(&view, &root),
            vec![
                (".git".to_string(), MountKind::ReadOnly),
                (".nop".to_string(), MountKind::ReadOnly),
                (".nop/.permissions".to_string(), MountKind::Mask),
                (".nop/checkpoints".to_string(), MountKind::Mask),
            ]
        );
        // The default rules name /tmp.
        assert_eq!(
            view.writable_roots,
            vec![PathBuf::from("/tmp"), root.clone()]
        );
        assert_eq!(view.describe(&root.join("src/new.rs")), "writable");
        assert!(
            view.describe(&root.join(".nop/.permissions/agent-default.yml"))
                .starts_with("hidden"),
        );
        assert!(
            view.describe(&root.join(".nop/config.yml"))
                .starts_with("read-only (`.nop/**` is read-only (nop's built-in floor))")
        );
        assert!(view.limits.is_empty(), "{:?}", view.limits);
    }

    #[test]
    fn globs_name_each_existing_match_and_masks_keep_holes() {
        let (_dir, root) = repo();
        std::fs::create_dir_all(root.join("keys/public")).unwrap();
        std::fs::write(root.join("keys/a.pem"), "x").unwrap();
        std::fs::write(root.join("src/b.pem"), "x").unwrap();
        std::fs::write(
            root.join(".nop/.permissions/agent-default.yml"),
            "file-access:\n  - pattern: \"keys/public/**\"\n    access: read-only\n  \
             - pattern: \"keys/**\"\n    access: deny\n  - pattern: \"**/*.pem\"\n    \
             access: deny\n  - pattern: \"**\"\n    access: read\n",
        )
        .unwrap();
        let view = view_of(&root, "coder");
        let got = mounts(&view, &root);
        assert!(got.contains(&("keys".into(), MountKind::Mask)), "{got:?}");
        assert!(
            got.contains(&("keys/public".into(), MountKind::ReadOnly)),
            "{got:?}"
        );
        assert!(
            got.contains(&("src/b.pem".into(), MountKind::Mask)),
            "{got:?}"
        );
        // Inside the hidden directory: already hidden, no mount of its own.
        assert!(!got.iter().any(|(p, _)| p == "keys/a.pem"), "{got:?}");
        // src holds a protected file: pinned.
        assert!(
            got.contains(&("src".into(), MountKind::Writable)),
            "{got:?}"
        );
    }

    #[test]
    fn a_read_only_repository_with_a_writable_subtree() {
        let (_dir, root) = repo();
        std::fs::create_dir_all(root.join("docs")).unwrap();
        std::fs::write(
            root.join(".nop/.permissions/agent-default.yml"),
            "file-access:\n  - pattern: \"docs/**\"\n    access: read\n  \
             - pattern: \"**\"\n    access: read-only\n",
        )
        .unwrap();
        let view = view_of(&root, "coder");
        let got = mounts(&view, &root);
        assert_eq!(got[0], (String::new(), MountKind::ReadOnly), "{got:?}");
        assert!(
            got.contains(&("docs".into(), MountKind::Writable)),
            "{got:?}"
        );
        // Beneath a read-only root nothing needs pinning.
        assert!(
            !got.contains(&(".git".into(), MountKind::Writable)),
            "{got:?}"
        );
    }
}
