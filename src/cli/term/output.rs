//! A tool's result cut to what a person wants to see in the transcript: a command's exit code
//! and the end of its output (where errors and summaries are), the start of a listing, the size
//! of what was read. A command's ending is read from the call's [`ToolOutcome`]; the rest from
//! the text the model reads, as the tools in `nop::tools` write it.

use std::path::Path;

use nop::head_tail::key_lines::{Weight, weight};
use nop::head_tail::{PICKED_END, PICKED_FOLLOW};
use nop::protocol::events::ToolOutcome;

use super::style;

/// Shown lines are cut to this many columns.
const MAX_WIDTH: usize = 200;

/// The lines to show for the result `output` of `tool`, at most `max_lines` of them taken from
/// the output plus a header or a `… +N` line for what is left out. `ok` is false when the call
/// failed (the output is then the error the model read); a command that ran and exited non-zero
/// is `ok`, and its exit code says it failed. `outcome` is what the call reported beside the
/// text (absent from older producers: then the text's own header is read). Plain text, free of
/// escapes: the caller colours.
pub fn summarize(
    tool: &str,
    ok: bool,
    output: &str,
    outcome: Option<&ToolOutcome>,
    max_lines: usize,
) -> Vec<String> {
    let output = style::sanitize(output);
    let lines: Vec<String> = if !ok {
        head(&output, max_lines)
    } else {
        match tool {
            "shell" => {
                shell(&output, outcome, max_lines).unwrap_or_else(|| head(&output, max_lines))
            }
            "list-files" | "search-files" => listing(&output, max_lines),
            "read-file" => vec![read(&output)],
            _ => head(&output, max_lines),
        }
    };
    // What the sandbox says is read whole: the renderer wraps it to the screen.
    lines
        .iter()
        .map(|l| {
            if style::is_hint(l) {
                l.clone()
            } else {
                style::truncate(l, MAX_WIDTH)
            }
        })
        .collect()
}

/// How a command ended, as the header shows it.
struct Ending {
    /// `Ok(code)`, or `Err(what)` when it has no exit code (`killed by a signal`).
    code: Result<i32, String>,
    /// `4.2 s`.
    time: Option<String>,
    /// The file with the whole output, when the text was cut.
    whole_in: Option<String>,
}

impl Ending {
    fn from_outcome(outcome: &ToolOutcome) -> Option<Ending> {
        let code = match (outcome.exit_code, outcome.signal) {
            (Some(code), _) => Ok(code),
            (None, Some(_)) => Err("killed by a signal".to_string()),
            (None, None) => return None,
        };
        Some(Ending {
            code,
            time: outcome
                .command_ms
                .map(|ms| format!("{:.1} s", ms as f64 / 1000.0)),
            whole_in: outcome.whole_in.clone(),
        })
    }

    /// For a result without an outcome: the text's first line, `exit code: N (T s)`, and the
    /// orchestrator's note on a cut (`[… N bytes omitted; the whole output is in out-….log …]`).
    fn from_text(output: &str) -> Option<Ending> {
        let status = output.lines().next()?.strip_prefix("exit code: ")?;
        let (code, time) = match status.rsplit_once(" (") {
            Some((code, time)) => (code, time.strip_suffix(')')),
            None => (status, None),
        };
        Some(Ending {
            code: code.parse::<i32>().map_err(|_| code.to_string()),
            time: time.map(str::to_string),
            whole_in: output
                .lines()
                .find_map(|l| Cut::parse(l)?.whole_in)
                .map(str::to_string),
        })
    }
}

