//! The command line: clap definitions, dispatch, and text/JSON renderers. The only module that
//! prints; everything it does goes through the library.

mod args;
mod chat;
mod config;
mod keys;
mod memory;
mod render;
mod run;
mod sandbox;
mod slash;
mod term;
mod transcript;

pub use args::{
    AccessArg, AgentsCommand, ApprovalArg, Cli, Command, ConfigCommand, MemoryCommand,
    PermissionsCommand, PluginsCommand, RunArgs, SessionsCommand,
};
pub use run::OutputFormat;

use std::collections::BTreeMap;
use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, anyhow, bail};
use chrono::Utc;
use clap::CommandFactory;

use nop::config::{LogLevel, Resolved};
use nop::permissions::ApprovalMode;
use nop::protocol::{Message, Role};
use nop::session::Store;
use nop::workspace::{self, InitAction, Workspace};

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

/// Everything a command needs from the outside world, passed in so the engine never reads it.
pub struct Outside {
    pub cwd: PathBuf,
    pub env: BTreeMap<String, String>,
}

/// Runs a parsed command line; errors are printed by the caller.
pub fn run(cli: Cli, outside: Outside) -> Result<ExitCode> {
    let cwd = match &cli.directory {
        Some(dir) => outside.cwd.join(dir),
        None => outside.cwd.clone(),
    };
    let cli_settings = cli_settings(&cli)?;
    let user = cli
        .user
        .clone()
        .or_else(|| outside.env.get("NOP_USER").cloned())
        .or_else(|| outside.env.get("USER").cloned())
        .or_else(|| outside.env.get("LOGNAME").cloned())
        .filter(|u| !u.trim().is_empty())
        .unwrap_or_else(|| "user".to_string());
    // Not locked: `nop run` writes from the renderer task on another thread.
    let mut out = std::io::stdout();

    let Some(command) = cli.command else {
        if !std::io::stdin().is_terminal() || !std::io::stdout().is_terminal() {
            let mut err = std::io::stderr();
            let _ = Cli::command().write_help(&mut err);
            return Ok(ExitCode::from(exit::USAGE));
        }
        let ws = workspace_at(&cwd, &outside.env)?;
        let resolved = ws.config(None, None, outside.env.clone(), cli_settings)?;
        start_logging(&ws, &resolved);
        let (approver, prompts) = run::approver(ApprovalMode::OnRequest, false, true);
        let runtime =
            nop::agent::Runtime::new(ws.clone(), resolved.config, outside.env, approver, user)
                .with_cwd(&cwd);
        return run::interactive(runtime, prompts, &ws, None, None, None);
    };
    match command {
        Command::Run(args) => run_command(args, &cwd, outside, cli_settings, user),
        Command::Resume {
            id,
            prompt,
            model,
            output_format,
        } => {
            // A run of the session picked here: ID, a picker on a terminal, else the latest.
            let interactive = prompt.is_none() && std::io::stdin().is_terminal();
            let ws = workspace_at(&cwd, &outside.env)?;
            let base = ws.config(None, None, outside.env.clone(), cli_settings.clone())?;
            let store = ws.store(&base.config);
            let session = match id {
                Some(id) => Some(store.resolve(&id)?),
                None if interactive => match run::pick_session(&store)? {
                    Some(id) => Some(id),
                    None => return Ok(ExitCode::SUCCESS),
                },
                None => None,
            };
            let args = RunArgs {
                continue_last: session.is_none(),
                session,
                model,
                agent: None,
                max_turns: None,
                max_budget_usd: None,
                output_format,
                approval: ApprovalArg::OnRequest,
                yes: false,
                emergency: false,
                messages: Vec::new(),
                prompt,
            };
            run_command(args, &cwd, outside, cli_settings, user)
        }
        Command::Chat { session, agent } => {
            let Opened {
                ws,
                session,
                resolved,
            } = open(
                &cwd,
                &outside.env,
                cli_settings,
                agent.as_deref(),
                session.as_deref(),
            )?;
            let agent = agent.unwrap_or_else(|| resolved.config.agent.default.clone());
            let approver = nop::permissions::Approver::headless(ApprovalMode::Never, false);
            let runtime =
                nop::agent::Runtime::new(ws.clone(), resolved.config, outside.env, approver, user)
                    .with_cwd(&cwd);
            chat::chat(runtime, session.map(|s| s.session_id), &agent)
        }
        Command::Send {
            session,
            priority,
            output_format,
            message,
        } => {
            let Opened {
                ws,
                session,
                resolved,
            } = open(&cwd, &outside.env, cli_settings, None, Some(&session))?;
            let Some(session) = session else {
                bail!("no session given");
            };
            let message = match run::read_prompt(Some(message))? {
                Some(m) => m,
                None => bail!("the message is empty"),
            };
            let priority = priority.map_or(resolved.config.queue.default_priority, Into::into);
            let (approver, prompts) = run::approver(ApprovalMode::OnRequest, false, false);
            let runtime =
                nop::agent::Runtime::new(ws.clone(), resolved.config, outside.env, approver, user)
                    .with_cwd(&cwd);
            run::deliver(
                runtime,
                prompts,
                &session.session_id,
                message,
                priority,
                output_format,
                None,
                false,
            )
        }
        Command::Stop { session } => {
            let ws = workspace_at(&cwd, &outside.env)?;
            let base = ws.config(None, None, outside.env.clone(), cli_settings)?;
            start_logging(&ws, &base);
            let store = ws.store(&base.config);
            let id = store.resolve(&session)?;
            run::stop(&store, &id, &user)
        }
        Command::Memory(command) => {
            let ws = workspace_at(&cwd, &outside.env)?;
            let resolved = ws.config(None, None, outside.env.clone(), cli_settings)?;
            start_logging(&ws, &resolved);
            memory::memory(&ws, resolved.config, outside.env, &user, command)
        }
        Command::Compact { id } => {
            let Opened {
                ws,
                session,
                resolved,
            } = open(&cwd, &outside.env, cli_settings, None, Some(&id))?;
            let Some(session) = session else {
                bail!("no session given");
            };
            let approver = nop::permissions::Approver::headless(ApprovalMode::Never, false);
            let runtime =
                nop::agent::Runtime::new(ws.clone(), resolved.config, outside.env, approver, user);
            run::compact(runtime, &session.session_id)
        }
        Command::Init { force } => {
            let home = home_of(&outside.env);
            let root = Workspace::discover(&cwd, home)?.root;
            let report = workspace::init(&root, force, Utc::now())?;
            let ws = Workspace::discover(&cwd, home)?;
            // The root is canonical; so are the paths shown relative to the working directory.
            let cwd = std::fs::canonicalize(&cwd).unwrap_or(cwd);
            let resolved = ws.config(None, None, outside.env, cli_settings)?;
            start_logging(&ws, &resolved);
            for (path, action) in &report {
                let shown = path.strip_prefix(&cwd).unwrap_or(path).display();
                match action {
                    InitAction::Created => writeln!(out, "created  {shown}")?,
                    InitAction::Kept => writeln!(out, "kept     {shown}")?,
                    InitAction::Replaced { backup } => writeln!(
                        out,
                        "replaced {shown} (your version: {})",
                        backup.strip_prefix(&cwd).unwrap_or(backup).display()
                    )?,
                }
            }
            let kept_differing = report.iter().any(|(_, a)| *a == InitAction::Kept) && !force;
            tracing::info!(op = "init", result = "ok", root = %ws.root.display(), "initialised .nop/");
            if kept_differing {
                writeln!(
                    out,
                    "existing files were kept; `nop init --force` replaces them and keeps backups"
                )?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "nop", &mut out);
            Ok(ExitCode::SUCCESS)
        }
        Command::Config(ConfigCommand::Show {
            json,
            session,
            agent,
        }) => {
            let ws = workspace_at(&cwd, &outside.env)?;
            let base = ws.config(None, None, outside.env.clone(), cli_settings.clone())?;
            start_logging(&ws, &base);
            let session = match session {
                Some(prefix) => {
                    let store = ws.store(&base.config);
                    let id = store.resolve(&prefix)?;
                    Some(store.read_session(&id)?)
                }
                None => None,
            };
            if let Some(name) = &agent
                && ws.agents()?.get(name).is_none()
            {
                bail!("no agent `{name}` in {}", ws.agents_path().display());
            }
            let resolved = ws.config(
                agent.as_deref(),
                session.as_ref(),
                outside.env,
                cli_settings,
            )?;
            render::config(&mut out, &resolved, json)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Config(ConfigCommand::Set {
            key,
            value,
            user_file,
        }) => {
            let user_file = user_file.as_deref() == Some(config::USER_FILE);
            config::set(
                &cwd,
                &outside.env,
                cli_settings,
                &key,
                &value,
                user_file,
                &mut out,
            )
        }
        Command::Sandbox(command) => {
            let ws = workspace_at(&cwd, &outside.env)?;
            let agent = match &command {
                sandbox::SandboxCommand::Check { agent, .. }
                | sandbox::SandboxCommand::Run { agent, .. } => agent.clone(),
            };
            if let Some(name) = &agent
                && ws.agents()?.get(name).is_none()
            {
                bail!("no agent `{name}` in {}", ws.agents_path().display());
            }
            let resolved = ws.config(agent.as_deref(), None, outside.env, cli_settings)?;
            start_logging(&ws, &resolved);
            sandbox::sandbox(&ws, &resolved.config, &cwd, command, &mut out)
        }
        command => {
            let ws = workspace_at(&cwd, &outside.env)?;
            let resolved = ws.config(None, None, outside.env, cli_settings)?;
            start_logging(&ws, &resolved);
            let store = ws.store(&resolved.config);
            run_session_command(
                command,
                &cwd,
                &ws,
                &resolved.config,
                &store,
                &user,
                &mut out,
            )
        }
    }
}

fn run_session_command(
    command: Command,
    cwd: &std::path::Path,
    ws: &Workspace,
    config: &nop::config::Config,
    store: &Store,
    user: &str,
    out: &mut impl Write,
) -> Result<ExitCode> {
    match command {
        Command::Sessions(SessionsCommand::List { json, all, limit }) => {
            let (mut summaries, failed) = store.summaries()?;
            summaries.retain(|s| all || !s.called);
            summaries.sort_by_key(|s| std::cmp::Reverse(s.updated_at));
            summaries.truncate(limit.unwrap_or(usize::MAX));
            render::session_list(out, &summaries, json)?;
            for e in &failed {
                eprintln!("error: {e}");
            }
            Ok(exit_code(failed.is_empty()))
        }
        Command::Sessions(SessionsCommand::Show { id, json }) => {
            let id = store.resolve(&id)?;
            let state = store.read(&id)?;
            let snapshots = store.snapshots(&id)?;
            render::session_show(out, &state, &snapshots, &store.dir(&id), json)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Sessions(SessionsCommand::Check { id, json }) => {
            let ids = match id {
                Some(prefix) => vec![store.resolve(&prefix)?],
                None => store.ids()?,
            };
            let mut all_ok = true;
            let mut report = Vec::new();
            for id in ids {
                let problems = store.check(&id)?;
                all_ok &= problems.is_empty();
                report.push((id, problems));
            }
            render::check(out, &report, json)?;
            Ok(exit_code(all_ok))
        }
        Command::Sessions(SessionsCommand::New { agent }) => {
            ws.agents()?
                .for_new_session(&agent, &ws.agents_path())
                .map_err(|e| anyhow!(e))?;
            let session = store.create(&agent, Utc::now())?;
            tracing::info!(session = %session.session_id, agent = %agent, op = "create", result = "ok", "session created");
            writeln!(out, "{}", session.session_id)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Sessions(SessionsCommand::Append(args)) => {
            let id = store.resolve(&args.id)?;
            let role: Role = args
                .role
                .parse()
                .map_err(|e: String| anyhow!("--role: {e}"))?;
            let text = match args.text.as_deref() {
                None | Some("-") => {
                    let mut text = String::new();
                    std::io::stdin()
                        .read_to_string(&mut text)
                        .context("reading the message from standard input")?;
                    text
                }
                Some(text) => text.to_string(),
            };
            let now = Utc::now();
            let count = store.append(&id, vec![Message::new(role, text, now)], now)?;
            tracing::debug!(session = %id, op = "append", result = "ok", messages = count, "message appended");
            writeln!(out, "{count}")?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Sessions(SessionsCommand::Delete { id, force, json }) => {
            let id = store.resolve(&id)?;
            let deleted = match store.delete(&id, force) {
                Ok(deleted) => deleted,
                Err(e) => {
                    if let nop::session::SessionError::Referenced { references, .. } = &e {
                        tracing::info!(session = %id, op = "delete", result = "refused", referenced_by = references.len(), "session not deleted: other sessions refer to it");
                        if json {
                            render::print_json(
                                out,
                                &serde_json::json!({"id": id, "deleted": false, "referencedBy": references}),
                            )?;
                        }
                    }
                    return Err(e.into());
                }
            };
            tracing::info!(session = %id, op = "delete", result = "ok", forced = force, referenced_by = deleted.referenced_by.len(), "session deleted");
            let coordinator = nop::queue::priority::Coordinator::new(
                &ws.nop_dir(),
                user,
                std::time::Duration::from_secs_f64(config.queue.idle_timeout_s),
            );
            if let Err(e) = coordinator.forget(&id) {
                tracing::warn!(session = %id, error = %e, "deleted session left in the priority stack");
                eprintln!(
                    "warning: session {id} was deleted but may still count as active in the priority stack: {e}"
                );
            }
            if let Some((path, e)) = &deleted.leftover {
                eprintln!(
                    "warning: session {id} is deleted, but {} could not be removed ({e}); the next write of any nop process removes it",
                    path.display()
                );
            }
            if json {
                render::print_json(
                    out,
                    &serde_json::json!({"id": id, "deleted": true, "referencedBy": deleted.referenced_by}),
                )?;
            } else {
                writeln!(out, "deleted {id}")?;
                for r in &deleted.referenced_by {
                    writeln!(out, "  still referring to it: {r}")?;
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Plan { id, json } => {
            let id = store.resolve(&id)?;
            let state = store.read(&id)?;
            render::plan(out, &state.plan, json)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Log { id } => {
            let id = store.resolve(&id)?;
            let path = store.session_log(&id);
            match std::fs::read(&path) {
                Ok(bytes) => out.write_all(&bytes)?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e).with_context(|| path.display().to_string()),
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Snapshot { id } => {
            let id = store.resolve(&id)?;
            let snapshot = store.snapshot(&id, Utc::now())?;
            tracing::info!(session = %id, op = "snapshot", result = "ok", snapshot = %snapshot, "snapshot taken");
            writeln!(out, "{snapshot}")?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Fork {
            id,
            snapshot,
            worktree: Some(path),
            json,
        } => {
            let id = store.resolve(&id)?;
            let checkpoints = ws.checkpoints(config).ok_or_else(|| {
                anyhow!("--worktree needs file checkpoints, which are off (checkpoints.enabled)")
            })?;
            // A relative PATH is taken from where the command was given (`-C` included).
            let path = path.map(|p| cwd.join(p));
            let fork = nop::checkpoint::fork_worktree(
                &checkpoints,
                store,
                &id,
                snapshot.as_deref(),
                path.as_deref(),
                Utc::now(),
            )?;
            tracing::info!(session = %id, op = "fork", result = "ok", child = %fork.child.session_id, snapshot = %fork.snapshot_id, worktree = %fork.path.display(), "forked into a worktree");
            render::worktree_fork(out, &fork, json)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Undo {
            session,
            force,
            json,
        } => {
            let id = match session {
                Some(prefix) => store.resolve(&prefix)?,
                None => last_session(store)
                    .ok_or_else(|| anyhow!("no session to undo in {}", ws.root.display()))?,
            };
            let checkpoints = ws
                .checkpoints(config)
                .ok_or_else(|| anyhow!("file checkpoints are off (checkpoints.enabled)"))?;
            let undo = nop::checkpoint::undo_turn(store, &checkpoints, &id, force, Utc::now())?;
            render::undo(out, &undo, json)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Rewind {
            session,
            to,
            files,
            conversation,
            both: _,
            force,
            json,
        } => {
            use nop::checkpoint::RewindMode;
            let id = store.resolve(&session)?;
            let mode = match (files, conversation) {
                (true, _) => RewindMode::Files,
                (_, true) => RewindMode::Conversation,
                _ => RewindMode::Both,
            };
            let checkpoints = ws.checkpoints(config);
            let rewind = nop::checkpoint::rewind(
                store,
                checkpoints.as_ref(),
                &id,
                &to,
                mode,
                force,
                Utc::now(),
            )?;
            render::rewind(out, &rewind, json)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Fork {
            id,
            snapshot,
            worktree: None,
            json: _,
        } => {
            let id = store.resolve(&id)?;
            let child = store.fork(&id, snapshot.as_deref(), Utc::now())?;
            let snap = child
                .parent_session
                .as_ref()
                .map(|p| p.snapshot_id.clone())
                .unwrap_or_default();
            tracing::info!(session = %id, op = "fork", result = "ok", child = %child.session_id, snapshot = %snap, "forked");
            tracing::info!(session = %child.session_id, agent = %child.agent, op = "fork", result = "ok", parent = %id, snapshot = %snap, "created by fork");
            writeln!(out, "{}", child.session_id)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Permissions(command) => permissions(ws, config, command, out),
        Command::Plugins(PluginsCommand::List { json }) => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            let (_, statuses) = rt.block_on(nop::plugins::load_all(
                &ws.root,
                &nop::tools::SandboxSettings::from_config(config),
            ));
            if json {
                writeln!(out, "{}", serde_json::to_string_pretty(&statuses)?)?;
            } else if statuses.is_empty() {
                writeln!(
                    out,
                    "no plugins (add one under .nop/plugins/<name>/config.yml)"
                )?;
            } else {
                for s in &statuses {
                    writeln!(out, "{:<16} {}", s.name, s.state)?;
                    for t in &s.tools {
                        writeln!(out, "  {t}")?;
                    }
                }
            }
            Ok(exit_code(statuses.iter().all(|s| s.state == "loaded")))
        }
        Command::Agents(AgentsCommand::List { json }) => {
            let agents = ws.agents()?;
            let minute = {
                use chrono::Timelike;
                let now = chrono::Local::now();
                now.hour() * 60 + now.minute()
            };
            render::agents(out, &agents, user, minute, json)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Sessions(SessionsCommand::Stack { json }) => {
            let coordinator = nop::queue::priority::Coordinator::new(
                &ws.nop_dir(),
                user,
                std::time::Duration::from_secs_f64(config.queue.idle_timeout_s),
            );
            let (stack, events) = coordinator.stack()?;
            render::stack(out, user, &stack, &events, json)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Init { .. }
        | Command::Completions { .. }
        | Command::Config(_)
        | Command::Run(_)
        | Command::Compact { .. }
        | Command::Send { .. }
        | Command::Stop { .. }
        | Command::Memory(_)
        | Command::Sandbox(_)
        | Command::Chat { .. }
        | Command::Resume { .. } => Ok(ExitCode::from(exit::USAGE)),
    }
}

/// `nop run` (and `nop resume`, which is a run of the session it picks).
fn run_command(
    mut args: RunArgs,
    cwd: &std::path::Path,
    outside: Outside,
    cli_settings: Vec<(String, String, String)>,
    user: String,
) -> Result<ExitCode> {
    if args.continue_last {
        let ws = workspace_at(cwd, &outside.env)?;
        let base = ws.config(None, None, outside.env.clone(), cli_settings.clone())?;
        match last_session(&ws.store(&base.config)) {
            Some(id) => args.session = Some(id),
            None => bail!("no session to continue in {}", ws.root.display()),
        }
    }
    let Opened {
        ws,
        session,
        resolved,
    } = open(
        cwd,
        &outside.env,
        cli_settings,
        args.agent.as_deref(),
        args.session.as_deref(),
    )?;
    let session = session.map(|s| s.session_id);
    if !args.messages.is_empty() {
        let agent = args
            .agent
            .clone()
            .unwrap_or_else(|| resolved.config.agent.default.clone());
        // A chat runs no tools: nothing is asked.
        let approver = nop::permissions::Approver::headless(ApprovalMode::Never, false);
        let runtime =
            nop::agent::Runtime::new(ws.clone(), resolved.config, outside.env, approver, user)
                .with_cwd(cwd);
        return chat::batch(runtime, session, &agent, args.messages, args.output_format);
    }
    let prompt = match run::read_prompt(args.prompt) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e:#}");
            return Ok(ExitCode::from(exit::USAGE));
        }
    };
    let on_terminal = std::io::stdin().is_terminal();
    let (approver, prompts) = run::approver(args.approval.into(), args.yes, on_terminal);
    let priority = resolved.config.queue.default_priority;
    let mut runtime =
        nop::agent::Runtime::new(ws.clone(), resolved.config, outside.env, approver, user)
            .with_cwd(cwd);
    if let Some(model) = &args.model {
        runtime = runtime.with_model(model);
    }
    if let Some(usd) = args.max_budget_usd {
        runtime = runtime.with_budget(usd);
    }
    match (prompt, session) {
        (Some(input), Some(id)) => run::deliver(
            runtime,
            prompts,
            &id,
            input,
            priority,
            args.output_format,
            args.max_turns,
            args.emergency,
        ),
        (Some(input), None) => {
            let request = nop::agent::RunRequest {
                session: None,
                agent: args.agent,
                input: Some(input),
                max_turns: args.max_turns,
                emergency: args.emergency,
                guard: None,
            };
            run::headless(runtime, prompts, request, args.output_format)
        }
        (None, session)
            if std::io::stdin().is_terminal() && args.output_format == OutputFormat::Text =>
        {
            run::interactive(runtime, prompts, &ws, session, args.agent, args.max_turns)
        }
        (None, _) => {
            eprintln!(
                "error: no PROMPT given (pass the task as an argument, or `-` to read it from standard input)"
            );
            Ok(ExitCode::from(exit::USAGE))
        }
    }
}

/// The most recently used session a person started (not a subagent's or an advisor's).
fn last_session(store: &nop::session::Store) -> Option<String> {
    slash::recent(store, 1).pop().map(|s| s.id)
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

fn permissions(
    ws: &Workspace,
    config: &nop::config::Config,
    command: PermissionsCommand,
    out: &mut impl Write,
) -> Result<ExitCode> {
    use nop::permissions::{Access, Decision, load_policy, validate_all};
    match command {
        PermissionsCommand::Check => {
            let mut ok = true;
            for (path, result) in validate_all(&ws.root) {
                let shown = path
                    .strip_prefix(&ws.root)
                    .unwrap_or(&path)
                    .display()
                    .to_string();
                let shown = if path.exists() {
                    shown
                } else {
                    format!("{shown} (built in: no such file)")
                };
                match result {
                    Ok(()) => writeln!(out, "ok       {shown}")?,
                    Err(e) => {
                        ok = false;
                        writeln!(out, "problem  {e}")?;
                    }
                }
            }
            Ok(exit_code(ok))
        }
        PermissionsCommand::Explain {
            agent,
            within,
            tool,
            path,
            access,
            json,
        } => {
            let mut policy = load_policy(&ws.root, &agent)?;
            if let Some(parent) = &within {
                policy = policy.narrowed_by(&load_policy(&ws.root, parent)?);
            }
            let access = match access {
                AccessArg::Read => Access::Read,
                AccessArg::Write => Access::Write,
            };
            let (subject, resolved, decision) = match (&tool, &path) {
                (Some(tool), _) => (format!("call {tool}"), None, policy.check_tool(tool)),
                (None, Some(path)) => {
                    let (resolved, decision) = policy.check_path(path, access);
                    let verb = if access == Access::Read {
                        "read"
                    } else {
                        "write"
                    };
                    (format!("{verb} {path}"), resolved, decision)
                }
                (None, None) => bail!("give --tool or --path"),
            };
            let shell = match &resolved {
                Some(path) => {
                    let settings = nop::tools::SandboxSettings::from_config(config);
                    Some(sandbox::shell_line(&policy, &settings, path)?)
                }
                None => None,
            };
            if json {
                let value = serde_json::json!({
                    "agent": agent, "within": within, "subject": subject,
                    "resolved": resolved, "decision": decision, "shell": shell,
                });
                writeln!(out, "{}", serde_json::to_string_pretty(&value)?)?;
            } else {
                let who = match &within {
                    Some(parent) => format!("{agent} (called by {parent})"),
                    None => agent.clone(),
                };
                let line = match &decision {
                    Decision::Allow { source } => format!("allow: {who} may {subject} ({source})"),
                    Decision::Ask { source } => {
                        format!("ask: {who} needs approval to {subject} ({source})")
                    }
                    Decision::Deny { reason, source } => format!(
                        "deny: {who} may not {subject}: {reason}{}",
                        source
                            .as_ref()
                            .map(|s| format!(" ({s})"))
                            .unwrap_or_default()
                    ),
                };
                writeln!(out, "{line}")?;
                if let Some(resolved) = resolved {
                    writeln!(out, "path: {}", resolved.display())?;
                }
                if let Some(shell) = shell {
                    writeln!(out, "shell: {shell}")?;
                }
            }
            Ok(exit_code(decision.is_allowed()))
        }
    }
}

pub(crate) fn exit_code(ok: bool) -> ExitCode {
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(exit::ERROR)
    }
}

/// `--set key=value` and `--log-level` as configuration-layer entries.
fn cli_settings(cli: &Cli) -> Result<Vec<(String, String, String)>> {
    let mut settings = Vec::new();
    for item in &cli.set {
        let (key, value) = item
            .split_once('=')
            .ok_or_else(|| anyhow!("--set {item}: expected KEY=VALUE"))?;
        settings.push((
            "--set".to_string(),
            key.trim().to_string(),
            value.to_string(),
        ));
    }
    if let Some(level) = &cli.log_level {
        settings.push((
            "--log-level".to_string(),
            "log.level".to_string(),
            level.clone(),
        ));
    }
    Ok(settings)
}

/// What a command that works on a session (or starts one) needs.
struct Opened {
    ws: Workspace,
    /// The session `session` named, read (its id prefix resolved).
    session: Option<nop::protocol::SessionFile>,
    /// The configuration for the agent (or the session's agent), the session's own settings
    /// included.
    resolved: Resolved,
}

/// HOME as the environment gives it, for finding the repository root.
fn home_of(env: &BTreeMap<String, String>) -> Option<&std::path::Path> {
    env.get("HOME")
        .filter(|h| !h.is_empty())
        .map(std::path::Path::new)
}

/// The repository `cwd` is in (see `Workspace::discover`), with `.nop/` created for sessions and
/// logs if it has none; that is said once, when it happens.
fn workspace_at(cwd: &std::path::Path, env: &BTreeMap<String, String>) -> Result<Workspace> {
    let ws = Workspace::discover(cwd, home_of(env))?;
    if ws.create_nop_dir()? {
        let sessions = ws.sessions_dir();
        let at_cwd = std::fs::canonicalize(cwd).is_ok_and(|c| c == ws.root);
        let shown = if at_cwd {
            sessions.strip_prefix(&ws.root).unwrap_or(&sessions)
        } else {
            &sessions
        };
        eprintln!(
            "nop: using the built-in configuration; sessions go to {} (run `nop init` to customise)",
            shown.display()
        );
    }
    Ok(ws)
}

/// Finds the workspace above `cwd`, starts logging, resolves the session prefix `session`, and
/// the configuration for `agent` and that session (seed 002 §11.2 precedence).
fn open(
    cwd: &std::path::Path,
    env: &std::collections::BTreeMap<String, String>,
    settings: Vec<(String, String, String)>,
    agent: Option<&str>,
    session: Option<&str>,
) -> Result<Opened> {
    let ws = workspace_at(cwd, env)?;
    let base = ws.config(None, None, env.clone(), settings.clone())?;
    start_logging(&ws, &base);
    let store = ws.store(&base.config);
    let session = match session {
        Some(prefix) => Some(store.read_session(&store.resolve(prefix)?)?),
        None => None,
    };
    let resolved = ws.config(agent, session.as_ref(), env.clone(), settings)?;
    Ok(Opened {
        ws,
        session,
        resolved,
    })
}

fn start_logging(ws: &Workspace, resolved: &Resolved) {
    let level: LogLevel = resolved.config.log.level;
    nop::logging::init(Some((&ws.logs_dir(), &ws.sessions_dir())), level);
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
