//! Advisor consultation (seed 002 §2) and compaction (§3.4) for a run: each advisor is asked
//! through `call-agent`'s permission check, answers in its own session, and any failure gives
//! the safe default; compaction runs the consistency check first.

use std::time::Duration;

use chrono::Utc;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::engine::Engine;
use crate::advisors::{
    self, AdvisorError, CompressionDecision, ConsistencyDecision, RetryDecision, compaction,
};
use crate::protocol::events::Event;
use crate::protocol::{CompressionRecord, Message, Role, SessionStatus, ToolCall};
use crate::providers::ChatRequest;
use crate::tools::{ToolContext, ToolError, ToolErrorKind};

/// The advisor agents' names (seed 002 §2.2).
pub const CONSISTENCY_CHECKER: &str = "consistency-checker";
pub const RETRY_ADVISOR: &str = "retry-advisor";
pub const COMPRESSION_ADVISOR: &str = "compression-advisor";

/// What a consistency check found, and what an automatic repair changed.
#[derive(Debug, Clone)]
pub struct Checked {
    pub decision: ConsistencyDecision,
    /// One line per change made to plan.xml (`consistency.auto_repair`); empty otherwise.
    pub repairs: Vec<String>,
}

impl Engine {
    /// Asks `advisor` (with `arguments`, seed 002 §2.3) for a decision of type `T`. `Err` says why
    /// the caller must fall back to its safe default; it is also logged as a WARN.
    pub async fn consult<T: DeserializeOwned>(
        &self,
        ctx: &ToolContext,
        advisor: &str,
        arguments: Value,
    ) -> Result<T, AdvisorError> {
        if !ctx.advisors {
            return Err(AdvisorError::Off);
        }
        // An advisor is consulted through `call-agent` (seed 002 §2.1): the caller's permissions
        // decide, as for the tool, and a refusal is recorded like the tool's.
        if let Err(reason) = self.may_call(ctx, advisor) {
            ctx.approver.record_denial("call-agent", &reason);
            let why = AdvisorError::Denied {
                advisor: advisor.to_string(),
                reason,
            };
            tracing::warn!(session = %ctx.session_id, op = "advisor", advisor, result = "denied", "{why}; using the safe default");
            self.emit(Event::Warning {
                message: format!("{why}; using the safe default"),
            });
            return Err(why);
        }
        let key = format!("{}\u{0}{advisor}\u{0}{arguments}", ctx.session_id);
        let cached = self.0.cache.lock().ok().and_then(|c| c.get(&key).cloned());
        let result =
            match cached {
                Some(value) => serde_json::from_value(value).map_err(|e| AdvisorError::Schema {
                    advisor: advisor.to_string(),
                    detail: e.to_string(),
                }),
                None => {
                    let input = format!(
                        "Arguments:\n```json\n{}\n```\nAnswer with the JSON object only.",
                        serde_json::to_string_pretty(&arguments).unwrap_or_default()
                    );
                    let timeout = Duration::from_secs_f64(self.0.config.advisors.timeout_s);
                    match self.run_subagent(ctx, advisor, input, timeout, true).await {
                        Ok(outcome) if outcome.status == SessionStatus::Completed => {
                            match advisors::extract_json(&outcome.message) {
                                Some(value) => {
                                    let parsed = serde_json::from_value::<T>(value.clone())
                                        .map_err(|e| AdvisorError::Schema {
                                            advisor: advisor.to_string(),
                                            detail: e.to_string(),
                                        });
                                    if parsed.is_ok()
                                        && let Ok(mut cache) = self.0.cache.lock()
                                    {
                                        cache.insert(key, value);
                                    }
                                    parsed
                                }
                                None => Err(AdvisorError::NotJson {
                                    advisor: advisor.to_string(),
                                }),
                            }
                        }
                        Ok(outcome) => Err(AdvisorError::Ended {
                            advisor: advisor.to_string(),
                            status: outcome.status,
                            message: outcome.message,
                        }),
                        Err(source) => Err(AdvisorError::Call {
                            advisor: advisor.to_string(),
                            source,
                        }),
                    }
                }
            };
        if let Err(why) = &result {
            tracing::warn!(session = %ctx.session_id, op = "advisor", advisor, result = "default", "{why}; using the safe default");
            self.emit(Event::Warning {
                message: format!("{why}; using the safe default"),
            });
        }
        result
    }

