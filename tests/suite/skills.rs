//! Skills: listed briefly in the system prompt (repository and personal ones), `load-skill`
//! returns the body and the files beside it, an unknown skill is a clear error.

use std::fs;

use serde_json::json;

use crate::support::Repo;
use crate::support::mock::{MockServer, openai};

#[test]
fn skills_are_listed_loaded_and_unknown_ones_are_refused() {
    let repo = Repo::new();
    let deploy = repo.path().join(".nop/.system/skills/deploy");
    fs::create_dir_all(&deploy).expect("mkdir");
    fs::write(deploy.join("SKILL.md"), "---\nname: deploy\ndescription: How to deploy this service safely\n---\nRun `make deploy` after the checks pass.\n").expect("write");
    fs::write(deploy.join("checklist.md"), "- tests green\n").expect("write");
    // A personal skill in ~/.nop/skills (HOME is the test's repository).
    let review = repo.path().join(".nop/skills/review");
    fs::create_dir_all(&review).expect("mkdir");
    fs::write(review.join("SKILL.md"), "---\nname: review\ndescription: Review checklist for pull requests\n---\nLook at the tests first.\n").expect("write");
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[
            ("s1", "load-skill", json!({"name": "deploy"})),
            ("s2", "load-skill", json!({"name": "nope"})),
        ]),
        openai::reply_text("ok"),
    ]);
    repo.model_ok(&server, &["run", "ship it"]);
    let requests = server.requests();
    let system = requests[0].body["messages"][0]["content"]
        .as_str()
        .expect("system")
        .to_string();
    assert!(
        system.contains("- deploy: How to deploy this service safely"),
        "{system}"
    );
    assert!(
        system.contains("- review: Review checklist for pull requests"),
        "{system}"
    );
    assert!(
        !system.contains("make deploy"),
        "only names and descriptions are listed"
    );
    let results = server.results_of(&["s1", "s2"]);
    assert!(
        results[0].contains("Run `make deploy`") && results[0].contains("checklist.md"),
        "{results:?}"
    );
    assert!(
        results[1].contains("no skill `nope`") && results[1].contains("deploy, review"),
        "{results:?}"
    );
}

fn write(path: &std::path::Path, text: &str) {
    fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    fs::write(path, text).expect("write");
}

/// The description of anthropics/skills' `pdf`, written as a block scalar: its trigger
/// sentence begins past the 200th character.
const PDF: &str = "---
name: pdf
description: |-
  Comprehensive PDF manipulation toolkit for extracting text and tables, creating new PDFs,
  merging/splitting documents, and handling forms. When Claude needs to fill in a PDF form or
  programmatically process, generate, or analyze PDF documents at scale.
license: Proprietary. LICENSE.txt has complete terms
---

# PDF Processing Guide

Use pypdf for basic operations. For forms, read forms.md.
";

#[test]
fn skills_other_agents_keep_are_listed_whole_and_loaded_by_name() {
    let repo = Repo::new();
    let home = crate::support::repo_dir();
    let pdf = home.path().join(".claude/skills/pdf");
    write(&pdf.join("SKILL.md"), PDF);
    write(
        &pdf.join("forms.md"),
        "Fill the fields with fill_fillable_fields.py\n",
    );
    write(&pdf.join("scripts/fill_fillable_fields.py"), "print('x')\n");
    // A folder whose name is not the skill's.
    write(
        &repo.path().join(".agents/skills/notes-v2/SKILL.md"),
        "---\nname: 'changelog'\ndescription: \"Writes release notes: groups commits by kind\"\nallowed-tools: [Read, Grep]\nmetadata:\n  version: \"1.0\"\n---\nGroup by feat/fix.\n",
    );
    write(
        &repo.path().join(".claude/skills/broken/SKILL.md"),
        "---\nname: broken\ndescription: [unclosed\n---\nnever\n",
    );
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[
            ("s1", "load-skill", json!({"name": "pdf"})),
            ("s2", "load-skill", json!({"name": "changelog"})),
            ("s3", "load-skill", json!({"name": "notes-v2"})),
            (
                "s4",
                "read-file",
                json!({"path": pdf.join("forms.md").to_string_lossy()}),
            ),
        ]),
        openai::reply_text("ok"),
    ]);
    let out = repo
        .nop_model(&server, "openai")
        .env("HOME", home.path())
        .args(["run", "fill the form"])
        .output()
        .expect("run nop");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(".claude/skills/broken/SKILL.md") && stderr.contains("left out"),
        "one warning names the bad file: {stderr}"
    );
    let requests = server.requests();
    let system = requests[0].body["messages"][0]["content"]
        .as_str()
        .expect("system")
        .to_string();
    assert!(
        system.contains(
            "- pdf: Comprehensive PDF manipulation toolkit for extracting text and tables, \
             creating new PDFs, merging/splitting documents, and handling forms. When Claude \
             needs to fill in a PDF form or programmatically process, generate, or analyze PDF \
             documents at scale.\n"
        ),
        "{system}"
    );
    assert!(
        system.contains("- changelog: Writes release notes: groups commits by kind\n"),
        "{system}"
    );
    assert!(
        !system.contains("broken") && !system.contains("|-"),
        "{system}"
    );
    let results = server.results_of(&["s1", "s2", "s3", "s4"]);
    assert!(
        results[0].contains("# PDF Processing Guide")
            && results[0].contains("forms.md")
            && results[0].contains("scripts/fill_fillable_fields.py"),
        "{results:?}"
    );
    assert!(results[1].contains("Group by feat/fix."), "{results:?}");
    assert!(
        results[2].contains("no skill `notes-v2` (available: changelog, pdf)"),
        "only loadable names are offered: {results:?}"
    );
    assert!(
        results[3].contains("fill_fillable_fields.py"),
        "a user skill's files are readable: {results:?}"
    );
}

