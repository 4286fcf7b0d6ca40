//! `nop run` killed at random moments (issue 40): a session resumed by `nop run --session`, the
//! mock answering every request at once with a tool call (a `write-file`, every third a
//! `shell`), is killed with SIGKILL after a random 20–600 ms, 400 times. After each kill:
//! whether the kill left a two-file write half done (`commit.json` in the session's directory),
//! and what `nop sessions check ID` then says (exit code; whether it reports the journal).
//! After the last: `nop sessions check` of every session, and any journal still left.
//!
//! Run with `cargo bench --bench kills`; `-- --nop PATH` measures another build, `-- --kills N`
//! another count.

#[allow(dead_code, clippy::unwrap_used, clippy::expect_used)]
#[path = "../tests/support/mock.rs"]
mod mock;
#[path = "support/under_test.rs"]
mod under_test;

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mock::{MockServer, openai};
use serde_json::json;

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

/// A small xorshift generator seeded from the clock.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[expect(clippy::too_many_lines, reason = "a debt: listed in AGENTS.md")]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let kills: usize = arg("--kills").and_then(|k| k.parse().ok()).unwrap_or(400);
    // Where users keep their repositories, not /tmp.
    let base = Path::new("/var/tmp/nop-bench");
    std::fs::create_dir_all(base)?;
    let repo = tempfile::tempdir_in(base)?;
    let root = repo.path();
    let nop = &under_test::nop();
    let nop_in = |args: &[&str]| -> std::io::Result<std::process::Output> {
        Command::new(nop)
            .args(args)
            .current_dir(root)
            .env_clear()
            .env("HOME", root)
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .output()
    };
    for args in [
        &["init", "-q"][..],
        &[
            "-c",
            "user.name=b",
            "-c",
            "user.email=b@b",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "start",
        ],
    ] {
        Command::new("git").args(args).current_dir(root).output()?;
    }
    let init = nop_in(&["init"])?;
    assert!(
        init.status.success(),
        "{}",
        String::from_utf8_lossy(&init.stderr)
    );
    let id = String::from_utf8_lossy(&nop_in(&["sessions", "new"])?.stdout)
        .trim()
        .to_string();
    let calls = std::sync::Arc::new(AtomicUsize::new(0));
    let server = {
        let calls = std::sync::Arc::clone(&calls);
        MockServer::start_with(Box::new(move |request| {
            let system = request.body["messages"][0]["content"]
                .as_str()
                .unwrap_or_default();
            if system.contains("advisor") || system.contains("You compress") {
                return openai::reply_text(
                    &json!({"shouldCompress": false, "reason": "fine", "priority": "low", "suggestions": [], "consistent": true, "inconsistencies": [], "summary": "fine"}).to_string(),
                );
            }
            let n = calls.fetch_add(1, Ordering::Relaxed);
            if n % 3 == 2 {
                openai::reply_tool_calls(&[(
                    &format!("c{n}"),
                    "shell",
                    json!({"command": format!("echo {n} >> log.txt")}),
                )])
            } else {
                openai::reply_tool_calls(&[(
                    &format!("c{n}"),
                    "write-file",
                    json!({"path": format!("notes/{}.md", n % 20), "content": format!("note {n}\n")}),
                )])
            }
        }))
    };
    server.forget_requests();
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
        | 1;
    let mut rng = Rng(seed);
    let journal = root.join(".nop/sessions").join(&id).join("commit.json");
    let (mut left, mut reported, mut failed) = (0, 0, 0);
    let started = Instant::now();
    for _ in 0..kills {
        let mut child = Command::new(nop)
            .current_dir(root)
            .env_clear()
            .env("HOME", root)
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("NOP_BASE_URL", server.openai_base_url())
            .env("NOP_MODEL", "mock")
            .env("NOP_AGENT_MAX_TURNS", "100000")
            .args([
                "run",
                "--session",
                &id,
                "--output-format",
                "json",
                "keep going",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        std::thread::sleep(Duration::from_millis(20 + rng.below(580)));
        child.kill()?;
        child.wait()?;
        left += usize::from(journal.exists());
        let check = nop_in(&["sessions", "check", &id])?;
        let said = String::from_utf8_lossy(&check.stdout).into_owned()
            + &String::from_utf8_lossy(&check.stderr);
        reported += usize::from(said.contains("commit.json"));
        failed += usize::from(!check.status.success());
    }
    let wall = started.elapsed().as_secs_f64();
    let last = nop_in(&["sessions", "check"])?;
    let requests = calls.load(Ordering::Relaxed);
    println!(
        "| kills | tool calls answered | kills that left a journal | `sessions check` reported one | `sessions check` failed | journals left at the end | last `sessions check` |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---|");
    println!(
        "| {kills} | {requests} | {left} | {reported} | {failed} | {} | exit {} |",
        usize::from(journal.exists()),
        last.status.code().unwrap_or(-1)
    );
    eprintln!("{wall:.0} s (seed {seed})");
    if !last.status.success() {
        eprintln!("{}", String::from_utf8_lossy(&last.stdout));
    }
    Ok(())
}
