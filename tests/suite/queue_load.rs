//! The cross-process queue under load (seed 004): twenty `nop send` processes at a time put a
//! thousand messages into five sessions that other `nop run` processes keep busy. Every message
//! lands exactly once, in the session it was sent to, in each sender's order; the test prints the
//! throughput of the sends and the queueing latency of high and normal messages (run it with
//! `--nocapture` to read them).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use chrono::{DateTime, FixedOffset};
use serde_json::{Value, json};

use crate::support::Repo;
use crate::support::mock::{MockServer, RecordedRequest, Responder, openai};

const SESSIONS: usize = 5;
const SENDERS: usize = 20;
const MESSAGES_EACH: usize = 50;
/// Half the senders send normal messages, ten to each session.
const NORMAL_PER_SESSION: usize = SENDERS / 2 * MESSAGES_EACH / SESSIONS;
/// The longest any one phase may take before the test gives up (and kills its runners).
const PHASE_LIMIT: Duration = Duration::from_secs(120);
/// The longest one `nop send` may take.
const SEND_LIMIT: Duration = Duration::from_secs(30);

/// The priority of every message of sender `s`: one per sender, so that each sender's messages
/// to one session must keep their order (FIFO within a priority level).
fn priority_of(sender: usize) -> &'static str {
    if sender.is_multiple_of(2) {
        "high"
    } else {
        "normal"
    }
}

/// The session (by index) that message `seq` of sender `s` goes to.
fn target_of(sender: usize, seq: usize) -> usize {
    (sender + seq) % SESSIONS
}

fn text_of(sender: usize, seq: usize) -> String {
    format!("s{sender:02}-{seq:02}")
}

/// Keeps the main agent busy with quick shell calls until `release` exists, then lets every
/// request end the task with a text answer. Counts the busy turns it handed out.
fn busy_until(release: &Path, busy_turns: Arc<AtomicU64>) -> Responder {
    let release = release.to_path_buf();
    Box::new(move |request: &RecordedRequest| {
        let system = request.body["messages"]
            .as_array()
            .and_then(|m| m.iter().find(|m| m["role"] == "system"))
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default();
        if !system.contains("nop's coding agent") || release.exists() {
            return openai::reply_text("done");
        }
        let n = busy_turns.fetch_add(1, Ordering::Relaxed);
        openai::reply_tool_calls(&[(&format!("busy-{n}"), "shell", json!({"command": "true"}))])
    })
}

/// What a runner's stdout reader reports.
#[derive(Debug)]
enum RunnerEvent {
    /// `session_started`, with the session id.
    Started(String),
    /// End of output: the runner has exited.
    Ended(Stream),
}

/// What a runner's stream-json output said, read to its end.
#[derive(Debug, Default)]
struct Stream {
    /// Sum of the `messages_injected` counts.
    injected: u64,
    result: Option<Value>,
}

/// The `nop run` children: killed and reaped however the test ends, so nothing outlives it.
struct Runners {
    children: Vec<Child>,
    stderr: Vec<Option<JoinHandle<String>>>,
}

impl Runners {
    /// Kills every runner and panics with `why` and what the runners wrote to stderr.
    fn fail(&mut self, why: &str) -> ! {
        self.kill();
        let stderr: Vec<String> = self
            .stderr
            .iter_mut()
            .enumerate()
            .map(|(k, h)| {
                let text = h.take().and_then(|h| h.join().ok()).unwrap_or_default();
                format!("--- runner {k} stderr ---\n{text}")
            })
            .collect();
        panic!("{why}\n{}", stderr.join("\n"));
    }

