//! Project instructions for the system prompt, in the places Claude Code and Codex users keep
//! them, most general first and nearest last (the later, more specific one wins):
//!
//! 1. the user's own: `~/.claude/CLAUDE.md`, the rules in `~/.claude/rules/`, then
//!    `$CODEX_HOME/AGENTS.override.md` or else `$CODEX_HOME/AGENTS.md` (`CODEX_HOME` defaults
//!    to `~/.codex`);
//! 2. each directory from the repository root down to the working directory: its
//!    `AGENTS.override.md`, else its `AGENTS.md`, else its `CLAUDE.md`, else its
//!    `.claude/CLAUDE.md` (one of the four), then the rules in its `.claude/rules/` (Claude
//!    Code's modular project memory: every `.md` below it, by path), then its `CLAUDE.local.md`
//!    (personal notes, read beside whichever was used);
//! 3. the files each of them imports with `@path` ([`super::instruction_imports`]), each placed
//!    just before the file that imports it.
//!
//! All of it fits in one size limit that keeps the nearest files whole. The repository's files
//! are read only inside it: one whose real path (after symbolic links) leaves the repository, or
//! that is not a regular UTF-8 text file, is left out with a warning rather than sent to the model
//! or stopping the run. An import is read only if the agent may read it with `read-file`.

use std::path::{Path, PathBuf};

pub(crate) use super::instruction_imports::utf8_prefix;
pub use super::instruction_imports::{Doc, Listed, Origin, Sources, Status};
use super::instruction_imports::{Importer, open_regular, read_text};

/// The limit on all project instructions together, as Codex's `project_doc_max_bytes`.
pub const MAX_BYTES: usize = 32 * 1024;

/// The file names looked for in each directory, in order: the first one present is used.
const NAMES: [&str; 4] = [
    "AGENTS.override.md",
    "AGENTS.md",
    "CLAUDE.md",
    ".claude/CLAUDE.md",
];
/// Claude Code's folder of rule files, in a directory and in the home directory.
const RULES: &str = ".claude/rules";
/// How many rule files one rules folder gives at most, and how deep it is walked.
const MAX_RULES: usize = 100;
const MAX_RULES_DEPTH: usize = 4;
/// Read beside the file above (Claude Code's personal, usually git-ignored, project notes).
const LOCAL: &str = "CLAUDE.local.md";

/// The project instructions for a run in `cwd`, and warnings about the files left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Instructions {
    /// The prompt section (`None` when there are no instruction files).
    pub section: Option<String>,
    pub warnings: Vec<String>,
    /// Every file found, in the prompt's order, and what became of it.
    pub files: Vec<Listed>,
}

/// A file to read as instructions before any import: where it is named and where it comes from.
struct Top {
    path: PathBuf,
    origin: Origin,
    /// A file of `.claude/rules/`: its front matter (`paths:`) is read, not sent.
    rule: bool,
}

/// The instructions the user's files and the repository's give for a run in `sources.cwd`
/// (only the root's when the working directory is not inside it), within `sources.max_bytes`.
pub fn project_instructions(sources: &Sources<'_>) -> Instructions {
    let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let (root, cwd) = (canonical(sources.root), canonical(sources.cwd));
    let home = sources.home.map(canonical);
    let sources = Sources {
        root: &root,
        cwd: &cwd,
        home: home.as_deref(),
        ..*sources
    };
    let mut importer = Importer::new(&sources);
    for top in tops(&sources) {
        let label = sources.label(&top.path);
        let inside = (top.origin != Origin::User).then_some(sources.root);
        let read = read_doc(inside, &top.path, sources.max_bytes).and_then(|(real, text, size)| {
            if top.rule {
                rule_text(text, size).map(|(text, size)| (real, text, size))
            } else {
                Ok((real, text, size))
            }
        });
        match read {
            Ok((real, text, size)) => {
                importer.top(&top.path, real, label, top.origin, text, size);
            }
            Err(why) => {
                let warning = format!("{label} is not used as project instructions: {why}");
                tracing::warn!(op = "instructions", result = "skipped", file = %label, "{warning}");
                importer.refused(label, top.origin, why, Some(warning));
            }
        }
    }
    let (docs, mut files, mut warnings) = importer.finish();
    let (section, cut, statuses) = render(&docs, sources.max_bytes);
    warnings.extend(cut);
    for (listed, index) in &mut files {
        if let Some(status) = index.and_then(|i| statuses.get(i)) {
            listed.status = status.clone();
        }
    }
    Instructions {
        section,
        warnings,
        files: files.into_iter().map(|(listed, _)| listed).collect(),
    }
}

