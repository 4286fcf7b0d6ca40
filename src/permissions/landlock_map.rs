//! The Landlock-only mapping of the rules, for machines where user namespaces are unavailable.
//!
//! Landlock is an allow-list over directory hierarchies: a right granted on a directory holds for
//! everything beneath it, and nothing can be taken back below. So the policy's first-match glob
//! rules are turned into grants by walking the tree: a directory whose whole subtree gets one
//! answer from the rules gets one grant; a directory where the answer differs beneath it is
//! descended into, and its files and subdirectories are granted one by one.
//!
//! What follows, said in the view's limits and in docs/permissions.md:
//! - Reads: everywhere outside the repository (system files, toolchains) except what absolute
//!   `deny`/`ask` rules name; inside it, what the rules let the agent read.
//! - Writes: where the rules say `read` (read and write), the temp directories, and device files
//!   such as /dev/null. `ask` counts as no.
//! - In a "mixed" directory (one with a protected path beneath it: the repository root because
//!   of `.nop/`, `.git/` because of its hooks), existing files and whole writable subdirectories
//!   are granted, but entries cannot be created or removed in that directory itself: a Landlock
//!   right to create there would hold in `.nop/.permissions/` too. So `mkdir build` at the root
//!   and `git commit` fail.
//! - The walk visits at most 50,000 entries; beyond that nothing more is granted.

use std::path::{Path, PathBuf};

use super::policy::{Access, FileAccess, FileRule, Policy};
use super::shell_view::{DEVICES, Effect, ShellOptions, ShellView};
use crate::sandbox::{Access as Grant_, Grant, Mechanism, Spec};

/// Entries visited at most while walking mixed directories; beyond it, nothing more is granted.
const BUDGET: usize = 50_000;

/// Mixed directories named one by one in the limits.
const SHOWN_MIXED: usize = 8;

/// The Landlock-only confinement of shell commands under `policy`.
pub(super) fn landlock_view(policy: &Policy, options: &ShellOptions) -> ShellView {
    let mut walker = Walker {
        policy,
        grants: Vec::new(),
        budget: BUDGET,
        mixed: Vec::new(),
        unlistable: Vec::new(),
    };
    walker.read_grants(Path::new("/"));
    // Plan mode: the repository is read as the rules allow, written nowhere.
    let repository = if options.read_only {
        Access::Read
    } else {
        Access::Write
    };
    walker.walk(policy.root(), repository);
    // Writable places outside the repository that rules name (`/tmp/**: read`).
    let mut walked: Vec<PathBuf> = Vec::new();
    for set in policy.sets().iter().filter(|_| !options.read_only) {
        for rule in &set.rules {
            if rule.is_absolute() && rule.is_subtree() && rule.access == FileAccess::Read {
                let path = PathBuf::from(rule.literal_prefix());
                if path.exists() && !path.starts_with(policy.root()) {
                    walker.walk(&path, Access::Write);
                    walked.push(path);
                }
            }
        }
    }
    // The temp directories: writable whole unless a rule names something in or above them.
    for dir in &options.temp_dirs {
        if walked.iter().any(|w| dir.starts_with(w)) {
            continue;
        }
        if absolute_blocks(policy, dir) == Uniformity::All(true) {
            walker.grants.push(Grant {
                path: dir.clone(),
                access: Grant_::ReadWrite,
            });
        } else {
            walker.walk(dir, Access::Write);
        }
    }
    for device in DEVICES {
        walker.grants.push(Grant {
            path: PathBuf::from(device),
            access: Grant_::ReadWriteExisting,
        });
    }

    let mut limits = vec![
        "user namespaces are unavailable, so shell commands run under Landlock alone, which \
         cannot take a right back beneath a directory"
            .to_string(),
    ];
    if !walker.mixed.is_empty() {
        limits.push(format!(
            "no entry can be created, removed or renamed directly in {} (each holds a protected \
             path): `mkdir`, new files and `sed -i` there fail, and so does `git commit` when .git \
             is one of them; write-file and edit-file still can",
            listed(&walker.mixed)
        ));
    }
    if !walker.unlistable.is_empty() {
        limits.push(format!(
            "{} cannot be listed (`ls`, `find`, `git status` miss what is in them), though the \
             files in them can be read",
            listed(&walker.unlistable)
        ));
    }
    if walker.budget == 0 {
        limits.push(format!(
            "the tree has more than {BUDGET} entries where rules differ; paths beyond them were \
             left unwritable"
        ));
        tracing::warn!(
            op = "sandbox",
            result = "partial",
            "the repository is too large to map fully; some paths were left unwritable"
        );
    }
    limits.push(
        "glob rules (`**/*.pem`) hold for the files that exist when a command starts".to_string(),
    );
    if !options.network {
        limits.push(
            "network: deny refuses TCP connect and bind, not UDP (a network namespace would)"
                .to_string(),
        );
        limits.extend(crate::sandbox::abstract_socket_shortfall());
    }

    // What the namespace view would protect, for explanations; pins mean nothing here.
    let exact = super::shell_view::namespace_view(
        policy,
        &ShellOptions {
            mechanism: Mechanism::Namespaces,
            ..options.clone()
        },
    );
    let writable_roots = exact.writable_roots;
    let protections = exact
        .protections
        .into_iter()
        .filter(|p| p.effect != Effect::Pinned)
        .collect();
    ShellView {
        spec: Spec {
            mechanism: Mechanism::Landlock,
            required: options.required,
            grants: walker.grants,
            mounts: Vec::new(),
            network: options.network,
            parent: Some(std::process::id()),
        },
        writable_roots,
        protections,
        limits,
        git_layers: Vec::new(),
    }
}