/// `shell`'s result: `exit code: N (T s)`, perhaps a note on the sandbox, `stdout:` and
/// `stderr:` sections, notes on refusals; a long one was cut, each cut a marker saying how many
/// lines it left out (and the lines among them that say why it failed). Shows the header, for
/// a failure the lines that say why, `… +N lines` for what is not shown (all the lines the
/// command printed, counted) with the file holding the whole, and the last lines; `None` if
/// neither the outcome nor the text says how the command ended.
fn shell(output: &str, outcome: Option<&ToolOutcome>, max_lines: usize) -> Option<Vec<String>> {
    let ending = outcome
        .and_then(Ending::from_outcome)
        .or_else(|| Ending::from_text(output))?;
    // The text's own header (its first line, or the second after a note like retry-advisor's)
    // is not shown twice.
    let header_at = output
        .lines()
        .take(2)
        .position(|l| l.starts_with("exit code: "));
    let lines: Vec<&str> = trim_blank_ends(
        output
            .lines()
            .enumerate()
            .filter(|(i, l)| Some(*i) != header_at && *l != "stdout:" && *l != "stderr:")
            .map(|(_, l)| l)
            .collect(),
    );
    let mut header = match &ending.code {
        Ok(0) => "exit code 0".to_string(),
        Ok(code) => format!("failed with exit code {code}"),
        Err(other) => format!("failed: {other}"),
    };
    if let Some(time) = &ending.time {
        header.push_str(&format!(" ({time})"));
    }
    if lines.is_empty() {
        header.push_str(", no output");
        return Some(vec![header]);
    }
    let failed = !matches!(ending.code, Ok(0));
    let body = Body::parse(&lines, !failed);
    let whole_in = ending.whole_in.as_deref().or(body.whole_in).map(openable);
    let mut shown = vec![header];
    // Everything fits (a verbose transcript): in order, each cut as its count.
    if body.pieces.len() <= max_lines && body.dropped == 0 {
        for piece in &body.pieces {
            shown.push(match piece {
                Piece::Line(l) | Piece::Picked(l) => l.to_string(),
                Piece::Cut(n) => more_line(*n, whole_in.as_deref()),
            });
        }
        return Some(shown);
    }
    // The last lines, up to the last cut.
    let tail_from = body
        .pieces
        .iter()
        .rposition(|p| !matches!(p, Piece::Line(_)))
        .map_or(0, |i| i + 1)
        .max(body.pieces.len().saturating_sub(max_lines));
    let key = if failed {
        key_lines(&body.pieces[..tail_from], max_lines)
    } else {
        Vec::new()
    };
    let tail = &body.pieces[tail_from..];
    let hidden = body.total.saturating_sub((key.len() + tail.len()) as u64);
    shown.extend(key);
    if hidden > 0 {
        shown.push(more_line(hidden, whole_in.as_deref()));
    }
    shown.extend(tail.iter().map(|p| match p {
        Piece::Line(l) | Piece::Picked(l) => l.to_string(),
        Piece::Cut(n) => more_line(*n, None),
    }));
    Some(shown)
}

/// `… +N lines`, and the file with all of them.
fn more_line(n: u64, whole_in: Option<&str>) -> String {
    let mut more = format!("… +{n} {}", plural(n as usize, "line"));
    if let Some(file) = whole_in {
        more.push_str(&format!(" (all of it in {file})"));
    }
    more
}

/// A part of a command's output as the model read it.
enum Piece<'a> {
    Line(&'a str),
    /// A line from a part left out, picked as one saying why the command failed.
    Picked(&'a str),
    /// A part left out: how many lines.
    Cut(u64),
}

/// The output's pieces and how many lines the command printed (those left out counted).
struct Body<'a> {
    pieces: Vec<Piece<'a>>,
    total: u64,
    /// Lines left out as saying nothing.
    dropped: u64,
    /// The file with the whole output, as a marker names it.
    whole_in: Option<&'a str>,
}

