//! Seed 004's behaviour table, row by row, and seed 000's four scenarios: the real binary, two or
//! more processes, the mock model, and tools gated on files so that every step waits on an event.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::Repo;
use crate::support::mock::{MockServer, RecordedRequest, openai};

const WAIT: Duration = Duration::from_secs(30);

/// A `nop run --output-format stream-json` process whose events the test reads as they come.
struct Runner {
    child: Child,
    events: Receiver<Value>,
    seen: Vec<Value>,
}

impl Runner {
    fn start(repo: &Repo, server: &MockServer, args: &[&str]) -> Runner {
        let mut child = repo
            .nop_model_process(server, "openai")
            .args(["run", "--output-format", "stream-json"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn runner");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, events) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(event) = serde_json::from_str::<Value>(&line) {
                    let _ = tx.send(event);
                }
            }
        });
        Runner {
            child,
            events,
            seen: Vec::new(),
        }
    }

    /// Waits for the next event of `kind`, keeping everything seen.
    fn wait_for(&mut self, kind: &str) -> Value {
        loop {
            let event = self
                .events
                .recv_timeout(WAIT)
                .unwrap_or_else(|_| panic!("no `{kind}` event; saw {:#?}", self.seen));
            self.seen.push(event.clone());
            if event["type"] == kind {
                return event;
            }
        }
    }

    fn session_id(&mut self) -> String {
        self.wait_for("session_started")["session_id"]
            .as_str()
            .expect("id")
            .to_string()
    }

    /// Waits for the process to end; returns its exit code and the result event.
    fn finish(mut self) -> (i32, Value) {
        let result = self.wait_for("result");
        let status = self.child.wait().expect("wait");
        (status.code().unwrap_or(-1), result)
    }
}

/// A shell command that waits until `gate` exists (the test opens it when it is ready).
fn gated(gate: &Path) -> Value {
    json!({"command": format!("while [ ! -e {} ]; do sleep 0.02; done; echo gate passed", gate.display())})
}

fn open(gate: &Path) {
    std::fs::write(gate, "").expect("open gate");
}

fn gates(repo: &Repo) -> PathBuf {
    let dir = repo.path().join("gates");
    std::fs::create_dir_all(&dir).expect("mkdir");
    dir
}

fn send(repo: &Repo, server: &MockServer, args: &[&str]) -> (i32, String) {
    let out = repo
        .nop_model(server, "openai")
        .arg("send")
        .args(args)
        .output()
        .expect("send");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn last_message(request: &RecordedRequest) -> Value {
    request.body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .cloned()
        .unwrap_or(Value::Null)
}

fn inbox_is_empty(repo: &Repo, id: &str) -> bool {
    std::fs::read_dir(repo.session_dir(id).join("inbox")).map_or(true, |mut d| d.next().is_none())
}

#[test]
fn idle_session_a_message_is_processed_at_once() {
    let repo = Repo::new();
    let server = MockServer::start(vec![
        openai::reply_text("hello"),
        openai::reply_text("processed now"),
    ]);
    let out = repo
        .nop_model(&server, "openai")
        .args(["run", "--output-format", "json", "hi"])
        .output()
        .expect("run");
    let id = serde_json::from_slice::<Value>(&out.stdout).expect("json")["session_id"]
        .as_str()
        .expect("id")
        .to_string();
    let (code, stdout) = send(&repo, &server, &["--session", &id, "one more thing"]);
    assert_eq!(code, 0);
    assert_eq!(stdout, "processed now\n");
    assert_eq!(
        last_message(&server.requests()[1])["content"],
        "one more thing"
    );
}

#[test]
fn busy_session_normal_messages_wait_for_the_task_then_go_one_by_one() {
    let repo = Repo::new();
    let g = gates(&repo).join("g1");
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("c1", "shell", gated(&g))]),
        openai::reply_text("task done"),
        openai::reply_text("reply to first"),
        openai::reply_text("reply to second"),
    ]);
    let other = repo.new_session();
    let mut runner = Runner::start(&repo, &server, &["long task"]);
    let id = runner.session_id();
    runner.wait_for("tool_call");
    assert_eq!(
        send(
            &repo,
            &server,
            &["--session", &id, "--priority", "normal", "first"]
        ),
        (0, "queued (position 1)\n".into())
    );
    assert_eq!(
        send(
            &repo,
            &server,
            &["--session", &id, "--priority", "normal", "second"]
        ),
        (0, "queued (position 2)\n".into())
    );
    open(&g);
    let (code, result) = runner.finish();
    assert_eq!(code, 0, "{result}");
    let requests = server.requests();
    assert_eq!(requests.len(), 4);
    // The task finished before either message was taken; then each got its own request.
    assert_eq!(last_message(&requests[1])["role"], "tool");
    assert_eq!(last_message(&requests[2])["content"], "first");
    assert_eq!(last_message(&requests[3])["content"], "second");
    let session = repo.session_json(&id);
    let texts: Vec<&str> = session["messages"]
        .as_array()
        .expect("m")
        .iter()
        .skip(4)
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert_eq!(
        texts,
        vec![
            "task done",
            "first",
            "reply to first",
            "second",
            "reply to second"
        ]
    );
    let first = &session["messages"][5];
    assert_eq!(
        (first["isInterrupt"].clone(), first["priority"].clone()),
        (json!(true), json!("normal"))
    );
    assert_eq!(first["sessionKey"], format!("cli:{id}:user"));
    assert!(inbox_is_empty(&repo, &id));
    // Queues are per session: the other one saw nothing.
    assert_eq!(repo.session_json(&other)["messages"], json!([]));
}

