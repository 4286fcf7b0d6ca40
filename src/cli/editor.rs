//! The interactive session's line editor: its keys (Enter sends; Alt-Enter, Ctrl-J and
//! Shift+Enter insert a newline; Shift+Tab asks for the next approval mode; Esc Esc on an empty
//! prompt asks for `/undo`'s points to go back to) and its completion
//! (slash commands with their help, paths, `@` and a fuzzy part of a file's name).

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use nix::sys::termios::{self, InputFlags, SetArg, Termios};
use nop::permissions::{ApprovalMode, Approver};
use rustyline::completion::{Completer, Pair};
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::history::FileHistory;
use rustyline::validate::Validator;
use rustyline::{
    Cmd, CompletionType, ConditionalEventHandler, Config, Editor, Event, EventContext,
    EventHandler, Helper, KeyCode, KeyEvent, Modifiers, RepeatCount,
};

/// How many entries the `@` completion walks at most (a huge repository stays responsive).
const WALK_LIMIT: usize = 20_000;
/// How many files `@` offers at most.
const FILE_CANDIDATES: usize = 50;
/// How many paths Tab offers at most.
const PATH_CANDIDATES: usize = 200;

/// The prompt's editor.
pub type PromptEditor = Editor<PromptHelper, FileHistory>;

/// The editor with nop's keys and completion; the `ModeSwitch` says when Shift+Tab ended a line.
pub fn editor(cwd: &Path) -> rustyline::Result<(PromptEditor, ModeSwitch)> {
    let config = Config::builder()
        .completion_type(CompletionType::List)
        .completion_show_all_if_ambiguous(true)
        .build();
    let mut editor: PromptEditor = Editor::with_config(config)?;
    editor.set_helper(Some(PromptHelper {
        cwd: cwd.to_path_buf(),
        custom: Vec::new(),
    }));
    for key in [
        KeyEvent(KeyCode::Enter, Modifiers::ALT),
        KeyEvent(KeyCode::Enter, Modifiers::SHIFT),
        KeyEvent::ctrl('J'),
    ] {
        editor.bind_sequence(key, EventHandler::Simple(Cmd::Newline));
    }
    let switch = ModeSwitch::default();
    editor.bind_sequence(
        KeyEvent(KeyCode::BackTab, Modifiers::NONE),
        EventHandler::Conditional(Box::new(ShiftTab(switch.clone(), Ended::ModeSwitch))),
    );
    editor.bind_sequence(
        KeyEvent::ctrl('O'),
        EventHandler::Conditional(Box::new(ShiftTab(switch.clone(), Ended::ShowResult))),
    );
    // rustyline reads Esc and the key after it as one (Alt+key), and Esc Esc as one Esc.
    editor.bind_sequence(
        KeyEvent(KeyCode::Esc, Modifiers::NONE),
        EventHandler::Conditional(Box::new(EscEsc(switch.clone()))),
    );
    Ok((editor, switch))
}

/// Enter kept apart from Ctrl-J for the session's life: the terminal turns a typed-ahead Enter
/// (typed while nop is not reading keys) into Ctrl-J's byte unless told not to, and that Enter
/// would then insert a newline instead of sending. The terminal is given back as it was on drop.
pub struct EnterKept(Option<Termios>);

impl EnterKept {
    pub fn start() -> EnterKept {
        let stdin = std::io::stdin();
        let Ok(saved) = termios::tcgetattr(stdin.as_fd()) else {
            return EnterKept(None);
        };
        let mut kept = saved.clone();
        kept.input_flags.remove(InputFlags::ICRNL);
        match termios::tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &kept) {
            Ok(()) => EnterKept(Some(saved)),
            Err(_) => EnterKept(None),
        }
    }
}

impl Drop for EnterKept {
    fn drop(&mut self) {
        if let Some(saved) = &self.0 {
            let _ = termios::tcsetattr(std::io::stdin().as_fd(), SetArg::TCSANOW, saved);
        }
    }
}

/// The prompt: `› `, with the approval mode before it when it is not the default one.
pub fn prompt(mode: ApprovalMode) -> String {
    if mode == ApprovalMode::default() {
        "› ".to_string()
    } else {
        format!("{} › ", mode.as_str())
    }
}

/// Which key ended a line without sending it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// Shift+Tab: the next approval mode.
    ModeSwitch,
    /// Ctrl-O: the last tool result in full.
    ShowResult,
    /// Esc Esc on an empty prompt: `/undo`'s points to go back to.
    Undo,
}

