//! What the copy-on-write layers add to one shell call: the sandboxed `bash -c true` of the
//! shipped rules with `.git` read-only (as before layers), against the same call with `.git`
//! written through a fresh git layer (made before, applied and removed after, as the shell tool
//! does) and three caches written through layers of the session's.
//!
//! Run with `cargo bench --bench layers`. The repository (`git init`, one commit, `nop init`)
//! and the caches are made under /var/tmp/nop-bench.
#![allow(clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nop::permissions::{Layers, ShellOptions, load_policy, shell_view};
use nop::sandbox::Mechanism;

const RUNS: usize = 300;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .args(["-c", "user.name=b", "-c", "user.email=b@example.com"])
        .args(args)
        .current_dir(dir)
        .status()
        .expect("git");
    assert!(status.success());
}

/// Runs `bash -c COMMAND` in `root` under the view of `options`, and what the shell tool does
/// with its layers around it.
fn call(root: &Path, nop: &Path, options: &ShellOptions, command: &str) {
    let policy = load_policy(root, "coder").expect("rules");
    let view = shell_view(&policy, options);
    for layer in view.spec.mounts.iter().filter_map(|m| m.layer.as_ref()) {
        for sub in ["upper", "work"] {
            std::fs::create_dir_all(layer.join(sub)).expect("layer");
        }
    }
    let (mut cmd, spec_fd) = nop::sandbox::command(
        nop,
        &view.spec,
        "bash".as_ref(),
        &["-c".into(), command.into()],
    )
    .expect("command");
    let status = cmd
        .current_dir(root)
        .stdin(Stdio::null())
        .status()
        .expect("nop __sandbox");
    drop(spec_fd);
    assert!(status.success());
    if !view.git_layers.is_empty() {
        let applied = nop::tools::git_layer::apply(&view.git_layers, root);
        assert!(applied.unavailable.is_none(), "{applied:?}");
    }
    if let Some(layer) = &options.layers.git {
        nop::tools::git_layer::remove_layer(layer);
    }
}

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
    let (mut fs, mut gs) = (Vec::new(), Vec::new());
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

fn main() -> Result<(), Box<dyn std::error::Error>> {
    std::fs::create_dir_all("/var/tmp/nop-bench")?;
    let dir = tempfile::tempdir_in("/var/tmp/nop-bench")?;
    let root = dir.path().join("repo");
    std::fs::create_dir_all(&root)?;
    git(&root, &["init", "-q"]);
    std::fs::write(root.join("README.md"), "# bench\n")?;
    git(&root, &["add", "-A"]);
    git(&root, &["commit", "-qm", "start"]);
    let nop = PathBuf::from(env!("CARGO_BIN_EXE_nop"));
    let out = Command::new(&nop).arg("init").current_dir(&root).output()?;
    assert!(out.status.success());
    let root = std::fs::canonicalize(&root)?;
    let session = dir.path().join("session");
    let mut caches = Vec::new();
    for name in [".cargo", ".npm", ".cache"] {
        let cache = dir.path().join("home").join(name);
        std::fs::create_dir_all(cache.join("some/dir"))?;
        std::fs::write(cache.join("some/dir/file"), "cached\n")?;
        caches.push((
            std::fs::canonicalize(&cache)?,
            session.join(format!("cache{name}")),
        ));
    }
    let base = ShellOptions {
        mechanism: Mechanism::Namespaces,
        required: false,
        network: true,
        temp_dirs: ShellOptions::temp_dirs(None),
        layers: Layers::default(),
        read_only: false,
    };
    println!(
        "| command | `.git` read-only, no layers (median / p95) | git layer and 3 cache layers (median / p95) | added (median / p95) |"
    );
    println!("|---|---:|---:|---:|");
    for command in ["true", "git status --short >/dev/null"] {
        let mut n = 0u64;
        let (plain, layered) = measure(
            || call(&root, &nop, &base, command),
            || {
                n += 1;
                let options = ShellOptions {
                    layers: Layers {
                        git: Some(
                            nop::tools::git_layer::scratch_dir(&session).join(format!("git-{n}")),
                        ),
                        caches: caches.clone(),
                        read_only: false,
                    },
                    ..base.clone()
                };
                call(&root, &nop, &options, command);
            },
        );
        println!(
            "| `{command}` | {} / {} | {} / {} | **{} / {}** |",
            ms(plain.0),
            ms(plain.1),
            ms(layered.0),
            ms(layered.1),
            ms(layered.0.saturating_sub(plain.0)),
            ms(layered.1.saturating_sub(plain.1)),
        );
    }
    Ok(())
}
