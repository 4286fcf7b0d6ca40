//! The commands that run the agent or act on a running session: `nop run`, `nop resume`,
//! `nop chat`, `nop send`, `nop stop`, `nop compact`; each builds its `Runtime` and hands it to
//! the renderers of `run.rs` and `chat.rs`.

use std::io::IsTerminal;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Result, bail};

use nop::permissions::ApprovalMode;

use super::args::PriorityArg;
use super::context::{Opened, Outside, open, start_logging, workspace_at};
use super::sessions::last_session;
use super::{ApprovalArg, OutputFormat, RunArgs, chat, exit, run};

/// `nop resume`: a run of the session picked here: ID, a picker on a terminal, else the latest.
#[allow(clippy::too_many_arguments)]
pub fn resume(
    id: Option<String>,
    prompt: Option<String>,
    model: Option<String>,
    output_format: OutputFormat,
    cwd: &Path,
    outside: Outside,
    cli_settings: Vec<(String, String, String)>,
    user: String,
) -> Result<ExitCode> {
    let interactive = prompt.is_none() && std::io::stdin().is_terminal();
    let ws = workspace_at(cwd, &outside.env)?;
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
    run_command(args, cwd, outside, cli_settings, user)
}

/// `nop chat`.
pub fn chat(
    session: Option<String>,
    agent: Option<String>,
    cwd: &Path,
    outside: Outside,
    cli_settings: Vec<(String, String, String)>,
    user: String,
) -> Result<ExitCode> {
    let Opened {
        ws,
        session,
        resolved,
    } = open(
        cwd,
        &outside.env,
        cli_settings,
        agent.as_deref(),
        session.as_deref(),
    )?;
    let agent = agent.unwrap_or_else(|| resolved.config.agent.default.clone());
    let approver = nop::permissions::Approver::headless(ApprovalMode::Never, false);
    let runtime =
        nop::agent::Runtime::new(ws.clone(), resolved.config, outside.env, approver, user)
            .with_cwd(cwd);
    chat::chat(runtime, session.map(|s| s.session_id), &agent)
}

/// `nop send`.
#[allow(clippy::too_many_arguments)]
pub fn send(
    session: String,
    priority: Option<PriorityArg>,
    output_format: OutputFormat,
    message: String,
    cwd: &Path,
    outside: Outside,
    cli_settings: Vec<(String, String, String)>,
    user: String,
) -> Result<ExitCode> {
    let Opened {
        ws,
        session,
        resolved,
    } = open(cwd, &outside.env, cli_settings, None, Some(&session))?;
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
            .with_cwd(cwd);
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

/// `nop stop`.
pub fn stop(
    session: String,
    cwd: &Path,
    outside: Outside,
    cli_settings: Vec<(String, String, String)>,
    user: String,
) -> Result<ExitCode> {
    let ws = workspace_at(cwd, &outside.env)?;
    let base = ws.config(None, None, outside.env.clone(), cli_settings)?;
    start_logging(&ws, &base);
    let store = ws.store(&base.config);
    let id = store.resolve(&session)?;
    run::stop(&store, &id, &user)
}

/// `nop compact`.
pub fn compact(
    id: String,
    cwd: &Path,
    outside: Outside,
    cli_settings: Vec<(String, String, String)>,
    user: String,
) -> Result<ExitCode> {
    let Opened {
        ws,
        session,
        resolved,
    } = open(cwd, &outside.env, cli_settings, None, Some(&id))?;
    let Some(session) = session else {
        bail!("no session given");
    };
    let approver = nop::permissions::Approver::headless(ApprovalMode::Never, false);
    let runtime =
        nop::agent::Runtime::new(ws.clone(), resolved.config, outside.env, approver, user);
    run::compact(runtime, &session.session_id)
}

/// `nop run` (and `nop resume`, which is a run of the session it picks).
pub fn run_command(
    mut args: RunArgs,
    cwd: &Path,
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
