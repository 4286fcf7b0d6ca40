//! The MCP client, through `rmcp` (stdio child process), behind [`super::McpSession`].

use std::path::Path;

use futures_util::future::BoxFuture;
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use serde_json::Value;

use super::{McpConfig, McpSession, McpToolInfo};

pub struct RmcpSession {
    client: RunningService<rmcp::RoleClient, ()>,
}

/// Starts the server and lists its tools.
pub async fn connect(
    dir: &Path,
    config: &McpConfig,
) -> Result<(RmcpSession, Vec<McpToolInfo>), String> {
    let mut command = tokio::process::Command::new(&config.command);
    command
        .args(&config.args)
        .envs(&config.env)
        .current_dir(dir)
        .stderr(std::process::Stdio::null());
    let transport = TokioChildProcess::new(command)
        .map_err(|e| format!("cannot start `{}`: {e}", config.command))?;
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
    Ok((RmcpSession { client }, infos))
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
