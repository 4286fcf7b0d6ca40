//! nop's peak memory while a command prints far more than the model reads: the scripted model
//! makes one `shell` call printing 200 MB (on standard output, then on standard error), and the
//! release `nop run` process's peak resident memory (max RSS) is reported, with the wall time,
//! the size of the tool result the model got and of the session's out log.
//!
//! Run with `cargo bench --bench output`; `cargo bench --bench output -- --nop PATH` measures
//! another nop binary (an older build, for a before/after). Each scenario runs in a child of
//! this benchmark so that `getrusage(RUSAGE_CHILDREN)` reports that scenario's nop alone.

#[allow(dead_code, clippy::unwrap_used, clippy::expect_used)]
#[path = "../tests/support/mock.rs"]
mod mock;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use mock::{MockServer, openai};
use serde_json::json;

const BYTES: u64 = 200_000_000;

fn command(scenario: &str) -> String {
    let print = format!("head -c {BYTES} /dev/zero | tr '\\0' x");
    match scenario {
        "stderr" => format!("{print} >&2"),
        _ => print,
    }
}

fn run_scenario(nop: &Path, scenario: &str) -> Result<(), Box<dyn std::error::Error>> {
    std::fs::create_dir_all("/var/tmp/nop-bench")?;
    let repo = tempfile::tempdir_in("/var/tmp/nop-bench")?;
    let init = Command::new(nop)
        .arg("init")
        .current_dir(repo.path())
        .env_clear()
        .env("HOME", repo.path())
        .output()?;
    assert!(init.status.success());
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("c1", "shell", json!({"command": command(scenario)}))]),
        openai::reply_text("Printed."),
    ]);
    let started = Instant::now();
    let output = Command::new(nop)
        .current_dir(repo.path())
        .env_clear()
        .env("HOME", repo.path())
        .env("NOP_BASE_URL", server.openai_base_url())
        .env("NOP_MODEL", "mock")
        .env("NOP_ADVISORS_ENABLED", "false")
        .args(["run", "--output-format", "json", "print a lot"])
        .output()?;
    let wall = started.elapsed().as_secs_f64();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rss_kb =
        nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)?.max_rss();
    let requests = server.requests();
    let result = requests
        .get(1)
        .and_then(|r| r.tool_results().into_iter().next())
        .unwrap_or_default();
    let mut log_bytes = 0;
    for session in std::fs::read_dir(repo.path().join(".nop/sessions"))?.flatten() {
        for file in std::fs::read_dir(session.path())?.flatten() {
            if file.file_name().to_string_lossy().starts_with("out-") {
                log_bytes += file.metadata()?.len();
            }
        }
    }
    println!(
        "| 200 MB on {scenario} | {:.1} MB | {wall:.1} s | {} B | {:.1} MB |",
        rss_kb as f64 / 1024.0,
        result.len(),
        log_bytes as f64 / 1e6
    );
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let after = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let nop =
        after("--nop").map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_nop")), PathBuf::from);
    if let Some(scenario) = after("--scenario") {
        return run_scenario(&nop, &scenario);
    }
    println!("nop: {}", nop.display());
    println!("| command | nop peak memory (max RSS) | wall time | tool result | out log |");
    println!("|---|---:|---:|---:|---:|");
    let me = std::env::current_exe()?;
    for scenario in ["stdout", "stderr"] {
        let status = Command::new(&me)
            .arg("--nop")
            .arg(&nop)
            .args(["--scenario", scenario])
            .status()?;
        assert!(status.success());
    }
    Ok(())
}
