//! Anthropic Messages (`POST {base}/v1/messages`, `stream: true`).
//!
//! System messages go to the `system` parameter; tool results become `tool_result` blocks of a
//! user turn; consecutive turns of one role are merged, as the API requires alternation.

use serde_json::{Value, json};

use super::sse::SseEvent;
use super::{ChatRequest, ModelResponse, PartialCall, ProviderError, StreamDecoder, StreamEvent};
use crate::protocol::Role;

/// The prompt-cache mark (`cache_control`), at most four per request.
fn cache_mark() -> Value {
    json!({"type": "ephemeral"})
}

pub(super) fn request_body(
    model: &str,
    max_tokens: u32,
    request: ChatRequest<'_>,
    cache: bool,
) -> Value {
    let names = super::WireNames::new(request.tools);
    let mut system = Vec::new();
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for m in request.messages {
        let (role, blocks) = match m.role {
            // The leading system messages are the `system` parameter; a later one (memory
            // recalled on resume) stays where it is, as a user block, so the prefix the prompt
            // cache holds is the same for every request of the session.
            Role::System if turns.is_empty() => {
                system.push(m.content.clone());
                continue;
            }
            Role::System => (
                "user",
                text_block(&format!(
                    "<system-reminder>\n{}\n</system-reminder>",
                    m.content
                )),
            ),
            Role::User => ("user", text_block(&m.content)),
            Role::Assistant => {
                let mut blocks = text_block(&m.content);
                for call in &m.tool_calls {
                    let input = match &call.arguments {
                        Value::Object(_) => call.arguments.clone(),
                        // The API takes only objects; keep what the model sent, visibly.
                        other => json!({"invalid_arguments": other}),
                    };
                    blocks.push(json!({"type": "tool_use", "id": call.id, "name": names.wire(&call.name), "input": input}));
                }
                ("assistant", blocks)
            }
            Role::Tool => {
                let mut block = json!({
                    "type": "tool_result",
                    "tool_use_id": m.tool_call.as_ref().map(|c| c.id.as_str()).unwrap_or_default(),
                    "content": m.content,
                });
                if m.is_error == Some(true) {
                    block["is_error"] = Value::Bool(true);
                }
                ("user", vec![block])
            }
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last, content)) if *last == role => content.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    if cache {
        mark_latest_turns(&mut turns);
    }
    let messages: Vec<Value> = turns
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": plain_if_one_text(content)}))
        .collect();
    let mut body = json!({
        "model": model,
        "max_tokens": max_tokens,
        "messages": messages,
        "stream": true,
    });
    let mut tools: Vec<Value> = request
        .tools
        .iter()
        .map(|t| json!({"name": names.wire(&t.name), "description": t.description, "input_schema": t.parameters}))
        .collect();
    if !system.is_empty() && cache {
        // Tools come before the system prompt in the cached prefix: this one mark holds both.
        let mut block = json!({"type": "text", "text": system.join("\n\n")});
        block["cache_control"] = cache_mark();
        body["system"] = json!([block]);
    } else if !system.is_empty() {
        // A plain string when nothing is cached: LiteLLM's translation to a chat-completions
        // server refuses the block array (HTTP 500).
        body["system"] = Value::String(system.join("\n\n"));
    } else if cache && let Some(last) = tools.last_mut() {
        last["cache_control"] = cache_mark();
    }
    if !tools.is_empty() {
        body["tools"] = Value::Array(tools);
    }
    body
}

