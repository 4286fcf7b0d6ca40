//! Calls the model makes in one turn that cannot conflict (reads, searches, `call-agent`) run at
//! the same time, bounded by `agent.max_parallel`; results go back in the order of the calls
//! (issue 30). Concurrency is read from the order in which the mock received the requests, never
//! from a stopwatch.

use serde_json::json;

use crate::support::Repo;
use crate::support::mock::{MockServer, RecordedRequest, openai};

const TASKS: [&str; 3] = ["task A", "task B", "task C"];

/// The main agent asks three subagents at once; each runs `sleep 1` with the shell, then answers.
fn server() -> MockServer {
    server_sleeping(1)
}

/// The same, each subagent's command taking `seconds`.
fn server_sleeping(seconds: u32) -> MockServer {
    MockServer::start_with(Box::new(move |request: &RecordedRequest| {
        let users = request.user_messages();
        let results = request.tool_results();
        match TASKS
            .iter()
            .find(|t| users.first().is_some_and(|u| u == *t))
        {
            Some(task) if results.is_empty() => openai::reply_tool_calls(&[(
                &format!("sh-{task}"),
                "shell",
                json!({"command": format!("sleep {seconds}")}),
            )]),
            Some(task) => openai::reply_text(&format!("done {task}")),
            None if results.is_empty() => openai::reply_tool_calls(
                &TASKS
                    .iter()
                    .enumerate()
                    .map(|(i, t)| (format!("c{i}"), json!({"agent": "coder", "arguments": t})))
                    .collect::<Vec<_>>()
                    .iter()
                    .map(|(id, args)| (id.as_str(), "call-agent", args.clone()))
                    .collect::<Vec<_>>(),
            ),
            None => openai::reply_text(&results.join(" | ")),
        }
    }))
}

/// For each request to a subagent: its task and whether it carries the shell's result.
fn subagent_requests(server: &MockServer) -> Vec<(String, bool)> {
    server
        .requests()
        .iter()
        .filter_map(|r| {
            let first = r.user_messages().into_iter().next()?;
            TASKS
                .contains(&first.as_str())
                .then(|| (first, !r.tool_results().is_empty()))
        })
        .collect()
}

#[test]
fn three_subagents_called_in_one_turn_run_at_once_and_answer_in_order() {
    let repo = Repo::new();
    let server = server();
    let result = repo.model_json(
        &server,
        &["run", "--output-format", "json", "split the work in three"],
    );
    assert_eq!(result["status"], "completed", "{result}");
    // The results go back in the order of the calls, whatever order they finished in.
    let answer = result["final_message"].as_str().unwrap_or_default();
    let (a, b, c) = (
        answer.find("done task A"),
        answer.find("done task B"),
        answer.find("done task C"),
    );
    assert!(a < b && b < c && a.is_some(), "{answer}");
    // All three subagents asked the model before any of them got its shell's result: they ran
    // side by side (one after another, A would have finished before B started).
    let order = subagent_requests(&server);
    assert_eq!(order.len(), 6, "{order:?}");
    assert!(
        order[..3].iter().all(|(_, after)| !after),
        "the three first requests come first: {order:?}"
    );
    // Each subagent kept its own session.
    let sessions: serde_json::Value =
        serde_json::from_str(&repo.run(&["sessions", "list", "--all", "--json"])).expect("json");
    let called = sessions
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["called"] == true)
        .count();
    assert_eq!(called, 3, "{sessions}");
}

#[test]
fn max_parallel_one_runs_the_calls_in_order() {
    let repo = Repo::new();
    let server = server();
    let result = repo.model_json(
        &server,
        &[
            "run",
            "--output-format",
            "json",
            "--set",
            "agent.max_parallel=1",
            "split the work in three",
        ],
    );
    assert_eq!(result["status"], "completed", "{result}");
    let order = subagent_requests(&server);
    let expected: Vec<(String, bool)> = TASKS
        .iter()
        .flat_map(|t| [(t.to_string(), false), (t.to_string(), true)])
        .collect();
    assert_eq!(order, expected);
}

#[test]
fn the_terminal_shows_one_status_line_for_each_subagent_running() {
    let repo = Repo::new();
    let server = server_sleeping(4);
    let t = crate::support::terminal::Terminal::start(
        &repo,
        &server,
        "side-by-side",
        "run",
        &[],
        "/help for commands",
    );
    t.type_line("split the work in three");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    // The main status line says "working…" too: count only the subagents' lines.
    let running = |screen: &str| {
        screen
            .lines()
            .filter(|l| l.contains("↳ coder") && l.contains("working…"))
            .count()
    };
    let mut screen = t.screen();
    while running(&screen) < 3 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(200));
        screen = t.screen();
    }
    assert_eq!(running(&screen), 3, "{screen}");
    t.wait_for_prompt_after("done task C");
    t.type_line("/exit");
}