/// What Shift+Tab or Ctrl-O left: the line as typed, split at the cursor. The key ends the line
/// as Ctrl-C does (rustyline cannot change the prompt of a line being edited, nor print above
/// it); this tells them apart, and the session prompts again with the line as it was.
#[derive(Clone, Default)]
pub struct ModeSwitch(Arc<Mutex<Option<(Ended, String, String)>>>);

impl ModeSwitch {
    /// The line `key` ended (before and after the cursor), once; `None` after a Ctrl-C or
    /// another key.
    fn take(&self, key: Ended) -> Option<(String, String)> {
        let mut saved = self.0.lock().ok()?;
        match saved.take() {
            Some((ended, before, after)) if ended == key => Some((before, after)),
            other => {
                *saved = other;
                None
            }
        }
    }

    /// After Shift+Tab ended the line (`false`: it was something else): switches to the next
    /// approval mode, says so in a line, and leaves the line as it was typed to prompt with.
    pub fn cycle(&self, approver: &Approver, typed: &mut String, after: &mut String) -> bool {
        let Some((before, rest)) = self.take(Ended::ModeSwitch) else {
            return false;
        };
        let mode = approver.mode().next();
        approver.set_mode(mode);
        eprintln!(
            "approval: {} · {} · Shift+Tab for the next",
            mode.as_str(),
            mode.describe()
        );
        *typed = before;
        *after = rest;
        true
    }

    /// Whether Ctrl-O ended the line (the caller shows the last result); leaves the line as it
    /// was typed to prompt with.
    pub fn show_result(&self, typed: &mut String, after: &mut String) -> bool {
        let Some((before, rest)) = self.take(Ended::ShowResult) else {
            return false;
        };
        *typed = before;
        *after = rest;
        true
    }

    /// Whether Esc Esc on an empty prompt ended the line (the caller opens `/undo`).
    pub fn undo_asked(&self) -> bool {
        self.take(Ended::Undo).is_some()
    }
}

/// Esc Esc: on an empty prompt it ends the line for `/undo`; with text typed it does what it did.
struct EscEsc(ModeSwitch);

impl ConditionalEventHandler for EscEsc {
    fn handle(&self, _: &Event, _: RepeatCount, _: bool, ctx: &EventContext) -> Option<Cmd> {
        if !ctx.line().is_empty() {
            return None;
        }
        if let Ok(mut saved) = (self.0).0.lock() {
            *saved = Some((Ended::Undo, String::new(), String::new()));
        }
        Some(Cmd::Interrupt)
    }
}

struct ShiftTab(ModeSwitch, Ended);

impl ConditionalEventHandler for ShiftTab {
    fn handle(&self, _: &Event, _: RepeatCount, _: bool, ctx: &EventContext) -> Option<Cmd> {
        let line = ctx.line();
        let pos = ctx.pos().min(line.len());
        let (before, after) = line.split_at(pos);
        if let Ok(mut saved) = (self.0).0.lock() {
            *saved = Some((self.1, before.to_string(), after.to_string()));
        }
        Some(Cmd::Interrupt)
    }
}

/// Completion for the prompt, relative to the session's working directory.
pub struct PromptHelper {
    cwd: PathBuf,
    /// The custom slash commands (`/name`, help), after the built-in ones.
    pub custom: Vec<(String, String)>,
}

impl Completer for PromptHelper {
    type Candidate = Pair;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _: &rustyline::Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Pair>)> {
        Ok(complete(&self.cwd, &self.custom, line, pos))
    }
}

impl Hinter for PromptHelper {
    type Hint = String;

    /// Typing `/` opens the menu: the commands that match what is typed so far, each with its
    /// help, under the line (Tab completes; one match is shown inline).
    fn hint(&self, line: &str, pos: usize, _: &rustyline::Context<'_>) -> Option<String> {
        slash_menu(&self.custom, line, pos)
    }
}

/// Every slash command: the built-in ones, then the custom ones (a custom one named like a
/// built-in one is not among them).
fn all_commands(custom: &[(String, String)]) -> impl Iterator<Item = (&str, &str)> {
    super::slash::COMMANDS
        .iter()
        .copied()
        .chain(custom.iter().map(|(n, h)| (n.as_str(), h.as_str())))
}

