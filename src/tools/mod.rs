//! Tools: the [`Tool`] trait, typed arguments whose JSON schema the model reads, the registry,
//! and the orchestrator that runs one call (validate → time-limit → run → record).

mod ask_user;
mod call_agent;
mod compact;
pub mod confine;
mod edit_file;
pub mod git_layer;
mod list_files;
mod load_skill;
pub mod orchestrator;
pub mod output;
pub mod paths;
mod read_file;
mod search_files;
mod search_memory;
pub(crate) mod shell;
mod snapshot;
mod update_plan;
mod write_file;

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use futures_util::future::BoxFuture;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::providers::ToolSpec;
use crate::session::Store;

/// What a tool needs from the run it serves.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The repository root, canonical.
    pub root: PathBuf,
    pub session_id: String,
    pub store: Store,
    /// Cancelled when the user stops the run; a tool stops at once and cleans up.
    pub cancel: CancellationToken,
    /// The default time limit of a call.
    pub timeout: Duration,
    /// The agent whose permissions apply.
    pub agent: String,
    /// The agent's permissions, read afresh for every call by the orchestrator.
    pub policy: crate::permissions::Policy,
    pub approver: crate::permissions::Approver,
    pub sandbox: SandboxSettings,
    /// The agents that called this one, nearest first (empty for the top-level run): their
    /// permissions narrow this agent's.
    pub ancestors: Vec<String>,
    /// 0 for the top-level run, 1 for an agent it called, …
    pub depth: u32,
    /// Runs other agents (`call-agent`, `compact`); `None` where that is not available.
    pub agents: Option<std::sync::Arc<dyn AgentCaller>>,
    /// Whether advisors (retry, compression) are consulted in this run; off inside advisors.
    pub advisors: bool,
    /// The user's hook commands (`before-tool`, `after-tool`, …).
    pub hooks: crate::config::HooksConfig,
    /// Opens when the run's first file checkpoint is recorded: no tool runs before it, so the
    /// checkpoint holds the files as the run found them. The checkpoint starts as the first
    /// model request goes out (the turn loop says so here), so it never delays that request.
    pub ready: Ready,
    /// How much of a result the model reads (`tools.output_max_bytes`); a command's output
    /// beyond it is cut as it arrives, the whole kept in an `out-<ts>.log`.
    pub output_max_bytes: usize,
    /// Where a command's live tail goes (`Event::ToolOutput`), the run's event sink; `None`
    /// where nobody watches.
    pub events: Option<tokio::sync::mpsc::UnboundedSender<crate::protocol::events::Event>>,
    /// Callers that work in another root (an isolated subagent's caller, in the repository
    /// beside its worktree), nearest first: their rules confine this agent wherever they reach.
    pub outer: Vec<Outer>,
    /// The run's own narrowing of the tools (`--allowedTools`, `--disallowedTools`), for its
    /// subagents too.
    pub run_tools: crate::config::RunTools,
}

/// A caller in another root: its root, its agent and that agent's callers, whose rules are read
/// afresh with this agent's for every call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outer {
    pub root: PathBuf,
    pub agent: String,
    pub ancestors: Vec<String>,
}

/// A gate tool calls wait at ([`ToolContext::ready`]); open unless made with [`Ready::new`].
/// It also carries word that the run's first model request is going out ([`Ready::requested`]),
/// which is what starts the work the gate waits for.
#[derive(Debug, Clone, Default)]
pub struct Ready {
    gate: Option<tokio::sync::watch::Receiver<bool>>,
    requested: Option<std::sync::Arc<tokio::sync::watch::Sender<bool>>>,
}

/// The other ends of a [`Ready`].
#[derive(Debug)]
pub struct Gate {
    /// Opens the gate (sending `true`, or dropped).
    pub open: tokio::sync::watch::Sender<bool>,
    /// Becomes `true` as the first model request goes out (or when every [`Ready`] is gone).
    pub requested: tokio::sync::watch::Receiver<bool>,
}

