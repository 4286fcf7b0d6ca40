//! A mock model server on 127.0.0.1 that speaks the real wire protocols: OpenAI Chat Completions
//! streaming and Anthropic Messages streaming, both as server-sent events.
//!
//! A test scripts the answers up front (`MockServer::start(vec![openai::reply_text("hi")])`), points
//! the real `nop` binary at [`MockServer::openai_base_url`] or [`MockServer::anthropic_base_url`],
//! and afterwards asserts on what was sent with [`MockServer::requests`].
//!
//! Plain std threads and blocking sockets, no async runtime: the server runs happily next to a
//! `#[test]` that blocks on a child process. One thread accepts, one thread serves each connection;
//! every response carries `connection: close`, so one connection is one request.

use std::collections::VecDeque;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// Body of the 500 sent when a request arrives and the script is empty.
pub const NO_RESPONSE_LEFT: &str = "mock: no scripted response left";

/// One scripted answer; each request consumes the next one.
#[derive(Debug, Clone)]
pub enum MockResponse {
    /// 200, content-type text/event-stream, connection: close; each chunk written and flushed
    /// separately with `delay` between chunks; then the connection is closed.
    Sse {
        chunks: Vec<String>,
        delay: Duration,
    },
    /// Any status with headers and body (e.g. 429 with retry-after, 500, 400 with a JSON error).
    /// `content-length` and `connection: close` are added; `content-type` too unless given.
    Status {
        code: u16,
        headers: Vec<(String, String)>,
        body: String,
    },
    /// Accept the request, send the 200 SSE headers and the chunks, then keep the connection open
    /// without sending anything more for `hold` (to test stream idle timeouts), then close.
    /// Ends early if the client hangs up first.
    Stall { chunks: Vec<String>, hold: Duration },
    /// An error status whose body never comes: headers promise 100 bytes, then nothing for
    /// `hold`.
    StalledError { code: u16, hold: Duration },
}

impl MockResponse {
    /// An SSE stream with no delay between chunks.
    pub fn sse(chunks: Vec<String>) -> MockResponse {
        MockResponse::Sse {
            chunks,
            delay: Duration::ZERO,
        }
    }

    /// A plain response with no extra headers.
    pub fn status(code: u16, body: impl Into<String>) -> MockResponse {
        MockResponse::Status {
            code,
            headers: Vec::new(),
            body: body.into(),
        }
    }
}

/// One request as the server received it.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    pub method: String,
    /// The request target as sent, query string included.
    pub path: String,
    /// In arrival order; names lowercased, values trimmed.
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON, `Value::Null` if it is not JSON.
    pub body: Value,
    pub raw_body: String,
}

impl RecordedRequest {
    /// The contents of the user messages this request carries, in order.
    pub fn user_messages(&self) -> Vec<String> {
        self.body["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m["role"] == "user")
            .filter_map(|m| m["content"].as_str().map(str::to_string))
            .collect()
    }

    /// The contents of the tool results this (OpenAI-shaped) request carries, in order.
    pub fn tool_results(&self) -> Vec<String> {
        self.body["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m["role"] == "tool")
            .map(|m| m["content"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// The result of tool call `call_id` this request carries (OpenAI's `tool` message with
    /// that `tool_call_id`, or Anthropic's `tool_result` block with that `tool_use_id`).
    pub fn tool_result(&self, call_id: &str) -> Option<String> {
        let text = |content: &Value| match content {
            Value::String(s) => s.clone(),
            Value::Array(blocks) => blocks
                .iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n"),
            _ => String::new(),
        };
        let messages = self.body["messages"].as_array()?;
        messages.iter().find_map(|m| {
            if m["role"] == "tool" && m["tool_call_id"] == call_id {
                return Some(text(&m["content"]));
            }
            m["content"].as_array()?.iter().find_map(|b| {
                (b["type"] == "tool_result" && b["tool_use_id"] == call_id)
                    .then(|| text(&b["content"]))
            })
        })
    }

    /// The first header of that name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The running server. Dropping it stops accepting new connections (best effort); connections
/// already being served finish on their own.
pub struct MockServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stopping: Arc<AtomicBool>,
}

struct Shared {
    state: Mutex<State>,
    /// Signalled whenever a request is recorded.
    arrived: Condvar,
}

/// Answers a request from what it contains, for sessions too long to script in order.
pub type Responder = Box<dyn FnMut(&RecordedRequest) -> MockResponse + Send>;

#[derive(Default)]
struct State {
    script: VecDeque<MockResponse>,
    requests: Vec<RecordedRequest>,
    /// When set, answers every request the script does not.
    responder: Option<Responder>,
    /// When set, the usage of every streamed answer is what the providers' prompt caches would
    /// report for the request (see [`cache::PromptCache`]).
    cache: Option<cache::PromptCache>,
    /// How the real server this mock stands for behaves beyond the wire protocol.
    quirks: Quirks,
    /// GET requests (servers asked about themselves), apart from the model requests.
    probes: Vec<RecordedRequest>,
    /// Keep no request (a benchmark of thousands, whose bodies would fill the mock's memory
    /// and slow it down as it grows): `requests()` stays empty.
    forget: bool,
}

/// Behaviours of real servers (MISSION R3, issue 29), switched on per test.
#[derive(Default)]
struct Quirks {
    /// llama-cpp-python 0.3: a prompt over its context (`n_ctx`, the request's bytes / 4) gets
    /// HTTP 200 and an empty stream.
    empty_stream_over: Option<u64>,
    /// llama.cpp's server: `GET /props` says `default_generation_settings.n_ctx`.
    props_n_ctx: Option<u64>,
    /// vLLM: `GET /v1/models` says `max_model_len`; a request whose prompt (its bytes / 4) and
    /// `max_tokens` are over it gets vLLM's HTTP 400.
    vllm_max_model_len: Option<u64>,
    /// vLLM's HTTP 400 over its context, without saying the context in `/v1/models`.
    vllm_error_over: Option<u64>,
    /// Ollama: `POST /api/show` answers for a model trained for 32,768 tokens, run with a
    /// context of this many: the start of a longer prompt is dropped without an error, and the
    /// usage counts only what was kept.
    ollama_num_ctx: Option<u64>,
    /// Servers that send no usage in their streams (llama-cpp-python without
    /// `stream_options`, some gateways).
    no_usage: bool,
    /// LiteLLM's `/v1/messages` in front of a Chat Completions upstream: a `system` given as a
    /// block array fails in its translation with HTTP 500.
    system_blocks_refused: bool,
}

impl Shared {
    /// A panicking connection thread must not take every later assertion down with it.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl MockServer {
    /// A server that answers every request with `responder`.
    pub fn start_with(responder: Responder) -> MockServer {
        let server = MockServer::start(Vec::new());
        server.shared.lock().responder = Some(responder);
        server
    }

    /// Binds 127.0.0.1 on a free port and starts serving `script`.
    pub fn start(script: Vec<MockResponse>) -> MockServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind mock server");
        let addr = listener.local_addr().expect("mock server address");
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                script: script.into(),
                requests: Vec::new(),
                responder: None,
                cache: None,
                quirks: Quirks::default(),
                probes: Vec::new(),
                forget: false,
            }),
            arrived: Condvar::new(),
        });
        let stopping = Arc::new(AtomicBool::new(false));
        {
            let shared = Arc::clone(&shared);
            let stopping = Arc::clone(&stopping);
            thread::Builder::new()
                .name("mock-accept".into())
                .spawn(move || accept_loop(listener, shared, stopping))
                .expect("spawn mock accept thread");
        }
        MockServer {
            addr,
            shared,
            stopping,
        }
    }

