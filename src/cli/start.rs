//! The commands that run the agent or act on a running session: `nop run`, `nop resume`, the
//! interactive session, `nop chat`, `nop send`, `nop stop`, `nop compact`; each builds its
//! `Runtime` from the command's [`Context`] and hands it to the renderers of `run.rs` and
//! `chat.rs`.

use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::{Result, bail};

use nop::permissions::{ApprovalMode, Approver};

use super::args::{EventShape, PriorityArg};
use super::context::Context;
use super::sessions::last_session;
use super::{OutputFormat, RunArgs, chat, exit, interactive, run};

/// A model nop cannot ask (no key for a remote server, a bad base URL) is said before an
/// interactive session opens, with the fix, not at its first prompt.
fn model_reachable(ctx: &Context) -> Result<()> {
    if super::setup::has_model(ctx) {
        nop::providers::Provider::from_config(&ctx.config().provider, &ctx.env)?;
    }
    Ok(())
}

/// `nop` alone on a terminal: an interactive session.
pub fn interactive(ctx: &Context) -> Result<ExitCode> {
    model_reachable(ctx)?;
    let (approver, prompts) = run::approver(ApprovalMode::OnRequest, false, true);
    let runtime = ctx
        .runtime(ctx.config().clone(), approver)
        .with_cwd(&ctx.cwd);
    interactive::interactive(
        runtime,
        prompts,
        &ctx.ws,
        None,
        None,
        None,
        super::commands::user_dirs(&ctx.env),
    )
}

/// `nop resume`: a run of the session picked here: ID, a picker on a terminal, else the latest
/// (with a PROMPT; without one and without a terminal, the list to pick from is printed).
pub fn resume(
    ctx: &Context,
    id: Option<String>,
    prompt: Option<String>,
    model: Option<String>,
    output_format: OutputFormat,
) -> Result<ExitCode> {
    let interactive = prompt.is_none() && std::io::stdin().is_terminal();
    let session = match id {
        Some(id) => Some(ctx.store.resolve(&id)?),
        None if interactive => match interactive::pick_session(&ctx.store)? {
            Some(id) => Some(id),
            None => return Ok(ExitCode::SUCCESS),
        },
        None if prompt.is_none() => {
            let recent = interactive::resumable(&ctx.store);
            if recent.is_empty() {
                eprintln!("no sessions to resume yet");
            }
            for (_, line) in recent {
                println!("{line}");
            }
            eprintln!("resume one with: nop resume ID \"PROMPT\"");
            return Ok(ExitCode::SUCCESS);
        }
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
        approval: None,
        events: None,
        json: false,
        allowed_tools: Vec::new(),
        disallowed_tools: Vec::new(),
        permission_mode: None,
        verbose: false,
        yes: false,
        print: false,
        emergency: false,
        messages: Vec::new(),
        goal: None,
        until: None,
        prompt,
    };
    run_command(ctx, args)
}

/// `nop chat`.
pub fn chat(ctx: &Context, session: Option<String>, agent: Option<String>) -> Result<ExitCode> {
    let (session, resolved) = ctx.open_session(agent.as_deref(), session.as_deref())?;
    let agent = agent.unwrap_or_else(|| resolved.config.agent.default.clone());
    let approver = Approver::headless(ApprovalMode::Never, false);
    let runtime = ctx.runtime(resolved.config, approver).with_cwd(&ctx.cwd);
    chat::chat(runtime, session.map(|s| s.session_id), &agent)
}

