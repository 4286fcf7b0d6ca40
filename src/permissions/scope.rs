//! What an "always" answer to an approval covers, the way Claude Code does it: a shell command's
//! prefix (`cargo test --all` → `cargo test …` commands), a file's directory for the same kind
//! of access (`src/cli/run.rs` → writing files under `src/cli/`), every call of any other tool.
//! Everything a prefix could be abused for (a compound command, a redirection, a substitution, a
//! command that runs another command) gets the exact call only.
//!
//! The matching is deliberately literal: a command is split on blanks only when it contains no
//! character the shell gives a meaning beyond separating words, so the words compared are the
//! words bash runs, and a prefix matches whole words (`cargo test` never covers `cargo testx`).

use std::path::{Component, Path, PathBuf};

use super::Access;

/// What a call that needs approval would do, as far as an "always" answer cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// A `shell` command line, run in `workdir` (relative to the repository; `None`: its root).
    Command {
        line: String,
        workdir: Option<String>,
    },
    /// Reading or writing a file; `path` is canonical (as the permission check resolved it).
    File { path: PathBuf, access: Access },
    /// A call of a tool whose every call an "always" may cover (a plugin tool, `call-agent`).
    Tool { tool: String },
    /// A call only an identical one matches: a tool whose subject could not be read (a
    /// `shell` call without a command), with its arguments as JSON.
    Call { tool: String, arguments: String },
}

/// What an "always" answer covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// The identical action only.
    Exact(Action),
    /// Simple commands (no shell metacharacters) whose first words are `words`, run in the same
    /// `workdir`.
    CommandPrefix {
        words: Vec<String>,
        workdir: Option<String>,
    },
    /// The same access to any file beneath `dir` (canonical, inside the repository).
    Directory { dir: PathBuf, access: Access },
    /// Every call of the tool.
    Tool(String),
}

/// Characters that make a command more than one simple command with literal words: separators
/// and pipes (`; & |`), expansions and substitutions (`$`, backquote), redirections (`< >`),
/// subshells, groups and brace expansion (`( ) { }`), escapes (`\`). A command with any of them,
/// or with a control character (a newline separates commands), is matched only exactly.
const SHELL_META: &[char] = &[';', '&', '|', '$', '`', '<', '>', '(', ')', '{', '}', '\\'];

/// Programs whose arguments are another command (`env X=1 cmd`, `timeout 10 cmd`, `sudo cmd`)
/// or can make them run one (`find -exec`, GNU `sed`'s `e`): a prefix of theirs says nothing
/// about what runs, so their commands are matched exactly.
const WRAPPERS: &[&str] = &[
    ".", "builtin", "busybox", "chroot", "chrt", "command", "coproc", "doas", "env", "eval",
    "exec", "find", "flock", "ionice", "nice", "nohup", "nsenter", "parallel", "pkexec", "runuser",
    "script", "sed", "setsid", "source", "stdbuf", "strace", "su", "sudo", "taskset", "time",
    "timeout", "unshare", "watch", "xargs",
];

/// Interpreters: alone (`python -c …`, `bash -c …`) their prefix would cover any program, so
/// only a prefix with a script (`python tools/gen.py`) is offered; otherwise the exact command.
const INTERPRETERS: &[&str] = &[
    "awk", "bash", "bun", "csh", "dash", "deno", "fish", "gawk", "ksh", "lua", "mawk", "nawk",
    "node", "nodejs", "perl", "php", "pwsh", "python", "ruby", "sh", "tclsh", "tcsh", "zsh",
];

impl Scope {
    /// What an "always" answer to `action` covers, in the repository at `root` (canonical).
    pub fn of(action: &Action, root: &Path) -> Scope {
        match action {
            Action::Command { line, workdir } => match command_prefix(line) {
                Some(words) => Scope::CommandPrefix {
                    words,
                    workdir: workdir.clone(),
                },
                None => Scope::Exact(action.clone()),
            },
            Action::File { path, access } => {
                match path
                    .parent()
                    .filter(|dir| inside(root, path) && dir.starts_with(root))
                {
                    Some(dir) => Scope::Directory {
                        dir: dir.to_path_buf(),
                        access: *access,
                    },
                    None => Scope::Exact(action.clone()),
                }
            }
            Action::Tool { tool } => Scope::Tool(tool.clone()),
            Action::Call { .. } => Scope::Exact(action.clone()),
        }
    }

