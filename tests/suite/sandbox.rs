//! The Landlock layer of the shell sandbox as the shell tool uses it: `nop __sandbox FD -- bash
//! -c …` with a spec of grants alone (the Landlock-only mechanism), run for real, checking what
//! the confined command can and cannot do. The namespace view and the default configuration are
//! tested end to end in `shell_sandbox.rs`.
//!
//! Every confining test first asks `support()`. On a kernel that cannot enforce the spec, the same
//! run must instead be refused with exit 125 and a message saying what is missing: a test never
//! passes without checking something.

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Output;

use assert_cmd::Command;
use nop::sandbox::{Access, Enforcement, Grant, Mechanism, Spec, support};
use pretty_assertions::assert_eq;
use tempfile::TempDir;

/// A temp directory holding `rw/` (granted read-write), `ro/` (granted read-only, holds
/// `file.txt`) and `secret/` (never granted, holds `key.txt`).
struct Sandbox {
    root: TempDir,
}

impl Sandbox {
    fn new() -> Sandbox {
        let root = tempfile::tempdir().unwrap();
        fs::create_dir(root.path().join("rw")).unwrap();
        fs::create_dir(root.path().join("ro")).unwrap();
        fs::write(root.path().join("ro/file.txt"), "original\n").unwrap();
        fs::create_dir(root.path().join("secret")).unwrap();
        fs::write(root.path().join("secret/key.txt"), "hidden\n").unwrap();
        Sandbox { root }
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.root.path().join(relative)
    }

    fn read(&self, relative: &str) -> String {
        fs::read_to_string(self.path(relative)).unwrap()
    }

    /// What bash and coreutils need to start, nothing more: not `/`, so that refusals show.
    fn system_grants() -> Vec<Grant> {
        let mut grants: Vec<Grant> = ["/usr", "/bin", "/lib", "/lib64", "/etc", "/proc"]
            .into_iter()
            .map(|p| grant(p, Access::Read))
            .collect();
        grants.push(grant("/dev/null", Access::ReadWriteExisting));
        grants
    }

    /// System grants plus `rw/` read-write and `ro/` read-only, and `extra`.
    fn spec(&self, network: bool, extra: Vec<Grant>) -> Spec {
        let mut grants = Sandbox::system_grants();
        grants.push(grant(self.path("rw"), Access::ReadWrite));
        grants.push(grant(self.path("ro"), Access::Read));
        grants.extend(extra);
        Spec {
            mechanism: Mechanism::Landlock,
            required: false,
            grants,
            mounts: Vec::new(),
            network,
            parent: None,
        }
    }

    /// Runs `bash -c script` confined by `spec`, in `rw/`, the spec passed as the shell tool
    /// passes it (a sealed memfd).
    fn run(&self, spec: &Spec, required: bool, script: &str) -> Output {
        let spec = Spec {
            required,
            ..spec.clone()
        };
        run_confined(
            &spec,
            "bash".as_ref(),
            &["-c".into(), script.into()],
            &self.path("rw"),
        )
    }
}

/// Runs `program args…` in `dir` under `spec`, passed as the shell tool passes it.
fn run_confined(
    spec: &Spec,
    program: &std::ffi::OsStr,
    args: &[std::ffi::OsString],
    dir: &Path,
) -> Output {
    let (mut command, _spec_fd) =
        nop::sandbox::command(&assert_cmd::cargo::cargo_bin("nop"), spec, program, args).unwrap();
    command.current_dir(dir).output().unwrap()
}

fn grant(path: impl AsRef<Path>, access: Access) -> Grant {
    Grant {
        path: path.as_ref().to_owned(),
        access,
    }
}

