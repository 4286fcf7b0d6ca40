//! Compaction over a long session: a 200-turn scripted task (each turn one `read-file` of a
//! 2 KB file) run once with compaction and once without, against a mock model that answers by
//! what each request is (main agent, compression-advisor, CompactAgent). Reports the tokens sent
//! to the model per main turn (request body bytes / 4) and how many advisor calls were made.
//!
//! Run with `cargo bench --bench compaction`.

#[allow(dead_code, clippy::unwrap_used, clippy::expect_used)]
#[path = "../tests/support/mock.rs"]
mod mock;

use std::process::Command;

use mock::{MockServer, openai};
use serde_json::json;

const TURNS: usize = 200;

struct Result_ {
    main_tokens: Vec<usize>,
    advisor_calls: usize,
    compactions: usize,
}

fn run(compaction: bool) -> Result<Result_, Box<dyn std::error::Error>> {
    let repo = tempfile::tempdir()?;
    let nop = env!("CARGO_BIN_EXE_nop");
    assert!(
        Command::new(nop)
            .arg("init")
            .current_dir(repo.path())
            .output()?
            .status
            .success()
    );
    std::fs::write(
        repo.path().join("data.txt"),
        "0123456789abcdef ".repeat(120),
    )?;
    let mut main_turns = 0usize;
    let server = MockServer::start_with(Box::new(move |request| {
        let system = request.body["messages"][0]["content"]
            .as_str()
            .unwrap_or_default();
        if system.contains("context-management advisor") {
            return openai::reply_text(&json!({"shouldCompress": true, "reason": "near the window", "priority": "medium", "suggestions": []}).to_string());
        }
        if system.contains("You compress the earlier part") {
            return openai::reply_text(
                "Summary: the agent has been reading data.txt repeatedly; nothing changed.",
            );
        }
        main_turns += 1;
        if main_turns <= TURNS {
            openai::reply_tool_calls(&[(
                &format!("c{main_turns}"),
                "read-file",
                json!({"path": "data.txt"}),
            )])
        } else {
            openai::reply_text("done")
        }
    }));
    let output = Command::new(nop)
        .current_dir(repo.path())
        .env_clear()
        .env("NOP_BASE_URL", server.openai_base_url())
        .env("NOP_MODEL", "mock")
        .env("NOP_AGENT_MAX_TURNS", "300")
        .env(
            "NOP_ADVISORS_ENABLED",
            if compaction { "true" } else { "false" },
        )
        .env("NOP_COMPACTION_CONTEXT_WINDOW", "32000")
        .args([
            "run",
            "--output-format",
            "json",
            "read data.txt two hundred times",
        ])
        .output()?;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let requests = server.requests();
    let is = |r: &mock::RecordedRequest, needle: &str| {
        r.body["messages"][0]["content"]
            .as_str()
            .unwrap_or_default()
            .contains(needle)
    };
    Ok(Result_ {
        main_tokens: requests
            .iter()
            .filter(|r| is(r, "nop's coding agent"))
            .map(|r| r.raw_body.len() / 4)
            .collect(),
        advisor_calls: requests
            .iter()
            .filter(|r| is(r, "context-management advisor"))
            .count(),
        compactions: requests
            .iter()
            .filter(|r| is(r, "You compress the earlier part"))
            .count(),
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!(
        "| | turn 1 | turn 50 | turn 100 | turn 150 | turn 200 | max | total sent | advisor calls | compactions |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (label, on) in [
        ("without compaction", false),
        ("with compaction (32k window)", true),
    ] {
        let r = run(on)?;
        let t = |turn: usize| r.main_tokens.get(turn - 1).copied().unwrap_or(0);
        println!(
            "| {label} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            t(1),
            t(50),
            t(100),
            t(150),
            t(200),
            r.main_tokens.iter().max().copied().unwrap_or(0),
            r.main_tokens.iter().sum::<usize>(),
            r.advisor_calls,
            r.compactions
        );
    }
    Ok(())
}
