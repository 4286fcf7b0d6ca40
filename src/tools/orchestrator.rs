//! One tool call from start to record (seed 002 §6.1): find the tool → validate the arguments
//! against its schema (inside [`super::TypedTool`]) → run under a time limit and the run's
//! cancellation → turn the outcome into the tool message the model reads.
//!
//! Success: the output (cut to head and tail beyond `tools.output_max_bytes`, the whole kept in
//! `out-<ts>.log`; a command's output is cut as it arrives, see [`super::output`]). Failure: the details (time, session, tool, arguments, error type, message)
//! go to `error-<ts>.log` and the model gets a short error naming the file. Every call gets a
//! tool message, failed ones included, because both model APIs reject a conversation in which a
//! tool call has no result; the message is marked `isError`.
//!
//! Permission checks (per-agent rules) join this pipeline with the permissions module; the path
//! floor every file tool applies today is in [`super::paths`].

use std::time::{Duration, Instant};

use chrono::Utc;
use serde_json::Value;

use super::{
    NOT_YET_AVAILABLE, Registry, TimeLimit, Tool, ToolContext, ToolEffect, ToolError, ToolOutcome,
    ToolOutput,
};
use crate::hooks::{self, About, HookEvent, HookOutcome};
use crate::permissions::{Access, Action, ApprovalMode, Ask, Decision, Gate, Refusal};
use crate::protocol::{Message, Role, ToolCall};
use crate::session::ErrorRecord;
use crate::tools::ToolErrorKind;

/// Extra time the orchestrator allows past a call's own limit before it gives up on it, so a
/// tool that enforces its limit itself (shell kills its process group) reports first.
const GRACE: Duration = Duration::from_secs(5);

/// How long a cancelled call may take to stop and say what it had done (a command is given 2 s
/// to end after SIGTERM).
const ABORT_GRACE: Duration = Duration::from_secs(3);

/// The outcome of one call.
#[derive(Debug)]
pub struct Executed {
    pub result: Result<ToolOutput, ToolError>,
    pub duration: Duration,
}

/// Runs `call`.
pub async fn execute(registry: &Registry, call: &ToolCall, ctx: &ToolContext) -> Executed {
    ctx.ready.wait().await;
    let started = Instant::now();
    let mut ran = false;
    let result = run(registry, call, ctx, &mut ran).await;
    // As Claude Code's PostToolUse: only after a call whose tool ran, never one a rule, a
    // person or a before-tool hook refused.
    if ran {
        let (ok, output) = match &result {
            Ok(o) => (true, std::borrow::Cow::Borrowed(o.content.as_str())),
            Err(e) => (false, std::borrow::Cow::Owned(e.to_string())),
        };
        let event = HookEvent::AfterTool {
            about: about(ctx),
            tool: &call.name,
            call_id: &call.id,
            arguments: &call.arguments,
            ok,
            output,
        };
        hooks::fire(&ctx.hooks, &ctx.root, &event).await;
    }
    Executed {
        result,
        duration: started.elapsed(),
    }
}

