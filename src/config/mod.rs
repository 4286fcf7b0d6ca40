//! Typed configuration built from layers, keeping where each value came from.
//!
//! Precedence (seed 002 §11.2): command line > environment (`NOP_*`) > session > agent >
//! `.nop/config.yml` > the user's file (`~/.config/nop/config.yml`) > built-in defaults. Every
//! layer is flattened to dotted keys (`session.lock_timeout_s`); an unknown key or a value of the
//! wrong type is an error naming the key, the layer it came from and what the key accepts, and a
//! file error also names its line and column.
//!
//! The user's file is the one file this module reads itself: it is found from the environment
//! the caller passes in (never the process's own), so every caller that resolves the
//! configuration gets it, and a test that gives no `HOME` gets none.

mod agents;
mod edit;
mod file;
mod hooks;
mod keys;
mod layout;
pub mod servers;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use agents::{AgentDef, AgentsFile, Isolation};
pub use edit::{Edit, set_key};
use file::{must_be, parse_file};
pub use file::{read_config_text, user_config_path};
pub use hooks::{
    CLAUDE_EVENTS, ClaudeHook, HookCommand, MatchedHook, claude_hooks, claude_project_files,
    claude_settings_files, pattern as matcher_pattern,
};
pub use keys::{WIDENING, canonical_key, distance as edit_distance, is_secret_key, widens};
pub use servers::McpConfig;

use crate::protocol::TextPos;

/// The effective configuration.
///
/// A section whose keys are all commented out (`log:` alone, as in the shipped config.yml) is
/// null in YAML: it counts as empty.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    #[serde(deserialize_with = "null_is_default")]
    pub log: LogConfig,
    #[serde(deserialize_with = "null_is_default")]
    pub session: SessionConfig,
    #[serde(deserialize_with = "null_is_default")]
    pub provider: ProviderConfig,
    #[serde(deserialize_with = "null_is_default")]
    pub tools: ToolsConfig,
    #[serde(deserialize_with = "null_is_default")]
    pub agent: AgentConfig,
    /// When to ask the person before a tool call (`--approval` overrides it).
    pub approval: ApprovalSetting,
    /// Whether `shell` commands run confined (Landlock) to the agent's file rules.
    pub sandbox: SandboxMode,
    #[serde(deserialize_with = "null_is_default")]
    pub shell: ShellConfig,
    #[serde(deserialize_with = "null_is_default")]
    pub subagents: SubagentsConfig,
    #[serde(deserialize_with = "null_is_default")]
    pub advisors: AdvisorsConfig,
    #[serde(deserialize_with = "null_is_default")]
    pub consistency: ConsistencyConfig,
    #[serde(deserialize_with = "null_is_default")]
    pub compaction: CompactionConfig,
    #[serde(deserialize_with = "null_is_default")]
    pub queue: QueueConfig,
    #[serde(deserialize_with = "null_is_default")]
    pub memory: MemoryConfig,
    #[serde(deserialize_with = "null_is_default")]
    pub chat: ChatConfig,
    #[serde(deserialize_with = "null_is_default")]
    pub hooks: HooksConfig,
    #[serde(deserialize_with = "null_is_default")]
    pub checkpoints: CheckpointsConfig,
    /// Prices per model, over the built-in table (`providers::pricing`): model name → USD per
    /// million tokens. One value for the whole map, so model names may hold dots.
    #[serde(deserialize_with = "null_is_default")]
    pub pricing: BTreeMap<String, ModelPrice>,
}

/// What a model costs, in US dollars per million tokens. Cache prices default to the input
/// price (no discount assumed) when not given.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelPrice {
    pub input: f64,
    pub output: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read: Option<f64>,
}

impl ModelPrice {
    fn is_valid(&self) -> bool {
        [
            Some(self.input),
            Some(self.output),
            self.cache_write,
            self.cache_read,
        ]
        .into_iter()
        .flatten()
        .all(|p| (0.0..=10_000.0).contains(&p))
    }
}

/// The key whose value is a whole map (model names hold dots, so it is never split).
pub(crate) const PRICING_KEY: &str = "pricing";

fn null_is_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// Commands run at points of a run, each given a JSON event on standard input (like Claude
/// Code's hooks). Exit code 2 blocks the call, the prompt, the approval or the stop; its
/// standard error says why. Other failures and timeouts are logged and never stop the run.
/// Claude Code's hooks (`claude`) are added by the workspace from its settings files.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HooksConfig {
    #[serde(rename = "session-start")]
    pub session_start: Vec<HookCommand>,
    #[serde(rename = "user-prompt-submit")]
    pub user_prompt_submit: Vec<HookCommand>,
    #[serde(rename = "before-tool")]
    pub before_tool: Vec<HookCommand>,
    #[serde(rename = "permission-request")]
    pub permission_request: Vec<HookCommand>,
    #[serde(rename = "after-tool")]
    pub after_tool: Vec<HookCommand>,
    #[serde(rename = "before-compact")]
    pub before_compact: Vec<HookCommand>,
    pub notification: Vec<HookCommand>,
    pub stop: Vec<HookCommand>,
    #[serde(rename = "subagent-stop")]
    pub subagent_stop: Vec<HookCommand>,
    #[serde(rename = "session-end")]
    pub session_end: Vec<HookCommand>,
    /// Seconds a hook may run before it is killed.
    pub timeout_s: f64,
    /// How many times `stop` hooks may keep one run going.
    pub max_stop_continuations: u32,
    /// Variables a hook never gets: those the provider may read its key from (filled in from
    /// `provider` when the configuration is resolved).
    #[serde(skip)]
    pub key_vars: Vec<String>,
    /// The hooks of Claude Code's settings files (filled in by the workspace).
    #[serde(skip)]
    pub claude: Vec<ClaudeHook>,
    /// What was set aside while reading Claude Code's settings files.
    #[serde(skip)]
    pub warnings: Vec<String>,
    /// Where the user's trust record is (`crate::trust::Store`): a hook whose settings or
    /// scripts the user has not trusted is not run. `None`: nothing of the repository's runs.
    #[serde(skip)]
    pub trust_dir: Option<PathBuf>,
}

