//! nop's own time around the model (issue 31): from the start of `nop run` to its first model
//! request, and from the model's last answer to the process's exit, for a one-turn task in a git
//! repository of 1,000 committed files under /var/tmp (the file checkpoint is recorded around
//! every run). The mock answers at once, then after 100 ms; 20 runs each, median and p90.
//!
//! Run with `cargo bench --bench latency`; `-- --nop PATH` measures another build.

#[allow(dead_code, clippy::unwrap_used, clippy::expect_used)]
#[path = "../tests/support/mock.rs"]
mod mock;
#[path = "support/under_test.rs"]
mod under_test;

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
    let nop = &under_test::nop();
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
    println!("| one-turn run, 1,000-file git repository | median | p90 |");
    println!("|---|---:|---:|");
    // At once: everything nop does around the answer is in the way. After 100 ms (any real
    // model takes longer to its first token): what nop starts while the model thinks is done.
    for think in [0u64, 100] {
        let (first, last) = measure(repo.path(), nop, Duration::from_millis(think))?;
        let (fm, fp) = stats(first);
        let (lm, lp) = stats(last);
        println!(
            "| model answers after {think} ms: start → first model request | {fm:.1} ms | {fp:.1} ms |"
        );
        println!("| model answers after {think} ms: its answer → exit | {lm:.1} ms | {lp:.1} ms |");
    }
    Ok(())
}

/// `RUNS` one-turn runs (after one that is not counted: the checkpoint store's first record is
/// a one-time cost) against a mock that answers `think` after each request arrives: from the
/// start to the first request's arrival, and from the last answer to the exit, in ms.
fn measure(
    repo: &std::path::Path,
    nop: &str,
    think: Duration,
) -> Result<(Vec<f64>, Vec<f64>), Box<dyn std::error::Error>> {
    let mut first = Vec::new();
    let mut last = Vec::new();
    for run in 0..=RUNS {
        // (arrived, answered) per request.
        let times = Arc::new(Mutex::new(Vec::new()));
        let server = {
            let times = Arc::clone(&times);
            MockServer::start_with(Box::new(move |_| {
                let arrived = Instant::now();
                std::thread::sleep(think);
                times
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((arrived, Instant::now()));
                openai::reply_text("Done: nothing to change.")
            }))
        };
        let started = Instant::now();
        let output = Command::new(nop)
            .current_dir(repo)
            .env_clear()
            .env("HOME", repo)
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
        let times = times.lock().unwrap_or_else(|e| e.into_inner());
        if let (Some((arrived, _)), Some((_, answered))) = (times.first(), times.last()) {
            first.push(arrived.duration_since(started).as_secs_f64() * 1000.0);
            last.push(ended.duration_since(*answered).as_secs_f64() * 1000.0);
        }
    }
    Ok((first, last))
}