impl<'a> Body<'a> {
    /// The pieces of `lines`; with `quiet`, the lines of a passing `cargo test` that say
    /// nothing (`running 0 tests` and its `0 passed`, `Doc-tests x`, `Running x`) are left out
    /// (counted) and runs of blank lines made one.
    fn parse(lines: &[&'a str], quiet: bool) -> Body<'a> {
        let mut body = Body {
            pieces: Vec::new(),
            total: 0,
            dropped: 0,
            whole_in: None,
        };
        let mut picking = false;
        for line in lines {
            if picking {
                if *line == PICKED_END {
                    picking = false;
                } else {
                    let text = line
                        .strip_prefix("line ")
                        .and_then(|l| l.split_once(": "))
                        .map_or(*line, |(_, text)| text);
                    body.pieces.push(Piece::Picked(text));
                }
                continue;
            }
            if let Some(cut) = Cut::parse(line) {
                body.total += cut.lines;
                body.whole_in = body.whole_in.or(cut.whole_in);
                picking = cut.picked;
                body.pieces.push(Piece::Cut(cut.lines));
                continue;
            }
            body.total += 1;
            let blank_again = line.trim().is_empty()
                && matches!(body.pieces.last(), Some(Piece::Line(l)) if l.trim().is_empty());
            if quiet && (says_nothing(line) || blank_again) {
                body.dropped += 1;
                continue;
            }
            body.pieces.push(Piece::Line(line));
        }
        body
    }
}

/// A marker of a cut: `[… N lines (B bytes) of stdout omitted; the whole output is in P …]`.
struct Cut<'a> {
    lines: u64,
    whole_in: Option<&'a str>,
    /// Lines picked from the part left out follow, up to [`PICKED_END`].
    picked: bool,
}

impl<'a> Cut<'a> {
    fn parse(line: &'a str) -> Option<Cut<'a>> {
        let rest = line.strip_prefix("[… ")?.strip_suffix(" …]")?;
        let (counted, after) = rest.split_once(" omitted")?;
        let lines = match counted.split_once(' ') {
            Some((n, more)) if more.starts_with("line") => n.parse().ok()?,
            _ => 0,
        };
        let whole_in = after
            .split_once("; the whole output is in ")
            .map(|(_, p)| p.split_once("; ").map_or(p, |(p, _)| p));
        Some(Cut {
            lines,
            whole_in,
            picked: after.ends_with(PICKED_FOLLOW),
        })
    }
}

/// A line of a passing `cargo test` that says nothing.
fn says_nothing(line: &str) -> bool {
    let t = line.trim();
    t == "running 0 tests"
        || t.starts_with("test result: ok. 0 passed; 0 failed;")
        || line.starts_with("   Doc-tests ")
        || (line.starts_with("     Running ") && line.ends_with(')'))
}

/// What a failing command's output says about the failure: of `pieces` (those before its last
/// lines), the lines that say why it failed ([`weight`]) but summaries, at most `max_lines`,
/// the weightiest (a cause before the test's name), earliest first, in their order.
fn key_lines(pieces: &[Piece], max_lines: usize) -> Vec<String> {
    let mut found: Vec<(usize, Weight, &str)> = pieces
        .iter()
        .enumerate()
        .filter_map(|(i, p)| match p {
            // A summary (`failures:`, `test result: FAILED`) is for the last lines to say.
            Piece::Line(l) | Piece::Picked(l) => weight(l)
                .filter(|w| *w > Weight::Summary)
                .map(|w| (i, w, *l)),
            Piece::Cut(_) => None,
        })
        .collect();
    found.sort_by_key(|(i, w, _)| (std::cmp::Reverse(*w), *i));
    found.truncate(max_lines);
    found.sort_by_key(|(i, _, _)| *i);
    found.into_iter().map(|(_, _, l)| l.to_string()).collect()
}

/// `path` as the user can open it from where nop runs: relative to the current directory (a
/// whole path when far from it), quoted if the shell would split it.
fn openable(path: &str) -> String {
    openable_from(path, std::env::current_dir().ok().as_deref())
}

fn openable_from(path: &str, cwd: Option<&Path>) -> String {
    let whole = Path::new(path);
    let shown = match cwd {
        Some(cwd) if whole.is_absolute() => relative(whole, cwd).unwrap_or_else(|| path.into()),
        _ => path.to_string(),
    };
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+:@%,=".contains(c);
    if shown.chars().all(plain) {
        shown
    } else {
        format!("'{}'", shown.replace('\'', r"'\''"))
    }
}

/// `path` from `base`, with at most two `..`.
fn relative(path: &Path, base: &Path) -> Option<String> {
    let path: Vec<_> = path.components().collect();
    let base: Vec<_> = base.components().collect();
    let common = path.iter().zip(&base).take_while(|(a, b)| a == b).count();
    let up = base.len() - common;
    if common == 0 || up > 2 {
        return None;
    }
    let mut parts: Vec<String> = vec!["..".to_string(); up];
    parts.extend(
        path[common..]
            .iter()
            .map(|c| c.as_os_str().to_string_lossy().into_owned()),
    );
    Some(parts.join("/"))
}

/// `list-files` (paths, then `[N more files not shown]`) or `search-files` (`path:line: text`,
/// then `[N more matches not shown; …]`): the first lines and how many more there are.
fn listing(output: &str, max_lines: usize) -> Vec<String> {
    let mut lines: Vec<&str> = trim_blank_ends(output.lines().collect());
    let mut more = 0;
    if let Some(n) = lines.last().and_then(|l| not_shown(l)) {
        more = n;
        lines.pop();
    }
    let hidden = lines.len().saturating_sub(max_lines);
    let mut shown: Vec<String> = lines[..lines.len() - hidden]
        .iter()
        .map(|l| l.to_string())
        .collect();
    if hidden + more > 0 {
        shown.push(format!("… +{} more", hidden + more));
    }
    shown
}

/// The count in a listing's last line, `[N more files not shown]` or `[N more matches …]`.
fn not_shown(line: &str) -> Option<usize> {
    let rest = line.strip_prefix('[')?.strip_suffix(']')?;
    let (n, rest) = rest.split_once(' ')?;
    if rest.starts_with("more files not shown") || rest.starts_with("more matches not shown") {
        n.parse().ok()
    } else {
        None
    }
}

/// `read-file`: the file's lines as they are, or a range followed by `[lines A-B of N; …]`.
fn read(output: &str) -> String {
    if let Some(range) = output
        .lines()
        .last()
        .and_then(|l| l.strip_prefix("[lines "))
        .and_then(|l| l.split_once(';'))
        .map(|(range, _)| range)
    {
        return format!("read lines {range}");
    }
    match output.lines().count() {
        0 => "read an empty file".to_string(),
        1 => "read 1 line".to_string(),
        n => format!("read {n} lines"),
    }
}

/// The first `max_lines` lines and how many more there are.
fn head(output: &str, max_lines: usize) -> Vec<String> {
    let lines = trim_blank_ends(output.lines().collect());
    let hidden = lines.len().saturating_sub(max_lines);
    let mut shown: Vec<String> = lines[..lines.len() - hidden]
        .iter()
        .map(|l| l.to_string())
        .collect();
    if hidden > 0 {
        shown.push(format!("… +{hidden} more {}", plural(hidden, "line")));
    }
    shown
}

/// `noun` for one, `nouns` for other counts.
fn plural(n: usize, noun: &str) -> String {
    if n == 1 {
        noun.to_string()
    } else {
        format!("{noun}s")
    }
}

fn trim_blank_ends(mut lines: Vec<&str>) -> Vec<&str> {
    while lines.last().is_some_and(|l| l.trim().is_empty()) {
        lines.pop();
    }
    let first = lines
        .iter()
        .position(|l| !l.trim().is_empty())
        .unwrap_or(lines.len());
    lines.split_off(first)
}

#[cfg(test)]
mod tests {
    use super::*;
    use insta::assert_snapshot;

