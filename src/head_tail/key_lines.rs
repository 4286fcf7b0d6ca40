//! The lines of a stream that say why a command failed — an assertion and its values, a panic,
//! a traceback's exception, `error:` and the ` --> file:line` after it, the name of the failing
//! test — picked as the stream goes by, in bounded memory ([`KeyLines`]), and the test that
//! recognises one ([`weight`]), for test runners and compilers of Rust, Python, JavaScript and
//! Go. A head and tail of a long output loses its middle; these lines are shown from it.

/// At most this many lines are kept, context included.
pub const MAX_KEPT: usize = 40;

/// A kept line is cut to this many bytes (then ends with `…`).
pub const LINE_MAX: usize = 240;

/// A run of consecutive key lines keeps at most this many (a long diff of `E` lines must not
/// leave no room for the next failure).
const GROUP_MAX: usize = 10;

/// What a line says of a failure, from least to most: a summary or a header (`failures:`,
/// `Traceback …`), which test or where (`FAIL: test_x`, ` --> src/a.rs:3:5`), the cause (the
/// assertion, the panic, the error message).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Weight {
    Summary,
    Which,
    Cause,
}

/// A line of the stream: its number (from 1), where it starts and ends (past its newline) in
/// the stream, its text (at most [`LINE_MAX`] bytes), and its weight (`None`: a line of
/// context around one that has a weight).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyLine {
    pub number: u64,
    pub start: u64,
    pub end: u64,
    pub text: String,
    pub weight: Option<Weight>,
}

/// The key lines of a stream as it arrives, each with the line before and after it, the first
/// [`MAX_KEPT`] of them; and how many lines the stream has.
#[derive(Debug, Clone, Default)]
pub struct KeyLines {
    /// The line being read, its first [`LINE_MAX`] bytes.
    line: Vec<u8>,
    /// The line being read is longer than what is kept of it.
    long: bool,
    start: u64,
    offset: u64,
    /// Lines ended (by a newline) so far.
    ended: u64,
    /// The last line, not kept: context for a key line that may follow.
    before: Option<KeyLine>,
    /// The next line is context after a key line.
    after: bool,
    /// Key lines in the current run of them.
    group: usize,
    kept: Vec<KeyLine>,
    /// Key lines seen but not kept, for want of room.
    missed: u64,
}

impl KeyLines {
    pub fn push(&mut self, mut bytes: &[u8]) {
        while let Some(i) = bytes.iter().position(|b| *b == b'\n') {
            self.take(&bytes[..i]);
            self.offset += i as u64 + 1;
            self.end_line();
            bytes = &bytes[i + 1..];
        }
        self.take(bytes);
        self.offset += bytes.len() as u64;
    }

    /// How many newlines the stream had.
    pub fn newlines(&self) -> u64 {
        self.ended
    }

    /// How many lines the stream has: a last one without a newline counts.
    pub fn lines(&self) -> u64 {
        self.ended + u64::from(self.offset > self.start)
    }

    /// The kept lines, in order.
    pub fn kept(&self) -> &[KeyLine] {
        &self.kept
    }

    /// Key lines seen and not kept.
    pub fn missed(&self) -> u64 {
        self.missed
    }

    fn take(&mut self, part: &[u8]) {
        let room = LINE_MAX.saturating_sub(self.line.len());
        self.line.extend_from_slice(&part[..room.min(part.len())]);
        self.long |= part.len() > room;
    }

    fn end_line(&mut self) {
        self.ended += 1;
        let mut bytes = std::mem::take(&mut self.line);
        if self.long {
            bytes.truncate(super::complete_prefix(&bytes));
        }
        let mut text = String::from_utf8_lossy(&bytes).into_owned();
        if text.ends_with('\r') {
            text.pop();
        }
        if self.long {
            text.push('…');
        }
        let line = KeyLine {
            number: self.ended,
            start: self.start,
            end: self.offset,
            weight: weight(&text),
            text,
        };
        self.start = self.offset;
        self.long = false;
        if line.weight.is_none() {
            self.group = 0;
            if std::mem::take(&mut self.after) && self.kept.len() < MAX_KEPT {
                self.kept.push(line);
            } else {
                self.before = Some(line);
            }
            return;
        }
        if self.group >= GROUP_MAX || self.kept.len() >= MAX_KEPT {
            self.missed += 1;
            self.before = None;
            self.after = false;
            return;
        }
        if let Some(before) = self.before.take()
            && self.kept.len() + 1 < MAX_KEPT
        {
            self.kept.push(before);
        }
        self.kept.push(line);
        self.group += 1;
        self.after = true;
    }
}

