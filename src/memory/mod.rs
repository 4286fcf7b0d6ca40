//! Long-term memory (seed 001 §2.1, §2.3): each agent's prompt history (its initial prompt plus
//! appended day summaries, removable only newest first, soft-deleted with audit) and the
//! knowledge index of those summaries, searchable by date expression and keywords.
//!
//! Stored as one JSON file per agent, `.nop/memory/<agent>.json`, written atomically under a
//! cross-process lock; no database.

pub mod dates;
pub mod search;

use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};

use crate::session::{SessionError, write_atomic};

pub const MEMORY_VERSION: u32 = 1;

/// The summarizer's structured output (and what the index keeps of it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SummaryOutput {
    pub summary: String,
    #[serde(default)]
    pub topics: Vec<String>,
    #[serde(default)]
    pub key_points: Vec<String>,
    #[serde(default)]
    pub keywords: Vec<String>,
}

/// A knowledge-index entry (seed 001 §2.3.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IndexEntry {
    pub date: NaiveDate,
    pub summary: String,
    pub topics: Vec<String>,
    pub key_points: Vec<String>,
    pub keywords: Vec<String>,
    pub message_count: usize,
    pub user_message_count: usize,
    pub deleted: bool,
}

/// One appended summary (seed 001 §2.1 `AgentPromptHistory`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    pub id: String,
    pub added_prompt: String,
    pub full_prompt_before: String,
    pub full_prompt_after: String,
    pub summary_date: NaiveDate,
    pub created_at: DateTime<Utc>,
    pub deleted_at: Option<DateTime<Utc>>,
    pub deleted_by: Option<String>,
    pub index: IndexEntry,
}

impl Entry {
    pub fn is_deleted(&self) -> bool {
        self.deleted_at.is_some()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentMemory {
    pub version: u32,
    pub agent: String,
    /// The prompt the history started from (the live prompt file is used for the current prompt).
    pub initial_prompt: String,
    pub entries: Vec<Entry>,
}

impl AgentMemory {
    /// Seed 001 `get_current_prompt`: the initial prompt and every summary not removed, in order.
    pub fn current_prompt(&self, initial: &str) -> String {
        let mut parts = vec![initial.trim_end().to_string()];
        parts.extend(
            self.entries
                .iter()
                .filter(|e| !e.is_deleted())
                .map(|e| e.added_prompt.clone()),
        );
        parts.join("\n\n")
    }

    pub fn remaining(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter().filter(|e| !e.is_deleted())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error("agent `{0}` has no summary to remove: its prompt is the initial prompt")]
    NothingToRemove(String),
    #[error(
        "only the latest summary can be removed (memory is continuous): the latest is {latest} of {date}, not {requested}"
    )]
    NotLatest {
        requested: String,
        latest: String,
        date: NaiveDate,
    },
    #[error("agent `{0}` has no removed summary to restore")]
    NothingToRestore(String),
    #[error("{id} cannot be restored before the newer summary {newer}; remove that one first")]
    RestoreOutOfOrder { id: String, newer: String },
    #[error(
        "agent `{agent}` already has a summary of {date} ({id}); remove it with `nop memory pop` to summarize the day again"
    )]
    AlreadySummarized {
        agent: String,
        date: NaiveDate,
        id: String,
    },
    #[error(transparent)]
    Session(#[from] SessionError),
}

/// What [`MemoryStore::pop`] removed, and the memory it left.
#[derive(Debug, Clone, PartialEq)]
pub struct Popped {
    pub entry: Entry,
    pub after: AgentMemory,
}

impl Popped {
    /// Summaries that remain (seed 001 §3.1 `remaining_count`).
    pub fn remaining_count(&self) -> usize {
        self.after.remaining().count()
    }
}

/// How many characters of the current prompt `nop memory pop` shows.
pub const PROMPT_PREVIEW_CHARS: usize = 200;

/// A preview of a current prompt (seed 001 §3.1 `current_prompt_preview`): its end, where the
/// latest remaining summary is (its start is the initial prompt, the same after every removal).
/// The whole prompt when it is at most `chars` characters, otherwise `…` and its last `chars`.
pub fn prompt_preview(prompt: &str, chars: usize) -> String {
    let prompt = prompt.trim_end();
    let count = prompt.chars().count();
    if count <= chars {
        return prompt.to_string();
    }
    let tail: String = prompt.chars().skip(count - chars).collect();
    format!("…{tail}")
}

/// A search result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hit {
    pub agent: String,
    pub id: String,
    pub score: f64,
    pub entry: IndexEntry,
}

