//! Answering a batch of chat messages at once (seed 001 §2.2.4–2.2.6): one model request with
//! every waiting message; replies as JSON with delays; if the answer is not that JSON, the
//! `splitter` agent splits the text (tried twice); if that fails too, the whole answer is one
//! reply. Every message and reply is stored with its batch fields. A question about the past
//! brings the matching memory in first, as in `nop run`.

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use super::RunError;
use super::around::{self, Around, Closing, Opening, Priority, UserHooks};
use crate::chat::{Reply, ScheduledReply, batch_instruction, parse_replies, schedule};
use crate::config::Config;
use crate::hooks::Mode;
use crate::protocol::{Message, Role, TokenUsage};
use crate::providers::{ChatRequest, Provider};
use crate::session::Store;
use crate::workspace::Workspace;

const SPLITTER_PROMPT: &str = include_str!("../../.nop/.system/agents/splitter.md");

/// A batch and its replies.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BatchResult {
    pub session_id: String,
    pub batch_id: String,
    pub replies: Vec<ScheduledReply>,
    /// How the replies were made: `json`, `splitter` or `single`.
    pub via: &'static str,
}

/// A chat session held while a front end uses it, as a run holds its session (seed 003): its
/// run lock keeps another `nop run`, `nop chat` or `nop sessions delete` out; its status is
/// `running` while a batch is answered, `waiting_input` between batches and `idle` once left;
/// the session-start and session-end hooks run.
pub struct ChatSession {
    pub id: String,
    agent: String,
    ws: Workspace,
    config: Config,
    store: Store,
    /// Its admission, held for its run lock until the chat is left (its place on seed 000's
    /// stack is left by a behaviour).
    #[expect(dead_code, reason = "held for the run lock it releases when dropped")]
    admitted: super::lifecycle::Admitted,
    /// What `@path` mentions in its messages are read with (the agent's rules, the user's
    /// working directory), as in a run.
    runtime: super::Runtime,
    /// Told as the chat opens and closes (`agent/around/`): the user's session hooks.
    behaviours: Vec<Box<dyn Around>>,
}

impl ChatSession {
    /// Opens an admitted session for chatting (the lifecycle's admission, as for a run: the
    /// agent and its rules, priority, the run lock), for a user working in `cwd`; a new session
    /// gets its system prompt, with the project instructions down to `cwd`.
    pub(super) async fn open(
        runtime: &super::Runtime,
        mut admitted: super::lifecycle::Admitted,
    ) -> Result<ChatSession, RunError> {
        admitted.created().await?;
        let (ws, config, store) = (runtime.workspace(), runtime.config(), runtime.store());
        let resumed = admitted.resumed;
        let id = admitted.session_id.clone();
        let agent = admitted.agent_name.clone();
        if !resumed {
            let now = Utc::now();
            let system = super::prompt::system_prompt(
                ws,
                runtime.cwd(),
                &agent,
                admitted.def.as_ref(),
                now,
            )?;
            store
                .update_async(&id, now, move |state| {
                    state
                        .session
                        .messages
                        .push(Message::new(Role::System, system, now));
                    Ok(())
                })
                .await?;
        }
        let coordinator = admitted.coordinator.clone();
        let mut chat = ChatSession {
            id,
            agent,
            ws: ws.clone(),
            config: config.clone(),
            store: store.clone(),
            admitted,
            runtime: runtime.clone(),
            behaviours: vec![
                Box::new(Priority::new(coordinator)),
                Box::new(UserHooks::new(config.hooks.clone(), ws.root.clone())),
            ],
        };
        chat.set_status(crate::protocol::SessionStatus::WaitingInput)
            .await?;
        // What the behaviours say as the chat opens is not the chat's: its front end shows
        // replies only.
        let (events, _) = tokio::sync::mpsc::unbounded_channel();
        let mut opening = Opening {
            session_id: &chat.id,
            agent: &chat.agent,
            resumed,
            mode: Mode::Chat,
            events: &events,
            run: None,
        };
        around::opened(&mut chat.behaviours, &mut opening).await;
        tracing::info!(session = %chat.id, agent = %chat.agent, op = "chat", result = "started", resumed, "chat started");
        Ok(chat)
    }

    /// Answers one batch (see [`answer_batch`]).
    pub async fn answer(
        &self,
        provider: &Provider,
        messages: Vec<String>,
        cancel: &CancellationToken,
        events: &super::turn::EventSink,
    ) -> Result<BatchResult, RunError> {
        self.set_status(crate::protocol::SessionStatus::Running)
            .await?;
        let messages = self
            .attach_mentions(provider, messages, cancel, events)
            .await?;
        let result = answer_batch(
            &self.ws,
            &self.config,
            &self.store,
            provider,
            &self.id,
            messages,
            cancel,
        )
        .await;
        let after = self
            .set_status(crate::protocol::SessionStatus::WaitingInput)
            .await;
        let result = result?;
        after?;
        Ok(result)
    }

