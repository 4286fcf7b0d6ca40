//! Running a compaction (seed 002 §3.4): the compression check (local pre-check, then
//! compression-advisor) and the compaction itself (consistency check, snapshot, CompactAgent
//! summary, new messages committed under the session's lock). What the new messages are is
//! [`super::compaction`]'s.

use chrono::Utc;
use serde_json::json;

use super::consult::{COMPRESSION_ADVISOR, Host, check_consistency, consult};
use super::{CompressionDecision, compaction};
use crate::hooks::{self, About, HookEvent};
use crate::protocol::events::Event;
use crate::protocol::{CompressionRecord, Message, Role};
use crate::providers::ChatRequest;
use crate::tools::{ToolContext, ToolError, ToolErrorKind};

/// The compression check (seed 002 §3.4): the local pre-check, then compression-advisor.
/// Returns the advisor's reason when it says to compact. `messages` are the session's as the
/// turn loop just read them; the rest of the state is read only when the pre-check fires. The
/// caller lets go of `messages` before it compacts ([`compact`] reads the conversation itself):
/// a long conversation is in memory once.
pub async fn wants_compaction(
    host: &dyn Host,
    ctx: &ToolContext,
    messages: &[Message],
) -> Result<Option<String>, ToolError> {
    // A conversation about to fill the context is compacted, advisors or not: the next request
    // would overflow.
    if let Some(window) = host.provider().crowded(messages) {
        return Ok(Some(format!(
            "the conversation nears the model's context of {window} tokens"
        )));
    }
    // A server that said it has a smaller context than the configuration gives is believed.
    let mut config = host.config().compaction.clone();
    if let Some(window) = host.provider().learned_context_window() {
        config.context_window = config.context_window.min(window);
    }
    if !ctx.advisors || !compaction::needs_check(messages, &config) {
        return Ok(None);
    }
    let state = host.store().read_recent_async(&ctx.session_id).await?;
    let recent: Vec<&Message> = messages.iter().rev().take(10).rev().collect();
    let arguments = json!({
        "sessionId": ctx.session_id,
        "agentType": ctx.agent,
        "messageCount": messages.len(),
        "tokenCount": compaction::estimate_tokens(messages),
        "recentMessages": recent,
        "plan": state.plan.to_xml(),
        "compressionCount": state.session.compressions.len(),
        "lastCompressionTime": state.session.compressions.last().map(|c| c.timestamp.to_rfc3339()),
    });
    Ok(
        match consult::<CompressionDecision>(host, ctx, COMPRESSION_ADVISOR, arguments).await {
            Ok(decision) if decision.should_compress => Some(decision.reason),
            _ => None,
        },
    )
}

