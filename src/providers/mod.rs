//! Model providers over HTTP: OpenAI-compatible Chat Completions and Anthropic Messages, both
//! streamed over SSE, behind one [`Provider`], with deterministic retry and backoff.
//!
//! Keys come from the environment and live only in memory ([`ApiKey`] never prints itself);
//! error messages are built from status codes and server messages with the key scrubbed.

mod anthropic;
mod limits;
pub mod meter;
mod openai;
pub mod pricing;
mod probe;
pub mod sse;
mod tool_names;

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::config::{ProviderConfig, ProviderKind};
use crate::protocol::{Message, Role, TokenUsage, ToolCall};

pub use limits::Cut;
pub(crate) use tool_names::WireNames;

/// What a tool looks like to the model.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: Value,
}

/// One request: the conversation (system messages included) and the tools on offer.
#[derive(Debug, Clone, Copy)]
pub struct ChatRequest<'a> {
    pub messages: &'a [Message],
    pub tools: &'a [ToolSpec],
    /// What the provider's prompt cache may key this conversation by (the session id): OpenAI's
    /// `prompt_cache_key`. `None` for one-off requests.
    pub cache_key: Option<&'a str>,
}

/// Something the front end may show while a reply streams in.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// The request is going out (once per attempt): what waits for the model's time (the run's
    /// first file checkpoint) may start.
    Sending,
    /// A piece of the answer's text.
    Text(String),
    /// The attempt failed and will be retried after `delay`; anything streamed so far is void.
    Retrying {
        attempt: u32,
        delay: Duration,
        error: String,
    },
}

/// A complete model reply.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelResponse {
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    pub usage: TokenUsage,
    pub stop_reason: Option<String>,
}

impl ModelResponse {
    /// Whether the reply is not whole: the output cap cut it (after the one request that asks
    /// the model to continue), or it repeated itself and nop cut the repetition.
    pub fn cut(&self) -> Option<Cut> {
        limits::cut_reason(self.stop_reason.as_deref())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    #[error("{0}")]
    Config(String),
    #[error("model API answered HTTP {status}: {message}")]
    Http {
        status: u16,
        message: String,
        retry_after: Option<Duration>,
    },
    /// A 429 that is no rate limit: the account is out of quota or credit (OpenAI's
    /// `insufficient_quota`). Waiting does not fix it, so it is never retried.
    #[error(
        "the API key's account has run out of quota or credit (HTTP {status} {code}): a billing matter, not a rate limit, so it is not retried; check the account's plan and billing. The API said: {message}"
    )]
    Quota {
        status: u16,
        code: String,
        message: String,
    },
    /// No answer at all: the connection, DNS or TLS failed. `cause` is the lowest-level reason.
    #[error("could not reach the model API at {url}: {cause}")]
    Connect { url: String, cause: String },
    #[error("the model API did not answer in time: {0}")]
    Timeout(String),
    #[error(
        "the model API sent an empty stream (no text, no tool calls, no end marker); some servers (llama-cpp-python) answer so when the prompt is over their context size: if so, set compaction.context_window to it"
    )]
    EmptyStream,
    #[error("the model API stream ended before its end marker: {0}")]
    Truncated(String),
    #[error("the model API sent an error in the stream: {0}")]
    Stream(String),
    #[error("could not read the model API's reply: {0}")]
    Decode(String),
    /// The prompt is over what the server can take: it said so (an error naming the context
    /// length), or it answered with an empty or cut stream to a prompt near its known or probed
    /// context size. Another try of the same prompt cannot succeed: the conversation must be
    /// compacted first.
    #[error(
        "the prompt (about {prompt_tokens} tokens) is over the model server's context{}: {detail}",
        window.map(|w| format!(" of {w} tokens")).unwrap_or_default()
    )]
    ContextOverflow {
        prompt_tokens: u64,
        window: Option<u64>,
        detail: String,
    },
    #[error("cancelled")]
    Cancelled,
}

impl ProviderError {
    /// 429, 5xx, connection failures, timeouts and cut or empty streams are worth another try;
    /// other 4xx and undecodable replies are not.
    pub fn is_retryable(&self) -> bool {
        match self {
            ProviderError::Http { status, .. } => matches!(status, 408 | 409 | 429 | 500..=599),
            ProviderError::Connect { .. }
            | ProviderError::Timeout(_)
            | ProviderError::EmptyStream
            | ProviderError::Truncated(_)
            | ProviderError::Stream(_) => true,
            ProviderError::Config(_)
            | ProviderError::Quota { .. }
            | ProviderError::Decode(_)
            | ProviderError::ContextOverflow { .. }
            | ProviderError::Cancelled => false,
        }
    }
}

/// An API key held in memory only. Its Debug output is redacted.
#[derive(Clone)]
pub struct ApiKey(String);

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(…)")
    }
}

impl ApiKey {
    /// Removes the key from text that might echo it (a server error message).
    fn scrub(&self, text: &str) -> String {
        if self.0.len() >= 8 {
            text.replace(&self.0, "[redacted]")
        } else {
            text.to_string()
        }
    }
}