/// Runs `call` through the checks and its tool; `ran` is set once the tool is started.
async fn run(
    registry: &Registry,
    call: &ToolCall,
    ctx: &ToolContext,
    ran: &mut bool,
) -> Result<ToolOutput, ToolError> {
    let Some(tool) = registry.get(&call.name) else {
        if let Some((_, what)) = NOT_YET_AVAILABLE.iter().find(|(n, _)| *n == call.name) {
            return Err(ToolError::model(
                ToolErrorKind::NotAvailable,
                format!(
                    "`{}` ({what}) is not available in this version of nop",
                    call.name
                ),
            ));
        }
        return Err(ToolError::model(
            ToolErrorKind::UnknownTool,
            format!(
                "there is no tool `{}`; the tools are: {}",
                call.name,
                registry.names().join(", ")
            ),
        ));
    };
    // Permissions are read afresh for every call: an edited file applies at once, and a broken
    // one refuses everything (fail closed) rather than falling back to anything.
    let policy = ctx.load_policy().map_err(|e| {
        ToolError::model(
            ToolErrorKind::PermissionDenied,
            format!("the permission files cannot be read, so nothing is allowed: {e}"),
        )
    })?;
    let mut call_ctx = ctx.clone();
    call_ctx.policy = policy;
    let ctx = &call_ctx;
    match ctx.policy.check_tool(&call.name) {
        Decision::Allow { .. } => {}
        Decision::Deny { reason, source } => {
            let rule = source.map(|s| format!(" ({s})")).unwrap_or_default();
            let reason = format!("{reason}{rule}");
            ctx.approver.record_denial(&call.name, &reason);
            return Err(ToolError::model(ToolErrorKind::PermissionDenied, reason));
        }
        Decision::Ask { source } => {
            let reason = format!("calling `{}` needs approval ({source})", call.name);
            approve(tool, ctx, call, &reason).await?;
        }
    }
    if call.name == "shell" && call.arguments.get("outside_sandbox") == Some(&Value::Bool(true)) {
        outside_sandbox(ctx, call).await?;
    }
    match ctx.approver.mode() {
        ApprovalMode::Always if tool.is_mutating() => {
            approve(tool, ctx, call, "--approval always").await?;
        }
        // Shell commands run in plan mode with the repository read-only (`git status`, `ls`,
        // `grep` work; nothing changes).
        ApprovalMode::Plan if tool.is_mutating() && call.name != "shell" => {
            let reason = "plan mode: nothing is changed. Read what you need (shell commands \
                          run, but nothing in the repository can be written), write the plan \
                          with update-plan, present it and stop; the user switches the mode to \
                          carry it out"
                .to_string();
            ctx.approver.record_denial(&call.name, &reason);
            return Err(ToolError::model(ToolErrorKind::Declined, reason));
        }
        _ => {}
    }
    let event = HookEvent::BeforeTool {
        about: about(ctx),
        tool: &call.name,
        call_id: Some(&call.id),
        arguments: std::borrow::Cow::Borrowed(&call.arguments),
        mention: false,
    };
    if let HookOutcome::Blocked(reason) = hooks::fire(&ctx.hooks, &ctx.root, &event).await {
        return Err(ToolError::model(ToolErrorKind::BlockedByHook, reason));
    }
    // Exactly the limit, or for a tool that stops itself, a grace period after it (and the
    // message names the time that really passed).
    let limit = match tool.time_limit(&call.arguments, ctx.timeout) {
        TimeLimit::Cut(limit) => limit,
        TimeLimit::Own(limit) => limit + GRACE,
    };
    *ran = true;
    let running = tool.call(call.arguments.clone(), ctx);
    tokio::pin!(running);
    tokio::select! {
        r = &mut running => r,
        () = tokio::time::sleep(limit) => Err(ToolError::model(
            ToolErrorKind::Timeout,
            format!("`{}` did not finish within {:.1} s", call.name, limit.as_secs_f64()),
        )),
        // A tool that stops itself on cancellation (a command) says what it had done so far;
        // one that does not is dropped after a moment.
        () = ctx.cancel.cancelled() => match tokio::time::timeout(ABORT_GRACE, &mut running).await {
            Ok(Err(aborted @ ToolError::Aborted { .. })) => Err(aborted),
            _ => Err(ToolError::aborted()),
        },
    }
}

