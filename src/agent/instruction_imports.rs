//! `@path` imports inside instruction files (Claude Code's syntax): `@README.md`, `@docs/x.md`,
//! `@~/notes.md`, `@/abs/path`, relative to the file that holds them.
//!
//! An import is `@` at the start of a line or after whitespace, then the path up to the next
//! whitespace, without the punctuation that ends a sentence (`.,;:!?)]}'"`); nothing inside a
//! code span or a fenced code block is one, nor is `me@example.com`. A path that names no file
//! (`@someone` in prose) or a directory (`@src/`) is not an import and is passed over silently.
//!
//! Imports are followed at most [`MAX_DEPTH`] hops from the file that started them (as Claude
//! Code), each file at most once (a cycle stops there), [`MAX_IMPORTS`] files in all. The file
//! holding an import is the repository's, so anything the model planted there may name a secret:
//! an imported file is read only if the agent's rules let it read the file with `read-file` (a
//! `deny` or `ask` rule keeps it out, with a note in the log, and nothing of it reaches the
//! prompt); the file actually opened is checked again.
//!
//! The types of an instruction file and how one is read are here too, below `instructions.rs`.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use std::io::Read as _;
use std::os::unix::fs::OpenOptionsExt as _;

use serde::Serialize;

use crate::permissions::{Access, Decision, Policy};

/// How many hops of imports are followed from a file that is not itself imported.
pub const MAX_DEPTH: usize = 5;
/// How many files all the imports of one prompt may bring in.
pub const MAX_IMPORTS: usize = 64;

/// The tool whose permissions an import has.
const TOOL: &str = "read-file";

/// Where an instruction file comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Origin {
    /// The user's own, for every repository (`~/.claude/CLAUDE.md`, `~/.codex/AGENTS.md`).
    User,
    /// The repository's (`AGENTS.override.md`, `AGENTS.md`, `CLAUDE.md` or `.claude/CLAUDE.md`
    /// of a directory, and the files of its `.claude/rules/`).
    Project,
    /// `CLAUDE.local.md`: personal notes about the project.
    Local,
    /// Imported with `@path` by the file labelled `by`.
    Import { by: String },
}

/// One instruction file as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Doc {
    /// The path relative to the repository root (`AGENTS.md`, `sub/CLAUDE.md`), `~/…` under the
    /// home directory, else absolute.
    pub label: String,
    pub origin: Origin,
    /// What was read: the whole file, or its first [`MAX_BYTES`] when it is longer.
    pub text: String,
    /// The file's whole size in bytes.
    pub size: u64,
}

/// What became of a file, for `nop instructions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Status {
    /// In the prompt, whole.
    Used,
    /// In the prompt, its first `kept` bytes.
    Cut { kept: usize },
    /// Beyond the size limit.
    LeftOut,
    /// Not read: why.
    Refused { reason: String },
}

/// One file that was found, and what became of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Listed {
    pub label: String,
    pub origin: Origin,
    /// The file's size in bytes (0 when it was not read).
    pub size: u64,
    #[serde(flatten)]
    pub status: Status,
}

/// What the instructions are read from.
#[derive(Debug, Clone, Copy)]
pub struct Sources<'a> {
    /// The repository root.
    pub root: &'a Path,
    /// Where the run starts (the root or a directory inside it).
    pub cwd: &'a Path,
    /// The user's home directory: `~/.claude/CLAUDE.md`, and `~/` in imports.
    pub home: Option<&'a Path>,
    /// Codex's home (`$CODEX_HOME`, else `~/.codex`).
    pub codex_home: Option<&'a Path>,
    /// The rules of the agent the prompt is for: every import must pass its `read-file` check.
    /// `Err` (its permission files cannot be read) refuses every import.
    pub rules: Result<&'a Policy, &'a str>,
    /// The limit on everything together.
    pub max_bytes: usize,
}

impl Sources<'_> {
    /// How `path` is shown: relative to the repository root inside it, `~/…` under the home
    /// directory, else absolute.
    pub(super) fn label(&self, path: &Path) -> String {
        if let Ok(rel) = path.strip_prefix(self.root) {
            return rel.display().to_string();
        }
        if let Some(rel) = self.home.and_then(|h| path.strip_prefix(h).ok()) {
            return format!("~/{}", rel.display());
        }
        path.display().to_string()
    }
}

/// Opens the file at the canonical path `real` for reading, refusing anything but a regular file.
/// Non-blocking: a named pipe called AGENTS.md must not hold the run up; no symbolic link is
/// followed at the last step (a link swapped in since `real` was worked out is refused).
pub(super) fn open_regular(real: &Path) -> Result<std::fs::File, String> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((nix::fcntl::OFlag::O_NONBLOCK | nix::fcntl::OFlag::O_NOFOLLOW).bits())
        .open(real)
        .map_err(|e| e.to_string())?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("it is not a regular file".into());
    }
    Ok(file)
}