/// What `line` says of a failure, if anything.
pub fn weight(line: &str) -> Option<Weight> {
    let t = line.trim_start();
    let starts = |prefixes: &[&str]| prefixes.iter().any(|p| t.starts_with(p));
    let cause = line.contains("panicked at")
        || starts(&[
            "assertion",
            "left:",
            "right:",
            "error[",
            "error:",
            "Error:",
            "ERROR:",
            "fatal:",
            "FATAL:",
            "panic:",
        ])
        || line.starts_with("E ")
        || ((t.starts_with("Expected") || t.starts_with("Received")) && t.contains(':'))
        || is_exception(t)
        || is_go_failure(t);
    if cause {
        return Some(Weight::Cause);
    }
    let which = (t.starts_with("test ") && t.ends_with(" FAILED"))
        || (t.starts_with("---- ") && t.ends_with(" ----"))
        || starts(&["FAIL: ", "FAIL ", "FAIL\t", "--- FAIL", "●", "--> "])
        || (line.starts_with("FAILED ") && !line.starts_with("FAILED ("))
        || (t.starts_with("___") && t.ends_with("___") && t.chars().any(char::is_alphanumeric))
        || is_located_exception(t);
    if which {
        return Some(Weight::Which);
    }
    let summary = starts(&[
        "test result: FAILED",
        "Traceback (most recent call last)",
        "FAILED (",
    ]) || t == "failures:"
        || (t.starts_with('=') && (t.contains(" failed") || t.contains(" error")))
        || (t.starts_with("Tests:") && t.contains(" failed"));
    summary.then_some(Weight::Summary)
}

/// `AssertionError: 3 != 4`, `ValueError`, `pkg.mod.SomeException: …`, `TypeError: x is …`.
fn is_exception(t: &str) -> bool {
    let name = t.split([':', ' ']).next().unwrap_or_default();
    let ends = name.ends_with("Error") || name.ends_with("Exception");
    ends && name.len() > "Error".len()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
        && name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && (t.len() == name.len() || t[name.len()..].starts_with(':'))
}

/// pytest's `tests/test_calc.py:4: AssertionError`: where an exception was raised.
fn is_located_exception(t: &str) -> bool {
    let Some((place, what)) = t.split_once(": ") else {
        return false;
    };
    let located = place
        .rsplit_once(':')
        .is_some_and(|(file, line)| !file.is_empty() && line.parse::<u32>().is_ok());
    located && is_exception(what)
}

