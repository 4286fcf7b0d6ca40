//! Keeping what nop writes on its own out of the user's `git status`: the paths go into the
//! repository's `info/exclude` (local to the clone, never committed, and read-only to the agent
//! like all of `.git`), so `git add -A`, `stash`, `checkout` and `clean -fd` work as if `.nop/`
//! were not there. Configuration `nop init` writes is not excluded: committing it is the user's
//! choice.

use std::path::{Path, PathBuf};

/// What nop writes in `.nop/` on its own, as exclude patterns relative to `.nop/`.
const LOCAL_STATE: &[&str] = &["sessions/", "logs/", "state/", "checkpoints/", "memory/"];

const MARKER: &str = "# nop: what nop writes on its own";

/// The exclude file of the git repository `root` is in (a worktree's is its common
/// directory's), and `root`'s path relative to the repository's top (empty at the top).
fn exclude_file(root: &Path) -> Option<(PathBuf, String)> {
    let repo = crate::gitdir::find(root)?;
    let prefix = root
        .strip_prefix(&repo.top)
        .ok()?
        .to_string_lossy()
        .into_owned();
    Some((repo.common.join("info/exclude"), prefix))
}

/// Adds nop's block for `root` to the repository's `info/exclude`, once; returns whether the
/// root is in a git repository whose exclude file now has it.
pub fn ignore_local_state(root: &Path) -> Result<bool, std::io::Error> {
    let Some((file, prefix)) = exclude_file(root) else {
        return Ok(false);
    };
    let base = if prefix.is_empty() {
        format!("/{}/", super::NOP_DIR)
    } else {
        format!("/{prefix}/{}/", super::NOP_DIR)
    };
    let old = match std::fs::read_to_string(&file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e),
    };
    let wanted: Vec<String> = LOCAL_STATE.iter().map(|p| format!("{base}{p}")).collect();
    if wanted.iter().all(|w| old.lines().any(|l| l.trim() == w)) {
        return Ok(true);
    }
    let mut text = old;
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(MARKER);
    text.push_str(" (`nop init`'s configuration is yours to commit)\n");
    for line in wanted {
        text.push_str(&line);
        text.push('\n');
    }
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    crate::session::write_atomic(&file, text.as_bytes())
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_block_is_added_once_with_the_roots_place_in_the_repository() {
        let dir = tempfile::tempdir().unwrap();
        let top = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(top.join(".git/info")).unwrap();
        std::fs::write(top.join(".git/info/exclude"), "# git's own\n*.swp").unwrap();
        let root = top.join("apps/web");
        std::fs::create_dir_all(&root).unwrap();
        assert!(ignore_local_state(&root).unwrap());
        assert!(ignore_local_state(&root).unwrap());
        let text = std::fs::read_to_string(top.join(".git/info/exclude")).unwrap();
        assert!(text.starts_with("# git's own\n*.swp\n# nop:"), "{text}");
        assert_eq!(
            text.matches("/apps/web/.nop/sessions/").count(),
            1,
            "{text}"
        );
        assert!(text.contains("/apps/web/.nop/memory/\n"), "{text}");
        let elsewhere = tempfile::tempdir().unwrap();
        assert!(!ignore_local_state(elsewhere.path()).unwrap());
    }
}
