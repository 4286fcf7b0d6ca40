//! The command line: the binary's own module and the only one that prints; everything it does
//! goes through the library. This file dispatches: the clap types are in `args.rs`, what a command
//! starts from (workspace, configuration, logging, store) is resolved once in `context.rs`, and
//! each command or family of commands has its file.

mod agents;
mod anchors;
mod args;
mod chat;
mod checkpoints;
mod commands;
mod config;
mod context;
mod editor;
mod follow;
mod init;
mod instructions;
mod interactive;
mod keys;
mod memory;
mod menu;
mod output;
pub use output::json::failed as failed_result;
pub use term::style::say;
mod permissions;
mod permissions_import;
mod picker;
mod render;
mod run;
mod sandbox;
mod sessions;
mod setup;
mod short_forms;
mod signals;
mod slash;
mod start;
mod term;
mod transcript;
mod travel;
mod trust;

pub use args::{
    AccessArg, AgentsCommand, Cli, Command, CommandsCommand, ConfigCommand, MemoryCommand,
    OutputFormat, PermissionsCommand, PluginsCommand, RunArgs, SessionsCommand, SkillsCommand,
};
pub use short_forms::implicit_run;

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
    /// `--goal`: the run ended with the session's goal not met (its turns or time ran out, or it
    /// could not be checked); the session can be continued.
    pub const GOAL_NOT_MET: u8 = 6;
    /// Stopped by Ctrl-C / SIGTERM.
    pub const CANCELLED: u8 = 130;
    /// What nop printed had no reader any more (`nop sessions list | head`): the status of a
    /// process that SIGPIPE ended, said nothing.
    pub const CLOSED_PIPE: u8 = 141;
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
        let ctx = trusted(inv.open()?, true)?;
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
            let user_file = user_file.as_deref() == Some(args::USER_FILE);
            config::set(&inv, &key, &value, user_file, &mut out)
        }
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "nop", &mut out);
            Ok(ExitCode::SUCCESS)
        }
        command => {
            let ask = asks_trust(&command);
            dispatch(command, &trusted(inv.open()?, ask)?, &mut out)
        }
    }
}

/// Whether `command` runs the agent for a person at a terminal (not headless): the start of
/// such a run shows what of the repository is not trusted and asks once.
fn asks_trust(command: &Command) -> bool {
    match command {
        Command::Run(args) => !args.print && args.output_format == OutputFormat::Text,
        Command::Resume { output_format, .. } => *output_format == OutputFormat::Text,
        Command::Chat { .. } => true,
        _ => false,
    }
}

/// `ctx`, opened again when the user trusted something at the question (`ask`): what it
/// resolved (widening settings, hooks) depends on it.
fn trusted(ctx: Context, ask: bool) -> Result<Context> {
    if ask && trust::ask(&ctx)? {
        return ctx.into_invocation().open();
    }
    Ok(ctx)
}

/// Runs a command that works in the repository, with its context.
fn dispatch(command: Command, ctx: &Context, out: &mut impl Write) -> Result<ExitCode> {
    match command {
        Command::Run(args) => start::run_command(ctx, args),
        Command::Exec(mut args) => {
            args.print = true;
            start::run_command(ctx, args)
        }
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
        Command::Trust { yes, revoke, json } => {
            trust::command(ctx, &ctx.ws, yes, revoke.as_deref(), json, out)
        }
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
            turn,
            force,
            json,
        } => checkpoints::undo(ctx, session, turn, force, json, out),
        Command::Rewind {
            session,
            to,
            turn,
            files,
            conversation,
            both: _,
            force,
            json,
        } => {
            let to = match (to, turn) {
                (_, Some(turn)) => checkpoints::RewindTo::Turn(turn),
                (Some(snapshot), None) => checkpoints::RewindTo::Snapshot(snapshot),
                (None, None) => return Err(anyhow::anyhow!("--to SNAPSHOT or --turn N")),
            };
            checkpoints::rewind(ctx, &session, to, (files, conversation), force, json, out)
        }
        Command::Permissions(command) => permissions::permissions(ctx, command, out),
        Command::Instructions { agent, json } => instructions::list(ctx, &agent, json, out),
        Command::Plugins(PluginsCommand::List { json }) => agents::plugins(ctx, json, out),
        Command::Agents(AgentsCommand::List { json }) => agents::agents(ctx, json, out),
        Command::Skills(SkillsCommand::List { json }) => agents::skills(ctx, json, out),
        Command::Commands(CommandsCommand::List { json }) => commands::list(ctx, json, out),
        // Run by `run` before a context is opened.
        Command::Init { .. }
        | Command::Config(ConfigCommand::Set { .. })
        | Command::Completions { .. } => Ok(ExitCode::from(exit::USAGE)),
    }
}

pub(crate) fn exit_code(ok: bool) -> ExitCode {
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(exit::ERROR)
    }
}