    /// `http://127.0.0.1:PORT`, no trailing slash.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Base URL for an OpenAI-compatible client, which POSTs `{base}/chat/completions`.
    pub fn openai_base_url(&self) -> String {
        format!("{}/v1", self.url())
    }

    /// Base URL for an Anthropic client, which POSTs `{base}/v1/messages`.
    pub fn anthropic_base_url(&self) -> String {
        self.url()
    }

    /// From now on, answers report the tokens a real provider's prompt cache would: the
    /// whole prompt estimated at 4 bytes a token, and the part of it an earlier request
    /// cached (see [`cache::PromptCache`]), replacing the scripted usage.
    pub fn simulate_prompt_cache(&self) {
        self.shared.lock().cache = Some(cache::PromptCache::default());
    }

    /// Behaves as llama-cpp-python does with a context of `n_ctx` tokens: a request over it
    /// (its bytes / 4) gets HTTP 200 and an empty stream, without consuming the script.
    pub fn empty_stream_over(&self, n_ctx: u64) {
        self.shared.lock().quirks.empty_stream_over = Some(n_ctx);
    }

    /// Answers `GET /props` as llama.cpp's server does, with a context of `n_ctx` tokens.
    pub fn serve_props(&self, n_ctx: u64) {
        self.shared.lock().quirks.props_n_ctx = Some(n_ctx);
    }

    /// Behaves as vLLM does with `--max-model-len n`: `GET /v1/models` says it, and a request
    /// whose prompt (bytes / 4) plus `max_tokens` is over it gets vLLM's HTTP 400.
    pub fn serve_vllm(&self, max_model_len: u64) {
        self.shared.lock().quirks.vllm_max_model_len = Some(max_model_len);
    }

    /// vLLM's HTTP 400 over a context of `n` tokens, from a server that does not say its size
    /// (a gateway in front of vLLM).
    pub fn vllm_error_over(&self, n: u64) {
        self.shared.lock().quirks.vllm_error_over = Some(n);
    }

    /// Behaves as Ollama does running a model with a context of `num_ctx` tokens: its
    /// `/api/show` answers, and a longer prompt loses its start silently (the usage of the
    /// reply counts `num_ctx` prompt tokens).
    pub fn serve_ollama(&self, num_ctx: u64) {
        self.shared.lock().quirks.ollama_num_ctx = Some(num_ctx);
    }

    /// From now on, streams carry no usage (the scripted usage chunks are dropped).
    pub fn omit_usage(&self) {
        self.shared.lock().quirks.no_usage = true;
    }

    /// Refuses an Anthropic request whose `system` is a block array with HTTP 500, as LiteLLM's
    /// `/v1/messages` does in front of a Chat Completions upstream.
    pub fn refuse_system_blocks(&self) {
        self.shared.lock().quirks.system_blocks_refused = true;
    }

    /// From now on, requests are answered but not kept (`requests()` stays empty).
    pub fn forget_requests(&self) {
        self.shared.lock().forget = true;
    }

