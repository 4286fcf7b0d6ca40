//! Appending to and updating a long session (issue 31): sessions of 1,000, 10,000 and 50,000
//! messages (the last about 55 MB of JSON), laid out as nop writes them (earlier messages
//! sealed into `messages-*.json` past `session.seal_kb`, 256 KiB) and, for comparison, as one
//! session.json (`session.seal_kb` at its maximum, 1 GiB: what every session was before).
//!
//! - `nop sessions append ID TEXT` as a user or a script runs it: wall time and peak memory
//!   (max RSS) of the whole process, start included. Each runs as a child of a child of this
//!   benchmark so that `getrusage(RUSAGE_CHILDREN)` reports that process's peak alone.
//! - `Store::update` changing the status, as a run does between turns: the first update of a
//!   process (nothing read yet) and the ones after it.
//!
//! Run with `cargo bench --bench session_append`. Prints a Markdown table of medians.

#[path = "support/coding_session.rs"]
mod coding_session;

use std::process::Command;
use std::time::{Duration, Instant};

use chrono::Utc;
use nop::protocol::{Message, SessionStatus};
use nop::session::Store;

/// The mix of `benches/store.rs`: short user turns, assistant turns with a tool call, tool
/// results of 0.5 to 2 KB (about 1.1 KB a message on disk).
fn message(n: usize) -> Message {
    coding_session::message(n, |n| "fn example() -> u32 { 42 }\n".repeat(20 + n % 60))
}

/// Runs one `nop sessions append` through a child of this benchmark; its wall time and peak RSS.
fn append(
    root: &std::path::Path,
    id: &str,
    seal_kb: &str,
) -> Result<(f64, f64), Box<dyn std::error::Error>> {
    let me = std::env::current_exe()?;
    let out = Command::new(&me)
        .arg("--append-in")
        .arg(root)
        .arg(id)
        .arg(seal_kb)
        .output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines = String::from_utf8_lossy(&out.stdout).into_owned();
    lines.retain(|c| c != '\r');
    let mut parts = lines.split_whitespace();
    // The child's own measure of nop's wall time, without starting this benchmark again.
    let own: f64 = parts.next().unwrap_or_default().parse()?;
    let rss: f64 = parts.next().unwrap_or_default().parse()?;
    Ok((own, rss))
}

/// The child: runs `nop sessions append ID TEXT` in `root`, prints its wall time (ms) and peak
/// memory (MB).
fn append_child(root: &str, id: &str, seal_kb: &str) -> Result<(), Box<dyn std::error::Error>> {
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_nop"))
        .current_dir(root)
        .env_clear()
        .env("HOME", root)
        .args(["--set", &format!("session.seal_kb={seal_kb}")])
        // A message of the mix's average size (1.1 KB).
        .args([
            "sessions",
            "append",
            id,
            &"fn example() -> u32 { 42 }\n".repeat(40),
        ])
        .output()?;
    let wall = started.elapsed().as_secs_f64() * 1000.0;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rss_kb =
        nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)?.max_rss();
    println!("{wall:.2} {:.1}", rss_kb as f64 / 1024.0);
    Ok(())
}

/// The floor of any durable write on this disk, now: one atomic replace of a 4 KB file (temp
/// file, fsync, rename, fsync of the directory), which every append does once. Median of 20.
fn floor(dir: &std::path::Path) -> Result<f64, Box<dyn std::error::Error>> {
    let mut times = Vec::new();
    for _ in 0..20 {
        let started = Instant::now();
        nop::session::write_atomic(&dir.join("floor.json"), &[b'x'; 4096])?;
        times.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(median(times))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median, 90th percentile and maximum.
fn spread(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[v.len() * 9 / 10], v[v.len() - 1])
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--append-in") {
        return append_child(&args[i + 1], &args[i + 2], &args[i + 3]);
    }
    let base = std::path::Path::new("/var/tmp/nop-bench");
    std::fs::create_dir_all(base)?;
    let repo = tempfile::tempdir_in(base)?;
    let init = Command::new(env!("CARGO_BIN_EXE_nop"))
        .arg("init")
        .current_dir(repo.path())
        .env("HOME", repo.path())
        .output()?;
    assert!(init.status.success());
    let sessions = repo.path().join(".nop/sessions");
    println!(
        "| messages | layout | on disk (session.json after) | `nop sessions append` of 1.1 KB, process (median / p90 / max) | its peak memory | first update of a process | later updates (median of 9) | the disk's floor: one atomic 4 KB write |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|---:|");
    for size in [1_000, 10_000, 50_000] {
        for (layout, seal_kb) in [("sealed", 256usize), ("one file", 1_048_576)] {
            let store =
                Store::new(&sessions, Duration::from_secs(30)).with_seal_bytes(seal_kb * 1024);
            let id = store.create("coder", Utc::now())?.session_id;
            // Appended in batches, as a session grows.
            for start in (0..size).step_by(1_000) {
                store.append(
                    &id,
                    (start..start + 1_000).map(message).collect(),
                    Utc::now(),
                )?;
            }

            // Sealed: 250 appends of 1.1 KB, from an empty session.json to past its seal and on
            // (one full cycle: the write that seals is among them). One file: 9.
            let appends = if seal_kb == 256 { 250 } else { 9 };
            let disk = floor(repo.path())?;
            let (mut walls, mut peak) = (Vec::new(), 0f64);
            for _ in 0..appends {
                let (wall, rss) = append(repo.path(), &id, &seal_kb.to_string())?;
                walls.push(wall);
                peak = peak.max(rss);
            }

            let fresh =
                Store::new(&sessions, Duration::from_secs(30)).with_seal_bytes(seal_kb * 1024);
            let started = Instant::now();
            fresh.update(&id, Utc::now(), |s| {
                s.session.status = SessionStatus::Running;
                Ok(())
            })?;
            let first = started.elapsed().as_secs_f64() * 1000.0;
            let mut later = Vec::new();
            for i in 0..9 {
                let started = Instant::now();
                fresh.update(&id, Utc::now(), |s| {
                    s.session.status = if i % 2 == 0 {
                        SessionStatus::Idle
                    } else {
                        SessionStatus::Running
                    };
                    Ok(())
                })?;
                later.push(started.elapsed().as_secs_f64() * 1000.0);
            }
            let dir = store.dir(&id);
            let bytes: u64 = std::fs::read_dir(&dir)?
                .flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum();
            let session_json = std::fs::metadata(dir.join("session.json"))?.len();
            let count = fresh.read_session(&id)?.messages.len();
            assert_eq!(count, size + appends);
            let (p50, p90, max) = spread(walls);
            println!(
                "| {size} | {layout} | {:.1} MB ({:.2} MB) | {p50:.1} / {p90:.1} / {max:.1} ms | {peak:.1} MB | {first:.1} ms | {:.1} ms | {disk:.1} ms |",
                bytes as f64 / 1e6,
                session_json as f64 / 1e6,
                median(later),
            );
        }
    }
    Ok(())
}
