//! The Landlock rules of a confined `shell` command, computed from the agent's policy.
//!
//! Landlock is an allow-list over directory hierarchies: a right granted on a directory holds for
//! everything beneath it, and nothing can be taken back below. So the policy's first-match glob
//! rules are turned into grants by walking the tree: a directory whose whole subtree gets one
//! answer from the rules gets one grant; a directory where the answer differs beneath it is
//! descended into, and its files and subdirectories are granted one by one.
//!
//! What follows, stated plainly in the README:
//! - Reads: everywhere outside the repository (system files, toolchains) except what absolute
//!   `deny`/`ask` rules name; inside it, what the rules let the agent read.
//! - Writes: only where the rules say `read` (read and write), plus device files such as
//!   /dev/null. `ask` counts as no: a shell command cannot stop to ask about each file.
//! - In a "mixed" directory (one with a protected path beneath it, such as the repository root
//!   because of `.nop/`), existing files and whole writable subdirectories are granted, but entries
//!   cannot be created or removed in that directory itself: a Landlock right to create there would
//!   hold in `.nop/.permissions/` too.

use std::path::{Path, PathBuf};

use super::policy::{Access, FileAccess, FileRule, Policy};
use crate::sandbox::{Access as Grant_, Grant, Spec};

/// Entries visited at most while walking mixed directories; beyond it, nothing more is granted.
const BUDGET: usize = 50_000;

/// Device files every shell needs to write (`> /dev/null`).
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/tty",
    "/dev/random",
    "/dev/urandom",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Uniformity {
    /// Every path beneath gets this answer.
    All(bool),
    Mixed,
}

/// The grants for a shell command under `policy`.
pub fn shell_spec(policy: &Policy, network: bool) -> Spec {
    let mut grants = Vec::new();
    let mut budget = BUDGET;
    read_grants(policy, Path::new("/"), &mut grants, &mut budget);
    walk(
        policy,
        policy.root(),
        Access::Write,
        &mut grants,
        &mut budget,
    );
    // Writable places outside the repository that rules name (`/tmp/**: read`).
    for set in policy.sets() {
        for rule in &set.rules {
            if rule.is_absolute() && rule.is_subtree() && rule.access == FileAccess::Read {
                let path = PathBuf::from(rule.literal_prefix());
                if path.exists() && !path.starts_with(policy.root()) {
                    walk(policy, &path, Access::Write, &mut grants, &mut budget);
                }
            }
        }
    }
    for device in DEVICES {
        grants.push(Grant {
            path: PathBuf::from(device),
            access: Grant_::ReadWriteExisting,
        });
    }
    if budget == 0 {
        tracing::warn!(
            op = "sandbox",
            result = "partial",
            "the repository is too large to map fully; some paths were left unwritable"
        );
    }
    Spec { grants, network }
}

/// Reads: outside the repository everything not denied by an absolute rule; inside, the rules.
fn read_grants(policy: &Policy, dir: &Path, grants: &mut Vec<Grant>, budget: &mut usize) {
    let root = policy.root();
    if dir.starts_with(root) {
        walk(policy, dir, Access::Read, grants, budget);
        return;
    }
    let leads_to_root = root.starts_with(dir);
    let blocked = absolute_blocks(policy, dir);
    if !leads_to_root && blocked == Uniformity::All(true) {
        grants.push(Grant {
            path: dir.to_path_buf(),
            access: Grant_::Read,
        });
        return;
    }
    if blocked == Uniformity::All(false) {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if *budget == 0 {
            return;
        }
        *budget -= 1;
        let path = entry.path();
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        if is_dir {
            read_grants(policy, &path, grants, budget);
        } else if absolute_blocks(policy, &path) != Uniformity::All(false) {
            grants.push(Grant {
                path,
                access: Grant_::Read,
            });
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

/// Grants `access` on `dir` whole when the rules answer the same beneath it, else entry by entry.
fn walk(policy: &Policy, dir: &Path, access: Access, grants: &mut Vec<Grant>, budget: &mut usize) {
    let grant = match access {
        Access::Read => Grant_::Read,
        Access::Write => Grant_::ReadWrite,
    };
    match uniformity(policy, dir, access) {
        Uniformity::All(true) => grants.push(Grant {
            path: dir.to_path_buf(),
            access: grant,
        }),
        Uniformity::All(false) => {}
        Uniformity::Mixed => {
            let Ok(entries) = std::fs::read_dir(dir) else {
                return;
            };
            for entry in entries.flatten() {
                if *budget == 0 {
                    return;
                }
                *budget -= 1;
                let path = entry.path();
                // Symbolic links are not followed: what they point at is judged where it is.
                let Ok(kind) = entry.file_type() else {
                    continue;
                };
                if kind.is_dir() {
                    walk(policy, &path, access, grants, budget);
                } else if !kind.is_symlink() && policy.check_resolved(&path, access).is_allowed() {
                    grants.push(Grant {
                        path,
                        access: grant,
                    });
                }
            }
        }
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
        let spec = shell_spec(&policy, true);
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
        // The repository root is mixed: no grant on it as a whole.
        assert!(!spec.grants.iter().any(|g| g.path == root));
        Ok(())
    }
}
