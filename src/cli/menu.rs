//! The live menu under the prompt: typing `/` at the start of the line lists the slash commands
//! that match, `@` and part of a name the files that match. ↑/↓ move the highlight, Tab or
//! Enter takes the highlighted entry (Enter runs a slash command), typing filters. The editor's
//! hint draws it; key handlers in `editor.rs` ask it what a key does.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How many entries the menu shows at once (the highlight scrolls through the rest).
const SHOWN: usize = 8;
/// How many entries the `@` menu walks at most (a huge repository stays responsive).
const WALK_LIMIT: usize = 20_000;
/// How many files `@` offers at most.
const FILE_CANDIDATES: usize = 50;
/// How long the list of files `@` matches is kept before it is walked again.
const FILES_KEPT: Duration = Duration::from_secs(10);

/// The menu's state, shared by the editor's hint and its key handlers.
pub struct Menu {
    cwd: PathBuf,
    /// The custom slash commands (`/name`, help), after the built-in ones.
    custom: Mutex<Vec<(String, String)>>,
    files: Mutex<Option<(Instant, Arc<Vec<String>>)>>,
    /// The line the highlight belongs to, and the highlighted entry: typing resets it.
    selected: Mutex<(String, usize)>,
    /// The slash command Enter ran from the menu: the line sent stands for it.
    run: Mutex<Option<String>>,
}

/// What the menu offers for a line.
struct Open {
    /// Where the word the entries replace begins (0 for a slash command).
    start: usize,
    slash: bool,
    /// What each entry puts in place of the word, and what is shown after it.
    entries: Vec<(String, String)>,
}

impl Menu {
    pub fn new(cwd: PathBuf) -> Arc<Menu> {
        Arc::new(Menu {
            cwd,
            custom: Mutex::new(Vec::new()),
            files: Mutex::new(None),
            selected: Mutex::new((String::new(), 0)),
            run: Mutex::new(None),
        })
    }

    pub fn set_custom(&self, custom: Vec<(String, String)>) {
        if let Ok(mut c) = self.custom.lock() {
            *c = custom;
        }
    }

    pub fn custom(&self) -> Vec<(String, String)> {
        self.custom.lock().map(|c| c.clone()).unwrap_or_default()
    }

    /// The entries for `line` with the cursor at `pos` (the end: a menu follows what is typed).
    fn open(&self, line: &str, pos: usize) -> Option<Open> {
        if pos != line.len() {
            return None;
        }
        if line.starts_with('/') && !line.contains(char::is_whitespace) {
            let custom = self.custom();
            let entries: Vec<(String, String)> = all_commands(&custom)
                .filter(|(name, _)| name.starts_with(line))
                .map(|(name, help)| (name.to_string(), help.to_string()))
                .collect();
            return (!entries.is_empty()).then_some(Open {
                start: 0,
                slash: true,
                entries,
            });
        }
        let start = line
            .char_indices()
            .rev()
            .find(|(_, c)| c.is_whitespace())
            .map_or(0, |(i, c)| i + c.len_utf8());
        let query = line[start..].strip_prefix('@')?;
        let files = self.files();
        let entries: Vec<(String, String)> = fuzzy(&files, query)
            .into_iter()
            .map(|path| (format!("@{path}"), String::new()))
            .collect();
        (!entries.is_empty()).then_some(Open {
            start,
            slash: false,
            entries,
        })
    }

    /// The files below the working directory, walked at most every [`FILES_KEPT`].
    fn files(&self) -> Arc<Vec<String>> {
        let Ok(mut kept) = self.files.lock() else {
            return Arc::new(Vec::new());
        };
        match &*kept {
            Some((at, files)) if at.elapsed() < FILES_KEPT => files.clone(),
            _ => {
                let files = Arc::new(files(&self.cwd));
                *kept = Some((Instant::now(), files.clone()));
                files
            }
        }
    }

    /// The highlighted entry for `line` (the first, once the line changed).
    fn highlighted(&self, line: &str, count: usize) -> usize {
        let Ok(mut selected) = self.selected.lock() else {
            return 0;
        };
        if selected.0 != line {
            *selected = (line.to_string(), 0);
        }
        selected.1.min(count.saturating_sub(1))
    }