impl Ready {
    /// A closed gate, and its other ends.
    pub fn new() -> (Gate, Ready) {
        let (open, gate) = tokio::sync::watch::channel(false);
        let (told, requested) = tokio::sync::watch::channel(false);
        (
            Gate { open, requested },
            Ready {
                gate: Some(gate),
                requested: Some(std::sync::Arc::new(told)),
            },
        )
    }

    /// Says that the run's first model request is going out.
    pub fn requested(&self) {
        if let Some(told) = &self.requested {
            told.send_replace(true);
        }
    }

    /// Waits until the gate is open.
    pub async fn wait(&self) {
        if let Some(rx) = &self.gate {
            let mut rx = rx.clone();
            // A dropped sender opens the gate too: a failed checkpoint never blocks the run.
            let _ = rx.wait_for(|open| *open).await;
        }
    }
}

/// Runs agents on behalf of tools; implemented by the runtime's engine, so tools need not know
/// the agent loop.
pub trait AgentCaller: Send + Sync {
    /// Runs `agent` as a subagent of the session in `ctx` with `input`; returns its answer.
    fn call_agent<'a>(
        &'a self,
        ctx: &'a ToolContext,
        agent: &'a str,
        input: String,
        timeout: Option<Duration>,
    ) -> BoxFuture<'a, Result<String, ToolError>>;

    /// Compacts the session in `ctx` now; returns what was done.
    fn compact<'a>(&'a self, ctx: &'a ToolContext) -> BoxFuture<'a, Result<String, ToolError>>;

    /// The agents the agent of `ctx` may call now: enabled, not itself, not one of nop's own
    /// (the advisors, summarizer, splitter), not denied by its rules, within
    /// `subagents.max_depth`. Empty: `call-agent` is not offered.
    fn callable(&self, ctx: &ToolContext) -> Vec<String>;
}

impl std::fmt::Debug for dyn AgentCaller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AgentCaller")
    }
}

/// How `shell` commands are confined, and the environment they get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxSettings {
    pub mode: crate::config::SandboxMode,
    pub network: crate::config::NetworkMode,
    pub namespaces: crate::config::NamespacesMode,
    /// Variables removed from the environment (globs over names, any case)…
    pub env_exclude: Vec<String>,
    /// … except these.
    pub env_keep: Vec<String>,
    /// The variables the provider may read its key from: always removed.
    pub key_vars: Vec<String>,
    /// Caches written through the session's layers (`shell.caches`, `~/` unexpanded).
    pub caches: Vec<String>,
    /// Megabytes of cache layers a session keeps (`shell.caches_max_mb`).
    pub caches_max_mb: u64,
    /// Commands that may run outside the sandbox without asking (`shell.outside_sandbox`).
    pub outside_sandbox: Vec<String>,
}

impl SandboxSettings {
    pub fn from_config(config: &crate::config::Config) -> SandboxSettings {
        let key_vars = crate::config::provider_key_vars(&config.provider);
        SandboxSettings {
            mode: config.sandbox,
            network: config.shell.network,
            namespaces: config.shell.namespaces,
            env_exclude: config.shell.env_exclude.clone(),
            env_keep: config.shell.env_keep.clone(),
            caches: config.shell.caches.clone(),
            caches_max_mb: config.shell.caches_max_mb,
            outside_sandbox: config.shell.outside_sandbox.clone(),
            key_vars,
        }
    }
}

impl ToolContext {
    pub fn nop_dir(&self) -> PathBuf {
        self.root.join(crate::workspace::NOP_DIR)
    }

    /// The agent's rules as its files say now: its own and its callers' in this root, and those
    /// of its callers in other roots wherever they reach.
    pub fn load_policy(
        &self,
    ) -> Result<crate::permissions::Policy, crate::permissions::PermissionError> {
        let mut policy = crate::permissions::load_chain(&self.root, &self.agent, &self.ancestors)?;
        for outer in &self.outer {
            let theirs =
                crate::permissions::load_chain(&outer.root, &outer.agent, &outer.ancestors)?;
            policy = policy.confined_by(&theirs);
        }
        Ok(policy.with_run_tools(&self.run_tools))
    }
}

