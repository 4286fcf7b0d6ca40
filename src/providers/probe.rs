//! Asking an OpenAI-compatible server its context size, where each server says it: llama.cpp's
//! `GET /props` (`default_generation_settings.n_ctx`, or `n_ctx` at the top in newer builds),
//! vLLM's `GET /v1/models` (`max_model_len` of the model's entry), Ollama's `GET /api/ps`
//! (`context_length` of the loaded model: the context it runs with) and `POST /api/show`
//! (`num_ctx` in the model's `parameters`, else `model_info["<arch>.context_length"]`, what
//! the model was trained for). Asked once per server and model in a process, each question
//! for at most two seconds, all at once; a failure is "unknown", never an error.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use serde_json::{Value, json};

use super::ApiKey;

/// What a server said of itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Probe {
    /// Its context size in tokens, when it said one.
    pub window: Option<u64>,
    /// It answered Ollama's own API: its usage counts what it evaluated of the prompt, which is
    /// less than the prompt when it dropped the start.
    pub ollama: bool,
}

/// How long each question may take.
const PATIENCE: Duration = Duration::from_secs(2);

fn cache() -> &'static Mutex<HashMap<String, Probe>> {
    static CACHE: OnceLock<Mutex<HashMap<String, Probe>>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// What the server behind `chat_url` (`…/chat/completions`) says of `model`, asked once per
/// process for each server and model.
pub(super) async fn probe(
    client: &reqwest::Client,
    chat_url: &str,
    model: &str,
    key: Option<&ApiKey>,
) -> Probe {
    let cache_key = format!("{chat_url} {model}");
    if let Some(known) = cache().lock().ok().and_then(|c| c.get(&cache_key).copied()) {
        return known;
    }
    let found = ask(client, chat_url, model, key).await;
    if let Some(n) = found.window {
        tracing::info!(op = "model", context = n, "the server's context size");
    }
    if let Ok(mut c) = cache().lock() {
        c.insert(cache_key, found);
    }
    found
}

async fn ask(client: &reqwest::Client, chat_url: &str, model: &str, key: Option<&ApiKey>) -> Probe {
    let base = chat_url.trim_end_matches("/chat/completions");
    let origin = match base.find("://") {
        Some(i) => match base[i + 3..].find('/') {
            Some(j) => &base[..i + 3 + j],
            None => base,
        },
        None => base,
    };
    let get = |url: String| {
        let mut request = client.get(url).timeout(PATIENCE);
        if let Some(key) = key {
            request = request.bearer_auth(&key.0);
        }
        fetch(request)
    };
    let mut show = client
        .post(format!("{origin}/api/show"))
        .timeout(PATIENCE)
        .json(&json!({ "model": model }));
    if let Some(key) = key {
        show = show.bearer_auth(&key.0);
    }
    let (props, models, ps, show) = tokio::join!(
        get(format!("{origin}/props")),
        get(format!("{base}/models")),
        get(format!("{origin}/api/ps")),
        fetch(show),
    );
    let ollama = show.is_some() || ps.as_ref().is_some_and(|b| b.get("models").is_some());
    let window = props
        .as_ref()
        .and_then(|b| window_of(b, model))
        .or_else(|| models.as_ref().and_then(|b| window_of(b, model)))
        .or_else(|| ps.as_ref().and_then(|b| window_of(b, model)))
        .or_else(|| show.as_ref().and_then(ollama_window));
    Probe { window, ollama }
}

/// The JSON body of a successful answer, `None` for anything else.
async fn fetch(request: reqwest::RequestBuilder) -> Option<Value> {
    let response = request.send().await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    tokio::time::timeout(PATIENCE, response.json::<Value>())
        .await
        .ok()?
        .ok()
}

/// The context size in a server's description of itself: llama.cpp's `/props`, vLLM's
/// `/v1/models` entry for `model`, Ollama's `/api/ps` entry for it.
pub(super) fn window_of(body: &Value, model: &str) -> Option<u64> {
    if let Some(n) = number(body.pointer("/default_generation_settings/n_ctx"))
        .or_else(|| number(body.get("n_ctx")))
    {
        return Some(n);
    }
    let entries = body
        .get("data")
        .or_else(|| body.get("models"))
        .and_then(Value::as_array)?;
    let named = |e: &&Value| {
        ["id", "name", "model"]
            .iter()
            .any(|k| e.get(k).and_then(Value::as_str) == Some(model))
    };
    let entry = entries.iter().find(named).or(if entries.len() == 1 {
        entries.first()
    } else {
        None
    })?;
    number(entry.get("max_model_len")).or_else(|| number(entry.get("context_length")))
}

/// Ollama's `/api/show`: the `num_ctx` the model's Modelfile sets (what Ollama runs it with),
/// else what the model was trained for (`model_info["<arch>.context_length"]`), an upper bound:
/// Ollama may run it with less (`OLLAMA_CONTEXT_LENGTH`, or its default), which the usage of a
/// reply shows (see `Provider::dropped_start`).
fn ollama_window(body: &Value) -> Option<u64> {
    let parameters = body.get("parameters").and_then(Value::as_str);
    let num_ctx = parameters.and_then(|p| {
        p.lines().find_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some("num_ctx"))
                .then(|| words.next()?.parse::<u64>().ok())
                .flatten()
        })
    });
    num_ctx.filter(|n| *n > 0).or_else(|| {
        body.get("model_info")?
            .as_object()?
            .iter()
            .find(|(k, _)| k.ends_with(".context_length"))
            .and_then(|(_, v)| number(Some(v)))
    })
}

fn number(v: Option<&Value>) -> Option<u64> {
    v.and_then(Value::as_u64).filter(|n| *n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_describe_their_context_size_in_their_own_places() {
        let llama_cpp = json!({"default_generation_settings": {"n_ctx": 2048}});
        assert_eq!(window_of(&llama_cpp, "m"), Some(2048));
        let llama_cpp_new = json!({"n_ctx": 8192, "default_generation_settings": {"params": {}}});
        assert_eq!(window_of(&llama_cpp_new, "m"), Some(8192));
        let vllm = json!({"object": "list", "data": [
            {"id": "other", "max_model_len": 4096}, {"id": "m", "max_model_len": 32768}]});
        assert_eq!(window_of(&vllm, "m"), Some(32768));
        let ollama = json!({"models": [{"name": "qwen3:0.6b", "context_length": 4096}]});
        assert_eq!(window_of(&ollama, "qwen3:0.6b"), Some(4096));
        let llama_cpp_python =
            json!({"object": "list", "data": [{"id": "a", "object": "model"}, {"id": "b"}]});
        assert_eq!(window_of(&llama_cpp_python, "m"), None);
    }

    #[test]
    fn ollama_show_prefers_the_modelfile_num_ctx_to_the_trained_length() {
        let trained = json!({"parameters": "stop \"<|im_end|>\"",
            "model_info": {"general.architecture": "qwen2", "qwen2.context_length": 32768}});
        assert_eq!(ollama_window(&trained), Some(32768));
        let set = json!({"parameters": "num_ctx                        8192\nstop \"<|im_end|>\"",
            "model_info": {"qwen2.context_length": 32768}});
        assert_eq!(ollama_window(&set), Some(8192));
        assert_eq!(ollama_window(&json!({"modelfile": "FROM x"})), None);
    }
}
