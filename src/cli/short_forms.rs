//! The short forms of the command line that users of Claude Code and Codex type, rewritten into
//! nop's commands before clap reads them ([`implicit_run`]).

use std::ffi::OsString;

/// The arguments as clap should read them:
/// - `nop "PROMPT"` and `nop fix the failing test` are `nop run …`, unless the first word is a
///   command; a lone word close to a command's name (`nop sesions`) is left for clap to say "did
///   you mean", not sent to the model;
/// - a flag of `run` before any command is `run`'s: `nop -c "go on"`, `nop --model M "…"`,
///   `nop -p "…"` (print mode);
/// - `nop -r [ID] [PROMPT]` (`--resume`) is `nop resume [ID] [PROMPT]`;
/// - for `run` and `exec`, the words of the prompt given unquoted are one prompt.
pub fn implicit_run(cli: &clap::Command, mut args: Vec<OsString>) -> Vec<OsString> {
    let globals = Options::of(cli);
    let Some(run) = cli.find_subcommand("run").map(Options::of) else {
        return args;
    };
    let mut i = 1;
    while let Some(n) = args.get(i).and_then(|a| globals.width(a)) {
        i += n;
    }
    let Some(first) = args.get(i).map(|a| a.to_string_lossy().into_owned()) else {
        return args;
    };
    let names: Vec<String> = cli
        .get_subcommands()
        .flat_map(|c| std::iter::once(c.get_name()).chain(c.get_all_aliases()))
        .chain(["help"])
        .map(str::to_string)
        .collect();
    if first == "-r" || first == "--resume" {
        args[i] = "resume".into();
        return args;
    }
    if let Some(id) = first.strip_prefix("--resume=") {
        args.splice(i..=i, ["resume".into(), id.into()]);
        return args;
    }
    if first.starts_with('-') && first != "-" {
        // `--help`, `--version` and what nobody knows are clap's to answer.
        if run.width(&args[i]).is_none() {
            return args;
        }
    } else if names.contains(&first) {
        if first != "run" && first != "exec" {
            return args;
        }
        i += 1;
        return join_words(args, i, &run, &globals);
    } else {
        let lone = words(&args[i..], &run, &globals).len() == 1
            && !first.trim().contains(char::is_whitespace);
        if names.iter().any(|n| near(n, &first, lone)) {
            return args;
        }
    }
    args.insert(i, "run".into());
    join_words(args, i + 1, &run, &globals)
}

/// Whether `word` looks like a mistyped command `name`: at most two edits for a lone word (rarely
/// a prompt), one for a short first word of several (`nop do the dishes` is a prompt).
fn near(name: &str, word: &str, lone: bool) -> bool {
    let distance = nop::config::edit_distance(name, word);
    distance <= 1 || (distance == 2 && (lone || word.chars().count() >= 5))
}

/// The arguments from `from` on with the positional words among them made one, separated by
/// spaces: `fix the failing test` is the prompt "fix the failing test".
fn join_words(
    mut args: Vec<OsString>,
    from: usize,
    run: &Options,
    globals: &Options,
) -> Vec<OsString> {
    let Some(rest) = args.get(from..) else {
        return args;
    };
    let at: Vec<usize> = words(rest, run, globals)
        .into_iter()
        .map(|j| j + from)
        .collect();
    let [first, others @ ..] = at.as_slice() else {
        return args;
    };
    if others.is_empty() {
        return args;
    }
    let mut prompt = args[*first].clone();
    for j in others {
        prompt.push(" ");
        prompt.push(&args[*j]);
    }
    args[*first] = prompt;
    for j in others.iter().rev() {
        args.remove(*j);
    }
    args
}

/// The indices in `args` of the positional words, options and their values skipped; after `--`
/// every argument is a word.
fn words(args: &[OsString], run: &Options, globals: &Options) -> Vec<usize> {
    let mut found = Vec::new();
    let mut j = 0;
    let mut options_end = false;
    while let Some(arg) = args.get(j) {
        let text = arg.to_string_lossy();
        if options_end || text == "-" || !text.starts_with('-') {
            found.push(j);
            j += 1;
        } else if text == "--" {
            options_end = true;
            j += 1;
        } else {
            j += run.width(arg).or_else(|| globals.width(arg)).unwrap_or(1);
        }
    }
    found
}

/// The named options of one command as clap defines them: long and short names, and whether
/// each takes a value.
struct Options {
    /// (long name, short name, takes a value).
    list: Vec<(Option<String>, Option<char>, bool)>,
}

impl Options {
    fn of(command: &clap::Command) -> Options {
        let list = command
            .get_arguments()
            .filter(|a| !a.is_positional())
            .map(|a| {
                (
                    a.get_long().map(str::to_string),
                    a.get_short(),
                    a.get_action().takes_values(),
                )
            })
            .collect();
        Options { list }
    }