/// Whether a `shell` call that asks to run outside the sandbox may: never in plan mode or with
/// approvals off; by a `shell.outside_sandbox` rule; else only by the person, asked on the
/// terminal (an "always" covers the command's prefix for the session). Headless, nothing but a
/// rule lets it (not `--yes`).
async fn outside_sandbox(ctx: &ToolContext, call: &ToolCall) -> Result<(), ToolError> {
    let text = |key: &str| call.arguments.get(key).and_then(Value::as_str);
    let command = text("command").unwrap_or_default();
    let refuse = |reason: String| {
        ctx.approver.record_denial(&call.name, &reason);
        Err(ToolError::model(ToolErrorKind::PermissionDenied, reason))
    };
    if ctx.sandbox.mode == crate::config::SandboxMode::Off {
        return Ok(()); // nothing is confined anyway
    }
    match ctx.approver.mode() {
        ApprovalMode::Plan => {
            return refuse("plan mode never runs a command outside the sandbox".to_string());
        }
        ApprovalMode::Never => {
            return refuse(
                "approvals are off (--approval never): nothing runs outside the sandbox"
                    .to_string(),
            );
        }
        _ => {}
    }
    if let Some(rule) = ctx
        .sandbox
        .outside_sandbox
        .iter()
        .find(|p| crate::permissions::command_matches(p, command))
    {
        tracing::info!(op = "approval", result = "approved", tool = %call.name, detail = command, rule = %rule, "outside the sandbox by shell.outside_sandbox");
        return Ok(());
    }
    if !ctx.approver.has_person() {
        return refuse(format!(
            "`{command}` may not run outside the sandbox here: no one to ask in a headless run, \
             and no `shell.outside_sandbox` pattern matches it (the user allows one with \
             `nop config set shell.outside_sandbox '[\"PATTERN\"]' --user`). Do without it, \
             or say what the user should run"
        ));
    }
    let reason = format!(
        "run outside the sandbox, with your rights: {}",
        text("justification").unwrap_or("(no reason given)")
    );
    let ask = Ask {
        tool: &call.name,
        detail: command,
        reason: &reason,
        gate: Gate::OutsideSandbox,
        action: action(ctx, call),
        root: &ctx.root,
    };
    tokio::select! {
        answer = ask_approval(ctx, ask, &call.arguments, std::future::ready(None)) => answer.map_err(|refusal| refused(ctx, &call.name, refusal)),
        () = ctx.cancel.cancelled() => Err(ToolError::aborted()),
    }
}

/// Asks whether `call` may run, with the change it would make to a file (the tool's preview,
/// worked out only when a person is asked).
async fn approve(
    tool: &dyn Tool,
    ctx: &ToolContext,
    call: &ToolCall,
    reason: &str,
) -> Result<(), ToolError> {
    let detail = match call
        .arguments
        .get("command")
        .or_else(|| call.arguments.get("path"))
    {
        Some(Value::String(s)) => s.clone(),
        _ => call.arguments.to_string(),
    };
    let ask = Ask {
        tool: &call.name,
        detail: &detail,
        reason,
        gate: Gate::Call,
        action: action(ctx, call),
        root: &ctx.root,
    };
    let preview = tool.preview(&call.arguments, ctx);
    // Ctrl-C ends the wait for an answer at once.
    tokio::select! {
        answer = ask_approval(ctx, ask, &call.arguments, preview) => answer.map_err(|refusal| refused(ctx, &call.name, refusal)),
        () = ctx.cancel.cancelled() => Err(ToolError::aborted()),
    }
}

/// Asks for approval of `ask` (a call of `ask.tool` with `arguments`): first the
/// `permission-request` hooks, which may answer for the person; then, when a person is to be
/// asked, the `notification` hooks are told; then the approver. `Err` when refused.
pub async fn ask_approval(
    ctx: &ToolContext,
    ask: Ask<'_>,
    arguments: &Value,
    preview: impl std::future::Future<Output = Option<crate::protocol::events::FileChange>>,
) -> Result<(), Refusal> {
    if ctx.approver.would_ask(&ask) {
        let event = HookEvent::PermissionRequest {
            about: about(ctx),
            tool: ask.tool,
            arguments,
            detail: ask.detail,
            reason: ask.reason,
        };
        match hooks::fire(&ctx.hooks, &ctx.root, &event).await {
            HookOutcome::Allowed => {
                tracing::info!(
                    op = "approval",
                    result = "approved",
                    tool = ask.tool,
                    detail = ask.detail,
                    "approved by a permission-request hook: {}",
                    ask.reason
                );
                return Ok(());
            }
            HookOutcome::Blocked(why) => {
                return Err(Refusal::rule(format!(
                    "{}; a permission-request hook refused it: {why}",
                    ask.reason
                )));
            }
            HookOutcome::Continue | HookOutcome::Context(_) => {}
        }
        if ctx.approver.has_person() {
            let message = format!(
                "nop needs your permission to use {}: {}",
                ask.tool, ask.detail
            );
            let event = HookEvent::Notification {
                about: about(ctx),
                kind: "approval",
                message: message.into(),
            };
            hooks::fire(&ctx.hooks, &ctx.root, &event).await;
        }
    }
    ctx.approver.approve(ask, preview).await
}

