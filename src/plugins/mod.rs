//! Plugins (seed 002 §12.2): `.nop/plugins/<name>/config.yml` adds tools, either the tools of an
//! MCP server spoken to over stdio or streamable HTTP (the protocol Claude Code, Codex and goose
//! speak; through the `rmcp` crate behind the `mcp` feature, kept behind [`McpSession`]) or plain
//! command tools (arguments as JSON on standard input, the result on standard output). What the
//! model reads of a result is in `content.rs`.
//!
//! ```yaml
//! description: GitHub helpers
//! mcp:
//!   command: npx
//!   args: [-y, "@modelcontextprotocol/server-github"]
//!   env: {GITHUB_TOKEN: "${GITHUB_TOKEN}"}   # ${VAR}, ${VAR:-default}: from nop's environment
//!   startup_timeout_s: 20
//! tools:
//!   - name: greet
//!     description: Says hello
//!     command: ./greet.sh           # bash -c, in the repository root, confined like `shell`
//!     input_schema: {type: object, properties: {name: {type: string}}, required: [name]}
//! ```
//!
//! Plugins are declared there, and in the places other agents keep MCP servers (`config::servers`:
//! `.mcp.json`, `~/.claude.json`, `~/.config/nop/plugins`, Codex's `config.toml`, in that order
//! of precedence). They start all at once when the first run of a process needs them and live as
//! long as the process ([`Loaded`]); one that fails (bad YAML, missing command, crash at start,
//! timeout) is reported once and start-up goes on without it. Their tools are named
//! `<plugin>.<tool>` and go through the same orchestrator as built-ins: permissions
//! (`tools.allowed`/`denied` may say `github.*`), time limit, error log, recording.
//!
//! An MCP server runs unconfined with the user's rights, but gets only the environment shell
//! commands get (never the provider's key) plus what its `env` names, and starts in a fresh
//! directory of nop's own outside the repository unless its `cwd` says otherwise ([`server`],
//! `docs/sandbox-environment.md`).

#[cfg_attr(not(feature = "mcp"), allow(dead_code))]
mod content;
#[cfg(feature = "mcp")]
mod mcp;
pub mod server;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::config::McpConfig;
use crate::config::servers as sources;
use crate::protocol::TextPos;
use crate::providers::ToolSpec;
use crate::tools::ToolErrorKind;
use crate::tools::{SandboxSettings, TimeLimit, Tool, ToolContext, ToolError, ToolOutput};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct PluginFile {
    #[serde(default)]
    #[allow(dead_code)]
    description: String,
    #[serde(default)]
    mcp: Option<McpConfig>,
    #[serde(default)]
    tools: Vec<CommandToolConfig>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct CommandToolConfig {
    name: String,
    #[serde(default)]
    description: String,
    command: String,
    #[serde(default = "object_schema")]
    input_schema: Value,
}

fn object_schema() -> Value {
    serde_json::json!({"type": "object", "properties": {}})
}

/// One plugin as `nop plugins list` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PluginStatus {
    pub name: String,
    /// `loaded`, `failed: why`, or `shadowed by FILE` (a plugin of that name declared in a
    /// place that comes first).
    pub state: String,
    /// The file that declares it.
    pub source: String,
    pub tools: Vec<String>,
    /// What the start-up warning says of a loaded plugin (a server that starts inside the
    /// repository).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl PluginStatus {
    /// Whether the plugin failed (not loaded, and not set aside for another of its name).
    pub fn failed(&self) -> bool {
        self.state.starts_with("failed")
    }
}

/// A connected MCP server, behind our own trait so the `rmcp` crate stays at arm's length.
pub trait McpSession: Send + Sync {
    /// Calls `tool`; `Ok((text, is_error))`.
    fn call<'a>(
        &'a self,
        tool: &'a str,
        arguments: Value,
    ) -> BoxFuture<'a, Result<(String, bool), String>>;
    /// Reads the resource at `uri` (`resources/read`), as text for the model.
    fn read_resource<'a>(&'a self, uri: &'a str) -> BoxFuture<'a, Result<String, String>>;
}

/// The tool nop adds for a server that offers resources: `<plugin>.read_resource`.
pub const READ_RESOURCE: &str = "read_resource";

/// What a server offers: its tools, and its resources when it has the capability (each
/// `{uri, name, description?, mimeType?}` as JSON).
pub struct McpServerInfo {
    pub tools: Vec<McpToolInfo>,
    pub resources: Option<Vec<Value>>,
}