/// Single-quoted for bash (temp paths hold no quote, but be safe).
fn q(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', r"'\''"))
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn filesystem_enforced() -> bool {
    support().filesystem == Enforcement::Full
}

/// The command ran and the kernel refused it something.
fn assert_denied(output: &Output) {
    let err = stderr(output);
    assert!(err.contains("Permission denied"), "{err}");
}

/// The run was refused before the command started, naming what the kernel lacks.
fn assert_refused(output: &Output, what: &str) {
    assert_eq!(
        output.status.code(),
        Some(125),
        "stderr: {}",
        stderr(output)
    );
    let err = stderr(output);
    assert!(
        err.starts_with("nop sandbox: the sandbox is required but cannot be enforced here: "),
        "{err}"
    );
    assert!(err.contains(what), "{err}");
    assert_eq!(stdout(output), "", "the command must not have run");
}

#[test]
fn writes_inside_a_read_write_directory_succeed() {
    let sb = Sandbox::new();
    let rw = q(&sb.path("rw"));
    let script = format!(
        "set -e; echo hello > {rw}/new.txt; mkdir {rw}/d; mv {rw}/new.txt {rw}/d/moved.txt; \
         cp {rw}/d/moved.txt {rw}/kept.txt; rm -r {rw}/d; cat {rw}/kept.txt"
    );
    let output = sb.run(&sb.spec(false, vec![]), true, &script);
    if !filesystem_enforced() {
        return assert_refused(&output, "filesystem rules");
    }
    assert!(output.status.success(), "stderr: {}", stderr(&output));
    assert_eq!(stdout(&output), "hello\n");
    assert_eq!(sb.read("rw/kept.txt"), "hello\n");
    assert!(!sb.path("rw/d").exists());
}

#[test]
fn writes_inside_a_read_only_directory_are_refused() {
    let sb = Sandbox::new();
    let ro = q(&sb.path("ro"));
    let script = format!(
        "cat {ro}/file.txt; \
         echo changed > {ro}/file.txt && echo OVERWROTE; \
         echo more >> {ro}/file.txt && echo APPENDED; \
         : > {ro}/new.txt && echo CREATED; \
         rm -f {ro}/file.txt && echo REMOVED; \
         true"
    );
    let output = sb.run(&sb.spec(false, vec![]), true, &script);
    if !filesystem_enforced() {
        return assert_refused(&output, "filesystem rules");
    }
    assert!(output.status.success(), "stderr: {}", stderr(&output));
    // Reading works; none of the writes did.
    assert_eq!(stdout(&output), "original\n");
    assert_denied(&output);
    assert_eq!(sb.read("ro/file.txt"), "original\n");
    assert!(!sb.path("ro/new.txt").exists());
}

#[test]
fn sed_in_place_on_a_read_only_file_is_refused() {
    let sb = Sandbox::new();
    let script = format!("sed -i s/original/changed/ {}", q(&sb.path("ro/file.txt")));
    let output = sb.run(&sb.spec(false, vec![]), true, &script);
    if !filesystem_enforced() {
        return assert_refused(&output, "filesystem rules");
    }
    assert!(!output.status.success(), "sed -i must fail");
    assert!(stderr(&output).contains("sed:"), "{}", stderr(&output));
    assert_eq!(sb.read("ro/file.txt"), "original\n");
}

#[test]
fn a_path_never_granted_cannot_be_read_or_listed() {
    let sb = Sandbox::new();
    let secret = q(&sb.path("secret"));
    let script = format!(
        "cat {secret}/key.txt && echo READ; ls {secret} && echo LISTED; \
         echo x > {secret}/new.txt && echo WROTE; true"
    );
    let output = sb.run(&sb.spec(false, vec![]), true, &script);
    if !filesystem_enforced() {
        return assert_refused(&output, "filesystem rules");
    }
    assert!(output.status.success(), "stderr: {}", stderr(&output));
    assert_eq!(stdout(&output), "");
    let err = stderr(&output);
    assert_eq!(err.matches("Permission denied").count(), 3, "{err}");
    assert!(!sb.path("secret/new.txt").exists());
}

#[test]
fn a_file_grant_covers_that_file_only() {
    let sb = Sandbox::new();
    fs::write(sb.path("secret/other.txt"), "other\n").unwrap();
    let secret = q(&sb.path("secret"));
    let script = format!(
        "set -e; cat {secret}/key.txt; echo more >> {secret}/key.txt; \
         ! cat {secret}/other.txt; ! ls {secret}; ! touch {secret}/new.txt"
    );
    // ReadWrite asks for directory rights too; on a file only the file rights are kept (the
    // kernel would reject the rule otherwise).
    let spec = sb.spec(
        false,
        vec![grant(sb.path("secret/key.txt"), Access::ReadWrite)],
    );
    let output = sb.run(&spec, true, &script);
    if !filesystem_enforced() {
        return assert_refused(&output, "filesystem rules");
    }
    assert!(output.status.success(), "stderr: {}", stderr(&output));
    assert_eq!(stdout(&output), "hidden\n");
    assert_eq!(sb.read("secret/key.txt"), "hidden\nmore\n");
    assert!(!sb.path("secret/new.txt").exists());
}

#[test]
fn a_grant_for_a_missing_path_is_skipped() {
    let sb = Sandbox::new();
    let later = sb.path("secret/later");
    let spec = sb.spec(false, vec![grant(&later, Access::ReadWrite)]);
    // The rule could not be added, so the directory cannot be created afterwards either.
    let output = sb.run(&spec, true, &format!("mkdir {}", q(&later)));
    if !filesystem_enforced() {
        return assert_refused(&output, "filesystem rules");
    }
    assert_eq!(output.status.code(), Some(1), "stderr: {}", stderr(&output));
    assert_denied(&output);
    assert!(!later.exists());
}

#[test]
fn dev_null_is_writable_only_when_granted_read_write_existing() {
    let sb = Sandbox::new();
    let script = "echo discarded > /dev/null && echo WROTE";
    let output = sb.run(&sb.spec(false, vec![]), true, script);
    if !filesystem_enforced() {
        return assert_refused(&output, "filesystem rules");
    }
    assert!(output.status.success(), "stderr: {}", stderr(&output));
    assert_eq!(stdout(&output), "WROTE\n");

    // The same spec with /dev/null granted Read only.
    let mut spec = sb.spec(false, vec![]);
    for g in &mut spec.grants {
        if g.path == Path::new("/dev/null") {
            g.access = Access::Read;
        }
    }
    let output = sb.run(&spec, true, script);
    assert_eq!(output.status.code(), Some(1), "stderr: {}", stderr(&output));
    assert_eq!(stdout(&output), "");
    assert_denied(&output);
}

#[test]
fn tcp_is_refused_without_network_and_allowed_with_it() {
    let sb = Sandbox::new();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // The kernel completes the handshake from the listen backlog: no accept needed.
    let script = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED");

    let refused = sb.run(&sb.spec(false, vec![]), true, &script);
    let supported = support();
    if supported.filesystem != Enforcement::Full || supported.network != Enforcement::Full {
        let what = if supported.network == Enforcement::Full {
            "filesystem rules"
        } else {
            "refusing TCP connect and bind needs Landlock ABI 4"
        };
        return assert_refused(&refused, what);
    }
    assert_eq!(
        refused.status.code(),
        Some(1),
        "stderr: {}",
        stderr(&refused)
    );
    assert_eq!(stdout(&refused), "");
    assert_denied(&refused);

    let allowed = sb.run(&sb.spec(true, vec![]), true, &script);
    assert!(allowed.status.success(), "stderr: {}", stderr(&allowed));
    assert_eq!(stdout(&allowed), "CONNECTED\n");
}

#[test]
fn the_confined_command_runs_with_no_new_privs() {
    let sb = Sandbox::new();
    let output = sb.run(
        &sb.spec(true, vec![]),
        true,
        "grep NoNewPrivs /proc/self/status",
    );
    if !filesystem_enforced() {
        return assert_refused(&output, "filesystem rules");
    }
    assert!(output.status.success(), "stderr: {}", stderr(&output));
    assert_eq!(
        stdout(&output).split_whitespace().collect::<Vec<_>>(),
        ["NoNewPrivs:", "1"]
    );
}

#[test]
fn not_required_runs_confined_where_possible_and_unconfined_elsewhere() {
    let sb = Sandbox::new();
    let script = format!("cat {}", q(&sb.path("secret/key.txt")));
    let output = sb.run(&sb.spec(true, vec![]), false, &script);
    if support().filesystem == Enforcement::None {
        assert!(output.status.success(), "stderr: {}", stderr(&output));
        assert_eq!(stdout(&output), "hidden\n");
    } else {
        assert_eq!(output.status.code(), Some(1), "stderr: {}", stderr(&output));
        assert_denied(&output);
    }
}

#[test]
fn a_program_outside_the_grants_cannot_be_executed() {
    let sb = Sandbox::new();
    let tool = sb.path("secret/tool.sh");
    fs::write(&tool, "#!/bin/sh\necho RAN\n").unwrap();
    let mut perms = fs::metadata(&tool).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    fs::set_permissions(&tool, perms).unwrap();
    let spec = Spec {
        required: true,
        ..sb.spec(false, vec![])
    };
    let output = run_confined(&spec, tool.as_os_str(), &[], &sb.path("rw"));
    assert_eq!(
        output.status.code(),
        Some(125),
        "stderr: {}",
        stderr(&output)
    );
    assert_eq!(stdout(&output), "");
    if !filesystem_enforced() {
        return assert_refused(&output, "filesystem rules");
    }
    let err = stderr(&output);
    assert!(err.starts_with("nop sandbox: cannot execute "), "{err}");
    assert!(err.contains("Permission denied"), "{err}");
}

#[test]
fn bad_invocations_exit_125_with_a_message() {
    let sb = Sandbox::new();
    let plain = sb.path("spec.json");
    fs::write(&plain, serde_json::to_vec(&sb.spec(true, vec![])).unwrap()).unwrap();
    let cases: [(&str, &str); 4] = [
        (
            "exec nop __sandbox 3 --",
            "nop sandbox: usage: nop __sandbox FD -- PROGRAM [ARGS...]: expected at least 3 \
             arguments, got 2",
        ),
        (
            "exec nop __sandbox 9 -- true",
            "nop sandbox: cannot read the sandbox spec from descriptor 9",
        ),
        // A spec in a file or a pipe (which something else could have written) is refused.
        (
            "exec 3<\"$SPEC\"; exec nop __sandbox 3 -- echo RAN",
            "nop sandbox: descriptor 3 is not a sealed memfd",
        ),
        (
            "exec 3< <(cat \"$SPEC\"); exec nop __sandbox 3 -- echo RAN",
            "nop sandbox: descriptor 3 is not a sealed memfd",
        ),
    ];
    let nop = assert_cmd::cargo::cargo_bin("nop");
    let path = format!("{}:/usr/bin:/bin", nop.parent().unwrap().display());
    for (script, expected) in cases {
        let output = Command::new("bash")
            .args(["-c", script])
            .env("PATH", &path)
            .env("SPEC", &plain)
            .output()
            .unwrap();
        assert_eq!(
            output.status.code(),
            Some(125),
            "{script}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains(expected),
            "{script}: {}",
            stderr(&output)
        );
        assert_eq!(stdout(&output), "", "{script}: the command must not run");
    }
}
