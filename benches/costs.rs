//! What a long session costs: a 50-turn `nop run` against the mock model, which reports the
//! tokens a provider's prompt cache would serve (`MockServer::simulate_prompt_cache`: OpenAI's
//! automatic prefix cache, Anthropic's `cache_control` marks), for both APIs.
//!
//! The 50 turns are a realistic mix: 36 successful calls (read-file, list-files, shell), 12
//! that fail deterministically (a missing file, bad arguments, a refused path, an edit whose
//! text is not there) and 2 shell commands that time out. Advisors are on; retry-advisor answers
//! "skip". Reported: the share of input tokens served from the cache, the cost at Claude Sonnet
//! list prices, and retry-advisor requests per 10 turns — with the default `advisors.retry_on:
//! all` (every failed call goes to the advisor, whose decision holds for the same tool failing
//! the same way) and with the opt-in that limits it to the kinds a retry can change.
//!
//! Run with `cargo bench --bench costs`.

#[allow(dead_code, clippy::unwrap_used, clippy::expect_used)]
#[path = "../tests/support/mock.rs"]
mod mock;

use std::process::Command;

use mock::{MockServer, RecordedRequest, anthropic, openai};
use serde_json::{Value, json};

const TURNS: usize = 50;

/// Turn `i`'s tool call, and whether it fails deterministically.
fn call(i: usize) -> (Value, &'static str, bool) {
    match i % 25 {
        3 | 16 => (
            json!({"path": format!("src/missing_{i}.rs")}),
            "read-file",
            true,
        ),
        6 | 19 => (json!({"path": i}), "edit-file", true),
        9 | 22 => (
            json!({"path": format!("../../etc/shadow{i}")}),
            "read-file",
            true,
        ),
        12 | 24 => (
            json!({"path": "src/lib.rs", "old_string": format!("no such text {i}"), "new_string": "x"}),
            "edit-file",
            true,
        ),
        14 => (
            json!({"command": "sleep 5", "timeout_s": 0.2}),
            "shell",
            false,
        ),
        n if n % 3 == 0 => (
            json!({"command": "ls src && wc -l src/lib.rs"}),
            "shell",
            false,
        ),
        n if n % 3 == 1 => (json!({"path": "src/lib.rs"}), "read-file", false),
        _ => (json!({"path": "src"}), "list-files", false),
    }
}

/// Answers each request: retry-advisor's with "skip", the agent's with turn after turn of
/// calls, then "Done.".
fn responder(kind: &'static str) -> mock::Responder {
    let mut turn = 0;
    Box::new(move |request: &RecordedRequest| {
        let reply = |text: &str| match kind {
            "anthropic" => anthropic::reply_text(text),
            _ => openai::reply_text(text),
        };
        if is_advisor(request) {
            return reply(
                r#"{"shouldRetry": false, "reason": "it would fail again", "suggestedAction": "skip"}"#,
            );
        }
        turn += 1;
        if turn > TURNS {
            return reply("Done.");
        }
        let (args, tool, _) = call(turn);
        let id = format!("c{turn}");
        match kind {
            "anthropic" => anthropic::reply_tool_calls(&[(&id, tool, args)]),
            _ => openai::reply_tool_calls(&[(&id, tool, args)]),
        }
    })
}

fn is_advisor(request: &RecordedRequest) -> bool {
    let system = match request.body["system"].as_array() {
        Some(blocks) => blocks[0]["text"].as_str().unwrap_or_default().to_string(),
        None => request.body["messages"][0]["content"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    };
    system.contains("retry advisor")
}

fn session(kind: &'static str, transient_only: bool) -> Result<(), Box<dyn std::error::Error>> {
    std::fs::create_dir_all("/var/tmp/nop-bench")?;
    let repo = tempfile::tempdir_in("/var/tmp/nop-bench")?;
    let nop = env!("CARGO_BIN_EXE_nop");
    let init = Command::new(nop)
        .arg("init")
        .current_dir(repo.path())
        .env_clear()
        .output()?;
    assert!(init.status.success());
    std::fs::create_dir_all(repo.path().join("src"))?;
    std::fs::write(
        repo.path().join("src/lib.rs"),
        "pub fn answer() -> u32 { 42 }\n".repeat(40),
    )?;
    let config = repo.path().join(".nop/config.yml");
    let mut text = std::fs::read_to_string(&config)?;
    text.push_str(
        "\npricing:\n  mock-model: {input: 3.0, output: 15.0, cache_write: 3.75, cache_read: 0.30}\n",
    );
    std::fs::write(&config, text)?;
    if transient_only {
        let set = Command::new(nop)
            .current_dir(repo.path())
            .env_clear()
            .args([
                "config",
                "set",
                "advisors.retry_on",
                "[Timeout, Interrupted, SpawnFailed, WaitFailed, PluginError, PluginToolFailed]",
            ])
            .output()?;
        assert!(
            set.status.success(),
            "{}",
            String::from_utf8_lossy(&set.stderr)
        );
    }
    let server = MockServer::start_with(responder(kind));
    server.simulate_prompt_cache();
    let base = if kind == "anthropic" {
        server.anthropic_base_url()
    } else {
        server.openai_base_url()
    };
    let output = Command::new(nop)
        .current_dir(repo.path())
        .env_clear()
        .env("HOME", repo.path())
        .env("NOP_PROVIDER", kind)
        .env("NOP_BASE_URL", base)
        .env("NOP_MODEL", "mock-model")
        .env("NOP_ADVISORS_ENABLED", "true")
        .env("NOP_ADVISORS_RETRY_DELAY_S", "0")
        .args(["run", "--output-format", "json", "work through the task"])
        .output()?;
    let result: Value = serde_json::from_slice(&output.stdout)
        .map_err(|e| format!("{e}: {}", String::from_utf8_lossy(&output.stderr)))?;
    assert_eq!(result["final_message"], "Done.", "{result}");
    let usage = &result["usage"];
    let (read, input) = (
        usage["cache_read_tokens"].as_f64().unwrap_or(0.0),
        usage["input_tokens"].as_f64().unwrap_or(0.0),
    );
    let advisors: Vec<RecordedRequest> = server.requests().into_iter().filter(is_advisor).collect();
    let advisor = advisors.len();
    let advisor_bytes = advisors
        .iter()
        .map(|r| r.body.to_string().len())
        .max()
        .unwrap_or(0);
    let uncached_cost = (input * 3.0 + usage["output_tokens"].as_f64().unwrap_or(0.0) * 15.0) / 1e6;
    println!(
        "| {kind} | {} | {} | {:.0}% | ${:.3} (${uncached_cost:.3} uncached) | {} | {:.1} | {advisor_bytes} |",
        if transient_only {
            "transient kinds only (opt-in)"
        } else {
            "every failure (default)"
        },
        usage["requests"],
        read * 100.0 / input.max(1.0),
        result["total_cost_usd"].as_f64().unwrap_or(f64::NAN),
        advisor,
        advisor as f64 * 10.0 / TURNS as f64,
    );
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!(
        "| API | failures sent to retry-advisor | turn requests | input served from cache | cost of the turns | retry-advisor requests | per 10 turns | largest advisor request (bytes) |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    for kind in ["openai", "anthropic"] {
        for transient_only in [false, true] {
            session(kind, transient_only)?;
        }
    }
    Ok(())
}