/// The variables the provider may read its API key from: never given to a child process.
pub fn provider_key_vars(provider: &ProviderConfig) -> Vec<String> {
    let mut vars: Vec<String> = ["NOP_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    vars.extend(provider.api_key_env.iter().cloned());
    vars
}

impl HooksConfig {
    /// Each event's commands, under their configuration keys.
    pub fn lists(&self) -> [(&'static str, &Vec<HookCommand>); 10] {
        [
            ("hooks.session-start", &self.session_start),
            ("hooks.user-prompt-submit", &self.user_prompt_submit),
            ("hooks.before-tool", &self.before_tool),
            ("hooks.permission-request", &self.permission_request),
            ("hooks.after-tool", &self.after_tool),
            ("hooks.before-compact", &self.before_compact),
            ("hooks.notification", &self.notification),
            ("hooks.stop", &self.stop),
            ("hooks.subagent-stop", &self.subagent_stop),
            ("hooks.session-end", &self.session_end),
        ]
    }

    /// The commands of the event named `event` (`before-tool`, …).
    pub fn commands(&self, event: &str) -> &[HookCommand] {
        self.lists()
            .into_iter()
            .find(|(key, _)| key.strip_prefix("hooks.") == Some(event))
            .map_or(&[][..], |(_, list)| list.as_slice())
    }

    /// How long a hook may run.
    pub fn timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs_f64(self.timeout_s.clamp(0.001, 86_400.0))
    }
}

impl Default for HooksConfig {
    fn default() -> Self {
        HooksConfig {
            session_start: Vec::new(),
            user_prompt_submit: Vec::new(),
            before_tool: Vec::new(),
            permission_request: Vec::new(),
            after_tool: Vec::new(),
            before_compact: Vec::new(),
            notification: Vec::new(),
            stop: Vec::new(),
            subagent_stop: Vec::new(),
            session_end: Vec::new(),
            timeout_s: 60.0,
            max_stop_continuations: 3,
            key_vars: Vec::new(),
            claude: Vec::new(),
            warnings: Vec::new(),
            trust_dir: None,
        }
    }
}

/// File checkpoints around each run (`nop undo`, `nop rewind`, `nop fork --worktree`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CheckpointsConfig {
    /// Record the working files before and after each run.
    pub enabled: bool,
    /// A new untracked file larger than this (MiB) is not recorded.
    pub max_file_mb: f64,
}

impl Default for CheckpointsConfig {
    fn default() -> Self {
        CheckpointsConfig {
            enabled: true,
            max_file_mb: 10.0,
        }
    }
}

/// Multi-message conversation (seed 001 §2.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ChatConfig {
    /// Whether `nop chat` waits for a quiet period and answers messages as a batch.
    pub batching: bool,
    /// The quiet period after each message is random between these (seconds; 0 allowed).
    pub wait_min_s: f64,
    pub wait_max_s: f64,
    /// The longest pause before a reply.
    pub max_delay_s: f64,
}

impl Default for ChatConfig {
    fn default() -> Self {
        ChatConfig {
            batching: true,
            wait_min_s: 5.0,
            wait_max_s: 15.0,
            max_delay_s: 10.0,
        }
    }
}

/// Long-term memory (seed 001 §2.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MemoryConfig {
    /// Summarise, at the start of a run, the most recent earlier day of the agent's sessions
    /// that has no summary yet (at most one day per run).
    pub auto_summarize: bool,
    /// Whether a question about the past pulls matching memory into the conversation.
    pub recall: bool,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            auto_summarize: false,
            recall: true,
        }
    }
}

/// Messages to busy sessions and priority-based sessions (seeds 000, 004).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QueueConfig {
    /// Whole messages (case-insensitive) that stop the current task at its next checkpoint.
    pub stop_words: Vec<String>,
    /// Priority of `nop send` without `--priority`.
    pub default_priority: crate::protocol::QueuePriority,
    /// A session waiting for input stops counting as active after this long.
    pub idle_timeout_s: f64,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            stop_words: ["停止", "停", "stop", "停止执行", "取消"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            default_priority: crate::protocol::QueuePriority::High,
            idle_timeout_s: 1800.0,
        }
    }
}

/// `call-agent` (seed 002 §4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SubagentsConfig {
    /// A subagent still running after this long is stopped and the call fails with a timeout.
    pub timeout_s: f64,
    /// How deep agents may call agents (the top-level run is depth 0).
    pub max_depth: u32,
}

impl Default for SubagentsConfig {
    fn default() -> Self {
        SubagentsConfig {
            timeout_s: 300.0,
            max_depth: 3,
        }
    }
}

