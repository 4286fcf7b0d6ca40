//! [`RunError`]: what stops a run before or outside the agent's work. Its own file, so the files
//! that return it (the runtime, the handles, chat, summaries) name this one and not each other.

use super::prompt::PromptError;
use crate::permissions::PermissionError;
use crate::providers::ProviderError;
use crate::session::SessionError;
use crate::tools::ToolError;
use crate::workspace::WorkspaceError;

/// Failures that stop a run before or outside the agent's work.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    #[error(transparent)]
    Provider(#[from] ProviderError),
    #[error(transparent)]
    Prompt(#[from] PromptError),
    #[error("{0}")]
    Agent(String),
    /// Shown as the tool error alone: it is not also given as the source, which a chain
    /// printer (`{:#}`) would repeat.
    #[error(transparent)]
    Tool(#[from] ToolError),
    #[error(transparent)]
    Permission(#[from] PermissionError),
    /// Seed 000: another session has priority (exit code 4).
    #[error("refused: {0}")]
    Refused(String),
    /// Another process is running the session.
    #[error("session {0} is being run by another process")]
    Busy(String),
    /// `sandbox: required` and this machine cannot confine commands as asked: the run does
    /// not start.
    #[error("{0}")]
    Sandbox(String),
}
