//! The command line: the binary's own module and the only one that prints; everything it does
//! goes through the library. This file dispatches: the clap types are in `args.rs`, what a command
//! starts from (workspace, configuration, logging, store) is resolved once in `context.rs`, and
//! each command or family of commands has its file.

mod agents;
mod args;
mod chat;
mod checkpoints;
mod config;
mod context;
mod init;
mod keys;
mod memory;
mod output;
mod permissions;
mod picker;
mod render;
mod run;
mod sandbox;
mod sessions;
mod setup;
mod slash;
mod start;
mod term;
mod transcript;

pub use args::{
    AccessArg, AgentsCommand, ApprovalArg, Cli, Command, ConfigCommand, MemoryCommand,
    PermissionsCommand, PluginsCommand, RunArgs, SessionsCommand,
};
pub use run::OutputFormat;

pub use context::Outside;

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use anyhow::Result;
use clap::CommandFactory;

use context::{Context, Invocation};

/// Exit codes, documented in README.md.
pub mod exit {
    /// Success; for `nop run`, the agent completed the task.
    pub const OK: u8 = 0;
    pub const ERROR: u8 = 1;
    pub const USAGE: u8 = 2;
    /// The agent asked a question; answer with `nop run --session ID "answer"`.
    pub const WAITING_INPUT: u8 = 3;
    /// Refused (another session has priority).
    pub const REFUSED: u8 = 4;
    /// Stopped before a model request that would pass `--max-budget-usd`; the session can be
    /// continued.
    pub const BUDGET_EXCEEDED: u8 = 5;
    /// Stopped by Ctrl-C / SIGTERM.
    pub const CANCELLED: u8 = 130;
}

/// Runs a parsed command line; errors are printed by the caller.
pub fn run(cli: Cli, outside: Outside) -> Result<ExitCode> {
    let inv = Invocation::new(&cli, outside)?;
    // Not locked: `nop run` writes from the renderer task on another thread.
    let mut out = std::io::stdout();
    let Some(command) = cli.command else {
        if !std::io::stdin().is_terminal() || !std::io::stdout().is_terminal() {
            let mut err = std::io::stderr();
            let _ = Cli::command().write_help(&mut err);
            return Ok(ExitCode::from(exit::USAGE));
        }
        let ctx = inv.open()?;
        if setup::has_model(&ctx) {
            return start::interactive(&ctx);
        }
        return match setup::first_contact(ctx)? {
            setup::Setup::Ready(inv) => start::interactive(&inv.open()?),
            setup::Setup::Leave(code) => Ok(code),
        };
    };
    match command {
        // Neither needs the repository's configuration (`init` makes it, `config set` changes
        // it, even outside any repository), nor does printing completions.
        Command::Init { force } => init::init(inv, force, &mut out),
        Command::Config(ConfigCommand::Set {
            key,
            value,
            user_file,
        }) => {
            let user_file = user_file.as_deref() == Some(config::USER_FILE);
            config::set(&inv, &key, &value, user_file, &mut out)
        }
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "nop", &mut out);
            Ok(ExitCode::SUCCESS)
        }
        command => dispatch(command, &inv.open()?, &mut out),
    }
}

/// Runs a command that works in the repository, with its context.
fn dispatch(command: Command, ctx: &Context, out: &mut impl Write) -> Result<ExitCode> {
    match command {
        Command::Run(args) => start::run_command(ctx, args),
        Command::Resume {
            id,
            prompt,
            model,
            output_format,
        } => start::resume(ctx, id, prompt, model, output_format),
        Command::Chat { session, agent } => start::chat(ctx, session, agent),
        Command::Send {
            session,
            priority,
            output_format,
            message,
        } => start::send(ctx, &session, priority, output_format, message),
        Command::Stop { session } => start::stop(ctx, &session),
        Command::Compact { id } => start::compact(ctx, &id),
        Command::Memory(command) => memory::memory(ctx, command),
        Command::Config(ConfigCommand::Show {
            json,
            session,
            agent,
        }) => config::show(ctx, json, session, agent, out),
        Command::Sandbox(command) => sandbox::command(ctx, command, out),
        Command::Sessions(command) => sessions::sessions(ctx, command, out),
        Command::Plan { id, json } => sessions::plan(&ctx.store, &id, json, out),
        Command::Log { id } => sessions::log(&ctx.store, &id, out),
        Command::Snapshot { id } => sessions::snapshot(&ctx.store, &id, out),
        Command::Fork {
            id,
            snapshot,
            worktree: Some(path),
            json,
        } => checkpoints::fork_worktree(ctx, &id, snapshot, path, json, out),
        Command::Fork {
            id,
            snapshot,
            worktree: None,
            json: _,
        } => checkpoints::fork(&ctx.store, &id, snapshot, out),
        Command::Undo {
            session,
            force,
            json,
        } => checkpoints::undo(ctx, session, force, json, out),
        Command::Rewind {
            session,
            to,
            files,
            conversation,
            both: _,
            force,
            json,
        } => checkpoints::rewind(ctx, &session, &to, (files, conversation), force, json, out),
        Command::Permissions(command) => permissions::permissions(ctx, command, out),
        Command::Plugins(PluginsCommand::List { json }) => agents::plugins(ctx, json, out),
        Command::Agents(AgentsCommand::List { json }) => agents::agents(ctx, json, out),
        // Run by `run` before a context is opened.
        Command::Init { .. }
        | Command::Config(ConfigCommand::Set { .. })
        | Command::Completions { .. } => Ok(ExitCode::from(exit::USAGE)),
    }
}

/// `nop "PROMPT"` is `nop run "PROMPT"`: the arguments with `run` put in front of the prompt when
/// the first one that is not an option names no command. A lone word close to a command's name
/// (`nop sesions`) is left for clap to say "did you mean"; it is not sent to the model.
pub fn implicit_run(args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let command = Cli::command();
    let mut i = 1;
    while let Some(arg) = args.get(i).and_then(|a| a.to_str()) {
        match arg {
            "-C" | "--directory" | "--log-level" | "--set" | "--user" => i += 2,
            a if a.starts_with('-') => return args,
            _ => break,
        }
    }
    let Some(first) = args.get(i).and_then(|a| a.to_str()) else {
        return args;
    };
    let names: Vec<String> = command
        .get_subcommands()
        .flat_map(|c| {
            std::iter::once(c.get_name().to_string()).chain(c.get_all_aliases().map(str::to_string))
        })
        .chain(["help".to_string()])
        .collect();
    if names.iter().any(|n| n == first) {
        return args;
    }
    let one_word = !first.trim().contains(char::is_whitespace);
    if one_word && names.iter().any(|n| near(n, first)) {
        return args;
    }
    let mut args = args;
    args.insert(i, "run".into());
    args
}

/// Whether `a` is at most two edits from `b` (a mistyped command).
fn near(a: &str, b: &str) -> bool {
    nop::config::edit_distance(a, b) <= 2
}

pub(crate) fn exit_code(ok: bool) -> ExitCode {
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(exit::ERROR)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        let os = list.iter().map(std::ffi::OsString::from).collect();
        implicit_run(os)
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
        assert_eq!(args(&["nop", "--version"]), ["nop", "--version"]);
        assert_eq!(args(&["nop"]), ["nop"]);
    }
}
