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
    let results: Vec<String> = requests[1].body["messages"]
        .as_array()
        .expect("m")
        .iter()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["content"].as_str().map(str::to_string))
        .collect();
    assert!(
        results[0].contains("Run `make deploy`") && results[0].contains("checklist.md"),
        "{results:?}"
    );
    assert!(
        results[1].contains("no skill `nope`") && results[1].contains("deploy, review"),
        "{results:?}"
    );
}