/// The failure of a call refused at its question: `Declined` when it was the person's answer.
pub fn refused(ctx: &ToolContext, tool: &str, refusal: Refusal) -> ToolError {
    ctx.approver.record_denial(tool, &refusal.reason);
    let kind = if refusal.declined {
        ToolErrorKind::Declined
    } else {
        ToolErrorKind::PermissionDenied
    };
    ToolError::model(kind, refusal.reason)
}

/// What `call` would do, which decides what an "always" answer covers: a built-in tool's command
/// or file, every call of any other tool. A built-in call whose subject cannot be read (no
/// `command`, a path that cannot be resolved) is matched only by an identical call.
fn action(ctx: &ToolContext, call: &ToolCall) -> Action {
    let text = |key: &str| call.arguments.get(key).and_then(Value::as_str);
    let file = |access| {
        let path = crate::permissions::resolve(&ctx.root, text("path")?).ok()?;
        Some(Action::File { path, access })
    };
    let subject = match call.name.as_str() {
        "shell" => match (text("command"), call.arguments.get("workdir")) {
            (Some(line), None) => Some(Action::Command {
                line: line.to_string(),
                workdir: None,
            }),
            (Some(line), Some(Value::String(dir))) => Some(Action::Command {
                line: line.to_string(),
                workdir: Some(dir.clone()),
            }),
            _ => None,
        },
        "write-file" | "edit-file" => file(Access::Write),
        "read-file" => file(Access::Read),
        _ => {
            return Action::Tool {
                tool: call.name.clone(),
            };
        }
    };
    subject.unwrap_or_else(|| Action::Call {
        tool: call.name.clone(),
        arguments: call.arguments.to_string(),
    })
}

/// A call as recorded: the tool message for session.json, and what the call did for the front
/// end (`None` for a failed call).
#[derive(Debug)]
pub struct Recorded {
    pub message: Message,
    pub outcome: Option<ToolOutcome>,
}

/// The tool message recording `executed`, with its logs written. `Ok(None)` for a question to
/// the user (its answer becomes the result later); `Err` for a failure that ends the run.
pub fn record(
    ctx: &ToolContext,
    call: &ToolCall,
    executed: Executed,
    output_max_bytes: usize,
) -> Result<Option<Recorded>, ToolError> {
    let now = Utc::now();
    let duration_ms = Some(executed.duration.as_millis() as u64);
    let mut failed = None;
    let mut outcome = None;
    let content = match executed.result {
        Ok(ToolOutput {
            effect: ToolEffect::AskUser(_),
            ..
        }) => return Ok(None),
        Ok(ToolOutput {
            content,
            outcome: mut done,
            ..
        }) => {
            let (content, whole_in) =
                cut(ctx, content, done.whole_in.take(), output_max_bytes, now)?;
            done.whole_in = whole_in;
            outcome = Some(done).filter(|o| *o != ToolOutcome::default());
            content
        }
        Err(fatal) if fatal.is_fatal() => return Err(fatal),
        // The person's choice: no error log, and the model is told plainly.
        Err(ToolError::Model {
            kind: ToolErrorKind::Declined,
            message,
        }) => {
            failed = Some(ToolErrorKind::Declined.as_str().to_string());
            tracing::info!(session = %ctx.session_id, op = "tool", tool = %call.name, result = "declined", "{message}");
            format!("{DECLINED}{message}")
        }
        Err(error) => {
            let (message, name) = log_failure(ctx, call, &error, executed.duration)?;
            failed = Some(error.kind().to_string());
            format!("error ({}): {message}\n[details: {name}]", error.kind())
        }
    };
    let mut message = Message::new(Role::Tool, content, now);
    message.tool_call = Some(call.clone());
    message.duration_ms = duration_ms;
    message.is_error = failed.as_ref().map(|_| true);
    message.error_type = failed;
    Ok(Some(Recorded { message, outcome }))
}