/// A tool an MCP server offers.
pub struct McpToolInfo {
    pub name: String,
    pub description: String,
    pub schema: Value,
}

/// Every plugin's tools, and what happened to each plugin.
type Plugins = (Vec<Arc<dyn Tool>>, Vec<PluginStatus>);

/// The plugins of one nop process: loaded (their servers started) by the first run that needs
/// them and kept, servers running, for the runs that follow, until the process ends (the
/// interactive session's prompts share them).
#[derive(Default)]
pub struct Loaded {
    cell: tokio::sync::OnceCell<Plugins>,
}

impl Loaded {
    /// The plugins' tools and statuses, loading them on the first call; `true` with them when
    /// this call loaded them (so failures are reported once).
    pub async fn get(
        &self,
        root: &Path,
        settings: &SandboxSettings,
        env: &BTreeMap<String, String>,
    ) -> (Vec<Arc<dyn Tool>>, Vec<PluginStatus>, bool) {
        let mut fresh = false;
        let (tools, statuses) = self
            .cell
            .get_or_init(|| {
                fresh = true;
                load_all(root, settings, env)
            })
            .await;
        (tools.clone(), statuses.clone(), fresh)
    }
}

/// Every plugin's tools, and what happened to each plugin, from every place plugins are
/// declared (`config::servers`; `env` is nop's environment, which finds the user's files). MCP servers
/// get the environment of shell commands under `settings` (see [`server`]).
pub async fn load_all(
    root: &Path,
    settings: &SandboxSettings,
    env: &BTreeMap<String, String>,
) -> (Vec<Arc<dyn Tool>>, Vec<PluginStatus>) {
    let (found, shadowed) = sources::discover(root, env);
    let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
    let mut statuses = Vec::new();
    // Decided as they are about to start: a server the repository declares, or whose command
    // names its files, starts only as the user trusted it (`nop trust`).
    let untrusted = crate::trust::untrusted_servers(root, env);
    let (found, refused): (Vec<_>, Vec<_>) = found
        .into_iter()
        .partition(|f| !untrusted.contains_key(&f.name));
    for found in refused {
        let why = untrusted[&found.name].warning();
        tracing::warn!(op = "plugin", plugin = %found.name, result = "untrusted", "{why}");
        statuses.push(PluginStatus {
            name: found.name,
            state: format!("untrusted: {why}"),
            source: found.source.display().to_string(),
            tools: Vec::new(),
            notes: Vec::new(),
        });
    }
    // All at once, each under its own start-up limit; reported in order.
    let loaded =
        futures_util::future::join_all(found.iter().map(|f| load_one(root, settings, f))).await;
    for (found, result) in found.into_iter().zip(loaded) {
        let source = found.source.display().to_string();
        match result {
            Ok((loaded, notes)) => {
                for note in &notes {
                    tracing::warn!(op = "plugin", plugin = %found.name, "{note}");
                }
                statuses.push(PluginStatus {
                    name: found.name,
                    state: "loaded".into(),
                    source,
                    tools: loaded.iter().map(|t| t.name().to_string()).collect(),
                    notes,
                });
                tools.extend(loaded);
            }
            Err(why) => {
                tracing::warn!(op = "plugin", plugin = %found.name, result = "failed", "{why}");
                statuses.push(PluginStatus {
                    name: found.name,
                    state: format!("failed: {why}"),
                    source,
                    tools: Vec::new(),
                    notes: Vec::new(),
                });
            }
        }
    }
    for (found, by) in shadowed {
        tracing::info!(op = "plugin", plugin = %found.name, "{} shadowed by {}", found.source.display(), by.display());
        statuses.push(PluginStatus {
            name: found.name,
            state: format!("shadowed by {}", by.display()),
            source: found.source.display().to_string(),
            tools: Vec::new(),
            notes: Vec::new(),
        });
    }
    (tools, statuses)
}

/// A plugin's tools and the notes of its start-up warning.
type Started = (Vec<Arc<dyn Tool>>, Vec<String>);

