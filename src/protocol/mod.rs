//! Plain serde types with no I/O: session.json, plan.xml, snapshots, ids.

pub mod events;
pub mod ids;
pub mod plan;
pub mod session;
pub mod snapshot;

pub use ids::{new_id, timestamp_for_file};
pub use plan::{Plan, PlanParseError, Task, TaskStatus};
pub use session::{
    CallMetrics, Caller, CompressionRecord, Message, ParentSession, Role, SESSION_VERSION,
    SessionFile, SessionStatus, ToolCall, Usage,
};
pub use snapshot::{SNAPSHOT_VERSION, Snapshot};

/// A position in a text file, 1-based, for error messages a person can act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextPos {
    pub line: usize,
    pub column: usize,
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
