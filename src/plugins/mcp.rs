//! The MCP client, through `rmcp` (stdio child process), behind [`super::McpSession`].
// Roots are deprecated by a draft of the protocol (SEP-2577) that rmcp follows, but the servers
// users run today (`@modelcontextprotocol/server-filesystem`) ask for them.
#![allow(deprecated)]

use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, ListRootsResult,
    ReadResourceRequestParams, Root, RootsCapabilities,
};
use rmcp::service::{RequestContext, RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use serde_json::Value;
use tokio::io::AsyncReadExt;

use super::server::{self, WorkDir};
use super::{McpConfig, McpServerInfo, McpSession, McpToolInfo, content};
use crate::tools::SandboxSettings;

/// What nop keeps of a server's stderr: its last bytes, quoted when it fails to start.
const STDERR_TAIL: usize = 8 * 1024;
/// At most this much of a server's stderr goes to the log; after it, only the tail is kept.
const STDERR_LOGGED: usize = 64 * 1024;

/// The last [`STDERR_TAIL`] bytes a server wrote to stderr.
pub type StderrTail = Arc<Mutex<String>>;

pub struct RmcpSession {
    client: RunningService<RoleClient, Client>,
    /// A stdio server's working directory, removed with the session.
    _dir: Option<WorkDir>,
}

/// nop as an MCP client: it offers the repository root as its one root.
struct Client {
    root: String,
}

impl rmcp::ClientHandler for Client {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        capabilities.roots = Some(RootsCapabilities::default());
        ClientConfig::new(
            capabilities,
            Implementation::new("nop", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn list_roots(
        &self,
        _context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, rmcp::ErrorData> {
        let mut root = Root::new(self.root.clone());
        root.name = Some("repository".into());
        Ok(ListRootsResult::new(vec![root]))
    }
}

/// `file://` and the path, with what a URI may not hold percent-encoded.
fn file_uri(path: &Path) -> String {
    let mut uri = String::from("file://");
    for b in path.to_string_lossy().bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'/' | b'-' | b'_' | b'.' | b'~' => {
                uri.push(b as char)
            }
            _ => uri.push_str(&format!("%{b:02X}")),
        }
    }
    uri
}

/// Starts plugin `name`'s server for the repository at `root` (unconfined, with the environment
/// and in the directory `server` chooses), its stderr kept in `tail` and the log, or connects to
/// a remote one (`url`); lists its tools and resources. With the launch of a stdio server.
pub async fn connect(
    name: &str,
    root: &Path,
    settings: &SandboxSettings,
    config: &McpConfig,
    tail: StderrTail,
) -> Result<(RmcpSession, McpServerInfo, Option<server::Launch>), String> {
    let env: Vec<_> = std::env::vars_os().collect();
    let root_uri = file_uri(&root.canonicalize().unwrap_or_else(|_| root.to_path_buf()));
    if config.url.is_some() {
        if !config.command.is_empty() {
            return Err("give either `command` (a local server) or `url` (a remote one)".into());
        }
        let remote = server::remote(settings, config, &env, root)?;
        let (session, info) = connect_remote(name, &remote, root_uri)
            .await
            .map_err(|e| e.said(&remote.url, config))?;
        return Ok((session, info, None));
    }
    if config.command.is_empty() {
        return Err("no `command` (a local server) or `url` (a remote one)".into());
    }
    let launch = server::launch(settings, config, &env, root)?;
    // A configured `cwd` is the user's choice; otherwise nothing of the repository.
    let dir = match &launch.cwd {
        Some(cwd) => WorkDir::given(cwd),
        None => server::work_dir(root, &env),
    };
    let mut command = tokio::process::Command::new(&launch.command);
    command
        .args(&launch.args)
        .env_clear()
        .envs(launch.env.clone())
        .current_dir(dir.path());
    // `TokioChildProcess::new` would make stderr inherited whatever the command says.
    let (transport, stderr) = TokioChildProcess::builder(command)
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start `{}`: {e}", launch.command))?;
    let reader = stderr.map(|stderr| tokio::spawn(keep_stderr(name.to_string(), stderr, tail)));
    let handshake = async {
        let client = Client { root: root_uri }
            .serve(transport)
            .await
            .map_err(|e| format!("the MCP handshake failed: {e}"))?;
        let info = describe(name, &client).await?;
        Ok::<_, String>((client, info))
    };
    match handshake.await {
        Ok((client, info)) => Ok((
            RmcpSession {
                client,
                _dir: Some(dir),
            },
            info,
            Some(launch),
        )),
        Err(why) => {
            // The server exited: let its last words reach the tail.
            if let Some(reader) = reader {
                let _ = tokio::time::timeout(Duration::from_secs(1), reader).await;
            }
            Err(why)
        }
    }
}

/// Why connecting to a remote server failed: a plain message, or the handshake's error (said
/// by [`RemoteError::said`], which knows the configuration).
enum RemoteError {
    Said(String),
    Handshake(Box<rmcp::service::ClientInitializeError>),
}

impl From<String> for RemoteError {
    fn from(said: String) -> Self {
        RemoteError::Said(said)
    }
}

impl RemoteError {
    /// The error for the user: an HTTP failure as its status and what to check (the token's
    /// variable, the headers, the URL), never the library's type names, a header's value or the
    /// token.
    fn said(self, url: &str, config: &McpConfig) -> String {
        match self {
            RemoteError::Said(said) => said,
            RemoteError::Handshake(error) => {
                let inner = match error.as_ref() {
                    rmcp::service::ClientInitializeError::TransportError { error, .. } => {
                        http_failure(url, error.error.as_ref(), config)
                    }
                    _ => None,
                };
                inner.unwrap_or_else(|| format!("the MCP handshake with {url} failed: {error}"))
            }
        }
    }
}

/// An HTTP failure of the streamable HTTP transport found in `error` or its sources, said.
fn http_failure(
    url: &str,
    error: &(dyn std::error::Error + 'static),
    config: &McpConfig,
) -> Option<String> {
    use rmcp::transport::streamable_http_client::StreamableHttpError;
    let mut at = Some(error);
    let found = loop {
        let e = at?;
        if let Some(found) = e.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
            break found;
        }
        at = e.source();
    };
    let status = match found {
        StreamableHttpError::AuthRequired(_) => 401,
        StreamableHttpError::InsufficientScope(_) => 403,
        StreamableHttpError::HttpStatus(e) => e.status,
        StreamableHttpError::UnexpectedServerResponse(text) => text
            .strip_prefix("HTTP ")
            .and_then(|t| t.get(..3))
            .and_then(|code| code.parse().ok())?,
        StreamableHttpError::Client(e) if e.is_connect() => {
            return Some(format!(
                "cannot connect to {url}: is the server running, and is `url` right?"
            ));
        }
        StreamableHttpError::Client(e) if e.is_timeout() => {
            return Some(format!("{url} did not answer in time"));
        }
        StreamableHttpError::Client(e) => e.status()?.as_u16(),
        _ => return None,
    };
    let reason = reqwest::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .map(|r| format!(" {r}"))
        .unwrap_or_default();
    let check = match status {
        401 => format!(
            "the server refused the credentials: {}",
            what_to_check(config)
        ),
        403 => format!(
            "the credentials are not allowed this: {}, and what it grants",
            what_to_check(config)
        ),
        404 | 405 => "check `url`: is it the server's MCP endpoint?".to_string(),
        429 | 500.. => "the server is busy or failing; try again later".to_string(),
        _ => "check `url` and the server".to_string(),
    };
    Some(format!("{url} answered HTTP {status}{reason}: {check}"))
}

/// Where a remote server's credentials come from, for the user to check: the variable of
/// `bearer_token_env_var`, the headers and the variables their values name; never a value.
fn what_to_check(config: &McpConfig) -> String {
    if let Some(var) = &config.bearer_token_env_var {
        return format!("check the token in {var} (bearer_token_env_var)");
    }
    if config.headers.is_empty() {
        return "it was sent no token; set bearer_token_env_var, or a header \
                (headers: {Authorization: \"Bearer ${VAR}\"})"
            .to_string();
    }
    let headers: Vec<String> = config
        .headers
        .iter()
        .map(|(name, value)| {
            let vars: Vec<&str> = value
                .split("${")
                .skip(1)
                .filter_map(|v| v.split_once('}').map(|(var, _)| var))
                .collect();
            if vars.is_empty() {
                name.clone()
            } else {
                format!("{name} (from {})", vars.join(", "))
            }
        })
        .collect();
    format!("check the headers it is sent: {}", headers.join("; "))
}

/// Connects to a remote server over streamable HTTP. Errors name the URL, never a header's
/// value or the token.
async fn connect_remote(
    name: &str,
    remote: &server::Remote,
    root_uri: String,
) -> Result<(RmcpSession, McpServerInfo), RemoteError> {
    use reqwest::header::{HeaderName, HeaderValue};
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let mut headers = std::collections::HashMap::new();
    for (key, value) in &remote.headers {
        let key = HeaderName::from_bytes(key.as_bytes())
            .map_err(|_| format!("headers: `{key}` is not a valid header name"))?;
        let mut value = HeaderValue::from_str(value)
            .map_err(|_| format!("headers.{key}: not a valid header value"))?;
        value.set_sensitive(true);
        headers.insert(key, value);
    }
    let mut config =
        StreamableHttpClientTransportConfig::with_uri(remote.url.as_str()).custom_headers(headers);
    if let Some(token) = &remote.bearer {
        config = config.auth_header(token.clone());
    }
    let http = crate::providers::http_client(Duration::from_secs(10), remote.url.as_str())
        .map_err(|e| format!("{}: {e}", remote.url))?;
    let transport = StreamableHttpClientTransport::with_client(http, config);
    let client = Client { root: root_uri }
        .serve(transport)
        .await
        .map_err(|e| RemoteError::Handshake(Box::new(e)))?;
    let info = describe(name, &client).await?;
    Ok((RmcpSession { client, _dir: None }, info))
}

/// A started server's tools, and its resources when it offers them.
async fn describe(
    name: &str,
    client: &RunningService<RoleClient, Client>,
) -> Result<McpServerInfo, String> {
    let tools = client
        .list_all_tools()
        .await
        .map_err(|e| format!("tools/list failed: {e}"))?;
    let offers_resources = client
        .peer_info()
        .is_some_and(|info| info.capabilities.resources.is_some());
    let resources = if offers_resources {
        // A server that offers resources but cannot list them can still read them.
        Some(match client.list_all_resources().await {
            Ok(list) => list
                .iter()
                .filter_map(|r| serde_json::to_value(r).ok())
                .collect(),
            Err(e) => {
                tracing::warn!(op = "plugin", plugin = %name, "resources/list failed: {e}");
                Vec::new()
            }
        })
    } else {
        None
    };
    let tools = tools
        .into_iter()
        .map(|t| McpToolInfo {
            name: t.name.to_string(),
            description: t.description.map(|d| d.to_string()).unwrap_or_default(),
            schema: Value::Object((*t.input_schema).clone()),
        })
        .collect();
    Ok(McpServerInfo { tools, resources })
}

/// Reads a server's stderr to its end: the first [`STDERR_LOGGED`] bytes to the log, line by
/// line, the last [`STDERR_TAIL`] in `tail`. Never to the terminal.
async fn keep_stderr(name: String, mut stderr: tokio::process::ChildStderr, tail: StderrTail) {
    let mut buf = vec![0u8; 4096];
    let mut logged = 0usize;
    let mut partial = String::new();
    loop {
        let n = match stderr.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let text = String::from_utf8_lossy(&buf[..n]);
        if let Ok(mut t) = tail.lock() {
            t.push_str(&text);
            if t.len() > STDERR_TAIL {
                let mut cut = t.len() - STDERR_TAIL;
                while !t.is_char_boundary(cut) {
                    cut += 1;
                }
                t.drain(..cut);
            }
        }
        if logged >= STDERR_LOGGED {
            continue;
        }
        logged += n;
        partial.push_str(&text);
        while let Some(end) = partial.find('\n') {
            let line: String = partial[..end].chars().take(1000).collect();
            tracing::info!(op = "plugin", plugin = %name, "stderr: {line}");
            partial.drain(..=end);
        }
        if logged >= STDERR_LOGGED {
            tracing::info!(
                op = "plugin",
                plugin = %name,
                "stderr: more than {STDERR_LOGGED} bytes; the rest is not logged"
            );
        }
    }
    if !partial.is_empty() && logged < STDERR_LOGGED {
        let line: String = partial.chars().take(1000).collect();
        tracing::info!(op = "plugin", plugin = %name, "stderr: {line}");
    }
}

impl McpSession for RmcpSession {
    fn call<'a>(
        &'a self,
        tool: &'a str,
        arguments: Value,
    ) -> BoxFuture<'a, Result<(String, bool), String>> {
        Box::pin(async move {
            let mut params = CallToolRequestParams::new(tool.to_string());
            if let Value::Object(map) = arguments {
                params = params.with_arguments(map);
            }
            let result = self
                .client
                .call_tool(params)
                .await
                .map_err(|e| e.to_string())?;
            let blocks: Vec<Value> = result
                .content
                .iter()
                .filter_map(|c| serde_json::to_value(c).ok())
                .collect();
            let text = content::render(&blocks, result.structured_content.as_ref());
            Ok((text, result.is_error.unwrap_or(false)))
        })
    }

    fn read_resource<'a>(&'a self, uri: &'a str) -> BoxFuture<'a, Result<String, String>> {
        Box::pin(async move {
            let result = self
                .client
                .read_resource(ReadResourceRequestParams::new(uri))
                .await
                .map_err(|e| e.to_string())?;
            let parts: Vec<String> = result
                .contents
                .iter()
                .filter_map(|c| serde_json::to_value(c).ok())
                .map(|c| content::resource(&c))
                .collect();
            Ok(parts.join("\n"))
        })
    }
}