    fn kill(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Runners {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One queued message as session.json holds it.
#[derive(Debug)]
struct Landed {
    session: usize,
    priority: String,
    latency_ms: f64,
}

fn rfc3339(message: &Value, key: &str) -> DateTime<FixedOffset> {
    let text = message[key]
        .as_str()
        .unwrap_or_else(|| panic!("no {key} in {message}"));
    DateTime::parse_from_rfc3339(text).unwrap_or_else(|e| panic!("{key} {text:?}: {e}"))
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[test]
#[expect(clippy::too_many_lines, reason = "a debt: listed in AGENTS.md")]
fn twenty_senders_fifty_messages_five_busy_sessions() {
    let repo = Repo::new();
    let release = repo.path().join("release");
    let busy_turns = Arc::new(AtomicU64::new(0));
    let server = MockServer::start_with(busy_until(&release, Arc::clone(&busy_turns)));

    // 1. Five runners, each busy with its own task until released.
    let (events_tx, events) = mpsc::channel::<(usize, RunnerEvent)>();
    let mut runners = Runners {
        children: Vec::new(),
        stderr: Vec::new(),
    };
    for k in 0..SESSIONS {
        // agent.max_turns (100) would end a busy task with an error: lift it.
        let mut child = repo
            .nop_model_process(&server, "openai")
            .args([
                "run",
                "--output-format",
                "stream-json",
                "--max-turns",
                "1000000",
            ])
            .arg(format!("task {k}: keep busy until released"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn nop run");
        let stdout = child.stdout.take().expect("stdout");
        let mut stderr = child.stderr.take().expect("stderr");
        runners.children.push(child);
        runners.stderr.push(Some(thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        })));
        let events_tx = events_tx.clone();
        // Drains stdout for the whole run: a full pipe would stall the runner.
        thread::spawn(move || {
            let mut stream = Stream::default();
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let Ok(event) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                match event["type"].as_str() {
                    Some("session_started") => {
                        let id = event["session_id"].as_str().unwrap_or_default();
                        let _ = events_tx.send((k, RunnerEvent::Started(id.to_string())));
                    }
                    Some("messages_injected") => {
                        stream.injected += event["count"].as_u64().unwrap_or_default();
                    }
                    Some("result") => stream.result = Some(event),
                    _ => {}
                }
            }
            let _ = events_tx.send((k, RunnerEvent::Ended(stream)));
        });
    }
    let mut ids: Vec<Option<String>> = vec![None; SESSIONS];
    let deadline = Instant::now() + PHASE_LIMIT;
    while ids.iter().any(Option::is_none) {
        let left = deadline.saturating_duration_since(Instant::now());
        match events.recv_timeout(left) {
            Ok((k, RunnerEvent::Started(id))) => ids[k] = Some(id),
            Ok((k, RunnerEvent::Ended(stream))) => runners.fail(&format!(
                "runner {k} ended before its session started: {stream:?}"
            )),
            Err(_) => runners.fail(&format!(
                "runners not started after {PHASE_LIMIT:?}: {ids:?}"
            )),
        }
    }
    let ids: Vec<String> = ids.into_iter().flatten().collect();

    // 2. Twenty senders, fifty messages each, spread over the five sessions.
    let sends_started = Instant::now();
    let positions: Vec<usize> = thread::scope(|scope| {
        let senders: Vec<_> = (0..SENDERS)
            .map(|s| {
                let (repo, server, ids) = (&repo, &server, &ids);
                scope.spawn(move || {
                    let mut deepest = 0;
                    for seq in 0..MESSAGES_EACH {
                        let id = &ids[target_of(s, seq)];
                        let text = text_of(s, seq);
                        let output = repo
                            .nop_model(server, "openai")
                            .args(["send", "--session", id, "--priority", priority_of(s), &text])
                            .timeout(SEND_LIMIT)
                            .output()
                            .expect("run nop send");
                        let stdout = String::from_utf8_lossy(&output.stdout);
                        assert!(
                            output.status.success(),
                            "nop send {text} to {id} failed ({}):\nstdout: {stdout}\nstderr: {}",
                            output.status,
                            String::from_utf8_lossy(&output.stderr)
                        );
                        let position = stdout
                            .trim()
                            .strip_prefix("queued (position ")
                            .and_then(|p| p.strip_suffix(')'))
                            .and_then(|p| p.parse::<usize>().ok())
                            .unwrap_or_else(|| {
                                panic!(
                                    "nop send {text} to a busy session did not queue: {stdout:?}"
                                )
                            });
                        deepest = deepest.max(position);
                    }
                    deepest
                })
            })
            .collect();
        senders
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    let send_time = sends_started.elapsed();
    let turns_while_sending = busy_turns.load(Ordering::Relaxed);

    // 3. Release: each task ends, then each runner works through its queued normal messages.
    std::fs::write(&release, "").expect("write release");
    let released = Instant::now();
    let mut streams: Vec<Option<Stream>> = (0..SESSIONS).map(|_| None).collect();
    let deadline = Instant::now() + PHASE_LIMIT;
    while streams.iter().any(Option::is_none) {
        let left = deadline.saturating_duration_since(Instant::now());
        match events.recv_timeout(left) {
            Ok((k, RunnerEvent::Ended(stream))) => streams[k] = Some(stream),
            Ok((k, RunnerEvent::Started(id))) => {
                runners.fail(&format!("runner {k} started a second session {id}"))
            }
            Err(_) => {
                let ended: Vec<bool> = streams.iter().map(Option::is_some).collect();
                runners.fail(&format!(
                    "runners still running {PHASE_LIMIT:?} after the release (ended: {ended:?})"
                ))
            }
        }
    }
    let drain_time = released.elapsed();
    for (k, id) in ids.iter().enumerate() {
        let status = runners.children[k].wait().expect("wait for nop run");
        if !status.success() {
            runners.fail(&format!("runner {k} (session {id}) exited with {status}"));
        }
    }
    let streams: Vec<Stream> = streams.into_iter().flatten().collect();

    // 4. Every message exactly once, in its session, in each sender's order; no inbox left.
    let mut landed: BTreeMap<String, Vec<Landed>> = BTreeMap::new();
    // (sender, session) → the sequence numbers in the order the session holds them.
    let mut orders: BTreeMap<(usize, usize), Vec<usize>> = BTreeMap::new();
    let mut problems = Vec::new();
    for (k, id) in ids.iter().enumerate() {
        let session = repo.session_json(id);
        let messages = session["messages"].as_array().expect("messages");
        for m in messages {
            if m["role"] != "user" || m["isInterrupt"] != true {
                continue;
            }
            let text = m["content"].as_str().expect("content").to_string();
            let latency = rfc3339(m, "timestamp") - rfc3339(m, "queuedAt");
            landed.entry(text.clone()).or_default().push(Landed {
                session: k,
                priority: m["priority"].as_str().unwrap_or_default().to_string(),
                latency_ms: latency.num_microseconds().unwrap_or(i64::MAX) as f64 / 1000.0,
            });
            if let Some((s, seq)) = text
                .strip_prefix('s')
                .and_then(|t| t.split_once('-'))
                .and_then(|(s, seq)| Some((s.parse().ok()?, seq.parse().ok()?)))
            {
                orders.entry((s, k)).or_default().push(seq);
            }
        }
        // High messages went in while the task ran; normal ones wait for its answer and are then
        // taken one at a time, each answered before the next.
        let end = messages
            .iter()
            .position(|m| m["role"] == "assistant" && m["content"] == "done")
            .unwrap_or_else(|| panic!("session {k} ({id}) has no answer to its task"));
        for m in &messages[..end] {
            if m["isInterrupt"] == true && m["priority"] != "high" {
                problems.push(format!(
                    "session {k}: {} taken before the task ended",
                    m["content"]
                ));
            }
        }
        let after: Vec<(&str, &str)> = messages[end + 1..]
            .iter()
            .map(|m| {
                (
                    m["role"].as_str().unwrap_or_default(),
                    m["priority"].as_str().unwrap_or("-"),
                )
            })
            .collect();
        // A high message that arrived after the task's last checkpoint (the final model request
        // may be answered only after the release, on a loaded machine) is processed after the
        // task like the others: every queued message is then answered in turn.
        let normal_after = after
            .iter()
            .filter(|(r, p)| *r == "user" && *p == "normal")
            .count();
        let one_by_one = normal_after == NORMAL_PER_SESSION
            && after.len().is_multiple_of(2)
            && after.chunks(2).all(|pair| {
                pair[0].0 == "user" && pair[0].1 != "-" && pair[1] == ("assistant", "-")
            });
        if !one_by_one {
            problems.push(format!(
                "session {k}: after the task, not {NORMAL_PER_SESSION} normal messages each answered in turn: {after:?}"
            ));
        }
        let inbox = repo.session_dir(id).join("inbox");
        let left: Vec<_> = std::fs::read_dir(&inbox)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        if !left.is_empty() {
            problems.push(format!(
                "session {k} ({id}) still has queued files: {left:?}"
            ));
        }
        let result = streams[k].result.as_ref();
        if result.and_then(|r| r["status"].as_str()) != Some("completed") {
            problems.push(format!("runner {k}'s result is not completed: {result:?}"));
        }
    }
    for s in 0..SENDERS {
        for seq in 0..MESSAGES_EACH {
            let text = text_of(s, seq);
            let want = target_of(s, seq);
            match landed.get(&text).map(Vec::as_slice) {
                None | Some([]) => problems.push(format!("{text}: lost (sent to session {want})")),
                Some([one]) if one.session != want => problems.push(format!(
                    "{text}: in session {} instead of {want}",
                    one.session
                )),
                Some([one]) if one.priority != priority_of(s) => problems.push(format!(
                    "{text}: priority {} instead of {}",
                    one.priority,
                    priority_of(s)
                )),
                Some([_]) => {}
                Some(many) => {
                    let sessions: Vec<usize> = many.iter().map(|l| l.session).collect();
                    problems.push(format!(
                        "{text}: {} times, in sessions {sessions:?}",
                        many.len()
                    ))
                }
            }
        }
    }
    let stray: Vec<&String> = landed
        .keys()
        .filter(|t| !(0..SENDERS).any(|s| t.starts_with(&format!("s{s:02}-"))))
        .collect();
    if !stray.is_empty() {
        problems.push(format!("queued messages nobody sent: {stray:?}"));
    }
    for ((s, k), seqs) in &orders {
        if !seqs.is_sorted() {
            problems.push(format!("sender {s} in session {k}: out of order {seqs:?}"));
        }
    }
    for (k, stream) in streams.iter().enumerate() {
        let want = (SENDERS * MESSAGES_EACH / SESSIONS) as u64;
        if stream.injected != want {
            problems.push(format!(
                "runner {k} reported {} messages injected, not {want}",
                stream.injected
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );

    // 5. The figures.
    let latencies = |priority: &str| {
        let mut ms: Vec<f64> = landed
            .values()
            .flatten()
            .filter(|l| l.priority == priority)
            .map(|l| l.latency_ms)
            .collect();
        ms.sort_by(f64::total_cmp);
        ms
    };
    let (high, normal) = (latencies("high"), latencies("normal"));
    let total = SENDERS * MESSAGES_EACH;
    eprintln!(
        "queue load: {total} messages from {SENDERS} senders to {SESSIONS} busy sessions in {:.2} s ({:.0} msg/s); deepest queue position {}",
        send_time.as_secs_f64(),
        total as f64 / send_time.as_secs_f64(),
        positions.iter().max().copied().unwrap_or_default()
    );
    eprintln!(
        "queue load: runners made {turns_while_sending} busy turns while the messages were sent"
    );
    eprintln!(
        "queue load: high ({} msgs, injected at checkpoints): median {:.1} ms, p95 {:.1} ms, max {:.1} ms",
        high.len(),
        percentile(&high, 0.5),
        percentile(&high, 0.95),
        high.last().copied().unwrap_or(f64::NAN)
    );
    eprintln!(
        "queue load: normal ({} msgs, after the task): median {:.1} ms, p95 {:.1} ms, max {:.1} ms",
        normal.len(),
        percentile(&normal, 0.5),
        percentile(&normal, 0.95),
        normal.last().copied().unwrap_or(f64::NAN)
    );
    eprintln!(
        "queue load: release to last runner exit {:.2} s ({:.0} normal msgs/s processed)",
        drain_time.as_secs_f64(),
        normal.len() as f64 / drain_time.as_secs_f64()
    );
}
