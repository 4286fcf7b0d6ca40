//! `nop exec --json` (and `--events codex`): the run's events as `codex exec --json`'s JSONL:
//! `thread.started` (the session id is the thread id), `turn.started`, an item per thing the
//! agent did — `agent_message`, `command_execution` (`shell`), `file_change` (`write-file`,
//! `edit-file`), `mcp_tool_call` (every other tool: a plugin's under its server, nop's own
//! under `nop`), `todo_list` (the plan), `error` (a warning) — and `turn.completed` with the
//! usage, or `turn.failed`.

use std::collections::HashMap;
use std::io::Write;

use serde_json::{Value, json};

use crate::cli::term::style::json_safe;
use nop::protocol::TaskStatus;
use nop::protocol::events::{Event, RunStatus};

/// The Codex JSONL renderer.
#[derive(Default)]
pub struct CodexJson {
    /// The answer streamed since the request went out.
    text: String,
    next_item: u64,
    /// A tool call's item id and its arguments, until its result.
    calls: HashMap<String, (String, Value)>,
    /// The plan's item, once there is one.
    plan: Option<String>,
    usage: (u64, u64, u64),
}

impl CodexJson {
    pub fn event(&mut self, event: &Event) {
        for line in self.lines(event) {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{}", json_safe(line.to_string()));
            let _ = out.flush();
        }
    }

    fn item_id(&mut self) -> String {
        self.next_item += 1;
        format!("item_{}", self.next_item - 1)
    }

    fn lines(&mut self, event: &Event) -> Vec<Value> {
        match event {
            Event::SessionStarted { session_id, .. } => vec![
                json!({"type": "thread.started", "thread_id": session_id}),
                json!({"type": "turn.started"}),
            ],
            Event::Text { delta } => {
                self.text.push_str(delta);
                Vec::new()
            }
            Event::TurnStarted { .. } | Event::Retrying { .. } | Event::TextWasCalls { .. } => {
                self.text.clear();
                Vec::new()
            }
            Event::Usage {
                input_tokens,
                output_tokens,
                cache_read_tokens,
                ..
            } => {
                self.usage.0 += input_tokens;
                self.usage.1 += cache_read_tokens;
                self.usage.2 += output_tokens;
                self.message()
            }
            Event::ToolCall {
                id,
                name,
                arguments,
            } => self.call(id, name, arguments),
            Event::ToolResult {
                id,
                name,
                ok,
                output,
                change,
                outcome,
                ..
            } => {
                let exit_code = outcome.as_ref().and_then(|o| o.exit_code);
                vec![self.tool_result(id, name, *ok, output, change.as_ref(), exit_code)]
            }
            Event::PlanUpdated { plan } => vec![self.plan(plan)],
            Event::Warning { message } | Event::Untrusted { message, .. } => {
                let item = self.item_id();
                vec![completed(
                    &item,
                    json!({"type": "error", "message": message}),
                )]
            }
            Event::Result(outcome) => self.ended(outcome),
            _ => Vec::new(),
        }
    }

