//! The session store: `.nop/sessions/<id>/` as plain files, written atomically, locked across
//! processes, snapshotted immutably, forked one way.
//!
//! ```text
//! .nop/sessions/<id>/
//!   session.json            state and messages (protocol::SessionFile)
//!   messages-<n>-<id>.json  a long conversation's earlier messages, sealed (sealed.rs)
//!   plan.xml                tasks (protocol::Plan)
//!   history-<snap>.json     immutable snapshots (read-only files, never rewritten)
//!   out-<ts>.log            whole output of a tool call
//!   error-<ts>.log          one failed call (JSON)
//!   session.log             this session's log lines
//!   session.lock            sidecar of the cross-process lock
//! ```
//!
//! Snapshots survive the deletion of their session: a fork hard-links the snapshot it was made
//! from into the child's own directory (copying where links are impossible), so the child never
//! depends on the parent's directory. Deleting a session (`delete.rs`) checks first that no other
//! session refers to it.

mod archive;
mod atomic;
mod delete;
mod error;
mod json;
mod lock;
mod logs;
mod nonblocking;
pub(crate) use nonblocking::{joined, off_thread};
mod run_lock;
mod sealed;
mod store;
mod summary_cache;

pub use archive::{ArchiveError, FORMAT as ARCHIVE_FORMAT, Moved};
pub use atomic::{commit_files, create_new_atomic, replace_file, sync_dir, write_atomic};

/// `value` as indented JSON for a file, or an error naming `what` (never empty bytes to write).
pub fn to_json(value: &impl serde::Serialize, what: &str) -> Result<Vec<u8>, SessionError> {
    json::pretty_json(value, what)
}
pub use delete::Deleted;
pub use error::{Reference, ReferenceKind, Result, SessionError};
pub use lock::{LockKind, SessionLock, Waited, lock_file};
pub use logs::ErrorRecord;
pub use run_lock::RunGuard;
pub use store::{Checkpointer, Problem, Recent, SessionState, Store};
pub use summary_cache::SessionSummary;

pub const SESSION_FILE: &str = "session.json";
pub const PLAN_FILE: &str = "plan.xml";
pub const SESSION_LOG: &str = "session.log";

/// File name of snapshot `id` inside a session directory.
pub fn snapshot_file_name(id: &str) -> String {
    format!("history-{id}.json")
}

#[cfg(test)]
mod json_tests {
    #[test]
    fn a_value_that_cannot_be_json_is_an_error_never_empty_bytes() {
        let mut map = std::collections::BTreeMap::new();
        map.insert((1, 2), "tuple keys are not JSON");
        let err = super::to_json(&map, "a test value").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("cannot write a test value as JSON: "),
            "{err}"
        );
        assert_eq!(
            super::to_json(&"ok", "a string").unwrap(),
            b"\"ok\"\n".to_vec()
        );
    }
}
