//! The files a command runs: what a hook's command line or an MCP server's program and
//! arguments would execute, so that trusting the command covers them too. A command line is
//! split as a shell would split it (quotes, escapes, `;`, `&&`, `|`, redirections), the project
//! variables (`$CLAUDE_PROJECT_DIR`, `${NOP_PROJECT_DIR}`) expanded. Named: the program when it
//! is a path, the script an interpreter is given, the module `python -m` runs, and what
//! `bash -c '…'` runs in turn.
//!
//! What this cannot see is said in docs/security.md: a script that sources or runs other files
//! of the repository, and what `make` or `npm run` read (a Makefile, package.json: the agent
//! edits those every day), are covered only as far as the command names them.

use std::path::{Component, Path, PathBuf};

/// The longest command line looked at; the rest names nothing.
const MAX_COMMAND: usize = 64 * 1024;

/// The words of `command` as a shell splits them, with `vars` expanded (`$NAME`, `${NAME}`); a
/// word with another variable is dropped (what it names cannot be known). Operators end a
/// simple command: each inner list is one simple command's words.
pub fn split(command: &str, vars: &[(&str, &Path)]) -> Vec<Vec<String>> {
    let text: String = command.chars().take(MAX_COMMAND).collect();
    let mut commands: Vec<Vec<String>> = vec![Vec::new()];
    let mut word = String::new();
    let mut in_word = false;
    let mut unknown = false;
    let mut chars = text.chars().peekable();
    let end_word = |commands: &mut Vec<Vec<String>>,
                    word: &mut String,
                    in_word: &mut bool,
                    unknown: &mut bool| {
        if *in_word
            && !*unknown
            && let Some(last) = commands.last_mut()
        {
            last.push(std::mem::take(word));
        }
        word.clear();
        *in_word = false;
        *unknown = false;
    };
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                for c in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                    word.push(c);
                }
            }
            '"' => {
                in_word = true;
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => {
                            if let Some(next) = chars.next() {
                                word.push(next);
                            }
                        }
                        '$' => unknown |= !expand(&mut chars, &mut word, vars),
                        c => word.push(c),
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(next) = chars.next() {
                    word.push(next);
                }
            }
            '$' => {
                in_word = true;
                unknown |= !expand(&mut chars, &mut word, vars);
            }
            c if c.is_whitespace() => {
                end_word(&mut commands, &mut word, &mut in_word, &mut unknown)
            }
            ';' | '&' | '|' | '(' | ')' | '`' | '\n' => {
                end_word(&mut commands, &mut word, &mut in_word, &mut unknown);
                if commands.last().is_some_and(|c| !c.is_empty()) {
                    commands.push(Vec::new());
                }
            }
            '<' | '>' => {
                end_word(&mut commands, &mut word, &mut in_word, &mut unknown);
                // The target of a redirection is data, not a word of the command.
                while chars
                    .peek()
                    .is_some_and(|c| matches!(c, '>' | '<' | '&' | '|') || c.is_whitespace())
                {
                    chars.next();
                }
                while chars
                    .peek()
                    .is_some_and(|c| !c.is_whitespace() && !matches!(c, ';' | '&' | '|' | ')'))
                {
                    chars.next();
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    end_word(&mut commands, &mut word, &mut in_word, &mut unknown);
    commands.retain(|c| !c.is_empty());
    commands
}

/// Expands the variable after a `$` into `word`; false when it is not one of `vars`.
fn expand(
    chars: &mut std::iter::Peekable<impl Iterator<Item = char>>,
    word: &mut String,
    vars: &[(&str, &Path)],
) -> bool {
    let mut name = String::new();
    if chars.peek() == Some(&'{') {
        chars.next();
        for c in chars.by_ref() {
            if c == '}' {
                break;
            }
            name.push(c);
        }
    } else {
        while let Some(&c) = chars.peek() {
            if c.is_ascii_alphanumeric() || c == '_' {
                name.push(c);
                chars.next();
            } else {
                break;
            }
        }
    }
    match vars.iter().find(|(n, _)| *n == name) {
        Some((_, value)) => {
            word.push_str(&value.to_string_lossy());
            true
        }
        None => false,
    }
}

/// Programs that run the script named by their first argument that is not an option.
const INTERPRETERS: &[&str] = &[
    "sh", "bash", "zsh", "dash", "ksh", "fish", "python", "python2", "python3", "node", "nodejs",
    "deno", "bun", "tsx", "ts-node", "ruby", "perl", "php", "lua", "Rscript", "pwsh",
];

/// The files one command's words name as what it runs, resolved against `cwd`: the program when
/// it is a path (`./scripts/check.sh`, `"$CLAUDE_PROJECT_DIR"/.claude/hooks/x.sh`), the script
/// an interpreter is given (`python3 tools/server.py`, `node server.js`, `deno run x.ts`), and
/// the module `python -m pkg.mod` runs. What a command only reads or writes (`touch log`,
/// `>> out.jsonl`) is not named: it does not run. Lexically normal, not resolved through links.
pub fn files_of(words: &[String], cwd: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut push = |path: PathBuf| {
        if !out.contains(&path) {
            out.push(path);
        }
    };
    let Some(program) = words.first() else {
        return out;
    };
    if program.contains('/') {
        push(normal(&cwd.join(program)));
    }
    let name = Path::new(program)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let interpreter = INTERPRETERS.contains(&name.as_str())
        || name.starts_with("python3.")
        || name.starts_with("python2.");
    if !interpreter {
        return out;
    }
    let mut rest = words[1..].iter().peekable();
    // `deno run x.ts`, `bun run x.ts`: the subcommand comes first.
    if matches!(name.as_str(), "deno" | "bun") && rest.peek().is_some_and(|w| *w == "run") {
        rest.next();
    }
    while let Some(word) = rest.next() {
        if word == "-m" && name.starts_with("python") {
            if let Some(module) = rest.next() {
                let base = module.replace('.', "/");
                push(normal(&cwd.join(format!("{base}.py"))));
                push(normal(&cwd.join(&base).join("__main__.py")));
                push(normal(&cwd.join(&base).join("__init__.py")));
            }
            break;
        }
        // `bash -c '…'`: the command is the text after it, split on its own.
        if word == "-c" {
            if let Some(inner) = rest.next() {
                for words in split(inner, &[]) {
                    for path in files_of(&words, cwd) {
                        push(path);
                    }
                }
            }
            break;
        }
        if word.starts_with('-') {
            continue;
        }
        push(normal(&cwd.join(word)));
        break;
    }
    out
}

/// The files a shell command line names ([`split`], then [`files_of`] for each command).
pub fn in_command_line(command: &str, cwd: &Path, vars: &[(&str, &Path)]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for words in split(command, vars) {
        for path in files_of(&words, cwd) {
            if !out.contains(&path) {
                out.push(path);
            }
        }
    }
    out
}

/// `path` with `.` and `..` taken out lexically.
pub fn normal(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_lines_split_as_a_shell_splits_them_with_the_project_expanded() {
        let root = Path::new("/repo");
        let vars = [("CLAUDE_PROJECT_DIR", root), ("NOP_PROJECT_DIR", root)];
        assert_eq!(
            split(
                r#""$CLAUDE_PROJECT_DIR"/.claude/hooks/check.sh --x 'a b' && echo ${NOP_PROJECT_DIR}/y | tee $HOME/z; ls"#,
                &vars
            ),
            vec![
                vec!["/repo/.claude/hooks/check.sh", "--x", "a b"],
                vec!["echo", "/repo/y"],
                vec!["tee"],
                vec!["ls"],
            ]
        );
    }

    #[test]
    fn what_a_command_runs_is_named_and_what_it_reads_or_writes_is_not() {
        let cwd = Path::new("/repo");
        let words = |s: &str| s.split(' ').map(str::to_string).collect::<Vec<_>>();
        assert_eq!(
            files_of(&words("./a/../check.sh --x=conf/y.json started"), cwd),
            vec![cwd.join("check.sh")]
        );
        assert_eq!(
            files_of(&words("touch work/started"), cwd),
            Vec::<PathBuf>::new()
        );
        assert_eq!(
            files_of(&words("python3 -u tools/server.py --port 1"), cwd),
            vec![cwd.join("tools/server.py")]
        );
        assert_eq!(
            files_of(&words("python3 -m tools.server"), cwd),
            vec![
                cwd.join("tools/server.py"),
                cwd.join("tools/server/__main__.py"),
                cwd.join("tools/server/__init__.py")
            ]
        );
        assert_eq!(
            files_of(&words("deno run -A x.ts"), cwd),
            vec![cwd.join("x.ts")]
        );
        assert_eq!(
            in_command_line(
                "cat >> work/log.jsonl; echo ok > out && bash -c './b.sh 2>&1'",
                cwd,
                &[]
            ),
            vec![cwd.join("b.sh")]
        );
    }
}