/// The first `max_bytes` of `file` as text (whole UTF-8 characters), and its size.
pub(super) fn read_text(file: std::fs::File, max_bytes: usize) -> Result<(String, u64), String> {
    let size = file.metadata().map_err(|e| e.to_string())?.len();
    let mut bytes = Vec::new();
    file.take(max_bytes as u64)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    let text = utf8_prefix(bytes).ok_or("it is not UTF-8 text")?;
    Ok((text, size))
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

/// The paths `text` imports, in order, each once.
pub fn imports(text: &str) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    let mut fence: Option<(char, usize)> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if let Some((c, n)) = fence_marker(trimmed) {
            match fence {
                None => fence = Some((c, n)),
                Some((open, len)) if open == c && n >= len && trimmed[n..].trim().is_empty() => {
                    fence = None;
                }
                Some(_) => {}
            }
            continue;
        }
        if fence.is_some() {
            continue;
        }
        for path in line_imports(line) {
            if !found.contains(&path) {
                found.push(path);
            }
        }
    }
    found
}

/// The fence character and its run's length when `line` (without its indent) opens or closes a
/// fenced code block.
fn fence_marker(line: &str) -> Option<(char, usize)> {
    let c = line.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let n = line.chars().take_while(|x| *x == c).count();
    (n >= 3).then_some((c, n))
}

/// The imports of one line outside fenced blocks, code spans left out.
fn line_imports(line: &str) -> Vec<String> {
    let bytes = line.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'`' => {
                let run = bytes[i..].iter().take_while(|b| **b == b'`').count();
                let fence = &line[i..i + run];
                // A code span ends at the next run of exactly as many backquotes; without one the
                // backquotes are literal.
                let mut j = i + run;
                let mut close = None;
                while let Some(at) = line[j..].find(fence) {
                    let start = j + at;
                    let len = bytes[start..].iter().take_while(|b| **b == b'`').count();
                    if len == run {
                        close = Some(start + run);
                        break;
                    }
                    j = start + len;
                }
                i = close.unwrap_or(i + run);
            }
            b'@' if i == 0 || bytes[i - 1].is_ascii_whitespace() => {
                let rest = &line[i + 1..];
                let token = rest.split(char::is_whitespace).next().unwrap_or_default();
                let path = token
                    .trim_end_matches(['.', ',', ';', ':', '!', '?', ')', ']', '}', '\'', '"']);
                if !path.is_empty() && !path.starts_with('@') {
                    out.push(path.to_string());
                }
                i += 1 + token.len();
            }
            _ => i += 1,
        }
    }
    out
}

/// A file found, with the index of its doc when it was read.
pub(super) type Found = (Listed, Option<usize>);

/// Why an import was not read.
enum Refusal {
    /// No such file: not an import at all.
    Missing,
    /// The agent's rules keep it out.
    Denied(String),
    /// It is there but cannot be used (not a regular file, not UTF-8…).
    Unusable(String),
}

/// Gathers the instruction files in the prompt's order, each top-level file preceded by what it
/// imports.
pub(super) struct Importer<'s, 'a> {
    sources: &'s Sources<'a>,
    /// The real path of every file taken so far.
    seen: HashSet<PathBuf>,
    imported: usize,
    docs: Vec<Doc>,
    /// Every file found, with the index of its doc when it was read.
    files: Vec<Found>,
    warnings: Vec<String>,
}

