//! Custom slash commands as Claude Code keeps them: a markdown file per command, `review.md`
//! giving `/review` and `frontend/test.md` giving `/frontend:test`, with an optional front matter
//! (`description`, `argument-hint`; `model` and `allowed-tools` are read and ignored) and a body
//! in which `$ARGUMENTS`, `$ARGUMENTS[N]` and `$0`, `$1`… are replaced by what follows the
//! command. The expanded text is then an ordinary prompt (its `@path` mentions attached as any
//! prompt's are).
//!
//! Where, first wins on a name clash: the repository's `.nop/commands`, `.claude/commands`, then
//! the user's folders the caller names (`~/.config/nop/commands`, `~/.claude/commands`).

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The repository's command folders, relative to its root, first wins.
pub const REPOSITORY_DIRS: &[&str] = &[".nop/commands", ".claude/commands"];

/// How many entries of command folders are looked at in all, and how deep.
const MAX_ENTRIES: usize = 2000;
const MAX_DEPTH: usize = 4;

/// One custom command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomCommand {
    /// Without the slash: `review`, `frontend:test`.
    pub name: String,
    /// The front matter's `description`, else the body's first line.
    pub description: String,
    /// The front matter's `argument-hint`.
    pub argument_hint: Option<String>,
    /// The body, front matter taken off.
    pub body: String,
    /// Its file.
    pub path: PathBuf,
    /// The folder it was found in.
    pub source: PathBuf,
    /// Found in one of the user's folders.
    pub user: bool,
}

/// Every command found.
#[derive(Debug, Clone, Default)]
pub struct Discovery {
    pub commands: Vec<CustomCommand>,
    /// Commands whose name an earlier folder already gave.
    pub shadowed: Vec<CustomCommand>,
    /// A file that could not be read or whose front matter is not valid, naming it; left out.
    pub warnings: Vec<String>,
}

impl Discovery {
    pub fn get(&self, name: &str) -> Option<&CustomCommand> {
        self.commands.iter().find(|c| c.name == name)
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Meta {
    description: Option<String>,
    argument_hint: Option<Hint>,
}

/// `argument-hint: [file]` is a YAML list as Claude Code's files write it; a plain string too.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Hint {
    Text(String),
    List(Vec<String>),
}

impl Hint {
    fn text(self) -> String {
        match self {
            Hint::Text(text) => text.trim().to_string(),
            Hint::List(items) => items
                .iter()
                .map(|i| format!("[{i}]"))
                .collect::<Vec<_>>()
                .join(" "),
        }
    }
}

/// The commands of the repository at `root`, then of `user_dirs` (in that order).
pub fn discover(root: &Path, user_dirs: &[PathBuf]) -> Discovery {
    let mut found = Discovery::default();
    let mut seen: Vec<PathBuf> = Vec::new();
    let mut budget = MAX_ENTRIES;
    let canonical_root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    let sources = REPOSITORY_DIRS
        .iter()
        .map(|d| (root.join(d), false))
        .chain(user_dirs.iter().map(|d| (d.clone(), true)));
    for (source, user) in sources {
        let key = std::fs::canonicalize(&source).unwrap_or_else(|_| source.clone());
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        let mut files = Vec::new();
        walk(&source, &source, 0, &mut budget, &mut files);
        files.sort();
        for (name, path) in files {
            // The agent can write the repository's command folders: a command file there that
            // is a link out of the repository (to ~/.aws/credentials) would become a prompt.
            if !user
                && !std::fs::canonicalize(&path).is_ok_and(|real| real.starts_with(&canonical_root))
            {
                found.warnings.push(format!(
                    "{}: a symbolic link out of the repository; this command is left out",
                    path.display()
                ));
                continue;
            }
            match read(&path) {
                Ok((meta, body)) => {
                    let description = meta
                        .description
                        .map(|d| d.split_whitespace().collect::<Vec<_>>().join(" "))
                        .filter(|d| !d.is_empty())
                        .unwrap_or_else(|| {
                            body.lines()
                                .map(|l| l.trim().trim_start_matches('#').trim())
                                .find(|l| !l.is_empty())
                                .unwrap_or("")
                                .chars()
                                .take(100)
                                .collect()
                        });
                    let command = CustomCommand {
                        name,
                        description,
                        argument_hint: meta.argument_hint.map(Hint::text).filter(|h| !h.is_empty()),
                        body,
                        path,
                        source: source.clone(),
                        user,
                    };
                    if found.get(&command.name).is_some() {
                        found.shadowed.push(command);
                    } else {
                        found.commands.push(command);
                    }
                }
                Err(e) => found
                    .warnings
                    .push(format!("{}: {e}; this command is left out", path.display())),
            }
        }
    }
    found
}

/// The `.md` files beneath `dir` with their command names (`a/b.md` → `a:b`); hidden entries
/// and names with characters a command cannot have are skipped.
fn walk(
    top: &Path,
    dir: &Path,
    depth: usize,
    budget: &mut usize,
    out: &mut Vec<(String, PathBuf)>,
) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if *budget == 0 {
            return;
        }
        *budget -= 1;
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        // A linked subfolder is not followed (a link to `/` would be walked otherwise).
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            if depth < MAX_DEPTH {
                walk(top, &path, depth + 1, budget, out);
            }
            continue;
        }
        if !name.ends_with(".md") || !path.is_file() {
            continue;
        }
        let Ok(relative) = path
            .with_extension("")
            .strip_prefix(top)
            .map(Path::to_path_buf)
        else {
            continue;
        };
        let parts: Vec<String> = relative
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        let valid = parts.iter().all(|p| {
            !p.is_empty()
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        });
        if valid {
            out.push((parts.join(":"), path));
        }
    }
}

