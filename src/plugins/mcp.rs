//! The MCP client, through `rmcp` (stdio child process), behind [`super::McpSession`].

use std::path::Path;
use std::process::Stdio;

use futures_util::future::BoxFuture;
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use serde_json::Value;

use super::server::{self, WorkDir};
use super::{McpConfig, McpSession, McpToolInfo};
use crate::tools::SandboxSettings;

pub struct RmcpSession {
    client: RunningService<rmcp::RoleClient, ()>,
    /// The server's working directory, removed with the session.
    _dir: WorkDir,
}

/// Starts the server of the repository at `root` (unconfined, with the environment and in the
/// directory `server` chooses) and lists its tools.
pub async fn connect(
    root: &Path,
    settings: &SandboxSettings,
    config: &McpConfig,
) -> Result<(RmcpSession, Vec<McpToolInfo>), String> {
    let env: Vec<_> = std::env::vars_os().collect();
    let launch = server::launch(settings, config, &env)?;
    let dir = server::work_dir(root, &env);
    let mut command = tokio::process::Command::new(&launch.command);
    command
        .args(&launch.args)
        .env_clear()
        .envs(launch.env)
        .current_dir(dir.path());
    // `TokioChildProcess::new` would make stderr inherited whatever the command says.
    let (transport, _) = TokioChildProcess::builder(command)
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start `{}`: {e}", launch.command))?;
    let client = ().serve(transport).await.map_err(|e| format!("the MCP handshake failed: {e}"))?;
    let tools = client
        .list_all_tools()
        .await
        .map_err(|e| format!("tools/list failed: {e}"))?;
    let infos = tools
        .into_iter()
        .map(|t| McpToolInfo {
            name: t.name.to_string(),
            description: t.description.map(|d| d.to_string()).unwrap_or_default(),
            schema: Value::Object((*t.input_schema).clone()),
        })
        .collect();
    Ok((RmcpSession { client, _dir: dir }, infos))
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
            let text: Vec<String> = result
                .content
                .iter()
                .filter_map(|c| c.as_text().map(|t| t.text.clone()))
                .collect();
            let text = if text.is_empty() {
                result
                    .structured_content
                    .map(|v| v.to_string())
                    .unwrap_or_default()
            } else {
                text.join("\n")
            };
            Ok((text, result.is_error.unwrap_or(false)))
        })
    }
}