    /// `@path` in the messages attaches the file, through read-file's permission checks, as
    /// `nop run` does; what could not be attached is a warning.
    async fn attach_mentions(
        &self,
        provider: &Provider,
        messages: Vec<String>,
        cancel: &CancellationToken,
        events: &super::turn::EventSink,
    ) -> Result<Vec<String>, RunError> {
        if !messages.iter().any(|m| m.contains('@')) {
            return Ok(messages);
        }
        let engine = super::engine::Engine::new(
            self.ws.clone(),
            self.runtime.cwd().to_path_buf(),
            self.config.clone(),
            self.store.clone(),
            provider.clone(),
            self.runtime.approver.clone(),
            events.clone(),
            super::engine::QueueSettings::default(),
        );
        let ctx =
            engine.tool_context(&self.id, &self.agent, Vec::new(), 0, cancel.clone(), false)?;
        let mut out = Vec::with_capacity(messages.len());
        for message in messages {
            let expanded = super::mentions::expand(&ctx, self.runtime.cwd(), &message).await;
            for message in expanded.warnings {
                let _ = events.send(crate::protocol::events::Event::Warning { message });
            }
            out.push(expanded.text);
        }
        Ok(out)
    }

    /// Records whether (and when) a reply was shown (see [`record_delivery`]).
    pub async fn record_delivery(
        &self,
        reply_id: &str,
        at: Option<DateTime<Utc>>,
    ) -> Result<(), RunError> {
        let (store, id, reply) = (self.store.clone(), self.id.clone(), reply_id.to_string());
        tokio::task::spawn_blocking(move || record_delivery(&store, &id, &reply, at))
            .await
            .map_err(|e| RunError::Agent(format!("recording a delivery failed: {e}")))?
    }

    /// Leaves the chat: status `idle`, the behaviours told (the session-end hooks); the run
    /// lock is released.
    pub async fn close(mut self) -> Result<(), RunError> {
        let (events, _) = tokio::sync::mpsc::unbounded_channel();
        let closing = Closing {
            session_id: &self.id,
            agent: &self.agent,
            mode: Mode::Chat,
            status: crate::protocol::SessionStatus::Idle,
            question: None,
            failed: false,
            tool_calls: 0,
            events: &events,
        };
        let closed = around::close(&self.store, &closing, &mut self.behaviours, |_| ()).await;
        tracing::info!(session = %self.id, agent = %self.agent, op = "chat", result = "ended", "chat ended");
        Ok(closed?)
    }

    async fn set_status(&self, status: crate::protocol::SessionStatus) -> Result<(), RunError> {
        Ok(self.store.set_status_async(&self.id, status).await?)
    }
}

/// One request; `cache_key` is the chat session's id for the batch itself (its history is the
/// prefix the cache holds), `None` for the splitter.
async fn ask(
    provider: &Provider,
    messages: &[Message],
    cache_key: Option<&str>,
    cancel: &CancellationToken,
) -> Result<(String, TokenUsage), RunError> {
    let mut ignore = |_| {};
    let reply = provider
        .complete(
            ChatRequest {
                messages,
                tools: &[],
                cache_key,
            },
            cancel,
            &mut ignore,
        )
        .await?;
    Ok((reply.text, reply.usage))
}

/// Answers `messages` as one batch of session `session_id`. A history question among them
/// brings the matching memory in first (seed 001 §2.3.5), as `nop run` does: a system message
/// just before the batch, stored with the entry ids.
async fn answer_batch(
    ws: &Workspace,
    config: &Config,
    store: &Store,
    provider: &Provider,
    session_id: &str,
    messages: Vec<String>,
    cancel: &CancellationToken,
) -> Result<BatchResult, RunError> {
    let max_delay = config.chat.max_delay_s;
    let price = crate::providers::pricing::price_for(provider.model(), &config.pricing);
    let batch_id = crate::protocol::new_id();
    let now = Utc::now();
    let agent = store.read_recent_async(session_id).await?.session.agent;
    let questions: Vec<&str> = messages.iter().map(String::as_str).collect();
    let today = chrono::Local::now().date_naive();
    let recall =
        super::recall::recall_message(ws, config, &agent, &questions, today).map(|mut m| {
            m.batch_id = Some(batch_id.clone());
            m
        });
    let incoming = incoming(&batch_id, recall, &messages, now);
    // The model answers the whole conversation: read whole.
    let history = store
        .update_whole_async(session_id, now, move |state| {
            state.session.messages.extend(incoming);
            Ok(state.session.messages.clone())
        })
        .await?;
    let mut request = history;
    request.push(Message::new(
        Role::System,
        batch_instruction(max_delay),
        now,
    ));
    let (answer, tokens) = ask(provider, &request, Some(session_id), cancel).await?;
    let mut used = vec![tokens];
    let (replies, via) = match parse_replies(&answer, max_delay) {
        Some(r) => (r, "json"),
        None => {
            split_replies(
                ws, provider, &answer, max_delay, session_id, cancel, &mut used,
            )
            .await?
        }
    };
    let scheduled = schedule(&replies, Utc::now());
    let stored = stored_replies(&scheduled, &batch_id);
    store
        .update_async(session_id, Utc::now(), move |state| {
            state.session.messages.extend(stored);
            for tokens in &used {
                let cost = price.map(|p| p.cost(tokens));
                state.session.usage.own.record(tokens, cost);
            }
            Ok(())
        })
        .await?;
    tracing::info!(session = %session_id, op = "chat", result = via, batch = %batch_id, messages = messages.len(), replies = scheduled.len(), "batch answered");
    Ok(BatchResult {
        session_id: session_id.to_string(),
        batch_id,
        replies: scheduled,
        via,
    })
}