#[test]
fn a_user_skill_folder_grants_reading_itself_and_nothing_else() {
    let repo = Repo::new();
    let home = crate::support::repo_dir();
    let h = home.path();
    write(&h.join(".ssh/id_ed25519"), "PRIVATE KEY\n");
    let skills = h.join(".claude/skills");
    write(&skills.join("pdf/SKILL.md"), PDF);
    write(&skills.join("pdf/forms.md"), "forms\n");
    std::os::unix::fs::symlink(h.join(".ssh/id_ed25519"), skills.join("pdf/key")).expect("link");
    // A "skill" that is a link to ~/.ssh, and a folder without SKILL.md.
    std::os::unix::fs::symlink(h.join(".ssh"), skills.join("ssh")).expect("link");
    write(&skills.join("notes/secret.txt"), "secret\n");
    let path = |p: &str| skills.join(p).to_string_lossy().into_owned();
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[
            ("r1", "read-file", json!({"path": path("pdf/forms.md")})),
            ("r2", "read-file", json!({"path": path("pdf/key")})),
            ("r3", "read-file", json!({"path": path("ssh/id_ed25519")})),
            ("r4", "read-file", json!({"path": path("notes/secret.txt")})),
            (
                "r5",
                "write-file",
                json!({"path": path("pdf/forms.md"), "content": "planted\n"}),
            ),
        ]),
        openai::reply_text("ok"),
    ]);
    let out = repo
        .nop_model(&server, "openai")
        .env("HOME", h)
        .args(["run", "--approval", "never", "look"])
        .output()
        .expect("run nop");
    crate::support::assert_ok(&out);
    let results = server.results_of(&["r1", "r2", "r3", "r4", "r5"]);
    assert!(results[0].contains("forms"), "{results:?}");
    for (i, result) in results.iter().enumerate().skip(1) {
        assert!(
            !result.contains("PRIVATE KEY") && !result.contains("secret\n"),
            "call {i}: {result}"
        );
        assert!(
            result.contains("denied") || result.contains("outside the repository"),
            "call {i}: {result}"
        );
    }
    assert_eq!(
        fs::read_to_string(skills.join("pdf/forms.md")).expect("read"),
        "forms\n"
    );
}

#[test]
fn skills_list_shows_each_source_the_shadowed_ones_and_bad_files() {
    let repo = Repo::new();
    let home = crate::support::repo_dir();
    write(&home.path().join(".claude/skills/pdf/SKILL.md"), PDF);
    write(
        &home.path().join(".codex/skills/pdf/SKILL.md"),
        "---\nname: pdf\ndescription: an older copy\n---\n",
    );
    write(
        &repo.path().join(".claude/skills/broken/SKILL.md"),
        "---\ndescription: [\n---\n",
    );
    let out = repo
        .nop()
        .env("HOME", home.path())
        .args(["skills", "list", "--json"])
        .output()
        .expect("nop");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(list["skills"][0]["name"], "pdf");
    assert_eq!(list["skills"][0]["source"], "~/.claude/skills");
    assert_eq!(list["shadowed"][0]["source"], "~/.codex/skills");
    assert!(
        list["warnings"][0]
            .as_str()
            .is_some_and(|w| w.contains(".claude/skills/broken/SKILL.md")),
        "{list}"
    );
    let out = repo
        .nop()
        .env("HOME", home.path())
        .args(["skills", "list"])
        .output()
        .expect("nop");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("pdf   ~/.claude/skills  Comprehensive PDF manipulation toolkit for")
            && text.contains("shadowed")
            && text.contains("~/.codex/skills"),
        "{text}"
    );
}