/// The files to read, most general first: the user's, then each directory's from the root down.
fn tops(sources: &Sources<'_>) -> Vec<Top> {
    let exists = |p: &Path| std::fs::symlink_metadata(p).is_ok();
    let mut tops = Vec::new();
    if let Some(home) = sources.home {
        let claude = home.join(".claude/CLAUDE.md");
        if exists(&claude) {
            tops.push(Top {
                path: claude,
                origin: Origin::User,
                rule: false,
            });
        }
        tops.extend(rules(&home.join(RULES), Origin::User));
    }
    if let Some(codex) = sources.codex_home {
        let codex = ["AGENTS.override.md", "AGENTS.md"]
            .iter()
            .map(|name| codex.join(name))
            .find(|p| exists(p));
        if let Some(path) = codex {
            tops.push(Top {
                path,
                origin: Origin::User,
                rule: false,
            });
        }
    }
    for dir in directories(sources.root, sources.cwd) {
        if let Some(path) = NAMES.iter().map(|name| dir.join(name)).find(|p| exists(p)) {
            tops.push(Top {
                path,
                origin: Origin::Project,
                rule: false,
            });
        }
        tops.extend(rules(&dir.join(RULES), Origin::Project));
        let local = dir.join(LOCAL);
        if exists(&local) {
            tops.push(Top {
                path: local,
                origin: Origin::Local,
                rule: false,
            });
        }
    }
    tops
}

/// The `.md` files below the rules folder `dir`, by path (`a.md`, `frontend/react.md`), at most
/// [`MAX_RULES`]; hidden entries are skipped and a linked folder is not walked (a linked file
/// is judged where it leads when it is read).
fn rules(dir: &Path, origin: Origin) -> Vec<Top> {
    let mut found = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), 0)];
    while let Some((at, depth)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&at) else {
            continue;
        };
        for entry in entries.flatten().take(MAX_RULES * 10) {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') {
                continue;
            }
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            if is_dir && depth < MAX_RULES_DEPTH {
                stack.push((entry.path(), depth + 1));
            } else if !is_dir && name.ends_with(".md") {
                found.push(entry.path());
            }
        }
    }
    found.sort();
    found.truncate(MAX_RULES);
    found
        .into_iter()
        .map(|path| Top {
            path,
            origin: origin.clone(),
            rule: true,
        })
        .collect()
}

/// What a rule file's front matter says (Claude Code's `paths:`: the files it is for).
#[derive(Debug, Default, serde::Deserialize)]
struct RuleMeta {
    paths: Option<RulePaths>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(untagged)]
enum RulePaths {
    One(String),
    Many(Vec<String>),
}

