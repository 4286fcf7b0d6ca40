//! `nop sessions list` over many large sessions (issue 31): 1,000 sessions of about 1 MB each
//! (1 GB in all). Wall time and peak memory (max RSS) of the `nop sessions list --json` process:
//! the first listing, which finds no summaries (as after an upgrade) and reads every
//! session.json, then the listings after it, which read each session's `summary.json`.
//!
//! Run with `cargo bench --bench sessions_list`. Each listing runs as a child of a child of
//! this benchmark so that `getrusage(RUSAGE_CHILDREN)` reports that listing's peak alone.

use std::process::Command;
use std::time::{Duration, Instant};

use chrono::Utc;
use nop::protocol::{Message, Role};
use nop::session::Store;

const SESSIONS: usize = 1_000;

fn list(root: &std::path::Path) -> Result<(f64, f64), Box<dyn std::error::Error>> {
    let me = std::env::current_exe()?;
    let started = Instant::now();
    let out = Command::new(&me).args(["--list-in"]).arg(root).output()?;
    let wall = started.elapsed().as_secs_f64() * 1000.0;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rss: f64 = String::from_utf8_lossy(&out.stdout).trim().parse()?;
    Ok((wall, rss))
}

/// Runs `nop sessions list --json` in `root` and prints its peak memory in MB.
fn list_child(root: &str) -> Result<(), Box<dyn std::error::Error>> {
    let out = Command::new(env!("CARGO_BIN_EXE_nop"))
        .current_dir(root)
        .env_clear()
        .env("HOME", root)
        .args(["sessions", "list", "--json"])
        .output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(listed.as_array().map(Vec::len), Some(SESSIONS));
    let rss_kb =
        nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)?.max_rss();
    println!("{:.1}", rss_kb as f64 / 1024.0);
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--list-in") {
        return list_child(&args[i + 1]);
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
    // One session of about 1 MB, then copies of it under new ids (what a store that grew over
    // months holds), without summaries.
    let store = Store::new(&sessions, Duration::from_secs(30));
    let first = store.create("coder", Utc::now())?.session_id;
    let messages: Vec<Message> = (0..500)
        .map(|i| {
            let role = if i % 2 == 0 { Role::User } else { Role::Tool };
            Message::new(role, format!("line {i} ").repeat(250), Utc::now())
        })
        .collect();
    store.append(&first, messages, Utc::now())?;
    std::fs::remove_file(store.dir(&first).join("summary.json"))?;
    // Its files as the store wrote them: session.json, plan.xml and the sealed messages files.
    let mut files = Vec::new();
    for entry in std::fs::read_dir(store.dir(&first))? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == "session.json" || name == "plan.xml" || name.starts_with("messages-") {
            files.push((name, std::fs::read(entry.path())?));
        }
    }
    let mut bytes: usize = files.iter().map(|(_, b)| b.len()).sum();
    for _ in 1..SESSIONS {
        let id = nop::protocol::new_id();
        let dir = sessions.join(&id);
        std::fs::create_dir_all(&dir)?;
        for (name, contents) in &files {
            if name == "session.json" {
                let copy = String::from_utf8_lossy(contents).replacen(&first, &id, 1);
                std::fs::write(dir.join(name), copy)?;
            } else {
                std::fs::write(dir.join(name), contents)?;
            }
        }
        bytes += files.iter().map(|(_, b)| b.len()).sum::<usize>();
    }
    println!(
        "| {SESSIONS} sessions, {:.2} GB | wall time | peak memory (max RSS) |",
        bytes as f64 / 1e9
    );
    println!("|---|---:|---:|");
    let (wall, rss) = list(repo.path())?;
    println!("| first listing (no summaries yet) | {wall:.0} ms | {rss:.1} MB |");
    let mut walls = Vec::new();
    let mut peak: f64 = 0.0;
    for _ in 0..5 {
        let (wall, rss) = list(repo.path())?;
        walls.push(wall);
        peak = peak.max(rss);
    }
    walls.sort_by(f64::total_cmp);
    println!(
        "| later listings (median of 5) | {:.0} ms | {peak:.1} MB |",
        walls[walls.len() / 2]
    );
    Ok(())
}