/// Why a command file is left out (its warning names the file).
#[derive(Debug, thiserror::Error)]
enum CommandFileError {
    #[error(transparent)]
    Read(#[from] std::io::Error),
    #[error("it is longer than {} KB", crate::front_matter::MAX_FILE_BYTES / 1024)]
    TooLong,
    #[error(transparent)]
    FrontMatter(#[from] crate::front_matter::FrontMatterError),
}

fn read(path: &Path) -> Result<(Meta, String), CommandFileError> {
    let (text, cut) = crate::front_matter::read_capped(path)?;
    if cut {
        return Err(CommandFileError::TooLong);
    }
    let (meta, body) = match crate::front_matter::parse::<Meta>(&text) {
        Ok(parsed) => parsed,
        Err(error) => {
            // Claude Code's own examples write `argument-hint: [pr] [priority]`, which is not
            // YAML: a flat front matter is then read line by line, as that tool reads it.
            let Some((yaml, body)) = crate::front_matter::split(&text)? else {
                return Err(error.into());
            };
            (flat(yaml).ok_or(error)?, body)
        }
    };
    Ok((meta, body.trim().to_string()))
}

/// A front matter of `key: value` lines only (no indented or list lines), read without YAML.
fn flat(yaml: &str) -> Option<Meta> {
    let mut meta = Meta::default();
    for line in yaml.lines().filter(|l| !l.trim().is_empty()) {
        if line.starts_with([' ', '\t', '-', '#']) {
            return None;
        }
        let (key, value) = line.split_once(':')?;
        let value = value.trim();
        let unquoted = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
            .unwrap_or(value)
            .to_string();
        match key.trim() {
            "description" => meta.description = Some(unquoted),
            "argument-hint" => meta.argument_hint = Some(Hint::Text(unquoted)),
            _ => {}
        }
    }
    Some(meta)
}

/// `input` split into the command's name (without the slash) and what follows it, when it
/// begins with `/name`.
pub fn split_invocation(input: &str) -> Option<(&str, &str)> {
    let rest = input.strip_prefix('/')?;
    let (name, arguments) = match rest.find(char::is_whitespace) {
        Some(i) => (&rest[..i], rest[i..].trim()),
        None => (rest, ""),
    };
    (!name.is_empty()).then_some((name, arguments))
}

/// The arguments as words: whitespace separates them, except inside '…' or "…" quotes.
pub fn words(arguments: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    let mut started = false;
    for c in arguments.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => word.push(c),
            None if c == '"' || c == '\'' => {
                quote = Some(c);
                started = true;
            }
            None if c.is_whitespace() => {
                if started {
                    words.push(std::mem::take(&mut word));
                    started = false;
                }
            }
            None => {
                word.push(c);
                started = true;
            }
        }
    }
    if started {
        words.push(word);
    }
    words
}

