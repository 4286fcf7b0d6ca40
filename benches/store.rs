//! Store benchmark: time to append one message and persist it (lock, read, parse, serialise,
//! write a temp file, fsync, rename, fsync the directory), and time to load a session, for
//! sessions of 100, 1,000 and 10,000 messages.
//!
//! Run with `cargo bench --bench store`. Prints a Markdown table (median and p95 per size); the
//! size is the session's before the timed appends (each of which adds one message).

#[path = "support/coding_session.rs"]
mod coding_session;

use std::time::{Duration, Instant};

use chrono::Utc;
use nop::protocol::Message;
use nop::session::Store;

/// A message mix like a coding session's: short user turns, longer assistant turns with tool
/// calls, and tool results of a few hundred bytes to a few kilobytes.
fn message(n: usize) -> Message {
    coding_session::message(n, |n| "fn example() -> u32 { 42 }\n".repeat(20 + n % 60))
}

fn stats(mut samples: Vec<Duration>) -> (f64, f64) {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let median = ms(samples[samples.len() / 2]);
    let p95 = ms(samples[((samples.len() * 95) / 100).min(samples.len() - 1)]);
    (median, p95)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let store = Store::new(dir.path().join("sessions"), Duration::from_secs(30));
    println!("| messages | session.json | append + persist (median / p95) | load (median / p95) |");
    println!("|---:|---:|---:|---:|");
    for (size, rounds) in [(100, 100), (1_000, 40), (10_000, 15)] {
        let session = store.create("coder", Utc::now())?;
        let id = session.session_id;
        store.append(&id, (0..size).map(message).collect(), Utc::now())?;
        let bytes = std::fs::metadata(store.dir(&id).join("session.json"))?.len();

        let mut appends = Vec::with_capacity(rounds);
        for i in 0..rounds {
            let m = message(size + i);
            let started = Instant::now();
            store.append(&id, vec![m], Utc::now())?;
            appends.push(started.elapsed());
        }
        let mut loads = Vec::with_capacity(rounds);
        for _ in 0..rounds {
            let started = Instant::now();
            let state = store.read(&id)?;
            loads.push(started.elapsed());
            assert_eq!(state.session.messages.len(), size + rounds);
        }
        let (am, ap) = stats(appends);
        let (lm, lp) = stats(loads);
        println!(
            "| {size} | {:.1} MB | {am:.2} ms / {ap:.2} ms | {lm:.2} ms / {lp:.2} ms |",
            bytes as f64 / 1e6
        );
    }
    Ok(())
}