impl<'s, 'a> Importer<'s, 'a> {
    pub(super) fn new(sources: &'s Sources<'a>) -> Self {
        Importer {
            sources,
            seen: HashSet::new(),
            imported: 0,
            docs: Vec::new(),
            files: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// A file that is not imported, read: `named` where it was found, `real` its real path. What
    /// it imports comes first.
    pub(super) fn top(
        &mut self,
        named: &Path,
        real: PathBuf,
        label: String,
        origin: Origin,
        text: String,
        size: u64,
    ) {
        if !self.seen.insert(real) {
            return;
        }
        self.follow(named, &label, &text, 1);
        self.take(Doc {
            label,
            origin,
            text,
            size,
        });
    }

    /// A file that was not read, and why; `warning` also goes to the user.
    pub(super) fn refused(
        &mut self,
        label: String,
        origin: Origin,
        reason: String,
        warning: Option<String>,
    ) {
        self.warnings.extend(warning);
        self.files.push((
            Listed {
                label,
                origin,
                size: 0,
                status: Status::Refused { reason },
            },
            None,
        ));
    }

    /// The docs in the prompt's order, every file found with its doc's index, and the warnings.
    pub(super) fn finish(self) -> (Vec<Doc>, Vec<Found>, Vec<String>) {
        (self.docs, self.files, self.warnings)
    }

    fn take(&mut self, doc: Doc) {
        self.files.push((
            Listed {
                label: doc.label.clone(),
                origin: doc.origin.clone(),
                size: doc.size,
                status: Status::Used,
            },
            Some(self.docs.len()),
        ));
        self.docs.push(doc);
    }

    /// Reads what `text` (of the file named `named`, labelled `by`) imports, `depth` hops from
    /// the file that started it, each import after what it imports in turn.
    fn follow(&mut self, named: &Path, by: &str, text: &str, depth: usize) {
        let dir = named.parent().unwrap_or(Path::new("/"));
        for import in imports(text) {
            let Some(target) = self.target(dir, &import) else {
                continue;
            };
            let real = match std::fs::canonicalize(&target) {
                Ok(real) => real,
                Err(_) => {
                    tracing::debug!(op = "instructions", file = %by, import = %import, "not an import: no such file");
                    continue;
                }
            };
            let label = self.sources.label(&real);
            let origin = Origin::Import { by: by.to_string() };
            if real.is_dir() {
                tracing::debug!(op = "instructions", file = %by, import = %import, "not an import: a directory");
                continue;
            }
            if self.seen.contains(&real) {
                tracing::debug!(op = "instructions", file = %by, import = %import, "already included");
                continue;
            }
            let refusal = if depth > MAX_DEPTH {
                Some(Refusal::Denied(format!(
                    "more than {MAX_DEPTH} hops of @imports from the file that started them"
                )))
            } else if self.imported >= MAX_IMPORTS {
                Some(Refusal::Denied(format!(
                    "the instructions already import {MAX_IMPORTS} files"
                )))
            } else {
                None
            };
            let read = match refusal {
                Some(refusal) => Err(refusal),
                None => self.read(&real),
            };
            match read {
                Ok((text, size)) => {
                    self.seen.insert(real);
                    self.imported += 1;
                    self.follow(&target, &label, &text, depth + 1);
                    self.take(Doc {
                        label,
                        origin,
                        text,
                        size,
                    });
                }
                Err(Refusal::Missing) => {
                    tracing::debug!(op = "instructions", file = %by, import = %import, "not an import: no such file");
                }
                Err(Refusal::Denied(reason)) => {
                    tracing::warn!(op = "instructions", result = "refused", file = %by, import = %label, "@{import} in {by} is not imported: {reason}");
                    self.refused(label, origin, reason, None);
                }
                Err(Refusal::Unusable(reason)) => {
                    let warning = format!("@{import} in {by} is not imported: {reason}");
                    tracing::warn!(op = "instructions", result = "skipped", file = %by, import = %label, "{warning}");
                    self.refused(label, origin, reason, Some(warning));
                }
            }
        }
    }

    /// The path an import names: `~/…` under the home directory, absolute, or relative to the
    /// directory of the file that holds it.
    fn target(&self, dir: &Path, import: &str) -> Option<PathBuf> {
        if let Some(rest) = import.strip_prefix("~/") {
            return self.sources.home.map(|h| h.join(rest));
        }
        if import.contains('\0') {
            return None;
        }
        Some(dir.join(import))
    }

    /// The import at the real path `real`, if the agent may read it: its first bytes within the
    /// limit as text, and its size.
    fn read(&self, real: &Path) -> Result<(String, u64), Refusal> {
        let policy = self.sources.rules.map_err(|e| {
            Refusal::Denied(format!("the agent's permission files cannot be read: {e}"))
        })?;
        allowed(policy.check_tool(TOOL))?;
        allowed(policy.check_resolved(real, Access::Read))?;
        let file = open_regular(real).map_err(|e| match std::fs::symlink_metadata(real) {
            Err(_) => Refusal::Missing,
            Ok(_) => Refusal::Unusable(e),
        })?;
        // The file opened is the one checked: a link swapped in on the way is not followed.
        let opened = std::fs::read_link(format!("/proc/self/fd/{}", {
            use std::os::fd::AsRawFd as _;
            file.as_raw_fd()
        }))
        .map_err(|e| Refusal::Unusable(e.to_string()))?;
        if opened != real {
            allowed(policy.check_resolved(&opened, Access::Read))?;
        }
        read_text(file, self.sources.max_bytes).map_err(Refusal::Unusable)
    }
}

/// `Ok` when `decision` lets the file be read without asking anyone.
fn allowed(decision: Decision) -> Result<(), Refusal> {
    match decision {
        Decision::Allow { .. } => Ok(()),
        Decision::Deny { reason, source } => Err(Refusal::Denied(match source {
            Some(source) => format!("{reason} ({source})"),
            None => reason,
        })),
        Decision::Ask { source } => Err(Refusal::Denied(format!(
            "a rule asks for approval ({source}), which nobody can give while the system prompt \
             is built"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn an_import_starts_a_line_or_follows_whitespace() {
        assert_eq!(
            imports("See @README.md, then @docs/x.md.\n@~/notes.md and (@nope) me@example.com"),
            ["README.md", "docs/x.md", "~/notes.md"]
        );
        assert_eq!(imports("@a @a\n@b"), ["a", "b"]);
        assert_eq!(imports("@ alone, @@twice"), Vec::<String>::new());
    }

    #[test]
    fn nothing_in_code_is_an_import() {
        let text = "run `npm i @scope/pkg` or ``a @b ` c`` then @real\n\
                    ```sh\n@fenced\n```\n~~~~\n@tilde\n```\n@still-fenced\n~~~~\n@after\n\
                    an unclosed ` @open";
        assert_eq!(imports(text), ["real", "after", "open"]);
    }
}
