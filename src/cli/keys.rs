//! Keys typed while the agent works, in the interactive session. The terminal stops echoing and
//! stops waiting for a line end (output is left as it is, so `\n` still starts a line), so what
//! is typed never lands in the streamed answer: each key comes out of [`Keys::next`] and the
//! session decides what it means (Esc interrupts, Enter queues the line, y/a/n/t answer an
//! approval). Ctrl-C still raises SIGINT.

use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use nix::poll::{PollFd, PollFlags, poll};
use nix::sys::termios::{self, LocalFlags, SetArg, SpecialCharacterIndices, Termios};
use tokio::sync::mpsc;

/// A key, as the session reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Key {
    Char(char),
    Enter,
    Backspace,
    Esc,
    /// Ctrl-O: the last tool result in full.
    Verbose,
}

/// The terminal in key mode, and the thread reading it.
pub struct Keys {
    keys: mpsc::UnboundedReceiver<Key>,
    stop: Arc<AtomicBool>,
    reader: Option<std::thread::JoinHandle<()>>,
    saved: Termios,
}

impl Keys {
    /// Puts the terminal on standard input in key mode; `None` when it is not a terminal.
    pub fn start() -> Option<Keys> {
        let stdin = std::io::stdin();
        let saved = termios::tcgetattr(stdin.as_fd()).ok()?;
        let mut keyed = saved.clone();
        keyed
            .local_flags
            .remove(LocalFlags::ECHO | LocalFlags::ICANON);
        keyed.control_chars[SpecialCharacterIndices::VMIN as usize] = 1;
        keyed.control_chars[SpecialCharacterIndices::VTIME as usize] = 0;
        termios::tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &keyed).ok()?;
        let (tx, keys) = mpsc::unbounded_channel();
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || read_keys(&tx, &stop))
        };
        Some(Keys {
            keys,
            stop,
            reader: Some(reader),
            saved,
        })
    }

    /// The next key; pending forever once the reader has stopped.
    pub async fn next(&mut self) -> Key {
        match self.keys.recv().await {
            Some(key) => key,
            None => std::future::pending().await,
        }
    }
}

impl Drop for Keys {
    /// Stops the reader and gives the terminal back as it was.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        let _ = termios::tcsetattr(std::io::stdin().as_fd(), SetArg::TCSANOW, &self.saved);
    }
}

/// Waits up to `ms` for input on standard input.
fn ready(ms: u16) -> bool {
    let stdin = std::io::stdin();
    let mut fds = [PollFd::new(stdin.as_fd(), PollFlags::POLLIN)];
    poll(&mut fds, ms).is_ok_and(|n| n > 0)
}

fn read_keys(tx: &mpsc::UnboundedSender<Key>, stop: &AtomicBool) {
    let mut buf = [0u8; 256];
    while !stop.load(Ordering::SeqCst) {
        if !ready(100) || stop.load(Ordering::SeqCst) {
            continue;
        }
        let n = match nix::unistd::read(std::io::stdin(), &mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let mut bytes = buf[..n].to_vec();
        // A lone Esc, or the start of a sequence (an arrow key) whose rest is on its way.
        if bytes == [0x1b] && ready(30) {
            let mut more = [0u8; 64];
            if let Ok(m) = nix::unistd::read(std::io::stdin(), &mut more) {
                bytes.extend_from_slice(&more[..m]);
            }
        }
        for key in parse(&bytes) {
            if tx.send(key).is_err() {
                return;
            }
        }
    }
}

/// The keys in `bytes`: escape sequences (arrows, function keys) are skipped, a lone Esc is
/// [`Key::Esc`], other control bytes that mean nothing here are dropped.
fn parse(bytes: &[u8]) -> Vec<Key> {
    let mut keys = Vec::new();
    let text = String::from_utf8_lossy(bytes);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => match chars.peek() {
                None => keys.push(Key::Esc),
                Some('[') | Some('O') => {
                    chars.next();
                    // Parameters, then one final byte in @..~.
                    for c in chars.by_ref() {
                        if ('@'..='~').contains(&c) {
                            break;
                        }
                    }
                }
                // Alt+key: the key alone.
                Some(_) => {}
            },
            '\r' | '\n' => keys.push(Key::Enter),
            '\u{7f}' | '\u{8}' => keys.push(Key::Backspace),
            '\u{f}' => keys.push(Key::Verbose),
            c if c.is_control() => {}
            c => keys.push(Key::Char(c)),
        }
    }
    keys
}

/// One key from the terminal (raw mode), or a line where raw mode cannot be had.
pub fn read_key() -> anyhow::Result<Option<char>> {
    use crossterm::event::{Event, KeyCode, KeyEvent, KeyModifiers, read};
    use std::io::BufRead;
    if crossterm::terminal::enable_raw_mode().is_ok() {
        let key = loop {
            match read() {
                Ok(Event::Key(KeyEvent {
                    code: KeyCode::Char('c'),
                    modifiers: KeyModifiers::CONTROL,
                    ..
                })) => break None,
                Ok(Event::Key(KeyEvent {
                    code: KeyCode::Char(c),
                    ..
                })) => break Some(c),
                Ok(Event::Key(KeyEvent {
                    code: KeyCode::Enter | KeyCode::Esc,
                    ..
                })) => break None,
                Ok(_) => continue,
                Err(_) => break None,
            }
        };
        let _ = crossterm::terminal::disable_raw_mode();
        return Ok(key);
    }
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    Ok(line.trim().chars().next())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_read_from_bytes_and_sequences_are_skipped() {
        assert_eq!(parse(b"\x1b"), vec![Key::Esc]);
        assert_eq!(
            parse("hé\r".as_bytes()),
            vec![Key::Char('h'), Key::Char('é'), Key::Enter]
        );
        // Up arrow, then a letter; Home in SS3 form.
        assert_eq!(parse(b"\x1b[Ax\x1bOH"), vec![Key::Char('x')]);
        assert_eq!(
            parse(b"a\x7f\x0f\x01"),
            vec![Key::Char('a'), Key::Backspace, Key::Verbose]
        );
    }
}
