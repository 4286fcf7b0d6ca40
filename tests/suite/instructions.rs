//! Project instructions in the system prompt (issue 17): AGENTS.md from the repository root down
//! to the working directory, CLAUDE.md where a directory has none, one size limit that cuts the
//! farthest first, and files that cannot be used left out with a warning; the files Claude Code
//! and Codex users have (issue 29): `@path` imports, `CLAUDE.local.md`, `AGENTS.override.md`, the
//! user's `~/.claude/CLAUDE.md` and `~/.codex/AGENTS.md`.

use std::path::Path;

use serde_json::Value;

use crate::support::Repo;
use crate::support::mock::{MockServer, openai};

/// Runs `nop run --output-format stream-json PROMPT` in `dir`; returns the system prompt the
/// model was sent and the warnings nop gave.
fn system_prompt_in(repo: &Repo, dir: &Path) -> (String, Vec<String>) {
    // HOME above the repository: HOME's own `.nop/` never counts for a directory below it.
    system_prompt_with_home(repo, dir, repo.path().parent().expect("parent"))
}

/// [`system_prompt_in`] with `home` as HOME.
fn system_prompt_with_home(repo: &Repo, dir: &Path, home: &Path) -> (String, Vec<String>) {
    let server = MockServer::start(vec![openai::reply_text("ok")]);
    let output = repo
        .nop_in(dir)
        .env("HOME", home)
        .envs(crate::support::model_env(&server, "openai"))
        .args(["run", "--output-format", "stream-json", "hi"])
        .output()
        .expect("run nop");
    crate::support::assert_ok(&output);
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

/// The text of `nop instructions` run in `dir` with `home` as HOME.
fn listing(repo: &Repo, dir: &Path, home: &Path) -> String {
    let output = repo
        .nop_in(dir)
        .env("HOME", home)
        .args(["instructions"])
        .output()
        .expect("run nop");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    String::from_utf8(output.stdout).expect("utf-8")
}

#[test]
fn imports_are_read_relative_to_their_file_five_hops_deep_each_once_never_from_code() {
    let repo = Repo::new();
    let home = crate::support::repo_dir();
    write(
        &repo.path().join("AGENTS.md"),
        "Root. See @docs/guide.md, mail me@notes.md, `@code.md`, the @docs/ folder\n```\n@fenced.md\n```\n",
    );
    write(&repo.path().join("notes.md"), "EMAIL-NOT-IMPORTED\n");
    write(&repo.path().join("code.md"), "CODE-SPAN-NOT-IMPORTED\n");
    write(&repo.path().join("fenced.md"), "FENCE-NOT-IMPORTED\n");
    write(
        &repo.path().join("docs/guide.md"),
        "Guide (hop 1), then @hops/h2.md and @nobody.\n",
    );
    for hop in 2..=6 {
        // h5 imports the guide again: a cycle, stopped.
        let next = if hop == 5 {
            "@h6.md @../guide.md".to_string()
        } else {
            format!("@h{}.md", hop + 1)
        };
        write(
            &repo.path().join(format!("docs/hops/h{hop}.md")),
            &format!("HOP-{hop} {next}\n"),
        );
    }
    let (system, warnings) = system_prompt_with_home(&repo, repo.path(), home.path());
    assert_eq!(warnings, Vec::<String>::new());
    let order = [
        position(
            &system,
            "## docs/hops/h5.md (imported by docs/hops/h4.md)\nHOP-5",
        ),
        position(
            &system,
            "## docs/hops/h2.md (imported by docs/guide.md)\nHOP-2",
        ),
        position(
            &system,
            "## docs/guide.md (imported by AGENTS.md)\nGuide (hop 1)",
        ),
        position(&system, "## AGENTS.md\nRoot. See @docs/guide.md"),
    ];
    assert!(
        order.is_sorted(),
        "imports come before their importer:\n{system}"
    );
    assert!(
        !system.contains("HOP-6"),
        "a sixth hop is not followed:\n{system}"
    );
    assert_eq!(system.matches("Guide (hop 1)").count(), 1, "{system}");
    for absent in ["EMAIL-NOT", "CODE-SPAN-NOT", "FENCE-NOT"] {
        assert!(!system.contains(absent), "{absent}:\n{system}");
    }
    let listed = listing(&repo, repo.path(), home.path());
    assert!(
        listed.contains(
            "docs/hops/h6.md  (imported by docs/hops/h5.md): not read: more than 5 hops of \
             @imports from the file that started them"
        ),
        "{listed}"
    );
    assert!(
        listed.contains("AGENTS.md  (repository): used, "),
        "{listed}"
    );
}

#[test]
fn an_import_the_rules_deny_stays_out_with_a_note_in_the_log() {
    let repo = Repo::new();
    let home = crate::support::repo_dir();
    write(
        &repo.path().join(".nop/.permissions/agent-default.yml"),
        "tools:\n  allowed: [\"*\"]\nfile-access:\n  - pattern: \".env\"\n    access: deny\n  \
         - pattern: \"ask/**\"\n    access: ask\n  - pattern: \"**\"\n    access: read\n",
    );
    // The user wrote the rules by hand and trusts them, with the environment of the run below.
    crate::support::assert_ok(
        &repo
            .nop()
            .env("HOME", home.path())
            .args(["trust", "--yes"])
            .output()
            .expect("trust"),
    );
    write(&repo.path().join(".env"), "API_KEY=DOTENV-SECRET\n");
    write(&repo.path().join("ask/x.md"), "ASK-SECRET\n");
    write(&home.path().join("notes.md"), "HOME-SECRET\n");
    write(&repo.path().join("ok.md"), "Allowed import.\n");
    write(
        &repo.path().join("AGENTS.md"),
        "Root @.env @ask/x.md @~/notes.md @ok.md\n",
    );
    let (system, warnings) = system_prompt_with_home(&repo, repo.path(), home.path());
    assert_eq!(warnings, Vec::<String>::new());
    assert!(
        system.contains("## ok.md (imported by AGENTS.md)\nAllowed import.\n"),
        "{system}"
    );
    for secret in ["DOTENV-SECRET", "ASK-SECRET", "HOME-SECRET"] {
        assert!(!system.contains(secret), "{secret}:\n{system}");
    }
    let log = std::fs::read_to_string(repo.path().join(".nop/logs/system.log")).expect("log");
    assert!(
        log.contains("@.env in AGENTS.md is not imported: `.env` is denied"),
        "{log}"
    );
    assert!(
        log.contains("@ask/x.md in AGENTS.md is not imported: a rule asks"),
        "{log}"
    );
    assert!(
        log.contains("@~/notes.md in AGENTS.md is not imported: it is outside the repository"),
        "{log}"
    );
    assert!(!log.contains("SECRET"), "{log}");
}

#[test]
fn each_import_counts_in_the_one_size_limit() {
    let repo = Repo::new();
    let home = crate::support::repo_dir();
    let kib = |c: &str, n: usize| c.repeat(n * 1024);
    write(&repo.path().join("big.md"), &kib("i", 30));
    let root = format!("@big.md {}", kib("r", 4));
    write(&repo.path().join("AGENTS.md"), &root);
    let (system, warnings) = system_prompt_with_home(&repo, repo.path(), home.path());
    assert!(system.contains(&root), "the importer stays whole");
    let kept = 32 * 1024 - root.len();
    assert!(system.contains(&format!(
        "## big.md (imported by AGENTS.md)\n{}\n[big.md cut here: its first {kept} of 30720 bytes",
        "i".repeat(kept)
    )));
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("big.md cut to its first"),
        "{warnings:?}"
    );
}

