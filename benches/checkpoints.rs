//! What a file checkpoint costs (`nop::checkpoint::Checkpoints::record`, taken before and
//! after each run), beside what `git status` costs on the same repository: in a small
//! repository and in one of 100,000 files in 1,000 directories, both committed with git, under
//! /var/tmp. Reported: the first checkpoint of a repository (it hashes every file once), then,
//! round by round, `git status` and a checkpoint with nothing changed, and both again after a
//! run's changes (8 edits, a new file, a removed one): median and p95 of 30 rounds. The two
//! take turns at going first, so neither always finds the other's work in the caches. Also
//! what the store holds on disk, and how the checkpoints were taken (no git at all, git for
//! the changes only, git for everything).
//!
//! `git status` is the user's: the repository's own index, git's defaults (no system or global
//! configuration, so no untracked cache and no fsmonitor), untracked files listed.
//!
//! Also: how long a first `nop run` in that repository takes from its start to its first model
//! request. No checkpoint runs before that request.
//!
//! Then a long session's worth in the small repository: 2,000 runs, each a checkpoint as it
//! begins (where the store's packs are rolled up) and one of its changes (an edit, a new file,
//! the last run's new file removed: the tree stays the same size), reported per stretch of 400: the median cost of the checkpoint of changes, and how many
//! packs and files the store holds at the stretch's end.
//!
//! Run with `cargo bench --bench checkpoints`; with `SMALL=1` in the environment the large
//! repository (a minute to build) is left out.

#[allow(dead_code, clippy::unwrap_used, clippy::expect_used)]
#[path = "../tests/support/mock.rs"]
mod mock;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use nop::checkpoint::Checkpoints;

fn git(dir: &Path, args: &[&str]) -> Result<(), Box<dyn std::error::Error>> {
    let out = Command::new("git")
        .args(["-c", "user.name=b", "-c", "user.email=b@b"])
        .args(args)
        .current_dir(dir)
        .output()?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned().into());
    }
    Ok(())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// The bytes and the files beneath `dir`.
fn du(dir: &Path) -> (u64, usize) {
    let mut total = (0, 0);
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            match entry.metadata() {
                Ok(m) if m.is_dir() => {
                    let (bytes, files) = du(&entry.path());
                    total = (total.0 + bytes, total.1 + files);
                }
                Ok(m) => total = (total.0 + m.len(), total.1 + 1),
                Err(_) => {}
            }
        }
    }
    total
}

fn bench(name: &str, dirs: usize, per_dir: usize) -> Result<(), Box<dyn std::error::Error>> {
    std::fs::create_dir_all("/var/tmp/nop-bench")?;
    let repo = tempfile::tempdir_in("/var/tmp/nop-bench")?;
    let root = repo.path();
    for d in 0..dirs {
        let dir = root.join(format!("d{d:04}"));
        std::fs::create_dir_all(&dir)?;
        for f in 0..per_dir {
            std::fs::write(
                dir.join(format!("f{f:03}.rs")),
                format!("// file {d}/{f}\npub fn f{f}() -> u32 {{ {f} }}\n"),
            )?;
        }
    }
    git(root, &["init", "-q"])?;
    git(root, &["add", "-A"])?;
    // Packed now, as a repository's objects are: a commit of 100,000 files would otherwise
    // start git's automatic gc in the background, beside what is measured.
    git(root, &["-c", "gc.auto=0", "commit", "-qm", "files"])?;
    git(root, &["gc", "-q"])?;
    let to_request = first_request(root)?;
    std::fs::remove_dir_all(root.join(".nop"))?;
    let checkpoints = Checkpoints::new(root, &root.join(".nop"), 10.0);

    let start = Instant::now();
    checkpoints.record()?;
    let first = start.elapsed();

    let mut status_unchanged = Vec::new();
    let mut unchanged = Vec::new();
    let mut status_changed = Vec::new();
    let mut changed = Vec::new();
    let mut how: BTreeMap<String, usize> = BTreeMap::new();
    // Both see the same files; the order alternates.
    let mut measure = |round: usize, status: &mut Vec<Duration>, record: &mut Vec<Duration>| {
        let mut took = |status_first: bool| -> Result<(), Box<dyn std::error::Error>> {
            if status_first {
                status.push(git_status(root)?);
            } else {
                let start = Instant::now();
                let recorded = checkpoints.record_full()?;
                record.push(start.elapsed());
                *how.entry(format!("{:?}", recorded.how)).or_default() += 1;
            }
            Ok(())
        };
        took(round.is_multiple_of(2))?;
        took(!round.is_multiple_of(2))
    };
    for round in 0..30 {
        measure(round, &mut status_unchanged, &mut unchanged)?;
        // A run's worth of changes: 8 edits, a new file, a removed one.
        for i in 0..8 {
            let path = root.join(format!(
                "d{:04}/f{:03}.rs",
                (round * 7 + i) % dirs,
                i % per_dir
            ));
            std::fs::write(path, format!("// edited in round {round}\n"))?;
        }
        std::fs::write(root.join(format!("new-{round}.rs")), "// new\n")?;
        let _ =
            std::fs::remove_file(root.join(format!("d{:04}/f{:03}.rs", round % dirs, per_dir - 1)));
        measure(round, &mut status_changed, &mut changed)?;
    }
    for v in [
        &mut status_unchanged,
        &mut unchanged,
        &mut status_changed,
        &mut changed,
    ] {
        v.sort();
    }
    let pair = |v: &[Duration]| format!("{} / {}", ms(percentile(v, 0.5)), ms(percentile(v, 0.95)));
    println!(
        "| {name} | {} | {} | {} | **{}** | {} | **{}** | {:.1} MB |",
        ms(to_request),
        ms(first),
        pair(&status_unchanged),
        pair(&unchanged),
        pair(&status_changed),
        pair(&changed),
        du(&root.join(".nop/checkpoints")).0 as f64 / 1e6,
    );
    eprintln!("{name}: checkpoints taken {how:?}");
    Ok(())
}

