//! OpenAI-compatible Chat Completions (`POST {base}/chat/completions`, `stream: true`).
//!
//! Lenient about what compatible servers send: a delta that repeats `id` and `function.name`
//! (llama.cpp) does not concatenate them, a missing `index` falls back to the call's id, usage may
//! come in any chunk, and a stream that ends after `finish_reason` without `[DONE]` is accepted.
//! A 200 stream that carries nothing is an [`ProviderError::EmptyStream`] (retryable).

use serde_json::{Value, json};

use super::sse::SseEvent;
use super::{ChatRequest, ModelResponse, PartialCall, ProviderError, StreamDecoder, StreamEvent};
use crate::protocol::{Role, TokenUsage, ToolCall};

/// `cache_key`: the `prompt_cache_key` to send, if any (OpenAI routes requests with the same
/// key to the same cache; compatible servers ignore it or refuse it, see `Provider`). `cap`:
/// the output cap and the name it goes by (`max_tokens`, or `max_completion_tokens`).
pub(super) fn request_body(
    model: &str,
    request: ChatRequest<'_>,
    cache_key: Option<&str>,
    cap: Option<(&str, u32)>,
) -> Value {
    let names = super::WireNames::new(request.tools);
    let messages: Vec<Value> = request
        .messages
        .iter()
        .map(|m| match m.role {
            Role::System => json!({"role": "system", "content": m.content}),
            Role::User => json!({"role": "user", "content": m.content}),
            Role::Assistant if m.tool_calls.is_empty() => {
                json!({"role": "assistant", "content": m.content})
            }
            Role::Assistant => json!({
                "role": "assistant",
                // Never `null`: llama-cpp-python refuses it with HTTP 500 and LiteLLM turns the
                // request into an empty answer; every server takes "".
                "content": m.content,
                "tool_calls": m.tool_calls.iter().map(|c| wire_call(c, &names)).collect::<Vec<_>>(),
            }),
            Role::Tool => json!({
                "role": "tool",
                "tool_call_id": m.tool_call.as_ref().map(|c| c.id.as_str()).unwrap_or_default(),
                "content": m.content,
            }),
        })
        .collect();
    let mut body = json!({
        "model": model,
        "messages": messages,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    if let Some((field, n)) = cap {
        body[field] = json!(n);
    }
    if let Some(key) = cache_key {
        body["prompt_cache_key"] = Value::String(key.to_string());
    }
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": names.wire(&t.name), "description": t.description, "parameters": t.parameters,
                }})
            })
            .collect();
    }
    body
}

/// `usage` of a chunk: `prompt_tokens` counts the whole prompt, cached tokens included
/// (`prompt_tokens_details.cached_tokens`; DeepSeek-style servers say `prompt_cache_hit_tokens`).
/// OpenAI bills no cache writes.
fn read_usage(usage: &Value, into: &mut TokenUsage) {
    let number = |pointer: &str| usage.pointer(pointer).and_then(Value::as_u64);
    if let Some(n) = number("/prompt_tokens") {
        into.input_tokens = n;
    }
    if let Some(n) = number("/completion_tokens") {
        into.output_tokens = n;
    }
    if let Some(n) = number("/prompt_tokens_details/cached_tokens")
        .or_else(|| number("/prompt_cache_hit_tokens"))
    {
        into.cache_read_tokens = n;
    }
}

fn wire_call(call: &ToolCall, names: &super::WireNames) -> Value {
    let arguments = match &call.arguments {
        // Arguments the model sent as broken JSON go back exactly as they came.
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    };
    json!({"id": call.id, "type": "function", "function": {"name": names.wire(&call.name), "arguments": arguments}})
}

#[derive(Debug, Default)]
pub(super) struct Decoder {
    response: ModelResponse,
    calls: Vec<PartialCall>,
    done: bool,
    received_anything: bool,
}

impl Decoder {
    fn call_slot(&mut self, delta: &Value) -> usize {
        let id = delta.get("id").and_then(Value::as_str).unwrap_or_default();
        if let Some(index) = delta.get("index").and_then(Value::as_u64) {
            let index = index as usize;
            if self.calls.len() <= index {
                self.calls.resize_with(index + 1, PartialCall::default);
            }
            return index;
        }
        // No index: a new id starts a new call, anything else continues the last one.
        match self.calls.iter().position(|c| !id.is_empty() && c.id == id) {
            Some(i) => i,
            None if !id.is_empty() || self.calls.is_empty() => {
                self.calls.push(PartialCall::default());
                self.calls.len() - 1
            }
            None => self.calls.len() - 1,
        }
    }
}