/// Compacts the session now: snapshot, CompactAgent summary, new messages, record. `auto`:
/// nop decided it (the advisor, an overflowing context), not the user or the agent.
pub async fn compact(
    host: &dyn Host,
    ctx: &ToolContext,
    reason: &str,
    auto: bool,
) -> Result<Option<String>, ToolError> {
    let store = host.store();
    // The conversation is in memory once: read here, snapshotted from what was read, and let
    // go of (all but what the compaction keeps and a fingerprint) before the CompactAgent is
    // asked.
    let mut state = store.read_async(&ctx.session_id).await?;
    let keep_last = host.config().compaction.keep_last;
    let range = if auto {
        // What is kept verbatim must leave room in the context: half of it at most.
        let window = host
            .provider()
            .learned_context_window()
            .map_or(host.config().compaction.context_window, |w| {
                w.min(host.config().compaction.context_window)
            });
        compaction::replaceable_to_fit(&state.session.messages, keep_last, window / 2)
    } else {
        compaction::replaceable(&state.session.messages, keep_last)
    };
    let Some(range) = range else {
        return Ok(None);
    };
    // Seed 002 §2.2: the consistency check runs before compression, and the summary keeps the
    // plan as checked (repaired, with `consistency.auto_repair`).
    let checked = check_consistency(host, ctx, Some(&mut state)).await;
    let plan = match &checked {
        Some(c) if !c.repairs.is_empty() => store.read_recent_async(&ctx.session_id).await?.plan,
        _ => state.plan.clone(),
    };
    let consistency = checked
        .as_ref()
        .map(|c| compaction::consistency_note(&c.decision, &c.repairs));
    let before = state.session.messages.len();
    let event = HookEvent::BeforeCompact {
        about: About {
            session_id: &ctx.session_id,
            agent: &ctx.agent,
        },
        reason,
        manual: !auto,
        messages: before,
    };
    hooks::fire(&ctx.hooks, &ctx.root, &event).await;
    let (snapshot, state) = store
        .snapshot_of_async(&ctx.session_id, state, Utc::now())
        .await?;
    // The stateless CompactAgent: one model call, no tools, no session of its own. Its request
    // fits in half the server's context (four bytes a token).
    let request = [
        Message::new(Role::System, compaction::COMPACT_PROMPT, Utc::now()),
        Message::new(
            Role::User,
            compaction::render_within(
                &state.session.messages[range.0..range.1],
                super::consult::context_room(host),
            ),
            Utc::now(),
        ),
    ];
    let kept = compaction::Kept::of(&state.session.messages, range);
    let read = compaction::fingerprint(&state.session.messages);
    let goal = state.session.goal.clone();
    drop(state);
    let reply = ask_compact_agent(host, ctx, &request).await?;
    drop(request);
    let new_messages = kept.compacted(&reply.text, &plan, consistency.as_deref(), goal.as_ref());
    let after = new_messages.len();
    let record = CompressionRecord {
        snapshot_id: snapshot.clone(),
        timestamp: Utc::now(),
        messages_before: Some(before),
        messages_after: Some(after),
        reason: Some(reason.to_string()),
        extra: Default::default(),
    };
    // Committed under the session's lock against the conversation it read: anything appended
    // since stays after the compacted part; if the part it read has changed (another compaction
    // finished first), nothing is replaced.
    let tokens = reply.usage;
    let cost = host.charge_advisor(ctx, &tokens);
    let applied = store
        .update_whole_async(&ctx.session_id, Utc::now(), move |s| {
            Ok(replace_read(
                s,
                before,
                read,
                new_messages,
                record,
                (tokens, cost),
            ))
        })
        .await?;
    if !applied {
        tracing::warn!(session = %ctx.session_id, op = "compact", result = "conflict", snapshot = %snapshot, "the conversation changed during the compaction; nothing replaced");
        return Err(ToolError::model(
            ToolErrorKind::CompactionConflict,
            format!(
                "the conversation changed while it was being compacted (another compaction \
                 finished first); nothing was replaced or lost (snapshot {snapshot} is kept)"
            ),
        ));
    }
    tracing::info!(session = %ctx.session_id, op = "compact", result = "ok", snapshot = %snapshot, before, after, "{reason}");
    host.emit(Event::Compacted {
        snapshot_id: snapshot.clone(),
        messages_before: before,
        messages_after: after,
    });
    Ok(Some(snapshot))
}

/// Asks the stateless CompactAgent (one model call, no tools, no session of its own) for the
/// summary, unless its request would pass the run's budget.
async fn ask_compact_agent(
    host: &dyn Host,
    ctx: &ToolContext,
    request: &[Message],
) -> Result<crate::providers::ModelResponse, ToolError> {
    if !host.afford(&crate::providers::meter::estimate_next(None, request, &[])) {
        return Err(ToolError::model(
            ToolErrorKind::CompactionFailed,
            "the CompactAgent was not asked: its request would pass the run's budget \
             (--max-budget-usd)",
        ));
    }
    let mut ignore = |_| {};
    host.provider()
        .complete(
            ChatRequest {
                messages: request,
                tools: &[],
                cache_key: None,
            },
            &ctx.cancel,
            &mut ignore,
        )
        .await
        .map_err(|e| {
            ToolError::model(
                ToolErrorKind::CompactionFailed,
                format!("the CompactAgent failed: {e}"),
            )
        })
}

/// Replaces the first `before` messages of `s` with `compacted` when they are still the ones
/// read (`read`, their fingerprint): anything appended since stays after the compacted part,
/// and the compaction and what it cost are recorded. `false`, replacing nothing, when they
/// changed (another compaction finished first).
fn replace_read(
    s: &mut crate::session::SessionState,
    before: usize,
    read: Option<u64>,
    compacted: Vec<Message>,
    record: CompressionRecord,
    (tokens, cost): (crate::protocol::TokenUsage, Option<f64>),
) -> bool {
    let unchanged = read.is_some()
        && s.session.messages.len() >= before
        && compaction::fingerprint(&s.session.messages[..before]) == read;
    if !unchanged {
        return false;
    }
    let appended: Vec<Message> = s.session.messages.split_off(before);
    s.session.messages = compacted;
    s.session.messages.extend(appended);
    s.session.compressions.push(record);
    s.session.usage.advisors.record(&tokens, cost);
    true
}