/// The advisor agents (seed 002 §2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdvisorsConfig {
    /// Off: no advisor is consulted; every decision takes its safe default.
    pub enabled: bool,
    /// An advisor that has not answered after this long gets its safe default.
    pub timeout_s: f64,
    /// Retries of one failed tool call that retry-advisor may ask for.
    pub max_retries: u32,
    /// Pause before each retry.
    pub retry_delay_s: f64,
    /// The failures retry-advisor is asked about: `all` (every failed call, seed 002 §1.5), or
    /// a list of error kinds (as in error-<ts>.log's `errorType`) to ask about only those.
    pub retry_on: RetryOn,
    /// Whether an advisor's own judgement may end a run or widen a call: `full`, `limited`
    /// (retry-advisor's `abort` is taken as `skip`; its `modify_params` only corrects values
    /// the call already had, never a flag), or `auto`: `full` when the run's model is
    /// OpenAI's or Anthropic's own API, `limited` for any other server (a local model).
    pub judgement: Judgement,
}

/// How far an advisor's judgement is followed (`advisors.judgement`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Judgement {
    #[default]
    Auto,
    Full,
    Limited,
}

/// Which failed calls go to retry-advisor (`advisors.retry_on`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RetryOnText", into = "RetryOnText")]
pub enum RetryOn {
    /// Every failed call, but those that are not a failure to judge: a call not run because
    /// the agent asked the user first (`Skipped`), an MCP tool's own `isError` answer
    /// (`ToolReportedError`, the tool's result for the model), and the user's stop.
    All,
    /// Only failures of these kinds (checked against [`crate::protocol::ToolErrorKind`] when
    /// the configuration loads).
    Kinds(Vec<String>),
}

/// How `retry_on` is written: the word `all`, or a list.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
enum RetryOnText {
    Word(String),
    List(Vec<String>),
}

impl TryFrom<RetryOnText> for RetryOn {
    type Error = String;

    fn try_from(text: RetryOnText) -> Result<Self, Self::Error> {
        match text {
            RetryOnText::Word(word) if word == "all" => Ok(RetryOn::All),
            RetryOnText::Word(word) => Err(format!(
                "`{word}` is neither `all` nor a list of error kinds such as [Timeout, NotFound]"
            )),
            RetryOnText::List(kinds) => Ok(RetryOn::Kinds(kinds)),
        }
    }
}

impl From<RetryOn> for RetryOnText {
    fn from(on: RetryOn) -> Self {
        match on {
            RetryOn::All => RetryOnText::Word("all".to_string()),
            RetryOn::Kinds(kinds) => RetryOnText::List(kinds),
        }
    }
}

impl RetryOn {
    /// The kinds named in a list (none for `all`).
    pub fn kinds(&self) -> &[String] {
        match self {
            RetryOn::All => &[],
            RetryOn::Kinds(kinds) => kinds,
        }
    }
}

impl AdvisorsConfig {
    /// Whether a failure of `kind` goes to retry-advisor (`retry_on`).
    pub fn retries(&self, kind: crate::protocol::ToolErrorKind) -> bool {
        use crate::protocol::ToolErrorKind as Kind;
        match &self.retry_on {
            RetryOn::All => !matches!(
                kind,
                Kind::Skipped | Kind::ToolReportedError | Kind::Declined
            ),
            RetryOn::Kinds(kinds) => kinds.iter().any(|k| k == kind.as_str()),
        }
    }
}

impl Default for AdvisorsConfig {
    fn default() -> Self {
        AdvisorsConfig {
            enabled: true,
            timeout_s: 30.0,
            max_retries: 3,
            retry_delay_s: 1.0,
            retry_on: RetryOn::All,
            judgement: Judgement::Auto,
        }
    }
}

/// What follows a consistency check (seed 002 §3.3).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConsistencyConfig {
    /// Apply consistency-checker's findings to plan.xml (a status the conversation contradicts,
    /// a task the plan lacks), after a snapshot, and record what changed. Off by default: the
    /// findings are warnings.
    pub auto_repair: bool,
}

/// Context compaction (seed 002 §3.4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CompactionConfig {
    /// The model's context window, in tokens.
    pub context_window: u64,
    /// Ask compression-advisor once the conversation's estimated tokens reach this share of the
    /// window (the cheap local pre-check; below it no advisor is asked).
    pub threshold: f64,
    /// ... or once the session holds this many messages.
    pub max_messages: usize,
    /// Recent messages kept verbatim by a compaction.
    pub keep_last: usize,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        CompactionConfig {
            context_window: 128_000,
            threshold: 0.7,
            max_messages: 500,
            keep_last: 10,
        }
    }
}

/// When to ask the person before a tool call: `never` (what needs approval is refused),
/// `on-request` (where a permission rule says `ask`), `always` (also before every call that can
/// change something), `plan` (the agent reads and plans; nothing is changed and no command
/// runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum ApprovalSetting {
    Never,
    #[default]
    OnRequest,
    Always,
    Plan,
}

impl ApprovalSetting {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalSetting::Never => "never",
            ApprovalSetting::OnRequest => "on-request",
            ApprovalSetting::Always => "always",
            ApprovalSetting::Plan => "plan",
        }
    }

    /// The setting `name` spells, if it is one.
    pub fn parse(name: &str) -> Option<ApprovalSetting> {
        [Self::Never, Self::OnRequest, Self::Always, Self::Plan]
            .into_iter()
            .find(|s| s.as_str() == name)
    }
}

