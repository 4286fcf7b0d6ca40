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

use super::menu::{all_commands, files, fuzzy};
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::history::FileHistory;
use rustyline::validate::Validator;
use rustyline::{
    Cmd, CompletionType, ConditionalEventHandler, Config, Editor, Event, EventContext,
    EventHandler, Helper, KeyCode, KeyEvent, Modifiers, RepeatCount,
};

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
    let menu = super::menu::Menu::new(cwd.to_path_buf());
    editor.set_helper(Some(PromptHelper {
        cwd: cwd.to_path_buf(),
        menu: menu.clone(),
    }));
    // The live menu: arrows move its highlight, Enter takes it (else their usual meaning:
    // history, sending); Tab completes, which with the menu open is its highlighted entry.
    for (key, step) in [(KeyCode::Up, -1), (KeyCode::Down, 1)] {
        editor.bind_sequence(
            KeyEvent(key, Modifiers::NONE),
            EventHandler::Conditional(Box::new(MenuKey(menu.clone(), MenuAction::Step(step)))),
        );
    }
    editor.bind_sequence(
        KeyEvent(KeyCode::Enter, Modifiers::NONE),
        EventHandler::Conditional(Box::new(MenuKey(menu.clone(), MenuAction::Enter))),
    );
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
        let said = format!(
            "approval: {} · {} · Shift+Tab for the next",
            mode.as_str(),
            mode.describe()
        );
        let width = super::term::style::screen_columns().saturating_sub(1);
        for line in super::term::style::wrap_words(&said, width) {
            eprintln!("{line}");
        }
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

/// What a key does with the menu open.
enum MenuAction {
    /// ↑/↓: moves the highlight.
    Step(isize),
    /// Enter: runs the highlighted slash command, takes the highlighted file.
    Enter,
}

struct MenuKey(Arc<super::menu::Menu>, MenuAction);

impl ConditionalEventHandler for MenuKey {
    fn handle(&self, _: &Event, _: RepeatCount, _: bool, ctx: &EventContext) -> Option<Cmd> {
        let (line, pos) = (ctx.line(), ctx.pos());
        match self.1 {
            MenuAction::Step(step) => self.0.step(line, pos, step).then_some(Cmd::Repaint),
            MenuAction::Enter => match self.0.enter(line, pos) {
                super::menu::Enter::Send => None,
                // Completion puts the highlighted entry in place (and the cursor after it).
                super::menu::Enter::Take => Some(Cmd::Complete),
                // The line is replaced by the command and sent: the next key is Enter's own.
                super::menu::Enter::Run(name) => {
                    self.0.run_next(name);
                    Some(Cmd::AcceptLine)
                }
            },
        }
    }
}

/// Completion for the prompt, relative to the session's working directory.
pub struct PromptHelper {
    cwd: PathBuf,
    /// The live menu (and the custom slash commands it lists after the built-in ones).
    pub menu: Arc<super::menu::Menu>,
}

impl Completer for PromptHelper {
    type Candidate = Pair;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _: &rustyline::Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Pair>)> {
        // With the menu open, what completes is its highlighted entry.
        if let Some((start, entry)) = self.menu.take(line, pos) {
            return Ok((
                start,
                vec![Pair {
                    display: entry.clone(),
                    replacement: format!("{entry} "),
                }],
            ));
        }
        Ok(complete(&self.cwd, &self.menu.custom(), line, pos))
    }
}

impl Hinter for PromptHelper {
    type Hint = String;

    /// Typing `/` or `@` opens the menu: what matches what is typed so far, under the line
    /// (one match is shown after the cursor).
    fn hint(&self, line: &str, pos: usize, _: &rustyline::Context<'_>) -> Option<String> {
        self.menu.hint(line, pos)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::menu::fuzzy;

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
    fn custom_commands_complete_after_the_built_in_ones() {
        let custom = vec![("/review".to_string(), "[file] · Review a file".to_string())];
        let (_, found) = complete(Path::new("/nonexistent"), &custom, "/re", 3);
        assert_eq!(
            replacements(&found),
            vec!["/resume ", "/rewind ", "/review "]
        );
    }
}
