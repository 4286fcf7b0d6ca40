//! The permission module's path normalisation and matching, attacked from every side: a table of
//! hostile paths that must all be refused, a table of ordinary paths that must be allowed, a
//! symbolic-link swap between two checks, properties over random paths, tool globs, and broken
//! permission files that must fail closed.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use nop::permissions::{
    Access, Decision, FileAccess, PermissionError, Policy, Source, load_policy,
};
use pretty_assertions::assert_eq;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use tempfile::TempDir;

/// The default rules of the fixture; the line numbers matter to the `Source` assertions below.
const DEFAULT_RULES: &str = r#"tools:
  allowed: ["*"]
file-access:
  - pattern: "secrets/**"
    access: deny
  - pattern: "vendor/**"
    access: read-only
  - pattern: "**"
    access: read
"#;
const SECRETS_RULE_LINE: usize = 4;
const EVERYTHING_RULE_LINE: usize = 8;

/// A stricter agent, for `narrowed_by`.
const NARROW_RULES: &str = r#"tools:
  allowed: [read-file]
file-access:
  - pattern: "src/**"
    access: read
  - pattern: "**"
    access: read-only
"#;

/// A temporary repository and a directory beside it that is outside it.
///
/// Layout (everything under one temp dir so that `../outside` is a known path):
/// ```text
/// <base>/outside/file
/// <base>/repo/            <- root (canonical)
///   src/main.rs  secrets/key.txt  vendor/lib.rs  %2e%2e/file  ~/.ssh/id_rsa
///   .nop/config.yml  .nop/.permissions/agent-default.yml  agent-narrow.yml
///   link-out -> /            link-etc -> /etc         link-secrets -> secrets
///   link-perm -> .nop/.permissions                    src/up -> ..
///   chain1 -> chain2 -> chain3 -> <base>/outside      dangling -> <base>/outside/missing
///   loop1 -> loop2 -> loop1   link-outside-file -> <base>/outside/file
/// ```
struct Fixture {
    _base: TempDir,
    root: PathBuf,
    outside: PathBuf,
    outside_file: PathBuf,
    /// The environment that finds the user's record of what they trust.
    env: std::collections::BTreeMap<String, String>,
}

fn write(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().expect("a parent")).expect("create parent");
    fs::write(path, text).expect("write file");
}

impl Fixture {
    fn new() -> Fixture {
        let env = crate::support::in_process_env();
        let base = tempfile::tempdir().expect("temp dir");
        let base_path = fs::canonicalize(base.path()).expect("canonical base");
        let root = base_path.join("repo");
        let outside = base_path.join("outside");
        fs::create_dir_all(&root).expect("repo dir");
        fs::create_dir_all(&outside).expect("outside dir");
        let root = fs::canonicalize(&root).expect("canonical root");
        let outside_file = outside.join("file");
        write(&outside_file, "outside the repository\n");

        write(&root.join("src/main.rs"), "fn main() {}\n");
        write(&root.join("secrets/key.txt"), "hunter2\n");
        write(&root.join("vendor/lib.rs"), "// vendored\n");
        write(&root.join(".nop/config.yml"), "{}\n");
        write(
            &root.join(".nop/.permissions/agent-default.yml"),
            DEFAULT_RULES,
        );
        write(
            &root.join(".nop/.permissions/agent-narrow.yml"),
            NARROW_RULES,
        );
        write(&root.join("%2e%2e/file"), "a directory with an odd name\n");
        write(&root.join("~/.ssh/id_rsa"), "not really a key\n");

        let link = |target: &Path, name: &str| symlink(target, root.join(name)).expect("symlink");
        link(Path::new("/"), "link-out");
        link(Path::new("/etc"), "link-etc");
        link(Path::new("secrets"), "link-secrets");
        link(Path::new(".nop/.permissions"), "link-perm");
        link(Path::new(".."), "src/up");
        link(Path::new("chain2"), "chain1");
        link(Path::new("chain3"), "chain2");
        link(&outside, "chain3");
        link(&outside.join("missing"), "dangling");
        link(Path::new("loop2"), "loop1");
        link(Path::new("loop1"), "loop2");
        link(&outside_file, "link-outside-file");

        let fx = Fixture {
            _base: base,
            root,
            outside,
            outside_file,
            env,
        };
        fx.trust();
        fx
    }

    /// What the user does after writing permission files by hand: `nop trust --yes`.
    fn trust(&self) {
        nop::trust::accept_all(&self.root, &[], &self.env).unwrap();
    }