    /// Whether a later `action` is covered.
    pub fn covers(&self, action: &Action) -> bool {
        match (self, action) {
            (Scope::Exact(granted), action) => granted == action,
            (
                Scope::CommandPrefix { words, workdir },
                Action::Command {
                    line,
                    workdir: there,
                },
            ) => {
                workdir == there
                    && simple_words(line).is_some_and(|later| {
                        later.len() >= words.len() && words.iter().zip(&later).all(|(a, b)| a == b)
                    })
            }
            (
                Scope::Directory { dir, access },
                Action::File {
                    path,
                    access: wants,
                },
            ) => access == wants && path != dir && path.starts_with(dir) && plain_path(path),
            (Scope::Tool(granted), Action::Tool { tool }) => granted == tool,
            _ => false,
        }
    }

    /// The scope in words, for the approval prompt ("always: …"); paths relative to `root`.
    pub fn describe(&self, root: &Path) -> String {
        match self {
            Scope::Exact(Action::Command { .. }) => "this exact command".to_string(),
            Scope::Exact(Action::File { path, access }) => {
                format!("{} {} (this file only)", verb(*access), path.display())
            }
            Scope::Exact(Action::Tool { tool }) => format!("this exact `{tool}` call"),
            Scope::Exact(Action::Call { tool, .. }) => format!("this exact `{tool}` call"),
            Scope::CommandPrefix { words, workdir } => {
                let place = workdir
                    .as_deref()
                    .map(|w| format!(" in {w}"))
                    .unwrap_or_default();
                format!("\"{} …\" commands{place}", words.join(" "))
            }
            Scope::Directory { dir, access } => match dir.strip_prefix(root) {
                Ok(rel) if rel.as_os_str().is_empty() => {
                    format!("{} any file in the repository", verb(*access))
                }
                Ok(rel) => format!("{} files under {}/", verb(*access), rel.display()),
                Err(_) => format!("{} files under {}/", verb(*access), dir.display()),
            },
            Scope::Tool(tool) => format!("every `{tool}` call"),
        }
    }
}

fn verb(access: Access) -> &'static str {
    match access {
        Access::Read => "reading",
        Access::Write => "writing",
    }
}

/// Whether `path` lies beneath `root` (not `root` itself), with no `.`/`..` left in it.
fn inside(root: &Path, path: &Path) -> bool {
    path != root && path.starts_with(root) && plain_path(path)
}

/// A path with no `.` or `..` component: `starts_with` compares components, so one that is
/// not resolved could name a file outside the directory it seems to be in.
fn plain_path(path: &Path) -> bool {
    path.is_absolute()
        && path
            .components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
}

/// The words of `line` when it is one simple command whose words are literal as written:
/// `None` when it has a shell metacharacter or a control character. Split on blanks (space,
/// tab), as bash splits an unquoted line.
fn simple_words(line: &str) -> Option<Vec<&str>> {
    if line
        .chars()
        .any(|c| SHELL_META.contains(&c) || (c.is_control() && c != '\t'))
    {
        return None;
    }
    let words: Vec<&str> = line.split([' ', '\t']).filter(|w| !w.is_empty()).collect();
    (!words.is_empty()).then_some(words)
}

/// Whether `line` is one simple command (no shell metacharacter) whose words, joined by one
/// space, match the glob `pattern` (`cargo publish*`, `git push origin *`): what a
/// `shell.outside_sandbox` entry allows. A compound command (`git push; rm -rf ~`) never
/// matches.
pub fn command_matches(pattern: &str, line: &str) -> bool {
    let Some(words) = simple_words(line) else {
        return false;
    };
    let Ok(glob) = globset::GlobBuilder::new(pattern.trim())
        .literal_separator(false)
        .build()
    else {
        return false;
    };
    glob.compile_matcher().is_match(words.join(" "))
}

/// A word that is the same to bash as written and cannot be an assignment, a glob, a tilde
/// expansion or a quoted string: ASCII letters, digits and `_ . / + - : @ % ,`.
fn literal(word: &str) -> bool {
    !word.is_empty()
        && word.chars().all(|c| {
            c.is_ascii_alphanumeric()
                || matches!(c, '_' | '.' | '/' | '+' | '-' | ':' | '@' | '%' | ',')
        })
}