/// A rule file's text for the prompt: its front matter taken off and, when it names `paths`,
/// a first line saying which files the rule is for (Claude Code loads such a rule only once it
/// works on one of them; nop lists it from the start, with its scope). The size follows.
fn rule_text(text: String, size: u64) -> Result<(String, u64), String> {
    let (meta, body) = crate::front_matter::parse::<RuleMeta>(&text).map_err(|e| e.to_string())?;
    let paths = match meta.paths {
        None => Vec::new(),
        Some(RulePaths::One(p)) => vec![p],
        Some(RulePaths::Many(p)) => p,
    };
    let mut out = String::new();
    if !paths.is_empty() {
        out.push_str(&format!(
            "[This rule is for files matching: {}]\n",
            paths.join(", ")
        ));
    }
    out.push_str(body.trim_start_matches('\n'));
    let size = (size + out.len() as u64).saturating_sub(text.len() as u64);
    Ok((out, size))
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

/// The real path of the file at `path`, its first `max_bytes` (whole UTF-8 characters) and its
/// size; with `inside`, only when its real path is inside that directory.
fn read_doc(
    inside: Option<&Path>,
    path: &Path,
    max_bytes: usize,
) -> Result<(PathBuf, String, u64), String> {
    let real = std::fs::canonicalize(path).map_err(|e| e.to_string())?;
    if let Some(root) = inside
        && !real.starts_with(root)
    {
        return Err(format!(
            "it leads outside the repository (to {})",
            real.display()
        ));
    }
    let file = open_regular(&real)?;
    let (text, size) = read_text(file, max_bytes)?;
    Ok((real, text, size))
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
fn prefix(text: &str, max: usize) -> &str {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The line that names a file in the prompt.
fn header(doc: &Doc) -> String {
    match &doc.origin {
        Origin::Import { by } => format!("\n## {} (imported by {by})\n", doc.label),
        _ => format!("\n## {}\n", doc.label),
    }
}

/// The prompt section of `docs` (farthest first) within `max_bytes`, what was cut (said for the
/// user), and what became of each doc. The nearest files are kept whole; the first that does not
/// fit is cut to what is left, and the ones farther up are left out.
fn render(docs: &[Doc], max_bytes: usize) -> (Option<String>, Option<String>, Vec<Status>) {
    if docs.is_empty() {
        return (None, None, Vec::new());
    }
    let mut budget = max_bytes;
    let mut statuses = vec![Status::LeftOut; docs.len()];
    let mut cut: Option<(usize, usize)> = None;
    for (i, doc) in docs.iter().enumerate().rev() {
        let whole = doc.size <= doc.text.len() as u64;
        if whole && doc.text.len() <= budget {
            budget -= doc.text.len();
            statuses[i] = Status::Used;
        } else if budget > 0 && cut.is_none() {
            let part = prefix(&doc.text, budget);
            budget = 0;
            cut = Some((i, part.len()));
            statuses[i] = Status::Cut { kept: part.len() };
        }
    }
    let mut section = String::from(
        "\n# Project instructions\nFrom the user's instruction files, then the repository's from \
         its root down to the working directory (in each directory AGENTS.override.md, else \
         AGENTS.md, else CLAUDE.md, else .claude/CLAUDE.md, then the files of .claude/rules/, \
         then CLAUDE.local.md), farthest first; a file imported with \
         @path comes just before the file that imports it. Where they disagree, the later, more \
         specific one wins.\n",
    );
    let mut notes = Vec::new();
    let left_out: Vec<String> = docs
        .iter()
        .zip(&statuses)
        .filter(|(_, s)| **s == Status::LeftOut)
        .map(|(d, _)| format!("{} ({} bytes)", d.label, d.size))
        .collect();
    if !left_out.is_empty() {
        section.push_str(&format!(
            "[Left out, beyond the {max_bytes}-byte limit of project instructions: {}]\n",
            left_out.join(", ")
        ));
        notes.push(format!("{} left out", left_out.join(", ")));
    }
    for (i, (doc, status)) in docs.iter().zip(&statuses).enumerate() {
        let text = match status {
            Status::Used => doc.text.as_str(),
            Status::Cut { kept } => &doc.text[..*kept],
            _ => continue,
        };
        section.push_str(&header(doc));
        section.push_str(text);
        if !section.ends_with('\n') {
            section.push('\n');
        }
        if let Some((at, len)) = cut
            && at == i
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
    (Some(section), warning, statuses)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn doc(label: &str, text: &str) -> Doc {
        Doc {
            label: label.into(),
            origin: Origin::Project,
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
        let (section, warning, _) =
            render(&[doc("AGENTS.md", "root"), doc("a/AGENTS.md", "a")], 10);
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
        let (section, warning, statuses) = render(&docs, 10);
        assert_eq!(
            statuses,
            [Status::LeftOut, Status::Cut { kept: 6 }, Status::Used]
        );
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