/// The agent can write `.agents/skills` and `.claude/skills` of the repository: a SKILL.md
/// there that is a link out of the repository, or a skill folder that is one, is neither listed
/// nor loaded (nop would read it outside the agent's rules).
#[test]
fn a_planted_repository_skill_linking_out_is_neither_listed_nor_loaded() {
    let repo = Repo::new();
    let home = crate::support::repo_dir();
    let h = home.path();
    write(
        &h.join(".aws/credentials"),
        "---\nname: creds\ndescription: AKIA-SECRET-IN-DESCRIPTION\n---\nSECRET-BODY\n",
    );
    write(
        &h.join("elsewhere/outside/SKILL.md"),
        "---\nname: outside\ndescription: OUTSIDE-DESCRIPTION\n---\nOUTSIDE-BODY\n",
    );
    let skills = repo.path().join(".agents/skills");
    fs::create_dir_all(skills.join("creds")).expect("mkdir");
    std::os::unix::fs::symlink(h.join(".aws/credentials"), skills.join("creds/SKILL.md"))
        .expect("link");
    std::os::unix::fs::symlink(h.join("elsewhere/outside"), skills.join("outside")).expect("link");
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[
            ("s1", "load-skill", json!({"name": "creds"})),
            ("s2", "load-skill", json!({"name": "outside"})),
        ]),
        openai::reply_text("ok"),
    ]);
    let out = repo
        .nop_model(&server, "openai")
        .env("HOME", h)
        .args(["run", "go"])
        .output()
        .expect("run nop");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("symbolic link out of"), "{stderr}");
    let requests = server.requests();
    let system = requests[0].body["messages"][0]["content"]
        .as_str()
        .expect("system")
        .to_string();
    assert!(
        !system.contains("AKIA-SECRET") && !system.contains("OUTSIDE-DESCRIPTION"),
        "{system}"
    );
    let results = server.results_of(&["s1", "s2"]);
    assert!(
        results.iter().all(|r| r.contains("no skill")
            && !r.contains("SECRET")
            && !r.contains("OUTSIDE-BODY")),
        "{results:?}"
    );
}

/// Skills kept beside a package (`packages/web/.claude/skills`, `tools/.agents/skills`) are
/// listed and loaded as Claude Code and Codex find them; a folder `.gitignore` names is not
/// walked.
#[test]
fn skills_in_folders_below_the_root_are_listed_and_loaded() {
    let repo = Repo::new();
    write(
        &repo
            .path()
            .join("packages/web/.claude/skills/storybook/SKILL.md"),
        "---\nname: storybook\ndescription: Write a story for a component\n---\nUse CSF3.\n",
    );
    write(
        &repo
            .path()
            .join("packages/web/.claude/skills/storybook/template.tsx"),
        "export default {};\n",
    );
    write(
        &repo.path().join("tools/.agents/skills/release/SKILL.md"),
        "---\nname: release\ndescription: Cut a release\n---\nTag it.\n",
    );
    write(
        &repo.path().join("build-out/.claude/skills/stale/SKILL.md"),
        "---\nname: stale\ndescription: STALE-COPY\n---\n",
    );
    write(&repo.path().join(".gitignore"), "build-out/\n");
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[
            ("s1", "load-skill", json!({"name": "storybook"})),
            ("s2", "load-skill", json!({"name": "stale"})),
        ]),
        openai::reply_text("ok"),
    ]);
    repo.model_ok(&server, &["run", "add a story"]);
    let requests = server.requests();
    let system = requests[0].body["messages"][0]["content"]
        .as_str()
        .expect("system")
        .to_string();
    assert!(
        system.contains("- storybook: Write a story for a component\n")
            && system.contains("- release: Cut a release\n")
            && !system.contains("STALE-COPY"),
        "{system}"
    );
    let results = server.results_of(&["s1", "s2"]);
    assert!(
        results[0].contains("Use CSF3.")
            && results[0].contains("packages/web/.claude/skills/storybook: template.tsx"),
        "{results:?}"
    );
    assert!(results[1].contains("no skill `stale`"), "{results:?}");
    let out = repo
        .nop()
        .args(["skills", "list", "--json"])
        .output()
        .expect("nop");
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    // Shallowest first: `tools/` is one level down, `packages/web/` two.
    assert_eq!(list["skills"][0]["source"], "tools/.agents/skills");
    assert_eq!(list["skills"][1]["source"], "packages/web/.claude/skills");
}