/// The prefix an "always" for `line` covers: the program and, when the next word is not an
/// option, that word (`cargo test --all` → `cargo test`, `ls -la` → `ls`). `None` (the exact
/// command only) for a command with shell metacharacters, a program that is not a literal word
/// (`X=1 cmd`, `'ls'`), a wrapper of another command, or an interpreter without a script.
fn command_prefix(line: &str) -> Option<Vec<String>> {
    let words = simple_words(line)?;
    let program = *words.first()?;
    if !literal(program) || program.starts_with('-') {
        return None;
    }
    let name = program.rsplit('/').next().unwrap_or(program);
    if WRAPPERS.contains(&name) {
        return None;
    }
    let mut prefix = vec![program.to_string()];
    if let Some(next) = words.get(1).filter(|w| literal(w) && !w.starts_with('-')) {
        prefix.push(next.to_string());
    }
    // `python3.12` is `python`.
    let family = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    // `python3 -m unittest …`: the module is what runs, as a script would be.
    if family == "python"
        && words.get(1) == Some(&"-m")
        && let Some(module) = words.get(2).filter(|w| literal(w) && !w.starts_with('-'))
    {
        return Some(vec![
            program.to_string(),
            "-m".to_string(),
            module.to_string(),
        ]);
    }
    if prefix.len() == 1 && INTERPRETERS.contains(&family) {
        return None;
    }
    Some(prefix)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn command(line: &str) -> Action {
        Action::Command {
            line: line.to_string(),
            workdir: None,
        }
    }

    fn root() -> PathBuf {
        PathBuf::from("/repo")
    }

    fn scope_of_command(line: &str) -> Scope {
        Scope::of(&command(line), &root())
    }

    fn prefix(words: &[&str]) -> Scope {
        Scope::CommandPrefix {
            words: words.iter().map(|w| w.to_string()).collect(),
            workdir: None,
        }
    }

    fn file(path: &str, access: Access) -> Action {
        Action::File {
            path: PathBuf::from(path),
            access,
        }
    }

    #[test]
    fn a_command_is_covered_by_its_program_and_subcommand() {
        assert_eq!(
            scope_of_command("cargo test --all"),
            prefix(&["cargo", "test"])
        );
        assert_eq!(scope_of_command("git status"), prefix(&["git", "status"]));
        assert_eq!(scope_of_command("ls -la"), prefix(&["ls"]));
        assert_eq!(scope_of_command("ls"), prefix(&["ls"]));
        assert_eq!(
            scope_of_command("  cargo\ttest  "),
            prefix(&["cargo", "test"])
        );
        assert_eq!(
            scope_of_command("./run-tests.sh --fast"),
            prefix(&["./run-tests.sh"])
        );
        assert_eq!(
            scope_of_command("python3 tools/gen.py x"),
            prefix(&["python3", "tools/gen.py"])
        );
        // An argument that is not a literal word is not taken as a subcommand.
        assert_eq!(scope_of_command("ls *.rs"), prefix(&["ls"]));
        assert_eq!(scope_of_command("echo \"hi there\""), prefix(&["echo"]));

        let cargo_test = scope_of_command("cargo test --all");
        for covered in [
            "cargo test",
            "cargo test --all",
            "cargo test -p nop -- --nocapture",
            "cargo  test\t--doc",
        ] {
            assert!(cargo_test.covers(&command(covered)), "{covered}");
        }
        let ls = scope_of_command("ls -la");
        for covered in ["ls", "ls src", "ls -la src/cli"] {
            assert!(ls.covers(&command(covered)), "{covered}");
        }
    }

    #[test]
    fn a_prefix_matches_whole_words_and_simple_commands_only() {
        let cargo_test = scope_of_command("cargo test --all");
        for hostile in [
            "cargo testx",
            "cargo",
            "cargo build",
            "cargotest",
            "cargo-test",
            "cargo test; rm -rf ~",
            "cargo test;rm -rf ~",
            "cargo test && rm -rf ~",
            "cargo test || rm -rf ~",
            "cargo test & rm -rf ~",
            "cargo test | sh",
            "cargo test $(rm -rf ~)",
            "cargo test `rm -rf ~`",
            "cargo test ${HOME}",
            "cargo test $HOME",
            "cargo test > ~/.bashrc",
            "cargo test < /etc/passwd",
            "cargo test 2>&1",
            "cargo test <(rm -rf ~)",
            "cargo test (x)",
            "cargo test {a,b}",
            "cargo test\nrm -rf ~",
            "cargo test\rrm -rf ~",
            "cargo test \\\nrm",
            "cargo test\u{0}rm",
            "cargo test\u{b}; rm",
            "X=1 cargo test",
            "'cargo' test",
            "\"cargo test\"",
            "c\\argo test",
            " cargo\u{c}test",
            "",
        ] {
            assert!(
                !cargo_test.covers(&command(hostile)),
                "{hostile:?} is covered"
            );
        }
        // Nor does it cover a command run elsewhere.
        let elsewhere = Action::Command {
            line: "cargo test".into(),
            workdir: Some("vendor/evil".into()),
        };
        assert!(!cargo_test.covers(&elsewhere));
        // Or anything that is not a command.
        assert!(!cargo_test.covers(&Action::Tool {
            tool: "cargo".into()
        }));
    }

    #[test]
    fn a_compound_or_redirected_command_is_covered_only_by_itself() {
        for line in [
            "echo hi && rm -rf /",
            "echo hi; rm -rf /",
            "echo hi | sh",
            "echo $(id)",
            "echo `id`",
            "echo hi > out.txt",
            "cat < in.txt",
            "(cd src)",
            "{ ls; }",
            "echo a\necho b",
            "echo \\; rm",
        ] {
            let scope = scope_of_command(line);
            assert_eq!(scope, Scope::Exact(command(line)), "{line:?}");
            assert!(scope.covers(&command(line)));
            assert!(!scope.covers(&command("echo hi")), "{line:?}");
            assert!(!scope.covers(&command(&format!("{line} "))), "{line:?}");
            assert_eq!(scope.describe(&root()), "this exact command");
        }
        // An "always" for `echo hi && …` never approves `rm -rf /`.
        let scope = scope_of_command("echo hi && rm -rf /tmp/x");
        for hostile in ["rm -rf /", "echo hi && rm -rf /", "echo hi"] {
            assert!(!scope.covers(&command(hostile)), "{hostile}");
        }
    }

    #[test]
    fn commands_that_run_other_commands_are_covered_only_by_themselves() {
        for line in [
            "env FOO=1 cargo test",
            "sudo apt install x",
            "timeout 10 cargo test",
            "xargs rm",
            "nohup ./server",
            "time cargo build",
            "exec ls",
            "eval ls",
            "command ls",
            "/usr/bin/env ls",
            "find . -delete",
            "sed -n 1,5p src/lib.rs",
            ". ./env.sh",
            "source env.sh",
            "bash -c ls",
            "sh -c ls",
            "python -c print",
            "python3.12 -m",
            "/usr/bin/python3 -c print",
            "node -e 1",
            "perl -e 1",
            "FOO=1 ls",
            "'ls' -la",
            "-ls",
        ] {
            assert_eq!(
                scope_of_command(line),
                Scope::Exact(command(line)),
                "{line:?}"
            );
        }
        // An interpreter with a script is a prefix like any program.
        let script = scope_of_command("bash scripts/check.sh --quick");
        assert_eq!(script, prefix(&["bash", "scripts/check.sh"]));
        assert!(script.covers(&command("bash scripts/check.sh")));
        assert!(!script.covers(&command("bash -c ls")));
        assert!(!script.covers(&command("bash scripts/check.sh; ls")));
    }

    #[test]
    fn a_prefix_holds_for_its_working_directory_only() {
        let sub = Action::Command {
            line: "./build.sh".into(),
            workdir: Some("sub".into()),
        };
        let scope = Scope::of(&sub, &root());
        assert_eq!(
            scope,
            Scope::CommandPrefix {
                words: vec!["./build.sh".into()],
                workdir: Some("sub".into())
            }
        );
        assert!(scope.covers(&Action::Command {
            line: "./build.sh --release".into(),
            workdir: Some("sub".into())
        }));
        assert!(!scope.covers(&command("./build.sh")));
        assert_eq!(scope.describe(&root()), "\"./build.sh …\" commands in sub");
    }

    #[test]
    fn a_file_is_covered_by_its_directory_for_the_same_access() {
        let scope = Scope::of(&file("/repo/src/cli/run.rs", Access::Write), &root());
        assert_eq!(
            scope,
            Scope::Directory {
                dir: "/repo/src/cli".into(),
                access: Access::Write
            }
        );
        assert_eq!(scope.describe(&root()), "writing files under src/cli/");
        for covered in [
            "/repo/src/cli/run.rs",
            "/repo/src/cli/keys.rs",
            "/repo/src/cli/term/new.rs",
        ] {
            assert!(scope.covers(&file(covered, Access::Write)), "{covered}");
        }
        for (hostile, access) in [
            ("/repo/src/cli/run.rs", Access::Read),
            ("/repo/src/client/x.rs", Access::Write),
            ("/repo/src/cli", Access::Write),
            ("/repo/src/lib.rs", Access::Write),
            ("/repo/src/cli/../../.env", Access::Write),
            ("/repo/src/cli/./../lib.rs", Access::Write),
            ("/etc/passwd", Access::Write),
            ("src/cli/run.rs", Access::Write),
        ] {
            assert!(
                !scope.covers(&file(hostile, access)),
                "{hostile} {access:?}"
            );
        }
        assert!(!scope.covers(&command("/repo/src/cli/run.rs")));
        // Reading is its own scope.
        let read = Scope::of(&file("/repo/docs/a.md", Access::Read), &root());
        assert_eq!(read.describe(&root()), "reading files under docs/");
        assert!(!read.covers(&file("/repo/docs/b.md", Access::Write)));
    }

    #[test]
    fn a_file_at_the_root_covers_the_repository_and_one_outside_only_itself() {
        let top = Scope::of(&file("/repo/README.md", Access::Write), &root());
        assert_eq!(top.describe(&root()), "writing any file in the repository");
        assert!(top.covers(&file("/repo/src/lib.rs", Access::Write)));
        assert!(!top.covers(&file("/repository/x", Access::Write)));
        assert!(!top.covers(&file("/tmp/x", Access::Write)));

        let outside = file("/tmp/scratch/a.txt", Access::Write);
        let scope = Scope::of(&outside, &root());
        assert_eq!(scope, Scope::Exact(outside.clone()));
        assert_eq!(
            scope.describe(&root()),
            "writing /tmp/scratch/a.txt (this file only)"
        );
        assert!(scope.covers(&outside));
        assert!(!scope.covers(&file("/tmp/scratch/b.txt", Access::Write)));
        assert!(!scope.covers(&file("/tmp/scratch/a.txt", Access::Read)));
        // The root itself, a path next to it that shares its name's start, one not resolved.
        for odd in ["/repo", "/repository/a.txt", "/repo/../etc/passwd"] {
            let action = file(odd, Access::Write);
            assert_eq!(
                Scope::of(&action, &root()),
                Scope::Exact(action.clone()),
                "{odd}"
            );
        }
    }

    #[test]
    fn other_tools_are_covered_by_their_name_and_unreadable_calls_by_themselves() {
        let scope = Scope::of(
            &Action::Tool {
                tool: "github.create_issue".into(),
            },
            &root(),
        );
        assert_eq!(scope, Scope::Tool("github.create_issue".into()));
        assert_eq!(scope.describe(&root()), "every `github.create_issue` call");
        assert!(scope.covers(&Action::Tool {
            tool: "github.create_issue".into()
        }));
        assert!(!scope.covers(&Action::Tool {
            tool: "github.delete_repo".into()
        }));
        assert!(!scope.covers(&command("github.create_issue")));

        let odd = Action::Call {
            tool: "shell".into(),
            arguments: "{}".into(),
        };
        let scope = Scope::of(&odd, &root());
        assert_eq!(scope, Scope::Exact(odd.clone()));
        assert!(!scope.covers(&command("ls")));
        assert!(!scope.covers(&Action::Tool {
            tool: "shell".into()
        }));
        assert!(!Scope::Tool("shell".into()).covers(&odd));
    }

    #[test]
    fn a_python_module_is_covered_with_its_arguments() {
        let granted = scope_of_command("python3 -m unittest");
        assert!(granted.covers(&command("python3 -m unittest -v")));
        assert!(granted.covers(&command("python3 -m unittest tests.test_calc")));
        assert!(!granted.covers(&command("python3 -m pip install x")));
        assert!(!granted.covers(&command("python3 -c 'import os'")));
        assert!(!granted.covers(&command("python3 -m unittest && rm -rf x")));
    }
}
