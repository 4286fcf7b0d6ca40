//! What the turn loop watches for over one drive, so that a small model's habits do not end
//! or stall a run: the same call made again and again with the same result (named to the model
//! in the result, then the end of the run), a reply that is a call gone wrong (one correction
//! in a row), and an answer that is no answer (one nudge each): empty, describing a change
//! right after a failure, or claiming or describing a change when no tool changed anything.

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};

use serde_json::Value;

use crate::protocol::{Message, Role, ToolCall};

/// How many of the drive's latest calls a repeat is looked for in.
const RECENT: usize = 10;
/// The repeat at which the model is told, and the one that ends the run.
pub(super) const TOLD_AT: usize = 3;
pub(super) const ENDS_AT: usize = 5;

/// What the turn loop remembers over one drive.
#[derive(Debug, Default)]
pub(super) struct Watch {
    /// The drive's latest calls: the call (tool and arguments, keys sorted) and its result.
    recent: VecDeque<(String, u64)>,
    /// The run ends after this batch: a call was repeated [`ENDS_AT`] times (what to say).
    pub repeated: Option<String>,
    /// The reply at hand was tool calls written as text, taken as calls.
    pub recovered: bool,
    /// The reply at hand is a call written as text that cannot run: what is wrong.
    pub failed: Option<String>,
    /// The last reply was a failed call written as text and the model was told.
    pub corrected: bool,
    /// The model was nudged to make a change it only described or claimed.
    pub nudged: bool,
    /// The model was told its reply was empty.
    pub told_empty: bool,
    /// The conversation's latest user message when the calls in `recent` were made: a new one
    /// (a queued message, the next input) starts the count again.
    last_input: Option<(Option<chrono::DateTime<chrono::Utc>>, u64)>,
}

impl Watch {
    /// Before a request: a user message newer than the last one seen (a message queued for the
    /// run, a new input) makes the calls before it count no more as repeats — the same call
    /// for a new request is not a loop.
    pub fn input(&mut self, messages: &[Message]) {
        let latest = messages
            .iter()
            .rev()
            .find(|m| m.role == Role::User)
            .map(|m| (m.timestamp, result_hash(&m.content)));
        if latest != self.last_input {
            self.recent.clear();
            self.last_input = latest;
        }
    }

    /// Counts `call` with its result `content` among the drive's latest calls: the note for
    /// the model when the same call gave the same result [`TOLD_AT`] times or more (the run's
    /// end is set at [`ENDS_AT`]), `None` otherwise.
    pub fn repeat(&mut self, call: &ToolCall, content: &str) -> Option<String> {
        let key = format!("{}\u{0}{}", call.name, canonical(&call.arguments));
        let result = result_hash(content);
        self.recent.push_back((key, result));
        if self.recent.len() > RECENT {
            self.recent.pop_front();
        }
        let this = self.recent.back();
        let times = self.recent.iter().filter(|c| Some(*c) == this).count();
        if times < TOLD_AT {
            return None;
        }
        if times >= ENDS_AT {
            self.repeated = Some(format!(
                "stopped: the model made the same call ({}, same arguments) {times} times among its last {RECENT} calls, each time with the same result, and went on after it was told",
                call.name
            ));
        }
        Some(format!(
            "\n\n[nop: you made this exact call ({} with these arguments) {times} times and its result has not changed; making it again will not change it. Do something else{}.]",
            call.name,
            if times + 1 >= ENDS_AT {
                ": one more time ends the run"
            } else {
                ""
            }
        ))
    }
}

/// `value` as text with every object's keys sorted: the same arguments in another order are
/// the same call.
fn canonical(value: &Value) -> String {
    fn sorted(value: &Value) -> Value {
        match value {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                Value::Object(
                    keys.into_iter()
                        .map(|k| (k.clone(), sorted(&map[k])))
                        .collect(),
                )
            }
            Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    sorted(value).to_string()
}

/// A result's hash, without what changes between two runs of the same command (`shell`'s
/// time on its first line).
fn result_hash(content: &str) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    match content.strip_prefix("exit code: ") {
        Some(rest) => {
            let (first, after) = rest.split_once('\n').unwrap_or((rest, ""));
            first.split(" (").next().hash(&mut hasher);
            after.hash(&mut hasher);
        }
        None => content.hash(&mut hasher),
    }
    hasher.finish()
}

/// The nudge after an answer that describes a change right after a failure.
pub(super) const NUDGE: &str = "You described a change but did not make it, and the last tool result was a failure. Apply the change with the tools (edit-file, write-file or shell), then check that it works.";

/// What the model is told after an empty reply.
pub(super) const EMPTY: &str =
    "Your reply was empty. Go on with the task: call a tool, or give your final answer as text.";