    /// A failing `cargo test`, in the form the shell tool gives the model.
    const CARGO_TEST_FAILED: &str = "\
exit code: 101 (4.2 s)
stdout:

running 3 tests
test parser::tests::empty ... ok
test parser::tests::nested ... ok
test parser::tests::unicode ... FAILED

failures:

---- parser::tests::unicode stdout ----

thread 'parser::tests::unicode' panicked at src/parser.rs:88:9:
assertion `left == right` failed
  left: 3
 right: 4
note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace


failures:
    parser::tests::unicode

test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s

stderr:
   Compiling demo v0.1.0 (/work/demo)
    Finished `test` profile [unoptimized + debuginfo] target(s) in 3.90s
     Running unittests src/lib.rs (target/debug/deps/demo-1c2d3e4f5a6b7c8d)
error: test failed, to rerun pass `--lib`
";

    #[test]
    fn a_failing_command_shows_its_exit_code_and_the_tail() {
        assert_snapshot!(summarize("shell", true, CARGO_TEST_FAILED, None, 8).join("\n"));
    }

    #[test]
    fn a_succeeding_command_shows_the_tail_too() {
        let output = "\
exit code: 0 (12.5 s)
stdout:

running 42 tests
test a ... ok
test b ... ok
test c ... ok

test result: ok. 42 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.31s

";
        assert_snapshot!(summarize("shell", true, output, None, 3).join("\n"));
        assert_eq!(
            summarize("shell", true, "exit code: 0 (0.0 s)\n", None, 3),
            ["exit code 0 (0.0 s), no output"]
        );
    }