/// `nop send`.
pub fn send(
    ctx: &Context,
    session: &str,
    priority: Option<PriorityArg>,
    output_format: OutputFormat,
    message: String,
) -> Result<ExitCode> {
    let session = ctx.session_json(session)?;
    let resolved = ctx.config_for(None, Some(&session))?;
    let message = match run::read_prompt(Some(message))? {
        Some(m) => m,
        None => bail!("the message is empty"),
    };
    let priority = priority.map_or(resolved.config.queue.default_priority, Into::into);
    let (approver, prompts) = run::approver(ApprovalMode::OnRequest, false, false);
    let runtime = ctx.runtime(resolved.config, approver).with_cwd(&ctx.cwd);
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
pub fn stop(ctx: &Context, session: &str) -> Result<ExitCode> {
    let id = ctx.store.resolve(session)?;
    run::stop(&ctx.store, &id, &ctx.user)
}

/// `nop compact`.
pub fn compact(ctx: &Context, id: &str) -> Result<ExitCode> {
    let session = ctx.session_json(id)?;
    let resolved = ctx.config_for(None, Some(&session))?;
    let approver = Approver::headless(ApprovalMode::Never, false);
    run::compact(ctx.runtime(resolved.config, approver), &session.session_id)
}

/// `nop run` (and `nop resume`, which is a run of the session it picks).
pub fn run_command(ctx: &Context, mut args: RunArgs) -> Result<ExitCode> {
    if args.continue_last {
        match last_session(&ctx.store) {
            Some(id) => args.session = Some(id),
            None => bail!("no session to continue in {}", ctx.ws.root.display()),
        }
    }
    let (session, resolved) = ctx.open_session(args.agent.as_deref(), args.session.as_deref())?;
    let session = session.map(|s| s.session_id);
    if !args.messages.is_empty() {
        let agent = args
            .agent
            .clone()
            .unwrap_or_else(|| resolved.config.agent.default.clone());
        // A chat runs no tools: nothing is asked.
        let approver = Approver::headless(ApprovalMode::Never, false);
        let runtime = ctx.runtime(resolved.config, approver).with_cwd(&ctx.cwd);
        return chat::batch(runtime, session, &agent, args.messages, args.output_format);
    }
    args.output_format = match (args.json, args.events) {
        (true, _) | (_, Some(EventShape::Codex)) => OutputFormat::CodexJson,
        (false, Some(EventShape::Claude)) => OutputFormat::ClaudeStream,
        _ => args.output_format,
    };
    if args.print {
        if args.output_format == OutputFormat::Text {
            args.output_format = OutputFormat::Plain;
        }
        // Print mode never opens the interactive session: no PROMPT reads standard input.
        if args.prompt.is_none() && !std::io::stdin().is_terminal() {
            args.prompt = Some("-".to_string());
        }
    }
    let prompt = match run::read_prompt(args.prompt.take()) {
        // `/review src/x.rs`: a custom slash command's text is the prompt.
        Ok(p) => p.map(|p| super::commands::expand_headless(ctx, p)),
        Err(e) => {
            eprintln!("error: {e:#}");
            return Ok(ExitCode::from(exit::USAGE));
        }
    };
    let on_terminal = std::io::stdin().is_terminal() && !args.print;
    let anchors = match anchored(&args) {
        Ok(anchors) => anchors,
        Err(e) => {
            eprintln!("error: {e:#}");
            return Ok(ExitCode::from(exit::USAGE));
        }
    };
    let mode = match (args.approval, anchors.mode) {
        (Some(arg), _) => arg.into(),
        (None, Some(mode)) => mode,
        (None, None) => resolved.config.approval.into(),
    };
    if args.verbose {
        super::transcript::Renderer::verbose_from_now();
    }
    let (approver, prompts) = run::approver(mode, args.yes, on_terminal);
    let priority = resolved.config.queue.default_priority;
    let mut runtime = ctx.runtime(resolved.config, approver).with_cwd(&ctx.cwd);
    if let Some(model) = &args.model {
        runtime = runtime.with_model(model);
    }
    if let Some(usd) = args.max_budget_usd {
        runtime = runtime.with_budget(usd);
    }
    runtime = runtime.with_run_tools(anchors.tools);
    start_run(ctx, runtime, prompts, args, prompt, session, priority)
}

/// What the anchors' flags of a run say: its approval mode (`--permission-mode`) and its
/// narrowing of the tools (`--allowedTools`, `--disallowedTools`; what nop cannot honour as
/// written is a warning).
struct Anchored {
    mode: Option<ApprovalMode>,
    tools: nop::config::RunTools,
}

fn anchored(args: &RunArgs) -> Result<Anchored> {
    let mode = args
        .permission_mode
        .as_deref()
        .map(super::anchors::permission_mode)
        .transpose()?;
    let (tools, warnings) = super::anchors::run_tools(&args.allowed_tools, &args.disallowed_tools)?;
    for warning in warnings {
        eprintln!("warning: {warning}");
    }
    Ok(Anchored { mode, tools })
}

/// A run with its runtime ready: a message delivered to the session, a new headless run, or an
/// interactive session when there is no prompt on a terminal.
fn start_run(
    ctx: &Context,
    runtime: nop::agent::Runtime,
    prompts: run::Prompts,
    args: RunArgs,
    prompt: Option<String>,
    session: Option<String>,
    priority: nop::queue::QueuePriority,
) -> Result<ExitCode> {
    let goal = args
        .goal
        .clone()
        .map(|objective| nop::agent::goal::GoalSpec {
            objective,
            until: args.until.clone(),
        });
    // A goal alone is a task too.
    let prompt = match (&goal, prompt) {
        (Some(_), None) => Some("Work toward the goal below.".to_string()),
        (_, prompt) => prompt,
    };
    // On an existing session the goal is set now and told with the input; a new session gets
    // it when it is made.
    let (prompt, goal) = match (goal, &session, prompt) {
        (Some(spec), Some(id), Some(input)) => {
            let set = nop::agent::goal::set(&ctx.store, id, spec)?;
            (
                Some(format!("{input}\n\n{}", nop::agent::goal::announce(&set))),
                None,
            )
        }
        (goal, _, prompt) => (prompt, goal),
    };
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
                goal,
            };
            run::headless(runtime, prompts, request, args.output_format)
        }
        (None, session)
            if std::io::stdin().is_terminal() && args.output_format == OutputFormat::Text =>
        {
            model_reachable(ctx)?;
            interactive::interactive(
                runtime,
                prompts,
                &ctx.ws,
                session,
                args.agent,
                args.max_turns,
                super::commands::user_dirs(&ctx.env),
            )
        }
        (None, _) => {
            eprintln!(
                "error: no PROMPT given (pass the task as an argument, or `-` to read it from standard input)"
            );
            Ok(ExitCode::from(exit::USAGE))
        }
    }
}