#[test]
fn a_tool_runs_to_completion_and_a_high_message_enters_at_the_next_gap() {
    let repo = Repo::new();
    let g = gates(&repo).join("g2");
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[
            ("c1", "shell", gated(&g)),
            ("c2", "shell", json!({"command": "echo second"})),
        ]),
        openai::reply_text("switched to the other file"),
    ]);
    let mut runner = Runner::start(&repo, &server, &["edit the file"]);
    let id = runner.session_id();
    runner.wait_for("tool_call");
    assert_eq!(
        send(&repo, &server, &["--session", &id, "use the other file"]),
        (0, "queued (position 1)\n".into())
    );
    open(&g);
    let (code, result) = runner.finish();
    assert_eq!(code, 0, "{result}");
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let after = server.request_with_result("c1");
    let messages = after.body["messages"].as_array().expect("messages");
    let n = messages.len();
    // The running tool was not interrupted: it finished and its output is whole.
    assert!(
        messages[n - 3]["content"]
            .as_str()
            .is_some_and(|c| c.starts_with("exit code: 0") && c.contains("gate passed")),
        "{messages:#?}"
    );
    // The next call of the batch was not run, and the message came in right after.
    assert!(
        messages[n - 2]["content"]
            .as_str()
            .is_some_and(|c| c.contains("interrupted by a user message"))
    );
    assert_eq!(messages[n - 1]["content"], "use the other file");
    assert!(runner_saw(&result, &id));
}

fn runner_saw(result: &Value, id: &str) -> bool {
    result["session_id"] == id
}

