//! Claude Code's permission rules (issue 29): `nop permissions import` translates
//! `.claude/settings.json` and `.claude/settings.local.json` into nop's permission file, names
//! every rule it cannot translate, never overwrites a file it cannot parse; a run warns once
//! about a settings file whose rules were never imported.

use std::path::Path;

use serde_json::{Value, json};

use crate::support::Repo;
use crate::support::mock::{MockServer, openai};

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, text).expect("write");
}

/// `nop ARGS` in `repo` with a private HOME; (exit code, stdout, stderr).
fn nop(repo: &Repo, home: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let output = repo
        .nop()
        .env("HOME", home)
        .args(args)
        .output()
        .expect("run nop");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// What the user does once they have looked at the settings files they wrote by hand:
/// `nop trust --yes`, with the same environment as the commands that follow.
fn trust(repo: &Repo, home: &Path) {
    let (code, out, stderr) = nop(repo, home, &["trust", "--yes"]);
    assert_eq!(code, Some(0), "{out}{stderr}");
}

fn settings() -> Value {
    json!({
        "model": "sonnet",
        "permissions": {
            "allow": ["Bash(npm run test:*)", "Bash(git diff)", "Edit(./src/**)", "Read(~/.zshrc)",
                      "mcp__github"],
            "deny": ["Read(./secrets/**)", "Read(.env)", "WebFetch(domain:example.com)",
                     "mcp__github__delete_repo", 42],
            "ask": ["Edit(./deploy/**)", "Bash"],
            "additionalDirectories": ["../shared-docs/"],
            "defaultMode": "plan"
        }
    })
}

#[test]
fn import_translates_claude_code_rules_and_names_each_it_cannot() {
    let repo = Repo::new();
    let home = crate::support::repo_dir();
    write(
        &repo.path().join(".claude/settings.json"),
        &serde_json::to_string_pretty(&settings()).expect("json"),
    );
    write(
        &repo.path().join(".claude/settings.local.json"),
        r#"{"permissions": {"deny": ["Read(//etc/shadow)"]}}"#,
    );
    trust(&repo, home.path());
    let file = repo.path().join(".nop/.permissions/agent-default.yml");
    let before = std::fs::read_to_string(&file).expect("read");

    // --dry-run prints, writes nothing.
    let (code, dry, stderr) = nop(&repo, home.path(), &["permissions", "import", "--dry-run"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(std::fs::read_to_string(&file).expect("read"), before);
    assert!(dry.contains("dry run: nothing written"), "{dry}");
    for line in [
        "  deny     Read(./secrets/**)  →  secrets/**: deny",
        "  deny     Read(.env)  →  **/.env: deny",
        "  deny     WebFetch(domain:example.com)  →  not translated: nop has no web tool like `WebFetch`",
        "  deny     mcp__github__delete_repo  →  tools.denied github.delete_repo",
        "  deny     42  →  not translated: not a string",
        "  ask      Edit(./deploy/**)  →  deploy/**: ask",
        "  ask      Bash  →  not translated: nop cannot ask before every call of one tool",
        "  allow    Bash(npm run test:*)  →  nothing to import: nop runs `npm run test:*` without \
         asking already, confined to the file rules; `shell.outside_sandbox: [\"npm run test*\"]`",
        "  allow    Bash(git diff)  →  nothing to import: nop runs `git diff` without asking",
        "  allow    Edit(./src/**)  →  src/**: read",
        "  allow    Read(~/.zshrc)  →  ~/.zshrc: read-only",
        "  mode     plan  →  approval: plan",
        ".claude/settings.local.json:\n  deny     Read(//etc/shadow)  →  /etc/shadow: deny",
        "rules added to .nop/.permissions/agent-default.yml (at the top, so they come first):",
        "  + file-access  secrets/**: deny",
        "  ! ~/.zshrc: read-only (not imported without --allow-outside: it lets the agent reach \
         outside the repository",
        "  = src/**: read (already allowed by ",
        "  = tools.allowed github.* (already allowed)",
        "approval: on-request → plan in .nop/config.yml",
        "2 rules need nothing: nop already does what they allow (see above)",
        "3 rules could not be translated (see above): nop does not enforce them",
    ] {
        assert!(dry.contains(line), "{line:?} is not in:\n{dry}");
    }
    assert!(
        dry.contains("  dir      ../shared-docs/  →  /var/tmp/nop-tests/shared-docs/**: read"),
        "{dry}"
    );

    let (code, done, stderr) = nop(
        &repo,
        home.path(),
        &["permissions", "import", "--allow-outside"],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!done.contains("dry run"), "{done}");
    let after = std::fs::read_to_string(&file).expect("read");
    // The file's own text is kept, the rules go first, the denials of both files first of all.
    let head = &before[..before.find("file-access:").expect("file-access")];
    let tail = &before[before
        .find("  - pattern: \".nop/.permissions/**\"")
        .expect("rule")..];
    let head = head.replace("denied: []", "denied: [\"github.delete_repo\"]");
    assert!(after.starts_with(&head), "{after}");
    assert!(after.ends_with(tail), "{after}");
    let order = [
        "secrets/**",
        "/etc/shadow",
        "deploy/**",
        "~/.zshrc",
        "shared-docs/**",
    ]
    .map(|p| after.find(p).unwrap_or_else(|| panic!("{p}:\n{after}")));
    assert!(order.is_sorted(), "{after}");
    assert!(
        after.contains(
            "  # from .claude/settings.json: deny Read(./secrets/**)\n  - pattern: \"secrets/**\"\n    access: deny\n"
        ),
        "{after}"
    );
    let config = std::fs::read_to_string(repo.path().join(".nop/config.yml")).expect("config");
    assert!(config.contains("approval: plan"), "{config}");

    // What the rules now decide, as `permissions explain` and the agent see them.
    for (args, expected) in [
        (
            &["--path", "secrets/key.txt"][..],
            "deny: coder may not read secrets/key.txt: `secrets/**` is denied",
        ),
        (
            &["--path", "sub/.env"][..],
            "deny: coder may not read sub/.env: `**/.env` is denied",
        ),
        (
            &["--path", "deploy/x", "--access", "write"][..],
            "ask: coder needs approval to write deploy/x",
        ),
        (
            &["--path", "src/main.rs", "--access", "write"][..],
            "allow: coder may write src/main.rs",
        ),
        (
            &["--tool", "github.delete_repo"][..],
            "deny: coder may not call github.delete_repo",
        ),
    ] {
        let mut all = vec!["permissions", "explain"];
        all.extend(args);
        let (_, said, _) = nop(&repo, home.path(), &all);
        assert!(said.starts_with(expected), "{args:?}: {said}");
    }

    // Again: nothing new.
    let (code, again, _) = nop(
        &repo,
        home.path(),
        &["permissions", "import", "--allow-outside"],
    );
    assert_eq!(code, Some(0));
    assert!(
        again.contains("nothing to add to .nop/.permissions/agent-default.yml"),
        "{again}"
    );
    assert_eq!(std::fs::read_to_string(&file).expect("read"), after);
}

/// A repository set up for Claude Code, never for nop: the import works without `nop init`
/// (`--dry-run` writes nothing at all; the import creates `.nop/` as `nop init` would, the
/// rules on top of the built-in ones), and says of each `Bash(…)` rule what nop does instead.
#[test]
fn import_works_before_nop_init_and_says_what_becomes_of_each_command_rule() {
    let repo = Repo::bare();
    let home = crate::support::repo_dir();
    crate::support::git(repo.path(), &["init", "-q"]);
    write(&repo.path().join("secrets/key.txt"), "TOP-SECRET\n");
    write(
        &repo.path().join(".claude/settings.json"),
        &json!({"permissions": {
            "allow": ["Bash(npm run test:*)"],
            "deny": ["Read(./secrets/**)", "Bash(curl:*)"],
            "ask": ["Bash(git push)"],
            "defaultMode": "plan"
        }})
        .to_string(),
    );
    trust(&repo, home.path());
    let nop_dir = repo.path().join(".nop");
    let nothing_written =
        || !nop_dir.join(".permissions").exists() && !nop_dir.join("config.yml").exists();
    assert!(nothing_written(), "no `nop init` yet");

    let (code, dry, stderr) = nop(&repo, home.path(), &["permissions", "import", "--dry-run"]);
    assert_eq!(code, Some(0), "{dry}{stderr}");
    for line in [
        "  deny     Read(./secrets/**)  →  secrets/**: deny",
        "  deny     Bash(curl:*)  →  not translated: nop cannot refuse one shell command \
         (`curl:*`): every command runs confined to the file rules instead",
        "  ask      Bash(git push)  →  not translated: nop cannot ask before one shell command \
         (`git push`): `--approval always` asks before every command",
        "  allow    Bash(npm run test:*)  →  nothing to import: nop runs `npm run test:*` without \
         asking already",
        ".nop/.permissions does not exist yet (no `nop init`): the rules start from nop's \
         built-in ones\n",
        "  + file-access  secrets/**: deny",
        "approval: on-request → plan in .nop/config.yml",
        "1 rule needs nothing: nop already does what it allows (see above)",
        "2 rules could not be translated (see above): nop does not enforce them",
        "dry run: nothing written",
    ] {
        assert!(dry.contains(line), "{line:?} is not in:\n{dry}");
    }
    assert!(nothing_written(), "--dry-run wrote something");

    let (code, done, stderr) = nop(&repo, home.path(), &["permissions", "import"]);
    assert_eq!(code, Some(0), "{done}{stderr}");
    assert!(done.contains("created .nop/ ("), "{done}");
    let file = std::fs::read_to_string(nop_dir.join(".permissions/agent-default.yml"))
        .expect("the permission file");
    let built_in = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join(".nop/.permissions/agent-default.yml"),
    )
    .expect("template");
    assert!(
        file.contains("  - pattern: \"secrets/**\"\n    access: deny\n")
            && file.ends_with(&built_in[built_in.find("  - pattern:").expect("a rule")..]),
        "the rules go on top of the built-in ones:\n{file}"
    );
    let config = std::fs::read_to_string(nop_dir.join("config.yml")).expect("config");
    assert!(
        config.contains("approval: plan")
            && config.contains("# nop configuration for this repository"),
        "the template with the mode set:\n{config}"
    );
    // The rules hold, and the workspace stays trusted: nothing else to do before a run.
    let (_, said, _) = nop(
        &repo,
        home.path(),
        &["permissions", "explain", "--path", "secrets/key.txt"],
    );
    assert!(said.starts_with("deny:"), "{said}");
    assert!(
        run_warnings(&repo, home.path()).is_empty(),
        "a run after the import has nothing to warn about"
    );
}

#[test]
fn an_imported_deny_rule_keeps_the_file_from_the_agent() {
    let repo = Repo::new();
    let home = crate::support::repo_dir();
    write(&repo.path().join("secrets/key.txt"), "TOP-SECRET\n");
    write(
        &repo.path().join(".claude/settings.json"),
        r#"{"permissions": {"deny": ["Read(./secrets/**)"]}}"#,
    );
    trust(&repo, home.path());
    let (code, _, stderr) = nop(&repo, home.path(), &["permissions", "import"]);
    assert_eq!(code, Some(0), "{stderr}");
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("c1", "read-file", json!({"path": "secrets/key.txt"}))]),
        openai::reply_text("done"),
    ]);
    let output = repo
        .nop_model(&server, "openai")
        .env("HOME", home.path())
        .args(["run", "read the key"])
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let result = server.result_of("c1");
    assert!(result.contains("`secrets/**` is denied"), "{result}");
    assert!(!result.contains("TOP-SECRET"));
}