/// The first few of `paths`, and how many more.
fn listed(paths: &[PathBuf]) -> String {
    let shown: Vec<String> = paths
        .iter()
        .take(SHOWN_MIXED)
        .map(|p| p.display().to_string())
        .collect();
    let more = paths.len().saturating_sub(SHOWN_MIXED);
    if more > 0 {
        format!("{} and {more} more", shown.join(", "))
    } else {
        shown.join(", ")
    }
}

struct Walker<'a> {
    policy: &'a Policy,
    grants: Vec<Grant>,
    budget: usize,
    /// Directories the rules make writable in part only (no grant on the directory itself).
    mixed: Vec<PathBuf>,
    /// Directories readable in part only: they cannot be listed.
    unlistable: Vec<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Uniformity {
    /// Every path beneath gets this answer.
    All(bool),
    Mixed,
}

impl Walker<'_> {
    /// Reads: outside the repository everything not denied by an absolute rule; inside, the
    /// rules.
    fn read_grants(&mut self, dir: &Path) {
        let root = self.policy.root();
        if dir.starts_with(root) {
            self.walk(dir, Access::Read);
            return;
        }
        let leads_to_root = root.starts_with(dir);
        let blocked = absolute_blocks(self.policy, dir);
        if !leads_to_root && blocked == Uniformity::All(true) {
            self.grants.push(Grant {
                path: dir.to_path_buf(),
                access: Grant_::Read,
            });
            return;
        }
        if blocked == Uniformity::All(false) {
            return;
        }
        self.unlistable.push(dir.to_path_buf());
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            if self.budget == 0 {
                return;
            }
            self.budget -= 1;
            let path = entry.path();
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            if is_dir {
                self.read_grants(&path);
            } else if absolute_blocks(self.policy, &path) != Uniformity::All(false) {
                self.grants.push(Grant {
                    path,
                    access: Grant_::Read,
                });
            }
        }
    }

    /// Grants `access` on `dir` whole when the rules answer the same beneath it, else entry by
    /// entry.
    fn walk(&mut self, dir: &Path, access: Access) {
        let grant = match access {
            Access::Read => Grant_::Read,
            Access::Write => Grant_::ReadWrite,
        };
        match uniformity(self.policy, dir, access) {
            Uniformity::All(true) => self.grants.push(Grant {
                path: dir.to_path_buf(),
                access: grant,
            }),
            Uniformity::All(false) => {}
            Uniformity::Mixed => {
                match access {
                    Access::Write => self.mixed.push(dir.to_path_buf()),
                    Access::Read => self.unlistable.push(dir.to_path_buf()),
                }
                let Ok(entries) = std::fs::read_dir(dir) else {
                    return;
                };
                for entry in entries.flatten() {
                    if self.budget == 0 {
                        return;
                    }
                    self.budget -= 1;
                    let path = entry.path();
                    // Symbolic links are not followed: what they point at is judged where it is.
                    let Ok(kind) = entry.file_type() else {
                        continue;
                    };
                    if kind.is_dir() {
                        self.walk(&path, access);
                    } else if !kind.is_symlink()
                        && self.policy.check_resolved(&path, access).is_allowed()
                    {
                        self.grants.push(Grant {
                            path,
                            access: grant,
                        });
                    }
                }
            }
        }
    }
}