#[derive(Debug, Clone)]
pub struct MemoryStore {
    dir: PathBuf,
}

impl MemoryStore {
    pub fn new(nop_dir: &Path) -> MemoryStore {
        MemoryStore {
            dir: nop_dir.join("memory"),
        }
    }

    fn path(&self, agent: &str) -> PathBuf {
        self.dir.join(format!("{agent}.json"))
    }

    /// The agents that have a memory file.
    pub fn agents(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter_map(|n| n.strip_suffix(".json").map(str::to_string))
            .collect();
        names.sort();
        names
    }

    /// The memory of `agent` (`None` if it has none yet).
    pub fn load(&self, agent: &str) -> Result<Option<AgentMemory>, MemoryError> {
        let path = self.path(agent);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
                MemoryError::Session(SessionError::Corrupt {
                    path,
                    pos: (e.line() > 0).then_some(crate::protocol::TextPos {
                        line: e.line(),
                        column: e.column(),
                    }),
                    message: e.to_string(),
                })
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(MemoryError::Session(SessionError::Io { path, source: e })),
        }
    }

    /// Changes the memory of `agent` under its lock.
    fn change<T>(
        &self,
        agent: &str,
        initial: &str,
        f: impl FnOnce(&mut AgentMemory) -> Result<T, MemoryError>,
    ) -> Result<T, MemoryError> {
        std::fs::create_dir_all(&self.dir).map_err(|e| SessionError::Io {
            path: self.dir.clone(),
            source: e,
        })?;
        // Held until the end of this function.
        let _lock = crate::session::lock_file(
            &self.dir.join(format!("{agent}.lock")),
            crate::session::LockKind::Exclusive,
            Duration::from_secs(10),
            &format!("memory of {agent}"),
        )
        .map_err(SessionError::from)?;
        let mut memory = self.load(agent)?.unwrap_or_else(|| AgentMemory {
            version: MEMORY_VERSION,
            agent: agent.to_string(),
            initial_prompt: initial.to_string(),
            entries: Vec::new(),
        });
        let value = f(&mut memory)?;
        let bytes = crate::session::to_json(&memory, "the prompt history")?;
        write_atomic(&self.path(agent), &bytes)?;
        Ok(value)
    }

    /// Appends a day's summary to the agent's prompt history and index.
    pub fn append(
        &self,
        agent: &str,
        initial: &str,
        date: NaiveDate,
        summary: SummaryOutput,
        counts: (usize, usize),
        now: DateTime<Utc>,
    ) -> Result<Entry, MemoryError> {
        self.change(agent, initial, |memory| {
            if let Some(e) = memory.remaining().find(|e| e.summary_date == date) {
                return Err(MemoryError::AlreadySummarized {
                    agent: agent.to_string(),
                    date,
                    id: e.id.clone(),
                });
            }
            let before = memory.current_prompt(initial);
            let added = format!("[Memory of {date}] {}", summary.summary.trim());
            let entry = Entry {
                id: crate::protocol::new_id(),
                full_prompt_after: format!("{before}\n\n{added}"),
                full_prompt_before: before,
                added_prompt: added,
                summary_date: date,
                created_at: now,
                deleted_at: None,
                deleted_by: None,
                index: IndexEntry {
                    date,
                    summary: summary.summary,
                    topics: summary.topics,
                    key_points: summary.key_points,
                    keywords: summary.keywords,
                    message_count: counts.0,
                    user_message_count: counts.1,
                    deleted: false,
                },
            };
            memory.entries.push(entry.clone());
            Ok(entry)
        })
    }

    /// Removes the latest remaining summary (soft delete, with who and when); `id`, if given,
    /// must be that one. Returns it with the memory as the removal left it (seed 001 §3.1 reports
    /// the remaining count and the current prompt from that).
    pub fn pop(
        &self,
        agent: &str,
        id: Option<&str>,
        by: &str,
        now: DateTime<Utc>,
    ) -> Result<Popped, MemoryError> {
        self.change(agent, "", |memory| {
            let latest = memory
                .entries
                .iter_mut()
                .rev()
                .find(|e| !e.is_deleted())
                .ok_or_else(|| MemoryError::NothingToRemove(agent.to_string()))?;
            if let Some(requested) = id
                && !latest.id.starts_with(requested)
            {
                return Err(MemoryError::NotLatest {
                    requested: requested.to_string(),
                    latest: latest.id.clone(),
                    date: latest.summary_date,
                });
            }
            latest.deleted_at = Some(now);
            latest.deleted_by = Some(by.to_string());
            latest.index.deleted = true;
            let entry = latest.clone();
            Ok(Popped {
                entry,
                after: memory.clone(),
            })
        })
    }

    /// Brings back the most recently removed summary (seed 001 §5.3).
    pub fn restore(&self, agent: &str) -> Result<Entry, MemoryError> {
        self.change(agent, "", |memory| {
            let i = memory
                .entries
                .iter()
                .enumerate()
                .filter(|(_, e)| e.is_deleted())
                .max_by_key(|(_, e)| e.deleted_at)
                .map(|(i, _)| i)
                .ok_or_else(|| MemoryError::NothingToRestore(agent.to_string()))?;
            if let Some(newer) = memory.entries[i + 1..].iter().find(|e| !e.is_deleted()) {
                return Err(MemoryError::RestoreOutOfOrder {
                    id: memory.entries[i].id.clone(),
                    newer: newer.id.clone(),
                });
            }
            let entry = &mut memory.entries[i];
            entry.deleted_at = None;
            entry.deleted_by = None;
            entry.index.deleted = false;
            Ok(entry.clone())
        })
    }

    /// Entries of `agent` (or of every agent) matching `query`: its date expressions filter,
    /// its other words rank (BM25); newest first on ties; removed entries never.
    pub fn search(
        &self,
        agent: Option<&str>,
        query: &str,
        today: NaiveDate,
    ) -> Result<Vec<Hit>, MemoryError> {
        let agents = match agent {
            Some(a) => vec![a.to_string()],
            None => self.agents(),
        };
        let mut candidates: Vec<(String, Entry)> = Vec::new();
        for a in agents {
            if let Some(memory) = self.load(&a)? {
                candidates.extend(
                    memory
                        .entries
                        .into_iter()
                        .filter(|e| !e.is_deleted())
                        .map(|e| (a.clone(), e)),
                );
            }
        }
        let (ranges, rest) = dates::parse(query, today);
        if !ranges.is_empty() {
            candidates.retain(|(_, e)| ranges.iter().any(|r| r.contains(e.summary_date)));
        }
        let has_words = !search::query_tokens(&rest).is_empty();
        let docs: Vec<search::Doc<'_>> = candidates
            .iter()
            .map(|(_, e)| search::Doc {
                fields: {
                    let mut f: Vec<(&str, f64)> = vec![(e.index.summary.as_str(), 1.0)];
                    f.extend(e.index.topics.iter().map(|t| (t.as_str(), 3.0)));
                    f.extend(e.index.keywords.iter().map(|k| (k.as_str(), 3.0)));
                    f.extend(e.index.key_points.iter().map(|k| (k.as_str(), 1.0)));
                    f
                },
            })
            .collect();
        let scores = search::bm25(&rest, &docs);
        let mut hits: Vec<Hit> = candidates
            .into_iter()
            .zip(scores)
            .filter(|(_, score)| !has_words || *score > 0.0)
            .map(|((agent, e), score)| Hit {
                agent,
                id: e.id,
                score,
                entry: e.index,
            })
            .collect();
        if !has_words && ranges.is_empty() {
            return Ok(Vec::new());
        }
        hits.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then(b.entry.date.cmp(&a.entry.date))
        });
        Ok(hits)
    }
}