/// The slash commands matching `line` (a `/word` being typed at its end), as a hint.
pub fn slash_menu(custom: &[(String, String)], line: &str, pos: usize) -> Option<String> {
    if pos != line.len() || !line.starts_with('/') || line.contains(char::is_whitespace) {
        return None;
    }
    let matching: Vec<(&str, &str)> = all_commands(custom)
        .filter(|(name, _)| name.starts_with(line))
        .collect();
    match matching.as_slice() {
        [] => None,
        [(name, help)] => Some(format!("{}  {help}", &name[line.len()..])),
        many => {
            const SHOWN: usize = 8;
            let mut menu: String = many
                .iter()
                .take(SHOWN)
                .map(|(name, help)| format!("\n  {name:<11} {help}"))
                .collect();
            if many.len() > SHOWN {
                menu.push_str(&format!(
                    "\n  … {} more (Tab lists them all)",
                    many.len() - SHOWN
                ));
            }
            Some(menu)
        }
    }
}

impl Highlighter for PromptHelper {}

impl Validator for PromptHelper {}

impl Helper for PromptHelper {}

/// Where the replaced word starts and what may replace it: a slash command at the start of the
/// line, `@` and a fuzzy part of a file's name, else a path.
pub fn complete(
    cwd: &Path,
    custom: &[(String, String)],
    line: &str,
    pos: usize,
) -> (usize, Vec<Pair>) {
    let before = line.get(..pos).unwrap_or(line);
    let start = before
        .char_indices()
        .rev()
        .find(|(_, c)| c.is_whitespace())
        .map_or(0, |(i, c)| i + c.len_utf8());
    let word = &before[start..];
    if start == 0 && word.starts_with('/') {
        let found = commands(custom, word);
        if !found.is_empty() {
            return (0, found);
        }
    }
    if let Some(query) = word.strip_prefix('@') {
        return (start, mentions(word, &files(cwd), query));
    }
    (start, paths(cwd, word))
}

/// The slash commands that begin with `word`, each shown with its one-line help.
fn commands(custom: &[(String, String)], word: &str) -> Vec<Pair> {
    all_commands(custom)
        .filter(|(name, _)| name.starts_with(word))
        .map(|(name, what)| Pair {
            display: format!("{name:<11} {what}"),
            replacement: format!("{name} "),
        })
        .collect()
}

/// The entries of the directory `word` names that begin with its last part (hidden ones only
/// when that part begins with a dot); a directory ends with `/`.
fn paths(cwd: &Path, word: &str) -> Vec<Pair> {
    let (dir, prefix) = match word.rfind('/') {
        Some(i) => word.split_at(i + 1),
        None => ("", word),
    };
    let base = if dir.is_empty() {
        cwd.to_path_buf()
    } else {
        cwd.join(dir)
    };
    let Ok(entries) = std::fs::read_dir(&base) else {
        return Vec::new();
    };
    let mut found: Vec<Pair> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            if !name.starts_with(prefix) || (name.starts_with('.') && !prefix.starts_with('.')) {
                return None;
            }
            let slash = if entry.path().is_dir() { "/" } else { "" };
            Some(Pair {
                display: format!("{name}{slash}"),
                replacement: format!("{dir}{name}{slash}"),
            })
        })
        .take(PATH_CANDIDATES)
        .collect();
    found.sort_by(|a, b| a.display.cmp(&b.display));
    found
}