/// 2,000 runs' checkpoints in a small repository: what one of changes costs as the store grows.
fn long_run() -> Result<(), Box<dyn std::error::Error>> {
    std::fs::create_dir_all("/var/tmp/nop-bench")?;
    let repo = tempfile::tempdir_in("/var/tmp/nop-bench")?;
    let root = repo.path();
    for f in 0..10 {
        std::fs::write(root.join(format!("f{f}.rs")), format!("// file {f}\n"))?;
    }
    git(root, &["init", "-q"])?;
    git(root, &["add", "-A"])?;
    git(root, &["-c", "gc.auto=0", "commit", "-qm", "files"])?;
    let checkpoints = Checkpoints::new(root, &root.join(".nop"), 10.0);
    checkpoints.record()?;
    println!();
    println!(
        "| runs | checkpoint of a run's changes (median / p95) | packs in the store | files in the store |"
    );
    println!("|---|---:|---:|---:|");
    let mut stretch = Vec::new();
    for run in 0..2_000 {
        checkpoints.record_at_start()?;
        std::fs::create_dir_all(root.join("new"))?;
        std::fs::write(
            root.join(format!("f{}.rs", run % 10)),
            format!("// run {run}\n"),
        )?;
        std::fs::write(root.join(format!("new/n{run}.rs")), "// new\n")?;
        if run > 0 {
            std::fs::remove_file(root.join(format!("new/n{}.rs", run - 1)))?;
        }
        let start = Instant::now();
        checkpoints.record_full()?;
        stretch.push(start.elapsed());
        if stretch.len() == 400 {
            stretch.sort();
            let count = |dir: &Path| -> usize {
                std::fs::read_dir(dir)
                    .map(|d| d.flatten().count())
                    .unwrap_or(0)
            };
            let packs = count(&root.join(".nop/checkpoints/objects/pack")) / 2;
            let (_, files) = du(&root.join(".nop/checkpoints"));
            println!(
                "| {}–{} | {} / {} | {packs} | {files} |",
                run + 1 - 399,
                run + 1,
                ms(percentile(&stretch, 0.5)),
                ms(percentile(&stretch, 0.95)),
            );
            stretch.clear();
        }
    }
    Ok(())
}

/// The user's `git status` in `root`: git's defaults, untracked files listed, output discarded.
fn git_status(root: &Path) -> Result<Duration, Box<dyn std::error::Error>> {
    let start = Instant::now();
    let out = Command::new("git")
        .arg("status")
        .current_dir(root)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .stdout(std::process::Stdio::null())
        .output()?;
    let took = start.elapsed();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned().into());
    }
    Ok(took)
}

/// A first `nop run` in `root` (its store does not exist yet): the time from its start until
/// the mock model has its first request.
fn first_request(root: &Path) -> Result<Duration, Box<dyn std::error::Error>> {
    let nop = env!("CARGO_BIN_EXE_nop");
    let init = Command::new(nop).arg("init").current_dir(root).output()?;
    if !init.status.success() {
        return Err(String::from_utf8_lossy(&init.stderr).into_owned().into());
    }
    let server = mock::MockServer::start(vec![mock::openai::reply_text("done")]);
    let start = Instant::now();
    let mut child = Command::new(nop)
        .current_dir(root)
        .env_clear()
        .env("HOME", root)
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("NOP_PROVIDER", "openai")
        .env("NOP_BASE_URL", server.openai_base_url())
        .env("NOP_MODEL", "mock-model")
        .env("NOP_ADVISORS_ENABLED", "false")
        .args(["run", "hello"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let got = server.wait_for_requests(1, Duration::from_secs(120));
    let elapsed = start.elapsed();
    child.wait()?;
    if got.is_empty() {
        return Err("nop made no model request".into());
    }
    Ok(elapsed)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!(
        "| repository | first `nop run`: start → first model request | first checkpoint (once) | `git status`, nothing changed | checkpoint, nothing changed | `git status` after a run's changes | checkpoint of a run's changes | store on disk |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    bench("small (10 files)", 2, 5)?;
    if std::env::var_os("SMALL").is_none() {
        bench("100,000 files in 1,000 directories", 1000, 100)?;
    }
    long_run()?;
    Ok(())
}