    #[test]
    fn a_cut_command_output_names_the_file_with_all_of_it() {
        let output = "\
exit code: 2 (1.0 s)
stdout:
first
[… 40 lines (52000 bytes) of the result omitted; the whole output is in out-20261123T101010.123Z.log …]
second
third
stderr:
make: *** [all] Error 2
";
        assert_eq!(
            summarize("shell", true, output, None, 2),
            [
                "failed with exit code 2 (1.0 s)",
                "… +42 lines (all of it in out-20261123T101010.123Z.log)",
                "third",
                "make: *** [all] Error 2",
            ]
        );
    }

    #[test]
    fn the_ending_comes_from_the_outcome_not_the_text() {
        // A retried call's text starts with retry-advisor's note: the header is still found.
        let output = "\
[succeeded after 1 retry advised by retry-advisor]
exit code: 0 (0.1 s)
stdout:
done
";
        let outcome = ToolOutcome {
            exit_code: Some(0),
            command_ms: Some(120),
            ..ToolOutcome::default()
        };
        assert_eq!(
            summarize("shell", true, output, Some(&outcome), 5),
            [
                "exit code 0 (0.1 s)",
                "[succeeded after 1 retry advised by retry-advisor]",
                "done"
            ]
        );
        let killed = ToolOutcome {
            signal: Some(9),
            command_ms: Some(300),
            whole_in: Some("out-1.log".into()),
            ..ToolOutcome::default()
        };
        assert_eq!(
            summarize(
                "shell",
                true,
                "exit code: killed by a signal (0.3 s)\nstdout:\na\nb\n",
                Some(&killed),
                1
            ),
            [
                "failed: killed by a signal (0.3 s)",
                "… +1 line (all of it in out-1.log)",
                "b"
            ]
        );
        // Without an exit code or signal the outcome says nothing of an ending: the text does.
        assert_eq!(
            summarize(
                "shell",
                true,
                "exit code: 3 (1.0 s)\n",
                Some(&ToolOutcome::default()),
                5
            ),
            ["failed with exit code 3 (1.0 s), no output"]
        );
    }

    #[test]
    fn a_command_killed_by_a_signal_is_a_failure() {
        let output = "exit code: killed by a signal (0.3 s)\n";
        assert_eq!(
            summarize("shell", true, output, None, 5),
            ["failed: killed by a signal (0.3 s), no output"]
        );
    }

    #[test]
    fn a_long_listing_shows_its_first_lines_and_how_many_more() {
        let files: Vec<String> = (1..=50).map(|i| format!("src/module_{i:02}.rs")).collect();
        let output = files.join("\n");
        assert_snapshot!(summarize("list-files", true, &output, None, 5).join("\n"));
        // With the tool's own limit reached, its count is added.
        let limited = format!("{}\n[450 more files not shown]", files.join("\n"));
        assert_eq!(
            summarize("list-files", true, &limited, None, 5)
                .last()
                .map(String::as_str),
            Some("… +495 more")
        );
        assert_eq!(
            summarize("list-files", true, "no files", None, 5),
            ["no files"]
        );
    }

    #[test]
    fn search_results_are_a_listing() {
        let output = "\
src/a.rs:3: fn parse() {}
src/b.rs:10: parse();
src/c.rs:7: // parse later
[12 more matches not shown; narrow the pattern, path or glob]";
        assert_eq!(
            summarize("search-files", true, output, None, 2),
            [
                "src/a.rs:3: fn parse() {}",
                "src/b.rs:10: parse();",
                "… +13 more"
            ]
        );
    }