/// Outside the repository: whether absolute deny/ask rules leave `dir` wholly readable.
fn absolute_blocks(policy: &Policy, dir: &Path) -> Uniformity {
    let mut mixed = false;
    for set in policy.sets() {
        for rule in set
            .rules
            .iter()
            .filter(|r| r.is_absolute() && matches!(r.access, FileAccess::Deny | FileAccess::Ask))
        {
            let prefix = Path::new(rule.literal_prefix());
            if rule.is_subtree() && dir.starts_with(prefix) {
                return Uniformity::All(false);
            }
            if prefix.starts_with(dir) || dir.starts_with(prefix) {
                mixed = true;
            }
        }
    }
    if mixed {
        Uniformity::Mixed
    } else {
        Uniformity::All(true)
    }
}

/// Whether every path beneath `dir` (absolute) gets the same answer for `access` in every rule
/// set of the policy.
fn uniformity(policy: &Policy, dir: &Path, access: Access) -> Uniformity {
    let mut all_allowed = true;
    for set in policy.sets() {
        match set_uniformity(
            policy.root(),
            super::policy::floor().iter().chain(set.rules.iter()),
            dir,
            access,
        ) {
            Uniformity::All(false) => return Uniformity::All(false),
            Uniformity::Mixed => all_allowed = false,
            Uniformity::All(true) => {}
        }
    }
    if all_allowed {
        Uniformity::All(true)
    } else {
        Uniformity::Mixed
    }
}

fn set_uniformity<'a>(
    root: &Path,
    rules: impl Iterator<Item = &'a FileRule>,
    dir: &Path,
    access: Access,
) -> Uniformity {
    for rule in rules {
        let prefix = if rule.is_absolute() {
            PathBuf::from(rule.literal_prefix())
        } else {
            root.join(rule.literal_prefix())
        };
        let covers = dir.starts_with(&prefix);
        let beneath = prefix.starts_with(dir) && prefix != dir;
        if rule.is_subtree() && covers {
            let allowed = match (rule.access, access) {
                (FileAccess::Read, _) | (FileAccess::ReadOnly, Access::Read) => true,
                (FileAccess::ReadOnly, Access::Write)
                | (FileAccess::Deny, _)
                | (FileAccess::Ask, _) => false,
            };
            return Uniformity::All(allowed);
        }
        if covers || beneath {
            return Uniformity::Mixed;
        }
    }
    // No rule reaches it: denied (inside the repository, as everywhere the rules do not name).
    Uniformity::All(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_rules_protect_nop_and_keep_the_rest_writable() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let root = std::fs::canonicalize(dir.path())?;
        crate::workspace::init(&root, false, chrono::Utc::now())?;
        std::fs::create_dir_all(root.join("src/deep"))?;
        std::fs::write(root.join("README.md"), "x")?;
        let policy = crate::permissions::load_policy(&root, "coder")?;
        let view = landlock_view(
            &policy,
            &ShellOptions {
                layers: Default::default(),
                read_only: false,
                mechanism: Mechanism::Landlock,
                required: false,
                network: true,
                temp_dirs: Vec::new(),
            },
        );
        let spec = view.spec;
        let writable = |p: &Path| {
            spec.grants
                .iter()
                .any(|g| g.access == Grant_::ReadWrite && p.starts_with(&g.path))
        };
        let readable = |p: &Path| spec.grants.iter().any(|g| p.starts_with(&g.path));
        assert!(writable(&root.join("src/deep/new.rs")));
        assert!(writable(&root.join("README.md")));
        assert!(!writable(&root.join(".nop/config.yml")));
        assert!(!writable(&root.join(".nop/.permissions/agent-default.yml")));
        assert!(readable(&root.join(".nop/config.yml")));
        assert!(!readable(&root.join(".nop/.permissions/agent-default.yml")));
        assert!(readable(Path::new("/usr/bin/env")));
        assert!(!writable(Path::new("/usr/bin/env")));
        // The repository root is mixed: no grant on it as a whole, and the limits say so.
        assert!(!spec.grants.iter().any(|g| g.path == root));
        assert!(
            view.limits
                .iter()
                .any(|l| l.contains(&root.display().to_string())),
            "{:?}",
            view.limits
        );
        Ok(())
    }
}