    /// The GET requests received (a client asking the server about itself), in order.
    pub fn probes(&self) -> Vec<RecordedRequest> {
        self.shared.lock().probes.clone()
    }

    /// Appends a response to the script.
    pub fn push(&self, response: MockResponse) {
        self.shared.lock().script.push_back(response);
    }

    /// Every request received so far, in order of arrival.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.clone()
    }

    /// The first request that carried the result of tool call `call_id` (the model's next
    /// turn after the call): found by the call's id, not by the request's position. Panics,
    /// naming the call, when no request carries it.
    pub fn request_with_result(&self, call_id: &str) -> RecordedRequest {
        self.requests()
            .into_iter()
            .find(|r| r.tool_result(call_id).is_some())
            .unwrap_or_else(|| panic!("no request carries the result of tool call `{call_id}`"))
    }

    /// The result of tool call `call_id` as the model was first sent it: found by the call's
    /// id, not by the request's position. Panics, naming the call, when no request carries it.
    pub fn result_of(&self, call_id: &str) -> String {
        self.request_with_result(call_id)
            .tool_result(call_id)
            .unwrap_or_default()
    }

    /// [`MockServer::result_of`] for each of `call_ids`, in that order.
    pub fn results_of(&self, call_ids: &[&str]) -> Vec<String> {
        call_ids.iter().map(|id| self.result_of(id)).collect()
    }

    /// Blocks until at least `n` requests have arrived or `timeout` has passed, and returns all
    /// requests received by then (possibly fewer than `n`).
    pub fn wait_for_requests(&self, n: usize, timeout: Duration) -> Vec<RecordedRequest> {
        let state = self.shared.lock();
        let (state, _) = self
            .shared
            .arrived
            .wait_timeout_while(state, timeout, |s| s.requests.len() < n)
            .unwrap_or_else(|e| e.into_inner());
        state.requests.clone()
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag; it ignores this connection.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>, stopping: Arc<AtomicBool>) {
    for stream in listener.incoming() {
        if stopping.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else { continue };
        let shared = Arc::clone(&shared);
        let _ = thread::Builder::new()
            .name("mock-conn".into())
            .spawn(move || serve(stream, &shared));
    }
}

/// Reads one request, records it, answers with the next scripted response and closes.
fn serve(stream: TcpStream, shared: &Shared) {
    let _ = stream.set_nodelay(true);
    let Ok(reader) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(reader);
    // A connection that closes or sends garbage before a full request is not a request.
    let Ok(Some(request)) = read_request(&mut reader) else {
        return;
    };
    let response = {
        let mut state = shared.lock();
        // A client asking the server about itself: never a scripted model answer.
        if request.method == "GET" || request.path == "/api/show" {
            let answer = described(&state.quirks, &request);
            state.probes.push(request);
            drop(state);
            let _ = respond(stream, reader, answer);
            return;
        }
        // What real servers refuse, refused here too, before the script is consulted.
        let refusal = refused_by_real_servers(&request)
            .or_else(|| refused_for_quirks(&state.quirks, &request));
        if let Some(refusal) = refusal {
            state.requests.push(request);
            shared.arrived.notify_all();
            drop(state);
            let _ = respond(stream, reader, refusal);
            return;
        }
        let response = match state.script.pop_front() {
            Some(response) => Some(response),
            None => state.responder.as_mut().map(|answer| answer(&request)),
        };
        let response = match (&mut state.cache, response) {
            (Some(cache), Some(MockResponse::Sse { chunks, delay })) => {
                let usage = cache.usage(&request);
                Some(MockResponse::Sse {
                    chunks: chunks.iter().map(|c| usage.rewrite(c)).collect(),
                    delay,
                })
            }
            (_, response) => response,
        };
        let response = match (response, state.quirks.ollama_num_ctx) {
            (Some(MockResponse::Sse { chunks, delay }), Some(num_ctx)) => {
                let prompt = (request.raw_body.len() as u64 / 4).min(num_ctx);
                Some(MockResponse::Sse {
                    chunks: chunks
                        .iter()
                        .map(|c| with_prompt_tokens(c, prompt))
                        .collect(),
                    delay,
                })
            }
            (response, _) => response,
        };
        let response = match response {
            Some(MockResponse::Sse { chunks, delay }) if state.quirks.no_usage => {
                Some(MockResponse::Sse {
                    chunks: chunks.iter().filter_map(|c| without_usage(c)).collect(),
                    delay,
                })
            }
            response => response,
        };
        if !state.forget {
            state.requests.push(request);
        }
        shared.arrived.notify_all();
        response
    };
    let response = response.unwrap_or_else(|| MockResponse::status(500, NO_RESPONSE_LEFT));
    // The client may hang up at any point; that is its business, not a test failure here.
    let _ = respond(stream, reader, response);
}

/// Request shapes real OpenAI-compatible servers were seen to refuse (MISSION R3): an assistant
/// message with `"content": null` beside its tool calls gets HTTP 500 from llama-cpp-python
/// 0.3.36 (pydantic), and becomes an empty answer through LiteLLM 1.108.7.
fn refused_by_real_servers(request: &RecordedRequest) -> Option<MockResponse> {
    if !request.path.contains("/chat/completions") {
        return None;
    }
    let null_content = request.body["messages"]
        .as_array()?
        .iter()
        .any(|m| m["role"] == "assistant" && m.get("content").is_some_and(Value::is_null));
    null_content.then(|| {
        MockResponse::status(
            500,
            r#"{"error":{"message":"1 validation error for ChatCompletionRequestAssistantMessage
content
  Input should be a valid string","type":"internal_server_error"}}"#,
        )
    })
}