    fn policy(&self, agent: &str) -> Policy {
        load_policy(&self.root, agent).expect("load policy")
    }

    fn permission_file(&self, agent: &str) -> PathBuf {
        self.root
            .join(format!(".nop/.permissions/agent-{agent}.yml"))
    }

    /// Whether `resolved` is somewhere the default policy may grant `access` to.
    fn allowed_target(&self, resolved: &Path, access: Access) -> bool {
        let under = |dir: &str| resolved.starts_with(self.root.join(dir));
        if !resolved.starts_with(&self.root) || under("secrets") || under(".nop/.permissions") {
            return false;
        }
        access == Access::Read || !(under(".nop") || under("vendor"))
    }
}

fn access_name(access: Access) -> &'static str {
    match access {
        Access::Read => "read",
        Access::Write => "write",
    }
}

/// Paths that must be refused by the default policy, each with the access tried.
#[expect(clippy::too_many_lines, reason = "a debt: listed in AGENTS.md")]
fn hostile_cases(fx: &Fixture) -> Vec<(String, Access)> {
    use Access::{Read, Write};
    let root = fx.root.display().to_string();
    let outside = fx.outside.display().to_string();
    let outside_file = fx.outside_file.display().to_string();
    let mut cases: Vec<(String, Access)> = [
        // Plain escapes upwards.
        ("../x", Read),
        ("../x", Write),
        ("..", Read),
        ("..", Write),
        ("../", Read),
        ("../../etc/passwd", Read),
        ("../outside/file", Read),
        ("../outside/file", Write),
        ("../outside/new-file", Write),
        ("src/../../x", Read),
        ("./../x", Read),
        ("src/./../../x", Write),
        ("a/b/../../../x", Read),
        ("src/a/b/../../../../x", Write),
        ("src/../vendor/../../x", Read),
        ("src/../src/../src/../../outside/file", Read),
        ("/tmp/../etc/passwd", Read),
        // Absolute paths outside.
        ("/etc/passwd", Read),
        ("/etc/passwd", Write),
        ("/", Read),
        ("/", Write),
        ("//etc/passwd", Read),
        ("///etc//passwd", Read),
        ("/proc/self/root/etc/passwd", Read),
        ("/proc/self/cwd/../x", Read),
        // The permission files, however spelt.
        (".nop/.permissions/agent-default.yml", Read),
        (".nop/.permissions/agent-default.yml", Write),
        (".nop/.permissions/agent-evil.yml", Write),
        (".nop/.permissions", Read),
        (".nop/.permissions/", Write),
        (".nop/./.permissions/x", Read),
        (".nop/./.permissions/x", Write),
        ("src/../.nop/.permissions/agent-default.yml", Read),
        (".nop//.permissions/agent-default.yml", Write),
        (".nop/.permissions/../.permissions/agent-default.yml", Write),
        ("./.nop/.permissions/agent-narrow.yml", Read),
        (".nop/.permissions/x\ny", Write),
        // The rest of .nop/ is read-only.
        (".nop/config.yml", Write),
        (".nop/.system/x", Write),
        (".nop/new.yml", Write),
        (".nop", Write),
        // Rules of the file.
        ("secrets/key.txt", Read),
        ("secrets/key.txt", Write),
        ("secrets", Read),
        ("secrets/", Read),
        ("secrets/./key.txt", Read),
        ("secrets/new.txt", Write),
        ("secrets/a\nb", Write),
        ("SECRETS/../secrets/key.txt", Read),
        ("vendor/lib.rs", Write),
        ("vendor/new.rs", Write),
        ("vendor/../secrets/key.txt", Read),
        // Through symbolic links.
        ("link-out", Read),
        ("link-out/etc/passwd", Read),
        ("link-out/tmp/x", Write),
        ("link-out/proc/self/root/etc/shadow", Read),
        ("link-etc", Read),
        ("link-etc/passwd", Read),
        ("link-etc/../x", Write),
        ("link-secrets", Read),
        ("link-secrets/key.txt", Read),
        ("link-secrets/key.txt", Write),
        ("link-secrets/../secrets/key.txt", Read),
        ("link-perm/agent-default.yml", Read),
        ("link-perm/agent-default.yml", Write),
        ("link-perm/agent-new.yml", Write),
        ("src/up/secrets/key.txt", Read),
        ("src/up/.nop/.permissions/agent-default.yml", Read),
        ("src/up/link-perm/../.permissions/agent-default.yml", Write),
        ("src/up/..", Read),
        ("src/up/../outside", Write),
        ("src/up/../outside/file", Read),
        ("src/up/src/up/../x", Write),
        ("chain1", Read),
        ("chain1/file", Read),
        ("chain2/file", Write),
        ("chain3/new-file", Write),
        ("dangling", Write),
        ("dangling", Read),
        ("dangling/x", Write),
        ("loop1", Read),
        ("loop1/x", Read),
        ("loop2/x", Write),
        ("link-outside-file", Read),
        ("link-outside-file", Write),
        // Malformed strings.
        ("src/\0/x", Read),
        ("src/main.rs\0", Read),
        ("\0", Write),
        ("", Read),
        ("", Write),
        (" ", Read),
        ("\t\n", Write),
        ("src/main.rs/x", Read),
        ("src/main.rs/../../x", Read),
    ]
    .into_iter()
    .map(|(p, a)| (p.to_string(), a))
    .collect();
    cases.extend([
        (outside.clone(), Read),
        (format!("{outside}/"), Write),
        (outside_file.clone(), Read),
        (outside_file, Write),
        (format!("{outside}/new-file"), Write),
        (format!("{root}/secrets/key.txt"), Read),
        (format!("{root}/.nop/.permissions/agent-default.yml"), Write),
        (format!("{root}/../outside/file"), Read),
        (format!("/proc/self/root{root}/secrets/key.txt"), Read),
        (format!("link-out{root}/secrets/key.txt"), Read),
        (format!("{}etc/passwd", "../".repeat(64)), Read),
        (format!("src/{}x", "../".repeat(40)), Write),
        (format!("{}etc/passwd", "../".repeat(2000)), Read),
        (format!("{}../x", "./".repeat(500)), Read),
    ]);
    cases
}