/// `required`: refuse to run shell commands the kernel cannot confine; `best-effort`: confine
/// what the kernel can and warn once about the rest; `off`: run them with the user's rights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    Required,
    #[default]
    BestEffort,
    Off,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ShellConfig {
    /// Whether shell commands may open network connections (`allow` or `deny`).
    pub network: NetworkMode,
    /// `auto`: confine with user, mount and PID namespaces under Landlock where the kernel
    /// allows unprivileged user namespaces, else with Landlock alone; `off`: Landlock alone.
    pub namespaces: NamespacesMode,
    /// Environment variables removed from shell commands: globs over their names, any case
    /// (PWD, OLDPWD, XAUTHORITY and GIT_AUTHOR_* are never matched). Variables whose value is a
    /// URL with a password are removed too.
    pub env_exclude: Vec<String>,
    /// Variables kept even when `env_exclude` or a URL with a password would remove them (the
    /// provider's key variable is removed all the same).
    pub env_keep: Vec<String>,
    /// Caches outside the repository (`~/…` for your home) that shell commands write through a
    /// copy-on-write layer of the session's: downloads and builds work, your real cache is never
    /// changed. Those that exist are layered.
    pub caches: Vec<String>,
    /// Megabytes of cache layers a session keeps between runs; a run that finds more starts
    /// them anew.
    pub caches_max_mb: u64,
    /// Commands the agent may run outside the sandbox without asking (globs over one simple
    /// command, `cargo publish*`): headless, the only ones it may; on a terminal, asked about
    /// otherwise. Empty: none.
    pub outside_sandbox: Vec<String>,
}

/// The caches package managers and toolchains write.
pub const DEFAULT_CACHES: &[&str] = &[
    "~/.cargo",
    "~/.rustup",
    "~/.npm",
    "~/.cache",
    "~/go",
    "~/.m2",
    "~/.gradle",
    "~/.yarn",
    "~/.pnpm-store",
    "~/.bun",
    "~/.deno",
    "~/.nuget",
];