/// A successful call's result.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    /// What the model reads.
    pub content: String,
    pub effect: ToolEffect,
    /// What the call did, for front ends. Its `whole_in` names the session's `out-<ts>.log`
    /// already holding the whole output when `content` was cut by the tool itself (a command's
    /// output as it arrived); the orchestrator sets it when it cuts.
    pub outcome: ToolOutcome,
}

impl ToolOutput {
    pub fn text(content: impl Into<String>) -> ToolOutput {
        ToolOutput {
            content: content.into(),
            effect: ToolEffect::None,
            outcome: ToolOutcome::default(),
        }
    }
}

/// What a call means for the run beyond its text.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolEffect {
    None,
    /// The agent asked the user a question: the run waits for input.
    AskUser(String),
    /// A file was written: what it held before and after, for a front end's diff.
    FileChanged(FileChange),
    /// The session's plan is now this.
    PlanChanged(crate::protocol::Plan),
}

pub use crate::protocol::events::{FileChange, ToolOutcome};
pub use crate::protocol::tool_error::ToolErrorKind;

/// The two kinds of tool failure.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// The model should see this and decide what to do (bad arguments, a missing file, a
    /// refused path, a timeout).
    #[error("{message}")]
    Model {
        kind: ToolErrorKind,
        message: String,
    },
    /// The user stopped the run while the call was going; `output` is what it had produced
    /// until then (a command's output so far, head and tail), for the model and the user.
    #[error("aborted by user")]
    Aborted { output: Option<String> },
    /// The run cannot go on because something under it failed (the session's lock or files
    /// are lost, the disk is full, a blocking task died). Shown as `context: error`, or as the
    /// error alone when there is no context.
    #[error("{}", with_context(.context.as_deref(), .error))]
    Fatal {
        /// What was being done ("recording a tool call failed").
        context: Option<String>,
        /// The error underneath, kept whole for whoever handles it (downcast it to a
        /// `SessionError`, say). Not the `source()`: the text above already includes it, and
        /// `{:#}` (how `main` prints a failed run) would say it twice more.
        error: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The run cannot go on, for a reason that is no other error's (`.nop/` is missing).
    #[error("{0}")]
    FatalMessage(String),
}

fn with_context(context: Option<&str>, error: &dyn std::fmt::Display) -> String {
    match context {
        Some(context) => format!("{context}: {error}"),
        None => error.to_string(),
    }
}

impl ToolError {
    pub fn model(kind: ToolErrorKind, message: impl Into<String>) -> ToolError {
        ToolError::Model {
            kind,
            message: message.into(),
        }
    }

    /// For `map_err`: a fatal error, shown as `context: error`.
    pub fn fatal<E>(context: impl Into<String>) -> impl FnOnce(E) -> ToolError
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        let context = context.into();
        move |error| ToolError::Fatal {
            context: Some(context),
            error: Box::new(error),
        }
    }

    /// A fatal error shown as `error` alone.
    pub fn fatal_from(error: impl std::error::Error + Send + Sync + 'static) -> ToolError {
        ToolError::Fatal {
            context: None,
            error: Box::new(error),
        }
    }

    /// The user stopped the call, with nothing to show of it.
    pub fn aborted() -> ToolError {
        ToolError::Aborted { output: None }
    }

    /// Whether the run must end (either fatal variant).
    pub fn is_fatal(&self) -> bool {
        matches!(self, ToolError::Fatal { .. } | ToolError::FatalMessage(_))
    }

    /// The error type recorded in error-<ts>.log.
    pub fn kind(&self) -> &'static str {
        match self {
            ToolError::Model { kind, .. } => kind.as_str(),
            ToolError::Aborted { .. } => "Aborted",
            ToolError::Fatal { .. } | ToolError::FatalMessage(_) => "Fatal",
        }
    }
}

impl From<crate::session::SessionError> for ToolError {
    fn from(e: crate::session::SessionError) -> ToolError {
        ToolError::fatal_from(e)
    }
}

