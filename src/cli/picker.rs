//! A list to pick one entry from on the terminal (`nop resume`, `/resume`): arrow keys move,
//! typed text filters (every word must appear, case ignored), Enter picks, Esc cancels. The
//! choosing ([`Choice`]) is apart from the terminal, so it is tested without one. And a
//! question answered with one key ([`key`]).

use std::io::Write;

use crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use crossterm::{cursor, queue, terminal};

/// The entries shown at once.
const SHOWN: usize = 10;

/// What is typed and which of the matching entries is selected.
#[derive(Debug, Default)]
pub struct Choice {
    pub filter: String,
    pub selected: usize,
}

/// What a key did.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    Go,
    Picked(usize),
    Cancelled,
}

impl Choice {
    /// The indexes of the entries matching the filter, in their order.
    pub fn matching(&self, entries: &[String]) -> Vec<usize> {
        let words: Vec<String> = self
            .filter
            .split_whitespace()
            .map(str::to_lowercase)
            .collect();
        entries
            .iter()
            .enumerate()
            .filter(|(_, e)| {
                let e = e.to_lowercase();
                words.iter().all(|w| e.contains(w.as_str()))
            })
            .map(|(i, _)| i)
            .collect()
    }

    fn key(&mut self, key: KeyEvent, entries: &[String]) -> Step {
        let matching = self.matching(entries);
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        match key.code {
            KeyCode::Esc => return Step::Cancelled,
            KeyCode::Char('c' | 'd') if ctrl => return Step::Cancelled,
            KeyCode::Enter => {
                return match matching.get(self.selected) {
                    Some(i) => Step::Picked(*i),
                    None => Step::Go,
                };
            }
            KeyCode::Up => self.selected = self.selected.saturating_sub(1),
            KeyCode::Down if self.selected + 1 < matching.len() => self.selected += 1,
            KeyCode::Char('p') if ctrl => self.selected = self.selected.saturating_sub(1),
            KeyCode::Char('n') if ctrl && self.selected + 1 < matching.len() => {
                self.selected += 1;
            }
            KeyCode::Backspace => {
                self.filter.pop();
                self.selected = 0;
            }
            KeyCode::Char(c) if !ctrl => {
                self.filter.push(c);
                self.selected = 0;
            }
            _ => {}
        }
        Step::Go
    }

    /// The lines shown: the question with the filter, then the matching entries around the
    /// selected one (`›` marks it).
    pub fn lines(&self, question: &str, entries: &[String]) -> Vec<String> {
        let matching = self.matching(entries);
        let mut lines = vec![format!(
            "{question} (type to filter, ↑↓, Enter, Esc to cancel): {}",
            self.filter
        )];
        if matching.is_empty() {
            lines.push("  (nothing matches)".into());
        }
        let first = self.selected.saturating_sub(SHOWN - 1);
        for (at, i) in matching.iter().enumerate().skip(first).take(SHOWN) {
            let mark = if at == self.selected { '›' } else { ' ' };
            lines.push(format!("{mark} {}", entries[*i]));
        }
        lines
    }
}

/// Asks on the terminal (standard error) which of `entries` (one line each, already made safe
/// to print) to take: its index, or `None` when cancelled.
pub fn pick(question: &str, entries: &[String]) -> std::io::Result<Option<usize>> {
    terminal::enable_raw_mode()?;
    let picked = choose(question, entries);
    let restored = terminal::disable_raw_mode();
    let picked = picked?;
    restored?;
    Ok(picked)
}

fn choose(question: &str, entries: &[String]) -> std::io::Result<Option<usize>> {
    let mut err = std::io::stderr();
    let mut choice = Choice::default();
    let mut drawn = 0u16;
    loop {
        let width = terminal::size().map_or(80, |(w, _)| usize::from(w.max(20)));
        if drawn > 0 {
            queue!(err, cursor::MoveToPreviousLine(drawn))?;
        }
        queue!(
            err,
            cursor::MoveToColumn(0),
            terminal::Clear(terminal::ClearType::FromCursorDown)
        )?;
        let lines = choice.lines(question, entries);
        for line in &lines {
            let line: String = line.chars().take(width - 1).collect();
            write!(err, "{line}\r\n")?;
        }
        err.flush()?;
        drawn = u16::try_from(lines.len()).unwrap_or(u16::MAX);
        let Event::Key(key) = event::read()? else {
            continue;
        };
        if key.kind == KeyEventKind::Release {
            continue;
        }
        match choice.key(key, entries) {
            Step::Go => {}
            Step::Picked(i) => return Ok(Some(i)),
            Step::Cancelled => return Ok(None),
        }
    }
}

