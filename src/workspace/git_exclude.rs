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
    // A link is the user's way to share the file: the block goes where it points.
    let file = match std::fs::symlink_metadata(&file) {
        Ok(m) if m.file_type().is_symlink() => std::fs::canonicalize(&file)?,
        _ => file,
    };
    // Any bytes: the file is git's, not nop's, and need not be UTF-8.
    let old = match std::fs::read(&file) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    let wanted: Vec<String> = LOCAL_STATE.iter().map(|p| format!("{base}{p}")).collect();
    let has = |line: &str| {
        old.split(|b| *b == b'\n')
            .any(|l| l.trim_ascii() == line.as_bytes())
    };
    if wanted.iter().all(|w| has(w)) {
        return Ok(true);
    }
    let mut bytes = old;
    if !bytes.is_empty() && !bytes.ends_with(b"\n") {
        bytes.push(b'\n');
    }
    bytes.extend_from_slice(MARKER.as_bytes());
    bytes.extend_from_slice(b" (`nop init`'s configuration is yours to commit)\n");
    for line in wanted {
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
    }
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    // As an editor saves it: the mode (and owner) it had are kept.
    crate::session::replace_file(&file, &bytes)
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

    #[test]
    fn the_files_mode_its_link_and_its_bytes_are_kept() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let top = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(top.join(".git/info")).unwrap();
        let shared = top.join("shared-exclude");
        std::fs::write(&shared, b"# caf\xe9 in latin-1\n*.o\n").unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o640)).unwrap();
        std::os::unix::fs::symlink(&shared, top.join(".git/info/exclude")).unwrap();
        assert!(ignore_local_state(&top).unwrap());
        assert!(
            std::fs::symlink_metadata(top.join(".git/info/exclude"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        let bytes = std::fs::read(&shared).unwrap();
        assert!(bytes.starts_with(b"# caf\xe9 in latin-1\n*.o\n# nop:"));
        assert!(bytes.windows(16).any(|w| w == b"/.nop/sessions/\n"));
        let mode = std::fs::metadata(&shared).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
        assert!(ignore_local_state(&top).unwrap());
        assert_eq!(std::fs::read(&shared).unwrap(), bytes);
    }
}