/// The rolling marks: the end of the conversation (written for the next request), and the end
/// of the user turn before the last answer (where the previous request put its mark, so what it
/// wrote is read back exactly, however many blocks the last turn added).
fn mark_latest_turns(turns: &mut [(&'static str, Vec<Value>)]) {
    let users: Vec<usize> = turns
        .iter()
        .enumerate()
        .filter(|(_, (role, _))| *role == "user")
        .map(|(i, _)| i)
        .collect();
    let last = turns.len().checked_sub(1);
    let previous = users.iter().rev().find(|i| Some(**i) != last).copied();
    for index in [previous, last].into_iter().flatten() {
        if let Some(block) = turns[index].1.last_mut() {
            block["cache_control"] = cache_mark();
        }
    }
}

/// A turn that is one unmarked text block goes as a plain string: LiteLLM's `/v1/messages` in
/// front of a chat-completions server (llama.cpp) passes a block array on to a chat template
/// that fails on it after HTTP 200, and the reply comes back empty.
fn plain_if_one_text(mut content: Vec<Value>) -> Value {
    let plain = content.len() == 1
        && content[0].get("type").and_then(Value::as_str) == Some("text")
        && content[0].get("cache_control").is_none();
    match content.pop() {
        Some(Value::Object(mut block)) if plain => block.remove("text").unwrap_or_default(),
        Some(last) => {
            content.push(last);
            Value::Array(content)
        }
        None => Value::Array(content),
    }
}

fn text_block(text: &str) -> Vec<Value> {
    if text.is_empty() {
        Vec::new()
    } else {
        vec![json!({"type": "text", "text": text})]
    }
}

#[derive(Debug)]
enum Block {
    Text,
    Tool(PartialCall),
    Other,
}

#[derive(Debug, Default)]
pub(super) struct Decoder {
    response: ModelResponse,
    blocks: Vec<(u64, Block)>,
    started: bool,
    stopped: bool,
    /// The prompt's tokens neither read from nor written to the cache.
    uncached: u64,
}

impl Decoder {
    /// `usage` of `message_start` or `message_delta` (which may repeat it, cumulatively):
    /// Anthropic's `input_tokens` are the uncached part only, so the whole prompt is the sum
    /// with `cache_creation_input_tokens` and `cache_read_input_tokens`.
    fn read_usage(&mut self, usage: &Value) {
        // A later event that says 0 (a compatible server's `message_delta`) undoes no count.
        let count = |key: &str| usage.get(key).and_then(Value::as_u64).filter(|n| *n > 0);
        let tokens = &mut self.response.usage;
        if let Some(n) = count("input_tokens") {
            self.uncached = n;
        }
        if let Some(n) = count("cache_creation_input_tokens") {
            tokens.cache_write_tokens = n;
        }
        if let Some(n) = count("cache_read_input_tokens") {
            tokens.cache_read_tokens = n;
        }
        if let Some(n) = count("output_tokens") {
            tokens.output_tokens = n;
        }
        tokens.input_tokens = self.uncached + tokens.cache_write_tokens + tokens.cache_read_tokens;
    }
}

impl StreamDecoder for Decoder {
    #[expect(clippy::too_many_lines, reason = "a debt: listed in AGENTS.md")]
    fn event(
        &mut self,
        event: &SseEvent,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<(), ProviderError> {
        if event.data.trim().is_empty() {
            return Ok(());
        }
        let data: Value = serde_json::from_str(&event.data).map_err(|e| {
            ProviderError::Decode(format!(
                "{e} in stream event `{}`",
                event.event.as_deref().unwrap_or("?")
            ))
        })?;
        let kind = data
            .get("type")
            .and_then(Value::as_str)
            .or(event.event.as_deref())
            .unwrap_or_default();
        match kind {
            "message_start" => {
                self.started = true;
                if let Some(usage) = data.pointer("/message/usage") {
                    self.read_usage(usage);
                }
            }
            "content_block_start" => {
                let index = data.get("index").and_then(Value::as_u64).unwrap_or(0);
                let block = data.get("content_block");
                let block = match block.and_then(|b| b.get("type")).and_then(Value::as_str) {
                    Some("text") => {
                        if let Some(text) =
                            block.and_then(|b| b.get("text")).and_then(Value::as_str)
                            && !text.is_empty()
                        {
                            self.response.text.push_str(text);
                            on_event(StreamEvent::Text(text.to_string()));
                        }
                        Block::Text
                    }
                    Some("tool_use") => Block::Tool(PartialCall {
                        id: block
                            .and_then(|b| b.get("id"))
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_string(),
                        name: block
                            .and_then(|b| b.get("name"))
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_string(),
                        arguments: String::new(),
                    }),
                    _ => Block::Other,
                };
                self.blocks.push((index, block));
            }
            "content_block_delta" => {
                let index = data.get("index").and_then(Value::as_u64).unwrap_or(0);
                let delta = data.get("delta");
                let block = self
                    .blocks
                    .iter_mut()
                    .rev()
                    .find(|(i, _)| *i == index)
                    .map(|(_, b)| b);
                match (
                    delta.and_then(|d| d.get("type")).and_then(Value::as_str),
                    block,
                ) {
                    (Some("text_delta"), _) => {
                        if let Some(text) =
                            delta.and_then(|d| d.get("text")).and_then(Value::as_str)
                        {
                            self.response.text.push_str(text);
                            on_event(StreamEvent::Text(text.to_string()));
                        }
                    }
                    (Some("input_json_delta"), Some(Block::Tool(call))) => {
                        if let Some(piece) = delta
                            .and_then(|d| d.get("partial_json"))
                            .and_then(Value::as_str)
                        {
                            call.arguments.push_str(piece);
                        }
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(reason) = data.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.response.stop_reason = Some(reason.to_string());
                }
                if let Some(usage) = data.get("usage") {
                    self.read_usage(usage);
                }
            }
            "message_stop" => self.stopped = true,
            "error" => {
                let message = data
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .map_or_else(|| data.to_string(), str::to_string);
                return Err(ProviderError::Stream(message));
            }
            _ => {}
        }
        Ok(())
    }

    fn finished(&self) -> bool {
        self.stopped
    }

    fn into_response(self: Box<Self>) -> Result<ModelResponse, ProviderError> {
        let mut response = self.response;
        response.tool_calls = self
            .blocks
            .into_iter()
            .filter_map(|(_, b)| match b {
                Block::Tool(call) => Some(call),
                _ => None,
            })
            .enumerate()
            .map(|(i, c)| c.finish(i))
            .collect();
        Ok(response)
    }

    fn text(&self) -> &str {
        &self.response.text
    }

    fn stop_at(&mut self, keep: usize) {
        self.response.text.truncate(keep);
        self.response.stop_reason = Some(super::limits::REPETITION.to_string());
    }

    fn end_of_stream(self: Box<Self>) -> Result<ModelResponse, ProviderError> {
        if self.started {
            Err(ProviderError::Truncated("no message_stop".into()))
        } else {
            Err(ProviderError::EmptyStream)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Message, ToolCall};
    use chrono::Utc;
    use pretty_assertions::assert_eq;

    #[test]
    fn tool_results_become_user_blocks_and_turns_alternate() {
        let now = Utc::now();
        let call = ToolCall {
            id: "t1".into(),
            name: "shell".into(),
            arguments: json!({"command": "ls"}),
            extra: Default::default(),
        };
        let mut assistant = Message::new(Role::Assistant, "", now);
        assistant.tool_calls.push(call.clone());
        let mut result = Message::new(Role::Tool, "a.txt", now);
        result.tool_call = Some(call);
        let messages = vec![
            Message::new(Role::System, "be brief", now),
            Message::new(Role::User, "list", now),
            assistant,
            result,
            Message::new(Role::User, "and now?", now),
        ];
        let body = request_body(
            "m",
            100,
            ChatRequest {
                messages: &messages,
                tools: &[],
                cache_key: None,
            },
            false,
        );
        // Nothing cached: a plain string, as every server takes it.
        assert_eq!(body["system"], "be brief");
        let roles: Vec<&str> = body["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["role"].as_str())
            .collect();
        assert_eq!(roles, vec!["user", "assistant", "user"]);
        // A turn of one text block is a plain string (LiteLLM's `/v1/messages`).
        assert_eq!(body["messages"][0]["content"], "list");
        assert_eq!(body["messages"][2]["content"][0]["type"], "tool_result");
        assert_eq!(body["messages"][2]["content"][1]["text"], "and now?");
        assert_eq!(body["messages"][1]["content"][0]["type"], "tool_use");
    }
}