/// What the model is told after claiming a change that no tool made.
pub(super) const UNCHANGED: &str = "You said the change is made, but no tool changed anything since the task was given: no file was written or edited and no command that writes files was run. Make the change with the tools (edit-file, write-file or shell), then check that it works.";

/// What the model is told after describing a change when nothing was changed.
pub(super) const DESCRIBED: &str = "You described a change but did not make it: no tool has changed anything since the task was given. Make the change yourself with the tools (edit-file, write-file or shell), then check that it works.";

/// Whether no call since the latest message from the user (not one of nop's own "[nop]"
/// notes) could have changed anything: only calls of tools `may_change` says change nothing,
/// commands that only run or read, or failed calls.
pub(super) fn changed_nothing(messages: &[Message], may_change: impl Fn(&str) -> bool) -> bool {
    let asked = messages
        .iter()
        .rposition(|m| m.role == Role::User && !is_nops_note(m))
        .map_or(0, |at| at + 1);
    !messages[asked..].iter().any(|m| {
        m.role == Role::Tool
            && m.is_error != Some(true)
            && m.tool_call
                .as_ref()
                .is_some_and(|call| match call.name.as_str() {
                    "shell" => call.arguments["command"]
                        .as_str()
                        .is_none_or(command_may_write),
                    name => may_change(name),
                })
    })
}

/// Whether a shell `command` may write a file: a redirection, an in-place edit, a file
/// command, a package manager, git, or code given inline (`python3 -c`, a heredoc). Running a
/// program or a test (`python3 test_x.py`, `cargo test`, `bash count.sh /etc`) or reading
/// (`cat`, `grep`, `ls`) is not counted, whatever the program might write: the guess only
/// decides whether a claimed change is questioned once.
fn command_may_write(command: &str) -> bool {
    const WRITES: &[&str] = &[
        ">",
        "<<",
        "sed -i",
        "perl -i",
        "perl -pi",
        "tee ",
        "mv ",
        "cp ",
        "rm ",
        "touch ",
        "mkdir",
        "patch",
        "git ",
        "install",
        "python -c",
        "python3 -c",
        "node -e",
        "ruby -e",
        "cargo add",
        "cargo fix",
        "cargo fmt",
        "npm ",
        "pip ",
        "dd ",
        "truncate ",
        "ln ",
        "chmod",
        "ed ",
        "ex ",
        "awk -i",
        "printf ",
        "echo ",
    ];
    let command = command.replace("2>&1", "").replace(">/dev/null", "");
    let command = command.replace("> /dev/null", "");
    WRITES.iter().any(|w| command.contains(w))
}

/// Whether `answer` says a change was made: "has been added", "I've updated", "I fixed"….
pub(super) fn claims_a_change(answer: &str) -> bool {
    const DONE: &[&str] = &[
        "added",
        "updated",
        "fixed",
        "modified",
        "changed",
        "created",
        "implemented",
        "renamed",
        "corrected",
        "replaced",
        "written",
        "wrote",
        "edited",
        "removed",
    ];
    const SAID: &[&str] = &[
        "has been ",
        "have been ",
        "was ",
        "were ",
        "i have ",
        "i've ",
        "i ",
        "we have ",
        "we've ",
        "successfully ",
        "is now ",
    ];
    let lower = answer.to_lowercase();
    SAID.iter().any(|said| {
        DONE.iter()
            .any(|done| lower.contains(&format!("{said}{done}")))
    })
}

/// Whether `message` is one of nop's own notes to the model (a nudge, a correction), which
/// stands between a result and the reply to it without being the user's.
fn is_nops_note(message: &Message) -> bool {
    message.role == Role::User && message.content.starts_with("[nop]")
}

/// Whether the last tool result of `messages`, with no user message after it, was a failure:
/// a failed call (not one the user declined or stopped) or a command with a non-zero exit code.
pub(super) fn after_a_failure(messages: &[Message]) -> bool {
    let Some(last) = messages
        .iter()
        .rev()
        .find(|m| m.role != Role::Assistant && !is_nops_note(m))
    else {
        return false;
    };
    if last.role != Role::Tool {
        return false;
    }
    if last.is_error == Some(true) {
        return !matches!(
            last.error_type.as_deref(),
            Some("Declined" | "Aborted" | "Skipped" | "PermissionDenied" | "BlockedByHook")
        );
    }
    last.content
        .strip_prefix("exit code: ")
        .and_then(|rest| rest.split([' ', '\n']).next())
        .is_some_and(|code| code != "0")
}