#[test]
fn a_stop_word_cancels_at_the_next_checkpoint_and_is_confirmed() {
    for (how, stop) in [("send", "停止"), ("stop", "")] {
        let repo = Repo::new();
        let g = gates(&repo).join("g3");
        let server = MockServer::start(vec![
            openai::reply_tool_calls(&[("c1", "shell", gated(&g))]),
            openai::reply_text("never asked"),
        ]);
        let mut runner = Runner::start(&repo, &server, &["work forever"]);
        let id = runner.session_id();
        runner.wait_for("tool_call");
        let out = if how == "send" {
            send(&repo, &server, &["--session", &id, stop])
        } else {
            let out = repo
                .nop()
                .args(["stop", "--session", &id])
                .output()
                .expect("stop");
            (
                out.status.code().unwrap_or(-1),
                String::from_utf8_lossy(&out.stdout).into_owned(),
            )
        };
        assert_eq!(out.0, 0);
        assert!(
            out.1.contains("stops at its next checkpoint"),
            "{how}: {}",
            out.1
        );
        open(&g);
        let (code, result) = runner.finish();
        assert_eq!(code, 130, "{how}: {result}");
        assert_eq!(result["status"], "cancelled");
        assert!(
            result["final_message"]
                .as_str()
                .is_some_and(|m| m.contains("stopped by the message")),
            "{result}"
        );
        assert_eq!(
            server.requests().len(),
            1,
            "{how}: no model request after the stop"
        );
        let session = repo.session_json(&id);
        assert_eq!(session["status"], "cancelled");
        assert!(
            session["stopReason"]
                .as_str()
                .is_some_and(|r| r.contains("stop word"))
        );
        let messages = session["messages"].as_array().expect("m");
        let n = messages.len();
        assert_eq!(messages[n - 2]["isInterrupt"], true);
        assert!(
            messages[n - 1]["content"]
                .as_str()
                .is_some_and(|c| c.starts_with("Stopped, as you asked"))
        );
        // Resumable afterwards.
        server.push(openai::reply_text("back again"));
        let out = repo
            .nop_model(&server, "openai")
            .args(["run", "--session", &id, "continue"])
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(0));
        repo.assert_session_shape(&id, "stop-word.json");
    }
}

#[test]
fn a_queued_message_survives_the_crash_of_the_runner() {
    let repo = Repo::new();
    let g = gates(&repo).join("never");
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("c1", "shell", gated(&g))]),
        openai::reply_text("resumed with both"),
    ]);
    let mut runner = Runner::start(&repo, &server, &["long"]);
    let id = runner.session_id();
    runner.wait_for("tool_call");
    assert_eq!(
        send(&repo, &server, &["--session", &id, "remember me"]).0,
        0
    );
    runner.child.kill().expect("SIGKILL");
    let _ = runner.child.wait();
    repo.model_ok(&server, &["run", "--session", &id, "next"]);
    let messages = server.requests()[1].body["messages"]
        .as_array()
        .expect("m")
        .clone();
    let texts: Vec<&str> = messages
        .iter()
        .filter(|m| m["role"] != "system")
        .filter_map(|m| m["content"].as_str())
        .collect();
    let n = texts.len();
    assert_eq!(&texts[n - 2..], &["remember me", "next"], "{texts:?}");
    assert!(
        texts[n - 3].contains("nop stopped before this call finished"),
        "{texts:?}"
    );
    assert!(inbox_is_empty(&repo, &id));
    repo.assert_session_shape(&id, "queued-message-and-aborted-call.json");
}

/// A repository with seed 000's agents (and coder).
fn seed_000_repo() -> Repo {
    let repo = Repo::new();
    let example = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/agents/seed-000-priorities.yml"),
    )
    .expect("example");
    std::fs::write(
        repo.path().join(".nop/agents.yml"),
        format!("{example}\n  - name: coder\n    description: no priority\n"),
    )
    .expect("write");
    repo
}