    /// A tool call's item, whole now that it ended.
    fn tool_result(
        &mut self,
        id: &str,
        name: &str,
        ok: bool,
        output: &str,
        change: Option<&nop::protocol::events::FileChange>,
        exit_code: Option<i32>,
    ) -> Value {
        let (item, arguments) = self
            .calls
            .remove(id)
            .unwrap_or_else(|| (self.item_id(), Value::Null));
        let detail = match name {
            "shell" => json!({
                "type": "command_execution",
                "command": arguments["command"].as_str().unwrap_or_default(),
                "aggregated_output": output,
                "exit_code": exit_code,
                "status": match (ok, exit_code) {
                    (true, Some(0)) => "completed",
                    (true, _) => "failed",
                    (false, _) => "declined",
                },
            }),
            "write-file" | "edit-file" => {
                let path = change.map_or_else(
                    || arguments["path"].as_str().unwrap_or_default().to_string(),
                    |c| c.path.clone(),
                );
                let kind = match change {
                    Some(c) if c.before.is_none() => "add",
                    _ => "update",
                };
                json!({
                    "type": "file_change",
                    "changes": [{"path": path, "kind": kind}],
                    "status": if ok { "completed" } else { "failed" },
                })
            }
            _ => {
                let (server, tool) = name.split_once('.').unwrap_or(("nop", name));
                let (result, error) = if ok {
                    let content = json!([{"type": "text", "text": output}]);
                    (
                        json!({"content": content, "structured_content": null}),
                        Value::Null,
                    )
                } else {
                    (Value::Null, json!({"message": output}))
                };
                json!({
                    "type": "mcp_tool_call",
                    "server": server,
                    "tool": tool,
                    "arguments": arguments,
                    "result": result,
                    "error": error,
                    "status": if ok { "completed" } else { "failed" },
                })
            }
        };
        completed(&item, detail)
    }

    /// The plan as a `todo_list` item: started the first time, updated after.
    fn plan(&mut self, plan: &nop::protocol::Plan) -> Value {
        let items: Vec<Value> = plan
            .tasks
            .iter()
            .map(|t| json!({"text": t.title, "completed": t.status == TaskStatus::Completed}))
            .collect();
        let detail = json!({"type": "todo_list", "items": items});
        match &self.plan {
            Some(item) => with_item("item.updated", item, detail),
            None => {
                let item = self.item_id();
                self.plan = Some(item.clone());
                with_item("item.started", &item, detail)
            }
        }
    }

    /// The run's end: what was still said, the question it waits on, and how the turn ended.
    fn ended(&mut self, outcome: &nop::protocol::events::RunOutcome) -> Vec<Value> {
        let mut lines = self.message();
        if let Some(question) = &outcome.question {
            let item = self.item_id();
            lines.push(completed(
                &item,
                json!({"type": "agent_message", "text": question}),
            ));
        }
        let (input, cached, output) = self.usage;
        lines.push(match outcome.status {
            RunStatus::Completed | RunStatus::WaitingInput => json!({
                "type": "turn.completed",
                "usage": {"input_tokens": input, "cached_input_tokens": cached, "output_tokens": output},
            }),
            _ => json!({
                "type": "turn.failed",
                "error": {"message": outcome.final_message},
            }),
        });
        lines
    }

    /// The answer streamed so far as an `agent_message` item, when there is one.
    fn message(&mut self) -> Vec<Value> {
        if self.text.trim().is_empty() {
            self.text.clear();
            return Vec::new();
        }
        let text = std::mem::take(&mut self.text);
        let item = self.item_id();
        vec![completed(
            &item,
            json!({"type": "agent_message", "text": text}),
        )]
    }

    /// A tool call: a command's item starts now (the others are whole when they end).
    fn call(&mut self, id: &str, name: &str, arguments: &Value) -> Vec<Value> {
        let item = self.item_id();
        self.calls
            .insert(id.to_string(), (item.clone(), arguments.clone()));
        if name != "shell" {
            return Vec::new();
        }
        vec![with_item(
            "item.started",
            &item,
            json!({
                "type": "command_execution",
                "command": arguments["command"].as_str().unwrap_or_default(),
                "aggregated_output": "",
                "exit_code": null,
                "status": "in_progress",
            }),
        )]
    }
}

/// An `item.completed` line.
fn completed(item: &str, detail: Value) -> Value {
    with_item("item.completed", item, detail)
}

/// A line of `kind` about item `item` with its `detail` (its `type` and fields).
fn with_item(kind: &str, item: &str, detail: Value) -> Value {
    let mut fields = serde_json::Map::new();
    fields.insert("id".into(), item.into());
    if let Value::Object(detail) = detail {
        fields.extend(detail);
    }
    json!({"type": kind, "item": Value::Object(fields)})
}