#[test]
fn a_file_that_cannot_be_parsed_is_never_overwritten() {
    let repo = Repo::new();
    let home = crate::support::repo_dir();
    let file = repo.path().join(".nop/.permissions/agent-default.yml");
    write(
        &repo.path().join(".claude/settings.json"),
        r#"{"permissions": {"deny": ["Read(./secrets/**)"]}}"#,
    );
    std::fs::write(&file, "tools: [\n").expect("break it");
    trust(&repo, home.path());
    let (code, out, stderr) = nop(&repo, home.path(), &["permissions", "import"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(stderr.contains("agent-default.yml"), "{stderr}");
    assert!(stderr.contains("the file is left as it is"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&file).expect("read"), "tools: [\n");

    // A settings file that is not JSON: an error naming it, nothing written.
    write(&repo.path().join(".claude/settings.json"), "{ not json");
    trust(&repo, home.path());
    let (code, _, stderr) = nop(&repo, home.path(), &["permissions", "import"]);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains(".claude/settings.json: it is not JSON"),
        "{stderr}"
    );
}

/// The warnings of a `nop run` in `repo`.
fn run_warnings(repo: &Repo, home: &Path) -> Vec<String> {
    let server = MockServer::start(vec![openai::reply_text("ok")]);
    let output = repo
        .nop_model(&server, "openai")
        .env("HOME", home)
        .args(["run", "--output-format", "stream-json", "hi"])
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "warning")
        .filter_map(|e| e["message"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn a_settings_file_never_imported_is_said_once_until_it_changes() {
    let repo = Repo::new();
    let home = crate::support::repo_dir();
    let settings = repo.path().join(".claude/settings.json");
    write(
        &settings,
        r#"{"permissions": {"deny": ["Read(./secrets/**)"]}}"#,
    );
    let expected = ".claude/settings.json has Claude Code permission rules that nop does not \
                    read: its 1 deny rule protects nothing under nop until imported; run `nop \
                    permissions import` to translate them into nop's rules (this warning is \
                    given once for this content of the file)";
    // Changed by design: nop suggests importing only rules the user trusts (an untrusted file
    // may be the model's bait), so the user trusts each version of the file they write.
    assert_eq!(run_warnings(&repo, home.path()), Vec::<String>::new());
    trust(&repo, home.path());
    assert_eq!(run_warnings(&repo, home.path()), [expected]);
    assert_eq!(run_warnings(&repo, home.path()), Vec::<String>::new());
    // Changed: said again.
    write(
        &settings,
        r#"{"permissions": {"deny": ["Read(./secrets/**)", "Read(.env)"]}}"#,
    );
    trust(&repo, home.path());
    let warnings = run_warnings(&repo, home.path());
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("its 2 deny rules protect nothing under nop until imported"));
    // Imported: never said.
    write(&settings, r#"{"permissions": {"deny": ["Read(.env)"]}}"#);
    trust(&repo, home.path());
    let (code, _, stderr) = nop(&repo, home.path(), &["permissions", "import"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(run_warnings(&repo, home.path()), Vec::<String>::new());
    // A settings file without permission rules is no concern.
    write(
        &repo.path().join(".claude/settings.local.json"),
        r#"{"model": "opus"}"#,
    );
    assert_eq!(run_warnings(&repo, home.path()), Vec::<String>::new());
}

#[test]
fn a_settings_file_never_loosens_the_approval_mode_you_chose() {
    let repo = Repo::new();
    let home = crate::support::repo_dir();
    let (code, _, stderr) = nop(&repo, home.path(), &["config", "set", "approval", "always"]);
    assert_eq!(code, Some(0), "{stderr}");
    write(
        &repo.path().join(".claude/settings.json"),
        r#"{"permissions": {"defaultMode": "acceptEdits"}}"#,
    );
    trust(&repo, home.path());
    let (code, out, stderr) = nop(&repo, home.path(), &["permissions", "import"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        out.contains(
            "approval: kept always (your setting), not on-request as the settings file says"
        ),
        "{out}"
    );
    let config = std::fs::read_to_string(repo.path().join(".nop/config.yml")).expect("config");
    assert!(config.contains("approval: always"), "{config}");
}

#[test]
fn a_settings_file_that_is_not_json_is_a_warning_not_a_crash() {
    let repo = Repo::new();
    let home = crate::support::repo_dir();
    write(
        &repo.path().join(".claude/settings.json"),
        "{ \"permissions\": ",
    );
    let warnings = run_warnings(&repo, home.path());
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains(".claude/settings.json: is not valid JSON")
            && warnings[0].ends_with("its hooks and permission rules are not used by nop"),
        "{warnings:?}"
    );
}
