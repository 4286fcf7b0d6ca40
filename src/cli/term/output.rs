//! A tool's result cut to what a person wants to see in the transcript: a command's exit code
//! and the end of its output (where errors and summaries are), the start of a listing, the size
//! of what was read. A command's ending is read from the call's [`ToolOutcome`]; the rest from
//! the text the model reads, as the tools in `nop::tools` write it.

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
            whole_in: output.lines().find_map(cut_output_file).map(str::to_string),
        })
    }
}

/// `shell`'s result: `exit code: N (T s)`, perhaps a note on the sandbox, `stdout:` and
/// `stderr:` sections, notes on refusals; the orchestrator may have cut the middle of a long one.
/// Shows the header and the last lines; `None` if neither the outcome nor the text says how the
/// command ended.
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
    let body: Vec<&str> = trim_blank_ends(
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
    if body.is_empty() {
        header.push_str(", no output");
        return Some(vec![header]);
    }
    let failed = !matches!(ending.code, Ok(0));
    if failed
        && body.len() > max_lines
        && let Some(lines) = error_lines(&body, max_lines)
    {
        let mut shown = vec![header];
        shown.extend(lines);
        return Some(shown);
    }
    let hidden = body.len().saturating_sub(max_lines);
    let mut shown = vec![header];
    if hidden > 0 {
        let mut more = format!("… +{hidden} {}", plural(hidden, "line"));
        // The whole output, when the middle was cut for the model.
        if let Some(file) = &ending.whole_in {
            more.push_str(&format!(" (all of it in {file})"));
        }
        shown.push(more);
    }
    shown.extend(body[hidden..].iter().map(|l| l.to_string()));
    Some(shown)
}

/// What a failing command's long output says about the failure: the lines that look like an
/// error (an assertion, a traceback, `FAILED`, `error:`, a panic) with a line around each, and
/// the last line (the summary), in order, `…` where lines are left out; `None` if no line looks
/// like one, or they do not fit in `max_lines` (the tail is shown then).
fn error_lines(body: &[&str], max_lines: usize) -> Option<Vec<String>> {
    const MARKS: &[&str] = &[
        "error",
        "Error",
        "ERROR",
        "FAIL",
        "assert",
        "Assert",
        "Traceback",
        "panicked",
        "Exception",
        "expected",
        "Expected",
    ];
    let looks_like = |l: &str| MARKS.iter().any(|m| l.contains(m)) || l.starts_with("E ");
    let mut keep = vec![false; body.len()];
    let mut found = false;
    for (i, line) in body.iter().enumerate() {
        if looks_like(line) {
            found = true;
            let around = i.saturating_sub(1)..=(i + 1).min(body.len() - 1);
            keep[around].iter_mut().for_each(|k| *k = true);
        }
    }
    if !found {
        return None;
    }
    if let Some(last) = keep.last_mut() {
        *last = true;
    }
    let mut shown = Vec::new();
    let mut gap = false;
    for (i, line) in body.iter().enumerate() {
        if keep[i] {
            if gap {
                shown.push("…".to_string());
            }
            gap = false;
            shown.push(line.to_string());
        } else {
            gap = true;
        }
    }
    (shown.len() <= max_lines).then_some(shown)
}

/// The file named by the orchestrator's note on a cut output.
fn cut_output_file(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("[… ")?;
    let (_, file) = rest.split_once("; the whole output is in ")?;
    file.strip_suffix(" …]")
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
[… 52000 bytes omitted; the whole output is in out-20261123T101010.123Z.log …]
second
third
stderr:
make: *** [all] Error 2
";
        assert_eq!(
            summarize("shell", true, output, None, 2),
            [
                "failed with exit code 2 (1.0 s)",
                "… +3 lines (all of it in out-20261123T101010.123Z.log)",
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
}
