//! Subagents side by side (issue 30): the model calls three subagents in one turn, each runs a
//! shell command that takes 2 s, then answers. Wall time of the whole `nop run` with
//! `agent.max_parallel` 4 (the default) and 1 (every call in order).
//!
//! Run with `cargo bench --bench parallel`.

#[allow(dead_code, clippy::unwrap_used, clippy::expect_used)]
#[path = "../tests/support/mock.rs"]
mod mock;

use std::process::Command;
use std::time::Instant;

use mock::{MockServer, RecordedRequest, openai};
use serde_json::json;

const TASKS: [&str; 3] = ["task A", "task B", "task C"];
const RUNS: usize = 3;

fn server() -> MockServer {
    MockServer::start_with(Box::new(|request: &RecordedRequest| {
        let users = request.user_messages();
        let results = request.tool_results();
        match TASKS
            .iter()
            .find(|t| users.first().is_some_and(|u| u == *t))
        {
            Some(_) if results.is_empty() => {
                openai::reply_tool_calls(&[("sh", "shell", json!({"command": "sleep 2"}))])
            }
            Some(task) => openai::reply_text(&format!("done {task}")),
            None if results.is_empty() => {
                let calls: Vec<(String, serde_json::Value)> = TASKS
                    .iter()
                    .enumerate()
                    .map(|(i, t)| (format!("c{i}"), json!({"agent": "coder", "arguments": t})))
                    .collect();
                let calls: Vec<(&str, &str, serde_json::Value)> = calls
                    .iter()
                    .map(|(id, args)| (id.as_str(), "call-agent", args.clone()))
                    .collect();
                openai::reply_tool_calls(&calls)
            }
            None => openai::reply_text("all done"),
        }
    }))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let nop = env!("CARGO_BIN_EXE_nop");
    let base = std::path::Path::new("/var/tmp/nop-bench");
    std::fs::create_dir_all(base)?;
    let repo = tempfile::tempdir_in(base)?;
    let init = Command::new(nop)
        .arg("init")
        .current_dir(repo.path())
        .output()?;
    assert!(init.status.success());
    println!("| agent.max_parallel | three subagents, 2 s each (median of {RUNS}) |");
    println!("|---:|---:|");
    for parallel in ["4", "1"] {
        let mut walls = Vec::with_capacity(RUNS);
        for _ in 0..RUNS {
            let server = server();
            let started = Instant::now();
            let output = Command::new(nop)
                .current_dir(repo.path())
                .env_clear()
                .env("HOME", repo.path())
                .env("PATH", std::env::var("PATH").unwrap_or_default())
                .env("NOP_BASE_URL", server.openai_base_url())
                .env("NOP_MODEL", "mock")
                .env("NOP_ADVISORS_ENABLED", "false")
                .args(["run", "--output-format", "json", "--set"])
                .arg(format!("agent.max_parallel={parallel}"))
                .arg("split the work in three")
                .output()?;
            walls.push(started.elapsed().as_secs_f64());
            assert!(
                output.status.success(),
                "{}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        walls.sort_by(f64::total_cmp);
        println!("| {parallel} | {:.2} s |", walls[RUNS / 2]);
    }
    Ok(())
}