    /// The menu under the line, as the editor's hint: one entry is shown after the cursor (a
    /// slash command's rest and help), several as a list with the highlighted one marked.
    pub fn hint(&self, line: &str, pos: usize) -> Option<String> {
        let Some(open) = self.open(line, pos) else {
            // The menu closed: opened again, it starts at the top.
            if let Ok(mut selected) = self.selected.lock() {
                *selected = (String::new(), 0);
            }
            return None;
        };
        let width = crossterm::terminal::size().map_or(80, |(w, _)| usize::from(w));
        let fit = |text: String| super::term::style::truncate(&text, width.saturating_sub(1));
        if let [(name, help)] = open.entries.as_slice() {
            let word = &line[open.start..];
            let rest = name.strip_prefix(word)?;
            let shown = if help.is_empty() {
                rest.to_string()
            } else {
                format!("{rest}  {help}")
            };
            // The cursor's column counts: what is shown after it must fit the row.
            return Some(super::term::style::truncate(
                &shown,
                width.saturating_sub(line.chars().count() + 3),
            ))
            .filter(|s| !s.is_empty());
        }
        let selected = self.highlighted(line, open.entries.len());
        let first = selected.saturating_sub(SHOWN - 1);
        let mut menu: String = open
            .entries
            .iter()
            .enumerate()
            .skip(first)
            .take(SHOWN)
            .map(|(i, (name, help))| {
                let mark = if i == selected { "›" } else { " " };
                fit(format!("\n {mark} {name:<11} {help}"))
            })
            .collect();
        let rest = open.entries.len().saturating_sub(first + SHOWN);
        menu.push_str(&fit(format!(
            "\n   {}↑/↓ choose · {}",
            if rest > 0 {
                format!("… {rest} more · ")
            } else {
                String::new()
            },
            if open.slash {
                "Tab takes it · Enter runs it"
            } else {
                "Tab or Enter takes it"
            }
        )));
        Some(menu)
    }

    /// ↑ or ↓ (`step` -1 or 1) with a list open: moves the highlight (round); `false` when no
    /// list is open (the key keeps its meaning: history).
    pub fn step(&self, line: &str, pos: usize, step: isize) -> bool {
        let Some(open) = self.open(line, pos).filter(|o| o.entries.len() > 1) else {
            return false;
        };
        let count = open.entries.len();
        let now = self.highlighted(line, count);
        if let Ok(mut selected) = self.selected.lock() {
            selected.1 = (now as isize + step).rem_euclid(count as isize) as usize;
        }
        true
    }

    /// Tab (or Enter on a file) with the menu open: where the word it replaces begins, and the
    /// highlighted entry to put there.
    pub fn take(&self, line: &str, pos: usize) -> Option<(usize, String)> {
        let open = self.open(line, pos)?;
        let selected = self.highlighted(line, open.entries.len());
        let (name, _) = open.entries.get(selected)?;
        Some((open.start, name.clone()))
    }

    /// Enter: what it does with the menu open. A slash command being typed runs the highlighted
    /// one (`/sta` runs `/status`); on a file it takes the file (`Take`).
    pub fn enter(&self, line: &str, pos: usize) -> Enter {
        let Some(open) = self.open(line, pos) else {
            return Enter::Send;
        };
        if !open.slash {
            return Enter::Take;
        }
        if open.entries.iter().any(|(name, _)| name == line) {
            return Enter::Send;
        }
        let selected = self.highlighted(line, open.entries.len());
        match open.entries.get(selected) {
            Some((name, _)) => Enter::Run(name.clone()),
            None => Enter::Send,
        }
    }
}

impl Menu {
    /// Enter ran `name` from the menu: the line it sends stands for it ([`Menu::sent`]).
    pub fn run_next(&self, name: String) {
        if let Ok(mut run) = self.run.lock() {
            *run = Some(name);
        }
    }

    /// The line the editor sent, with a slash command Enter took from the menu in its place.
    pub fn sent(&self, line: String) -> String {
        match self.run.lock().ok().and_then(|mut r| r.take()) {
            Some(name) if name.starts_with(line.trim()) => name,
            _ => line,
        }
    }
}

/// What Enter does.
#[derive(Debug, PartialEq, Eq)]
pub enum Enter {
    /// Send the line as typed.
    Send,
    /// Send this line instead (the highlighted slash command).
    Run(String),
    /// Put the highlighted entry in place, not sent (a file taken from the `@` menu).
    Take,
}

/// Every slash command: the built-in ones, then the custom ones (a custom one named like a
/// built-in one is not among them).
pub fn all_commands(custom: &[(String, String)]) -> impl Iterator<Item = (&str, &str)> {
    super::slash::COMMANDS
        .iter()
        .copied()
        .chain(custom.iter().map(|(n, h)| (n.as_str(), h.as_str())))
}

/// The files below `cwd` as `@` names them (relative, with `/`), as git would list them
/// (.gitignore respected, hidden files left out), at most `WALK_LIMIT` entries walked.
pub fn files(cwd: &Path) -> Vec<String> {
    ignore::WalkBuilder::new(cwd)
        // .gitignore counts even where git has not been set up yet.
        .require_git(false)
        .build()
        .take(WALK_LIMIT)
        .filter_map(Result::ok)
        .filter(|entry| entry.file_type().is_some_and(|t| t.is_file()))
        .filter_map(|entry| {
            let relative = entry.path().strip_prefix(cwd).ok()?;
            let parts: Vec<String> = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            Some(parts.join("/"))
        })
        .collect()
}