/// A server's answer about itself, in the shapes the real servers use: llama.cpp's `/props`,
/// vLLM's `/v1/models`, Ollama's `/api/show`; 404 for what this server is not.
fn described(quirks: &Quirks, request: &RecordedRequest) -> MockResponse {
    let path = request.path.as_str();
    let body = match (path, quirks) {
        (
            "/props",
            Quirks {
                props_n_ctx: Some(n),
                ..
            },
        ) => json!({
            "default_generation_settings": {"n_ctx": n, "params": {"n_predict": -1}},
            "total_slots": 1,
            "model_path": "/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            "chat_template": "{% for message in messages %}…{% endfor %}",
            "build_info": "b5000-0123abcd",
        }),
        (
            "/v1/models",
            Quirks {
                vllm_max_model_len: Some(n),
                ..
            },
        ) => json!({
            "object": "list",
            "data": [{"id": "Qwen/Qwen2.5-Coder-1.5B-Instruct", "object": "model",
                "created": 1_700_000_000, "owned_by": "vllm",
                "root": "Qwen/Qwen2.5-Coder-1.5B-Instruct", "parent": null,
                "max_model_len": n, "permission": []}],
        }),
        (
            "/api/show",
            Quirks {
                ollama_num_ctx: Some(_),
                ..
            },
        ) => json!({
            "license": "Apache License",
            "modelfile": "FROM /root/.ollama/models/blobs/sha256-0123",
            "parameters": "stop                           \"<|im_start|>\"\nstop                           \"<|im_end|>\"",
            "template": "{{- if .Messages }}…{{ end }}",
            "details": {"parent_model": "", "format": "gguf", "family": "qwen2",
                "families": ["qwen2"], "parameter_size": "1.5B", "quantization_level": "Q4_K_M"},
            "model_info": {"general.architecture": "qwen2", "general.parameter_count": 1_543_714_304u64,
                "qwen2.context_length": 32768, "qwen2.embedding_length": 1536},
            "capabilities": ["completion", "tools"],
        }),
        _ => return MockResponse::status(404, "404 page not found"),
    };
    MockResponse::status(200, body.to_string())
}

/// vLLM's refusal of a prompt and output cap over its context (vllm/renderers/params.py).
fn vllm_refusal(max_model_len: u64, request: &RecordedRequest) -> Option<MockResponse> {
    let prompt = request.raw_body.len() as u64 / 4;
    let output = request.body["max_tokens"].as_u64().unwrap_or(0);
    (prompt + output > max_model_len).then(|| {
        let message = format!(
            "This model's maximum context length is {max_model_len} tokens. However, you requested {output} output tokens and your prompt contains at least {prompt} input tokens, for a total of at least {} tokens. Please reduce the length of the input prompt or the number of requested output tokens.",
            prompt + output
        );
        MockResponse::status(
            400,
            json!({"error": {"message": message, "type": "BadRequestError", "param": null, "code": 400}})
                .to_string(),
        )
    })
}

/// An SSE chunk whose usage says `prompt` prompt tokens (Ollama's count of what it kept).
fn with_prompt_tokens(chunk: &str, prompt: u64) -> String {
    let Some(data) = chunk.lines().find_map(|l| l.strip_prefix("data: ")) else {
        return chunk.to_string();
    };
    let Ok(mut value) = serde_json::from_str::<Value>(data) else {
        return chunk.to_string();
    };
    match value.get_mut("usage").and_then(Value::as_object_mut) {
        Some(usage) => {
            usage.insert("prompt_tokens".into(), json!(prompt));
            chunk.replacen(data, &value.to_string(), 1)
        }
        None => chunk.to_string(),
    }
}

/// What the switched-on quirks answer instead of the script: llama-cpp-python's empty stream
/// to a prompt over its context, vLLM's 400, LiteLLM's 500 to a `system` block array.
fn refused_for_quirks(quirks: &Quirks, request: &RecordedRequest) -> Option<MockResponse> {
    if let Some(n) = quirks.vllm_max_model_len.or(quirks.vllm_error_over)
        && request.path.ends_with("/chat/completions")
        && let Some(refusal) = vllm_refusal(n, request)
    {
        return Some(refusal);
    }
    if let Some(n_ctx) = quirks.empty_stream_over
        && request.raw_body.len() as u64 / 4 > n_ctx
    {
        return Some(MockResponse::sse(Vec::new()));
    }
    if quirks.system_blocks_refused
        && request.path.ends_with("/v1/messages")
        && request.body["system"].is_array()
    {
        return Some(MockResponse::status(
            500,
            r#"{"error":{"message":"litellm.APIConnectionError: 'list' object has no attribute 'strip'","type":null,"param":null,"code":"500"}}"#,
        ));
    }
    None
}