/// A tool as the orchestrator sees it.
pub trait Tool: Send + Sync {
    /// The tool's name; plugin tools are `<plugin>.<tool>`.
    fn name(&self) -> &str;
    fn spec(&self) -> ToolSpec;
    /// Whether a call can change the user's files or run programs: such calls are asked about
    /// under `--approval always`.
    fn is_mutating(&self) -> bool;
    /// Whether calls of this tool the model makes in one turn may run at the same time (reads,
    /// searches, `call-agent`): they change no file and ask no one. Others run in order.
    fn runs_in_parallel(&self) -> bool {
        false
    }
    /// Whether the tool has anything to act on here (agents to call, skills to load, memory to
    /// search): one that has not is not offered to the model, whose calls of it would only
    /// fail. Asked before every request; it reads little.
    fn has_work(&self, _ctx: &ToolContext) -> bool {
        true
    }
    fn call<'a>(
        &'a self,
        args: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>>;
    /// How long a call with `args` may run, given the configured limit (`tools.timeout_s`).
    /// Only nop's configuration sets it: an argument the tool does not declare as its own (a
    /// `timeout_s` the model adds) changes nothing.
    fn time_limit(&self, _args: &Value, configured: Duration) -> TimeLimit {
        TimeLimit::Cut(configured)
    }
    /// The change a call would make to a file, shown to the person asked to approve it
    /// (`write-file`, `edit-file`); `None` for other tools, or when it cannot be worked out.
    /// It changes nothing, asks no one, and reads only what the rules do not deny.
    fn preview<'a>(
        &'a self,
        _args: &'a Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Option<FileChange>> {
        Box::pin(std::future::ready(None))
    }
}

/// Who ends a call that runs too long.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TimeLimit {
    /// The orchestrator drops the call at exactly this limit.
    Cut(Duration),
    /// The tool stops itself at this limit and reports what it had done (`shell` kills its
    /// process group); the orchestrator gives up on it only a grace period later.
    Own(Duration),
}

/// A tool with a typed argument struct: its doc comments become the schema the model reads, and
/// arguments are validated by deserialising into it (`deny_unknown_fields`) before it runs.
pub trait TypedTool: Send + Sync + 'static {
    type Args: DeserializeOwned + JsonSchema + Send;
    const NAME: &'static str;
    const DESCRIPTION: &'static str;
    /// See [`Tool::is_mutating`].
    const MUTATING: bool;
    /// See [`Tool::runs_in_parallel`].
    const PARALLEL: bool = false;

    fn run(
        &self,
        args: Self::Args,
        ctx: &ToolContext,
    ) -> impl Future<Output = Result<ToolOutput, ToolError>> + Send;

    /// See [`Tool::time_limit`] (`args` as the model sent them).
    fn time_limit(_args: &Value, configured: Duration) -> TimeLimit {
        TimeLimit::Cut(configured)
    }

    /// See [`Tool::has_work`].
    fn has_work(_ctx: &ToolContext) -> bool {
        true
    }

    /// See [`Tool::preview`].
    fn preview(
        &self,
        _args: &Self::Args,
        _ctx: &ToolContext,
    ) -> impl Future<Output = Option<FileChange>> + Send {
        std::future::ready(None)
    }
}

impl<T: TypedTool> Tool for T {
    fn name(&self) -> &str {
        T::NAME
    }

    fn is_mutating(&self) -> bool {
        T::MUTATING
    }

    fn runs_in_parallel(&self) -> bool {
        T::PARALLEL
    }

    fn has_work(&self, ctx: &ToolContext) -> bool {
        T::has_work(ctx)
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: T::NAME.to_string(),
            description: T::DESCRIPTION.to_string(),
            parameters: schema_of::<T::Args>(),
        }
    }

    fn call<'a>(
        &'a self,
        args: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let args = parse_args::<T::Args>(args)?;
            self.run(args, ctx).await
        })
    }

    fn time_limit(&self, args: &Value, configured: Duration) -> TimeLimit {
        T::time_limit(args, configured)
    }

    fn preview<'a>(
        &'a self,
        args: &'a Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Option<FileChange>> {
        Box::pin(async move {
            let args = parse_args::<T::Args>(args.clone()).ok()?;
            TypedTool::preview(self, &args, ctx).await
        })
    }
}