/// The paths in which `query`'s characters appear in order (case ignored), best first: the
/// query inside the file's name, then inside the path, then spread out; shorter paths first.
pub fn fuzzy(paths: &[String], query: &str) -> Vec<String> {
    let query = query.to_lowercase();
    let mut scored: Vec<(u8, &String)> = paths
        .iter()
        .filter_map(|path| {
            let lower = path.to_lowercase();
            let name = lower.rsplit('/').next().unwrap_or(&lower);
            let score = if name.contains(&query) {
                0
            } else if lower.contains(&query) {
                1
            } else if is_subsequence(&query, &lower) {
                2
            } else {
                return None;
            };
            Some((score, path))
        })
        .collect();
    scored.sort_by(|a, b| (a.0, a.1.len(), a.1).cmp(&(b.0, b.1.len(), b.1)));
    scored
        .into_iter()
        .take(FILE_CANDIDATES)
        .map(|(_, path)| path.clone())
        .collect()
}

fn is_subsequence(query: &str, text: &str) -> bool {
    let mut chars = text.chars();
    query.chars().all(|q| chars.any(|c| c == q))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn menu() -> (tempfile::TempDir, Arc<Menu>) {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::create_dir_all(dir.path().join("src")).expect("dir");
        std::fs::write(dir.path().join("src/main.rs"), "").expect("write");
        std::fs::write(dir.path().join("src/mod.rs"), "").expect("write");
        let menu = Menu::new(dir.path().to_path_buf());
        (dir, menu)
    }

    #[test]
    fn arrows_move_the_highlight_and_enter_or_tab_take_it() {
        let (_dir, menu) = menu();
        // One match: Enter runs it, its rest is shown after the cursor.
        assert_eq!(menu.enter("/sta", 4), Enter::Run("/status".into()));
        assert!(menu.hint("/sta", 4).is_some_and(|h| h.starts_with("tus")));
        // Several: the first is highlighted, ↓ moves, Enter runs the highlighted one.
        let hint = menu.hint("/re", 3).unwrap_or_default();
        assert!(hint.contains("› /resume"), "{hint}");
        assert!(menu.step("/re", 3, 1));
        let hint = menu.hint("/re", 3).unwrap_or_default();
        assert!(
            hint.contains("› /rewind") && !hint.contains("› /resume"),
            "{hint}"
        );
        assert_eq!(menu.enter("/re", 3), Enter::Run("/rewind".into()));
        assert_eq!(menu.take("/re", 3), Some((0, "/rewind".into())));
        // ↓ past the end goes round; typing resets the highlight.
        assert!(menu.step("/re", 3, 1));
        assert_eq!(menu.enter("/re", 3), Enter::Run("/resume".into()));
        assert!(menu.step("/re", 3, -1));
        assert_eq!(menu.enter("/res", 4), Enter::Run("/resume".into()));
        // A whole command, words after it, or no match: sent as typed; arrows are history.
        assert_eq!(menu.enter("/status", 7), Enter::Send);
        assert_eq!(menu.enter("/model gpt", 10), Enter::Send);
        assert_eq!(menu.enter("/zz", 3), Enter::Send);
        assert!(!menu.step("hello", 5, 1));
        assert!(!menu.step("/sta", 4, 1));
        // Closed (the line cleared) and opened again: the highlight is at the top.
        assert!(menu.step("/", 1, -1));
        assert_eq!(menu.hint("", 0), None);
        assert!(menu.hint("/", 1).is_some_and(|h| h.contains("› /help")));
    }

    #[test]
    fn at_lists_files_and_enter_takes_the_highlighted_one_without_sending() {
        let (_dir, menu) = menu();
        let hint = menu.hint("look at @src/m", 14).unwrap_or_default();
        assert!(
            hint.contains("› @src/mod.rs") && hint.contains("@src/main.rs"),
            "{hint}"
        );
        assert!(menu.step("look at @src/m", 14, 1));
        assert_eq!(menu.enter("look at @src/m", 14), Enter::Take);
        assert_eq!(
            menu.take("look at @src/m", 14),
            Some((8, "@src/main.rs".into()))
        );
        assert_eq!(
            menu.take("look at @mai", 12),
            Some((8, "@src/main.rs".into()))
        );
        // Not at the end of the line: no menu.
        assert_eq!(menu.enter("look at @src/m now", 14), Enter::Send);
    }

    #[test]
    fn the_menu_fits_the_row() {
        let (_dir, menu) = menu();
        menu.set_custom(vec![("/long".into(), "x".repeat(500))]);
        let hint = menu.hint("/", 1).unwrap_or_default();
        assert!(hint.contains("more"), "{hint}");
        for line in hint.lines() {
            assert!(line.chars().count() < 500, "{line}");
        }
    }
}