    #[test]
    fn a_read_says_how_much_was_read_not_what() {
        let file: String = (1..=120).map(|i| format!("line {i}\n")).collect();
        assert_eq!(
            summarize("read-file", true, &file, None, 5),
            ["read 120 lines"]
        );
        let part = "line 1\nline 2\n[lines 1-2 of 900; use offset/limit to read more]";
        assert_eq!(
            summarize("read-file", true, part, None, 5),
            ["read lines 1-2 of 900"]
        );
        assert_eq!(
            summarize("read-file", true, "", None, 5),
            ["read an empty file"]
        );
    }

    #[test]
    fn an_error_shows_its_first_lines() {
        let output = "error (Timeout): `cargo test` did not finish within 300.0 s and was killed\n\
                      [details: error-20261123T101010.123Z.log]";
        assert_eq!(
            summarize("shell", false, output, None, 1),
            [
                "error (Timeout): `cargo test` did not finish within 300.0 s and was killed",
                "… +1 more line",
            ]
        );
    }

    #[test]
    fn other_tools_show_their_first_lines_and_escapes_only_visibly() {
        let output = "plan updated:\n1 [completed] Parse\n2 [in_progress] \x1b[31mTest\x1b[0m\n3 [pending] Ship";
        assert_eq!(
            summarize("update-plan", true, output, None, 3),
            [
                "plan updated:",
                "1 [completed] Parse",
                "2 [in_progress] \\u{1b}[31mTest\\u{1b}[0m",
                "… +1 more line",
            ]
        );
    }

    #[test]
    fn a_failing_command_shows_its_error_lines_not_only_the_tail() {
        let output = "\
exit code: 1 (0.4 s)
stderr:
test_add (test_calc.T.test_add) ... ok
test_div (test_calc.T.test_div) ... FAIL
test_mul (test_calc.T.test_mul) ... ok

======================================================================
FAIL: test_div (test_calc.T.test_div)
----------------------------------------------------------------------
Traceback (most recent call last):
  File \"test_calc.py\", line 9, in test_div
    self.assertEqual(div(6, 3), 3)
AssertionError: 2.0 != 3

----------------------------------------------------------------------
Ran 3 tests in 0.001s

FAILED (failures=1)
";
        let shown = summarize("shell", true, output, None, 14);
        assert_eq!(shown[0], "failed with exit code 1 (0.4 s)");
        assert!(
            shown.iter().any(|l| l.contains("AssertionError: 2.0 != 3")),
            "{shown:#?}"
        );
        assert!(
            shown.iter().any(|l| l.contains("FAIL: test_div")),
            "{shown:#?}"
        );
        assert_eq!(
            shown.last().map(String::as_str),
            Some("FAILED (failures=1)")
        );
        // A succeeding command keeps the tail.
        let ok = output.replacen("exit code: 1", "exit code: 0", 1);
        let shown = summarize("shell", true, &ok, None, 3);
        assert_eq!(shown[1], "… +13 lines");
    }

    /// A real run's output (`tests/fixtures/command-output/NAME.out` and `.err`) as the shell
    /// tool gives it to the model.
    fn ran(name: &str, code: i32) -> String {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/command-output");
        let read = |ext: &str| std::fs::read_to_string(format!("{dir}/{name}.{ext}")).ok();
        let mut text = format!("exit code: {code} (0.2 s)\n");
        for (label, stream) in [("stdout", read("out")), ("stderr", read("err"))] {
            if let Some(stream) = stream {
                text.push_str(&format!("{label}:\n{stream}"));
            }
        }
        text
    }

    fn shows(shown: &[String], line: &str) -> bool {
        shown.iter().any(|l| l == line)
    }

    #[test]
    fn a_failing_cargo_test_shows_its_assertion_before_the_tail() {
        let shown = summarize("shell", true, &ran("cargo-fail", 101), None, 6);
        for line in [
            "failed with exit code 101 (0.2 s)",
            "thread 'tests::adds_wrong' (22024) panicked at src/lib.rs:6:31:",
            "assertion `left == right` failed",
            "  left: 3",
            " right: 4",
            "test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.16s",
            "error: test failed, to rerun pass `--lib`",
        ] {
            assert!(shows(&shown, line), "{line} in {shown:#?}");
        }
        // Every line is shown or counted: 42 lines, 6 of the cause, 6 of the end.
        assert!(shows(&shown, "… +30 lines"), "{shown:#?}");
        let shown = summarize("shell", true, &ran("cargo-err", 101), None, 3);
        assert!(
            shows(&shown, "error[E0308]: mismatched types"),
            "{shown:#?}"
        );
        assert!(shows(&shown, " --> src/lib.rs:9:36"), "{shown:#?}");
    }