/// Validates arguments by deserialising them; the error tells the model what to fix.
fn parse_args<A: DeserializeOwned>(args: Value) -> Result<A, ToolError> {
    let args = match args {
        Value::String(raw) => {
            return Err(ToolError::model(
                ToolErrorKind::InvalidArguments,
                format!(
                    "the arguments are not valid JSON: {}",
                    raw.chars().take(500).collect::<String>()
                ),
            ));
        }
        Value::Null => Value::Object(Default::default()),
        other => other,
    };
    serde_json::from_value(args).map_err(|e| {
        ToolError::model(
            ToolErrorKind::InvalidArguments,
            format!("invalid arguments: {e}"),
        )
    })
}

/// The JSON schema of `A`, as an object schema without the meta keys some servers reject.
pub fn schema_of<A: JsonSchema + 'static>() -> Value {
    // Made once per process: a run's first request, every subagent and every drive ask again.
    static MADE: std::sync::OnceLock<
        std::sync::Mutex<std::collections::HashMap<std::any::TypeId, Value>>,
    > = std::sync::OnceLock::new();
    let made = MADE.get_or_init(Default::default);
    let key = std::any::TypeId::of::<A>();
    if let Some(schema) = made.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return schema.clone();
    }
    let mut schema = serde_json::to_value(schemars::schema_for!(A)).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut schema {
        map.remove("$schema");
        map.remove("title");
        map.entry("properties")
            .or_insert_with(|| Value::Object(Default::default()));
    }
    made.lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, schema.clone());
    schema
}

/// Tools whose names are reserved for features this build does not have yet. A model that
/// calls one is told so; they are never offered.
pub const NOT_YET_AVAILABLE: &[(&str, &str)] = &[];

/// A path for a note: relative to the repository root when inside it.
pub fn shown(root: &std::path::Path, path: &std::path::Path) -> String {
    match path.strip_prefix(root) {
        Ok(relative) if relative.as_os_str().is_empty() => ".".to_string(),
        Ok(relative) => relative.display().to_string(),
        Err(_) => path.display().to_string(),
    }
}

/// The tools of a run.
pub struct Registry {
    tools: Vec<std::sync::Arc<dyn Tool>>,
}

impl Registry {
    /// Every built-in tool.
    pub fn builtin() -> Registry {
        Registry {
            tools: vec![
                std::sync::Arc::new(shell::Shell),
                std::sync::Arc::new(read_file::ReadFile),
                std::sync::Arc::new(write_file::WriteFile),
                std::sync::Arc::new(edit_file::EditFile),
                std::sync::Arc::new(list_files::ListFiles),
                std::sync::Arc::new(search_files::SearchFiles),
                std::sync::Arc::new(update_plan::UpdatePlan),
                std::sync::Arc::new(ask_user::AskUser),
                std::sync::Arc::new(snapshot::Snapshot),
                std::sync::Arc::new(load_skill::LoadSkill),
                std::sync::Arc::new(call_agent::CallAgent),
                std::sync::Arc::new(compact::Compact),
                std::sync::Arc::new(search_memory::SearchMemory),
            ],
        }
    }