impl StreamDecoder for Decoder {
    fn event(
        &mut self,
        event: &SseEvent,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<(), ProviderError> {
        let data = event.data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        if data.is_empty() {
            return Ok(());
        }
        let chunk: Value = serde_json::from_str(data).map_err(|e| {
            ProviderError::Decode(format!("{e} in stream chunk `{}`", preview(data)))
        })?;
        if let Some(error) = chunk.get("error") {
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .map_or_else(|| error.to_string(), str::to_string);
            return Err(ProviderError::Stream(message));
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            read_usage(usage, &mut self.response.usage);
        }
        let choice = chunk.get("choices").and_then(|c| c.get(0));
        let Some(choice) = choice else {
            return Ok(());
        };
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.response.stop_reason = Some(reason.to_string());
        }
        let Some(delta) = choice.get("delta").or_else(|| choice.get("message")) else {
            return Ok(());
        };
        if let Some(text) = delta.get("content").and_then(Value::as_str)
            && !text.is_empty()
        {
            self.received_anything = true;
            self.response.text.push_str(text);
            on_event(StreamEvent::Text(text.to_string()));
        }
        for call in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            self.received_anything = true;
            let slot = self.call_slot(call);
            let partial = &mut self.calls[slot];
            if let Some(id) = call.get("id").and_then(Value::as_str)
                && partial.id.is_empty()
            {
                partial.id = id.to_string();
            }
            let function = call.get("function");
            if let Some(name) = function.and_then(|f| f.get("name")).and_then(Value::as_str) {
                // Servers that repeat the whole name in every delta must not double it.
                if partial.name.is_empty() {
                    partial.name = name.to_string();
                } else if name != partial.name {
                    partial.name.push_str(name);
                }
            }
            if let Some(args) = function.and_then(|f| f.get("arguments")) {
                match args {
                    Value::String(piece) => partial.arguments.push_str(piece),
                    // Some servers send the arguments as an object, whole.
                    other if !other.is_null() => partial.arguments = other.to_string(),
                    _ => {}
                }
            }
        }
        Ok(())
    }

    fn finished(&self) -> bool {
        self.done
    }

    fn into_response(self: Box<Self>) -> Result<ModelResponse, ProviderError> {
        if !self.received_anything && self.response.stop_reason.is_none() {
            return Err(ProviderError::EmptyStream);
        }
        let mut response = self.response;
        response.tool_calls = self
            .calls
            .into_iter()
            .filter(|c| !c.name.is_empty())
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
        if self.response.stop_reason.is_some() {
            return self.into_response();
        }
        if self.received_anything {
            Err(ProviderError::Truncated(
                "no finish_reason and no [DONE]".into(),
            ))
        } else {
            Err(ProviderError::EmptyStream)
        }
    }
}

fn preview(data: &str) -> String {
    data.chars().take(120).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn decode(frames: &[&str]) -> Result<ModelResponse, ProviderError> {
        let mut decoder: Box<dyn StreamDecoder> = Box::new(Decoder::default());
        let mut sink = |_: StreamEvent| {};
        for data in frames {
            decoder.event(
                &SseEvent {
                    event: None,
                    data: (*data).to_string(),
                },
                &mut sink,
            )?;
            if decoder.finished() {
                return decoder.into_response();
            }
        }
        decoder.end_of_stream()
    }

    #[test]
    fn llama_cpp_repeated_ids_and_names_are_not_concatenated() -> Result<(), ProviderError> {
        let frames = [
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"get_weather","arguments":"{\"ci"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"get_weather","arguments":"ty\":\"Oslo\"}"}}]}}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}"#,
            "[DONE]",
        ];
        let response = decode(&frames)?;
        assert_eq!(response.tool_calls.len(), 1);
        assert_eq!(response.tool_calls[0].name, "get_weather");
        assert_eq!(response.tool_calls[0].id, "c1");
        assert_eq!(response.tool_calls[0].arguments, json!({"city": "Oslo"}));
        Ok(())
    }

    #[test]
    fn empty_and_cut_streams_are_retryable_errors() {
        assert!(matches!(
            decode(&["[DONE]"]),
            Err(ProviderError::EmptyStream)
        ));
        assert!(matches!(decode(&[]), Err(ProviderError::EmptyStream)));
        let cut = decode(&[r#"{"choices":[{"delta":{"content":"hel"}}]}"#]);
        assert!(
            matches!(&cut, Err(e @ ProviderError::Truncated(_)) if e.is_retryable()),
            "{cut:?}"
        );
    }

    #[test]
    fn finish_without_done_and_usage_anywhere_are_accepted() -> Result<(), ProviderError> {
        let response = decode(&[
            r#"{"choices":[{"delta":{"content":"hi"}}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":7,"completion_tokens":2}}"#,
        ])?;
        assert_eq!(
            (
                response.text.as_str(),
                response.usage.input_tokens,
                response.usage.output_tokens
            ),
            ("hi", 7, 2)
        );
        Ok(())
    }

    #[test]
    fn broken_arguments_are_kept_as_a_string() -> Result<(), ProviderError> {
        let response = decode(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"shell","arguments":"{\"command\": "}}]}}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}"#,
            "[DONE]",
        ])?;
        assert_eq!(response.tool_calls[0].arguments, json!("{\"command\": "));
        Ok(())
    }
}