    #[test]
    fn a_passing_cargo_test_ends_with_its_result_not_the_empty_doc_tests() {
        let shown = summarize("shell", true, &ran("cargo-ok", 0), None, 6);
        assert_eq!(
            shown,
            [
                "exit code 0 (0.2 s)",
                "… +10 lines",
                "test tests::adds_wrong ... ok",
                "",
                "test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s",
                "",
                "   Compiling demo v0.1.0 (/work/demo)",
                "    Finished `test` profile [unoptimized + debuginfo] target(s) in 0.16s",
            ]
        );
    }

    #[test]
    fn both_failures_of_a_python_run_are_shown() {
        let shown = summarize("shell", true, &ran("unittest-fail", 1), None, 6);
        for line in [
            "FAIL: test_add (test_unit.T.test_add)",
            "AssertionError: 3 != 4",
            "FAIL: test_div (test_unit.T.test_div)",
            "AssertionError: 2.0 != 3",
            "FAILED (failures=2)",
        ] {
            assert!(shows(&shown, line), "{line} in {shown:#?}");
        }
        let shown = summarize("shell", true, &ran("pytest-fail", 1), None, 6);
        for line in [
            "E       assert 3 == 4",
            "E       AssertionError: six over three",
            "FAILED tests/test_calc.py::test_add - assert 3 == 4",
            "FAILED tests/test_calc.py::test_div - AssertionError: six over three",
        ] {
            assert!(shows(&shown, line), "{line} in {shown:#?}");
        }
    }

    #[test]
    fn a_cut_output_shows_the_lines_picked_from_its_middle_and_counts_every_line() {
        let output = format!(
            "exit code: 101 (9.0 s)\nstdout:\nok 1\nok 2\n\
             [… 19990 lines (200000 bytes) of stdout omitted; the whole output is in \
             .nop/sessions/s/out-1.log; {PICKED_FOLLOW} …]\n\
             line 10001: assertion `left == right` failed\n\
             line 10002:   left: 3\n{PICKED_END}\nok 19993\nok 19994\nok 19995\n\
             stderr:\nerror: test failed\n"
        );
        let whole = "/work/repo/.nop/sessions/s/out-1.log";
        let outcome = ToolOutcome {
            exit_code: Some(101),
            command_ms: Some(9000),
            whole_in: Some(whole.into()),
            ..ToolOutcome::default()
        };
        let shown = summarize("shell", true, &output, Some(&outcome), 3);
        assert_eq!(
            shown[..4],
            [
                "failed with exit code 101 (9.0 s)",
                "assertion `left == right` failed",
                "  left: 3",
                // 2 + 19990 + 3 + 1 lines, 5 of them shown.
                &format!("… +19991 lines (all of it in {})", openable(whole)),
            ]
        );
        assert_eq!(shown[4..], ["ok 19994", "ok 19995", "error: test failed"]);
        // Without the outcome, the marker's path (from the repository) is shown.
        let shown = summarize("shell", true, &output, None, 3);
        assert_eq!(
            shown[3],
            "… +19991 lines (all of it in .nop/sessions/s/out-1.log)"
        );
    }

    #[test]
    fn the_log_is_named_from_where_the_user_is() {
        let log = "/work/repo/.nop/sessions/s/out-1.log";
        let at = |cwd: &str| openable_from(log, Some(Path::new(cwd)));
        assert_eq!(at("/work/repo"), ".nop/sessions/s/out-1.log");
        assert_eq!(at("/work/repo/src"), "../.nop/sessions/s/out-1.log");
        assert_eq!(at("/home/me/a/b/c"), log);
        assert_eq!(
            openable_from("/my repo/out-1.log", Some(Path::new("/"))),
            "'my repo/out-1.log'"
        );
    }
}
