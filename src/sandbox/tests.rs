//! Unit tests for what can be checked without confining the test process: the spec's JSON shape,
//! the rights each access maps to, the enforcement accounting for any kernel, and argument and
//! spec-file handling. What a confined command can and cannot do is tested through the real
//! binary in tests/suite/sandbox.rs, since confinement cannot be undone.

use std::ffi::OsString;

use landlock::{ABI, Access as _, AccessFs, LandlockStatus, make_bitflags};
use pretty_assertions::assert_eq;
use serde_json::json;

use super::rules::{abstract_socket_shortfall, required_fs, shortfalls};
use super::*;

fn available(abi: ABI) -> LandlockStatus {
    LandlockStatus::Available {
        effective_abi: abi,
        kernel_abi: None,
    }
}

fn os(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

#[test]
fn spec_json_uses_snake_case_names() {
    let spec = Spec {
        mechanism: Mechanism::Namespaces,
        required: true,
        grants: vec![
            Grant {
                path: "/usr".into(),
                access: Access::Read,
            },
            Grant {
                path: "/work".into(),
                access: Access::ReadWrite,
            },
            Grant {
                path: "/dev/null".into(),
                access: Access::ReadWriteExisting,
            },
        ],
        mounts: vec![
            Mount::new("/work/.nop".into(), MountKind::ReadOnly),
            Mount::new("/work/.nop/.permissions".into(), MountKind::Mask),
        ],
        network: false,
        parent: Some(42),
    };
    let value = serde_json::to_value(&spec).unwrap();
    assert_eq!(
        value,
        json!({
            "mechanism": "namespaces",
            "required": true,
            "grants": [
                {"path": "/usr", "access": "read"},
                {"path": "/work", "access": "read_write"},
                {"path": "/dev/null", "access": "read_write_existing"},
            ],
            "mounts": [
                {"path": "/work/.nop", "kind": "read_only"},
                {"path": "/work/.nop/.permissions", "kind": "mask"},
            ],
            "network": false,
            "parent": 42,
        })
    );
    assert_eq!(serde_json::from_value::<Spec>(value).unwrap(), spec);
}

#[test]
fn each_access_maps_to_its_rights() {
    assert_eq!(
        Access::Read.rights(),
        make_bitflags!(AccessFs::{ReadFile | ReadDir | Execute})
    );
    assert_eq!(Access::ReadWrite.rights(), AccessFs::from_all(ABI::V9));
    assert_eq!(
        Access::ReadWriteExisting.rights(),
        make_bitflags!(AccessFs::{ReadFile | ReadDir | Execute | WriteFile | Truncate | IoctlDev})
    );
}

#[test]
fn support_follows_the_kernel_abi() {
    let none = Support {
        filesystem: Enforcement::None,
        network: Enforcement::None,
        abi: None,
    };
    assert_eq!(Support::from_status(LandlockStatus::NotImplemented), none);
    assert_eq!(Support::from_status(LandlockStatus::NotEnabled), none);
    let cases = [
        (ABI::V1, Enforcement::Partial, Enforcement::None),
        (ABI::V3, Enforcement::Partial, Enforcement::None),
        (ABI::V4, Enforcement::Partial, Enforcement::Full),
        (ABI::V5, Enforcement::Full, Enforcement::Full),
        (ABI::V7, Enforcement::Full, Enforcement::Full),
        (ABI::V9, Enforcement::Full, Enforcement::Full),
    ];
    for (abi, filesystem, network) in cases {
        assert_eq!(
            Support::from_status(available(abi)),
            Support {
                filesystem,
                network,
                abi: Some(abi as i32),
            },
            "ABI {abi}"
        );
    }
    // A kernel newer than this build reports its own number.
    let newer = LandlockStatus::Available {
        effective_abi: ABI::V9,
        kernel_abi: Some(12),
    };
    assert_eq!(Support::from_status(newer).abi, Some(12));
}

#[test]
fn full_filesystem_enforcement_leaves_out_only_unix_socket_connect() {
    assert_eq!(
        AccessFs::from_all(ABI::V9) & !required_fs(),
        AccessFs::ResolveUnix
    );
}

#[test]
fn shortfalls_name_exactly_what_a_kernel_cannot_enforce() {
    assert_eq!(shortfalls(false, available(ABI::V7)), Vec::<String>::new());
    assert_eq!(shortfalls(true, available(ABI::V5)), Vec::<String>::new());
    assert_eq!(
        shortfalls(true, available(ABI::V2)),
        vec![
            "filesystem rules: this kernel (Landlock ABI 2) cannot control truncating files \
             (ABI 3), ioctl on device files (ABI 5)"
        ]
    );
    assert_eq!(
        shortfalls(false, available(ABI::V4)),
        vec![
            "filesystem rules: this kernel (Landlock ABI 4) cannot control ioctl on device files \
             (ABI 5)"
        ]
    );
    assert_eq!(
        shortfalls(false, available(ABI::V3)),
        vec![
            "filesystem rules: this kernel (Landlock ABI 3) cannot control ioctl on device files \
             (ABI 5)",
            "network: false: refusing TCP connect and bind needs Landlock ABI 4 (Linux 6.7); \
             this kernel has ABI 3",
        ]
    );
    let missing = shortfalls(false, LandlockStatus::NotEnabled);
    assert_eq!(missing.len(), 2, "{missing:?}");
    assert!(missing[0].contains("not enabled at boot"), "{missing:?}");
    assert!(missing[1].ends_with("this kernel has none"), "{missing:?}");
    assert_eq!(shortfalls(true, LandlockStatus::NotImplemented).len(), 1);
}

#[test]
fn abstract_sockets_are_scoped_from_abi_6_and_reported_before() {
    assert_eq!(abstract_socket_shortfall(available(ABI::V6)), None);
    assert_eq!(abstract_socket_shortfall(available(ABI::V9)), None);
    let older = abstract_socket_shortfall(available(ABI::V5)).expect("ABI 5");
    assert!(
        older.contains("abstract UNIX sockets") && older.ends_with("this kernel has ABI 5"),
        "{older}"
    );
    let none = abstract_socket_shortfall(LandlockStatus::NotImplemented).expect("none");
    assert!(none.ends_with("this kernel has none"), "{none}");
    // Best effort: never a reason for `sandbox: required` to refuse.
    assert_eq!(shortfalls(false, available(ABI::V5)), Vec::<String>::new());
}

#[test]
fn support_leaves_this_process_alone() {
    fn no_new_privs() -> String {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        status
            .lines()
            .find(|l| l.starts_with("NoNewPrivs:"))
            .unwrap()
            .to_string()
    }
    let before = no_new_privs();
    let support = support();
    assert_eq!(no_new_privs(), before);
    // Still free to write where no grant would allow it.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("still-writable"), "yes").unwrap();
    assert_eq!(
        support.abi.is_some(),
        support.filesystem != Enforcement::None
    );
}

#[test]
fn invocation_parses_descriptor_and_command() {
    assert_eq!(
        Invocation::parse(&os(&["3", "--", "bash", "-c", "true"])).unwrap(),
        Invocation {
            fd: 3,
            program: "bash".into(),
            args: os(&["-c", "true"]),
        }
    );
    let no_args = Invocation::parse(&os(&["7", "--", "true"])).unwrap();
    assert_eq!(no_args.fd, 7);
    assert!(no_args.args.is_empty());
}

#[test]
fn invocation_rejects_malformed_arguments() {
    for (args, expected) in [
        (vec!["3", "--"], "expected at least 3 arguments, got 2"),
        (
            vec!["/tmp/spec.json", "--", "true"],
            "FD must be a descriptor number above 2, not /tmp/spec.json",
        ),
        (
            vec!["1", "--", "true"],
            "FD must be a descriptor number above 2, not 1",
        ),
        (
            vec!["3", "bash", "true"],
            "expected -- before the program, not bash",
        ),
    ] {
        let error = Invocation::parse(&os(&args)).unwrap_err();
        assert!(matches!(error, SandboxError::Usage(_)), "{error:?}");
        assert!(error.to_string().ends_with(expected), "{error}");
    }
}
