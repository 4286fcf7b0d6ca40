//! Plain serde types with no I/O: session.json, plan.xml, snapshots, ids.

pub mod events;
pub mod hook_event;
pub mod ids;
pub mod plan;
pub mod queue;
pub mod session;
pub mod snapshot;
pub mod tool_error;
pub mod usage;

pub use hook_event::{About, Hook, HookEvent, Mode};
pub use ids::{new_id, timestamp_for_file};
pub use plan::{Plan, PlanParseError, Task, TaskStatus};
pub use queue::QueuePriority;
pub use session::{
    CallMetrics, Caller, CompressionRecord, Goal, GoalCheck, GoalStatus, Message, ParentSession,
    Role, SEALED_VERSION, SESSION_VERSION, SealedFile, SealedMessages, SessionFile, SessionStatus,
    ToolCall, TurnCheckpoint, Usage,
};
pub use snapshot::{SNAPSHOT_VERSION, Snapshot};
pub use tool_error::ToolErrorKind;
pub use usage::{Spent, TokenUsage};

/// A position in a text file, 1-based, for error messages a person can act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextPos {
    pub line: usize,
    pub column: usize,
}

/// `bytes` as text, or where they stop being UTF-8: the position and a message naming the byte
/// offset, for a person to find it in an editor.
pub fn decode_utf8(bytes: Vec<u8>) -> Result<String, (TextPos, String)> {
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let bytes = e.into_bytes();
        let before = String::from_utf8_lossy(&bytes[..at]);
        (
            TextPos::of_offset(&before, before.len()),
            format!("invalid UTF-8 at byte {at}"),
        )
    })
}

impl TextPos {
    /// The line and column of byte `offset` in `text` (columns count characters).
    pub fn of_offset(text: &str, offset: usize) -> TextPos {
        let offset = offset.min(text.len());
        let before = text.get(..offset).unwrap_or(text);
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before.get(line_start..).map_or(0, |s| s.chars().count()) + 1;
        TextPos { line, column }
    }
}

impl std::fmt::Display for TextPos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}, column {}", self.line, self.column)
    }
}
