//! The kinds of tool failure: recorded as `errorType`, and what configuration
//! (`retry_on` in the advisors' settings) names.

/// What kind of failure a tool call had: recorded as `errorType` in session.json and
/// error-<ts>.log, and what decides whether retry-advisor is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolErrorKind {
    /// The file is not text.
    BinaryFile,
    /// A `before-tool` hook refused the call.
    BlockedByHook,
    /// The conversation changed while it was being compacted.
    CompactionConflict,
    /// The CompactAgent failed.
    CompactionFailed,
    /// A configuration file (agents.yml, a prompt) cannot be used.
    ConfigError,
    /// Not run because the person said no (or Esc) at the question, or plan mode held it: what
    /// they chose, not a failure (no error log, no retry-advisor).
    Declined,
    /// A subagent would run deeper than `subagents.max_depth`.
    DepthLimit,
    /// I/O was interrupted or timed out (a retry may succeed).
    Interrupted,
    /// The arguments do not match the tool's schema or make no sense.
    InvalidArguments,
    /// The path cannot be used.
    InvalidPath,
    /// Long-term memory cannot be read or written.
    MemoryError,
    /// The path is not a regular file.
    NotAFile,
    /// The tool cannot work here (no agents to call, no memory).
    NotAvailable,
    /// What the call names does not exist.
    NotFound,
    /// The text to replace occurs more than once.
    NotUnique,
    /// The agent's permissions (or a person) refused the call.
    PermissionDenied,
    /// A plugin's server failed.
    PluginError,
    /// A plugin's tool reported a failure.
    PluginToolFailed,
    /// A file could not be read.
    ReadFailed,
    /// The shell sandbox is required and cannot be set up.
    SandboxUnavailable,
    /// Not run: the agent asked the user first.
    Skipped,
    /// The command could not be started.
    SpawnFailed,
    /// An MCP server's tool answered with `isError: true`: the tool's own message, for the model
    /// to act on (a wrong argument, a missing issue); a retry would give the same answer.
    ToolReportedError,
    /// A called agent ended with an error.
    SubagentFailed,
    /// The call ran past its time limit.
    Timeout,
    /// No such (enabled) agent.
    UnknownAgent,
    /// No such tool.
    UnknownTool,
    /// Waiting for the command failed.
    WaitFailed,
    /// A file could not be written.
    WriteFailed,
}

impl ToolErrorKind {
    /// Every kind, for messages that list them.
    pub const ALL: &[ToolErrorKind] = &[
        ToolErrorKind::BinaryFile,
        ToolErrorKind::BlockedByHook,
        ToolErrorKind::CompactionConflict,
        ToolErrorKind::CompactionFailed,
        ToolErrorKind::ConfigError,
        ToolErrorKind::Declined,
        ToolErrorKind::DepthLimit,
        ToolErrorKind::Interrupted,
        ToolErrorKind::InvalidArguments,
        ToolErrorKind::InvalidPath,
        ToolErrorKind::MemoryError,
        ToolErrorKind::NotAFile,
        ToolErrorKind::NotAvailable,
        ToolErrorKind::NotFound,
        ToolErrorKind::NotUnique,
        ToolErrorKind::PermissionDenied,
        ToolErrorKind::PluginError,
        ToolErrorKind::PluginToolFailed,
        ToolErrorKind::ReadFailed,
        ToolErrorKind::SandboxUnavailable,
        ToolErrorKind::Skipped,
        ToolErrorKind::SpawnFailed,
        ToolErrorKind::SubagentFailed,
        ToolErrorKind::Timeout,
        ToolErrorKind::ToolReportedError,
        ToolErrorKind::UnknownAgent,
        ToolErrorKind::UnknownTool,
        ToolErrorKind::WaitFailed,
        ToolErrorKind::WriteFailed,
    ];

    /// The kind of an I/O failure: a missing file is `NotFound`, interrupted or timed-out I/O
    /// is `Interrupted`, anything else `otherwise`.
    pub fn of_io(error: &std::io::Error, otherwise: ToolErrorKind) -> ToolErrorKind {
        use std::io::ErrorKind as Io;
        match error.kind() {
            Io::NotFound => ToolErrorKind::NotFound,
            Io::Interrupted | Io::TimedOut | Io::WouldBlock => ToolErrorKind::Interrupted,
            _ => otherwise,
        }
    }

    /// The kind named `name` (as [`ToolErrorKind::as_str`] writes it).
    pub fn parse(name: &str) -> Option<ToolErrorKind> {
        ToolErrorKind::ALL
            .iter()
            .copied()
            .find(|k| k.as_str() == name)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ToolErrorKind::BinaryFile => "BinaryFile",
            ToolErrorKind::BlockedByHook => "BlockedByHook",
            ToolErrorKind::CompactionConflict => "CompactionConflict",
            ToolErrorKind::CompactionFailed => "CompactionFailed",
            ToolErrorKind::ConfigError => "ConfigError",
            ToolErrorKind::Declined => "Declined",
            ToolErrorKind::DepthLimit => "DepthLimit",
            ToolErrorKind::Interrupted => "Interrupted",
            ToolErrorKind::InvalidArguments => "InvalidArguments",
            ToolErrorKind::InvalidPath => "InvalidPath",
            ToolErrorKind::MemoryError => "MemoryError",
            ToolErrorKind::NotAFile => "NotAFile",
            ToolErrorKind::NotAvailable => "NotAvailable",
            ToolErrorKind::NotFound => "NotFound",
            ToolErrorKind::NotUnique => "NotUnique",
            ToolErrorKind::PermissionDenied => "PermissionDenied",
            ToolErrorKind::PluginError => "PluginError",
            ToolErrorKind::PluginToolFailed => "PluginToolFailed",
            ToolErrorKind::ReadFailed => "ReadFailed",
            ToolErrorKind::SandboxUnavailable => "SandboxUnavailable",
            ToolErrorKind::Skipped => "Skipped",
            ToolErrorKind::SpawnFailed => "SpawnFailed",
            ToolErrorKind::SubagentFailed => "SubagentFailed",
            ToolErrorKind::Timeout => "Timeout",
            ToolErrorKind::ToolReportedError => "ToolReportedError",
            ToolErrorKind::UnknownAgent => "UnknownAgent",
            ToolErrorKind::UnknownTool => "UnknownTool",
            ToolErrorKind::WaitFailed => "WaitFailed",
            ToolErrorKind::WriteFailed => "WriteFailed",
        }
    }
}
