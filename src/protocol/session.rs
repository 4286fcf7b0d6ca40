//! `session.json`: a session's state and messages (seed 002 §3.1), camelCase on disk.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The `version` this build writes. A file with a higher version is refused, never rewritten.
pub const SESSION_VERSION: u32 = 1;

/// The whole of `session.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionFile {
    pub version: u32,
    pub session_id: String,
    pub agent: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    #[serde(default)]
    pub status: SessionStatus,
    /// Where this session was forked from (one-way: the parent never records its children).
    #[serde(default)]
    pub parent_session: Option<ParentSession>,
    #[serde(default)]
    pub compressions: Vec<CompressionRecord>,
    #[serde(default)]
    pub usage: Usage,
    /// Session-level configuration overrides (dotted keys), between environment and agent layers.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub config: Map<String, Value>,
    /// For a subagent's session: who called it (seed 002 §4.1). One-way, like `parentSession`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<Caller>,
    /// For a subagent's session: what the call cost (seed 002 §4.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<CallMetrics>,
    /// The file checkpoint of each run (turn) of this session, oldest first: what `nop undo` and
    /// `nop rewind` put back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checkpoints: Vec<TurnCheckpoint>,
    /// Required: a file without it is damaged, not an empty conversation (reading it as one would
    /// rewrite it without its history on the next append).
    pub messages: Vec<Message>,
    /// Fields this version does not know, kept so that a rewrite never drops them.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl SessionFile {
    /// A fresh session with no messages.
    pub fn new(session_id: String, agent: String, now: DateTime<Utc>) -> SessionFile {
        SessionFile {
            version: SESSION_VERSION,
            session_id,
            agent,
            created_at: now,
            updated_at: now,
            status: SessionStatus::Idle,
            parent_session: None,
            compressions: Vec::new(),
            usage: Usage::default(),
            config: Map::new(),
            caller: None,
            metrics: None,
            checkpoints: Vec::new(),
            messages: Vec::new(),
            extra: Map::new(),
        }
    }
}

/// Lifecycle of a session as the runtime ("adapter", seed 003) sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    /// Created or finished a step; nothing is running it.
    #[default]
    Idle,
    /// A process is working on it.
    Running,
    /// The agent asked the user something; the next `nop run --session ID` answers.
    WaitingInput,
    /// Paused by a higher-priority session; resumes when that one ends.
    Paused,
    Completed,
    Error,
    Cancelled,
}

impl SessionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            SessionStatus::Idle => "idle",
            SessionStatus::Running => "running",
            SessionStatus::WaitingInput => "waiting_input",
            SessionStatus::Paused => "paused",
            SessionStatus::Completed => "completed",
            SessionStatus::Error => "error",
            SessionStatus::Cancelled => "cancelled",
        }
    }
}

impl std::fmt::Display for SessionStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The reference a forked session keeps to the snapshot it was made from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ParentSession {
    pub id: String,
    pub snapshot_id: String,
    pub timestamp: DateTime<Utc>,
}

/// The working files around one run of a session: git tree ids in the checkpoint store
/// (`.nop/checkpoints/`), before the run and after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnCheckpoint {
    pub before: String,
    /// `None` while the run goes on, or when it never ended (the process was killed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    pub started_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<DateTime<Utc>>,
    /// The session's message count when the run began.
    pub messages_before: usize,
    /// The start of the run's prompt, to recognise the turn by.
    #[serde(default)]
    pub prompt: String,
    /// When `nop undo` put this turn's files back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undone_at: Option<DateTime<Utc>>,
}

/// The session and agent that called a subagent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Caller {
    pub session_id: String,
    pub agent: String,
    /// 1 for an agent called by the top-level run, 2 for one called by that, …
    pub depth: u32,
}

/// Duration, tool calls and tokens of one subagent call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallMetrics {
    pub duration_ms: u64,
    pub tool_calls: u32,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// One compaction of the messages: the snapshot holds what was replaced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompressionRecord {
    pub snapshot_id: String,
    pub timestamp: DateTime<Utc>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

pub use super::usage::Usage;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

impl std::str::FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> Result<Role, String> {
        match s {
            "system" => Ok(Role::System),
            "user" => Ok(Role::User),
            "assistant" => Ok(Role::Assistant),
            "tool" => Ok(Role::Tool),
            other => Err(format!(
                "unknown role `{other}` (expected system, user, assistant or tool)"
            )),
        }
    }
}

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    pub role: Role,
    #[serde(default)]
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<DateTime<Utc>>,
    /// For `role: tool`: the call this message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call: Option<ToolCall>,
    /// For `role: assistant`: the tool calls the model made in this message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Message {
    pub fn new(role: Role, content: impl Into<String>, now: DateTime<Utc>) -> Message {
        Message {
            role,
            content: content.into(),
            timestamp: Some(now),
            tool_call: None,
            tool_calls: Vec::new(),
            extra: Map::new(),
        }
    }
}

/// A tool call as the model made it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    #[serde(default)]
    pub arguments: Value,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