/// A configured model endpoint.
#[derive(Debug, Clone)]
pub struct Provider {
    kind: ProviderKind,
    client: reqwest::Client,
    url: String,
    model: String,
    key: Option<ApiKey>,
    max_attempts: u32,
    retry_base: Duration,
    retry_max: Duration,
    idle_timeout: Duration,
    max_tokens: u32,
    /// Whether requests ask for prompt caching (`provider.prompt_cache`).
    prompt_cache: bool,
    /// Set once a compatible server refused `prompt_cache_key`: it is not sent again.
    cache_key_refused: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Set once a gateway failed on Anthropic's cache marks (LiteLLM's `/v1/messages` in front
    /// of a Chat Completions upstream fails on a `system` block array): requests go unmarked.
    cache_marks_refused: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Set once a server refused `max_tokens` and asked for `max_completion_tokens` (OpenAI's
    /// newer models through a gateway): the cap goes by that name from then on.
    max_tokens_refused: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// The context size the configuration gives (`compaction.context_window`).
    configured_window: Option<u64>,
    /// What was learned of the server's context size, shared by every clone.
    window: std::sync::Arc<std::sync::Mutex<Window>>,
}

/// What a provider knows of its server's context size.
#[derive(Debug, Default)]
struct Window {
    /// What the server says of itself (`/props`, `/v1/models`, `/api/ps`, `/api/show`), asked
    /// once before the first request: `Some(None)` when it said nothing.
    probed: Option<Option<u64>>,
    /// The server answered Ollama's own API (see [`Provider::dropped_start`]).
    ollama: bool,
    /// The estimated tokens of the largest tool list a request carried.
    tools: u64,
    /// The last request's estimated prompt and the prompt tokens its server counted.
    last_counted: Option<(u64, u64)>,
    /// From an error that named it, or the size of a prompt found too long.
    learned: Option<u64>,
    /// The largest prompt (estimated tokens) the server answered.
    largest_answered: u64,
}

/// Builds the one HTTP client for `url`, installing rustls' ring provider first (reqwest panics
/// without one). A plain `http://` URL (a local server) gets no certificate store: loading the
/// system's roots reads every file of /etc/ssl/certs, the largest part of nop's start-up, for a
/// connection that never uses TLS.
pub(crate) fn http_client(
    connect_timeout: Duration,
    url: &str,
) -> Result<reqwest::Client, ProviderError> {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
    let mut builder = reqwest::Client::builder().connect_timeout(connect_timeout);
    if url
        .get(..7)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("http://"))
    {
        builder = builder.tls_certs_only([]);
    }
    builder
        .build()
        .map_err(|e| ProviderError::Config(format!("cannot build the HTTP client: {e}")))
}

/// How to configure a model, as the error of a run without one says it (and `nop` on a
/// terminal, which asks instead, when it is cancelled).
pub const NO_MODEL_HINT: &str = "choose one with `nop config set model MODEL --user` (such as \
`nop config set model gpt-4o --user`; for Anthropic also `nop config set provider anthropic --user`), \
or set provider.model in .nop/config.yml or NOP_MODEL";

/// Whether `url` names this machine (a local server needs no API key).
pub fn is_local_url(url: &str) -> bool {
    is_local(url)
}

fn is_local(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let host = rest.split(['/', '?']).next().unwrap_or_default();
    let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
    let host = if host.starts_with('[') {
        host.split(']')
            .next()
            .unwrap_or_default()
            .trim_start_matches('[')
    } else {
        host.split(':').next().unwrap_or_default()
    };
    host == "localhost" || host.starts_with("127.") || host == "::1" || host == "0.0.0.0"
}

impl Provider {
    /// The provider described by `config`, its key read from `env` (never from a file).
    pub fn from_config(
        config: &ProviderConfig,
        env: &BTreeMap<String, String>,
    ) -> Result<Provider, ProviderError> {
        let (default_base, key_vars): (&str, Vec<String>) = match config.kind {
            ProviderKind::Openai => (
                "https://api.openai.com/v1",
                vec!["NOP_API_KEY".into(), "OPENAI_API_KEY".into()],
            ),
            ProviderKind::Anthropic => (
                "https://api.anthropic.com",
                vec!["NOP_API_KEY".into(), "ANTHROPIC_API_KEY".into()],
            ),
        };
        let key_vars = match &config.api_key_env {
            Some(var) => vec![var.clone()],
            None => key_vars,
        };
        let base = config
            .base_url
            .clone()
            .unwrap_or_else(|| default_base.to_string());
        // The model first: without one nothing else matters yet (and its message says how to
        // set both).
        let model = config
            .model
            .clone()
            .filter(|m| !m.trim().is_empty())
            .ok_or_else(|| {
                ProviderError::Config(format!("no model configured: {NO_MODEL_HINT}"))
            })?;
        let key = key_vars
            .iter()
            .find_map(|var| env.get(var).filter(|v| !v.trim().is_empty()))
            .map(|v| ApiKey(v.trim().to_string()));
        if key.is_none() && !is_local(&base) {
            return Err(ProviderError::Config(format!(
                "no API key for {base}: set {} (`export {}=…`), or name the variable that holds it with `nop config set provider.api_key_env NAME --user` (or point provider.base_url / NOP_BASE_URL at a local server)",
                key_vars.join(" or "),
                key_vars.last().map(String::as_str).unwrap_or("NOP_API_KEY")
            )));
        }
        let base = base.trim_end_matches('/');
        let url = match config.kind {
            ProviderKind::Openai => format!("{base}/chat/completions"),
            ProviderKind::Anthropic => format!("{base}/v1/messages"),
        };
        Ok(Provider {
            kind: config.kind,
            client: http_client(Duration::from_secs_f64(config.connect_timeout_s), &url)?,
            url,
            model,
            key,
            max_attempts: config.max_attempts.max(1),
            retry_base: Duration::from_millis(config.retry_base_ms),
            retry_max: Duration::from_millis(config.retry_max_ms.max(config.retry_base_ms)),
            idle_timeout: Duration::from_secs_f64(config.stream_idle_timeout_s),
            max_tokens: config.max_tokens,
            prompt_cache: config.prompt_cache,
            cache_key_refused: Default::default(),
            cache_marks_refused: Default::default(),
            max_tokens_refused: Default::default(),
            configured_window: None,
            window: Default::default(),
        })
    }