fn stack_events(repo: &Repo) -> Vec<(String, String)> {
    let stack: Value =
        serde_json::from_str(&repo.run(&["sessions", "stack", "--json"])).expect("json");
    stack["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| {
            (
                e["kind"].as_str().unwrap_or_default().to_string(),
                e["agent"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// Seed 000 scenarios 1 and 4: a higher-priority agent pauses an interruptible one, which
/// resumes by itself when the newcomer ends.
fn pauses_and_resumes(low: &str, high: &str) {
    let repo = seed_000_repo();
    let dir = gates(&repo);
    let (g_low, g_high) = (dir.join("low"), dir.join("high"));
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("m1", "shell", gated(&g_low))]),
        openai::reply_tool_calls(&[("p1", "shell", gated(&g_high))]),
        openai::reply_text("high done"),
        openai::reply_text("low done"),
    ]);
    let mut first = Runner::start(&repo, &server, &["--agent", low, "start"]);
    let low_id = first.session_id();
    first.wait_for("tool_call");
    let mut second = Runner::start(&repo, &server, &["--agent", high, "urgent"]);
    let high_id = second.session_id();
    // The newcomer marks the session it pauses at once, though that one is inside a tool call;
    // each stores the priority it runs with.
    let low_session = repo.session_json(&low_id);
    assert_eq!(low_session["status"], "paused");
    let high_session = repo.session_json(&high_id);
    assert!(
        low_session["priority"].as_u64() < high_session["priority"].as_u64(),
        "{low_session} {high_session}"
    );
    assert_eq!(low_session["interruptible"], true);
    let listed: Value =
        serde_json::from_str(&repo.run(&["sessions", "list", "--json"])).expect("json");
    assert!(
        listed
            .as_array()
            .expect("list")
            .iter()
            .any(|s| s["id"] == low_id.as_str() && s["status"] == "paused"),
        "{listed}"
    );
    second.wait_for("tool_call");
    // The low one reaches its next checkpoint and waits there.
    open(&g_low);
    assert_eq!(first.wait_for("paused")["session_id"], low_id.as_str());
    assert_eq!(repo.session_json(&low_id)["status"], "paused");
    let stack: Value =
        serde_json::from_str(&repo.run(&["sessions", "stack", "--json"])).expect("json");
    let states: Vec<(&str, &str)> = stack["stack"]
        .as_array()
        .expect("stack")
        .iter()
        .map(|e| {
            (
                e["agent"].as_str().unwrap_or_default(),
                e["state"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(states, vec![(low, "paused"), (high, "running")]);
    open(&g_high);
    let (code, _) = second.finish();
    assert_eq!(code, 0);
    let ended = std::time::Instant::now();
    first.wait_for("resumed");
    // A figure, not a limit: how long the paused session took to notice (docs/priority-and-queue.md).
    eprintln!(
        "resumed {} ms after the newcomer ended",
        ended.elapsed().as_millis()
    );
    // `running` again (or already `completed`: it goes on at once).
    let status = repo.session_json(&low_id)["status"].clone();
    assert!(status == "running" || status == "completed", "{status}");
    let (code, result) = first.finish();
    assert_eq!(code, 0);
    assert_eq!(result["final_message"], "low done");
    let events = stack_events(&repo);
    let kinds: Vec<(&str, &str)> = events
        .iter()
        .map(|(k, a)| (k.as_str(), a.as_str()))
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("started", low),
            ("paused", low),
            ("started", high),
            ("ended", high),
            ("resumed", low),
            ("ended", low)
        ]
    );
    let log = std::fs::read_to_string(repo.path().join(".nop/logs/system.log")).expect("log");
    assert!(
        log.contains("op=priority result=paused") && log.contains("op=priority result=resumed")
    );
}

#[test]
fn seed_000_scenario_1_phone_interrupts_music() {
    pauses_and_resumes("music_agent", "phone_agent");
}

#[test]
fn seed_000_scenario_4_weather_pauses_music() {
    pauses_and_resumes("music_agent", "weather_agent");
}

/// Seed 000 scenarios 2 and 3: the newcomer is refused with exit 4 and the reason.
fn refused(active: &str, newcomer: &str, reason_part: &str) {
    let repo = seed_000_repo();
    let g = gates(&repo).join("g");
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("a1", "shell", gated(&g))]),
        openai::reply_text("coder ran"),
        openai::reply_text("active done"),
    ]);
    let mut runner = Runner::start(&repo, &server, &["--agent", active, "busy"]);
    runner.session_id();
    runner.wait_for("tool_call");
    let before = repo.run(&["sessions", "list", "--json"]);
    let out = repo
        .nop_model(&server, "openai")
        .args(["run", "--agent", newcomer, "hello"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(4));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("refused:") && stderr.contains(active) && stderr.contains(reason_part),
        "{stderr}"
    );
    assert_eq!(
        repo.run(&["sessions", "list", "--json"]),
        before,
        "a refused run leaves no session"
    );
    // An agent without a priority is never refused.
    let out = repo
        .nop_model(&server, "openai")
        .args(["run", "--agent", "coder", "side job"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0));
    open(&g);
    let (code, _) = runner.finish();
    assert_eq!(code, 0);
    assert!(
        stack_events(&repo)
            .iter()
            .any(|(k, a)| k == "refused" && a == newcomer)
    );
}

