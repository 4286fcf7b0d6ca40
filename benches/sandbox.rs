//! What the shell sandbox adds to one shell call: computing the view of the agent's rules,
//! handing it over in a sealed memfd, and `nop __sandbox` building the namespaces, the mounts and
//! Landlock before it runs `bash -c true`, against the same `bash -c true` run plainly.
//!
//! Run with `cargo bench --bench sandbox`. Repositories are made under /var/tmp (not /tmp, a
//! writable root of its own): a small one (`nop init` and a few files) and one of 100,000 files in
//! 1,000 directories, each with the shipped rules, and the large one also with a glob rule
//! (`**/*.pem: deny`), which makes the view walk the tree.
#![allow(clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nop::permissions::{ShellOptions, load_policy, shell_view};
use nop::sandbox::Mechanism;

const RUNS: usize = 300;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn make_repo(files: usize) -> Result<tempfile::TempDir, Box<dyn std::error::Error>> {
    std::fs::create_dir_all("/var/tmp/nop-bench")?;
    let dir = tempfile::tempdir_in("/var/tmp/nop-bench")?;
    let nop = env!("CARGO_BIN_EXE_nop");
    let out = Command::new(nop)
        .arg("init")
        .current_dir(dir.path())
        .output()?;
    assert!(out.status.success());
    Command::new("git")
        .args(["init", "-q"])
        .current_dir(dir.path())
        .status()?;
    for i in 0..files {
        let sub = dir.path().join(format!("src/d{:04}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&sub)?;
        }
        std::fs::write(sub.join(format!("f{i}.rs")), "// x\n")?;
    }
    Ok(dir)
}

/// Median and p95 of `RUNS` timings of each of `f` and `g`, run alternately (after 5 unmeasured
/// runs of each) so that the machine's drift affects both alike.
fn measure(
    mut f: impl FnMut(),
    mut g: impl FnMut(),
) -> ((Duration, Duration), (Duration, Duration)) {
    for _ in 0..5 {
        f();
        g();
    }
    let time = |h: &mut dyn FnMut()| {
        let started = Instant::now();
        h();
        started.elapsed()
    };
    let mut fs = Vec::with_capacity(RUNS);
    let mut gs = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        fs.push(time(&mut f));
        gs.push(time(&mut g));
    }
    fs.sort();
    gs.sort();
    (
        (percentile(&fs, 0.5), percentile(&fs, 0.95)),
        (percentile(&gs, 0.5), percentile(&gs, 0.95)),
    )
}

fn bench(
    name: &str,
    root: &Path,
    nop: &Path,
    mechanism: Mechanism,
) -> Result<(), Box<dyn std::error::Error>> {
    let root = std::fs::canonicalize(root)?;
    let policy = load_policy(&root, "coder")?;
    let options = ShellOptions {
        layers: Default::default(),
        read_only: false,
        mechanism,
        required: false,
        network: true,
        temp_dirs: ShellOptions::temp_dirs(None),
    };
    let plain = || {
        let status = Command::new("bash")
            .args(["-c", "true"])
            .current_dir(&root)
            .stdin(Stdio::null())
            .status()
            .expect("bash");
        assert!(status.success());
    };
    let confined = || {
        let view = shell_view(&policy, &options);
        let (mut command, spec_fd) = nop::sandbox::command(
            nop,
            &view.spec,
            "bash".as_ref(),
            &["-c".into(), "true".into()],
        )
        .expect("command");
        let status = command
            .current_dir(&root)
            .stdin(Stdio::null())
            .status()
            .expect("nop __sandbox");
        drop(spec_fd);
        assert!(status.success());
    };
    let (plain, confined) = measure(plain, confined);
    let (view_only, _) = measure(
        || {
            std::hint::black_box(shell_view(&policy, &options));
        },
        || {},
    );
    println!(
        "| {name} | {} / {} | {} / {} | {} / {} | {} / {} |",
        ms(plain.0),
        ms(plain.1),
        ms(confined.0),
        ms(confined.1),
        ms(confined.0.saturating_sub(plain.0)),
        ms(confined.1.saturating_sub(plain.1)),
        ms(view_only.0),
        ms(view_only.1),
    );
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // What nop runs for each call: the small helper beside it.
    let nop = Path::new(env!("CARGO_BIN_EXE_nop-sandbox"));
    let probe_started = Instant::now();
    let probe = nop::sandbox::namespace::probe(nop);
    println!(
        "namespace probe (once per nop process): {} ({probe:?})",
        ms(probe_started.elapsed())
    );
    if !probe.available {
        println!("user namespaces are unavailable here; nothing to measure");
        return Ok(());
    }
    println!(
        "| repository | bash -c true (median / p95) | sandboxed (median / p95) | added (median / p95) | of which the view (median / p95) |"
    );
    println!("|---|---:|---:|---:|---:|");
    let small = make_repo(10)?;
    bench(
        "small (nop init, 10 files)",
        small.path(),
        nop,
        Mechanism::Namespaces,
    )?;
    let large = make_repo(100_000)?;
    bench("100,000 files", large.path(), nop, Mechanism::Namespaces)?;
    bench(
        "small, Landlock alone (the fallback)",
        small.path(),
        nop,
        Mechanism::Landlock,
    )?;
    bench(
        "100,000 files, Landlock alone",
        large.path(),
        nop,
        Mechanism::Landlock,
    )?;
    let rules = large.path().join(".nop/.permissions/agent-default.yml");
    let shipped = std::fs::read_to_string(&rules)?;
    std::fs::write(
        &rules,
        shipped.replace(
            "file-access:\n",
            "file-access:\n  - pattern: \"**/*.pem\"\n    access: deny\n",
        ),
    )?;
    bench(
        "100,000 files, `**/*.pem: deny`",
        large.path(),
        nop,
        Mechanism::Namespaces,
    )?;
    Ok(())
}