#[test]
fn the_users_files_come_first_then_local_notes_and_overrides_as_claude_code_and_codex_read_them() {
    let repo = Repo::new();
    let home = crate::support::repo_dir();
    write(&home.path().join(".claude/CLAUDE.md"), "USER-CLAUDE\n");
    write(&home.path().join(".codex/AGENTS.md"), "USER-CODEX-PLAIN\n");
    write(
        &home.path().join(".codex/AGENTS.override.md"),
        "USER-CODEX-OVERRIDE\n",
    );
    write(&repo.path().join("AGENTS.md"), "ROOT-AGENTS\n");
    write(&repo.path().join("CLAUDE.local.md"), "ROOT-LOCAL\n");
    write(&repo.path().join("sub/AGENTS.md"), "SUB-PLAIN\n");
    write(
        &repo.path().join("sub/AGENTS.override.md"),
        "SUB-OVERRIDE\n",
    );
    let sub = repo.path().join("sub");
    let (system, warnings) = system_prompt_with_home(&repo, &sub, home.path());
    assert_eq!(warnings, Vec::<String>::new());
    let order = [
        position(&system, "## ~/.claude/CLAUDE.md\nUSER-CLAUDE\n"),
        position(
            &system,
            "## ~/.codex/AGENTS.override.md\nUSER-CODEX-OVERRIDE\n",
        ),
        position(&system, "## AGENTS.md\nROOT-AGENTS\n"),
        position(&system, "## CLAUDE.local.md\nROOT-LOCAL\n"),
        position(&system, "## sub/AGENTS.override.md\nSUB-OVERRIDE\n"),
    ];
    assert!(order.is_sorted(), "most general first:\n{system}");
    assert!(
        !system.contains("PLAIN"),
        "an override replaces AGENTS.md:\n{system}"
    );
    assert_eq!(
        listing(&repo, &sub, home.path()),
        "~/.claude/CLAUDE.md  (yours): used, 12 bytes\n\
         ~/.codex/AGENTS.override.md  (yours): used, 20 bytes\n\
         AGENTS.md  (repository): used, 12 bytes\n\
         CLAUDE.local.md  (personal): used, 11 bytes\n\
         sub/AGENTS.override.md  (repository): used, 13 bytes\n"
    );
}