/// An SSE chunk without its usage: an OpenAI usage-only chunk is dropped, a `usage` key
/// removed; an Anthropic event's usage is zeroed (its shape requires the field).
fn without_usage(chunk: &str) -> Option<String> {
    let Some(data) = chunk
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .filter(|d| d.starts_with('{'))
    else {
        return Some(chunk.to_string());
    };
    let Ok(mut value) = serde_json::from_str::<Value>(data) else {
        return Some(chunk.to_string());
    };
    if value.get("usage").is_some() && value["choices"].as_array().is_some_and(|c| c.is_empty()) {
        return None;
    }
    if let Some(map) = value.as_object_mut() {
        map.remove("usage");
    }
    if let Some(message) = value.get_mut("message").and_then(Value::as_object_mut) {
        message.remove("usage");
    }
    Some(chunk.replacen(data, &value.to_string(), 1))
}

/// Parses an HTTP/1.1 request: request line, headers, then a body framed by Content-Length or
/// chunked transfer encoding. `Ok(None)` when the peer closed before sending a request line.
fn read_request(reader: &mut impl BufRead) -> io::Result<Option<RecordedRequest>> {
    let mut line = String::new();
    // Tolerate stray blank lines before the request line (RFC 9112 §2.2).
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            return Ok(None);
        }
        if !line.trim().is_empty() {
            break;
        }
    }
    let mut parts = line.split_whitespace();
    let (Some(method), Some(path)) = (parts.next(), parts.next()) else {
        return Err(invalid(format!("bad request line {line:?}")));
    };
    let (method, path) = (method.to_string(), path.to_string());

    let mut headers = Vec::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            return Err(invalid("connection closed inside headers"));
        }
        let trimmed = line.trim_end_matches(['\r', '\n']);
        if trimmed.is_empty() {
            break;
        }
        let Some((name, value)) = trimmed.split_once(':') else {
            return Err(invalid(format!("bad header line {trimmed:?}")));
        };
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
    }
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };

    let chunked =
        header("transfer-encoding").is_some_and(|te| te.to_ascii_lowercase().contains("chunked"));
    let body = if chunked {
        read_chunked(reader)?
    } else {
        let length = match header("content-length") {
            Some(v) => v
                .parse::<usize>()
                .map_err(|_| invalid(format!("bad content-length {v:?}")))?,
            None => 0,
        };
        let mut body = vec![0; length];
        reader.read_exact(&mut body)?;
        body
    };
    let raw_body = String::from_utf8_lossy(&body).into_owned();
    let body = serde_json::from_str(&raw_body).unwrap_or(Value::Null);
    Ok(Some(RecordedRequest {
        method,
        path,
        headers,
        body,
        raw_body,
    }))
}

fn read_chunked(reader: &mut impl BufRead) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        reader.read_line(&mut line)?;
        let size = line.trim().split(';').next().unwrap_or("");
        let size = usize::from_str_radix(size, 16)
            .map_err(|_| invalid(format!("bad chunk size {line:?}")))?;
        if size == 0 {
            // Trailers, up to the blank line.
            loop {
                line.clear();
                if reader.read_line(&mut line)? == 0 || line.trim().is_empty() {
                    return Ok(body);
                }
            }
        }
        let start = body.len();
        body.resize(start + size, 0);
        reader.read_exact(&mut body[start..])?;
        line.clear();
        reader.read_line(&mut line)?; // CRLF after the chunk data
    }
}

fn invalid(message: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message.into())
}

const SSE_HEAD: &str = "HTTP/1.1 200 OK\r\n\
    content-type: text/event-stream\r\n\
    cache-control: no-cache\r\n\
    connection: close\r\n\r\n";

