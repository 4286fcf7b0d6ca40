//! `history-<snapshotId>.json`: an immutable copy of a session at one moment.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{Plan, SessionFile};

pub const SNAPSHOT_VERSION: u32 = 1;

/// What a snapshot file holds: the whole session.json and plan as they were.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    pub version: u32,
    pub snapshot_id: String,
    pub session_id: String,
    pub created_at: DateTime<Utc>,
    pub session: SessionFile,
    pub plan: Plan,
    /// The working files when the snapshot was taken: a tree id in `.nop/checkpoints/`
    /// (absent when checkpoints are off, or for a snapshot taken before nop recorded them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<String>,
}