    /// The same provider, told the context size the configuration gives
    /// (`compaction.context_window`): an empty stream to a prompt near it is a context overflow.
    pub fn with_context_window(mut self, tokens: u64) -> Provider {
        self.configured_window = (tokens > 0).then_some(tokens);
        self
    }

    /// The server's context size as nop found it out (probed, or named by an error), smaller
    /// than the configured one only when the server said so; `None` when nothing was found.
    pub fn learned_context_window(&self) -> Option<u64> {
        let w = self.window.lock().ok()?;
        [w.probed.flatten(), w.learned].into_iter().flatten().min()
    }

    pub fn model(&self) -> &str {
        &self.model
    }

    /// Sends the request and streams the reply, retrying retryable failures with exponential
    /// backoff and jitter (honouring Retry-After) up to the configured number of attempts. The
    /// request carries an output cap fit for the server's context (asked once, see
    /// [`probe`]); a text reply the cap cut is continued by one more request and joined.
    pub async fn complete(
        &self,
        request: ChatRequest<'_>,
        cancel: &CancellationToken,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<ModelResponse, ProviderError> {
        let window = self.context_window().await;
        // A small context cannot afford the tools' long descriptions: they go out compact.
        let compact;
        let request = match window {
            Some(w) if w <= limits::SMALL_WINDOW && !request.tools.is_empty() => {
                compact = limits::compact_tools(request.tools);
                ChatRequest {
                    tools: &compact,
                    ..request
                }
            }
            _ => request,
        };
        let tools = estimate_tools(request.tools);
        let prompt = meter::estimate_tokens(request.messages) + tools;
        if let Ok(mut w) = self.window.lock() {
            w.tools = w.tools.max(tools);
        }
        let cap = limits::output_cap(self.max_tokens, window, prompt);
        let first = match self
            .complete_once(request, prompt, cap, cancel, on_event)
            .await
        {
            // vLLM refuses a prompt that fits when the cap asked does not fit beside it: asked
            // again with the cap the context it named leaves.
            Err(ProviderError::ContextOverflow {
                window: Some(w), ..
            }) if cap.is_some_and(|c| prompt + u64::from(c) > w) && prompt + 256 < w => {
                let cap = limits::output_cap(self.max_tokens, Some(w), prompt);
                self.complete_once(request, prompt, cap, cancel, on_event)
                    .await?
            }
            other => other?,
        };
        if first.cut() != Some(Cut::Cap)
            || !first.tool_calls.is_empty()
            || first.text.trim().is_empty()
        {
            return Ok(first);
        }
        self.continued(request, first, window, cancel, on_event)
            .await
    }

    /// A text reply the output cap cut, continued: the request again with the reply so far
    /// and [`limits::CONTINUE`], the two texts joined. When that request fails, the cut reply
    /// as it is (its stop reason says it was cut).
    async fn continued(
        &self,
        request: ChatRequest<'_>,
        first: ModelResponse,
        window: Option<u64>,
        cancel: &CancellationToken,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<ModelResponse, ProviderError> {
        let now = chrono::Utc::now();
        let mut messages = request.messages.to_vec();
        messages.push(Message::new(Role::Assistant, first.text.clone(), now));
        messages.push(Message::new(Role::User, limits::CONTINUE, now));
        let next = ChatRequest {
            messages: &messages,
            ..request
        };
        let prompt = estimate_prompt(next);
        let cap = limits::output_cap(self.max_tokens, window, prompt);
        tracing::info!(
            op = "model",
            result = "continue",
            "the reply was cut by the output cap; asking the model to continue"
        );
        match self
            .complete_once(next, prompt, cap, cancel, on_event)
            .await
        {
            Ok(rest) => {
                let (a, b) = (first.usage, rest.usage);
                Ok(ModelResponse {
                    text: first.text + &rest.text,
                    tool_calls: rest.tool_calls,
                    usage: TokenUsage {
                        input_tokens: a.input_tokens + b.input_tokens,
                        output_tokens: a.output_tokens + b.output_tokens,
                        cache_read_tokens: a.cache_read_tokens + b.cache_read_tokens,
                        cache_write_tokens: a.cache_write_tokens + b.cache_write_tokens,
                        estimated: a.estimated || b.estimated,
                    },
                    stop_reason: rest.stop_reason,
                })
            }
            Err(ProviderError::Cancelled) => Err(ProviderError::Cancelled),
            Err(e) => {
                tracing::warn!(
                    op = "model",
                    result = "error",
                    "continuing a cut reply: {e}"
                );
                Ok(first)
            }
        }
    }

    /// One request, retried as [`Provider::complete`] says.
    async fn complete_once(
        &self,
        request: ChatRequest<'_>,
        prompt: u64,
        cap: Option<u32>,
        cancel: &CancellationToken,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<ModelResponse, ProviderError> {
        let mut attempt = 1;
        let mut empty = 0;
        let names = WireNames::new(request.tools);
        loop {
            let result = tokio::select! {
                () = cancel.cancelled() => Err(ProviderError::Cancelled),
                r = self.attempt(request, cap, on_event) => r,
            };
            let result = match result {
                Ok(reply) => match self.dropped_start(&reply, prompt) {
                    Some(overflow) => {
                        // What streamed is void: the request is sent again once compacted.
                        on_event(StreamEvent::Retrying {
                            attempt,
                            delay: Duration::ZERO,
                            error: overflow.to_string(),
                        });
                        Err(overflow)
                    }
                    None => {
                        if let Ok(mut w) = self.window.lock() {
                            w.largest_answered = w.largest_answered.max(prompt);
                        }
                        Ok(reply)
                    }
                },
                Err(e) => Err(self.classify(e, prompt, &mut empty).await),
            };
            match result {
                Err(e) if e.is_retryable() && attempt < self.max_attempts => {
                    let delay = self.backoff(attempt, &e);
                    tracing::warn!(
                        op = "model",
                        result = "retry",
                        attempt,
                        delay_ms = delay.as_millis() as u64,
                        "{e}"
                    );
                    on_event(StreamEvent::Retrying {
                        attempt,
                        delay,
                        error: e.to_string(),
                    });
                    tokio::select! {
                        () = cancel.cancelled() => return Err(ProviderError::Cancelled),
                        () = tokio::time::sleep(delay) => {}
                    }
                    attempt += 1;
                }
                other => {
                    return other.map(|mut response| {
                        for call in &mut response.tool_calls {
                            call.name = names.local(&call.name);
                        }
                        response
                    });
                }
            }
        }
    }

    /// Whether a failure means the prompt is too long for the server: an error that says so, or
    /// an empty or cut stream (llama-cpp-python answers a prompt over its context with HTTP
    /// 200 and nothing) to a prompt near the server's context size, or a second one to a
    /// prompt longer than any the server answered.
    async fn classify(&self, e: ProviderError, prompt: u64, empty: &mut u32) -> ProviderError {
        match &e {
            ProviderError::Http {
                status: 400 | 413 | 422 | 500,
                message,
                ..
            } if overflow_message(message) => {
                let named = window_in(message);
                if let (Some(n), Ok(mut w)) = (named, self.window.lock()) {
                    w.learned = Some(n);
                }
                ProviderError::ContextOverflow {
                    prompt_tokens: prompt,
                    window: named.or(self.learned_context_window()),
                    detail: message.clone(),
                }
            }
            ProviderError::EmptyStream | ProviderError::Truncated(_) => {
                *empty += 1;
                let window = self.context_window().await;
                // Four characters a token is rough: a prompt at three quarters of the window
                // may well be over it in the server's own tokens.
                let near = window.is_some_and(|w| prompt.saturating_mul(4) >= w.saturating_mul(3));
                let largest = self.window.lock().map(|w| w.largest_answered).unwrap_or(0);
                let grown = *empty >= 2 && largest > 0 && prompt > largest;
                if !near && !grown {
                    return e;
                }
                if !near && let Ok(mut w) = self.window.lock() {
                    w.learned = Some(w.learned.map_or(prompt, |l| l.min(prompt)));
                }
                ProviderError::ContextOverflow {
                    prompt_tokens: prompt,
                    window: window.or(self.learned_context_window()),
                    detail: format!(
                        "{e}{}",
                        if near {
                            ""
                        } else {
                            " twice, to a prompt longer than any it answered"
                        }
                    ),
                }
            }
            _ => e,
        }
    }

    /// The smallest context size known: configured, probed (once) or learned.
    async fn context_window(&self) -> Option<u64> {
        let probed = self.window.lock().ok().and_then(|w| w.probed);
        let probed = match probed {
            Some(p) => p,
            None => {
                // OpenAI's own API (and Azure's) says nothing of the kind: it is not asked.
                let found = if self.kind == ProviderKind::Openai
                    && !crate::config::is_vendor_api(&self.url)
                {
                    probe::probe(&self.client, &self.url, &self.model, self.key.as_ref()).await
                } else {
                    probe::Probe::default()
                };
                if let Ok(mut w) = self.window.lock() {
                    w.probed = Some(found.window);
                    w.ollama = found.ollama;
                }
                found.window
            }
        };
        let learned = self.window.lock().ok().and_then(|w| w.learned);
        [self.configured_window, probed, learned]
            .into_iter()
            .flatten()
            .min()
    }

    fn backoff(&self, attempt: u32, error: &ProviderError) -> Duration {
        if let ProviderError::Http {
            retry_after: Some(after),
            ..
        } = error
        {
            return (*after).min(Duration::from_secs(120));
        }
        let exp = self
            .retry_base
            .saturating_mul(1u32 << (attempt - 1).min(16))
            .min(self.retry_max);
        // Full jitter on the upper half: between 50% and 100% of the exponential delay.
        let random = (uuid::Uuid::now_v7().as_u128() & 0xFFFF) as f64 / 65535.0;
        exp.mul_f64(0.5 + random / 2.0)
    }

    async fn attempt(
        &self,
        request: ChatRequest<'_>,
        cap: Option<u32>,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<ModelResponse, ProviderError> {
        let body = match self.kind {
            ProviderKind::Openai => openai::request_body(
                &self.model,
                request,
                self.cache_key(request),
                cap.map(|n| (self.cap_field(), n)),
            ),
            // Anthropic requires a cap.
            ProviderKind::Anthropic => anthropic::request_body(
                &self.model,
                cap.unwrap_or(4096),
                request,
                self.cache_marks(),
            ),
        };
        let mut builder = self
            .client
            .post(&self.url)
            .header("accept", "text/event-stream")
            .json(&body);
        builder = match (self.kind, &self.key) {
            (ProviderKind::Openai, Some(key)) => builder.bearer_auth(&key.0),
            (ProviderKind::Anthropic, Some(key)) => builder.header("x-api-key", &key.0),
            (_, None) => builder,
        };
        if self.kind == ProviderKind::Anthropic {
            builder = builder.header("anthropic-version", "2023-06-01");
        }
        on_event(StreamEvent::Sending);
        let response = tokio::time::timeout(self.idle_timeout, builder.send())
            .await
            .map_err(|_| {
                ProviderError::Timeout(format!(
                    "no response headers within {:?}",
                    self.idle_timeout
                ))
            })?
            .map_err(|e| self.transport_error(&e))?;
        let status = response.status();
        if !status.is_success() {
            let error = self.http_error(response).await;
            if self.refused_cache_key(request, &error)
                || self.refused_cache_marks(&error)
                || self.refused_max_tokens(&error)
            {
                // A compatible server that takes no unknown fields: ask again without it.
                return Box::pin(self.attempt(request, cap, on_event)).await;
            }
            return Err(error);
        }
        let mut decoder: Box<dyn StreamDecoder> = match self.kind {
            ProviderKind::Openai => Box::new(openai::Decoder::default()),
            ProviderKind::Anthropic => Box::new(anthropic::Decoder::default()),
        };
        let is_json = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().starts_with("application/json"));
        if is_json {
            return self.whole_reply(response, decoder, on_event).await;
        }
        let mut stream = response.bytes_stream();
        let mut parser = sse::SseParser::new();
        // Keep-alive comments are bytes but no progress: the idle time counts from the last
        // event, so a stream of comments alone times out too.
        let mut last_event = tokio::time::Instant::now();
        let mut next_check = limits::CHECK_EVERY;
        loop {
            let deadline = last_event + self.idle_timeout;
            let chunk = tokio::time::timeout_at(deadline, stream.next())
                .await
                .map_err(|_| {
                    ProviderError::Timeout(format!(
                        "the stream sent no event for {:?}",
                        self.idle_timeout
                    ))
                })?;
            let Some(chunk) = chunk else { break };
            let chunk = chunk.map_err(|e| ProviderError::Truncated(self.scrub(&e.to_string())))?;
            for event in parser.push(&chunk) {
                last_event = tokio::time::Instant::now();
                decoder.event(&event, on_event)?;
                if decoder.finished() {
                    return decoder.into_response();
                }
                // A reply that repeats itself is read no further: the server stops when the
                // connection closes.
                if decoder.text().len() >= next_check {
                    next_check = decoder.text().len() + limits::CHECK_EVERY;
                    if let Some(keep) = limits::repetition_cut(decoder.text()) {
                        tracing::warn!(
                            op = "model",
                            result = "repetition",
                            "the reply repeats itself; cut after {keep} bytes"
                        );
                        decoder.stop_at(keep);
                        return decoder.into_response();
                    }
                }
            }
        }
        decoder.end_of_stream()
    }

    /// A streaming request answered with one JSON document (some compatible servers do): an
    /// OpenAI-shaped completion is taken as it is; anything else is named for what it was.
    async fn whole_reply(
        &self,
        response: reqwest::Response,
        mut decoder: Box<dyn StreamDecoder>,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<ModelResponse, ProviderError> {
        let body = tokio::time::timeout(self.idle_timeout, response.bytes())
            .await
            .map_err(|_| {
                ProviderError::Timeout(format!(
                    "the JSON reply did not arrive within {:?}",
                    self.idle_timeout
                ))
            })?
            .map_err(|e| ProviderError::Truncated(self.scrub(&e.to_string())))?;
        let text = String::from_utf8_lossy(&body).into_owned();
        let start: String = text.chars().take(200).collect();
        let what = || {
            format!(
                "the model API answered a streaming request with one JSON document, not an \
                 event stream: {}",
                self.scrub(&start)
            )
        };
        if self.kind != ProviderKind::Openai {
            return Err(ProviderError::Decode(what()));
        }
        let event = sse::SseEvent {
            event: None,
            data: text,
        };
        decoder.event(&event, on_event)?;
        decoder.end_of_stream().map_err(|e| match e {
            ProviderError::EmptyStream | ProviderError::Truncated(_) => {
                ProviderError::Decode(what())
            }
            e => e,
        })
    }

    /// The `prompt_cache_key` an OpenAI-style request carries: the conversation's key, unless
    /// caching is off or the server refused the field before.
    fn cache_key<'a>(&self, request: ChatRequest<'a>) -> Option<&'a str> {
        use std::sync::atomic::Ordering;
        request
            .cache_key
            .filter(|_| self.prompt_cache && !self.cache_key_refused.load(Ordering::Relaxed))
    }

    /// Whether `error` is a 400 refusing the `prompt_cache_key` just sent; if so it is not sent
    /// again (a warning in the log says so once).
    fn refused_cache_key(&self, request: ChatRequest<'_>, error: &ProviderError) -> bool {
        use std::sync::atomic::Ordering;
        let refused = matches!(error, ProviderError::Http { status: 400 | 422, message, .. } if message.contains("prompt_cache_key"));
        if !refused || self.cache_key(request).is_none() {
            return false;
        }
        self.cache_key_refused.store(true, Ordering::Relaxed);
        tracing::warn!(
            op = "model",
            result = "retry",
            "the server refused prompt_cache_key; sending requests without it"
        );
        true
    }

    /// The name the output cap goes by: `max_completion_tokens` for OpenAI's own API (its
    /// newer models refuse `max_tokens`) and for a server that asked for it, `max_tokens` for
    /// every other (llama.cpp, vLLM, Ollama, LiteLLM take it).
    fn cap_field(&self) -> &'static str {
        if self.url.starts_with("https://api.openai.com/")
            || self
                .max_tokens_refused
                .load(std::sync::atomic::Ordering::Relaxed)
        {
            "max_completion_tokens"
        } else {
            "max_tokens"
        }
    }

    /// Whether `error` is a server refusing `max_tokens` and naming `max_completion_tokens`
    /// ("Unsupported parameter: 'max_tokens' … Use 'max_completion_tokens' instead"); if so the
    /// cap goes by that name from now on.
    fn refused_max_tokens(&self, error: &ProviderError) -> bool {
        let refused = matches!(error, ProviderError::Http { status: 400 | 422, message, .. } if message.contains("max_completion_tokens"));
        if !refused || self.cap_field() == "max_completion_tokens" {
            return false;
        }
        self.max_tokens_refused
            .store(true, std::sync::atomic::Ordering::Relaxed);
        tracing::warn!(
            op = "model",
            result = "retry",
            "the server refused max_tokens; sending the cap as max_completion_tokens"
        );
        true
    }

    /// Whether the reply of an Ollama server was made from the end of the prompt alone.
    /// Ollama drops the start of a prompt over its context without an error, and counts only
    /// what it kept: the prompt grew (by a tenth or more since the last request) but the count
    /// did not, and it is under 80% of nop's estimate. This makes it an error, so the
    /// conversation is compacted and sent again.
    fn dropped_start(&self, reply: &ModelResponse, prompt: u64) -> Option<ProviderError> {
        let counted = reply.usage.input_tokens;
        let mut w = self.window.lock().ok()?;
        if !w.ollama || reply.usage.estimated || counted == 0 {
            return None;
        }
        let previous = w.last_counted.replace((prompt, counted));
        let flat = previous.is_some_and(|(p, c)| prompt > p + p / 10 && counted <= c + c / 50);
        if !flat || counted < 1024 || counted.saturating_mul(10) >= prompt.saturating_mul(8) {
            return None;
        }
        w.learned = Some(w.learned.map_or(counted, |l| l.min(counted)));
        Some(ProviderError::ContextOverflow {
            prompt_tokens: prompt,
            window: Some(counted),
            detail: format!(
                "Ollama evaluated only {counted} tokens of it and dropped the start (its num_ctx is smaller than the prompt; raise it with OLLAMA_CONTEXT_LENGTH or PARAMETER num_ctx in a Modelfile, and set compaction.context_window to it)"
            ),
        })
    }

    /// The context size the next request would crowd: the conversation (`messages`), the
    /// largest tool list sent and the room for the reply fill 85% of the smallest context size
    /// known (configured, probed or learned). `None` while it fits.
    pub fn crowded(&self, messages: &[Message]) -> Option<u64> {
        let (known, tools) = {
            let w = self.window.lock().ok()?;
            (
                [w.probed.flatten(), w.learned].into_iter().flatten().min(),
                w.tools,
            )
        };
        let window = [self.configured_window, known]
            .into_iter()
            .flatten()
            .min()?;
        let reply = limits::output_cap(self.max_tokens, Some(window), 0).map_or(0, u64::from);
        let need = meter::estimate_tokens(messages) + tools + reply;
        (need.saturating_mul(100) >= window.saturating_mul(85)).then_some(window)
    }

    /// Whether Anthropic requests carry cache marks (a `system` block array among them).
    fn cache_marks(&self) -> bool {
        self.prompt_cache
            && !self
                .cache_marks_refused
                .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether `error` is a gateway failing on the cache marks just sent: an HTTP 400 or 500
    /// from a server other than Anthropic's own, to a marked request. If so, requests go
    /// unmarked from now on (a warning in the log says so once). Anthropic's own 500s are
    /// overloads, retried as they are.
    fn refused_cache_marks(&self, error: &ProviderError) -> bool {
        use std::sync::atomic::Ordering;
        let gateway = self.kind == ProviderKind::Anthropic
            && !self.url.starts_with("https://api.anthropic.com/");
        if !gateway
            || !self.cache_marks()
            || !matches!(
                error,
                ProviderError::Http {
                    status: 400 | 500,
                    ..
                }
            )
        {
            return false;
        }
        self.cache_marks_refused.store(true, Ordering::Relaxed);
        tracing::warn!(
            op = "model",
            result = "retry",
            "the server failed on a request with cache marks ({error}); sending requests without them (plain-string system)"
        );
        true
    }

    fn scrub(&self, text: &str) -> String {
        match &self.key {
            Some(key) => key.scrub(text),
            None => text.to_string(),
        }
    }

    fn transport_error(&self, e: &reqwest::Error) -> ProviderError {
        if e.is_timeout() {
            ProviderError::Timeout(self.scrub(&e.to_string()))
        } else {
            ProviderError::Connect {
                url: self.url.clone(),
                cause: self.scrub(&transport_cause(e)),
            }
        }
    }

    async fn http_error(&self, response: reqwest::Response) -> ProviderError {
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(Duration::from_secs_f64);
        // A body that stalls must not hold the request forever.
        let body = tokio::time::timeout(self.idle_timeout, response.text())
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_else(|| format!("(no body within {:?})", self.idle_timeout));
        let json = serde_json::from_str::<Value>(&body).ok();
        let message = json
            .as_ref()
            .and_then(|v| {
                v.pointer("/error/message")
                    .or_else(|| v.pointer("/message"))
                    .or_else(|| v.get("error"))
                    .and_then(|m| m.as_str().map(str::to_string))
            })
            .unwrap_or_else(|| body.chars().take(300).collect());
        if let Some(code) = json.as_ref().and_then(quota_code) {
            return ProviderError::Quota {
                status,
                code: code.to_string(),
                message: self.scrub(message.trim()),
            };
        }
        ProviderError::Http {
            status,
            message: self.scrub(message.trim()),
            retry_after,
        }
    }
}

/// The tokens of a request's prompt, estimated as the budget's estimate does (four characters
/// a token): the messages and the tools' schemas.
fn estimate_prompt(request: ChatRequest<'_>) -> u64 {
    meter::estimate_tokens(request.messages) + estimate_tools(request.tools)
}

/// The tokens the tool list takes in a request (four characters a token).
fn estimate_tools(tools: &[ToolSpec]) -> u64 {
    let chars: usize = tools
        .iter()
        .map(|t| t.name.len() + t.description.len() + t.parameters.to_string().len())
        .sum();
    chars as u64 / 4
}

/// Whether a server's error message says the prompt is over the context: OpenAI and vLLM
/// ("maximum context length is 8192 tokens"), Anthropic ("prompt is too long"), llama.cpp
/// (`exceed_context_size_error`, "exceeds the available context size"), LiteLLM
/// (`ContextWindowExceededError`), Ollama and others.
fn overflow_message(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    [
        "context length",
        "context_length",
        "context window",
        "contextwindowexceeded",
        "context size",
        "exceed_context_size",
        "prompt is too long",
        "too many tokens",
        "input is too long",
        "maximum context",
    ]
    .iter()
    .any(|p| m.contains(p))
}

/// The context size an overflow error names, when it names one: `"n_ctx": 4096` (llama.cpp),
/// "maximum context length is 8192 tokens" (OpenAI, vLLM), "> 200000 maximum" (Anthropic).
fn window_in(message: &str) -> Option<u64> {
    static PATTERNS: std::sync::OnceLock<Vec<regex::Regex>> = std::sync::OnceLock::new();
    let patterns = PATTERNS.get_or_init(|| {
        [
            r#""?n_ctx"?\s*[:=]\s*(\d+)"#,
            r"(?i)maximum context length is (\d+)",
            r"(?i)context (?:length|window|size) (?:is |of )?(\d+)",
            r"(\d+) maximum",
        ]
        .iter()
        .filter_map(|p| regex::Regex::new(p).ok())
        .collect()
    });
    patterns.iter().find_map(|re| {
        re.captures(message)
            .and_then(|c| c.get(1))
            .and_then(|n| n.as_str().parse().ok())
            .filter(|n| *n > 0)
    })
}

/// The error code of a reply that says the account has no quota or credit left (OpenAI sends
/// it with a 429, like a rate limit): `insufficient_quota`, or a billing limit.
fn quota_code(body: &Value) -> Option<&str> {
    const CODES: [&str; 3] = [
        "insufficient_quota",
        "billing_hard_limit_reached",
        "billing_not_active",
    ];
    ["/error/code", "/error/type", "/code", "/type"]
        .iter()
        .filter_map(|p| body.pointer(p).and_then(Value::as_str))
        .find(|code| CODES.contains(code))
}

/// Why a request got no answer, from the bottom of the error's chain: reqwest's own message
/// only repeats the URL ("error sending request for url (…)"), the reason (connection refused,
/// a DNS failure, a certificate the TLS handshake rejected) is in its sources.
fn transport_cause(e: &reqwest::Error) -> String {
    use std::error::Error as _;
    let mut reasons: Vec<String> = Vec::new();
    let mut kind = None;
    let mut next = e.source();
    while let Some(s) = next {
        next = s.source();
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            kind = kind.or(match io.kind() {
                std::io::ErrorKind::ConnectionRefused => Some("connection refused"),
                std::io::ErrorKind::ConnectionReset => Some("connection reset"),
                std::io::ErrorKind::TimedOut => Some("connection timed out"),
                _ => None,
            });
            // An io::Error's `source()` skips the error it wraps (tokio-rustls wraps the
            // handshake's error, sometimes twice): step into it instead.
            if let Some(inner) = io.get_ref() {
                next = Some(inner);
            }
        }
        let text = s.to_string();
        if s.is::<rustls::Error>() {
            kind = kind.or(Some("TLS failed"));
        } else if text.starts_with("dns error") {
            kind = kind.or(Some("DNS lookup failed"));
        }
        // hyper's "client error (Connect)" says nothing the rest does not.
        if !text.is_empty() && !text.starts_with("client error (") && !reasons.contains(&text) {
            reasons.push(text);
        }
    }
    let detail = if reasons.is_empty() {
        e.to_string()
    } else {
        reasons.join(": ")
    };
    match kind {
        Some(kind) => format!("{kind} ({detail})"),
        None => detail,
    }
}

/// Turns a provider's SSE events into a [`ModelResponse`].
trait StreamDecoder: Send {
    fn event(
        &mut self,
        event: &sse::SseEvent,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<(), ProviderError>;
    /// The end marker arrived.
    fn finished(&self) -> bool;
    fn into_response(self: Box<Self>) -> Result<ModelResponse, ProviderError>;
    /// The connection closed; decide whether what arrived is a whole reply.
    fn end_of_stream(self: Box<Self>) -> Result<ModelResponse, ProviderError>;
    /// The reply's text so far.
    fn text(&self) -> &str;
    /// Ends the reply at byte `keep` of its text, cut for repeating itself.
    fn stop_at(&mut self, keep: usize);
}

/// A tool call whose arguments are still arriving.
#[derive(Debug, Default, Clone)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

impl PartialCall {
    /// Arguments that are not valid JSON are kept as a string, so the tool layer can tell the
    /// model exactly what was wrong instead of the run failing here.
    fn finish(self, fallback_id: usize) -> ToolCall {
        let arguments = if self.arguments.trim().is_empty() {
            Value::Object(Default::default())
        } else {
            serde_json::from_str(&self.arguments).unwrap_or(Value::String(self.arguments))
        };
        ToolCall {
            id: if self.id.is_empty() {
                format!("call_{fallback_id}")
            } else {
                self.id
            },
            name: self.name,
            arguments,
            extra: Default::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exhausted_quota_is_no_rate_limit() {
        let quota = serde_json::json!({"error": {"message": "You exceeded your current quota",
            "type": "insufficient_quota", "code": "insufficient_quota"}});
        assert_eq!(quota_code(&quota), Some("insufficient_quota"));
        let rate = serde_json::json!({"error": {"message": "Rate limit reached",
            "type": "requests", "code": "rate_limit_exceeded"}});
        assert_eq!(quota_code(&rate), None);
        let error = ProviderError::Quota {
            status: 429,
            code: "insufficient_quota".into(),
            message: "You exceeded your current quota".into(),
        };
        assert!(!error.is_retryable());
        assert!(error.to_string().contains("not a rate limit"));
    }

    #[test]
    fn overflow_errors_are_recognised_with_the_size_they_name() {
        let cases = [
            (
                "This model's maximum context length is 8192 tokens. However, you requested 9000 tokens",
                Some(8192),
            ),
            (
                "prompt is too long: 210000 tokens > 200000 maximum",
                Some(200_000),
            ),
            (
                r#"{"code":400,"message":"the request exceeds the available context size","type":"exceed_context_size_error","n_prompt_tokens":5000,"n_ctx":4096}"#,
                Some(4096),
            ),
            ("litellm.ContextWindowExceededError: too long", None),
        ];
        for (message, window) in cases {
            assert!(overflow_message(message), "{message}");
            assert_eq!(window_in(message), window, "{message}");
        }
        assert!(!overflow_message("Internal Server Error"));
        assert!(!overflow_message(
            "1 validation error for ChatCompletionRequestAssistantMessage"
        ));
    }

    #[test]
    fn local_hosts_need_no_key() {
        for url in [
            "http://localhost:11434/v1",
            "http://127.0.0.1:8080",
            "http://[::1]:9/v1",
            "http://user@localhost/",
        ] {
            assert!(is_local(url), "{url}");
        }
        for url in [
            "https://api.openai.com/v1",
            "http://127example.com",
            "https://localhost.evil.com",
        ] {
            assert!(!is_local(url), "{url}");
        }
    }

    #[test]
    fn missing_key_error_names_the_variables_and_never_the_key() {
        let config = ProviderConfig {
            model: Some("m".into()),
            ..ProviderConfig::default()
        };
        let err = Provider::from_config(&config, &BTreeMap::new())
            .err()
            .map(|e| e.to_string());
        assert!(
            err.as_deref()
                .is_some_and(|e| e.contains("NOP_API_KEY or OPENAI_API_KEY")),
            "{err:?}"
        );
        let mut env = BTreeMap::new();
        env.insert("OPENAI_API_KEY".to_string(), "sk-secret-123456".to_string());
        let provider = Provider::from_config(&config, &env);
        assert!(
            provider
                .as_ref()
                .is_ok_and(|p| !format!("{p:?}").contains("secret"))
        );
    }
}
