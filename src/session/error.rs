//! Errors of the session store. Every variant names the file or session it is about.

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use crate::protocol::TextPos;

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("no session matches `{0}` (see `nop sessions list`)")]
    NotFound(String),

    #[error("`{prefix}` matches several sessions: {}; give more characters", candidates.join(", "))]
    Ambiguous {
        prefix: String,
        candidates: Vec<String>,
    },

    /// A value could not be turned into JSON: nothing was written (never an empty file).
    #[error("cannot write {what} as JSON: {message}; nothing was written")]
    Serialize { what: String, message: String },

    #[error("{}{}: {message}", path.display(), pos.map(|p| format!(":{}:{}", p.line, p.column)).unwrap_or_default())]
    Corrupt {
        path: PathBuf,
        pos: Option<TextPos>,
        message: String,
    },

    #[error("{}: written by a newer nop (version {found}, this build reads up to {supported}); nothing was changed", path.display())]
    TooNew {
        path: PathBuf,
        found: u32,
        supported: u32,
    },

    #[error("session {session}: lock not acquired within {:.1} s{}", waited.as_secs_f64(), holder.map(|p| format!(" (held by pid {p})")).unwrap_or_else(|| " (held by another reader or writer)".into()))]
    LockTimeout {
        session: String,
        waited: Duration,
        holder: Option<u32>,
    },

    #[error(
        "session {requested}: cannot lock it while this thread holds the lock of session {held} (locks are never nested)"
    )]
    NestedLock { held: String, requested: String },

    #[error(
        "session {0} is being run by another process (its run lock is held); stop it with `nop stop --session {0}` or wait until it ends"
    )]
    Running(String),

    /// Seed 002 §8.1: a session other sessions refer to is not deleted unless forced.
    #[error(
        "session {session} is referred to by {}: {}; delete {} first, or pass --force to delete it anyway (forks keep their own copy of the snapshot they came from)",
        if references.len() == 1 { "another session".to_string() } else { format!("{} sessions", references.len()) },
        references.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "),
        if references.len() == 1 { "that one" } else { "those" }
    )]
    Referenced {
        session: String,
        references: Vec<Reference>,
    },

    #[error("session {session} has no snapshot `{snapshot}`")]
    SnapshotNotFound { session: String, snapshot: String },

    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl SessionError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> SessionError {
        let path = path.into();
        move |source| SessionError::Io { path, source }
    }
}

pub type Result<T, E = SessionError> = std::result::Result<T, E>;

/// How another session refers to the one being deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReferenceKind {
    /// It was forked from it (`parentSession.id`).
    Fork,
    /// A subagent it called (`caller.sessionId`).
    Subagent,
    /// An advisor nop consulted for it (`caller.advisor`): deleted with it, never in the way.
    Advisor,
    /// It could not be read, so whether it refers to it is unknown.
    Unreadable,
}

/// A session that refers to the one being deleted.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Reference {
    pub id: String,
    pub kind: ReferenceKind,
    /// For a fork: the snapshot it was made from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot_id: Option<String>,
    /// For an unreadable session: why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl std::fmt::Display for Reference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.kind, &self.snapshot_id, &self.error) {
            (ReferenceKind::Fork, Some(snap), _) => {
                write!(f, "{} (forked from it, snapshot {snap})", self.id)
            }
            (ReferenceKind::Fork, None, _) => write!(f, "{} (forked from it)", self.id),
            (ReferenceKind::Subagent, ..) => write!(f, "{} (a subagent it called)", self.id),
            (ReferenceKind::Unreadable, _, Some(e)) => {
                write!(
                    f,
                    "{} (cannot be read, so it may refer to it: {e})",
                    self.id
                )
            }
            (ReferenceKind::Unreadable, ..) => write!(f, "{} (cannot be read)", self.id),
            (ReferenceKind::Advisor, ..) => write!(f, "{} (an advisor consulted for it)", self.id),
        }
    }
}
