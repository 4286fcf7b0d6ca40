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

    /// Creates a new, empty `out-<ts>.log` for an output written as it arrives; returns its path
    /// and the file, open for writing.
    pub fn create_tool_output(
        &self,
        id: &str,
        now: DateTime<Utc>,
    ) -> Result<(PathBuf, std::fs::File)> {
        self.new_log(id, "out", now, |path| {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path)
                .map_err(|source| SessionError::Io {
                    path: path.to_path_buf(),
                    source,
                })
        })
    }

    /// Records a failed call in a new `error-<ts>.log`; returns its path.
    pub fn write_error_log(&self, id: &str, record: &ErrorRecord) -> Result<PathBuf> {
        let bytes = super::json::pretty_json(record, "an error log")?;
        self.write_new_log(id, "error", record.timestamp, &bytes)
    }

    fn write_new_log(
        &self,
        id: &str,
        kind: &str,
        now: DateTime<Utc>,
        bytes: &[u8],
    ) -> Result<PathBuf> {
        self.new_log(id, kind, now, |path| create_new_atomic(path, bytes, false))
            .map(|(path, ())| path)
    }

    /// Makes a new `<kind>-<ts>[-n].log` with `create`, which must fail if the file exists.
    fn new_log<T>(
        &self,
        id: &str,
        kind: &str,
        now: DateTime<Utc>,
        create: impl Fn(&std::path::Path) -> Result<T>,
    ) -> Result<(PathBuf, T)> {
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
            match create(&path) {
                Ok(made) => return Ok((path, made)),
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or_else(|| SessionError::NotFound(id.to_string())))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn output_and_error_logs_are_new_files_that_never_collide() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let store = Store::new(dir.path(), Duration::from_secs(1));
        let id = store.create("coder", Utc::now())?.session_id;
        let now = Utc::now();
        let a = store.write_tool_output(&id, now, "first")?;
        let b = store.write_tool_output(&id, now, "second")?;
        assert_ne!(a, b);
        assert_eq!(std::fs::read_to_string(&a)?, "first");
        assert_eq!(std::fs::read_to_string(&b)?, "second");
        let (c, mut file) = store.create_tool_output(&id, now)?;
        std::io::Write::write_all(&mut file, b"streamed")?;
        assert!(c != a && c != b);
        assert_eq!(std::fs::read_to_string(&c)?, "streamed");
        assert!(
            a.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("out-"))
        );

        let record = ErrorRecord {
            timestamp: now,
            session_id: id.clone(),
            tool: "shell".into(),
            arguments: serde_json::json!({"command": "false"}),
            error_type: "ExitStatus".into(),
            message: "exit status 1".into(),
            trace: None,
        };
        let path = store.write_error_log(&id, &record)?;
        let back: ErrorRecord = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
        assert_eq!(back, record);
        assert!(store.write_tool_output("nope", now, "x").is_err());
        Ok(())
    }
}