    /// How many arguments `arg` takes up if it is one of these options (2 when its value is the
    /// next argument); `None` when it is not one of them.
    fn width(&self, arg: &OsString) -> Option<usize> {
        let arg = arg.to_str()?;
        if let Some(long) = arg.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((name, _)) => (name, true),
                None => (long, false),
            };
            let (_, _, value) = self.list.iter().find(|o| o.0.as_deref() == Some(name))?;
            return Some(if *value && !inline { 2 } else { 1 });
        }
        let mut chars = arg.strip_prefix('-')?.chars();
        let short = chars.next()?;
        let attached = chars.next().is_some();
        let (_, _, value) = self.list.iter().find(|o| o.1 == Some(short))?;
        Some(if *value && !attached { 2 } else { 1 })
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::super::Cli;
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        let os = list.iter().map(OsString::from).collect();
        implicit_run(&Cli::command(), os)
            .into_iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn a_prompt_alone_runs_and_commands_and_near_misses_do_not() {
        assert_eq!(
            args(&["nop", "fix the test"]),
            ["nop", "run", "fix the test"]
        );
        assert_eq!(
            args(&["nop", "-C", "sub", "explain"]),
            ["nop", "-C", "sub", "run", "explain"]
        );
        assert_eq!(
            args(&["nop", "sessions", "list"]),
            ["nop", "sessions", "list"]
        );
        // A mistyped command is clap's to refuse, not a prompt for the model.
        assert_eq!(args(&["nop", "sesions"]), ["nop", "sesions"]);
        assert_eq!(
            args(&["nop", "sesions", "list"]),
            ["nop", "sesions", "list"]
        );
        assert_eq!(args(&["nop", "--version"]), ["nop", "--version"]);
        assert_eq!(args(&["nop", "--help"]), ["nop", "--help"]);
        assert_eq!(args(&["nop"]), ["nop"]);
        assert_eq!(args(&["nop", "-"]), ["nop", "run", "-"]);
    }

    #[test]
    fn unquoted_words_are_one_prompt() {
        assert_eq!(
            args(&["nop", "fix", "the", "failing", "test"]),
            ["nop", "run", "fix the failing test"]
        );
        // A short first word near a command's name is still a prompt when more words follow.
        assert_eq!(
            args(&["nop", "do", "the", "dishes"]),
            ["nop", "run", "do the dishes"]
        );
        // Options and their values stay where they are, wherever they are.
        assert_eq!(
            args(&["nop", "fix", "--max-turns", "3", "the", "test", "-C", "sub"]),
            [
                "nop",
                "run",
                "fix the test",
                "--max-turns",
                "3",
                "-C",
                "sub"
            ]
        );
        assert_eq!(
            args(&["nop", "run", "fix", "the", "test"]),
            ["nop", "run", "fix the test"]
        );
        assert_eq!(
            args(&["nop", "exec", "--yes", "fix", "it"]),
            ["nop", "exec", "--yes", "fix it"]
        );
        assert_eq!(
            args(&["nop", "fix", "--", "-v", "flag"]),
            ["nop", "run", "fix -v flag", "--"]
        );
        // A command's own words are its own.
        assert_eq!(
            args(&["nop", "memory", "search", "last", "week"]),
            ["nop", "memory", "search", "last", "week"]
        );
    }

    #[test]
    fn the_flags_of_run_and_the_other_tools_habits_are_run_s() {
        assert_eq!(args(&["nop", "-c", "go on"]), ["nop", "run", "-c", "go on"]);
        assert_eq!(args(&["nop", "-c"]), ["nop", "run", "-c"]);
        assert_eq!(
            args(&["nop", "--model", "gpt-4o", "explain", "this"]),
            ["nop", "run", "--model", "gpt-4o", "explain this"]
        );
        assert_eq!(
            args(&["nop", "--model=gpt-4o", "hi"]),
            ["nop", "run", "--model=gpt-4o", "hi"]
        );
        assert_eq!(
            args(&["nop", "-p", "what", "is", "this"]),
            ["nop", "run", "-p", "what is this"]
        );
        assert_eq!(
            args(&["nop", "--set", "a=1", "--output-format", "json", "hi"]),
            [
                "nop",
                "--set",
                "a=1",
                "run",
                "--output-format",
                "json",
                "hi"
            ]
        );
        assert_eq!(
            args(&["nop", "--approval", "never", "--yes", "hi"]),
            ["nop", "run", "--approval", "never", "--yes", "hi"]
        );
    }

    #[test]
    fn resume_is_r() {
        assert_eq!(args(&["nop", "-r"]), ["nop", "resume"]);
        assert_eq!(args(&["nop", "-r", "abc"]), ["nop", "resume", "abc"]);
        assert_eq!(
            args(&["nop", "-C", "sub", "--resume", "abc", "go on"]),
            ["nop", "-C", "sub", "resume", "abc", "go on"]
        );
        assert_eq!(args(&["nop", "--resume=abc"]), ["nop", "resume", "abc"]);
    }
}
