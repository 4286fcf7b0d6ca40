//! Crash safety: a process appending to a session in a loop is killed with SIGKILL at random
//! moments, many times; what it leaves behind always parses and holds a prefix of what it wrote.
//! The writer seals its messages into files of their own every few appends
//! (`session.seal_kb`), so kills also land between a sealed file and the session.json that
//! names it.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::Utc;
use nop::protocol::{Message, Role};
use nop::session::Store;

use crate::support::Repo;

/// At least this many kills, and on until the kills tore enough writes to prove something.
const KILLS: usize = 25;
/// Kills that must have left a write half done (a temporary file or a journal)…
const MIN_TORN: usize = 5;
/// …of which at least this many in the middle of a two-file commit (a journal left).
const MIN_JOURNALS: usize = 1;
const MAX_KILLS: usize = 400;
const WRITER_ENV: &str = "NOP_TEST_CRASH_WRITER";
/// The writer's seal size: a sealed file every few appends.
const SEAL_BYTES: usize = 512;

/// The writer, run in a child process by the test below: appends `m<n>` with n counting on
/// from what the session holds, for ever (until killed).
#[test]
#[ignore = "run by crash_safety_under_sigkill in a child process"]
fn crash_writer_child() {
    let Some(spec) = std::env::var_os(WRITER_ENV) else {
        return;
    };
    let spec = PathBuf::from(spec);
    let id = spec
        .file_name()
        .and_then(|n| n.to_str())
        .expect("session id")
        .to_string();
    let store = Store::new(
        spec.parent().expect("sessions dir"),
        Duration::from_secs(30),
    )
    .with_seal_bytes(SEAL_BYTES);
    loop {
        let now = Utc::now();
        store
            .update(&id, now, |state| {
                let n = state.message_count();
                state
                    .session
                    .messages
                    .push(Message::new(Role::User, format!("m{n}"), now));
                // Change plan.xml in the same commit now and then, to crash multi-file commits.
                if n % 3 == 0 {
                    state.plan.tasks = vec![nop::protocol::Task {
                        id: "count".into(),
                        title: format!("{}", n + 1),
                        description: None,
                        status: nop::protocol::TaskStatus::InProgress,
                    }];
                }
                Ok(())
            })
            .expect("append");
    }
}

/// A small xorshift generator seeded from the clock: random kill moments without a crate.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[test]
#[expect(clippy::too_many_lines, reason = "a debt: listed in AGENTS.md")]
fn crash_safety_under_sigkill() {
    let repo = Repo::new();
    let id = repo.new_session();
    let store = repo.store();
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
        | 1;
    let mut rng = Rng(seed);
    let exe = std::env::current_exe().expect("test binary");
    let mut last_len = 0;
    let mut interrupted = 0;
    let mut journals = 0;
    let mut unnamed_sealed = 0;
    let mut round = 0;
    while round < KILLS
        || (round < MAX_KILLS && (interrupted < MIN_TORN || journals < MIN_JOURNALS))
    {
        round += 1;
        let mut child = Command::new(&exe)
            .args([
                "--ignored",
                "--exact",
                "suite::crash::crash_writer_child",
                "--nocapture",
            ])
            .env(WRITER_ENV, repo.session_dir(&id))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn writer");
        // The random moment: anywhere from start-up to well into the writing loop.
        std::thread::sleep(Duration::from_millis(5 + rng.below(120)));
        child.kill().expect("SIGKILL");
        let _ = child.wait();

        let left: Vec<String> = std::fs::read_dir(repo.session_dir(&id))
            .expect("dir")
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".tmp-") || n == "commit.json")
            .collect();
        interrupted += usize::from(!left.is_empty());
        journals += usize::from(left.iter().any(|n| n == "commit.json"));
        unnamed_sealed += usize::from(!unnamed_sealed_files(&repo, &id).is_empty());
        // The reader sees a whole session; a half-done multi-file commit is completed.
        let state = store
            .read(&id)
            .unwrap_or_else(|e| panic!("round {round} (seed {seed}): {e}"));
        let contents: Vec<&str> = state
            .session
            .messages
            .iter()
            .map(|m| m.content.as_str())
            .collect();
        let expected: Vec<String> = (0..contents.len()).map(|n| format!("m{n}")).collect();
        assert_eq!(
            contents, expected,
            "round {round} (seed {seed}): not a prefix"
        );
        assert!(
            contents.len() >= last_len,
            "round {round}: messages were lost"
        );
        last_len = contents.len();
        // plan.xml and session.json changed together: the plan's count never runs ahead.
        if let Some(task) = state.plan.tasks.first() {
            let counted: usize = task.title.parse().expect("count");
            assert!(
                counted <= contents.len(),
                "round {round}: plan ahead of session"
            );
            let last_plan_write = (0..contents.len()).rev().find(|n| n % 3 == 0);
            assert_eq!(
                Some(counted),
                last_plan_write.map(|n| n + 1),
                "round {round}: plan and session disagree"
            );
        }
    }
    assert!(last_len > 0, "the writer never wrote anything");
    let sealed = store
        .read_recent(&id)
        .expect("read")
        .session
        .earlier_messages
        .len();
    eprintln!(
        "{round} kills, {last_len} messages, {interrupted} kills left a write half done, \
         {journals} in a two-file commit, {unnamed_sealed} a sealed file not yet named; \
         {sealed} sealed files"
    );
    assert!(sealed > 0, "the writer never sealed its messages");
    // The test proves something only if the kills did tear writes.
    assert!(
        interrupted >= MIN_TORN && journals >= MIN_JOURNALS,
        "{round} kills tore only {interrupted} writes ({journals} commits) (seed {seed})"
    );
    let problems = store.check(&id).expect("check");
    assert!(problems.is_empty(), "{problems:?}");
    // No temporary files survive the next write, nor sealed files that nothing names the next
    // seal.
    let now = Utc::now();
    store
        .clone()
        .with_seal_bytes(SEAL_BYTES)
        .append(
            &id,
            vec![Message::new(Role::User, "x".repeat(SEAL_BYTES), now)],
            now,
        )
        .expect("append");
    let unnamed = unnamed_sealed_files(&repo, &id);
    assert!(unnamed.is_empty(), "{unnamed:?}");
    let leftovers: Vec<String> = std::fs::read_dir(repo.session_dir(&id))
        .expect("dir")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".tmp-") || n == "commit.json")
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// The `messages-*.json` files of session `id` that its session.json does not name.
fn unnamed_sealed_files(repo: &Repo, id: &str) -> Vec<String> {
    let dir = repo.session_dir(id);
    let text = std::fs::read_to_string(dir.join("session.json")).expect("session.json");
    std::fs::read_dir(&dir)
        .expect("dir")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("messages-") && !text.contains(&format!("\"{n}\"")))
        .collect()
}
