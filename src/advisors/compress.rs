//! Running a compaction (seed 002 §3.4): the compression check (local pre-check, then
//! compression-advisor) and the compaction itself (consistency check, snapshot, CompactAgent
//! summary, new messages committed under the session's lock). What the new messages are is
//! [`super::compaction`]'s.

use chrono::Utc;
use serde_json::json;

use super::consult::{COMPRESSION_ADVISOR, Host, check_consistency, consult};
use super::{CompressionDecision, compaction};
use crate::hooks::{self, Hook};
use crate::protocol::events::Event;
use crate::protocol::{CompressionRecord, Message, Role};
use crate::providers::ChatRequest;
use crate::tools::{ToolContext, ToolError, ToolErrorKind};

/// The compression check (seed 002 §3.4): the local pre-check, then compression-advisor, then
/// compaction if it says so. Returns the snapshot id of a compaction that happened.
/// `messages` are the session's as the turn loop just read them; the rest of the state is read
/// only when the pre-check fires.
pub async fn maybe_compact(
    host: &dyn Host,
    ctx: &ToolContext,
    messages: &[Message],
) -> Result<Option<String>, ToolError> {
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
    match consult::<CompressionDecision>(host, ctx, COMPRESSION_ADVISOR, arguments).await {
        Ok(decision) if decision.should_compress => {
            compact(host, ctx, &decision.reason, true).await
        }
        _ => Ok(None),
    }
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
    let state = store.read_async(&ctx.session_id).await?;
    let messages = state.session.messages.clone();
    let Some(range) = compaction::replaceable(&messages, host.config().compaction.keep_last) else {
        return Ok(None);
    };
    // Seed 002 §2.2: the consistency check runs before compression, and the summary keeps the
    // plan as checked (repaired, with `consistency.auto_repair`).
    let checked = check_consistency(host, ctx).await;
    let plan = match &checked {
        Some(c) if !c.repairs.is_empty() => store.read_recent_async(&ctx.session_id).await?.plan,
        _ => state.plan.clone(),
    };
    let consistency = checked
        .as_ref()
        .map(|c| compaction::consistency_note(&c.decision, &c.repairs));
    hooks::fire(&ctx.hooks, Hook::BeforeCompact, &ctx.root, || {
        json!({"session_id": ctx.session_id, "agent": ctx.agent, "reason": reason, "trigger": if auto { "auto" } else { "manual" }, "messages": messages.len()})
    })
    .await;
    let snapshot = store.snapshot_async(&ctx.session_id, Utc::now()).await?;
    // The stateless CompactAgent: one model call, no tools, no session of its own. Its request
    // fits in half the server's context (four bytes a token).
    let window = host
        .provider()
        .learned_context_window()
        .map_or(host.config().compaction.context_window, |w| {
            w.min(host.config().compaction.context_window)
        });
    let room = usize::try_from(window.saturating_mul(2)).unwrap_or(usize::MAX);
    let request = [
        Message::new(Role::System, compaction::COMPACT_PROMPT, Utc::now()),
        Message::new(
            Role::User,
            compaction::render_within(&messages[range.0..range.1], room),
            Utc::now(),
        ),
    ];
    if !host.afford(&crate::providers::meter::estimate_next(None, &request, &[])) {
        return Err(ToolError::model(
            ToolErrorKind::CompactionFailed,
            "the CompactAgent was not asked: its request would pass the run's budget \
             (--max-budget-usd)",
        ));
    }
    let mut ignore = |_| {};
    let reply = host
        .provider()
        .complete(
            ChatRequest {
                messages: &request,
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
        })?;
    let before = messages.len();
    let new_messages = compaction::compacted(
        &messages,
        range,
        &reply.text,
        &plan,
        consistency.as_deref(),
        state.session.goal.as_ref(),
    );
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
    let read = messages.clone();
    let tokens = reply.usage;
    let cost = host.charge_advisor(ctx, &tokens);
    let applied = store
        .update_whole_async(&ctx.session_id, Utc::now(), move |s| {
            let unchanged =
                s.session.messages.len() >= before && s.session.messages[..before] == read[..];
            if !unchanged {
                return Ok(false);
            }
            let appended: Vec<Message> = s.session.messages.split_off(before);
            s.session.messages = new_messages;
            s.session.messages.extend(appended);
            s.session.compressions.push(record);
            s.session.usage.advisors.record(&tokens, cost);
            Ok(true)
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
