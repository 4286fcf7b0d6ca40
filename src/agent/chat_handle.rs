//! The chat handle: a chat session (seed 001 §2.2) driven as a run is, with [`Op`]s in and
//! [`Event`]s out. What the person types waits for the quiet period, the batch is answered at
//! once, and each reply comes out as a `reply` event when it is due, recorded as sent; replies
//! still due when the person leaves are recorded as not sent.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use chrono::Utc;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::chat::{BatchResult, ChatSession};
use super::error::RunError;
use super::handle::{Handle, Op};
use super::runtime::Runtime;
use crate::chat::{Batcher, ScheduledReply};
use crate::protocol::events::Event;
use crate::providers::Provider;

/// The quiet period after a message before its batch is answered: a random wait in `[min, max]`,
/// started again by every message (zero: at once).
#[derive(Debug, Clone, Copy, Default)]
pub struct Quiet {
    pub min: Duration,
    pub max: Duration,
}

impl Quiet {
    /// The configured period (`chat.batching`, `chat.wait_min_s`, `chat.wait_max_s`).
    pub fn of(config: &crate::config::Config) -> Quiet {
        if !config.chat.batching {
            return Quiet::default();
        }
        Quiet {
            min: Duration::from_secs_f64(config.chat.wait_min_s),
            max: Duration::from_secs_f64(config.chat.wait_max_s),
        }
    }
}

/// A chat session as its front end holds it ([`ChatHandle::chat`], [`ChatHandle::batch`]).
pub type ChatHandle = Handle<()>;

impl ChatHandle {
    /// Opens `session` (or a new chat session of `agent`) for chatting (`nop chat`): each
    /// [`Op::UserInput`] joins the waiting batch; [`Op::Interrupt`] stops the answer being made;
    /// [`Op::Shutdown`] leaves. A session that cannot be chatted in (busy, unknown agent) is an
    /// error here. Returns the session's id with the handle.
    pub async fn chat(
        runtime: &Runtime,
        session: Option<String>,
        agent: &str,
        quiet: Quiet,
    ) -> Result<(String, ChatHandle), RunError> {
        let provider = runtime.provider()?;
        let chat = open_chat(runtime, session, agent).await?;
        let id = chat.id.clone();
        let handle = Handle::spawn(|ops, events| serve(chat, provider, quiet, ops, events));
        Ok((id, handle))
    }

    /// Answers `messages` as one batch at once (`nop run --message a --message b`, seed 001
    /// §3.2 "方案A"): a `batch_answered` event with every reply, then the handle ends.
    pub async fn batch(
        runtime: &Runtime,
        session: Option<String>,
        agent: &str,
        messages: Vec<String>,
    ) -> Result<ChatHandle, RunError> {
        let provider = runtime.provider()?;
        let chat = open_chat(runtime, session, agent).await?;
        Ok(Handle::spawn(|ops, events| {
            answer_once(chat, provider, messages, ops, events)
        }))
    }
}

async fn open_chat(
    runtime: &Runtime,
    session: Option<String>,
    agent: &str,
) -> Result<ChatSession, RunError> {
    let mut request = super::RunRequest {
        session,
        agent: Some(agent.to_string()),
        ..Default::default()
    };
    let admitted = runtime.admit(&mut request).await?;
    ChatSession::open(runtime, admitted).await
}

/// The batch answered at once, then the chat closed.
async fn answer_once(
    chat: ChatSession,
    provider: Provider,
    messages: Vec<String>,
    mut ops: mpsc::UnboundedReceiver<Op>,
    events: mpsc::UnboundedSender<Event>,
) -> Result<(), RunError> {
    let cancel = CancellationToken::new();
    let answered = {
        let answer = chat.answer(&provider, messages, &cancel, &events);
        tokio::pin!(answer);
        loop {
            tokio::select! {
                result = &mut answer => break result,
                Some(op) = ops.recv() => {
                    if matches!(op, Op::Interrupt | Op::Shutdown) {
                        cancel.cancel();
                    }
                }
            }
        }
    };
    let closed = chat.close().await;
    let _ = events.send(answered_event(answered?));
    closed
}

fn answered_event(result: BatchResult) -> Event {
    Event::BatchAnswered {
        session_id: result.session_id,
        batch_id: result.batch_id,
        via: result.via.to_string(),
        replies: result.replies,
    }
}

type Answering<'a> = Pin<Box<dyn Future<Output = Result<BatchResult, RunError>> + Send + 'a>>;