    /// The built-in tools and `extra` ones (plugins); a plugin tool never shadows a built-in.
    pub fn with(extra: &[std::sync::Arc<dyn Tool>]) -> Registry {
        let mut registry = Registry::builtin();
        for tool in extra {
            if registry.get(tool.name()).is_none() {
                registry.tools.push(std::sync::Arc::clone(tool));
            }
        }
        registry
    }

    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools.iter().map(|t| t.spec()).collect()
    }

    /// The specs of the tools that have something to act on in `ctx` ([`Tool::has_work`]).
    pub fn specs_with_work(&self, ctx: &ToolContext) -> Vec<ToolSpec> {
        self.tools
            .iter()
            .filter(|t| t.has_work(ctx))
            .map(|t| t.spec())
            .collect()
    }

    pub fn get(&self, name: &str) -> Option<&dyn Tool> {
        self.tools
            .iter()
            .find(|t| t.name() == name)
            .map(|t| t.as_ref())
    }

    pub fn names(&self) -> Vec<&str> {
        self.tools.iter().map(|t| t.name()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error under a fatal error, as `&dyn Error`.
    fn underneath(fatal: &ToolError) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        match fatal {
            ToolError::Fatal { error, .. } => Some(error.as_ref()),
            _ => None,
        }
    }

    #[test]
    fn a_fatal_error_shows_its_context_and_keeps_the_error_underneath() {
        use std::error::Error as _;
        let disk_full = || std::io::Error::other("no space left on device");

        let with_context = ToolError::fatal("writing a file failed")(disk_full());
        assert_eq!(
            with_context.to_string(),
            "writing a file failed: no space left on device"
        );
        let io = underneath(&with_context).and_then(|e| e.downcast_ref::<std::io::Error>());
        assert_eq!(
            io.map(ToString::to_string).as_deref(),
            Some("no space left on device")
        );
        // Already in the text: a chain printer (`{:#}`) must not repeat it.
        assert!(with_context.source().is_none());
        assert_eq!(with_context.kind(), "Fatal");

        let alone = ToolError::fatal_from(disk_full());
        assert_eq!(alone.to_string(), "no space left on device");
        assert!(underneath(&alone).is_some_and(|e| e.is::<std::io::Error>()));
        assert!(alone.source().is_none());

        let message = ToolError::FatalMessage("cannot read /proc/self/fd".into());
        assert_eq!(message.to_string(), "cannot read /proc/self/fd");
        assert!(underneath(&message).is_none() && message.source().is_none());
        assert!(message.is_fatal() && alone.is_fatal() && with_context.is_fatal());
        assert_eq!(message.kind(), "Fatal");
    }

    #[test]
    fn a_session_error_becomes_a_fatal_error_shown_as_it_is() {
        let lost = crate::session::SessionError::NotFound("abc".into());
        let shown = lost.to_string();
        let fatal = ToolError::from(lost);
        assert_eq!(fatal.to_string(), shown);
        let session =
            underneath(&fatal).and_then(|e| e.downcast_ref::<crate::session::SessionError>());
        assert!(matches!(session, Some(crate::session::SessionError::NotFound(id)) if id == "abc"));
    }

    /// `main` prints a failed run with `{:#}`: a fatal tool error is said once.
    #[test]
    fn a_failed_run_prints_a_fatal_error_once() {
        let lost = crate::session::SessionError::Io {
            path: "/r/session.json".into(),
            source: std::io::Error::other("disk full"),
        };
        let run: anyhow::Error = crate::agent::RunError::from(ToolError::from(lost)).into();
        assert_eq!(format!("{run:#}"), "/r/session.json: disk full");
        let failed = ToolError::fatal("recording a tool call failed")(std::io::Error::other("E"));
        let run: anyhow::Error = crate::agent::RunError::from(failed).into();
        assert_eq!(format!("{run:#}"), "recording a tool call failed: E");
    }

    #[test]
    fn every_tool_offers_an_object_schema_with_descriptions() {
        let registry = Registry::builtin();
        for spec in registry.specs() {
            assert_eq!(spec.parameters["type"], "object", "{}", spec.name);
            assert!(!spec.description.is_empty(), "{}", spec.name);
            if let Some(props) = spec.parameters["properties"].as_object() {
                for (name, prop) in props {
                    assert!(
                        prop.get("description").is_some()
                            || prop.get("$ref").is_some()
                            || prop.get("items").is_some(),
                        "{}.{name} has no description",
                        spec.name
                    );
                }
            }
        }
        assert_eq!(registry.names().len(), 13);
    }
}