#[test]
fn seed_000_scenario_2_navigation_refuses_chat() {
    refused("navigation_agent", "chat_agent", "priority 80");
}

#[test]
fn seed_000_scenario_3_vehicle_control_refused_by_planner() {
    refused("planner_agent", "vehicle_control_agent", "priority 60");
}

#[test]
fn agents_list_shows_priorities_with_overrides() {
    let repo = seed_000_repo();
    let agents = std::fs::read_to_string(repo.path().join(".nop/agents.yml")).expect("read");
    std::fs::write(
        repo.path().join(".nop/agents.yml"),
        format!("{agents}priority_rules:\n  users:\n    user: {{music_agent: 55}}\n"),
    )
    .expect("write");
    let list: Value = serde_json::from_str(&repo.run(&["agents", "list", "--json"])).expect("json");
    let music = list
        .as_array()
        .expect("a")
        .iter()
        .find(|a| a["name"] == "music_agent")
        .expect("music")
        .clone();
    assert_eq!(
        (
            music["priority"].clone(),
            music["effectivePriority"].clone()
        ),
        (json!(20), json!(55))
    );
    let coder = list
        .as_array()
        .expect("a")
        .iter()
        .find(|a| a["name"] == "coder")
        .expect("coder")
        .clone();
    assert_eq!(coder["priority"], Value::Null);
    let text = repo.run(&["agents", "list"]);
    assert!(
        text.starts_with("NAME") && text.contains("phone_agent"),
        "{text}"
    );
}

#[test]
fn an_emergency_keyword_in_the_prompt_gives_the_boost_and_session_started_says_so() {
    let repo = seed_000_repo();
    let g = gates(&repo).join("g");
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("a1", "shell", gated(&g))]),
        openai::reply_text("windows closed"),
        openai::reply_text("planner done"),
    ]);
    let mut planner = Runner::start(&repo, &server, &["--agent", "planner_agent", "plan my day"]);
    let planner_id = planner.session_id();
    planner.wait_for("tool_call");
    // Scenario 3 refuses vehicle control (50 < 60); "紧急" makes it 70.
    let mut vehicle = Runner::start(
        &repo,
        &server,
        &[
            "--agent",
            "vehicle_control_agent",
            "紧急：快关上车窗，下雨了",
        ],
    );
    let started = vehicle.wait_for("session_started");
    assert_eq!(started["priority"], 70, "{started}");
    assert_eq!(started["emergency"], "keyword \"紧急\"", "{started}");
    let vehicle_id = started["session_id"].as_str().expect("id").to_string();
    assert_eq!(
        repo.session_json(&vehicle_id)["emergency"],
        "keyword \"紧急\""
    );
    assert_eq!(repo.session_json(&planner_id)["status"], "paused");
    let (code, result) = vehicle.finish();
    assert_eq!(code, 0);
    assert_eq!(result["final_message"], "windows closed");
    repo.assert_session_shape(&vehicle_id, "priority-with-emergency.json");
    open(&g);
    let (code, result) = planner.finish();
    assert_eq!(code, 0);
    assert_eq!(result["final_message"], "planner done");
    // Without a keyword there is no boost, and session_started says nothing of an emergency.
    let server = MockServer::start(vec![openai::reply_text("closed")]);
    let mut calm = Runner::start(
        &repo,
        &server,
        &[
            "--agent",
            "vehicle_control_agent",
            "close the windows please",
        ],
    );
    let started = calm.wait_for("session_started");
    assert_eq!(started["priority"], 50, "{started}");
    assert!(started.get("emergency").is_none(), "{started}");
    assert_eq!(calm.finish().0, 0);
}