/// How a declined call's result begins (the terminal shows it as the person's choice).
pub const DECLINED: &str = "not run (declined): ";

/// Writes a failed call to a new `error-<ts>.log`; returns the short message and the file name.
pub fn log_failure(
    ctx: &ToolContext,
    call: &ToolCall,
    error: &ToolError,
    duration: Duration,
) -> Result<(String, String), ToolError> {
    let message = match error {
        ToolError::Aborted { output } => {
            let mut message = format!("aborted by user after {:.1} s", duration.as_secs_f64());
            if let Some(output) = output.as_deref().filter(|o| !o.is_empty()) {
                message.push_str("; its output until then:\n");
                message.push_str(output.trim_end());
            }
            message
        }
        other => other.to_string(),
    };
    let log = ctx.store.write_error_log(
        &ctx.session_id,
        &ErrorRecord {
            timestamp: Utc::now(),
            session_id: ctx.session_id.clone(),
            tool: call.name.clone(),
            arguments: call.arguments.clone(),
            error_type: error.kind().to_string(),
            message: message.clone(),
            trace: Some(format!(
                "tool call {} failed after {} ms",
                call.id,
                duration.as_millis()
            )),
        },
    )?;
    tracing::warn!(session = %ctx.session_id, op = "tool", tool = %call.name, result = "error", kind = error.kind(), "{message}");
    // Named from the repository's root, a path one can open (as the output logs are).
    let name = log
        .strip_prefix(&ctx.root)
        .map(|p| p.to_string_lossy().into_owned())
        .or_else(|_| {
            log.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .ok_or(())
        })
        .unwrap_or_default();
    Ok((message, name))
}

/// Keeps head and tail of a long output in the context (and the lines of the middle that say
/// why a command failed) and the whole in `out-<ts>.log`: the log `whole_in` the tool already
/// wrote (a command's output, cut as it arrived), else a new one. Returns the text and the log
/// holding the whole (its whole path), if any.
fn cut(
    ctx: &ToolContext,
    content: String,
    whole_in: Option<String>,
    max: usize,
    now: chrono::DateTime<Utc>,
) -> Result<(String, Option<String>), ToolError> {
    if content.len() <= max {
        return Ok((content, whole_in));
    }
    let path = match whole_in {
        Some(path) => path,
        None => ctx
            .store
            .write_tool_output(&ctx.session_id, now, &content)?
            .to_string_lossy()
            .into_owned(),
    };
    let shown = super::output::shown_path(&ctx.root, std::path::Path::new(&path));
    let mut kept = crate::head_tail::HeadTail::with_capacity(content.len());
    kept.push(content.as_bytes());
    let budget = max.saturating_sub(super::output::MARKER_ROOM + shown.len());
    let text = kept.render(budget, "the result", Some(&shown));
    Ok((text, Some(path)))
}

