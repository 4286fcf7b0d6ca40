//! Where file tools may go: paths resolve inside the repository, symbolic links included, and
//! the `.nop/` floor holds (`.nop/.permissions/**` unreachable, the rest of `.nop/**` read-only).
//! The per-agent rules of `.nop/.permissions/` refine this; nothing can lift it.

use std::path::{Component, Path, PathBuf};

use super::ToolError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

/// Resolves `path` (relative to `root`, or absolute) to a canonical path inside `root`.
pub fn resolve(root: &Path, path: &str, access: Access) -> Result<PathBuf, ToolError> {
    if path.trim().is_empty() {
        return Err(ToolError::model("InvalidArguments", "the path is empty"));
    }
    let joined = if Path::new(path).is_absolute() {
        PathBuf::from(path)
    } else {
        root.join(path)
    };
    let resolved = canonical_prefix(&joined)
        .map_err(|message| ToolError::model("InvalidPath", format!("`{path}`: {message}")))?;
    let Ok(relative) = resolved.strip_prefix(root) else {
        return Err(ToolError::model(
            "PathOutsideRepository",
            format!(
                "`{path}` is outside the repository ({}); refused",
                root.display()
            ),
        ));
    };
    let mut parts = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy());
    if parts.next().as_deref() == Some(crate::workspace::NOP_DIR) {
        if parts.next().as_deref() == Some(".permissions") {
            return Err(ToolError::model(
                "PermissionDenied",
                format!("`{path}`: .nop/.permissions/ is not accessible to agents"),
            ));
        }
        if access == Access::Write {
            return Err(ToolError::model(
                "PermissionDenied",
                format!("`{path}`: .nop/ is read-only to agents"),
            ));
        }
    }
    Ok(resolved)
}

/// The path with its longest existing prefix canonicalised (symbolic links and `..` resolved)
/// and the rest, which does not exist yet, appended.
fn canonical_prefix(path: &Path) -> Result<PathBuf, String> {
    let mut existing = path.to_path_buf();
    let mut rest = Vec::new();
    loop {
        match std::fs::canonicalize(&existing) {
            Ok(canonical) => {
                let mut out = canonical;
                for part in rest.iter().rev() {
                    out.push(part);
                }
                return Ok(out);
            }
            Err(_) => {
                let Some(name) = existing.file_name().map(|n| n.to_os_string()) else {
                    return Err("no part of it exists".into());
                };
                match existing.components().next_back() {
                    Some(Component::Normal(_)) => {}
                    _ => return Err("`..` after a directory that does not exist".into()),
                }
                rest.push(name);
                if !existing.pop() {
                    return Err("no part of it exists".into());
                }
            }
        }
    }
}

/// `path` relative to `root` for display (`path` itself if it is not inside).
pub fn display(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stays_inside_the_repository() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let root = std::fs::canonicalize(dir.path())?;
        std::fs::create_dir_all(root.join("src"))?;
        std::fs::create_dir_all(root.join(".nop/.permissions"))?;
        assert_eq!(
            resolve(&root, "src/new.rs", Access::Write)?,
            root.join("src/new.rs")
        );
        assert_eq!(
            resolve(&root, "./src/../a/b.txt", Access::Write)?,
            root.join("a/b.txt")
        );
        for (path, access) in [
            ("../outside", Access::Read),
            ("/etc/passwd", Access::Read),
            ("src/../../x", Access::Write),
            (".nop/config.yml", Access::Write),
            (".nop/.permissions/agent-default.yml", Access::Read),
            ("missing/../../../x", Access::Write),
        ] {
            assert!(resolve(&root, path, access).is_err(), "{path}");
        }
        assert!(resolve(&root, ".nop/config.yml", Access::Read).is_ok());
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink("/etc", root.join("etc-link"))?;
            assert!(resolve(&root, "etc-link/passwd", Access::Read).is_err());
        }
        Ok(())
    }
}