#[test]
fn a_paused_session_resumes_when_the_newcomer_is_killed() {
    let repo = seed_000_repo();
    let dir = gates(&repo);
    let (g_low, g_high) = (dir.join("low"), dir.join("high"));
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("m1", "shell", gated(&g_low))]),
        openai::reply_tool_calls(&[("p1", "shell", gated(&g_high))]),
        openai::reply_text("music done"),
    ]);
    let mut music = Runner::start(&repo, &server, &["--agent", "music_agent", "play"]);
    let music_id = music.session_id();
    music.wait_for("tool_call");
    let mut phone = Runner::start(&repo, &server, &["--agent", "phone_agent", "call"]);
    phone.session_id();
    phone.wait_for("tool_call");
    open(&g_low);
    music.wait_for("paused");
    // The phone's nop dies without a word: nothing on disk changes.
    phone.child.kill().expect("SIGKILL");
    let _ = phone.child.wait();
    music.wait_for("resumed");
    let (code, result) = music.finish();
    assert_eq!(code, 0);
    assert_eq!(result["final_message"], "music done");
    assert_eq!(repo.session_json(&music_id)["status"], "completed");
}

/// A chat session goes through the same admission as a run: while navigation runs, a chat with
/// chat_agent is refused with the reason and leaves no session.
#[test]
fn seed_000_a_chat_is_admitted_like_a_run() {
    let repo = seed_000_repo();
    let g = gates(&repo).join("g");
    let server = MockServer::start(vec![
        openai::reply_tool_calls(&[("a1", "shell", gated(&g))]),
        openai::reply_text("active done"),
    ]);
    let mut runner = Runner::start(&repo, &server, &["--agent", "navigation_agent", "busy"]);
    runner.session_id();
    runner.wait_for("tool_call");
    let before = repo.run(&["sessions", "list", "--json"]);
    let before: Vec<String> = serde_json::from_str::<serde_json::Value>(&before)
        .expect("json")
        .as_array()
        .expect("list")
        .iter()
        .map(|s| s["id"].as_str().expect("id").to_string())
        .collect();
    let out = repo
        .nop_model(&server, "openai")
        .args([
            "run",
            "--agent",
            "chat_agent",
            "--message",
            "tell me a joke",
        ])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(4));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("refused:") && stderr.contains("navigation_agent"),
        "{stderr}"
    );
    let after = repo.run(&["sessions", "list", "--json"]);
    let after: Vec<String> = serde_json::from_str::<serde_json::Value>(&after)
        .expect("json")
        .as_array()
        .expect("list")
        .iter()
        .map(|s| s["id"].as_str().expect("id").to_string())
        .collect();
    assert_eq!(after, before, "a refused chat leaves no session");
    open(&g);
    let (code, _) = runner.finish();
    assert_eq!(code, 0);
}

/// `nop sessions stack` reads the configuration as every command does: the idle timeout given by
/// `--set` or the environment decides whether a session waiting for input still counts.
#[test]
fn sessions_stack_takes_the_idle_timeout_from_set_and_the_environment() {
    let repo = Repo::new();
    let ten_minutes_ago = (chrono::Utc::now() - chrono::Duration::minutes(10)).to_rfc3339();
    let state = json!({"users": {"ana": [{
        "sessionId": "20260101-000000-waiting", "agent": "coder", "priority": 50,
        "interruptible": true, "pid": null, "state": "waiting_input",
        "since": ten_minutes_ago, "updatedAt": ten_minutes_ago,
    }]}});
    let write_state = || {
        std::fs::create_dir_all(repo.path().join(".nop/state")).expect("state dir");
        std::fs::write(
            repo.path().join(".nop/state/active.json"),
            serde_json::to_vec(&state).expect("json"),
        )
        .expect("write");
    };
    let listed = |cmd: &mut assert_cmd::Command| -> usize {
        let output = cmd.output().expect("run nop");
        assert!(output.status.success(), "{output:?}");
        let stack: Value = serde_json::from_slice(&output.stdout).expect("json");
        stack["stack"].as_array().expect("stack").len()
    };
    let stack = ["--user", "ana", "sessions", "stack", "--json"];
    // The default (30 minutes) keeps it.
    write_state();
    assert_eq!(listed(repo.nop().args(stack)), 1);
    write_state();
    let mut set = vec!["--set", "queue.idle_timeout_s=60"];
    set.extend(stack);
    assert_eq!(listed(repo.nop().args(&set)), 0);
    write_state();
    let mut env = repo.nop();
    env.env("NOP_QUEUE_IDLE_TIMEOUT_S", "60").args(stack);
    assert_eq!(listed(&mut env), 0);
}
