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
    /// The earlier messages of a long conversation, oldest first, in files of their own beside
    /// session.json (`messages-*.json`, written once and never changed), so that a write costs
    /// the same however long the conversation grows; `messages` holds the ones after them.
    /// Absent while the conversation fits in session.json. Only the store's reading of the file
    /// sees it filled: a session read whole has every message in `messages` and this empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub earlier_messages: Vec<SealedMessages>,
    /// Required: a file without it is damaged, not an empty conversation (reading it as one would
    /// rewrite it without its history on the next append).
    pub messages: Vec<Message>,
    // The fields below come after `messages` because older versions kept them in `extra`,
    // which is written last: the order keeps a rewritten file byte for byte the same.
    /// Seed 000 §3: the priority the session runs with (absent for an agent outside preemption).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u8>,
    /// Seed 000: whether a higher-priority session may pause this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interruptible: Option<bool>,
    /// Why the emergency boost was given (e.g. `keyword "紧急"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub emergency: Option<String>,
    /// For a subagent's session: where its permissions come from (seed 002 §5.4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permissions: Option<PermissionSource>,
    /// Why the session stopped when a stop word ended it (seed 004).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// The plan repairs the consistency check applied, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub consistency_repairs: Vec<ConsistencyRepair>,
    /// What the last consistency check on load covered, carried forward to the end of the run
    /// that followed it: a load that finds the same plan and conversation skips the check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consistency_checked: Option<ConsistencyChecked>,
    /// The objective that outlives one prompt (`nop run --goal`, `/goal`): checked whenever the
    /// agent stops, kept by every compaction and by a resume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<Goal>,
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
            earlier_messages: Vec::new(),
            messages: Vec::new(),
            priority: None,
            interruptible: None,
            emergency: None,
            permissions: None,
            stop_reason: None,
            consistency_repairs: Vec::new(),
            consistency_checked: None,
            goal: None,
            extra: Map::new(),
        }
    }
}

/// One file of a conversation's earlier messages, as session.json names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SealedMessages {
    /// Its name in the session's directory: `messages-<index of its first message>-<id>.json`.
    pub file: String,
    /// How many messages it holds.
    pub count: usize,
}

/// The version of `messages-*.json` this build writes.
pub const SEALED_VERSION: u32 = 1;

/// What a `messages-*.json` file holds: a run of a conversation's messages, from the one at
/// index `first` (0-based, in the whole conversation) on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SealedFile {
    pub version: u32,
    pub first: usize,
    pub messages: Vec<Message>,
}

/// A session's goal: what should be true, how to check it, and each check so far.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Goal {
    pub objective: String,
    /// A command whose exit code and output tail the goal-checker reads (`--until`); run in the
    /// agent's sandbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    pub set_at: DateTime<Utc>,
    #[serde(default)]
    pub status: GoalStatus,
    #[serde(default)]
    pub checks: Vec<GoalCheck>,
}

/// Whether a goal is still pursued.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GoalStatus {
    /// Checked whenever the agent stops; the run goes on while it is not met.
    #[default]
    Active,
    Met,
    /// A run ended without meeting it (its turns, budget or time ran out): the next run goes
    /// on with it.
    NotMet,
    /// Cleared by the user (`/goal clear`).
    Cleared,
}

impl GoalStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            GoalStatus::Active => "active",
            GoalStatus::Met => "met",
            GoalStatus::NotMet => "not-met",
            GoalStatus::Cleared => "cleared",
        }
    }
}

/// One check of a goal, when the agent stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GoalCheck {
    pub at: DateTime<Utc>,
    pub met: bool,
    pub reason: String,
    /// The `until` command's exit code, when there is one (`None`: it could not run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
}