fn respond(
    mut stream: TcpStream,
    mut reader: BufReader<TcpStream>,
    response: MockResponse,
) -> io::Result<()> {
    match response {
        MockResponse::Sse { chunks, delay } => {
            stream.write_all(SSE_HEAD.as_bytes())?;
            stream.flush()?;
            for (i, chunk) in chunks.iter().enumerate() {
                if i > 0 && !delay.is_zero() {
                    thread::sleep(delay);
                }
                stream.write_all(chunk.as_bytes())?;
                stream.flush()?;
            }
        }
        MockResponse::Status {
            code,
            headers,
            body,
        } => {
            let mut head = format!("HTTP/1.1 {code} {}\r\n", reason(code));
            let has = |name: &str| headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
            if !has("content-type") {
                let kind = if body.trim_start().starts_with(['{', '[']) {
                    "application/json"
                } else {
                    "text/plain; charset=utf-8"
                };
                head.push_str(&format!("content-type: {kind}\r\n"));
            }
            for (name, value) in &headers {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
            head.push_str(&format!(
                "content-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            ));
            stream.write_all(head.as_bytes())?;
            stream.write_all(body.as_bytes())?;
            stream.flush()?;
        }
        MockResponse::StalledError { code, hold } => {
            let head = format!(
                "HTTP/1.1 {code} {}\r\ncontent-type: application/json\r\n\
                 content-length: 100\r\nconnection: close\r\n\r\n{{\"error\":",
                reason(code)
            );
            stream.write_all(head.as_bytes())?;
            stream.flush()?;
            hold_open(&mut reader, hold);
        }
        MockResponse::Stall { chunks, hold } => {
            stream.write_all(SSE_HEAD.as_bytes())?;
            for chunk in &chunks {
                stream.write_all(chunk.as_bytes())?;
                stream.flush()?;
            }
            hold_open(&mut reader, hold);
        }
    }
    // Tell the client the body is complete (SSE bodies are delimited by the close).
    stream.shutdown(Shutdown::Write)
}

/// Keeps the connection open for `hold`, returning early if the client closes its side.
fn hold_open(reader: &mut BufReader<TcpStream>, hold: Duration) {
    let deadline = Instant::now() + hold;
    let mut sink = [0u8; 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || reader.get_ref().set_read_timeout(Some(left)).is_err() {
            return;
        }
        match reader.read(&mut sink) {
            Ok(0) => return,                                       // client hung up
            Ok(_) => {}                                            // ignore anything it sends
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {} // retry
            Err(_) => return,                                      // timeout or reset
        }
    }
}

fn reason(code: u16) -> &'static str {
    match code {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        408 => "Request Timeout",
        413 => "Payload Too Large",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        529 => "Overloaded",
        _ => "Mock Status",
    }
}

/// `data: {json}\n\n`.
fn data_frame(data: &Value) -> String {
    format!("data: {data}\n\n")
}

/// `event: <kind>\ndata: {json}\n\n`.
fn event_frame(kind: &str, data: &Value) -> String {
    format!("event: {kind}\ndata: {data}\n\n")
}

/// Splits `s` into at most `pieces` non-empty parts of near-equal length in characters, never
/// inside a UTF-8 sequence. An empty string gives no parts; `pieces == 0` counts as 1.
pub fn split_pieces(s: &str, pieces: usize) -> Vec<&str> {
    let chars = s.chars().count();
    if chars == 0 {
        return Vec::new();
    }
    let pieces = pieces.clamp(1, chars);
    let (base, extra) = (chars / pieces, chars % pieces);
    let mut boundaries = s.char_indices().map(|(i, _)| i).chain([s.len()]);
    let mut start = boundaries.next().unwrap_or(0);
    let mut parts = Vec::with_capacity(pieces);
    for p in 0..pieces {
        let take = base + usize::from(p < extra);
        let end = boundaries.nth(take - 1).unwrap_or(s.len());
        parts.push(&s[start..end]);
        start = end;
    }
    parts
}

/// OpenAI Chat Completions streaming chunks (`data: {chat.completion.chunk}\n\n`, then
/// `data: [DONE]\n\n`).
pub mod openai {
    use super::*;

    fn chunk(choices: Value) -> String {
        data_frame(&json!({
            "id": "chatcmpl-mock",
            "object": "chat.completion.chunk",
            "model": "mock",
            "choices": choices,
        }))
    }

    fn delta(delta: Value) -> String {
        chunk(json!([{ "index": 0, "delta": delta, "finish_reason": null }]))
    }

    /// The opening chunk real servers send: role only, empty content.
    pub fn role() -> String {
        delta(json!({ "role": "assistant", "content": "" }))
    }

    /// A piece of assistant text.
    pub fn text(piece: &str) -> String {
        delta(json!({ "content": piece }))
    }

    /// The first delta of tool call `index`: its id and name, empty arguments.
    pub fn tool_call_start(index: usize, id: &str, name: &str) -> String {
        delta(json!({ "tool_calls": [{
            "index": index,
            "id": id,
            "type": "function",
            "function": { "name": name, "arguments": "" },
        }]}))
    }

    /// A later delta of tool call `index`: a piece of its JSON arguments, nothing else.
    pub fn tool_call_args(index: usize, piece: &str) -> String {
        delta(json!({ "tool_calls": [{
            "index": index,
            "function": { "arguments": piece },
        }]}))
    }

    /// A whole tool call: the start, then `args` in `pieces` pieces.
    pub fn tool_call(index: usize, id: &str, name: &str, args: &str, pieces: usize) -> Vec<String> {
        std::iter::once(tool_call_start(index, id, name))
            .chain(
                split_pieces(args, pieces)
                    .into_iter()
                    .map(|p| tool_call_args(index, p)),
            )
            .collect()
    }

    /// A whole tool call as llama.cpp streams it: every delta repeats the id, type and name next
    /// to its piece of the arguments, so a client that appends names or opens a call per id breaks.
    pub fn tool_call_llama_cpp(
        index: usize,
        id: &str,
        name: &str,
        args: &str,
        pieces: usize,
    ) -> Vec<String> {
        std::iter::once(tool_call_start(index, id, name))
            .chain(split_pieces(args, pieces).into_iter().map(|p| {
                delta(json!({ "tool_calls": [{
                    "index": index,
                    "id": id,
                    "type": "function",
                    "function": { "name": name, "arguments": p },
                }]}))
            }))
            .collect()
    }

    /// The last choice chunk: empty delta with `finish_reason` ("stop", "tool_calls", "length").
    pub fn finish(reason: &str) -> String {
        chunk(json!([{ "index": 0, "delta": {}, "finish_reason": reason }]))
    }

    /// The usage chunk sent with `stream_options.include_usage`: no choices.
    pub fn usage(prompt_tokens: u64, completion_tokens: u64) -> String {
        data_frame(&json!({
            "id": "chatcmpl-mock",
            "object": "chat.completion.chunk",
            "model": "mock",
            "choices": [],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }))
    }

    /// The end-of-stream sentinel.
    pub fn done() -> String {
        "data: [DONE]\n\n".to_string()
    }

    /// A complete text answer: `text` in about 3 pieces, `finish("stop")`, usage 10/5, `[DONE]`.
    pub fn reply_text(text: &str) -> MockResponse {
        let mut chunks: Vec<String> = split_pieces(text, 3).into_iter().map(self::text).collect();
        chunks.extend([finish("stop"), usage(10, 5), done()]);
        MockResponse::sse(chunks)
    }

    /// A complete answer calling tools `(id, name, args)`, each call's arguments in 3 pieces,
    /// then `finish("tool_calls")`, usage 10/5, `[DONE]`.
    pub fn reply_tool_calls(calls: &[(&str, &str, Value)]) -> MockResponse {
        let mut chunks = Vec::new();
        for (index, (id, name, args)) in calls.iter().enumerate() {
            chunks.extend(tool_call(index, id, name, &args.to_string(), 3));
        }
        chunks.extend([finish("tool_calls"), usage(10, 5), done()]);
        MockResponse::sse(chunks)
    }
}

/// Anthropic Messages streaming events (`event: <type>\ndata: {json}\n\n`).
pub mod anthropic {
    use super::*;

    /// Opens the message; `usage.input_tokens` is `input_tokens`.
    pub fn message_start(input_tokens: u64) -> String {
        event_frame(
            "message_start",
            &json!({
                "type": "message_start",
                "message": {
                    "id": "msg_mock",
                    "type": "message",
                    "role": "assistant",
                    "model": "mock",
                    "content": [],
                    "stop_reason": null,
                    "stop_sequence": null,
                    "usage": { "input_tokens": input_tokens, "output_tokens": 1 },
                },
            }),
        )
    }

    fn block_start(index: usize, block: Value) -> String {
        event_frame(
            "content_block_start",
            &json!({ "type": "content_block_start", "index": index, "content_block": block }),
        )
    }

    fn block_delta(index: usize, delta: Value) -> String {
        event_frame(
            "content_block_delta",
            &json!({ "type": "content_block_delta", "index": index, "delta": delta }),
        )
    }

    fn block_stop(index: usize) -> String {
        event_frame(
            "content_block_stop",
            &json!({ "type": "content_block_stop", "index": index }),
        )
    }

    /// A text content block at `index`: start, one `text_delta` per piece, stop.
    pub fn text_block(index: usize, pieces: &[&str]) -> Vec<String> {
        std::iter::once(block_start(index, json!({ "type": "text", "text": "" })))
            .chain(
                pieces
                    .iter()
                    .map(|p| block_delta(index, json!({ "type": "text_delta", "text": p }))),
            )
            .chain([block_stop(index)])
            .collect()
    }

    /// A tool_use content block at `index`: start with empty input, `args` as `input_json_delta`
    /// pieces, stop.
    pub fn tool_use_block(
        index: usize,
        id: &str,
        name: &str,
        args: &str,
        pieces: usize,
    ) -> Vec<String> {
        let start = json!({ "type": "tool_use", "id": id, "name": name, "input": {} });
        std::iter::once(block_start(index, start))
            .chain(split_pieces(args, pieces).into_iter().map(|p| {
                block_delta(
                    index,
                    json!({ "type": "input_json_delta", "partial_json": p }),
                )
            }))
            .chain([block_stop(index)])
            .collect()
    }

    /// The top-level delta before the end: stop reason ("end_turn", "tool_use", "max_tokens")
    /// and cumulative output tokens.
    pub fn message_delta(stop_reason: &str, output_tokens: u64) -> String {
        event_frame(
            "message_delta",
            &json!({
                "type": "message_delta",
                "delta": { "stop_reason": stop_reason, "stop_sequence": null },
                "usage": { "output_tokens": output_tokens },
            }),
        )
    }

    pub fn message_stop() -> String {
        event_frame("message_stop", &json!({ "type": "message_stop" }))
    }

    /// A keep-alive; may appear anywhere in a real stream.
    pub fn ping() -> String {
        event_frame("ping", &json!({ "type": "ping" }))
    }

    /// A complete text answer: message_start(10), ping, one text block with `text` in about 3
    /// pieces, message_delta("end_turn", 5), message_stop.
    pub fn reply_text(text: &str) -> MockResponse {
        let mut chunks = vec![message_start(10), ping()];
        chunks.extend(text_block(0, &split_pieces(text, 3)));
        chunks.extend([message_delta("end_turn", 5), message_stop()]);
        MockResponse::sse(chunks)
    }

    /// A complete answer calling tools `(id, name, args)`, one tool_use block each with the
    /// arguments in 3 pieces, then message_delta("tool_use", 5), message_stop.
    pub fn reply_tool_calls(calls: &[(&str, &str, Value)]) -> MockResponse {
        let mut chunks = vec![message_start(10), ping()];
        for (index, (id, name, args)) in calls.iter().enumerate() {
            chunks.extend(tool_use_block(index, id, name, &args.to_string(), 3));
        }
        chunks.extend([message_delta("tool_use", 5), message_stop()]);
        MockResponse::sse(chunks)
    }
}

/// A model of the providers' prompt caches, for tests and benchmarks of what nop's requests get
/// from them. Tokens are estimated at 4 bytes of JSON each.
///
/// - OpenAI (`/chat/completions`): the prompt (tools, then messages) is cached automatically;
///   a request reads the longest prefix it shares with an earlier request of the same
///   `prompt_cache_key`, if that is at least 1,024 tokens, in steps of 128.
/// - Anthropic (`/v1/messages`): only what `cache_control` marks is cached: the prompt (tools,
///   system, messages) up to a marked block is written; a later request reads the longest
///   written prefix that ends at one of its marks or up to 20 blocks before one. A prefix under
///   1,024 tokens is not cached.
pub mod cache {
    use std::collections::{HashMap, HashSet};

    use serde_json::Value;

    const MIN_TOKENS: u64 = 1024;
    const LOOKBACK: usize = 20;

    #[derive(Default)]
    pub struct PromptCache {
        /// OpenAI: the prompts seen, by cache key.
        prompts: HashMap<String, Vec<String>>,
        /// Anthropic: the prefixes written (their text).
        written: HashSet<String>,
    }

    /// What a request's usage should say.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub struct CachedUsage {
        pub anthropic: bool,
        /// The whole prompt.
        pub input: u64,
        pub read: u64,
        pub written: u64,
    }

    fn tokens(bytes: usize) -> u64 {
        (bytes as u64).div_ceil(4)
    }

    impl PromptCache {
        pub fn usage(&mut self, request: &super::RecordedRequest) -> CachedUsage {
            if request.path.ends_with("/messages") {
                self.anthropic(&request.body)
            } else {
                self.openai(&request.body)
            }
        }

        fn openai(&mut self, body: &Value) -> CachedUsage {
            let mut prompt = body["tools"].to_string();
            for m in body["messages"].as_array().into_iter().flatten() {
                prompt.push_str(&m.to_string());
            }
            let key = body["prompt_cache_key"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let seen = self.prompts.entry(key).or_default();
            let shared = seen
                .iter()
                .map(|p| common_prefix(p, &prompt))
                .max()
                .unwrap_or(0);
            seen.push(prompt.clone());
            let shared = tokens(shared).min(tokens(prompt.len()));
            let read = if shared >= MIN_TOKENS {
                MIN_TOKENS + (shared - MIN_TOKENS) / 128 * 128
            } else {
                0
            };
            CachedUsage {
                anthropic: false,
                input: tokens(prompt.len()),
                read,
                written: 0,
            }
        }

        fn anthropic(&mut self, body: &Value) -> CachedUsage {
            // The prompt as blocks, in cache order, each with whether it is marked.
            let mut blocks: Vec<(String, bool)> = Vec::new();
            let mut push = |block: &Value, boundary: &str| {
                let marked = block.get("cache_control").is_some();
                let mut plain = block.clone();
                if let Some(o) = plain.as_object_mut() {
                    o.remove("cache_control");
                }
                blocks.push((format!("{boundary}{plain}"), marked));
            };
            for tool in body["tools"].as_array().into_iter().flatten() {
                push(tool, "tool:");
            }
            match &body["system"] {
                Value::String(text) => push(
                    &serde_json::json!({"type": "text", "text": text}),
                    "system:",
                ),
                Value::Array(system) => system.iter().for_each(|b| push(b, "system:")),
                _ => {}
            }
            for message in body["messages"].as_array().into_iter().flatten() {
                let role = message["role"].as_str().unwrap_or_default();
                match &message["content"] {
                    Value::String(text) => {
                        push(&serde_json::json!({"type": "text", "text": text}), role)
                    }
                    Value::Array(content) => content.iter().for_each(|b| push(b, role)),
                    _ => {}
                }
            }
            let mut prefixes = Vec::with_capacity(blocks.len());
            let mut text = String::new();
            for (block, _) in &blocks {
                text.push_str(block);
                prefixes.push(text.clone());
            }
            let marks: Vec<usize> = (0..blocks.len()).filter(|i| blocks[*i].1).collect();
            let mut read = 0;
            for &mark in &marks {
                let earliest = mark.saturating_sub(LOOKBACK);
                if let Some(hit) = (earliest..=mark)
                    .rev()
                    .find(|i| self.written.contains(&prefixes[*i]))
                {
                    read = read.max(tokens(prefixes[hit].len()));
                }
            }
            let mut last_mark = 0;
            for &mark in &marks {
                if tokens(prefixes[mark].len()) >= MIN_TOKENS {
                    self.written.insert(prefixes[mark].clone());
                    last_mark = tokens(prefixes[mark].len());
                }
            }
            CachedUsage {
                anthropic: true,
                input: tokens(text.len()),
                read,
                written: last_mark.saturating_sub(read),
            }
        }
    }

    fn common_prefix(a: &str, b: &str) -> usize {
        a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count()
    }

    impl CachedUsage {
        /// `chunk` with its usage replaced by this one (chunks without usage unchanged).
        pub fn rewrite(&self, chunk: &str) -> String {
            let Some((head, data)) = chunk.split_once("data: ") else {
                return chunk.to_string();
            };
            let Ok(mut value) = serde_json::from_str::<Value>(data.trim_end()) else {
                return chunk.to_string();
            };
            if self.anthropic {
                let Some(usage) = value.pointer_mut("/message/usage") else {
                    return chunk.to_string();
                };
                usage["input_tokens"] = (self.input - self.read - self.written).into();
                usage["cache_creation_input_tokens"] = self.written.into();
                usage["cache_read_input_tokens"] = self.read.into();
            } else {
                let Some(usage) = value.get_mut("usage").filter(|u| u.is_object()) else {
                    return chunk.to_string();
                };
                let output = usage["completion_tokens"].as_u64().unwrap_or(0);
                usage["prompt_tokens"] = self.input.into();
                usage["total_tokens"] = (self.input + output).into();
                usage["prompt_tokens_details"] = serde_json::json!({"cached_tokens": self.read});
            }
            format!("{head}data: {value}\n\n")
        }
    }
}
