//! Project instructions for the system prompt: the `AGENTS.md` of every directory from the
//! repository root down to the working directory (a directory without one contributes its
//! `CLAUDE.md`), nearest last, under one size limit that keeps the nearest files whole.
//!
//! The files are the repository's, so they are read only inside it: one whose real path (after
//! symbolic links) leaves the repository, or that is not a regular UTF-8 text file, is left out
//! with a warning rather than sent to the model or stopping the run.

use std::io::Read as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

/// The limit on all project instructions together, as Codex's `project_doc_max_bytes`.
pub const MAX_BYTES: usize = 32 * 1024;

/// The file names looked for in each directory, in order: the first one present is used.
const NAMES: [&str; 2] = ["AGENTS.md", "CLAUDE.md"];

/// One instruction file as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Doc {
    /// The path relative to the repository root (`AGENTS.md`, `sub/CLAUDE.md`).
    pub label: String,
    /// What was read: the whole file, or its first [`MAX_BYTES`] when it is longer.
    pub text: String,
    /// The file's whole size in bytes.
    pub size: u64,
}

/// The project instructions for a run in `cwd`, and warnings about the files left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Instructions {
    /// The prompt section (`None` when there are no instruction files).
    pub section: Option<String>,
    pub warnings: Vec<String>,
}

/// The instructions from `root` down to `cwd` (only `root`'s when `cwd` is not inside it),
/// within `max_bytes`.
pub fn project_instructions(root: &Path, cwd: &Path, max_bytes: usize) -> Instructions {
    let mut warnings = Vec::new();
    let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let (root, cwd) = (&canonical(root), &canonical(cwd));
    let docs: Vec<Doc> = directories(root, cwd)
        .iter()
        .filter_map(|dir| read_dir_doc(root, dir, max_bytes, &mut warnings))
        .collect();
    let (section, cut) = render(&docs, max_bytes);
    warnings.extend(cut);
    Instructions { section, warnings }
}

/// `root`, then each directory on the way down to `cwd`. Nothing under `.nop/` is looked at: it
/// is nop's own directory, never a project's.
fn directories(root: &Path, cwd: &Path) -> Vec<PathBuf> {
    let mut dirs = vec![root.to_path_buf()];
    let Ok(below) = cwd.strip_prefix(root) else {
        return dirs;
    };
    let mut dir = root.to_path_buf();
    for part in below.components() {
        let std::path::Component::Normal(name) = part else {
            break;
        };
        if dir == root && name == crate::workspace::NOP_DIR {
            break;
        }
        dir.push(name);
        dirs.push(dir.clone());
    }
    dirs
}

/// The instruction file of `dir`: its AGENTS.md if it has one, else its CLAUDE.md. A file that
/// is there but cannot be used is a warning (and the directory contributes nothing).
fn read_dir_doc(
    root: &Path,
    dir: &Path,
    max_bytes: usize,
    warnings: &mut Vec<String>,
) -> Option<Doc> {
    let path = NAMES
        .iter()
        .map(|name| dir.join(name))
        .find(|p| std::fs::symlink_metadata(p).is_ok())?;
    let label = path
        .strip_prefix(root)
        .unwrap_or(&path)
        .display()
        .to_string();
    match read_doc(root, &path, max_bytes) {
        Ok((text, size)) => Some(Doc { label, text, size }),
        Err(why) => {
            let warning = format!("{label} is not used as project instructions: {why}");
            tracing::warn!(op = "instructions", result = "skipped", file = %label, "{warning}");
            warnings.push(warning);
            None
        }
    }
}

/// The first `max_bytes` of the file at `path` (whole UTF-8 characters) and its size.
fn read_doc(root: &Path, path: &Path, max_bytes: usize) -> Result<(String, u64), String> {
    let real = std::fs::canonicalize(path).map_err(|e| e.to_string())?;
    if !real.starts_with(root) {
        return Err(format!(
            "it leads outside the repository (to {})",
            real.display()
        ));
    }
    // Non-blocking: a named pipe called AGENTS.md must not hold the run up.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(&real)
        .map_err(|e| e.to_string())?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("it is not a regular file".into());
    }
    let mut bytes = Vec::new();
    file.take(max_bytes as u64)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    let text = utf8_prefix(bytes).ok_or("it is not UTF-8 text")?;
    Ok((text, meta.len()))
}