/// Where a subagent's permission rules come from: its own files, and each caller's that
/// narrows them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PermissionSource {
    pub agent: Option<String>,
    #[serde(default)]
    pub files: Vec<String>,
    #[serde(default)]
    pub narrowed_by: Vec<PermissionSet>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One caller's rules narrowing a subagent's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PermissionSet {
    pub agent: String,
    #[serde(default)]
    pub files: Vec<String>,
    /// The calling session (for the direct caller only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One repair of the plan by the consistency check, after a snapshot of the session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsistencyRepair {
    #[serde(with = "offset_time")]
    pub timestamp: DateTime<Utc>,
    pub snapshot_id: String,
    #[serde(default)]
    pub changes: Vec<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The plan and conversation a consistency check found in agreement (or repaired), as nop's
/// own run left them: the message count and a fingerprint of plan.xml and the messages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsistencyChecked {
    #[serde(with = "offset_time")]
    pub timestamp: DateTime<Utc>,
    pub messages: usize,
    pub fingerprint: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ConsistencyChecked {
    /// The record of `plan` and a conversation whose first messages are in the sealed files
    /// `sealed` and the others `messages`, as they are now.
    pub fn of(
        plan: &super::Plan,
        sealed: &[SealedMessages],
        messages: &[Message],
        now: DateTime<Utc>,
    ) -> ConsistencyChecked {
        ConsistencyChecked {
            timestamp: now,
            messages: sealed.iter().map(|s| s.count).sum::<usize>() + messages.len(),
            fingerprint: fingerprint(plan, sealed, messages),
            extra: Map::new(),
        }
    }

    /// Whether `plan` and the conversation (sealed files `sealed`, then `messages`) are the
    /// ones recorded. The same conversation sealed differently since (a write sealed its
    /// messages) is not recognised: the check runs once more.
    pub fn covers(
        &self,
        plan: &super::Plan,
        sealed: &[SealedMessages],
        messages: &[Message],
    ) -> bool {
        self.messages == sealed.iter().map(|s| s.count).sum::<usize>() + messages.len()
            && self.fingerprint == fingerprint(plan, sealed, messages)
    }
}

/// FNV-1a (64 bits) of the plan as plan.xml writes it, of the names of the sealed files (written
/// once, never changed: a name stands for its messages) and of the messages after them as
/// session.json does: stable across builds (std's hasher is not), enough to notice a change (not
/// a defence against a collision made on purpose: whoever can write the files can also skip the
/// check).
fn fingerprint(plan: &super::Plan, sealed: &[SealedMessages], messages: &[Message]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            hash ^= u64::from(*b);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    feed(plan.to_xml().as_bytes());
    feed(&[0]);
    // Nothing fed for a conversation without sealed files: its fingerprint is what it was
    // before there were any.
    for s in sealed {
        feed(s.file.as_bytes());
        feed(&[0]);
    }
    feed(&serde_json::to_vec(messages).unwrap_or_default());
    format!("{hash:016x}")
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
    /// One of nop's advisors (consulted by nop, not called by the agent): its session is nop's
    /// record of the consultation, deleted with its caller's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub advisor: bool,
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages_before: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages_after: Option<usize>,
    /// What the compression advisor (or the command) gave as the reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
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

/// A role's name that is none of [`Role`]'s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown role `{0}` (expected system, user, assistant or tool)")]
pub struct UnknownRole(pub String);

impl std::str::FromStr for Role {
    type Err = UnknownRole;

    fn from_str(s: &str) -> Result<Role, UnknownRole> {
        match s {
            "system" => Ok(Role::System),
            "user" => Ok(Role::User),
            "assistant" => Ok(Role::Assistant),
            "tool" => Ok(Role::Tool),
            other => Err(UnknownRole(other.to_string())),
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
    // The fields below were once kept in `extra` (written last, in this order): declared after
    // the others so that a rewritten file stays byte for byte the same.
    /// For `role: tool`: how long the call took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// For `role: tool`: the call failed (the content says how).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_error: Option<bool>,
    /// For a failed call: the kind of failure (`ToolError::kind`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_type: Option<String>,
    /// A queued message put into the conversation at a checkpoint (seed 004).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_interrupt: Option<bool>,
    /// The inbox entry a queued message came from (so it enters once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inbox_id: Option<String>,
    /// A queued message's priority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<super::QueuePriority>,
    #[serde(
        default,
        with = "offset_time::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub queued_at: Option<DateTime<Utc>>,
    /// `{channel}:{chat_id}:{user_id}` of a queued message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// A memory recall: the ids of the entries it brought in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_recall: Option<Vec<String>>,
    /// A chat reply (seed 001 §2.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_id: Option<String>,
    /// The chat batch a message or reply belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_id: Option<String>,
    /// Its place in the batch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_index: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_delay_seconds: Option<f64>,
    #[serde(
        default,
        with = "offset_time::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub scheduled_send_at: Option<DateTime<Utc>>,
    /// A chat reply: `Some(None)` (written as null) until it is shown, `Some(Some(t))` once
    /// it was.
    #[serde(
        default,
        with = "offset_time::nullable",
        skip_serializing_if = "Option::is_none"
    )]
    pub actual_sent_at: Option<Option<DateTime<Utc>>>,
    /// A chat reply: whether it was shown (false: the person left first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent: Option<bool>,
    /// The summary that replaced compacted messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compaction_summary: Option<bool>,
    /// For `role: assistant`: the model wrote its tool calls as text (a ```json block, tags),
    /// and nop took them as these `toolCalls` (the text is not kept: the model is shown calls).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovered_from_text: Option<bool>,
    /// Fields this version does not know, kept so that a rewrite never drops them.
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
            duration_ms: None,
            is_error: None,
            error_type: None,
            is_interrupt: None,
            inbox_id: None,
            priority: None,
            queued_at: None,
            session_key: None,
            memory_recall: None,
            reply_id: None,
            batch_id: None,
            batch_index: None,
            send_delay_seconds: None,
            scheduled_send_at: None,
            actual_sent_at: None,
            sent: None,
            compaction_summary: None,
            recovered_from_text: None,
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

/// Times written as `DateTime::to_rfc3339` writes them (`…+00:00`, not serde's `…Z`): how
/// these fields have always been stored, so a rewrite keeps them byte for byte.
mod offset_time {
    use chrono::{DateTime, Utc};
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&t.to_rfc3339())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DateTime<Utc>, D::Error> {
        DateTime::<Utc>::deserialize(d)
    }

    pub mod option {
        use super::*;

        pub fn serialize<S: Serializer>(
            t: &Option<DateTime<Utc>>,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            match t {
                Some(t) => super::serialize(t, s),
                None => s.serialize_none(),
            }
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Option<DateTime<Utc>>, D::Error> {
            Option::<DateTime<Utc>>::deserialize(d)
        }
    }

    /// A field that is absent (`None`), null (`Some(None)`) or a time.
    pub mod nullable {
        use super::*;

        pub fn serialize<S: Serializer>(
            t: &Option<Option<DateTime<Utc>>>,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            match t {
                Some(Some(t)) => super::serialize(t, s),
                _ => s.serialize_none(),
            }
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Option<Option<DateTime<Utc>>>, D::Error> {
            // Only called when the key is present (absent is `default`): null is `Some(None)`.
            Option::<DateTime<Utc>>::deserialize(d).map(Some)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn a_role_is_one_of_four_names() {
        assert_eq!("tool".parse::<Role>(), Ok(Role::Tool));
        assert_eq!(
            "robot".parse::<Role>().map_err(|e| e.to_string()),
            Err("unknown role `robot` (expected system, user, assistant or tool)".to_string())
        );
    }

    /// session.json files written by nop before these fields were typed (they were keys of
    /// `extra`), one per kind of session: generated by the end-to-end tests named in
    /// `tests/fixtures/session-json/README.md`.
    fn fixtures() -> Vec<(String, String)> {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/session-json");
        let mut files: Vec<(String, String)> = std::fs::read_dir(&dir)
            .expect("fixtures")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .map(|p| {
                let text = std::fs::read_to_string(&p).expect("fixture");
                (p.display().to_string(), text)
            })
            .collect();
        files.sort();
        assert!(files.len() >= 10, "{files:?}");
        files
    }

    #[test]
    fn files_written_before_the_typed_fields_read_and_write_back_byte_for_byte() {
        for (name, text) in fixtures() {
            let file: SessionFile = serde_json::from_str(&text).expect(&name);
            let mut written = serde_json::to_string_pretty(&file).expect("serialize");
            written.push('\n');
            assert_eq!(written, text, "{name}");
            // Every key nop wrote is a typed field now: nothing is left to `extra`.
            assert!(file.extra.is_empty(), "{name}: {:?}", file.extra);
            for m in &file.messages {
                assert!(m.extra.is_empty(), "{name}: {:?}", m.extra);
            }
            for c in &file.compressions {
                assert!(c.extra.is_empty(), "{name}: {:?}", c.extra);
            }
        }
    }

    #[test]
    fn the_fixtures_hold_every_typed_field() {
        let all: String = fixtures().into_iter().map(|(_, text)| text).collect();
        for key in [
            "priority",
            "interruptible",
            "emergency",
            "permissions",
            "stopReason",
            "consistencyRepairs",
            "consistencyChecked",
            "fingerprint",
            "messagesBefore",
            "messagesAfter",
            "reason",
            "durationMs",
            "isError",
            "errorType",
            "isInterrupt",
            "inboxId",
            "queuedAt",
            "sessionKey",
            "memoryRecall",
            "replyId",
            "batchId",
            "batchIndex",
            "sendDelaySeconds",
            "scheduledSendAt",
            "actualSentAt",
            "sent",
            "compactionSummary",
            "recoveredFromText",
            "parentSession\": {",
            "earlierMessages",
        ] {
            assert!(all.contains(&format!("\"{key}")), "no fixture has {key}");
        }
        assert!(all.contains("\"actualSentAt\": null"));
        assert!(all.contains("\"sent\": false"));
    }

    #[test]
    fn unknown_keys_are_kept_after_the_typed_ones() {
        let text = r#"{"role": "tool", "content": "x", "durationMs": 3, "futureKey": [1], "isError": true}"#;
        let m: Message = serde_json::from_str(text).expect("parse");
        assert_eq!((m.duration_ms, m.is_error), (Some(3), Some(true)));
        assert_eq!(
            serde_json::to_string(&m).expect("json"),
            r#"{"role":"tool","content":"x","durationMs":3,"isError":true,"futureKey":[1]}"#
        );
    }

    #[test]
    fn an_unsent_reply_is_null_and_a_missing_time_is_absent() {
        let mut m = Message::new(Role::Assistant, "hi", Utc::now());
        m.timestamp = None;
        m.actual_sent_at = Some(None);
        assert_eq!(
            serde_json::to_string(&m).expect("json"),
            r#"{"role":"assistant","content":"hi","actualSentAt":null}"#
        );
        let back: Message =
            serde_json::from_str(r#"{"role":"assistant","actualSentAt":null}"#).expect("parse");
        assert_eq!(back.actual_sent_at, Some(None));
        let absent: Message = serde_json::from_str(r#"{"role":"assistant"}"#).expect("parse");
        assert_eq!(absent.actual_sent_at, None);
    }
}