    /// Whether the agent of `ctx` may call `target` with `call-agent`: the tool itself and
    /// `call-agent:<target>`, under its permission files as they are now. A rule that asks a
    /// person counts as a refusal here: nobody is asked about an advisor.
    fn may_call(&self, ctx: &ToolContext, target: &str) -> Result<(), String> {
        let policy = crate::permissions::load_chain(&ctx.root, &ctx.agent, &ctx.ancestors)
            .map_err(|e| format!("the permission files cannot be read: {e}"))?;
        for tool in ["call-agent".to_string(), format!("call-agent:{target}")] {
            match policy.check_tool(&tool) {
                crate::permissions::Decision::Allow { .. } => {}
                crate::permissions::Decision::Deny { reason, source } => {
                    let rule = source.map(|s| format!(" ({s})")).unwrap_or_default();
                    return Err(format!("{reason}{rule}"));
                }
                crate::permissions::Decision::Ask { source } => {
                    return Err(format!("calling `{tool}` needs approval ({source})"));
                }
            }
        }
        Ok(())
    }

    /// Asks retry-advisor about a failed call (seed 002 §4.3); the default is not to retry.
    pub async fn advise_retry(
        &self,
        ctx: &ToolContext,
        call: &ToolCall,
        error: &ToolError,
        retries: u32,
    ) -> RetryDecision {
        let arguments = json!({
            "errorType": error.kind(),
            "errorMessage": error.to_string(),
            // No real stack exists for a tool call; what failed where is the useful part, and leaving
            // the call id out lets identical failures share one decision.
            "stackTrace": format!("{} failed with {}", call.name, error.kind()),
            "toolName": call.name,
            "arguments": call.arguments,
            "retryCount": retries,
        });
        self.consult(ctx, RETRY_ADVISOR, arguments)
            .await
            .unwrap_or_else(|why| RetryDecision::default_no_retry(&why.to_string()))
    }

    /// Asks consistency-checker whether plan.xml and the messages agree (seed 002 §3.3); `None`
    /// when the plan is empty (nothing to check) or the advisor gave no valid answer. Each
    /// finding is a warning; with `consistency.auto_repair` the findings are applied to plan.xml
    /// after a snapshot, and session.json records what changed (`consistencyRepairs`).
    pub async fn check_consistency(&self, ctx: &ToolContext) -> Option<Checked> {
        let state = self.0.store.read_async(&ctx.session_id).await.ok()?;
        if state.plan.tasks.is_empty() {
            return None;
        }
        let arguments = json!({
            "plan": state.plan.to_xml(),
            "session": serde_json::to_string(&state.session).unwrap_or_default(),
            "sessionId": ctx.session_id,
        });
        let decision: ConsistencyDecision = self
            .consult(ctx, CONSISTENCY_CHECKER, arguments)
            .await
            .ok()?;
        let mut checked = Checked {
            decision,
            repairs: Vec::new(),
        };
        if checked.decision.consistent {
            return Some(checked);
        }
        for i in &checked.decision.inconsistencies {
            let message = format!(
                "plan and conversation disagree on task {} ({:?}, {:?}): {} — {}",
                i.task_id, i.kind, i.severity, i.description, i.suggestion
            );
            tracing::warn!(session = %ctx.session_id, op = "consistency", result = "inconsistent", "{message}");
            self.emit(Event::Warning { message });
        }
        if self.0.config.consistency.auto_repair {
            match self.repair_plan(ctx, &checked.decision).await {
                Ok(repairs) => checked.repairs = repairs,
                Err(e) => {
                    let message = format!("the plan could not be repaired: {e}");
                    tracing::warn!(session = %ctx.session_id, op = "consistency", result = "error", "{message}");
                    self.emit(Event::Warning { message });
                }
            }
        }
        Some(checked)
    }

    /// Applies `decision` to plan.xml under the session lock, after a snapshot of the session as
    /// it was; records the changes in session.json. Returns them (none: nothing written).
    async fn repair_plan(
        &self,
        ctx: &ToolContext,
        decision: &ConsistencyDecision,
    ) -> Result<Vec<String>, crate::session::SessionError> {
        let store = self.0.store.clone();
        let id = ctx.session_id.clone();
        let decision = decision.clone();
        let repaired =
            tokio::task::spawn_blocking(move || -> Result<_, crate::session::SessionError> {
                let mut probe = store.read(&id)?.plan;
                if advisors::repair(&mut probe, &decision).is_empty() {
                    return Ok((Vec::new(), None));
                }
                let snapshot = store.snapshot(&id, Utc::now())?;
                let changes = store.update(&id, Utc::now(), |state| {
                    let changes = advisors::repair(&mut state.plan, &decision);
                    if !changes.is_empty() {
                        let record = json!({
                            "timestamp": Utc::now().to_rfc3339(),
                            "snapshotId": snapshot,
                            "changes": changes,
                        });
                        match state.session.extra.get_mut("consistencyRepairs") {
                            Some(Value::Array(records)) => records.push(record),
                            _ => {
                                state
                                    .session
                                    .extra
                                    .insert("consistencyRepairs".into(), json!([record]));
                            }
                        }
                    }
                    Ok(changes)
                })?;
                Ok((changes, Some(snapshot)))
            })
            .await
            .map_err(|e| crate::session::SessionError::Io {
                path: self.0.store.dir(&ctx.session_id),
                source: std::io::Error::other(e.to_string()),
            })??;
        let (changes, snapshot) = repaired;
        if !changes.is_empty() {
            let snapshot = snapshot.unwrap_or_default();
            tracing::info!(session = %ctx.session_id, op = "consistency", result = "repaired", snapshot = %snapshot, "plan repaired: {}", changes.join("; "));
            self.emit(Event::Warning {
                message: format!(
                    "plan.xml repaired from the consistency check (snapshot {snapshot} holds it as it was): {}",
                    changes.join("; ")
                ),
            });
        }
        Ok(changes)
    }