impl Default for ShellConfig {
    fn default() -> Self {
        ShellConfig {
            network: NetworkMode::default(),
            namespaces: NamespacesMode::default(),
            env_exclude: [
                "*KEY*",
                "*SECRET*",
                "*TOKEN*",
                "*PASSWORD*",
                "*PASSWD*",
                "*PWD*",
                "*_PAT",
                "*DSN*",
                "*AUTH*",
                "*CREDENTIAL*",
                "*PRIVATE*",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
            env_keep: Vec::new(),
            caches: DEFAULT_CACHES.iter().map(|s| s.to_string()).collect(),
            caches_max_mb: 4096,
            outside_sandbox: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum NamespacesMode {
    #[default]
    Auto,
    Off,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum NetworkMode {
    #[default]
    Allow,
    Deny,
}

/// The model endpoint (R3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProviderConfig {
    /// `openai` (any Chat Completions server) or `anthropic` (Messages API).
    pub kind: ProviderKind,
    /// Defaults to https://api.openai.com/v1 or https://api.anthropic.com.
    pub base_url: Option<String>,
    pub model: Option<String>,
    /// The environment variable holding the key (default NOP_API_KEY, then OPENAI_API_KEY or
    /// ANTHROPIC_API_KEY). The key itself never goes in a file.
    pub api_key_env: Option<String>,
    /// Whether a reply that is a tool call written as text (a ```json block, `<tool_call>`
    /// tags: small local models) is run as that call; `auto`: on except for OpenAI's and
    /// Anthropic's own APIs.
    pub text_tool_calls: TextToolCalls,
    /// Attempts per model request, the first included.
    pub max_attempts: u32,
    /// First retry delay; doubles per attempt, with jitter, up to `retry_max_ms`.
    pub retry_base_ms: u64,
    pub retry_max_ms: u64,
    pub connect_timeout_s: f64,
    /// A stream silent this long is cut and retried.
    pub stream_idle_timeout_s: f64,
    /// The output cap of every request (`max_tokens`), at most an eighth of a known context;
    /// 0: none to OpenAI-compatible servers (Anthropic requires one: a quarter of the context).
    pub max_tokens: u32,
    /// Ask for prompt caching: Anthropic `cache_control` marks, OpenAI `prompt_cache_key`.
    pub prompt_cache: bool,
}

impl Default for ProviderConfig {
    fn default() -> Self {
        ProviderConfig {
            kind: ProviderKind::Openai,
            base_url: None,
            model: None,
            api_key_env: None,
            text_tool_calls: TextToolCalls::Auto,
            max_attempts: 5,
            retry_base_ms: 500,
            retry_max_ms: 30_000,
            connect_timeout_s: 30.0,
            stream_idle_timeout_s: 120.0,
            max_tokens: 8192,
            prompt_cache: true,
        }
    }
}

/// `provider.text_tool_calls`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum TextToolCalls {
    /// On for local and other servers, off for OpenAI's and Anthropic's own APIs (their models
    /// call tools in the API's format).
    #[default]
    Auto,
    On,
    Off,
}

impl ProviderConfig {
    /// Whether calls written as text are recovered ([`TextToolCalls`]), `auto` resolved by
    /// the provider and its URL.
    pub fn recovers_text_tool_calls(&self) -> bool {
        match self.text_tool_calls {
            TextToolCalls::On => true,
            TextToolCalls::Off => false,
            // No base URL is the vendor's own (`api.openai.com`, `api.anthropic.com`).
            TextToolCalls::Auto => self
                .base_url
                .as_deref()
                .is_some_and(|url| !is_vendor_api(url)),
        }
    }
}

/// Whether `url` is OpenAI's or Anthropic's own API (Azure's OpenAI too): a server whose models
/// call tools in its format, serve no small model, and say nothing of their context.
pub fn is_vendor_api(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
    let host = host
        .split(':')
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    let host = host.trim_end_matches('.');
    ["openai.com", "anthropic.com", "openai.azure.com"]
        .iter()
        .any(|vendor| host == *vendor || host.ends_with(&format!(".{vendor}")))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    Openai,
    Anthropic,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ToolsConfig {
    /// Default time limit of one tool call (a call may ask for another).
    pub timeout_s: f64,
    /// Tool output beyond this many bytes is cut (head and tail) in the model's context; the
    /// whole output is kept in the session's out-<ts>.log.
    pub output_max_bytes: usize,
}

impl Default for ToolsConfig {
    fn default() -> Self {
        ToolsConfig {
            timeout_s: 300.0,
            output_max_bytes: 30_000,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentConfig {
    /// The agent of new sessions when `--agent` is not given.
    pub default: String,
    /// Model requests per `nop run` before it stops with an error.
    pub max_turns: u32,
    /// Seconds a run may keep going after the agent stopped with its goal not met (`--goal`).
    pub goal_timeout_s: f64,
    /// How many of the calls the model makes in one turn that may run at once (reads,
    /// searches, `call-agent`) do; 1 runs every call in order.
    pub max_parallel: u32,
    /// US dollars a run may spend (its subagents and advisors included); 0: no limit. The run
    /// stops before the request that would pass it (`--max-budget-usd`).
    pub max_budget_usd: f64,
    /// One run's own narrowing of its agent's tools (`--allowedTools`, `--disallowedTools`):
    /// given on the command line only, never read from a file.
    #[serde(skip)]
    pub run_tools: RunTools,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            default: "coder".into(),
            max_turns: 100,
            max_parallel: 4,
            goal_timeout_s: 3600.0,
            max_budget_usd: 0.0,
            run_tools: RunTools::default(),
        }
    }
}

/// A run's narrowing of its agent's tools: it only takes away (what the agent's rules deny
/// stays denied). Names are nop's tools; `server.*` names every tool of a plugin.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunTools {
    /// When set, the only tools the run may call.
    pub allowed: Option<Vec<String>>,
    /// Tools the run may not call.
    pub denied: Vec<String>,
}

impl RunTools {
    /// Why the run may not call `tool`, when it may not.
    pub fn refuses(&self, tool: &str) -> Option<String> {
        let names = |list: &[String]| {
            list.iter().any(|name| match name.strip_suffix('*') {
                Some(prefix) => tool.starts_with(prefix),
                None => name == tool,
            })
        };
        if names(&self.denied) {
            return Some(format!(
                "tool `{tool}` is denied for this run (--disallowedTools)"
            ));
        }
        match &self.allowed {
            Some(allowed) if !names(allowed) => Some(format!(
                "tool `{tool}` is not among this run's allowed tools (--allowedTools)"
            )),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// Lowest level written to system.log and session.log.
    pub level: LogLevel,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: LogLevel::Info,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SessionConfig {
    /// How long to wait for a session's lock before giving up, in seconds.
    pub lock_timeout_s: f64,
    /// When session.json's messages pass this many KiB of JSON, they move to a sealed file of
    /// their own beside it (`messages-*.json`), so a write's cost does not grow with the
    /// conversation.
    pub seal_kb: u64,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            lock_timeout_s: 10.0,
            seal_kb: 256,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    Error,
    Warn,
    Info,
    Debug,
}

impl LogLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Error => "ERROR",
            LogLevel::Warn => "WARN",
            LogLevel::Info => "INFO",
            LogLevel::Debug => "DEBUG",
        }
    }
}

impl Config {
    /// Range checks that types cannot express: `(key, problem)`.
    fn check_ranges(&self) -> Vec<(&'static str, String)> {
        let mut problems = keys::out_of_range(&to_value(self));
        let c = &self.chat;
        if !(c.wait_min_s >= 0.0 && c.wait_max_s >= c.wait_min_s && c.wait_max_s <= 3600.0) {
            problems.push((
                "chat.wait_max_s",
                format!(
                    "chat waits must satisfy 0 ≤ wait_min_s ({}) ≤ wait_max_s ({}) ≤ 3600",
                    c.wait_min_s, c.wait_max_s
                ),
            ));
        }
        if !(c.max_delay_s >= 0.0 && c.max_delay_s <= 600.0) {
            problems.push((
                "chat.max_delay_s",
                format!("must be 0 to 600 seconds, not {}", c.max_delay_s),
            ));
        }
        for (key, commands) in self.hooks.lists() {
            if let Some(error) = commands.iter().find_map(|c| {
                regex::Regex::new(&hooks::pattern(c.matcher()))
                    .err()
                    .map(|e| {
                        format!(
                            "the matcher `{}` is not a regular expression: {e}",
                            c.matcher()
                        )
                    })
            }) {
                problems.push((key, error));
            }
        }
        for (key, globs) in [
            ("shell.env_exclude", &self.shell.env_exclude),
            ("shell.env_keep", &self.shell.env_keep),
        ] {
            if let Some(error) = globs
                .iter()
                .find_map(|g| globset::Glob::new(g).err().map(|e| format!("`{g}`: {e}")))
            {
                problems.push((key, error));
            }
        }
        if let Some(kind) = self
            .advisors
            .retry_on
            .kinds()
            .iter()
            .find(|k| crate::protocol::ToolErrorKind::parse(k).is_none())
        {
            problems.push((
                "advisors.retry_on",
                format!(
                    "`{kind}` is not an error kind; the kinds are {}",
                    crate::protocol::ToolErrorKind::ALL
                        .iter()
                        .map(|k| k.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        if let Some((model, _)) = self.pricing.iter().find(|(_, p)| !p.is_valid()) {
            problems.push((
                PRICING_KEY,
                format!("the prices of `{model}` must be numbers from 0 to 10000 (USD per million tokens)"),
            ));
        }
        if let Some(var) = &self.provider.api_key_env
            && !is_variable_name(var)
        {
            problems.push((
                "provider.api_key_env",
                "must be the name of the environment variable that holds the key (letters, \
                 digits and _, such as OPENAI_API_KEY), never the key itself"
                    .to_string(),
            ));
        }
        problems
    }

    pub fn lock_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs_f64(self.session.lock_timeout_s)
    }

    /// `session.seal_kb` in bytes.
    pub fn seal_bytes(&self) -> usize {
        usize::try_from(self.session.seal_kb.saturating_mul(1024)).unwrap_or(usize::MAX)
    }
}

fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Where a configuration value came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "layer", content = "source", rename_all = "lowercase")]
pub enum Origin {
    Default,
    /// The user's own file, `~/.config/nop/config.yml`.
    User(PathBuf),
    /// The repository's `.nop/config.yml`.
    File(PathBuf),
    Agent(String),
    Session(String),
    Env(String),
    Cli(String),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Default => f.write_str("default"),
            Origin::User(path) => write!(f, "user file {}", path.display()),
            Origin::File(path) => write!(f, "file {}", path.display()),
            Origin::Agent(name) => write!(f, "agent {name} (agents.yml)"),
            Origin::Session(id) => write!(f, "session {id} (session.json)"),
            Origin::Env(var) => write!(f, "environment {var}"),
            Origin::Cli(flag) => write!(f, "command line {flag}"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{}{}: {message}", path.display(), pos.map(|p| format!(":{}:{}", p.line, p.column)).unwrap_or_default())]
    Parse {
        path: PathBuf,
        pos: Option<TextPos>,
        message: String,
    },
    /// `hint` suggests at most five close keys.
    #[error("unknown configuration key `{key}` (from {origin}); {hint}")]
    UnknownKey {
        key: String,
        origin: Origin,
        hint: String,
    },
    #[error("configuration key `{key}` (from {origin}): {message}")]
    Invalid {
        key: String,
        origin: Origin,
        message: String,
    },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// `nop config set` of a key that would hold the API key itself.
    #[error(
        "`{key}` would put the API key in a file, which nop never does: keep the key in an \
         environment variable and set `provider.api_key_env` to that variable's name \
         (e.g. `nop config set provider.api_key_env OPENAI_API_KEY --user`)"
    )]
    Secret { key: String },
    /// A file that does not load is never rewritten.
    #[error("{} was not changed: it does not load ({source}); fix it first", path.display())]
    Unchanged {
        path: PathBuf,
        source: Box<ConfigError>,
    },
    /// The change would leave a file that does not load, so it was not made.
    #[error("{} was not changed: with that value it would not load: {source}", path.display())]
    Refused {
        path: PathBuf,
        source: Box<ConfigError>,
    },
}

/// Everything the layers are built from. Environment and command line are passed in, never read
/// here, so tests never touch the process environment.
#[derive(Debug, Default)]
pub struct ConfigInputs<'a> {
    /// `.nop/config.yml`: its path and text. (The user's file is found from `env`.)
    pub file: Option<(&'a Path, &'a str)>,
    /// The agent's `config:` overrides in agents.yml.
    pub agent: Option<(&'a str, &'a Map<String, Value>)>,
    /// The session's `config` overrides in session.json.
    pub session: Option<(&'a str, &'a Map<String, Value>)>,
    /// Environment variables: `NOP_*` ones, and `XDG_CONFIG_HOME` / `HOME` to find the user's
    /// file.
    pub env: BTreeMap<String, String>,
    /// Command-line settings: (flag as typed, key, value text).
    pub cli: Vec<(String, String, String)>,
    /// Why the repository's `.nop/` is not trusted, if it is not: then what its config.yml and
    /// agents.yml set that widens ([`widens`]) is left out.
    pub untrusted: Option<String>,
}

/// The effective configuration with the value and origin of every key.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub config: Config,
    pub entries: BTreeMap<String, (Value, Origin)>,
    /// Keys left out, one sentence each: a repository file's widening keys while it is not
    /// trusted, a session's always (a session file travels; what it says runs nothing).
    pub set_aside: Vec<String>,
}

/// Environment variables that name a key other than by the `NOP_<KEY>` rule.
const ENV_ALIASES: &[(&str, &str)] = &[
    ("NOP_LOG", "log.level"),
    ("NOP_PROVIDER", "provider.kind"),
    ("NOP_BASE_URL", "provider.base_url"),
    ("NOP_MODEL", "provider.model"),
];

/// The environment variable that sets `key`.
pub fn env_var_for(key: &str) -> String {
    format!("NOP_{}", key.to_uppercase().replace('.', "_"))
}

impl Resolved {
    /// Builds the configuration from its layers, lowest precedence first; the user's file is
    /// read from where `inputs.env` says ([`user_config_path`]).
    pub fn from_inputs(inputs: &ConfigInputs<'_>) -> Result<Resolved, ConfigError> {
        let user = match user_config_path(&inputs.env) {
            Some(path) => read_config_text(&path)?.map(|text| (path, text)),
            None => None,
        };
        Resolved::with_user_file(
            inputs,
            user.as_ref().map(|(p, t)| (p.as_path(), t.as_str())),
        )
    }

    /// [`Resolved::from_inputs`] with the user's file given (its path and text): how the
    /// configuration would look with a file not yet written.
    #[expect(clippy::too_many_lines, reason = "a debt: listed in AGENTS.md")]
    pub fn with_user_file(
        inputs: &ConfigInputs<'_>,
        user: Option<(&Path, &str)>,
    ) -> Result<Resolved, ConfigError> {
        let defaults = to_value(&Config::default());
        let mut entries: BTreeMap<String, (Value, Origin)> = BTreeMap::new();
        flatten("", &defaults, &mut |key, value| {
            entries.insert(key, (value.clone(), Origin::Default));
        });

        // (key, value, the text it was typed as, for values from the environment or command line)
        type Layer = Vec<(String, Value, Option<String>)>;
        let typed = |values: Vec<(String, Value)>| -> Layer {
            values.into_iter().map(|(k, v)| (k, v, None)).collect()
        };
        let mut layers: Vec<(Origin, Layer)> = Vec::new();
        if let Some((path, text)) = user {
            let origin = Origin::User(path.to_path_buf());
            let values = parse_file(&origin, text)?;
            layers.push((origin, typed(values)));
        }
        let mut set_aside = Vec::new();
        let mut keep = |origin: &Origin, values: Vec<(String, Value)>, why: Option<&str>| {
            let Some(why) = why else { return values };
            let (left, kept): (Vec<_>, Vec<_>) =
                values.into_iter().partition(|(key, _)| widens(key));
            if !left.is_empty() {
                let keys: Vec<&str> = left.iter().map(|(k, _)| k.as_str()).collect();
                set_aside.push(format!("{origin}: {} left out: {why}", keys.join(", ")));
            }
            kept
        };
        let untrusted = inputs.untrusted.as_deref();
        if let Some((path, text)) = inputs.file {
            let origin = Origin::File(path.to_path_buf());
            let values = keep(&origin, parse_file(&origin, text)?, untrusted);
            layers.push((origin, typed(values)));
        }
        if let Some((name, map)) = inputs.agent {
            let origin = Origin::Agent(name.to_string());
            let values = keep(&origin, flatten_map(map), untrusted);
            layers.push((origin, typed(values)));
        }
        if let Some((id, map)) = inputs.session {
            let origin = Origin::Session(id.to_string());
            let values = keep(
                &origin,
                flatten_map(map),
                Some("a session file never widens what the agent may do or runs a command"),
            );
            layers.push((origin, typed(values)));
        }
        let mut env = Vec::new();
        // Each key's variable, made once and only when some `NOP_*` variable is set.
        let mut by_var: Option<BTreeMap<String, &String>> = None;
        for (var, value) in &inputs.env {
            if !var.starts_with("NOP_") {
                continue;
            }
            let alias = ENV_ALIASES.iter().find(|(a, _)| a == var).map(|(_, k)| *k);
            let key = alias.map(str::to_string).or_else(|| {
                by_var
                    .get_or_insert_with(|| entries.keys().map(|k| (env_var_for(k), k)).collect())
                    .get(var)
                    .map(|k| (*k).clone())
            });
            // Other `NOP_*` variables (a key, a user name) belong to other parts of nop.
            if let Some(key) = key {
                env.push((var.clone(), key, value.clone()));
            }
        }
        // One layer per variable so that each value keeps its own origin.
        for (var, key, text) in env {
            layers.push((Origin::Env(var), vec![(key, scalar(&text), Some(text))]));
        }
        for (flag, key, text) in &inputs.cli {
            let key = canonical_key(key).to_string();
            layers.push((
                Origin::Cli(flag.clone()),
                vec![(key, scalar(text), Some(text.clone()))],
            ));
        }

        for (origin, values) in layers {
            for (key, value, text) in values {
                if !entries.contains_key(&key) {
                    let hint = keys::hint(&key, entries.keys().cloned());
                    return Err(ConfigError::UnknownKey { key, origin, hint });
                }
                // Typed text reads as `nop config set` reads it: `NOP_MODEL=3.5` is the string
                // "3.5" when the key takes a string, `["A", "B"]` a list when it takes a list.
                let checked = match text {
                    Some(text) => edit::typed_value(&defaults, &key, &text),
                    None => match check_leaf(&defaults, &key, &value) {
                        Ok(()) => Ok(value),
                        Err(complaint) => Err(must_be(
                            &defaults,
                            &key,
                            &complaint.to_string(),
                            &value.to_string(),
                        )),
                    },
                };
                let value = match checked {
                    Ok(value) => value,
                    Err(message) => {
                        return Err(ConfigError::Invalid {
                            message,
                            key,
                            origin,
                        });
                    }
                };
                // Prices add up model by model: a repository's file keeps the user's others.
                let value = match (entries.get(&key), value) {
                    (Some((Value::Object(earlier), _)), Value::Object(later))
                        if key == PRICING_KEY =>
                    {
                        let mut merged = earlier.clone();
                        merged.extend(later);
                        Value::Object(merged)
                    }
                    (_, value) => value,
                };
                entries.insert(key, (value, origin.clone()));
            }
        }

        let mut merged = Value::Object(Map::new());
        for (key, (value, _)) in &entries {
            set_path(&mut merged, key, value.clone());
        }
        let mut config: Config =
            serde_json::from_value(merged).map_err(|e| ConfigError::Invalid {
                key: String::new(),
                origin: Origin::Default,
                message: e.to_string(),
            })?;
        config.hooks.key_vars = provider_key_vars(&config.provider);
        if let Some((key, message)) = config.check_ranges().into_iter().next() {
            let origin = entries.get(key).map_or(Origin::Default, |(_, o)| o.clone());
            return Err(ConfigError::Invalid {
                key: key.to_string(),
                origin,
                message,
            });
        }
        Ok(Resolved {
            config,
            entries,
            set_aside,
        })
    }
}

/// What a configuration file's text sets that widens ([`keys::widens`]), one `key: value` line
/// each in the file's order, for the trust record; text that does not parse is its own
/// widening (it cannot be known what it sets).
pub fn widening_text(text: &str) -> String {
    match file::parse_file(&Origin::Default, text) {
        Ok(values) => values
            .into_iter()
            .filter(|(key, _)| keys::widens(key))
            .map(|(key, value)| format!("{key}: {value}\n"))
            .collect(),
        Err(_) => text.to_string(),
    }
}

/// What an agent's `config:` overrides set that widens, as [`widening_text`] says it.
pub fn widening_overrides(map: &Map<String, Value>) -> String {
    flatten_map(map)
        .into_iter()
        .filter(|(key, _)| keys::widens(key))
        .map(|(key, value)| format!("{key}: {value}\n"))
        .collect()
}

/// The hook commands `values` (a file's keys) set, for every event.
pub fn hook_commands_of(values: &[(String, Value)]) -> Vec<String> {
    let mut commands = Vec::new();
    for (key, value) in values {
        if !key.starts_with("hooks.") {
            continue;
        }
        for item in value.as_array().into_iter().flatten() {
            match item {
                Value::String(command) => commands.push(command.clone()),
                Value::Object(map) => {
                    if let Some(Value::String(command)) = map.get("command") {
                        commands.push(command.clone());
                    }
                }
                _ => {}
            }
        }
    }
    commands
}

/// The hook commands a configuration file's text sets (none when it does not parse).
pub fn hook_commands(text: &str) -> Vec<String> {
    file::parse_file(&Origin::Default, text)
        .map(|values| hook_commands_of(&values))
        .unwrap_or_default()
}

/// The hook commands an agent's `config:` overrides set.
pub fn hook_commands_in_overrides(map: &Map<String, Value>) -> Vec<String> {
    hook_commands_of(&flatten_map(map))
}

/// The first line of a YAML error message, without the `error: line N column M:` that the
/// caller already shows as `file:line:column`.
pub(crate) fn first_line(message: &str) -> String {
    let line = message.lines().next().unwrap_or_default().trim();
    let line = line.strip_prefix("error:").unwrap_or(line).trim_start();
    let without_pos = line
        .strip_prefix("line ")
        .and_then(|rest| rest.split_once(": "))
        .filter(|(pos, _)| pos.contains("column"))
        .map(|(_, rest)| rest);
    without_pos.unwrap_or(line).to_string()
}

/// A value typed on the command line or in the environment: YAML scalar syntax.
fn scalar(text: &str) -> Value {
    serde_saphyr::from_str::<Value>(text)
        .ok()
        .filter(|v| !v.is_object() && !v.is_array() && !v.is_null())
        .unwrap_or_else(|| Value::String(text.to_string()))
}

/// Accepts both nested maps and dotted keys (`{session: {lock_timeout_s: 5}}` or
/// `{"session.lock_timeout_s": 5}`).
fn flatten_map(map: &Map<String, Value>) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    flatten("", &Value::Object(map.clone()), &mut |key, value| {
        out.push((key, value.clone()))
    });
    out
}

fn flatten(prefix: &str, value: &Value, out: &mut dyn FnMut(String, &Value)) {
    match value {
        Value::Object(map) if prefix != PRICING_KEY && (!map.is_empty() || prefix.is_empty()) => {
            for (k, v) in map {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        Value::Null if prefix.is_empty() => {}
        _ => out(prefix.to_string(), value),
    }
}

fn set_path(root: &mut Value, key: &str, value: Value) {
    let mut node = root;
    let mut parts = key.split('.').peekable();
    while let Some(part) = parts.next() {
        let Value::Object(map) = node else { return };
        if parts.peek().is_none() {
            map.insert(part.to_string(), value);
            return;
        }
        node = map
            .entry(part.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
    }
}

/// Whether `value` is acceptable for `key`: the defaults with that one leaf replaced must
/// deserialise. The error is serde's complaint, which [`must_be`] turns into what the key
/// accepts.
fn check_leaf(defaults: &Value, key: &str, value: &Value) -> Result<(), serde_json::Error> {
    let mut probe = defaults.clone();
    set_path(&mut probe, key, value.clone());
    serde_json::from_value::<Config>(probe).map(drop)
}

fn to_value<T: Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests;
