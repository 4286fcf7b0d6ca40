//! nop's own overhead per run against a zero-latency mock model: wall time and peak memory (max
//! RSS) of the release `nop run` process for a 1-turn task and a 10-tool-call task (ten turns of
//! one `read-file` call each, then the answer: 11 model requests, 11 session writes of the
//! assistant turn and 10 of tool results).
//!
//! Run with `cargo bench --bench run_overhead`. Each scenario runs in a child of this benchmark
//! so that `getrusage(RUSAGE_CHILDREN)` reports that scenario's peak alone.

#[allow(dead_code, clippy::unwrap_used, clippy::expect_used)]
#[path = "../tests/support/mock.rs"]
mod mock;

use std::process::Command;
use std::time::Instant;

use mock::{MockResponse, MockServer, openai};
use serde_json::json;

const RUNS: usize = 20;

fn script(scenario: &str) -> Vec<MockResponse> {
    match scenario {
        "one-turn" => vec![openai::reply_text("Done: nothing to change.")],
        _ => {
            let mut script: Vec<MockResponse> = (0..10)
                .map(|i| {
                    openai::reply_tool_calls(&[(
                        &format!("c{i}"),
                        "read-file",
                        json!({"path": "src/lib.rs"}),
                    )])
                })
                .collect();
            script.push(openai::reply_text("Read it ten times."));
            script
        }
    }
}

fn run_scenario(scenario: &str) -> Result<(), Box<dyn std::error::Error>> {
    let repo = tempfile::tempdir()?;
    let nop = env!("CARGO_BIN_EXE_nop");
    let status = Command::new(nop)
        .arg("init")
        .current_dir(repo.path())
        .output()?;
    assert!(status.status.success());
    std::fs::create_dir_all(repo.path().join("src"))?;
    std::fs::write(
        repo.path().join("src/lib.rs"),
        "pub fn answer() -> u32 { 42 }\n".repeat(50),
    )?;
    let mut walls = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let server = MockServer::start(script(scenario));
        let started = Instant::now();
        let output = Command::new(nop)
            .current_dir(repo.path())
            .env_clear()
            .env("NOP_BASE_URL", server.openai_base_url())
            .env("NOP_MODEL", "mock")
            .args(["run", "--output-format", "json", "do the task"])
            .output()?;
        walls.push(started.elapsed().as_secs_f64() * 1000.0);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    walls.sort_by(f64::total_cmp);
    let rss_kb =
        nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)?.max_rss();
    println!(
        "| {scenario} | {:.1} ms | {:.1} ms | {:.1} MB |",
        walls[RUNS / 2],
        walls[RUNS * 9 / 10],
        rss_kb as f64 / 1024.0
    );
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--scenario") {
        return run_scenario(&args[i + 1]);
    }
    println!("| task | wall time (median) | wall time (p90) | peak memory (max RSS) |");
    println!("|---|---:|---:|---:|");
    let me = std::env::current_exe()?;
    for scenario in ["one-turn", "ten-tool-calls"] {
        let status = Command::new(&me).args(["--scenario", scenario]).status()?;
        assert!(status.success());
    }
    Ok(())
}
