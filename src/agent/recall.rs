//! Memory recall (seed 001 §2.3.5): a question about the past brings the matching entries of
//! the agent's knowledge index into the conversation, as a system message just before the
//! question, recorded with the entry ids (`memoryRecall`). `nop run` and chat batches both use it.

use chrono::{NaiveDate, Utc};

use crate::config::Config;
use crate::memory::{Hit, MemoryStore};
use crate::protocol::{Message, Role};
use crate::workspace::Workspace;

/// The most entries one recall brings in.
const MAX_ENTRIES: usize = 5;

/// The recall message for `inputs` (one prompt, or the messages of a chat batch), or `None` when
/// recall is off, no input asks about the past, or nothing matches. Each history question is
/// searched on its own, so that the other messages of a batch do not dilute its words; entries
/// found by several come once, in the order first found.
pub fn recall_message(
    ws: &Workspace,
    config: &Config,
    agent: &str,
    inputs: &[&str],
    today: NaiveDate,
) -> Option<Message> {
    if !config.memory.recall {
        return None;
    }
    let store = MemoryStore::new(&ws.nop_dir());
    let mut hits: Vec<Hit> = Vec::new();
    for input in inputs
        .iter()
        .filter(|i| crate::memory::is_history_question(i, today))
    {
        match store.search(Some(agent), input, today) {
            Ok(found) => {
                for hit in found {
                    if !hits.iter().any(|h| h.id == hit.id) {
                        hits.push(hit);
                    }
                }
            }
            // Memory that cannot be read is no reason to refuse the question; it is said in
            // the log, and `nop memory list` names the file and line.
            Err(e) => {
                tracing::warn!(agent, op = "memory", result = "error", error = %e, "memory not recalled");
                return None;
            }
        }
    }
    if hits.is_empty() {
        return None;
    }
    hits.truncate(MAX_ENTRIES);
    tracing::info!(
        agent,
        op = "memory",
        result = "recalled",
        entries = hits.len(),
        "memory pulled into the context"
    );
    let mut message = Message::new(Role::System, crate::memory::context(&hits), Utc::now());
    message.memory_recall = Some(hits.iter().map(|h| h.id.clone()).collect());
    Some(message)
}