/// Go's `    calc_test.go:12: got 3, want 4` under `--- FAIL`.
fn is_go_failure(t: &str) -> bool {
    t.split_once(".go:").is_some_and(|(file, rest)| {
        file.ends_with("_test")
            && rest
                .split_once(':')
                .is_some_and(|(n, _)| n.parse::<u32>().is_ok())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn picked(text: &str) -> Vec<String> {
        let mut keys = KeyLines::default();
        // In pieces, as a pipe gives them.
        for piece in text.as_bytes().chunks(7) {
            keys.push(piece);
        }
        keys.kept().iter().map(|l| l.text.clone()).collect()
    }

    fn fixture(name: &str) -> String {
        let path = format!(
            "{}/tests/fixtures/command-output/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    #[test]
    fn a_failing_cargo_test_gives_its_test_its_panic_and_its_values() {
        let picked = picked(&fixture("cargo-fail.out"));
        for line in [
            "test tests::adds_wrong ... FAILED",
            "---- tests::adds_wrong stdout ----",
            "thread 'tests::adds_wrong' (22024) panicked at src/lib.rs:6:31:",
            "assertion `left == right` failed",
            "  left: 3",
            " right: 4",
            "test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.16s",
        ] {
            assert!(picked.iter().any(|l| l == line), "{line} in {picked:#?}");
        }
        // Passing tests (but the one before a failure, as context) and the backtrace's frames
        // are not picked.
        assert!(
            !picked.iter().any(|l| l.contains("adds_more")),
            "{picked:#?}"
        );
        assert!(!picked.iter().any(|l| l.contains("assert_failed_inner")));
    }

    #[test]
    fn a_compile_error_gives_the_error_and_where_it_is() {
        let picked = picked(&fixture("cargo-err.err"));
        assert_eq!(
            picked[..3],
            [
                "   Compiling demo v0.1.0 (/work/demo)",
                "error[E0308]: mismatched types",
                " --> src/lib.rs:9:36"
            ]
        );
        assert!(
            picked
                .iter()
                .any(|l| l.starts_with("error: could not compile"))
        );
    }

    #[test]
    fn both_failures_of_pytest_and_unittest_are_picked() {
        let picked = picked(&fixture("pytest-fail.out"));
        for line in [
            "___________________________________ test_add ___________________________________",
            "E       assert 3 == 4",
            "___________________________________ test_div ___________________________________",
            "E       AssertionError: six over three",
            "tests/test_calc.py:11: AssertionError",
            "FAILED tests/test_calc.py::test_add - assert 3 == 4",
            "FAILED tests/test_calc.py::test_div - AssertionError: six over three",
        ] {
            assert!(picked.iter().any(|l| l == line), "{line} in {picked:#?}");
        }
        // The line before an `E` line is the source line it is about.
        assert!(picked.iter().any(|l| l == ">       assert add(1, 2) == 4"));
        let picked = picked_unittest();
        for line in [
            "FAIL: test_add (test_unit.T.test_add)",
            "AssertionError: 3 != 4",
            "FAIL: test_div (test_unit.T.test_div)",
            "AssertionError: 2.0 != 3",
            "FAILED (failures=2)",
        ] {
            assert!(picked.iter().any(|l| l == line), "{line} in {picked:#?}");
        }
    }

    fn picked_unittest() -> Vec<String> {
        picked(&fixture("unittest-fail.err"))
    }

    #[test]
    fn jest_and_go_failures_are_recognised() {
        for line in [
            "  ● sum › adds two numbers",
            "    Expected: 4",
            "    Received: 3",
            "--- FAIL: TestAdd (0.00s)",
            "    calc_test.go:12: got 3, want 4",
            "panic: runtime error: index out of range [3] with length 3",
            "Error: Cannot find module './x'",
            "TypeError: Cannot read properties of undefined (reading 'x')",
        ] {
            assert!(weight(line).is_some(), "{line}");
        }
        for line in [
            "test tests::adds ... ok",
            "0 errors, 2 warnings",
            "Errors are reported below",
            "   Compiling demo v0.1.0",
            "ok  \texample.com/calc\t0.002s",
            "the expected value",
            "Error",
        ] {
            assert_eq!(weight(line), None, "{line}");
        }
    }

    #[test]
    fn memory_is_bounded_and_lines_are_counted() {
        let mut keys = KeyLines::default();
        let long = format!("error: {}\n", "x".repeat(10_000));
        for i in 0..20_000 {
            if i % 3 == 0 {
                keys.push(long.as_bytes());
            } else {
                keys.push(format!("line {i}\n").as_bytes());
            }
        }
        keys.push(b"no newline");
        assert_eq!(keys.newlines(), 20_000);
        assert_eq!(keys.lines(), 20_001);
        assert_eq!(keys.kept().len(), MAX_KEPT);
        assert!(
            keys.kept()
                .iter()
                .all(|l| l.text.len() <= LINE_MAX + '…'.len_utf8())
        );
        assert!(keys.missed() > 6_000);
        let first = &keys.kept()[0];
        assert_eq!(
            (first.number, first.start, first.end),
            (1, 0, long.len() as u64)
        );
        // A run of key lines keeps its first few, and the next failure still has room.
        let mut keys = KeyLines::default();
        for i in 0..100 {
            keys.push(format!("E   - {i}\n").as_bytes());
        }
        keys.push(b"\nFAILED tests/test_x.py::test_y - assert 1 == 2\n");
        assert_eq!(keys.kept().len(), GROUP_MAX + 2);
        assert!(
            keys.kept()
                .iter()
                .any(|l| l.text.starts_with("FAILED tests"))
        );
    }
}