/// The chat's task: batches what is typed, answers each batch when its quiet period is over,
/// and sends each reply out when it is due.
async fn serve(
    chat: ChatSession,
    provider: Provider,
    quiet: Quiet,
    mut ops: mpsc::UnboundedReceiver<Op>,
    events: mpsc::UnboundedSender<Event>,
) -> Result<(), RunError> {
    let start = Instant::now();
    let mut batcher = Batcher::new(quiet.min, quiet.max);
    // Replies in the order they are due: a later batch's first reply can come before an earlier
    // batch's long-delayed one.
    let mut due: VecDeque<(Instant, ScheduledReply)> = VecDeque::new();
    let mut cancel = CancellationToken::new();
    let mut answering: Option<Answering<'_>> = None;
    loop {
        let batch_at = batcher
            .remaining(start.elapsed())
            .filter(|_| answering.is_none())
            .map(|left| Instant::now() + left);
        let reply_at = due.front().map(|(when, _)| *when);
        tokio::select! {
            op = ops.recv() => {
                if !take_op(op, &mut batcher, start, &mut cancel, &events) {
                    break;
                }
            }
            result = until_answered(&mut answering) => {
                answering = None;
                match result {
                    Ok(result) => {
                        schedule_replies(&result, &mut due);
                        let _ = events.send(answered_event(result));
                    }
                    Err(e) => {
                        let _ = events.send(Event::Error { message: e.to_string() });
                    }
                }
            }
            () = sleep_until(batch_at) => {
                if let Some(batch) = batcher.take_if_ready(start.elapsed()) {
                    let (chat, provider, cancel) = (&chat, &provider, cancel.clone());
                    let events = events.clone();
                    answering = Some(Box::pin(async move {
                        chat.answer(provider, batch, &cancel, &events).await
                    }));
                }
            }
            () = sleep_until(reply_at) => deliver_due(&chat, &mut due, &events).await,
        }
    }
    // An answer being made is dropped; replies not shown are recorded as not sent.
    drop(answering);
    for (_, reply) in due {
        record_delivery(&chat, &reply.id, None, &events).await;
    }
    chat.close().await
}

/// An operation from the front end: a message into the batcher (the front end told how long
/// the batch waits), an interrupt of the answer being made, or a warning for what a chat does
/// not have. `false` when the chat ends.
fn take_op(
    op: Option<Op>,
    batcher: &mut Batcher,
    start: Instant,
    cancel: &mut CancellationToken,
    events: &mpsc::UnboundedSender<Event>,
) -> bool {
    let warning = match op {
        None | Some(Op::Shutdown) => return false,
        Some(Op::UserInput { text }) | Some(Op::Queue { text, .. }) => {
            if !text.trim().is_empty() {
                let random = (uuid::Uuid::now_v7().as_u128() & 0xFFFF) as f64 / 65535.0;
                let deadline = batcher.push(text, start.elapsed(), random);
                let wait = deadline.saturating_sub(start.elapsed());
                let _ = events.send(Event::BatchWaiting {
                    wait_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                });
            }
            return true;
        }
        Some(Op::Interrupt) => {
            cancel.cancel();
            *cancel = CancellationToken::new();
            return true;
        }
        Some(Op::Stop | Op::Compact | Op::Approval { .. }) => {
            "a chat has no run to stop or compact: /exit leaves"
        }
        Some(Op::Goal { .. }) => "a chat has no goal: goals belong to `nop run` sessions",
    };
    let _ = events.send(Event::Warning {
        message: warning.into(),
    });
    true
}

/// Each reply of an answered batch is due at its stored `scheduledSendAt` (delays count from
/// the first reply), in the order they are due.
fn schedule_replies(result: &BatchResult, due: &mut VecDeque<(Instant, ScheduledReply)>) {
    let (instant, now) = (Instant::now(), Utc::now());
    for reply in &result.replies {
        due.push_back((instant + crate::chat::due_in(reply, now), reply.clone()));
    }
    due.make_contiguous().sort_by_key(|(when, _)| *when);
}

/// Shows every reply that is due, each recorded as sent.
async fn deliver_due(
    chat: &ChatSession,
    due: &mut VecDeque<(Instant, ScheduledReply)>,
    events: &mpsc::UnboundedSender<Event>,
) {
    while due.front().is_some_and(|(when, _)| *when <= Instant::now()) {
        let Some((_, reply)) = due.pop_front() else {
            break;
        };
        let _ = events.send(Event::Reply {
            session_id: chat.id.clone(),
            reply_id: reply.id.clone(),
            content: reply.content.clone(),
        });
        record_delivery(chat, &reply.id, Some(Utc::now()), events).await;
    }
}

async fn until_answered(answering: &mut Option<Answering<'_>>) -> Result<BatchResult, RunError> {
    match answering {
        Some(answer) => answer.await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Records in the session whether (and when) a reply was shown; a record that cannot be written
/// is a warning and a log line, since the session will not know.
async fn record_delivery(
    chat: &ChatSession,
    reply_id: &str,
    at: Option<chrono::DateTime<Utc>>,
    events: &mpsc::UnboundedSender<Event>,
) {
    let session = chat.id.as_str();
    if let Err(e) = chat.record_delivery(reply_id, at).await {
        let what = if at.is_some() {
            "was shown"
        } else {
            "was not sent"
        };
        tracing::warn!(session, reply = reply_id, error = %e, "reply delivery not recorded");
        let _ = events.send(Event::Warning {
            message: format!(
                "session {session} could not record that reply {reply_id} {what}: {e}"
            ),
        });
    }
}
