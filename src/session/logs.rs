//! Per-call log files of a session (seed 002 §6.4, §9.3): `out-<ts>.log` keeps a tool's whole
//! output, `error-<ts>.log` one failed call. Both are new files, never appended to or rewritten.

use std::path::PathBuf;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Store;
use super::atomic::create_new_atomic;
use super::error::{Result, SessionError};
use crate::protocol::timestamp_for_file;

/// One failed tool or agent call, as written to `error-<ts>.log`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorRecord {
    pub timestamp: DateTime<Utc>,
    pub session_id: String,
    pub tool: String,
    pub arguments: Value,
    pub error_type: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
}

impl Store {
    /// Keeps a tool's whole output in a new `out-<ts>.log`; returns its path.
    pub fn write_tool_output(&self, id: &str, now: DateTime<Utc>, output: &str) -> Result<PathBuf> {
        self.write_new_log(id, "out", now, output.as_bytes())
    }

    /// Records a failed call in a new `error-<ts>.log`; returns its path.
    pub fn write_error_log(&self, id: &str, record: &ErrorRecord) -> Result<PathBuf> {
        let bytes = super::store::pretty_json(record);
        self.write_new_log(id, "error", record.timestamp, &bytes)
    }

    fn write_new_log(
        &self,
        id: &str,
        kind: &str,
        now: DateTime<Utc>,
        bytes: &[u8],
    ) -> Result<PathBuf> {
        let dir = self.dir(id);
        if !dir.is_dir() {
            return Err(SessionError::NotFound(id.to_string()));
        }
        let ts = timestamp_for_file(now);
        let mut last_err = None;
        for n in 0..100 {
            let name = if n == 0 {
                format!("{kind}-{ts}.log")
            } else {
                format!("{kind}-{ts}-{n}.log")
            };
            let path = dir.join(name);
            match create_new_atomic(&path, bytes, false) {
                Ok(()) => return Ok(path),
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or_else(|| SessionError::NotFound(id.to_string())))
    }
}