/// The files below `cwd` as `@` names them (relative, with `/`), as git would list them
/// (.gitignore respected, hidden files left out), at most `WALK_LIMIT` entries walked.
fn files(cwd: &Path) -> Vec<String> {
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

/// The files `query` matches, best first. One is put in place; several are listed, and the
/// typed text is kept unless every match begins with it (a fuzzy match has no common prefix
/// worth putting in its place).
fn mentions(word: &str, files: &[String], query: &str) -> Vec<Pair> {
    let found = fuzzy(files, query);
    if let [only] = found.as_slice() {
        return vec![Pair {
            display: only.clone(),
            replacement: format!("@{only} "),
        }];
    }
    let extend = found.iter().all(|path| path.starts_with(query));
    found
        .into_iter()
        .map(|path| Pair {
            replacement: if extend {
                format!("@{path}")
            } else {
                word.to_string()
            },
            display: path,
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

    fn replacements(found: &[Pair]) -> Vec<&str> {
        found.iter().map(|p| p.replacement.as_str()).collect()
    }

    #[test]
    fn the_prompt_names_the_mode_only_when_it_is_not_the_default() {
        assert_eq!(prompt(ApprovalMode::OnRequest), "› ");
        assert_eq!(prompt(ApprovalMode::Plan), "plan › ");
        assert_eq!(prompt(ApprovalMode::Always), "always › ");
    }

    #[test]
    fn a_slash_at_the_start_completes_commands_with_their_help() {
        let cwd = Path::new("/nonexistent");
        let (start, found) = complete(cwd, &[], "/re", 3);
        assert_eq!(start, 0);
        assert_eq!(replacements(&found), vec!["/resume ", "/rewind "]);
        assert!(
            found[0].display.contains("pick a recent session"),
            "{}",
            found[0].display
        );
        let (_, found) = complete(cwd, &[], "/", 1);
        assert_eq!(found.len(), super::super::slash::COMMANDS.len());
        // Not at the start: a path.
        let (start, found) = complete(cwd, &[], "see /re", 7);
        assert_eq!(start, 4);
        assert!(found.is_empty());
    }

    #[test]
    fn fuzzy_matches_a_subsequence_best_first() {
        let paths: Vec<String> = [
            "src/main.rs",
            "src/cli/mod.rs",
            "docs/running.md",
            "README.md",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(fuzzy(&paths, "main"), vec!["src/main.rs"]);
        assert_eq!(
            fuzzy(&paths, "MD"),
            vec!["README.md", "docs/running.md", "src/cli/mod.rs"]
        );
        assert_eq!(fuzzy(&paths, "scm"), vec!["src/main.rs", "src/cli/mod.rs"]);
        assert_eq!(fuzzy(&paths, "xyz"), Vec::<String>::new());
    }

    #[test]
    fn several_fuzzy_matches_keep_what_was_typed_and_one_is_put_in_place() {
        let paths: Vec<String> = ["src/main.rs", "src/mod.rs"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            replacements(&mentions("@mrs", &paths, "mrs")),
            vec!["@mrs", "@mrs"]
        );
        assert_eq!(
            replacements(&mentions("@src/m", &paths, "src/m")),
            vec!["@src/mod.rs", "@src/main.rs"]
        );
        assert_eq!(
            replacements(&mentions("@mai", &paths, "mai")),
            vec!["@src/main.rs "]
        );
    }

    #[test]
    fn tab_completes_paths_and_at_completes_files_that_git_would_list() {
        let dir = tempfile::tempdir().expect("dir");
        let root = dir.path();
        std::fs::create_dir_all(root.join("src/deep")).expect("dirs");
        std::fs::create_dir_all(root.join("target")).expect("dirs");
        std::fs::write(root.join(".gitignore"), "target/\n").expect("write");
        std::fs::write(root.join("src/deep/parser.rs"), "").expect("write");
        std::fs::write(root.join("target/parser.rs"), "").expect("write");
        std::fs::write(root.join("setup.py"), "").expect("write");
        let (start, found) = complete(root, &[], "look at s", 9);
        assert_eq!(start, 8);
        assert_eq!(replacements(&found), vec!["setup.py", "src/"]);
        let (_, found) = complete(root, &[], "src/de", 6);
        assert_eq!(replacements(&found), vec!["src/deep/"]);
        let (start, found) = complete(root, &[], "explain @prs", 12);
        assert_eq!(start, 8);
        assert_eq!(replacements(&found), vec!["@src/deep/parser.rs "]);
    }

    #[test]
    fn typing_a_slash_opens_a_menu_of_the_matching_commands() {
        let all = slash_menu(&[], "/", 1).unwrap_or_default();
        assert!(all.contains("/help"), "{all}");
        assert!(all.contains("more (Tab lists them all)"), "{all}");
        let some = slash_menu(&[], "/re", 3).unwrap_or_default();
        assert!(
            some.contains("/resume") && some.contains("/rewind"),
            "{some}"
        );
        assert!(!some.contains("/help"), "{some}");
        assert_eq!(
            slash_menu(&[], "/sta", 4).as_deref(),
            Some("tus  model, session, tokens and context (also /cost)")
        );
        assert_eq!(slash_menu(&[], "/status now", 11), None);
        assert_eq!(slash_menu(&[], "hello", 5), None);
        assert_eq!(slash_menu(&[], "/zz", 3), None);
        let custom = vec![("/review".to_string(), "[file] · Review a file".to_string())];
        assert_eq!(
            slash_menu(&custom, "/rev", 4).as_deref(),
            Some("iew  [file] · Review a file")
        );
        let (_, found) = complete(Path::new("/nonexistent"), &custom, "/re", 3);
        assert_eq!(
            replacements(&found),
            vec!["/resume ", "/rewind ", "/review "]
        );
    }
}