/// Whether `answer` describes a change to make: a diff (a ```diff block, or `@@` with lines
/// that start with + or -), or words such as "replace X with Y", "change line N", "should be
/// changed to".
pub(super) fn describes_a_change(answer: &str) -> bool {
    let lower = answer.to_lowercase();
    if lower.contains("```diff") || lower.contains("```patch") {
        return true;
    }
    let lines: Vec<&str> = lower.lines().map(str::trim_start).collect();
    if lines.iter().any(|l| l.starts_with("@@"))
        && lines
            .iter()
            .any(|l| l.starts_with('+') || l.starts_with('-'))
    {
        return true;
    }
    const PHRASES: &[&str] = &[
        "should be changed to",
        "should be replaced with",
        "should be replaced by",
        "needs to be changed to",
        "needs to be replaced with",
        "change it to",
        "replace it with",
        // Instructions for the user to make the change by hand.
        "you need to edit",
        "you need to change",
        "you need to modify",
        "you need to update",
        "open the file",
        "save the file",
        "save the changes",
    ];
    if PHRASES.iter().any(|p| lower.contains(p)) {
        return true;
    }
    // The corrected code written out (a small model's favourite): a block of source code in an
    // answer that speaks of fixing or changing it.
    const SOURCE: &[&str] = &[
        "```python",
        "```py\n",
        "```rust",
        "```rs\n",
        "```javascript",
        "```js\n",
        "```typescript",
        "```ts\n",
        "```go\n",
        "```java\n",
        "```c\n",
        "```cpp",
        "```ruby",
        "```bash",
        "```sh\n",
    ];
    const WORDS: &[&str] = &["fix", "correct", "change", "update", "modif", "should"];
    if SOURCE.iter().any(|tag| lower.contains(tag)) && WORDS.iter().any(|w| lower.contains(w)) {
        return true;
    }
    // Or the code alone, a source block and nothing else.
    let trimmed = lower.trim();
    if SOURCE.iter().any(|tag| trimmed.starts_with(tag))
        && trimmed.ends_with("```")
        && trimmed.matches("```").count() == 2
    {
        return true;
    }
    lines.iter().any(|line| {
        let replace = line
            .find("replace ")
            .is_some_and(|at| line[at..].contains(" with "));
        let change_line = ["change line ", "modify line ", "update line "]
            .iter()
            .any(|p| {
                line.split(p)
                    .nth(1)
                    .is_some_and(|n| n.starts_with(|c: char| c.is_ascii_digit()))
            });
        replace || change_line
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;
    use serde_json::json;

    fn call(arguments: Value) -> ToolCall {
        ToolCall {
            id: "c".into(),
            name: "update-plan".into(),
            arguments,
            extra: Default::default(),
        }
    }

    #[test]
    fn a_change_is_claimed_in_words_and_made_only_by_a_tool_that_can() {
        for claim in [
            "The function has been added to textutil.py.",
            "I've updated the test.",
            "I fixed the off-by-one in window.py",
            "The bug is now fixed.",
        ] {
            assert!(claims_a_change(claim), "{claim}");
        }
        for answer in [
            "The README explains how to install it.",
            "Replace `i < n` with `i <= n`.",
        ] {
            assert!(!claims_a_change(answer), "{answer}");
        }
        let registry = crate::tools::Registry::builtin();
        let may_change = |name: &str| registry.get(name).is_none_or(|t| t.is_mutating());
        let now = Utc::now();
        let result = |name: &str, error: bool| {
            let mut m = Message::new(Role::Tool, "ok", now);
            m.tool_call = Some(ToolCall {
                name: name.into(),
                ..call(json!({}))
            });
            m.is_error = error.then_some(true);
            m
        };
        let asked = Message::new(Role::User, "add it", now);
        let told = Message::new(Role::User, "[nop] Your reply was empty.", now);
        let read = vec![asked.clone(), result("read-file", false), told.clone()];
        assert!(changed_nothing(&read, may_change));
        let failed_write = vec![asked.clone(), result("write-file", true)];
        assert!(changed_nothing(&failed_write, may_change));
        let wrote = vec![asked.clone(), result("edit-file", false), told];
        assert!(!changed_nothing(&wrote, may_change));
        let before_the_question = vec![result("shell", false), asked.clone()];
        assert!(changed_nothing(&before_the_question, may_change));
        let ran = |command: &str| {
            let mut m = result("shell", false);
            m.tool_call.as_mut().expect("call").arguments = json!({ "command": command });
            vec![asked.clone(), m]
        };
        for command in [
            "bash count.sh /etc",
            "python3 test_window.py 2>&1",
            "cargo test -q",
        ] {
            assert!(changed_nothing(&ran(command), may_change), "{command}");
        }
        for command in [
            "sed -i 's/a/b/' x.py",
            "echo 7 > answer.txt",
            "python3 -c 'open(1)'",
        ] {
            assert!(!changed_nothing(&ran(command), may_change), "{command}");
        }
    }

    #[test]
    fn the_third_same_call_with_the_same_result_is_named_and_the_fifth_ends() {
        let mut watch = Watch::default();
        let a = call(json!({"a": 1, "b": [2]}));
        let reordered = call(json!({"b": [2], "a": 1}));
        assert_eq!(watch.repeat(&a, "exit code: 0 (0.1 s)\nok"), None);
        assert_eq!(watch.repeat(&reordered, "exit code: 0 (0.3 s)\nok"), None);
        let third = watch.repeat(&a, "exit code: 0 (0.2 s)\nok").expect("named");
        assert!(third.contains("3 times"), "{third}");
        assert!(watch.repeated.is_none());
        let fourth = watch.repeat(&a, "exit code: 0 (0.2 s)\nok").expect("named");
        assert!(fourth.contains("one more time ends the run"), "{fourth}");
        watch.repeat(&a, "exit code: 0 (0.2 s)\nok").expect("named");
        assert!(
            watch
                .repeated
                .as_deref()
                .is_some_and(|m| m.contains("5 times"))
        );
    }

    #[test]
    fn a_new_user_message_starts_the_count_again() {
        let mut watch = Watch::default();
        let now = chrono::Utc::now();
        let first = vec![Message::new(Role::User, "run it", now)];
        watch.input(&first);
        let c = call(serde_json::json!({"command": "true"}));
        assert!(watch.repeat(&c, "exit code: 0").is_none());
        assert!(watch.repeat(&c, "exit code: 0").is_none());
        // Same conversation: the third is named.
        watch.input(&first);
        assert!(watch.repeat(&c, "exit code: 0").is_some());
        // A message queued meanwhile: the count starts again.
        let mut more = first.clone();
        more.push(Message::new(Role::User, "and again", now));
        watch.input(&more);
        assert!(watch.repeat(&c, "exit code: 0").is_none());
        assert!(watch.repeated.is_none());
    }

    #[test]
    fn a_call_whose_result_changes_or_that_left_the_recent_calls_is_not_a_repeat() {
        let mut watch = Watch::default();
        let test = call(json!({"command": "cargo test"}));
        for i in 0..6 {
            assert_eq!(
                watch.repeat(&test, &format!("exit code: 1\n{i} failed")),
                None
            );
        }
        let mut watch = Watch::default();
        for round in 0..4 {
            assert_eq!(watch.repeat(&test, "same"), None, "{round}");
            for other in 0..RECENT {
                watch.repeat(&call(json!({"n": other})), "x");
            }
        }
    }

    fn tool(content: &str, error: Option<&str>) -> Message {
        let mut m = Message::new(Role::Tool, content, Utc::now());
        if let Some(kind) = error {
            m.is_error = Some(true);
            m.error_type = Some(kind.into());
        }
        m
    }

    #[test]
    fn a_failure_is_a_failed_call_or_a_non_zero_exit_as_the_last_result() {
        let assistant = Message::new(Role::Assistant, "", Utc::now());
        let user = Message::new(Role::User, "fix it", Utc::now());
        assert!(after_a_failure(&[
            tool("exit code: 101 (2.0 s)\n", None),
            assistant.clone()
        ]));
        assert!(after_a_failure(&[tool(
            "error (NotFound): no",
            Some("NotFound")
        )]));
        assert!(!after_a_failure(&[tool("exit code: 0 (2.0 s)\n", None)]));
        assert!(!after_a_failure(&[tool("no", Some("Declined"))]));
        assert!(!after_a_failure(&[
            tool("exit code: 1\n", None),
            user.clone()
        ]));
        // nop's own note (after an empty reply) does not hide the failure before it.
        let note = Message::new(Role::User, "[nop] Your reply was empty.", Utc::now());
        assert!(after_a_failure(&[
            tool("exit code: 1\n", None),
            assistant.clone(),
            note
        ]));
        assert!(!after_a_failure(&[user]));
        assert!(!after_a_failure(&[]));
    }

    #[test]
    fn a_diff_or_words_of_a_change_describe_one() {
        for text in [
            "```diff\n-a\n+b\n```",
            "@@ -1,3 +1,3 @@\n-    x < n\n+    x <= n",
            "Replace `i < n` with `i <= n` in src/lib.rs.",
            "To fix it, change line 12 to use `<=`.",
            "The comparison should be changed to `<=`.",
            "To fix the bug you need to return the right slice:\n```python\ndef last_n(items, n):\n    return items[len(items) - n:]\n```",
            "```python\ndef last_n(items, n):\n    return items[len(items) - n:]\n```",
        ] {
            assert!(describes_a_change(text), "{text}");
        }
        // Code shown without a word of changing it (an explanation, an example) is not one.
        assert!(!describes_a_change(
            "The function is:\n```python\ndef last_n(items, n):\n    ...\n```"
        ));
        for text in [
            "The tests pass now.",
            "I could not find the file; it may have been removed.",
            "Line 12 is where the loop starts.",
        ] {
            assert!(!describes_a_change(text), "{text}");
        }
    }
}
