//! Resuming a long session (issue 40): a session of about 200 MB on disk, laid out as nop
//! writes it (messages sealed into `messages-*.json` past `session.seal_kb`), its conversation
//! compacted now and then as a long run's is (a summary, the messages before it kept), is resumed
//! with `nop run --session ID "one more thing"`, the mock answering at once. Reported: the
//! session's size, the run's wall time and its peak resident memory (max RSS, the run being
//! the only process this benchmark waits for after the session is built).
//!
//! Run with `cargo bench --bench resume`; `-- --nop PATH` measures another build, `-- --mb N`
//! another size.

#[allow(dead_code, clippy::unwrap_used, clippy::expect_used)]
#[path = "../tests/support/mock.rs"]
mod mock;
#[path = "support/under_test.rs"]
mod under_test;

#[path = "support/coding_session.rs"]
mod coding_session;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use chrono::Utc;
use mock::{MockServer, openai};
use nop::protocol::Message;
use nop::session::Store;

/// A coding session's mix: a user turn now and then, assistant turns with a tool call, tool
/// results of 2 to 14 KB (a file read, a test run).
fn message(n: usize) -> Message {
    coding_session::message(n, |n| {
        "fn example() -> u32 { 42 } // a line of the module read\n".repeat(40 + n % 200)
    })
}

fn size_of(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mb: u64 = arg("--mb").and_then(|m| m.parse().ok()).unwrap_or(200);
    let base = Path::new("/var/tmp/nop-bench");
    std::fs::create_dir_all(base)?;
    let repo = tempfile::tempdir_in(base)?;
    let nop = &under_test::nop();
    let nop_in = |args: &[&str]| -> std::io::Result<String> {
        let out = Command::new(nop)
            .args(args)
            .current_dir(repo.path())
            .env("HOME", repo.path())
            .output()?;
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    nop_in(&["init"])?;
    let id = nop_in(&["sessions", "new"])?;
    let store = Store::new(repo.path().join(".nop/sessions"), Duration::from_secs(30));
    let dir = store.dir(&id);
    let built = Instant::now();
    let mut n = 0;
    while size_of(&dir) < mb * 1024 * 1024 {
        let batch: Vec<Message> = (n..n + 200).map(message).collect();
        n += batch.len();
        store.append(&id, batch, Utc::now())?;
    }
    let size = size_of(&dir) as f64 / 1024.0 / 1024.0;
    eprintln!(
        "built {n} messages, {size:.0} MB in {:.0} s",
        built.elapsed().as_secs_f64()
    );
    let server = MockServer::start_with(Box::new(move |request| {
        let system = request.body["messages"][0]["content"]
            .as_str()
            .unwrap_or_default();
        if system.contains("context-management advisor") {
            return openai::reply_text(&serde_json::json!({"shouldCompress": true, "reason": "past the window", "priority": "high", "suggestions": []}).to_string());
        }
        if system.contains("You compress the earlier part") {
            return openai::reply_text("Summary: the refactor is under way; tests pass.");
        }
        openai::reply_text("done")
    }));
    let started = Instant::now();
    let out = Command::new(nop)
        .current_dir(repo.path())
        .env_clear()
        .env("HOME", repo.path())
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("NOP_BASE_URL", server.openai_base_url())
        .env("NOP_MODEL", "mock")
        .args([
            "run",
            "--session",
            &id,
            "--output-format",
            "json",
            "one more thing",
        ])
        .output()?;
    let wall = started.elapsed().as_secs_f64();
    let rss =
        nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)?.max_rss();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let requests = server.requests().len();
    if std::env::args().any(|a| a == "--keep") {
        let kept = repo.keep();
        eprintln!(
            "kept {} (session {id}, mock was {})",
            kept.display(),
            server.openai_base_url()
        );
        eprintln!(
            "{}",
            String::from_utf8_lossy(&out.stdout)
                .chars()
                .rev()
                .take(600)
                .collect::<String>()
                .chars()
                .rev()
                .collect::<String>()
        );
    }
    println!(
        "| session on disk | messages | `nop run --session` wall time | peak memory (max RSS) | requests |"
    );
    println!("|---:|---:|---:|---:|---:|");
    println!(
        "| {size:.0} MB | {n} | {wall:.2} s | {:.0} MB | {requests} |",
        rss as f64 / 1024.0
    );
    Ok(())
}