/// What a key answers to a one-key question: `Some(Some(letter))` for one of `letters`
/// (either case), `Some(None)` for Esc or Ctrl-C (cancelled), `None` for any other key.
fn answer(key: KeyEvent, letters: &[char]) -> Option<Option<char>> {
    let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
    match key.code {
        KeyCode::Esc => Some(None),
        KeyCode::Char('c' | 'd') if ctrl => Some(None),
        KeyCode::Char(c) if !ctrl => letters
            .iter()
            .find(|l| l.eq_ignore_ascii_case(&c))
            .map(|l| Some(*l)),
        _ => None,
    }
}

/// Asks `question` on the terminal (standard error) with its answers, a letter and what it does
/// each: the letter pressed, or `None` when cancelled (Esc). Other keys are ignored.
pub fn key(question: &str, answers: &[(char, &str)]) -> std::io::Result<Option<char>> {
    let mut err = std::io::stderr();
    let shown: Vec<String> = answers
        .iter()
        .map(|(k, what)| format!("{k}: {what}"))
        .collect();
    // Broken between the answers at the terminal's width, never inside one.
    let mut items = vec![question.to_string()];
    items.extend(shown);
    items.push("Esc: nothing ".to_string());
    let width = crate::cli::term::style::screen_columns().saturating_sub(1);
    let lines = crate::cli::term::style::wrap_items(&items, width, 2);
    write!(err, "{}", lines.join("\n"))?;
    err.flush()?;
    let letters: Vec<char> = answers.iter().map(|(k, _)| *k).collect();
    terminal::enable_raw_mode()?;
    let picked = loop {
        match event::read() {
            Ok(Event::Key(key)) if key.kind != KeyEventKind::Release => {
                if let Some(answer) = answer(key, &letters) {
                    break Ok(answer);
                }
            }
            Ok(_) => {}
            Err(e) => break Err(e),
        }
    };
    let restored = terminal::disable_raw_mode();
    let picked = picked?;
    restored?;
    writeln!(err, "{}", picked.map(String::from).unwrap_or_default())?;
    Ok(picked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_one_key_answer_is_one_of_its_letters_in_either_case_or_esc() {
        let letters = ['b', 'f', 'c'];
        let key = |code| answer(KeyEvent::new(code, KeyModifiers::NONE), &letters);
        assert_eq!(key(KeyCode::Char('f')), Some(Some('f')));
        assert_eq!(key(KeyCode::Char('B')), Some(Some('b')));
        assert_eq!(key(KeyCode::Char('x')), None);
        assert_eq!(key(KeyCode::Enter), None);
        assert_eq!(key(KeyCode::Esc), Some(None));
        let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
        assert_eq!(answer(ctrl_c, &letters), Some(None));
    }

    fn press(choice: &mut Choice, entries: &[String], keys: &[KeyCode]) -> Step {
        let mut step = Step::Go;
        for code in keys {
            step = choice.key(KeyEvent::new(*code, KeyModifiers::NONE), entries);
        }
        step
    }

    #[test]
    fn arrows_move_typing_filters_and_enter_picks_among_the_matching() {
        let entries: Vec<String> = ["fix the parser", "write docs", "Fix the lexer"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let mut choice = Choice::default();
        assert_eq!(
            press(&mut choice, &entries, &[KeyCode::Down, KeyCode::Enter]),
            Step::Picked(1)
        );
        let mut choice = Choice::default();
        let typed: Vec<KeyCode> = "fix".chars().map(KeyCode::Char).collect();
        press(&mut choice, &entries, &typed);
        assert_eq!(choice.matching(&entries), vec![0, 2]);
        assert_eq!(
            press(
                &mut choice,
                &entries,
                &[KeyCode::Down, KeyCode::Down, KeyCode::Enter]
            ),
            Step::Picked(2)
        );
        let lines = choice.lines("resume which", &entries);
        assert_eq!(lines[1..], ["  fix the parser", "› Fix the lexer"]);
        let mut choice = Choice::default();
        let typed: Vec<KeyCode> = "zz".chars().map(KeyCode::Char).collect();
        assert_eq!(press(&mut choice, &entries, &typed), Step::Go);
        assert_eq!(press(&mut choice, &entries, &[KeyCode::Enter]), Step::Go);
        assert_eq!(
            press(&mut choice, &entries, &[KeyCode::Esc]),
            Step::Cancelled
        );
    }
}