#[test]
fn hostile_paths_are_all_refused() {
    let fx = Fixture::new();
    let policy = fx.policy("default");
    let cases = hostile_cases(&fx);
    assert!(cases.len() >= 60, "only {} cases", cases.len());
    let mut failures = Vec::new();
    for (path, access) in &cases {
        let (resolved, decision) = policy.check_path(path, *access);
        let what = format!(
            "{path:?} ({}) -> {resolved:?}: {decision:?}",
            access_name(*access)
        );
        match &decision {
            Decision::Deny { reason, .. } if !reason.is_empty() => {}
            _ => failures.push(format!("not refused: {what}")),
        }
        if let Some(resolved) = &resolved {
            assert!(resolved.is_absolute(), "{what}");
            if fx.allowed_target(resolved, *access) {
                failures.push(format!("resolved to an allowed target: {what}"));
            }
            // Deciding again from the resolved path gives the same answer.
            if policy.check_resolved(resolved, *access).is_allowed() {
                failures.push(format!("the resolved path is allowed: {what}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} hostile cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn ordinary_paths_are_allowed_and_resolve_where_expected() {
    use Access::{Read, Write};
    let fx = Fixture::new();
    let policy = fx.policy("default");
    let root = fx.root.display().to_string();
    let repo_name = fx
        .root
        .file_name()
        .expect("a name")
        .to_string_lossy()
        .into_owned();
    let cases: Vec<(String, Access, &str)> = vec![
        ("src/main.rs".into(), Read, "src/main.rs"),
        ("src/main.rs".into(), Write, "src/main.rs"),
        ("src/new/file.rs".into(), Write, "src/new/file.rs"),
        (".nop/config.yml".into(), Read, ".nop/config.yml"),
        (".nop".into(), Read, ".nop"),
        (".nop/.system/x".into(), Read, ".nop/.system/x"),
        ("vendor/lib.rs".into(), Read, "vendor/lib.rs"),
        ("src/./main.rs".into(), Read, "src/main.rs"),
        ("./src/main.rs".into(), Write, "src/main.rs"),
        ("src//main.rs".into(), Read, "src/main.rs"),
        ("src/../src/main.rs".into(), Write, "src/main.rs"),
        ("src/up/src/main.rs".into(), Read, "src/main.rs"),
        ("src/up/src/up/vendor/lib.rs".into(), Read, "vendor/lib.rs"),
        // Odd names are just names inside the repository.
        ("%2e%2e".into(), Read, "%2e%2e"),
        ("%2e%2e/file".into(), Write, "%2e%2e/file"),
        ("%2e%2e/x".into(), Write, "%2e%2e/x"),
        (
            "%2e%2e%2f%2e%2e%2fetc%2fpasswd".into(),
            Write,
            "%2e%2e%2f%2e%2e%2fetc%2fpasswd",
        ),
        ("%2e%2e/%2e%2e/x".into(), Write, "%2e%2e/%2e%2e/x"),
        ("..\\..\\x".into(), Write, "..\\..\\x"),
        (" ../x".into(), Write, " ../x"),
        ("... /x".into(), Write, "... /x"),
        // Absolute or roundabout spellings of paths inside the repository.
        (format!("{root}/src/main.rs"), Read, "src/main.rs"),
        (format!("../{repo_name}/src/main.rs"), Write, "src/main.rs"),
        (format!("link-out{root}/src/main.rs"), Read, "src/main.rs"),
    ];
    for (path, access, expected) in cases {
        let (resolved, decision) = policy.check_path(&path, access);
        let what = format!("{path:?} ({})", access_name(access));
        assert_eq!(resolved, Some(fx.root.join(expected)), "{what}");
        assert!(decision.is_allowed(), "{what}: {decision:?}");
    }
    // `~` is the home directory, as in a shell: never a directory named `~` here, and the
    // user's keys stay out of reach.
    if let Some(home) = std::env::var_os("HOME").map(PathBuf::from)
        && home.is_absolute()
        && !home.starts_with(&fx.root)
    {
        for access in [Read, Write] {
            let (resolved, decision) = policy.check_path("~/.ssh/id_rsa", access);
            assert!(
                resolved
                    .as_deref()
                    .is_some_and(|r| r.ends_with(".ssh/id_rsa") && !r.starts_with(&fx.root)),
                "{resolved:?}"
            );
            assert!(
                !decision.is_allowed(),
                "{}: {decision:?}",
                access_name(access)
            );
        }
    }
}

#[test]
fn decisions_name_their_source() {
    let fx = Fixture::new();
    let policy = fx.policy("default");
    let file = fx.permission_file("default");
    // The file's rules, in order. (The floor's rules about the user's trust record come first
    // in every set now: they are left out here.)
    let rules: Vec<FileAccess> = policy.sets()[0]
        .rules
        .iter()
        .filter(|r| r.source != Source::Floor)
        .map(|r| r.access)
        .collect();
    assert_eq!(
        rules,
        [FileAccess::Deny, FileAccess::ReadOnly, FileAccess::Read]
    );

    let (_, decision) = policy.check_path("src/main.rs", Access::Write);
    assert_eq!(
        decision,
        Decision::Allow {
            source: Source::File {
                path: file.clone(),
                line: EVERYTHING_RULE_LINE
            }
        }
    );
    match policy.check_path("secrets/key.txt", Access::Read).1 {
        Decision::Deny { source, reason } => {
            assert_eq!(
                source,
                Some(Source::File {
                    path: file.clone(),
                    line: SECRETS_RULE_LINE
                })
            );
            assert!(reason.contains("secrets/**"), "{reason}");
        }
        other => panic!("secrets/key.txt: {other:?}"),
    }
    match policy
        .check_path(".nop/.permissions/agent-default.yml", Access::Read)
        .1
    {
        Decision::Deny { source, .. } => assert_eq!(source, Some(Source::Floor)),
        other => panic!(".nop/.permissions: {other:?}"),
    }
    match policy.check_path(".nop/config.yml", Access::Write).1 {
        Decision::Deny { source, reason } => {
            assert_eq!(source, Some(Source::Floor));
            assert!(reason.contains("read-only"), "{reason}");
        }
        other => panic!(".nop/config.yml: {other:?}"),
    }
    match policy.check_path("/etc/passwd", Access::Read).1 {
        Decision::Deny { source, reason } => {
            assert_eq!(source, None);
            assert!(reason.contains("outside the repository"), "{reason}");
        }
        other => panic!("/etc/passwd: {other:?}"),
    }
    assert_eq!(Source::Floor.to_string(), "nop's built-in floor");
    assert_eq!(
        Source::File {
            path: file.clone(),
            line: 4
        }
        .to_string(),
        format!("{}:4", file.display())
    );
}

#[test]
fn no_file_can_lift_the_floor() {
    let fx = Fixture::new();
    write(
        &fx.permission_file("lift"),
        &format!(
            "file-access:\n  - pattern: \".nop/.permissions/**\"\n    access: read\n  - pattern: \"{}/.nop/**\"\n    access: read\n  - pattern: \".nop/**\"\n    access: read\n  - pattern: \"**\"\n    access: read\n",
            fx.root.display()
        ),
    );
    fx.trust();
    let policy = fx.policy("lift");
    for (path, access) in [
        (".nop/.permissions/agent-default.yml", Access::Read),
        (".nop/.permissions/agent-lift.yml", Access::Write),
        (".nop/config.yml", Access::Write),
        (".nop/.system/x", Access::Write),
        ("link-perm/agent-lift.yml", Access::Read),
    ] {
        let (_, decision) = policy.check_path(path, access);
        assert!(
            matches!(
                decision,
                Decision::Deny {
                    source: Some(Source::Floor),
                    ..
                }
            ),
            "{path:?} ({}): {decision:?}",
            access_name(access)
        );
    }
    assert!(
        policy
            .check_path(".nop/config.yml", Access::Read)
            .1
            .is_allowed()
    );
}

#[test]
fn outside_the_root_only_an_absolute_rule_grants_access() {
    let fx = Fixture::new();
    write(
        &fx.permission_file("abs"),
        &format!(
            "file-access:\n  - pattern: \"{}/**\"\n    access: read-only\n  - pattern: \"**\"\n    access: read\n",
            fx.outside.display()
        ),
    );
    fx.trust();
    let policy = fx.policy("abs");
    for path in [
        fx.outside_file.display().to_string(),
        "chain1/file".into(),
        "link-outside-file".into(),
        "../outside/file".into(),
        "src/up/../outside".into(),
    ] {
        let (resolved, read) = policy.check_path(&path, Access::Read);
        assert!(read.is_allowed(), "{path}: {read:?}");
        assert!(
            resolved.is_some_and(|r| r.starts_with(&fx.outside)),
            "{path}"
        );
        let (_, write) = policy.check_path(&path, Access::Write);
        assert!(matches!(write, Decision::Deny { .. }), "{path}: {write:?}");
    }
    // A relative `**` never reaches outside, and the absolute rule names only its own tree.
    for path in ["/etc/passwd", "link-etc/passwd", "../x", "dangling"] {
        let (_, decision) = policy.check_path(path, Access::Read);
        assert!(
            matches!(decision, Decision::Deny { .. }),
            "{path}: {decision:?}"
        );
    }
}

#[test]
fn a_symlink_swapped_in_after_a_check_is_caught_by_the_next_check() {
    let fx = Fixture::new();
    let policy = fx.policy("default");
    write(&fx.root.join("swap/file"), "inside\n");
    let (resolved, decision) = policy.check_path("swap/file", Access::Write);
    assert_eq!(resolved, Some(fx.root.join("swap/file")));
    assert!(decision.is_allowed(), "{decision:?}");

    fs::remove_dir_all(fx.root.join("swap")).expect("remove swap");
    symlink(&fx.outside, fx.root.join("swap")).expect("swap in a symlink");
    for access in [Access::Read, Access::Write] {
        let (resolved, decision) = policy.check_path("swap/file", access);
        assert_eq!(resolved, Some(fx.outside_file.clone()));
        assert!(matches!(decision, Decision::Deny { .. }), "{decision:?}");
    }

    // And back: a symlink into secrets, then a real directory again.
    fs::remove_file(fx.root.join("swap")).expect("remove link");
    symlink("secrets", fx.root.join("swap")).expect("link to secrets");
    let (resolved, decision) = policy.check_path("swap/key.txt", Access::Read);
    assert_eq!(resolved, Some(fx.root.join("secrets/key.txt")));
    assert!(matches!(decision, Decision::Deny { .. }), "{decision:?}");
    fs::remove_file(fx.root.join("swap")).expect("remove link");
    write(&fx.root.join("swap/key.txt"), "harmless\n");
    assert!(
        policy
            .check_path("swap/key.txt", Access::Read)
            .1
            .is_allowed()
    );
}

// ---------------------------------------------------------------------------------------------
// Properties.

const PARTS: [&str; 10] = [
    "a",
    "b",
    "..",
    ".",
    "secrets",
    ".nop",
    ".permissions",
    "link-out",
    "src",
    "up",
];
const TOOLS: [&str; 5] = ["shell", "read-file", "write-file", "github.issue", "x"];

fn relative_path() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(PARTS.to_vec()), 1..9)
        .prop_map(|parts| parts.join("/"))
}

fn access() -> impl Strategy<Value = Access> {
    prop_oneof![Just(Access::Read), Just(Access::Write)]
}

fn runner() -> TestRunner {
    TestRunner::new(Config::with_cases(256))
}

fn rank(decision: &Decision) -> u8 {
    match decision {
        Decision::Allow { .. } => 0,
        Decision::Ask { .. } => 1,
        Decision::Deny { .. } => 2,
    }
}

#[test]
fn property_allowed_paths_stay_inside_the_root_and_out_of_protected_trees() {
    let fx = Fixture::new();
    let policy = fx.policy("default");
    runner()
        .run(&(relative_path(), access()), |(path, access)| {
            let (resolved, decision) = policy.check_path(&path, access);
            if decision.is_allowed() {
                let resolved =
                    resolved.ok_or_else(|| TestCaseError::fail("allowed without a path"))?;
                prop_assert!(resolved.starts_with(&fx.root), "{path:?} -> {resolved:?}");
                prop_assert!(
                    !resolved.starts_with(fx.root.join(".nop/.permissions")),
                    "{path:?} -> {resolved:?}"
                );
                prop_assert!(
                    !resolved.starts_with(fx.root.join("secrets")),
                    "{path:?} -> {resolved:?}"
                );
                prop_assert!(
                    fx.allowed_target(&resolved, access),
                    "{path:?} -> {resolved:?}"
                );
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn property_write_is_never_allowed_where_read_is_denied() {
    let fx = Fixture::new();
    for agent in ["default", "narrow"] {
        let policy = fx.policy(agent);
        runner()
            .run(&relative_path(), |path| {
                let (read_path, read) = policy.check_path(&path, Access::Read);
                let (write_path, write) = policy.check_path(&path, Access::Write);
                prop_assert_eq!(&read_path, &write_path);
                if matches!(read, Decision::Deny { .. }) {
                    prop_assert!(!write.is_allowed(), "{}: {:?} then {:?}", path, read, write);
                }
                prop_assert!(
                    rank(&write) >= rank(&read),
                    "{}: {:?} then {:?}",
                    path,
                    read,
                    write
                );
                Ok(())
            })
            .unwrap();
    }
}

#[test]
fn property_narrowed_policies_never_widen() {
    let fx = Fixture::new();
    let default = fx.policy("default");
    let narrow = fx.policy("narrow");
    let both = [
        narrow.clone().narrowed_by(&default),
        default.clone().narrowed_by(&narrow),
    ];
    runner()
        .run(&(relative_path(), access()), |(path, access)| {
            let (_, a) = default.check_path(&path, access);
            let (_, b) = narrow.check_path(&path, access);
            for narrowed in &both {
                let (_, n) = narrowed.check_path(&path, access);
                prop_assert_eq!(rank(&n), rank(&a).max(rank(&b)), "{} {:?}", path, access);
                if !a.is_allowed() || !b.is_allowed() {
                    prop_assert!(!n.is_allowed(), "{}: {:?} / {:?} -> {:?}", path, a, b, n);
                }
            }
            Ok(())
        })
        .unwrap();
    runner()
        .run(&prop::sample::select(TOOLS.to_vec()), |tool| {
            let a = default.check_tool(tool);
            let b = narrow.check_tool(tool);
            for narrowed in &both {
                let n = narrowed.check_tool(tool);
                prop_assert_eq!(rank(&n), rank(&a).max(rank(&b)), "{}", tool);
                if !a.is_allowed() || !b.is_allowed() {
                    prop_assert!(!n.is_allowed(), "{}: {:?} / {:?} -> {:?}", tool, a, b, n);
                }
            }
            Ok(())
        })
        .unwrap();
    // Concretely: the narrow agent may read src but write nothing else; tools only read-file.
    let narrowed = &both[0];
    assert!(
        narrowed
            .check_path("src/main.rs", Access::Write)
            .1
            .is_allowed()
    );
    assert!(
        !narrowed
            .check_path("secrets/key.txt", Access::Read)
            .1
            .is_allowed()
    );
    assert!(!narrowed.check_path("%2e%2e", Access::Write).1.is_allowed());
    assert!(narrowed.check_tool("read-file").is_allowed());
    assert!(!narrowed.check_tool("shell").is_allowed());
}

// ---------------------------------------------------------------------------------------------
// Tools.

#[test]
fn tool_rules_denied_first_star_everything_and_globs() {
    let fx = Fixture::new();
    let default = fx.policy("default");
    for tool in [
        "shell",
        "read-file",
        "github.issue",
        "x",
        "a.b.c",
        "with/slash",
        "UPPER",
    ] {
        assert!(
            default.check_tool(tool).is_allowed(),
            "`*` should allow {tool}"
        );
    }

    write(
        &fx.permission_file("deny-first"),
        "tools:\n  allowed: [\"*\", shell]\n  denied: [shell, \"git*\"]\n",
    );
    fx.trust();
    let policy = fx.policy("deny-first");
    let file = fx.permission_file("deny-first");
    assert_eq!(
        policy.check_tool("shell"),
        Decision::Deny {
            reason: "tool `shell` is denied for agent `deny-first` (`shell`)".into(),
            source: Some(Source::File {
                path: file.clone(),
                line: 3
            }),
        }
    );
    assert!(matches!(
        policy.check_tool("github.issue"),
        Decision::Deny { .. }
    ));
    assert!(matches!(policy.check_tool("git"), Decision::Deny { .. }));
    assert_eq!(
        policy.check_tool("read-file"),
        Decision::Allow {
            source: Source::File {
                path: file,
                line: 2
            }
        }
    );

    write(
        &fx.permission_file("github"),
        "tools:\n  allowed: [\"github.*\"]\n",
    );
    fx.trust();
    let policy = fx.policy("github");
    assert!(policy.check_tool("github.issue").is_allowed());
    assert!(policy.check_tool("github.pr.create").is_allowed());
    for tool in [
        "githubx",
        "github",
        "githubXissue",
        "xgithub.issue",
        "shell",
        "GITHUB.issue",
    ] {
        assert!(
            matches!(policy.check_tool(tool), Decision::Deny { .. }),
            "{tool}"
        );
    }
    // The agent's own `tools` replaces the default's `*`; its file rules fall through to the default's.
    assert!(
        policy
            .check_path("src/main.rs", Access::Write)
            .1
            .is_allowed()
    );
    assert!(
        !policy
            .check_path("secrets/key.txt", Access::Read)
            .1
            .is_allowed()
    );

    write(&fx.permission_file("none"), "tools:\n  allowed: []\n");
    fx.trust();
    assert!(matches!(
        fx.policy("none").check_tool("read-file"),
        Decision::Deny { .. }
    ));
}

// ---------------------------------------------------------------------------------------------
// Broken files fail closed.

fn parse_error(fx: &Fixture, agent: &str, text: &str) -> (PermissionError, PathBuf) {
    let path = fx.permission_file(agent);
    write(&path, text);
    fx.trust();
    match load_policy(&fx.root, agent) {
        Ok(_) => panic!("agent-{agent}.yml loaded:\n{text}"),
        Err(e) => (e, path),
    }
}

/// The error is a `Parse` error for `path` whose Display reads `<path>:<line>:<column>: ...`.
fn assert_parse_error_at(error: &PermissionError, path: &Path, line: usize) {
    let shown = error.to_string();
    match error {
        PermissionError::Parse { path: p, pos, .. } => {
            assert_eq!(p, path, "{shown}");
            assert_eq!(pos.as_ref().map(|p| p.line), Some(line), "{shown}");
        }
        other => panic!("not a parse error: {other:?}"),
    }
    let prefix = format!("{}:{line}:", path.display());
    assert!(
        shown.starts_with(&prefix),
        "`{shown}` does not start with `{prefix}`"
    );
}

#[test]
fn broken_yaml_fails_closed_with_path_and_line() {
    let fx = Fixture::new();
    let (e, path) = parse_error(
        &fx,
        "bad",
        "tools:\n  allowed: [\"*\"]\nfile-access:\n  - pattern: \"src/**\n    access: read\n",
    );
    let PermissionError::Parse { pos, .. } = &e else {
        panic!("{e:?}")
    };
    let line = pos.as_ref().map(|p| p.line).unwrap_or(0);
    assert!((4..=6).contains(&line), "{e}");
    assert_parse_error_at(&e, &path, line);

    let (e, path) = parse_error(&fx, "bad2", "tools:\n  allowed: [\"*\"\nfile-access: []\n");
    let PermissionError::Parse { pos, .. } = &e else {
        panic!("{e:?}")
    };
    let line = pos.as_ref().map(|p| p.line).unwrap_or(0);
    assert!((2..=4).contains(&line), "{e}");
    assert_parse_error_at(&e, &path, line);
}

#[test]
fn an_unknown_access_value_fails_closed_with_path_and_line() {
    let fx = Fixture::new();
    let (e, path) = parse_error(
        &fx,
        "sometimes",
        "file-access:\n  - pattern: \"src/**\"\n    access: read\n  - pattern: \"**\"\n    access: sometimes\n",
    );
    assert_parse_error_at(&e, &path, 5);
    assert!(e.to_string().contains("sometimes"), "{e}");
}

#[test]
fn an_unknown_key_fails_closed_with_path_and_line() {
    let fx = Fixture::new();
    let (e, path) = parse_error(
        &fx,
        "typo",
        "tools:\n  allowed: [\"*\"]\nfile-acess:\n  - pattern: \"**\"\n    access: read\n",
    );
    assert_parse_error_at(&e, &path, 3);
    assert!(e.to_string().contains("file-acess"), "{e}");

    let (e, path) = parse_error(
        &fx,
        "typo2",
        "tools:\n  allowed: [\"*\"]\n  deny: [shell]\n",
    );
    assert_parse_error_at(&e, &path, 3);

    let (e, path) = parse_error(
        &fx,
        "typo3",
        "file-access:\n  - pattern: \"**\"\n    access: read\n    mode: strict\n",
    );
    assert_parse_error_at(&e, &path, 4);
}

#[test]
fn other_broken_files_fail_closed() {
    let fx = Fixture::new();
    // An invalid glob.
    let (e, path) = parse_error(
        &fx,
        "glob",
        "file-access:\n  - pattern: \"src/[**\"\n    access: read\n",
    );
    assert_parse_error_at(&e, &path, 2);
    // An empty file grants nothing by accident.
    let (e, path) = parse_error(&fx, "empty", "\n  \n");
    assert!(
        matches!(&e, PermissionError::Parse { path: p, .. } if *p == path),
        "{e:?}"
    );
    assert!(e.to_string().contains(&path.display().to_string()), "{e}");
    // A broken default breaks every agent that falls back to it.
    write(&fx.permission_file("default"), "tools: [\n");
    fx.trust();
    assert!(matches!(
        load_policy(&fx.root, "default"),
        Err(PermissionError::Parse { .. })
    ));
    assert!(matches!(
        load_policy(&fx.root, "someone"),
        Err(PermissionError::Parse { .. })
    ));
    // No file at all.
    fs::remove_file(fx.permission_file("default")).expect("remove default");
    fx.trust();
    assert!(matches!(
        load_policy(&fx.root, "someone"),
        Err(PermissionError::Missing { .. })
    ));
}

#[test]
fn extends_cycles_are_errors() {
    let fx = Fixture::new();
    write(
        &fx.permission_file("a"),
        "extends: b\ntools:\n  allowed: [\"*\"]\n",
    );
    write(&fx.permission_file("b"), "extends: c\n");
    write(&fx.permission_file("c"), "extends: a\n");
    fx.trust();
    match load_policy(&fx.root, "a") {
        Err(PermissionError::Cycle { chain }) => {
            assert_eq!(
                chain,
                ["agent-a.yml", "agent-b.yml", "agent-c.yml", "agent-a.yml"]
            );
            let shown = PermissionError::Cycle { chain }.to_string();
            assert!(
                shown.contains("agent-a.yml → agent-b.yml → agent-c.yml → agent-a.yml"),
                "{shown}"
            );
        }
        other => panic!("a: {other:?}"),
    }
    assert!(matches!(
        load_policy(&fx.root, "b"),
        Err(PermissionError::Cycle { .. })
    ));

    write(&fx.permission_file("me"), "extends: me\n");
    fx.trust();
    assert!(matches!(
        load_policy(&fx.root, "me"),
        Err(PermissionError::Cycle { .. })
    ));

    // The default extending an agent that extends the default.
    write(&fx.permission_file("d"), "extends: default\n");
    write(
        &fx.permission_file("default"),
        &format!("extends: d\n{DEFAULT_RULES}"),
    );
    fx.trust();
    assert!(matches!(
        load_policy(&fx.root, "default"),
        Err(PermissionError::Cycle { .. })
    ));
    assert!(matches!(
        load_policy(&fx.root, "d"),
        Err(PermissionError::Cycle { .. })
    ));
}