/// Who a hook event of `ctx`'s call is about.
fn about(ctx: &ToolContext) -> About<'_> {
    About {
        session_id: &ctx.session_id,
        agent: &ctx.agent,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::Store;
    use crate::tools::FileChange;
    use serde_json::json;
    use tokio_util::sync::CancellationToken;

    #[test]
    fn a_directory_swapped_for_a_link_never_gets_directories_created_outside() -> anyhow::Result<()>
    {
        std::fs::create_dir_all("/var/tmp/nop-tests")?;
        let repo = tempfile::tempdir_in("/var/tmp/nop-tests")?;
        let outside = tempfile::tempdir_in("/var/tmp/nop-tests")?;
        let ctx = context(repo.path())?;
        let sub = ctx.root.join("sub");
        let parked = ctx.root.join("parked");
        std::fs::create_dir(&sub)?;
        // A hostile process flips `sub` between a directory and a link pointing outside.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flipper = {
            let (stop, sub, parked) = (stop.clone(), sub.clone(), parked.clone());
            let target = outside.path().to_path_buf();
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let _ = std::fs::rename(&sub, &parked);
                    let _ = std::os::unix::fs::symlink(&target, &sub);
                    std::thread::yield_now();
                    let _ = std::fs::remove_file(&sub);
                    let _ = std::fs::rename(&parked, &sub);
                }
            })
        };
        for i in 0..300 {
            let path = sub.join(format!("d{i}/deeper/file.txt"));
            // Refusals and failures are expected; escapes are not.
            let _ = crate::tools::paths::write_verified(&ctx, &path, b"x");
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = flipper.join();
        let created: Vec<_> = std::fs::read_dir(outside.path())?.flatten().collect();
        assert!(created.is_empty(), "created outside: {created:?}");
        Ok(())
    }

    fn context(dir: &std::path::Path) -> anyhow::Result<ToolContext> {
        let root = std::fs::canonicalize(dir)?;
        let store = Store::new(root.join(".nop/sessions"), Duration::from_secs(5));
        let session = store.create("coder", Utc::now())?;
        crate::workspace::init(&root, false, Utc::now())?;
        Ok(ToolContext {
            policy: crate::permissions::load_policy(&root, "coder")?,
            root,
            session_id: session.session_id,
            store,
            cancel: CancellationToken::new(),
            timeout: Duration::from_secs(10),
            agent: "coder".into(),
            approver: crate::permissions::Approver::headless(ApprovalMode::OnRequest, false),
            sandbox: crate::tools::SandboxSettings {
                mode: crate::config::SandboxMode::Off,
                ..crate::tools::SandboxSettings::from_config(&Default::default())
            },
            ancestors: Vec::new(),
            depth: 0,
            agents: None,
            advisors: false,
            hooks: Default::default(),
            ready: Default::default(),
            output_max_bytes: 30_000,
            events: None,
            outer: Vec::new(),
            run_tools: Default::default(),
        })
    }

    fn call(name: &str, arguments: Value) -> ToolCall {
        ToolCall {
            id: "c1".into(),
            name: name.into(),
            arguments,
            extra: Default::default(),
        }
    }

    #[tokio::test]
    async fn validation_errors_reach_the_model_and_the_error_log() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let ctx = context(dir.path())?;
        let registry = Registry::builtin();
        let c = call("read-file", json!({"paht": "x"}));
        let executed = execute(&registry, &c, &ctx).await;
        let message = record(&ctx, &c, executed, 30_000)?
            .ok_or_else(|| anyhow::anyhow!("no message"))?
            .message;
        assert!(
            message
                .content
                .starts_with("error (InvalidArguments): invalid arguments: unknown field `paht`"),
            "{}",
            message.content
        );
        assert_eq!(message.is_error, Some(true));
        let logs: Vec<_> = std::fs::read_dir(ctx.store.dir(&ctx.session_id))?
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("error-"))
            .collect();
        assert_eq!(logs.len(), 1);
        let record: ErrorRecord = serde_json::from_str(&std::fs::read_to_string(logs[0].path())?)?;
        assert_eq!(
            (record.tool.as_str(), record.error_type.as_str()),
            ("read-file", "InvalidArguments")
        );
        assert_eq!(record.arguments, json!({"paht": "x"}));
        Ok(())
    }

    #[tokio::test]
    async fn long_output_is_cut_with_the_whole_kept() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let ctx = context(dir.path())?;
        let registry = Registry::builtin();
        let c = call("shell", json!({"command": "seq 1 20000"}));
        let executed = execute(&registry, &c, &ctx).await;
        let recorded =
            record(&ctx, &c, executed, 2000)?.ok_or_else(|| anyhow::anyhow!("no message"))?;
        let outcome = recorded
            .outcome
            .ok_or_else(|| anyhow::anyhow!("no outcome"))?;
        assert_eq!(outcome.exit_code, Some(0));
        // The outcome names the log by its whole path, the model by one from the repository.
        let whole_in = outcome.whole_in.clone().unwrap_or_default();
        let log = std::path::Path::new(&whole_in);
        assert!(log.is_absolute() && log.is_file(), "{outcome:?}");
        let shown = log.strip_prefix(&ctx.root)?.to_string_lossy().into_owned();
        assert!(shown.starts_with(".nop/sessions/"), "{shown}");
        let message = recorded.message;
        assert!(message.content.len() < 2300, "{}", message.content.len());
        assert!(
            message
                .content
                .contains(&format!(" omitted; the whole output is in {shown} …]")),
            "{}",
            message.content
        );
        assert!(message.content.contains("\n20000\n"));
        let out: Vec<_> = std::fs::read_dir(ctx.store.dir(&ctx.session_id))?
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("out-"))
            .collect();
        let whole = std::fs::read_to_string(out[0].path())?;
        assert!(whole.contains("\n10000\n"));
        Ok(())
    }

    #[tokio::test]
    async fn a_long_output_cut_short_by_the_time_limit_keeps_what_came_in_its_log()
    -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let ctx = context(dir.path())?;
        let c = call(
            "shell",
            json!({"command": "head -c 100000 /dev/zero | tr '\\0' z; exec sleep 30", "timeout_s": 0.5}),
        );
        let executed = execute(&Registry::builtin(), &c, &ctx).await;
        assert!(
            matches!(&executed.result, Err(e) if e.kind() == "Timeout"),
            "{:?}",
            executed.result
        );
        let out: Vec<_> = std::fs::read_dir(ctx.store.dir(&ctx.session_id))?
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("out-"))
            .collect();
        assert_eq!(out.len(), 1);
        let whole = std::fs::read_to_string(out[0].path())?;
        assert!(whole.starts_with("stdout:\nzzz"));
        let stdout = whole.split("\nstderr:").next().unwrap_or_default();
        assert_eq!(stdout.matches('z').count(), 100_000);
        assert!(
            whole.ends_with("\nstderr:\n(stopped: `head -c 100000 /dev/zero | tr '\\0' z; exec sleep 30` did not finish within 0.5 s and was killed)\n"),
            "{}",
            &whole[whole.len() - 200..]
        );
        Ok(())
    }

    /// A tool that never finishes and declares no `timeout_s`.
    struct Stuck;

    impl Tool for Stuck {
        fn name(&self) -> &str {
            "stuck.wait"
        }
        fn spec(&self) -> crate::providers::ToolSpec {
            crate::providers::ToolSpec {
                name: "stuck.wait".into(),
                description: String::new(),
                parameters: json!({"type": "object", "properties": {}}),
            }
        }
        fn is_mutating(&self) -> bool {
            false
        }
        fn call<'a>(
            &'a self,
            _args: Value,
            _ctx: &'a ToolContext,
        ) -> futures_util::future::BoxFuture<'a, Result<ToolOutput, ToolError>> {
            Box::pin(std::future::pending())
        }
    }

    #[tokio::test]
    async fn a_call_is_cut_at_exactly_the_configured_limit_whatever_its_arguments_say()
    -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let mut ctx = context(dir.path())?;
        ctx.timeout = Duration::from_millis(300);
        let registry = Registry::with(&[std::sync::Arc::new(Stuck) as std::sync::Arc<dyn Tool>]);
        let started = std::time::Instant::now();
        let c = call("stuck.wait", json!({"timeout_s": 100}));
        let executed = execute(&registry, &c, &ctx).await;
        let elapsed = started.elapsed();
        let error = executed
            .result
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            error.contains("`stuck.wait` did not finish within 0.3 s"),
            "{error}"
        );
        assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
        Ok(())
    }

    #[tokio::test]
    async fn shell_timeout_kills_the_process_group() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let ctx = context(dir.path())?;
        let marker = ctx.root.join("survived");
        let c = call(
            "shell",
            json!({"command": format!("(sleep 2; touch {}) & sleep 30", marker.display()), "timeout_s": 0.3}),
        );
        let executed = execute(&Registry::builtin(), &c, &ctx).await;
        assert!(
            matches!(
                &executed.result,
                Err(ToolError::Model {
                    kind: ToolErrorKind::Timeout,
                    ..
                })
            ),
            "{:?}",
            executed.result
        );
        assert!(executed.duration < Duration::from_secs(2));
        // The background child was in the group and died with it.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert!(
            !marker.exists(),
            "a process of the timed-out command survived"
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_preview_is_the_change_the_call_would_make_and_reads_only_what_it_may()
    -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let ctx = context(dir.path())?;
        std::fs::write(ctx.root.join("a.txt"), "one two two\n")?;
        let registry = Registry::builtin();
        let preview = |tool: &str, args: Value| {
            let (registry, ctx) = (&registry, &ctx);
            let tool = tool.to_string();
            async move {
                match registry.get(&tool) {
                    Some(t) => t.preview(&args, ctx).await,
                    None => None,
                }
            }
        };
        let change = |path: &str, before: Option<&str>, after: &str| {
            Some(FileChange {
                path: path.into(),
                before: before.map(Into::into),
                after: after.into(),
            })
        };
        let edit = json!({"path": "a.txt", "old_string": "one", "new_string": "1"});
        assert_eq!(
            preview("edit-file", edit).await,
            change("a.txt", Some("one two two\n"), "1 two two\n")
        );
        let all =
            json!({"path": "a.txt", "old_string": "two", "new_string": "2", "replace_all": true});
        assert_eq!(
            preview("edit-file", all).await,
            change("a.txt", Some("one two two\n"), "one 2 2\n")
        );
        // An edit that would fail has no preview, and nothing was changed.
        for failing in [
            json!({"path": "a.txt", "old_string": "two", "new_string": "2"}),
            json!({"path": "a.txt", "old_string": "six", "new_string": "6"}),
            json!({"path": "a.txt", "old_string": "", "new_string": "6"}),
            json!({"path": "missing.txt", "old_string": "a", "new_string": "b"}),
            json!({"path": "a.txt", "old": "a"}),
        ] {
            assert_eq!(
                preview("edit-file", failing.clone()).await,
                None,
                "{failing}"
            );
        }
        assert_eq!(
            std::fs::read_to_string(ctx.root.join("a.txt"))?,
            "one two two\n"
        );
        let write = json!({"path": "sub/new.txt", "content": "new\n"});
        assert_eq!(
            preview("write-file", write).await,
            change("sub/new.txt", None, "new\n")
        );
        assert!(!ctx.root.join("sub").exists());
        // A file the rules deny reading is not read for the preview.
        let denied = ".nop/.permissions/agent-default.yml";
        let write = json!({"path": denied, "content": "x"});
        assert_eq!(
            preview("write-file", write).await,
            change(denied, None, "x")
        );
        // Nor is one over the limit of a diff.
        std::fs::write(ctx.root.join("big.txt"), "a".repeat(1 << 21))?;
        let big =
            json!({"path": "big.txt", "old_string": "a", "new_string": "b", "replace_all": true});
        assert_eq!(preview("edit-file", big).await, None);
        assert_eq!(preview("shell", json!({"command": "ls"})).await, None);
        Ok(())
    }

    #[tokio::test]
    async fn edit_file_requires_a_unique_match() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let ctx = context(dir.path())?;
        std::fs::write(ctx.root.join("a.txt"), "one two two\n")?;
        let registry = Registry::builtin();
        let twice = execute(
            &registry,
            &call(
                "edit-file",
                json!({"path": "a.txt", "old_string": "two", "new_string": "2"}),
            ),
            &ctx,
        )
        .await;
        assert!(matches!(
            twice.result,
            Err(ToolError::Model {
                kind: ToolErrorKind::NotUnique,
                ..
            })
        ));
        let once = execute(
            &registry,
            &call(
                "edit-file",
                json!({"path": "a.txt", "old_string": "one", "new_string": "1"}),
            ),
            &ctx,
        )
        .await;
        assert!(once.result.is_ok());
        assert_eq!(
            std::fs::read_to_string(ctx.root.join("a.txt"))?,
            "1 two two\n"
        );
        let outside = execute(
            &registry,
            &call(
                "write-file",
                json!({"path": "../../../../etc/nop-escape.txt", "content": "x"}),
            ),
            &ctx,
        )
        .await;
        assert!(matches!(
            outside.result,
            Err(ToolError::Model {
                kind: ToolErrorKind::PermissionDenied,
                ..
            })
        ));
        Ok(())
    }
}