#[test]
fn a_subagents_imports_pass_its_callers_rules_too() {
    let repo = Repo::new();
    let home = crate::support::repo_dir();
    let agents = repo.path().join(".nop/agents.yml");
    let mut text = std::fs::read_to_string(&agents).expect("agents.yml");
    text.push_str(
        "\n  - name: helper\n    description: helps\n    prompt: .system/agents/coder.md\n",
    );
    std::fs::write(&agents, text).expect("write");
    // The coder may not read private/; the helper, on the default rules, could.
    write(
        &repo.path().join(".nop/.permissions/agent-coder.yml"),
        "extends: default\nfile-access:\n  - pattern: \"private/**\"\n    access: deny\n",
    );
    write(&repo.path().join("private/notes.md"), "PRIVATE-NOTES\n");
    write(&repo.path().join("AGENTS.md"), "Root @private/notes.md\n");
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[(
            "c1",
            "call-agent",
            serde_json::json!({"agent": "helper", "arguments": "help"}),
        )]),
        openai::reply_text("helped"),
        openai::reply_text("done"),
    ]);
    let output = repo
        .nop_model(&server, "openai")
        .env("HOME", home.path())
        .args(["run", "go"])
        .output()
        .expect("run nop");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let systems: Vec<String> = server
        .requests()
        .iter()
        .map(|r| {
            r.body["messages"][0]["content"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert_eq!(systems.len(), 3);
    for system in &systems {
        assert!(system.contains("## AGENTS.md\nRoot"), "{system}");
        assert!(!system.contains("PRIVATE-NOTES"), "{system}");
    }
    // Alone, the helper's rules let it read the file.
    let listed = listing_as(&repo, home.path(), "helper");
    assert!(
        listed.contains("private/notes.md  (imported by AGENTS.md): used"),
        "{listed}"
    );
}

/// `nop instructions --agent AGENT` in the repository root.
fn listing_as(repo: &Repo, home: &Path, agent: &str) -> String {
    let output = repo
        .nop()
        .env("HOME", home)
        .args(["instructions", "--agent", agent])
        .output()
        .expect("run nop");
    String::from_utf8(output.stdout).expect("utf-8")
}

/// Claude Code's project memory in `.claude/`: `.claude/CLAUDE.md` where a directory has no
/// top-level file, and every rule of `.claude/rules/` (yours in `~/.claude/rules/` too), each
/// under its own header, a scoped rule's `paths:` said, its front matter not sent; a rule that
/// links out of the repository or has a broken front matter is a warning.
#[test]
fn claude_dir_memory_and_rules_are_read_as_claude_code_reads_them() {
    let repo = Repo::new();
    let home = crate::support::repo_dir();
    let outside = crate::support::repo_dir();
    write(&home.path().join(".claude/CLAUDE.md"), "USER-CLAUDE\n");
    write(&home.path().join(".claude/rules/tone.md"), "USER-RULE\n");
    write(&repo.path().join(".claude/CLAUDE.md"), "ROOT-DOT-CLAUDE\n");
    write(
        &repo.path().join(".claude/rules/testing.md"),
        "RULE-TESTING\n",
    );
    write(
        &repo.path().join(".claude/rules/frontend/react.md"),
        "---\npaths:\n  - \"src/**/*.tsx\"\n  - \"app/**\"\n---\n\nRULE-REACT\n",
    );
    write(
        &repo.path().join(".claude/rules/broken.md"),
        "---\npaths: [\n---\nRULE-BROKEN\n",
    );
    write(&repo.path().join(".claude/rules/notes.txt"), "NOT-A-RULE\n");
    write(&outside.path().join("leak.md"), "OUTSIDE-SECRET\n");
    std::os::unix::fs::symlink(
        outside.path().join("leak.md"),
        repo.path().join(".claude/rules/leak.md"),
    )
    .expect("symlink");
    write(&repo.path().join("CLAUDE.local.md"), "ROOT-LOCAL\n");
    // A directory with a top-level CLAUDE.md reads it, not its `.claude/CLAUDE.md`.
    write(&repo.path().join("sub/CLAUDE.md"), "SUB-TOP\n");
    write(&repo.path().join("sub/.claude/CLAUDE.md"), "SUB-DOT\n");
    let sub = repo.path().join("sub");
    let (system, warnings) = system_prompt_with_home(&repo, &sub, home.path());
    let order = [
        position(&system, "## ~/.claude/CLAUDE.md\nUSER-CLAUDE\n"),
        position(&system, "## ~/.claude/rules/tone.md\nUSER-RULE\n"),
        position(&system, "## .claude/CLAUDE.md\nROOT-DOT-CLAUDE\n"),
        position(
            &system,
            "## .claude/rules/frontend/react.md\n\
             [This rule is for files matching: src/**/*.tsx, app/**]\nRULE-REACT\n",
        ),
        position(&system, "## .claude/rules/testing.md\nRULE-TESTING\n"),
        position(&system, "## CLAUDE.local.md\nROOT-LOCAL\n"),
        position(&system, "## sub/CLAUDE.md\nSUB-TOP\n"),
    ];
    assert!(order.is_sorted(), "most general first:\n{system}");
    for absent in [
        "SUB-DOT",
        "RULE-BROKEN",
        "NOT-A-RULE",
        "OUTSIDE-SECRET",
        "paths:",
    ] {
        assert!(!system.contains(absent), "{absent}:\n{system}");
    }
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings[0].starts_with(
            ".claude/rules/broken.md is not used as project instructions: \
             its front matter is not valid"
        ),
        "{warnings:?}"
    );
    assert!(
        warnings[1].starts_with(
            ".claude/rules/leak.md is not used as project instructions: \
             it leads outside the repository"
        ),
        "{warnings:?}"
    );
}
