//! `nop chat` and `nop run --message …`: batches of chat messages answered with several replies.

use std::process::ExitCode;

use anyhow::Result;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::run::{OutputFormat, tokio_runtime};
use nop::agent::chat::ChatSession;
use nop::workspace::Workspace;

/// `nop run --message a --message b`: one batch answered at once (seed 001 §3.2 "方案A").
pub fn batch(
    ws: &Workspace,
    config: nop::config::Config,
    env: std::collections::BTreeMap<String, String>,
    session: Option<String>,
    agent: &str,
    messages: Vec<String>,
    format: OutputFormat,
) -> Result<ExitCode> {
    let provider = nop::providers::Provider::from_config(&config.provider, &env)?;
    let store = ws.store(&config);
    let rt = tokio_runtime()?;
    let result = rt.block_on(async {
        let chat = ChatSession::open(ws, &config, &store, session, agent).await?;
        let answered = chat
            .answer(&provider, messages, &CancellationToken::new())
            .await;
        let closed = chat.close().await;
        let result = answered?;
        closed?;
        Ok::<_, nop::agent::RunError>(result)
    })?;
    match format {
        OutputFormat::Text => {
            for r in &result.replies {
                println!("{}", r.content);
            }
        }
        _ => {
            let replies: Vec<serde_json::Value> = result
                .replies
                .iter()
                .map(|r| serde_json::json!({"id": r.id, "content": r.content, "send_delay_seconds": r.send_delay_seconds, "order": r.order}))
                .collect();
            println!(
                "{}",
                serde_json::json!({"session_id": result.session_id, "batch_id": result.batch_id, "via": result.via, "replies": replies})
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `nop chat`: messages are answered in batches after a quiet period, replies shown at their
/// delays. Lines typed while replies are still coming start the next batch.
pub fn chat(
    ws: &Workspace,
    config: nop::config::Config,
    env: std::collections::BTreeMap<String, String>,
    session: Option<String>,
    agent: &str,
) -> Result<ExitCode> {
    use std::collections::VecDeque;
    use std::time::{Duration, Instant};

    let provider = nop::providers::Provider::from_config(&config.provider, &env)?;
    let store = ws.store(&config);
    let rt = tokio_runtime()?;
    let chat = rt.block_on(ChatSession::open(ws, &config, &store, session, agent))?;
    let session = chat.id.clone();
    let (min, max) = if config.chat.batching {
        (
            Duration::from_secs_f64(config.chat.wait_min_s),
            Duration::from_secs_f64(config.chat.wait_max_s),
        )
    } else {
        (Duration::ZERO, Duration::ZERO)
    };
    eprintln!("chatting with {agent} (session {session}); /exit to leave");
    let (tx, mut lines) = mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        let mut line = String::new();
        loop {
            line.clear();
            match stdin.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    if tx.send(line.trim_end().to_string()).is_err() {
                        return;
                    }
                }
            }
        }
    });
    rt.block_on(async {
        let start = Instant::now();
        let mut batcher = nop::chat::Batcher::new(min, max);
        let mut due: VecDeque<(Instant, nop::chat::ScheduledReply)> = VecDeque::new();
        let mut shown_countdown = false;
        let cancel = CancellationToken::new();
        let mut open = true;
        loop {
            tokio::select! {
                line = lines.recv(), if open => match line {
                    None => open = false,
                    Some(text) if text.trim() == "/exit" => open = false,
                    Some(text) if text.trim().is_empty() => {}
                    Some(text) => {
                        let random = (uuid::Uuid::now_v7().as_u128() & 0xFFFF) as f64 / 65535.0;
                        batcher.push(text, start.elapsed(), random);
                    }
                },
                () = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
            if !open {
                // Leaving: replies not shown yet are recorded as not sent, below.
                break;
            }
            if let Some(left) = batcher.remaining(start.elapsed()) {
                eprint!("\r  thinking… {} s ", left.as_secs_f64().ceil() as u64);
                shown_countdown = true;
            }
            if let Some(batch) = batcher.take_if_ready(start.elapsed()) {
                if shown_countdown {
                    eprint!("\r                    \r");
                    shown_countdown = false;
                }
                match chat.answer(&provider, batch, &cancel).await {
                    Ok(result) => {
                        // Each reply is due at its stored `scheduledSendAt` (delays count from the
                        // first reply).
                        let (instant, now) = (Instant::now(), chrono::Utc::now());
                        for r in result.replies {
                            due.push_back((instant + nop::chat::due_in(&r, now), r));
                        }
                        // Shown when due: a later batch's first reply can come before an earlier
                        // batch's long-delayed one.
                        due.make_contiguous().sort_by_key(|(when, _)| *when);
                    }
                    Err(e) => eprintln!("error: {e}"),
                }
            }
            while let Some((when, _)) = due.front() {
                if *when > Instant::now() {
                    break;
                }
                let Some((_, reply)) = due.pop_front() else {
                    break;
                };
                if shown_countdown {
                    eprint!("\r                    \r");
                    shown_countdown = false;
                }
                println!("{agent} › {}", reply.content);
                record_delivery(&chat, &reply.id, Some(chrono::Utc::now())).await;
            }
        }
        // Replies not shown before leaving are recorded as not sent.
        for (_, reply) in due {
            record_delivery(&chat, &reply.id, None).await;
        }
    });
    if let Err(e) = rt.block_on(chat.close()) {
        eprintln!("warning: {e}");
    }
    eprintln!("\nsession {session} saved; continue with: nop chat --session {session}");
    Ok(ExitCode::SUCCESS)
}

/// Records in the session whether (and when) a reply was shown; a record that cannot be written
/// is said on stderr and in the log, since the session will not know.
async fn record_delivery(
    chat: &ChatSession,
    reply_id: &str,
    at: Option<chrono::DateTime<chrono::Utc>>,
) {
    let session = chat.id.as_str();
    if let Err(e) = chat.record_delivery(reply_id, at).await {
        let what = if at.is_some() {
            "was shown"
        } else {
            "was not sent"
        };
        tracing::warn!(session, reply = reply_id, error = %e, "reply delivery not recorded");
        eprintln!("warning: session {session} could not record that reply {reply_id} {what}: {e}");
    }
}
