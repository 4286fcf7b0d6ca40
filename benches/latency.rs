//! nop's own time around the model (issue 31): from the start of `nop run` to its first model
//! request, and from the model's last answer to the process's exit, for a one-turn task in a git
//! repository of 1,000 committed files under /var/tmp (the file checkpoint is recorded around
//! every run). The mock answers at once; 20 runs, median and p90.
//!
//! Run with `cargo bench --bench latency`; `-- --nop PATH` measures another build.

#[allow(dead_code, clippy::unwrap_used, clippy::expect_used)]
#[path = "../tests/support/mock.rs"]
mod mock;

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use mock::{MockServer, openai};

const RUNS: usize = 20;

fn git(dir: &std::path::Path, args: &[&str]) -> Result<(), Box<dyn std::error::Error>> {
    let status = Command::new("git")
        .args(["-c", "user.name=bench", "-c", "user.email=bench@localhost"])
        .args(args)
        .current_dir(dir)
        .output()?
        .status;
    assert!(status.success(), "git {args:?}");
    Ok(())
}

fn stats(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[v.len() * 9 / 10])
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let base = std::path::Path::new("/var/tmp/nop-bench");
    std::fs::create_dir_all(base)?;
    let repo = tempfile::tempdir_in(base)?;
    let args: Vec<String> = std::env::args().collect();
    let other = args
        .iter()
        .position(|a| a == "--nop")
        .and_then(|i| args.get(i + 1).cloned());
    let nop = other.as_deref().unwrap_or(env!("CARGO_BIN_EXE_nop"));
    git(repo.path(), &["init", "-q"])?;
    for i in 0..1_000 {
        let dir = repo.path().join(format!("src/m{}", i / 100));
        std::fs::create_dir_all(&dir)?;
        std::fs::write(
            dir.join(format!("f{i}.rs")),
            format!("pub fn f{i}() {{}}\n"),
        )?;
    }
    git(repo.path(), &["add", "-A"])?;
    git(repo.path(), &["commit", "-qm", "files"])?;
    let mut first = Vec::new();
    let mut last = Vec::new();
    // One run first: the checkpoint store's first record is a one-time cost.
    for run in 0..=RUNS {
        let arrivals = Arc::new(Mutex::new(Vec::new()));
        let server = {
            let arrivals = Arc::clone(&arrivals);
            MockServer::start_with(Box::new(move |_| {
                arrivals
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(Instant::now());
                openai::reply_text("Done: nothing to change.")
            }))
        };
        let started = Instant::now();
        let output = Command::new(nop)
            .current_dir(repo.path())
            .env_clear()
            .env("HOME", repo.path())
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("NOP_BASE_URL", server.openai_base_url())
            .env("NOP_MODEL", "mock")
            .args(["run", "--output-format", "json", "do the task"])
            .output()?;
        let ended = Instant::now();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        if run == 0 {
            continue;
        }
        let arrivals = arrivals.lock().unwrap_or_else(|e| e.into_inner());
        if let (Some(a), Some(b)) = (arrivals.first(), arrivals.last()) {
            first.push(a.duration_since(started).as_secs_f64() * 1000.0);
            last.push(ended.duration_since(*b).as_secs_f64() * 1000.0);
        }
    }
    let (fm, fp) = stats(first);
    let (lm, lp) = stats(last);
    println!("| one-turn run, 1,000-file git repository | median | p90 |");
    println!("|---|---:|---:|");
    println!("| start → first model request | {fm:.1} ms | {fp:.1} ms |");
    println!("| last answer → exit | {lm:.1} ms | {lp:.1} ms |");
    Ok(())
}
