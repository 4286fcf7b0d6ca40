//! Project instructions in the system prompt (issue 17): AGENTS.md from the repository root down
//! to the working directory, CLAUDE.md where a directory has none, one size limit that cuts the
//! farthest first, and files that cannot be used left out with a warning.

use std::path::Path;

use serde_json::Value;

use crate::support::Repo;
use crate::support::mock::{MockServer, openai};

/// Runs `nop run --output-format stream-json PROMPT` in `dir`; returns the system prompt the
/// model was sent and the warnings nop gave.
fn system_prompt_in(repo: &Repo, dir: &Path) -> (String, Vec<String>) {
    let server = MockServer::start(vec![openai::reply_text("ok")]);
    let output = repo
        .nop_in(dir)
        // HOME above the repository: HOME's own `.nop/` never counts for a directory below it.
        .env("HOME", repo.path().parent().expect("parent"))
        .envs(crate::support::model_env(&server, "openai"))
        .args(["run", "--output-format", "stream-json", "hi"])
        .output()
        .expect("run nop");
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let warnings = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "warning")
        .filter_map(|e| e["message"].as_str().map(str::to_string))
        .collect();
    let system = server.requests()[0].body["messages"][0].clone();
    assert_eq!(system["role"], "system");
    (
        system["content"].as_str().expect("text").to_string(),
        warnings,
    )
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, text).expect("write");
}

fn position(haystack: &str, needle: &str) -> usize {
    haystack
        .find(needle)
        .unwrap_or_else(|| panic!("{needle:?} is not in:\n{haystack}"))
}

#[test]
fn nested_agents_md_from_the_root_down_to_the_working_directory_root_first() {
    let repo = Repo::new();
    write(&repo.path().join("AGENTS.md"), "Root rule: use tabs.\n");
    write(
        &repo.path().join("sub/AGENTS.md"),
        "Sub rule: use spaces.\n",
    );
    write(&repo.path().join("other/AGENTS.md"), "Other rule.\n");
    let (system, warnings) = system_prompt_in(&repo, &repo.path().join("sub"));
    assert_eq!(warnings, Vec::<String>::new());
    let root = position(&system, "## AGENTS.md\nRoot rule: use tabs.\n");
    let sub = position(&system, "## sub/AGENTS.md\nSub rule: use spaces.\n");
    assert!(root < sub, "the root's comes first:\n{system}");
    assert!(!system.contains("Other rule"), "{system}");
    assert!(
        system.contains("- Working directory of the user: sub "),
        "{system}"
    );

    // From the root, only the root's.
    let (system, _) = system_prompt_in(&repo, repo.path());
    assert!(system.contains("Root rule"));
    assert!(!system.contains("Sub rule"), "{system}");
    assert!(system.contains("- Repository root (working directory): "));
}

#[test]
fn claude_md_is_read_where_a_directory_has_no_agents_md() {
    let repo = Repo::new();
    write(&repo.path().join("AGENTS.md"), "Root agents.\n");
    write(&repo.path().join("CLAUDE.md"), "Root claude.\n");
    write(&repo.path().join("a/CLAUDE.md"), "A claude.\n");
    write(&repo.path().join("a/b/AGENTS.md"), "B agents.\n");
    let (system, warnings) = system_prompt_in(&repo, &repo.path().join("a/b"));
    assert_eq!(warnings, Vec::<String>::new());
    assert!(!system.contains("Root claude"), "AGENTS.md wins:\n{system}");
    let order = [
        position(&system, "## AGENTS.md\nRoot agents.\n"),
        position(&system, "## a/CLAUDE.md\nA claude.\n"),
        position(&system, "## a/b/AGENTS.md\nB agents.\n"),
    ];
    assert!(order.is_sorted(), "{system}");
}

#[test]
fn over_the_limit_the_farthest_instructions_are_cut_first_with_a_note() {
    let repo = Repo::new();
    let kib = |c: &str, n: usize| c.repeat(n * 1024);
    write(&repo.path().join("AGENTS.md"), &kib("r", 20));
    write(&repo.path().join("a/AGENTS.md"), &kib("a", 20));
    write(&repo.path().join("a/b/AGENTS.md"), &kib("b", 20));
    let (system, warnings) = system_prompt_in(&repo, &repo.path().join("a/b"));
    // The nearest whole, the next cut to what is left (32 - 20 KiB), the root left out.
    assert!(system.contains(&format!("## a/b/AGENTS.md\n{}\n", kib("b", 20))));
    assert!(system.contains(&format!(
        "## a/AGENTS.md\n{}\n[a/AGENTS.md cut here: its first 12288 of 20480 bytes fit in the \
         32768-byte limit of project instructions]\n",
        kib("a", 12)
    )));
    assert!(!system.contains(&kib("a", 13)));
    assert!(!system.contains("## AGENTS.md\n"), "the root's is left out");
    assert!(!system.contains(&kib("r", 1)));
    assert!(system.contains(
        "[Left out, beyond the 32768-byte limit of project instructions: AGENTS.md (20480 bytes)]"
    ));
    assert_eq!(
        warnings,
        vec![
            "the project instructions are over 32768 bytes, the nearest kept whole: AGENTS.md \
             (20480 bytes) left out; a/AGENTS.md cut to its first 12288 of 20480 bytes"
                .to_string()
        ]
    );
}

#[test]
fn an_instruction_file_that_cannot_be_used_is_a_warning_not_a_crash() {
    let repo = Repo::new();
    let outside = crate::support::repo_dir();
    write(&outside.path().join("secret.md"), "OUTSIDE-SECRET\n");
    std::os::unix::fs::symlink(
        outside.path().join("secret.md"),
        repo.path().join("AGENTS.md"),
    )
    .expect("symlink");
    std::fs::create_dir_all(repo.path().join("a")).expect("mkdir");
    std::fs::write(repo.path().join("a/AGENTS.md"), b"caf\xe9 latin-1\n").expect("write");
    std::fs::create_dir_all(repo.path().join("a/b/AGENTS.md")).expect("a directory");
    write(&repo.path().join("a/b/c/AGENTS.md"), "Usable.\n");
    let (system, warnings) = system_prompt_in(&repo, &repo.path().join("a/b/c"));
    assert!(system.contains("## a/b/c/AGENTS.md\nUsable.\n"), "{system}");
    assert!(!system.contains("OUTSIDE-SECRET"));
    assert!(!system.contains("latin-1"));
    assert_eq!(warnings.len(), 3, "{warnings:?}");
    assert!(
        warnings[0].starts_with(
            "AGENTS.md is not used as project instructions: it leads outside the repository"
        ),
        "{warnings:?}"
    );
    assert_eq!(
        warnings[1],
        "a/AGENTS.md is not used as project instructions: it is not UTF-8 text"
    );
    assert_eq!(
        warnings[2],
        "a/b/AGENTS.md is not used as project instructions: it is not a regular file"
    );
}