/// The batch as stored: the recalled memory first, then each message of the batch in order.
fn incoming(
    batch_id: &str,
    recall: Option<Message>,
    messages: &[String],
    now: chrono::DateTime<Utc>,
) -> Vec<Message> {
    recall
        .into_iter()
        .chain(messages.iter().enumerate().map(|(i, text)| {
            let mut m = Message::new(Role::User, text.clone(), now);
            m.batch_id = Some(batch_id.to_string());
            m.batch_index = Some(i);
            m
        }))
        .collect()
}

/// An answer that is not replies JSON, split into replies by the splitter agent (two tries),
/// else kept as one reply; the replies and how they were made. What the splitter spent goes
/// to `used`.
async fn split_replies(
    ws: &Workspace,
    provider: &Provider,
    answer: &str,
    max_delay: f64,
    session_id: &str,
    cancel: &CancellationToken,
    used: &mut Vec<crate::protocol::TokenUsage>,
) -> Result<(Vec<Reply>, &'static str), RunError> {
    ws.agents()?; // a broken agents.yml is an error, not a silent fallback
    let prompt = super::prompt::configured_prompt(ws, "splitter", SPLITTER_PROMPT);
    let now = Utc::now();
    let split = [
        Message::new(Role::System, prompt, now),
        Message::new(Role::User, answer.to_string(), now),
    ];
    for attempt in 1..=2 {
        match ask(provider, &split, None, cancel).await {
            Ok((text, tokens)) => {
                used.push(tokens);
                if let Some(r) = parse_replies(&text, max_delay) {
                    return Ok((r, "splitter"));
                }
                tracing::warn!(session = %session_id, op = "chat", result = "retry", attempt, "the splitter did not answer with replies JSON");
            }
            Err(e) => {
                tracing::warn!(session = %session_id, op = "chat", result = "error", attempt, "the splitter failed: {e}")
            }
        }
    }
    let single = Reply {
        content: answer.trim().to_string(),
        send_delay_seconds: 0.0,
    };
    Ok((vec![single], "single"))
}

/// The scheduled replies as the session stores them: each with its batch, order, delay and
/// when it is to be sent (not sent yet).
fn stored_replies(scheduled: &[crate::chat::ScheduledReply], batch_id: &str) -> Vec<Message> {
    scheduled
        .iter()
        .map(|r| {
            let mut m = Message::new(Role::Assistant, r.content.clone(), Utc::now());
            m.reply_id = Some(r.id.clone());
            m.batch_id = Some(batch_id.to_string());
            m.batch_index = Some(r.order);
            m.send_delay_seconds = Some(r.send_delay_seconds);
            m.scheduled_send_at = Some(r.scheduled_send_at);
            m.actual_sent_at = Some(None);
            m
        })
        .collect()
}

/// Records when a reply was shown (`Some`), or that it never was (`None`: the person left).
fn record_delivery(
    store: &Store,
    session_id: &str,
    reply_id: &str,
    at: Option<DateTime<Utc>>,
) -> Result<(), RunError> {
    let mark = |messages: &mut [Message]| match messages
        .iter_mut()
        .find(|m| m.reply_id.as_deref() == Some(reply_id))
    {
        Some(m) => {
            m.actual_sent_at = Some(at);
            m.sent = Some(at.is_some());
            true
        }
        None => false,
    };
    let found = store.update(session_id, Utc::now(), |state| {
        Ok(mark(&mut state.session.messages) || state.session.earlier_messages.is_empty())
    })?;
    if !found {
        // Sealed since it was stored (a long conversation): the sealed files are rewritten
        // from the one that holds it.
        store.update_whole(session_id, Utc::now(), |state| {
            mark(&mut state.session.messages);
            Ok(())
        })?;
    }
    Ok(())
}