/// The command's body with `$ARGUMENTS` replaced by `arguments`, and `$ARGUMENTS[N]` and its
/// shorthand `$N` by its words counted from 0 as Claude Code counts them (`$0` is the first
/// word; a missing one is nothing). A body that uses none of them gets the arguments appended
/// on a line `ARGUMENTS: …`, as Claude Code does, so they are never lost. `!`command`` is left
/// as it is: nop does not run it.
pub fn expand(body: &str, arguments: &str) -> String {
    let words = words(arguments);
    let word = |n: &str| n.parse::<usize>().ok().and_then(|n| words.get(n));
    let mut out = String::with_capacity(body.len() + arguments.len());
    let mut used = false;
    let mut rest = body;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix("ARGUMENTS") {
            used = true;
            let index = tail
                .strip_prefix('[')
                .and_then(|t| t.split_once(']'))
                .filter(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
            match index {
                Some((n, tail)) => {
                    out.push_str(word(n).map_or("", String::as_str));
                    rest = tail;
                }
                None => {
                    out.push_str(arguments);
                    rest = tail;
                }
            }
            continue;
        }
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            out.push('$');
            rest = after;
            continue;
        }
        out.push_str(word(&after[..digits]).map_or("", String::as_str));
        used = true;
        rest = &after[digits..];
    }
    out.push_str(rest);
    if !used && !arguments.is_empty() {
        out.push_str(&format!("\n\nARGUMENTS: {arguments}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_and_positions_are_replaced() {
        assert_eq!(
            expand(
                "Review $0 for $1. All: $ARGUMENTS. Cost $5 $",
                "src/a.rs 'memory leaks'"
            ),
            "Review src/a.rs for memory leaks. All: src/a.rs 'memory leaks'. Cost  $"
        );
        // `$ARGUMENTS[N]` is `$N`; a bracket that is not an index leaves `$ARGUMENTS` whole.
        assert_eq!(
            expand(
                "$ARGUMENTS[1]/$ARGUMENTS[0]/$ARGUMENTS[7]|$ARGUMENTS[x]",
                "a b"
            ),
            "b/a/|a b[x]"
        );
        assert_eq!(expand("$10$1", "a b c d e f g h i j k"), "kb");
        assert_eq!(expand("Fix it", "now"), "Fix it\n\nARGUMENTS: now");
        assert_eq!(expand("Fix it", ""), "Fix it");
        assert_eq!(expand("$0 $x", ""), " $x");
        assert_eq!(expand("cost: $", "a"), "cost: $\n\nARGUMENTS: a");
        assert_eq!(split_invocation("/review  a b"), Some(("review", "a b")));
        assert_eq!(split_invocation("/ x"), None);
        assert_eq!(split_invocation("review"), None);
    }

    #[test]
    fn folders_give_names_first_wins_bad_files_are_named() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("repo");
        let user = tmp.path().join("user");
        let write = |p: PathBuf, t: &str| {
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, t).unwrap();
        };
        write(
            root.join(".claude/commands/frontend/test.md"),
            "---\ndescription: Run the UI tests\nargument-hint: [file] [focus]\nallowed-tools: Bash(npm:*)\nmodel: x\n---\nRun $1\n",
        );
        write(
            root.join(".nop/commands/review.md"),
            "# Review the diff\nLook.\n",
        );
        write(user.join("review.md"), "user's\n");
        write(user.join("bad.md"), "---\ndescription: x\n");
        write(user.join("long.md"), &"x".repeat(300 * 1024));
        write(user.join("has space.md"), "x");
        write(
            tmp.path().join("secret.md"),
            "---\ndescription: SECRET\n---\nSECRET\n",
        );
        std::os::unix::fs::symlink(
            tmp.path().join("secret.md"),
            root.join(".claude/commands/leak.md"),
        )
        .unwrap();
        let found = discover(&root, std::slice::from_ref(&user));
        let names: Vec<&str> = found.commands.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["review", "frontend:test"]);
        assert_eq!(found.commands[0].description, "Review the diff");
        assert_eq!(found.commands[1].description, "Run the UI tests");
        assert_eq!(
            found.commands[1].argument_hint.as_deref(),
            Some("[file] [focus]")
        );
        assert_eq!(found.commands[1].body, "Run $1");
        assert_eq!(found.shadowed.len(), 1);
        assert!(found.shadowed[0].user);
        assert_eq!(found.warnings.len(), 3, "{:?}", found.warnings);
        assert!(
            found.warnings[0].contains("leak.md"),
            "{:?}",
            found.warnings
        );
        assert_eq!(
            found.warnings[1..],
            [
                format!(
                    "{}: the front matter that starts on line 1 has no closing `---` line; \
                     this command is left out",
                    user.join("bad.md").display()
                ),
                format!(
                    "{}: it is longer than 256 KB; this command is left out",
                    user.join("long.md").display()
                )
            ]
        );
    }
}