#[cfg(test)]
mod tests {
    use rmcp::transport::streamable_http_client::{HttpStatusError, StreamableHttpError};

    use super::{McpConfig, http_failure};

    #[test]
    fn an_http_failure_is_its_status_and_what_to_check() {
        let url = "https://mcp.example/mcp";
        let said = |error: StreamableHttpError<reqwest::Error>, config: &McpConfig| {
            http_failure(url, &error, config)
        };
        let mut config = McpConfig::default();
        // A 401 without a challenge, from a server that sent no token.
        let unauthorised =
            || StreamableHttpError::UnexpectedServerResponse("HTTP 401 Unauthorized: {}".into());
        assert_eq!(
            said(unauthorised(), &config).as_deref(),
            Some(
                "https://mcp.example/mcp answered HTTP 401 Unauthorized: the server refused the \
                 credentials: it was sent no token; set bearer_token_env_var, or a header \
                 (headers: {Authorization: \"Bearer ${VAR}\"})"
            )
        );
        config
            .headers
            .insert("Authorization".into(), "Bearer ${GITHUB_TOKEN}".into());
        config.headers.insert("X-Team".into(), "blue".into());
        assert_eq!(
            said(unauthorised(), &config).as_deref(),
            Some(
                "https://mcp.example/mcp answered HTTP 401 Unauthorized: the server refused the \
                 credentials: check the headers it is sent: Authorization (from GITHUB_TOKEN); \
                 X-Team"
            )
        );
        assert_eq!(
            said(
                StreamableHttpError::HttpStatus(HttpStatusError::new(503, None)),
                &config
            )
            .as_deref(),
            Some(
                "https://mcp.example/mcp answered HTTP 503 Service Unavailable: the server is \
                 busy or failing; try again later"
            )
        );
        assert_eq!(
            said(StreamableHttpError::TransportChannelClosed, &config),
            None
        );
    }

    #[test]
    fn a_root_is_a_file_uri() {
        assert_eq!(
            super::file_uri(std::path::Path::new("/home/a b/répo")),
            "file:///home/a%20b/r%C3%A9po"
        );
    }
}