/// `bytes` as text, when they are UTF-8 but for a character cut at the very end (dropped), and
/// hold no NUL (binary).
pub(crate) fn utf8_prefix(mut bytes: Vec<u8>) -> Option<String> {
    if bytes.contains(&0) {
        return None;
    }
    match std::str::from_utf8(&bytes) {
        Ok(_) => {}
        Err(e) if e.error_len().is_none() => bytes.truncate(e.valid_up_to()),
        Err(_) => return None,
    }
    String::from_utf8(bytes).ok()
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
fn prefix(text: &str, max: usize) -> &str {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The prompt section of `docs` (farthest first) within `max_bytes`, and what was cut, said for
/// the user. The nearest files are kept whole; the first that does not fit is cut to what is
/// left, and the ones farther up are left out.
fn render(docs: &[Doc], max_bytes: usize) -> (Option<String>, Option<String>) {
    if docs.is_empty() {
        return (None, None);
    }
    let mut budget = max_bytes;
    let mut kept: Vec<(&Doc, &str)> = Vec::new();
    let mut cut: Option<(&Doc, usize)> = None;
    let mut left_out: Vec<&Doc> = Vec::new();
    for doc in docs.iter().rev() {
        let whole = doc.size <= doc.text.len() as u64;
        if whole && doc.text.len() <= budget {
            budget -= doc.text.len();
            kept.push((doc, &doc.text));
        } else if budget > 0 && cut.is_none() {
            let part = prefix(&doc.text, budget);
            budget = 0;
            cut = Some((doc, part.len()));
            kept.push((doc, part));
        } else {
            left_out.push(doc);
        }
    }
    kept.reverse();
    left_out.reverse();
    let mut section = String::from(
        "\n# Project instructions\nFrom the AGENTS.md files (CLAUDE.md where a directory has no \
         AGENTS.md) from the repository root down to the working directory, farthest first; \
         where they disagree, the later, more specific one wins.\n",
    );
    let mut notes = Vec::new();
    if !left_out.is_empty() {
        let names: Vec<String> = left_out
            .iter()
            .map(|d| format!("{} ({} bytes)", d.label, d.size))
            .collect();
        section.push_str(&format!(
            "[Left out, beyond the {max_bytes}-byte limit of project instructions: {}]\n",
            names.join(", ")
        ));
        notes.push(format!("{} left out", names.join(", ")));
    }
    for (doc, text) in kept {
        section.push_str(&format!("\n## {}\n", doc.label));
        section.push_str(text);
        if !section.ends_with('\n') {
            section.push('\n');
        }
        if let Some((cut_doc, len)) = cut
            && std::ptr::eq(cut_doc, doc)
        {
            section.push_str(&format!(
                "[{} cut here: its first {len} of {} bytes fit in the {max_bytes}-byte limit of \
                 project instructions]\n",
                doc.label, doc.size
            ));
            notes.push(format!(
                "{} cut to its first {len} of {} bytes",
                doc.label, doc.size
            ));
        }
    }
    let warning = (!notes.is_empty()).then(|| {
        format!(
            "the project instructions are over {max_bytes} bytes, the nearest kept whole: {}",
            notes.join("; ")
        )
    });
    (Some(section), warning)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn doc(label: &str, text: &str) -> Doc {
        Doc {
            label: label.into(),
            text: text.into(),
            size: text.len() as u64,
        }
    }

    #[test]
    fn directories_run_from_the_root_down_to_the_working_directory() {
        let root = Path::new("/repo");
        assert_eq!(
            directories(root, Path::new("/repo/a/b")),
            vec![
                PathBuf::from("/repo"),
                PathBuf::from("/repo/a"),
                PathBuf::from("/repo/a/b")
            ]
        );
        assert_eq!(directories(root, root), vec![PathBuf::from("/repo")]);
        assert_eq!(
            directories(root, Path::new("/elsewhere")),
            vec![PathBuf::from("/repo")]
        );
        assert_eq!(
            directories(root, Path::new("/repo/.nop/sessions")),
            vec![PathBuf::from("/repo")]
        );
    }

    #[test]
    fn within_the_limit_every_file_is_whole_farthest_first() {
        let (section, warning) = render(&[doc("AGENTS.md", "root"), doc("a/AGENTS.md", "a")], 10);
        let section = section.expect("section");
        assert!(section.find("## AGENTS.md\nroot\n") < section.find("## a/AGENTS.md\na\n"));
        assert_eq!(warning, None);
    }

    #[test]
    fn over_the_limit_the_nearest_stay_whole_and_the_farthest_go_first() {
        let docs = [
            doc("AGENTS.md", "0123456789"),
            doc("a/CLAUDE.md", "abcdefghij"),
            doc("a/b/AGENTS.md", "near"),
        ];
        let (section, warning) = render(&docs, 10);
        let section = section.expect("section");
        assert!(section.contains("## a/b/AGENTS.md\nnear\n"), "{section}");
        assert!(
            section
                .contains("## a/CLAUDE.md\nabcdef\n[a/CLAUDE.md cut here: its first 6 of 10 bytes"),
            "{section}"
        );
        assert!(!section.contains("## AGENTS.md"), "{section}");
        assert!(
            section.contains(
                "[Left out, beyond the 10-byte limit of project instructions: AGENTS.md (10 bytes)]"
            ),
            "{section}"
        );
        assert_eq!(
            warning.as_deref(),
            Some(
                "the project instructions are over 10 bytes, the nearest kept whole: \
                 AGENTS.md (10 bytes) left out; a/CLAUDE.md cut to its first 6 of 10 bytes"
            )
        );
    }

    #[test]
    fn a_cut_never_splits_a_character() {
        assert_eq!(prefix("aé", 2), "a");
        assert_eq!(
            utf8_prefix("aé".as_bytes()[..2].to_vec()).as_deref(),
            Some("a")
        );
        assert_eq!(utf8_prefix(vec![b'a', 0xff, b'b']), None);
        assert_eq!(utf8_prefix(vec![b'a', 0, b'b']), None);
    }
}