/// Whether a message asks about the past (seed 001 §2.3.5), so memory is worth pulling in.
pub fn is_history_question(text: &str, today: NaiveDate) -> bool {
    let lower = text.to_lowercase();
    let phrases = [
        "之前",
        "以前",
        "上次",
        "发生了什么",
        "讨论了什么",
        "聊了什么",
        "做了什么",
        "改了什么",
        "what did we",
        "what have we",
        "last time",
        "previously",
        "earlier session",
        "remember",
    ];
    phrases.iter().any(|p| lower.contains(p)) || !dates::parse(text, today).0.is_empty()
}

/// The memory context put before a history question.
pub fn context(hits: &[Hit]) -> String {
    let mut out = String::from("[Relevant memory from earlier sessions of this repository]");
    for h in hits {
        out.push_str(&format!(
            "\n- {} ({}): {}",
            h.entry.date, h.agent, h.entry.summary
        ));
        if !h.entry.key_points.is_empty() {
            out.push_str(&format!(" Key points: {}.", h.entry.key_points.join("; ")));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(text: &str, keywords: &[&str]) -> SummaryOutput {
        SummaryOutput {
            summary: text.into(),
            topics: Vec::new(),
            key_points: Vec::new(),
            keywords: keywords.iter().map(|k| k.to_string()).collect(),
        }
    }

    fn d(s: &str) -> NaiveDate {
        NaiveDate::parse_from_str(s, "%Y-%m-%d").expect("date")
    }

    #[test]
    fn a_prompt_preview_is_its_end() {
        assert_eq!(prompt_preview("short\n", 10), "short");
        assert_eq!(prompt_preview("0123456789abc", 3), "…abc");
        // Characters, not bytes: a Chinese summary is never cut inside a character.
        assert_eq!(
            prompt_preview("初始提示词。昨天修了解析器", 5),
            "…修了解析器"
        );
    }

    #[test]
    #[expect(clippy::too_many_lines, reason = "a debt: listed in AGENTS.md")]
    fn ordered_removal_restore_and_the_current_prompt() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let store = MemoryStore::new(dir.path());
        let now = Utc::now();
        let a = store.append(
            "coder",
            "BASE",
            d("2026-11-19"),
            summary("fixed the parser", &["parser"]),
            (10, 4),
            now,
        )?;
        let b = store.append(
            "coder",
            "BASE",
            d("2026-11-20"),
            summary("added permissions", &["permissions"]),
            (8, 3),
            now,
        )?;
        let c = store.append(
            "coder",
            "BASE",
            d("2026-11-21"),
            summary("sandboxed the shell", &["sandbox"]),
            (6, 2),
            now,
        )?;
        let prompt = |s: &MemoryStore| {
            s.load("coder")
                .map(|m| m.map(|m| m.current_prompt("BASE")).unwrap_or_default())
        };
        assert_eq!(
            prompt(&store)?,
            format!(
                "BASE\n\n{}\n\n{}\n\n{}",
                a.added_prompt, b.added_prompt, c.added_prompt
            )
        );
        assert_eq!(
            c.full_prompt_before,
            format!("BASE\n\n{}\n\n{}", a.added_prompt, b.added_prompt)
        );
        // Not the latest: refused with the reason.
        let err = store
            .pop("coder", Some(&a.id), "tester", now)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("only the latest summary can be removed") && err.contains(&c.id),
            "{err}"
        );
        let popped = store.pop("coder", None, "tester", now)?;
        assert_eq!(
            (popped.entry.id.as_str(), popped.entry.deleted_by.as_deref()),
            (c.id.as_str(), Some("tester"))
        );
        assert_eq!(
            prompt(&store)?,
            format!("BASE\n\n{}\n\n{}", a.added_prompt, b.added_prompt)
        );
        // What the removal left: two summaries, and the prompt they make.
        assert_eq!(popped.remaining_count(), 2);
        assert_eq!(popped.after.current_prompt("BASE"), prompt(&store)?);
        store.pop(
            "coder",
            Some(&b.id),
            "tester",
            now + chrono::Duration::seconds(1),
        )?;
        store.pop("coder", None, "tester", now + chrono::Duration::seconds(2))?;
        assert_eq!(prompt(&store)?, "BASE");
        assert!(matches!(
            store.pop("coder", None, "tester", now),
            Err(MemoryError::NothingToRemove(_))
        ));
        // Removed entries never come back in search; restore brings back the last removed (a).
        assert!(
            store
                .search(Some("coder"), "parser", d("2026-11-22"))?
                .is_empty()
        );
        assert_eq!(store.restore("coder")?.id, a.id);
        assert_eq!(
            store
                .search(Some("coder"), "parser", d("2026-11-22"))?
                .len(),
            1
        );
        assert_eq!(store.restore("coder")?.id, b.id);
        assert_eq!(store.restore("coder")?.id, c.id);
        assert!(matches!(
            store.restore("coder"),
            Err(MemoryError::NothingToRestore(_))
        ));
        let memory = store
            .load("coder")?
            .ok_or_else(|| anyhow::anyhow!("memory"))?;
        assert!(
            memory
                .entries
                .iter()
                .all(|e| !e.index.deleted && e.deleted_at.is_none())
        );
        // One summary per day.
        assert!(matches!(
            store.append(
                "coder",
                "BASE",
                d("2026-11-21"),
                summary("again", &[]),
                (1, 1),
                now
            ),
            Err(MemoryError::AlreadySummarized { .. })
        ));
        Ok(())
    }

    #[test]
    fn history_questions_are_recognised() {
        let today = d("2026-11-22");
        for q in [
            "昨天我们做了什么",
            "what did we change last week?",
            "上周的权限讨论",
            "Remember the parser bug?",
        ] {
            assert!(is_history_question(q, today), "{q}");
        }
        for q in ["fix the failing test", "写一个解析器"] {
            assert!(!is_history_question(q, today), "{q}");
        }
    }
}