    /// The compression check (seed 002 §3.4): the local pre-check, then compression-advisor, then
    /// compaction if it says so. Returns the snapshot id of a compaction that happened.
    /// `messages` are the session's as the turn loop just read them; the rest of the state is
    /// read only when the pre-check fires.
    pub async fn maybe_compact(
        &self,
        ctx: &ToolContext,
        messages: &[Message],
    ) -> Result<Option<String>, ToolError> {
        if !ctx.advisors || !compaction::needs_check(messages, &self.0.config.compaction) {
            return Ok(None);
        }
        let state = self.0.store.read_async(&ctx.session_id).await?;
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
        match self
            .consult::<CompressionDecision>(ctx, COMPRESSION_ADVISOR, arguments)
            .await
        {
            Ok(decision) if decision.should_compress => self.compact(ctx, &decision.reason).await,
            _ => Ok(None),
        }
    }

    /// Compacts the session now: snapshot, CompactAgent summary, new messages, record.
    pub async fn compact(
        &self,
        ctx: &ToolContext,
        reason: &str,
    ) -> Result<Option<String>, ToolError> {
        let store = &self.0.store;
        let state = store.read_async(&ctx.session_id).await?;
        let messages = state.session.messages.clone();
        let Some(range) = compaction::replaceable(&messages, self.0.config.compaction.keep_last)
        else {
            return Ok(None);
        };
        // Seed 002 §2.2: the consistency check runs before compression, and the summary keeps
        // the plan as checked (repaired, with `consistency.auto_repair`).
        let checked = self.check_consistency(ctx).await;
        let plan = match &checked {
            Some(c) if !c.repairs.is_empty() => store.read_async(&ctx.session_id).await?.plan,
            _ => state.plan.clone(),
        };
        let consistency = checked
            .as_ref()
            .map(|c| compaction::consistency_note(&c.decision, &c.repairs));
        if !ctx.hooks.before_compact.is_empty() {
            let payload = json!({"session_id": ctx.session_id, "agent": ctx.agent, "reason": reason, "messages": messages.len()});
            let timeout = ctx.hooks.timeout();
            crate::hooks::run(
                "before-compact",
                &ctx.hooks.before_compact,
                &payload,
                &ctx.root,
                timeout,
            )
            .await;
        }
        let snapshot = store.snapshot_async(&ctx.session_id, Utc::now()).await?;
        // The stateless CompactAgent: one model call, no tools, no session of its own.
        let request = [
            Message::new(Role::System, compaction::COMPACT_PROMPT, Utc::now()),
            Message::new(
                Role::User,
                compaction::render(&messages[range.0..range.1]),
                Utc::now(),
            ),
        ];
        let mut ignore = |_| {};
        let reply = self
            .0
            .provider
            .complete(
                ChatRequest {
                    messages: &request,
                    tools: &[],
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
        let new_messages =
            compaction::compacted(&messages, range, &reply.text, &plan, consistency.as_deref());
        let after = new_messages.len();
        let record = CompressionRecord {
            snapshot_id: snapshot.clone(),
            timestamp: Utc::now(),
            extra: [
                ("messagesBefore".to_string(), json!(before)),
                ("messagesAfter".to_string(), json!(after)),
                ("reason".to_string(), json!(reason)),
            ]
            .into_iter()
            .collect(),
        };
        // Committed under the session's lock against the conversation it read: anything appended
        // since stays after the compacted part; if the part it read has changed (another
        // compaction finished first), nothing is replaced.
        let read = messages.clone();
        let (input_tokens, output_tokens) = (reply.input_tokens, reply.output_tokens);
        let applied = store
            .update_async(&ctx.session_id, Utc::now(), move |s| {
                let unchanged =
                    s.session.messages.len() >= before && s.session.messages[..before] == read[..];
                if !unchanged {
                    return Ok(false);
                }
                let appended: Vec<Message> = s.session.messages.split_off(before);
                s.session.messages = new_messages;
                s.session.messages.extend(appended);
                s.session.compressions.push(record);
                s.session.usage.input_tokens += input_tokens;
                s.session.usage.output_tokens += output_tokens;
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
        self.emit(Event::Compacted {
            snapshot_id: snapshot.clone(),
            messages_before: before,
            messages_after: after,
        });
        Ok(Some(snapshot))
    }
}
