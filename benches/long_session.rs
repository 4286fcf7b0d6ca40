//! A long session (issue 31): one `nop run` of 2,000 turns, each a tool call (`read-file` of a
//! 2 KB file, every tenth a `shell` command), with compactions as the conversation fills a
//! 32k-token window (compression-advisor and the CompactAgent answered by the mock). Reported per
//! stretch of 100 turns: nop's own time per turn (from one main request's arrival at the mock to
//! the next's, the model answering at once: parsing, the tool, the session write, the next
//! request) and nop's resident memory (VmRSS, read by the mock as the stretch begins). Turns
//! whose gap holds an advisor or a compaction are left out of the per-turn figure and counted.
//!
//! Run with `cargo bench --bench long_session`; `-- --nop PATH` measures another build.

#[allow(dead_code, clippy::unwrap_used, clippy::expect_used)]
#[path = "../tests/support/mock.rs"]
mod mock;
#[path = "support/under_test.rs"]
mod under_test;

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use mock::{MockServer, openai};
use serde_json::json;

const TURNS: usize = 2_000;
const STRETCHES: [usize; 5] = [100, 500, 1_000, 1_500, 1_900];

#[derive(Default)]
struct Log {
    /// Per main request: when it arrived, and whether an advisor or CompactAgent request came
    /// after the one before it.
    arrivals: Vec<(Instant, bool)>,
    between: bool,
    /// VmRSS in kB at the main turns of `STRETCHES`.
    rss: Vec<(usize, u64)>,
    compactions: usize,
}

fn vm_rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

#[expect(clippy::too_many_lines, reason = "a debt: listed in AGENTS.md")]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let base = std::path::Path::new("/var/tmp/nop-bench");
    std::fs::create_dir_all(base)?;
    let repo = tempfile::tempdir_in(base)?;
    let nop = &under_test::nop();
    assert!(
        Command::new(nop)
            .arg("init")
            .current_dir(repo.path())
            .env("HOME", repo.path())
            .output()?
            .status
            .success()
    );
    std::fs::write(
        repo.path().join("data.txt"),
        "0123456789abcdef ".repeat(120),
    )?;
    let pid = Arc::new(AtomicU32::new(0));
    let log = Arc::new(Mutex::new(Log::default()));
    let server = {
        let (pid, log) = (Arc::clone(&pid), Arc::clone(&log));
        let mut main_turns = 0usize;
        MockServer::start_with(Box::new(move |request| {
            let system = request.body["messages"][0]["content"]
                .as_str()
                .unwrap_or_default();
            let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
            if system.contains("context-management advisor") {
                log.between = true;
                return openai::reply_text(&json!({"shouldCompress": true, "reason": "near the window", "priority": "medium", "suggestions": []}).to_string());
            }
            if system.contains("You compress the earlier part") {
                log.between = true;
                log.compactions += 1;
                return openai::reply_text(
                    "Summary: the agent has been reading data.txt and running echo; nothing changed.",
                );
            }
            main_turns += 1;
            let between = std::mem::take(&mut log.between);
            log.arrivals.push((Instant::now(), between));
            if STRETCHES.contains(&main_turns) {
                let rss = vm_rss_kb(pid.load(Ordering::Relaxed));
                log.rss.push((main_turns, rss));
            }
            if main_turns > TURNS {
                return openai::reply_text("done");
            }
            if main_turns.is_multiple_of(10) {
                openai::reply_tool_calls(&[(
                    &format!("c{main_turns}"),
                    "shell",
                    json!({"command": "echo ok"}),
                )])
            } else {
                openai::reply_tool_calls(&[(
                    &format!("c{main_turns}"),
                    "read-file",
                    json!({"path": "data.txt"}),
                )])
            }
        }))
    };
    // Thousands of request bodies kept by the mock would grow its memory and slow it, and with
    // it the gaps measured here.
    server.forget_requests();
    let started = Instant::now();
    let child = Command::new(nop)
        .current_dir(repo.path())
        .env_clear()
        .env("HOME", repo.path())
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("NOP_BASE_URL", server.openai_base_url())
        .env("NOP_MODEL", "mock")
        .env("NOP_AGENT_MAX_TURNS", "3000")
        .env("NOP_ADVISORS_ENABLED", "true")
        .env("NOP_COMPACTION_CONTEXT_WINDOW", "32000")
        .args([
            "run",
            "--output-format",
            "json",
            "read data.txt two thousand times",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    pid.store(child.id(), Ordering::Relaxed);
    let output = child.wait_with_output()?;
    let wall = started.elapsed().as_secs_f64();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let log = log.lock().unwrap_or_else(|e| e.into_inner());
    let compactions = log.compactions;
    println!(
        "{TURNS} turns in {wall:.1} s, {compactions} compactions; per stretch of 100 turns (turn n to n+99):"
    );
    println!();
    println!(
        "| turns | nop's own time per turn (median / p90) | turns with an advisor or compaction | resident memory at its start |"
    );
    println!("|---|---:|---:|---:|");
    for &(turn, rss) in &log.rss {
        let from = turn.max(2);
        let to = (turn + 99).min(log.arrivals.len());
        let mut gaps: Vec<f64> = Vec::new();
        let mut busy = 0;
        for k in from..to {
            let (now, between) = log.arrivals[k];
            if between {
                busy += 1;
                continue;
            }
            gaps.push(now.duration_since(log.arrivals[k - 1].0).as_secs_f64() * 1000.0);
        }
        gaps.sort_by(f64::total_cmp);
        if gaps.is_empty() {
            continue;
        }
        println!(
            "| {turn}–{} | {:.2} ms / {:.2} ms | {busy} | {:.1} MB |",
            to,
            gaps[gaps.len() / 2],
            gaps[gaps.len() * 9 / 10],
            rss as f64 / 1024.0
        );
    }
    Ok(())
}