/// Why a plugin did not load (its status says `failed: ` and this).
#[derive(Debug, thiserror::Error)]
enum LoadError {
    #[error(transparent)]
    Declaration(#[from] sources::DeclarationError),
    #[error("plugin name `{name}` may only use letters, digits, - and _ ({})", file.display())]
    Name { name: String, file: PathBuf },
    #[error("{}: No such file or directory", .0.display())]
    NoFile(PathBuf),
    #[error("{}: larger than 1 MB, not read", .0.display())]
    TooLarge(PathBuf),
    #[error("{}: {source}", path.display())]
    Unreadable {
        path: PathBuf,
        source: crate::capped_file::CappedError,
    },
    #[error("{}: not UTF-8: {source}", path.display())]
    NotUtf8 {
        path: PathBuf,
        source: std::string::FromUtf8Error,
    },
    /// The plugin's `config.yml` is not what it should be: where, as the YAML parser says it.
    #[error("{}{}: {message}", path.display(), pos.map(|p| format!(":{}:{}", p.line, p.column)).unwrap_or_default())]
    Yaml {
        path: PathBuf,
        pos: Option<TextPos>,
        message: String,
    },
    /// Its MCP server did not start: the client's words (and the end of the server's stderr).
    #[error("{0}")]
    Mcp(String),
}

async fn load_one(
    root: &Path,
    settings: &SandboxSettings,
    found: &sources::Found,
) -> Result<Started, LoadError> {
    let name = found.name.as_str();
    if let Err(why) = &found.spec {
        return Err(why.clone().into());
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(LoadError::Name {
            name: name.to_string(),
            file: found.source.clone(),
        });
    }
    let dir = match &found.spec {
        Err(why) => return Err(why.clone().into()),
        Ok(sources::Spec::Mcp(config)) => {
            return load_mcp(root, settings, name, config)
                .await
                .map_err(LoadError::Mcp);
        }
        Ok(sources::Spec::Dir(dir)) => dir,
    };
    let path = dir.join("config.yml");
    let text = read_capped(&path)?;
    let file: PluginFile = serde_saphyr::from_str(&text).map_err(|e| LoadError::Yaml {
        pos: e.location().map(|l| TextPos {
            line: usize::try_from(l.line()).unwrap_or(0),
            column: usize::try_from(l.column()).unwrap_or(0),
        }),
        message: crate::config::first_line(&e.to_string()),
        path: path.clone(),
    })?;
    let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
    for t in file.tools {
        tools.push(Arc::new(PluginTool::new(
            format!("{name}.{}", t.name),
            t.description,
            &t.input_schema,
            Backend::Command {
                command: t.command,
                plugin_dir: dir.to_path_buf(),
            },
        )));
    }
    let mut notes = Vec::new();
    if let Some(mcp) = file.mcp {
        let (more, more_notes) = load_mcp(root, settings, name, &mcp)
            .await
            .map_err(LoadError::Mcp)?;
        tools.extend(more);
        notes = more_notes;
    }
    Ok((tools, notes))
}

/// The text of a plugin's `config.yml`, at most 1 MB.
fn read_capped(path: &Path) -> Result<String, LoadError> {
    use crate::capped_file::{CappedError, read};
    const MAX: u64 = 1 << 20;
    let bytes = match read(path, MAX) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Err(LoadError::NoFile(path.to_path_buf())),
        Err(CappedError::TooLarge(..)) => return Err(LoadError::TooLarge(path.to_path_buf())),
        Err(source) => {
            return Err(LoadError::Unreadable {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    String::from_utf8(bytes).map_err(|source| LoadError::NotUtf8 {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(feature = "mcp")]
async fn load_mcp(
    root: &Path,
    settings: &SandboxSettings,
    name: &str,
    config: &McpConfig,
) -> Result<Started, String> {
    let timeout = Duration::from_secs_f64(config.startup_timeout_s.clamp(0.1, 600.0));
    let tail = mcp::StderrTail::default();
    let started = tokio::time::timeout(
        timeout,
        mcp::connect(name, root, settings, config, Arc::clone(&tail)),
    )
    .await
    .map_err(|_| {
        format!(
            "the MCP server did not start within {:.1} s",
            timeout.as_secs_f64()
        )
    })
    .and_then(|r| r);
    let (session, info, launch) = match started {
        Ok(started) => started,
        Err(why) => {
            let tail = tail.lock().map(|t| t.clone()).unwrap_or_default();
            return Err(with_stderr(why, &tail));
        }
    };
    let notes = launch
        .map(|l| server::inside_repository(&l, root))
        .unwrap_or_default();
    let session: Arc<dyn McpSession> = Arc::new(session);
    let limit = config
        .timeout_s
        .filter(|s| s.is_finite() && *s > 0.0)
        .map(|s| Duration::from_secs_f64(s.min(86_400.0)));
    Ok((mcp_tools(name, info, &session, limit), notes))
}

/// The tools of a started server, and `read_resource` when it offers resources and has no tool
/// of that name itself.
#[cfg_attr(not(feature = "mcp"), allow(dead_code))]
fn mcp_tools(
    name: &str,
    info: McpServerInfo,
    session: &Arc<dyn McpSession>,
    limit: Option<Duration>,
) -> Vec<Arc<dyn Tool>> {
    let has_own = info.tools.iter().any(|t| t.name == READ_RESOURCE);
    let mut tools: Vec<Arc<dyn Tool>> = info
        .tools
        .into_iter()
        .map(|info| {
            Arc::new(PluginTool::new(
                format!("{name}.{}", info.name),
                info.description,
                &info.schema,
                Backend::Mcp {
                    tool: info.name,
                    session: Arc::clone(session),
                    limit,
                },
            )) as Arc<dyn Tool>
        })
        .collect();
    if let (Some(resources), false) = (info.resources, has_own) {
        tools.push(Arc::new(PluginTool::new(
            format!("{name}.{READ_RESOURCE}"),
            content::read_resource_description(&resources),
            &serde_json::json!({
                "type": "object",
                "properties": {"uri": {"type": "string", "description": "The resource's URI"}},
                "required": ["uri"],
            }),
            Backend::McpResource {
                session: Arc::clone(session),
                limit,
            },
        )));
    }
    tools
}

/// `why` a server did not start, with the last lines it wrote to stderr.
#[cfg_attr(not(feature = "mcp"), allow(dead_code))]
fn with_stderr(why: String, tail: &str) -> String {
    let lines: Vec<&str> = tail.trim_end().lines().collect();
    if lines.is_empty() {
        return why;
    }
    let last = lines[lines.len().saturating_sub(5)..].join("\n");
    let last: String = last
        .chars()
        .rev()
        .take(1000)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    format!("{why}; its stderr ends with:\n{last}")
}

#[cfg(not(feature = "mcp"))]
async fn load_mcp(
    _root: &Path,
    _settings: &SandboxSettings,
    _name: &str,
    _config: &McpConfig,
) -> Result<Started, String> {
    Err("this nop was built without the `mcp` feature, so MCP servers cannot be used".into())
}

/// Checks `arguments` against the parts of a JSON schema that matter for a call: an object,
/// its required properties, and the basic types of the properties it gives.
fn validate(schema: &Value, arguments: &Value) -> Result<(), ToolError> {
    let invalid = |m: String| ToolError::model(ToolErrorKind::InvalidArguments, m);
    let Value::Object(args) = arguments else {
        return Err(invalid(format!(
            "the arguments must be a JSON object, not {arguments}"
        )));
    };
    for key in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if !args.contains_key(key) {
            return Err(invalid(format!("missing required argument `{key}`")));
        }
    }
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (key, value) in args {
            let Some(kind) = props
                .get(key)
                .and_then(|p| p.get("type"))
                .and_then(Value::as_str)
            else {
                continue;
            };
            let ok = match kind {
                "string" => value.is_string(),
                "number" => value.is_number(),
                "integer" => value.is_i64() || value.is_u64(),
                "boolean" => value.is_boolean(),
                "array" => value.is_array(),
                "object" => value.is_object(),
                _ => true,
            };
            if !ok {
                return Err(invalid(format!(
                    "argument `{key}` must be of type {kind}, not {value}"
                )));
            }
        }
    }
    Ok(())
}

fn schema_object(schema: &Value) -> Value {
    match schema {
        Value::Object(_) => schema.clone(),
        _ => object_schema(),
    }
}

/// A tool a plugin adds.
struct PluginTool {
    /// Name (`<plugin>.<tool>`), description and input schema.
    spec: ToolSpec,
    backend: Backend,
}

#[cfg_attr(not(feature = "mcp"), allow(dead_code))]
enum Backend {
    /// A plain command: arguments as JSON on stdin, the result on stdout.
    Command {
        command: String,
        plugin_dir: PathBuf,
    },
    /// A tool of an MCP server.
    Mcp {
        tool: String,
        session: Arc<dyn McpSession>,
        /// The plugin's `timeout_s`.
        limit: Option<Duration>,
    },
    /// `read_resource` of an MCP server that offers resources.
    McpResource {
        session: Arc<dyn McpSession>,
        limit: Option<Duration>,
    },
}

impl PluginTool {
    fn new(full_name: String, description: String, schema: &Value, backend: Backend) -> PluginTool {
        PluginTool {
            spec: ToolSpec {
                name: full_name,
                description,
                parameters: schema_object(schema),
            },
            backend,
        }
    }

    async fn run_command(
        &self,
        command: &str,
        plugin_dir: &Path,
        args: Value,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        // Relative commands are the plugin's own files.
        let command = match command.strip_prefix("./") {
            Some(rest) => format!("{}/{rest}", plugin_dir.display()),
            None => command.to_string(),
        };
        let started = std::time::Instant::now();
        let ran = crate::tools::shell::run_confined(
            ctx,
            &command,
            &ctx.root,
            Some(args.to_string()),
            ctx.timeout,
        )
        .await?;
        let ran_for = started.elapsed();
        if !ran.status.success() {
            let err = ran.output.stderr.kept_text();
            return Err(ToolError::model(
                ToolErrorKind::PluginToolFailed,
                format!(
                    "`{}` exited with {}: {}",
                    self.spec.name,
                    ran.status.code().unwrap_or(-1),
                    err.trim()
                ),
            ));
        }
        // A result longer than the model reads was cut as it came; the whole is in the log.
        let log = ran
            .log
            .as_ref()
            .map(|p| crate::tools::output::shown_path(&ctx.root, p));
        let budget = ctx.output_max_bytes.saturating_sub(
            crate::tools::output::MARKER_ROOM + log.as_ref().map_or(0, String::len),
        );
        let content = match &log {
            None => ran.output.stdout.kept_text(),
            Some(name) => ran.output.stdout.render(budget, "stdout", Some(name)),
        };
        Ok(ToolOutput {
            content,
            effect: crate::tools::ToolEffect::None,
            outcome: crate::tools::ToolOutcome {
                whole_in: ran.log.map(|p| p.to_string_lossy().into_owned()),
                ..crate::tools::ToolOutcome::command(ran.status, ran_for)
            },
        })
    }
}

impl Tool for PluginTool {
    fn name(&self) -> &str {
        &self.spec.name
    }

    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    /// A plugin's tool runs a program (or an MCP server's tool, whose effects nop cannot know):
    /// it is asked about under `--approval always`, like `shell`.
    fn is_mutating(&self) -> bool {
        true
    }

    /// A command is killed at the configured limit by the sandbox (like `shell`); an MCP call is
    /// cut at its plugin's `timeout_s`, else the configured limit.
    fn time_limit(&self, _args: &Value, configured: Duration) -> TimeLimit {
        match &self.backend {
            Backend::Command { .. } => TimeLimit::Own(configured),
            Backend::Mcp { limit, .. } | Backend::McpResource { limit, .. } => {
                TimeLimit::Cut(limit.unwrap_or(configured))
            }
        }
    }

    fn call<'a>(
        &'a self,
        args: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            validate(&self.spec.parameters, &args)?;
            match &self.backend {
                Backend::Command {
                    command,
                    plugin_dir,
                } => self.run_command(command, plugin_dir, args, ctx).await,
                Backend::Mcp { tool, session, .. } => match session.call(tool, args).await {
                    Ok((text, false)) => Ok(ToolOutput::text(text)),
                    Ok((text, true)) => {
                        Err(ToolError::model(ToolErrorKind::ToolReportedError, text))
                    }
                    Err(why) => Err(ToolError::model(
                        ToolErrorKind::PluginError,
                        format!("the MCP server of `{}` failed: {why}", self.spec.name),
                    )),
                },
                Backend::McpResource { session, .. } => {
                    let uri = args.get("uri").and_then(Value::as_str).unwrap_or_default();
                    session
                        .read_resource(uri)
                        .await
                        .map(ToolOutput::text)
                        .map_err(|why| {
                            ToolError::model(
                                ToolErrorKind::ToolReportedError,
                                format!("reading `{uri}` failed: {why}"),
                            )
                        })
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plugin_file_that_cannot_be_read_is_named() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("config.yml");
        let p = path.display();
        let said = |path: &Path| read_capped(path).expect_err("unreadable").to_string();
        assert_eq!(said(&path), format!("{p}: No such file or directory"));
        std::fs::write(&path, [b'a', 0xff]).expect("write");
        assert_eq!(
            said(&path),
            format!("{p}: not UTF-8: invalid utf-8 sequence of 1 bytes from index 1")
        );
        std::fs::write(&path, vec![b'a'; (1 << 20) + 1]).expect("write");
        assert_eq!(said(&path), format!("{p}: larger than 1 MB, not read"));
        let name = LoadError::Name {
            name: "a b".into(),
            file: path.clone(),
        };
        assert_eq!(
            name.to_string(),
            format!("plugin name `a b` may only use letters, digits, - and _ ({p})")
        );
    }
}
