//! What a run reports as it goes: the events a front end renders and `--output-format
//! stream-json` prints one per line, and the outcome `--output-format json` prints at the end.

use serde::Serialize;
use serde_json::Value;

/// One thing that happened during a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// The run has its session (new or continued).
    SessionStarted {
        session_id: String,
        agent: String,
        model: String,
        resumed: bool,
        /// The priority the session runs with (agents with a priority only).
        #[serde(skip_serializing_if = "Option::is_none")]
        priority: Option<u8>,
        /// Why the run has the emergency boost: `--emergency`, or the keyword its prompt
        /// matched. Absent without the boost.
        #[serde(skip_serializing_if = "Option::is_none")]
        emergency: Option<String>,
    },
    /// A model request is about to be sent (1-based).
    TurnStarted { turn: u32 },
    /// A piece of the model's answer.
    Text { delta: String },
    /// The model request failed and is retried; text streamed since the last turn_started is void.
    Retrying {
        attempt: u32,
        delay_ms: u64,
        error: String,
    },
    /// The text streamed since the last turn_started was tool calls written as text (a small
    /// model's ```json block): not an answer; the calls follow as `tool_call` events.
    TextWasCalls { calls: u32 },
    /// The model called a tool.
    ToolCall {
        id: String,
        name: String,
        arguments: Value,
    },
    /// A tool call finished; `output` is what the model reads, cut to 2,000 characters here.
    ToolResult {
        id: String,
        name: String,
        ok: bool,
        duration_ms: u64,
        output: String,
        /// The file a write changed, for a terminal's diff (not in stream-json: the whole text
        /// twice would swamp it).
        #[serde(skip)]
        change: Option<FileChange>,
        /// What the call did, for a front end to read instead of parsing `output`. Absent for a
        /// failed call, or one with nothing to say (a read).
        #[serde(skip_serializing_if = "Option::is_none")]
        outcome: Option<ToolOutcome>,
    },
    /// A command under way printed something: its last lines (at most 3, standard output and
    /// error as they came), a few times a second, for a terminal's live view. Not printed in
    /// stream-json (`tool_result` carries the output).
    ToolOutput { tail: Vec<String> },
    /// A model request was answered: its tokens, and the run's so far. `input_tokens` is how
    /// much context the request used.
    /// `cache_read_tokens` and `cache_write_tokens` are parts of `input_tokens`; a cost is null
    /// when the model has no price.
    Usage {
        input_tokens: u64,
        output_tokens: u64,
        cache_read_tokens: u64,
        cache_write_tokens: u64,
        /// The server reported no usage: the tokens are nop's estimate.
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        estimated: bool,
        cost_usd: Option<f64>,
        run_input_tokens: u64,
        run_output_tokens: u64,
        run_cost_usd: Option<f64>,
    },
    /// The agent changed the session's plan (`update-plan`): the whole plan as it is now.
    PlanUpdated { plan: crate::protocol::Plan },
    /// A call needs a person's yes: answer with the handle's `Op::Approval { id, .. }`; the run
    /// waits. Only where someone can answer (a terminal without `--yes`).
    ApprovalRequested {
        id: u64,
        tool: String,
        /// What exactly would happen (the command, the path).
        detail: String,
        /// Why approval is needed (the rule).
        reason: String,
        /// What answering "always" would approve for the rest of the session, in words
        /// (`"cargo test …" commands`, `writing files under src/cli/`, `this exact command`).
        scope: String,
        /// For `write-file` and `edit-file`, the change the call would make, for a diff in the
        /// question (not in stream-json, like `tool_result`'s `change`).
        #[serde(skip)]
        preview: Option<FileChange>,
    },
    /// Something the user should know that does not stop the run.
    Warning { message: String },
    /// Something of the repository nop would run outside the sandbox, or let widen the agent's
    /// rules, that the user has not trusted: left out of this run (`nop trust`).
    Untrusted {
        /// `workspace`, `hooks`, `mcp-server`, `plugin`, `git-hooks`.
        kind: String,
        /// What it is ("hooks of .claude/settings.json").
        name: String,
        /// The files it is made of, relative to the repository.
        files: Vec<String>,
        /// `new`, `changed`, `untrustable` or `record-unusable`.
        why: String,
        /// The warning, in words.
        message: String,
    },
    /// The agent stopped and goal-checker judged the session's goal: `checks` so far.
    GoalChecked {
        met: bool,
        reason: String,
        checks: u32,
    },
    /// A subagent (or an advisor) started in its own session.
    SubagentStarted {
        session_id: String,
        agent: String,
        caller_session_id: String,
        depth: u32,
        /// An advisor nop consulted (retry, consistency, goal): machinery, not the user's work.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        advisor: bool,
    },
    /// A subagent ended; `status` is its session's.
    SubagentFinished {
        session_id: String,
        agent: String,
        status: String,
        duration_ms: u64,
        tool_calls: u32,
        input_tokens: u64,
        output_tokens: u64,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        advisor: bool,
    },
    /// A higher-priority session paused this one; it waits at a checkpoint.
    Paused { session_id: String },
    /// The session that paused this one ended; it goes on.
    Resumed { session_id: String },
    /// Seed 000: the run did not start, another session has priority (exit code 4). `status` is
    /// always `refused`, as in the outcome of a run.
    Refused { status: Refusal, reason: String },
    /// A message was queued for the running session (typed while it works, or `nop send`).
    Queued {
        session_id: String,
        /// 1-based position in the queue.
        position: usize,
        priority: crate::protocol::QueuePriority,
        /// A stop word: the session stops at its next checkpoint.
        stop: bool,
    },
    /// Queued messages were put into the conversation.
    MessagesInjected { count: usize },
    /// An advisor gave no usable answer (not JSON, not allowed, too slow): the run took the
    /// safe default. nop's machinery, so a terminal shows it only when asked (`/verbose`).
    AdvisorFallback { advisor: String, message: String },
    /// The run was interrupted with messages typed for it still queued: they are taken back,
    /// for the front end to put into its editor (as Claude Code does at Esc).
    Unqueued { text: String },
    /// The conversation was compacted; the snapshot holds the full history before it.
    Compacted {
        snapshot_id: String,
        messages_before: usize,
        messages_after: usize,
    },
    /// The run ended.
    Result(RunOutcome),
    /// A run could not start or failed before it had a result (an open handle only: the next
    /// input can still be run).
    Error { message: String },
    /// An open handle has nothing to do: the last run (and what was queued behind it) ended and
    /// it waits for input. `session_id` is `None` while no run has made a session.
    Idle { session_id: Option<String> },
    /// Chat: messages wait for the person to finish typing; the batch is answered in `wait_ms`
    /// unless another message comes first (seed 001 §2.2).
    BatchWaiting { wait_ms: u64 },
    /// Chat: a batch was answered, with every reply and when it is due. `via`: `json`,
    /// `splitter` or `single` (how the replies were made).
    BatchAnswered {
        session_id: String,
        batch_id: String,
        via: String,
        replies: Vec<ScheduledReply>,
    },
    /// Chat: a reply is due; it is shown now and recorded as sent.
    Reply {
        session_id: String,
        reply_id: String,
        content: String,
    },
}

/// A chat reply as stored and returned: its place in the batch and when it is due.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScheduledReply {
    pub id: String,
    pub content: String,
    pub send_delay_seconds: f64,
    pub order: usize,
    pub scheduled_send_at: chrono::DateTime<chrono::Utc>,
}

/// How a run ended, with its totals.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunOutcome {
    pub session_id: String,
    pub status: RunStatus,
    /// The model's last answer (for `completed`), or the error (for `error`).
    pub final_message: String,
    /// The agent's question (for `waiting_input`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub question: Option<String>,
    /// The limit the run stopped at, when it did (the session may go on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<RunLimit>,
    /// How the run's shell commands were confined: `namespaces`, `landlock` (Landlock alone,
    /// where user namespaces are refused), `none`, or `off` (`sandbox: off`).
    pub sandbox: String,
    pub usage: RunUsage,
    /// What the run cost in US dollars, its subagents and advisors included; null when the
    /// model has no price (never a guessed figure).
    pub total_cost_usd: Option<f64>,
    /// Model requests made.
    pub turns: u32,
    /// How long the run took, and how much of it was spent waiting for the model.
    pub duration_ms: u64,
    pub duration_api_ms: u64,
    pub tool_calls: u32,
    /// Tool calls and file operations refused by permissions (the reason the model was given).
    pub permission_denials: Vec<Denial>,
}

/// The status of a refused run ([`Event::Refused`]): always `refused`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Refusal {
    Refused,
}

/// A limit a run stopped at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunLimit {
    /// `--max-turns` (`agent.max_turns`) model requests were made.
    MaxTurns,
    /// The next request would have passed `--max-budget-usd`.
    MaxBudgetUsd,
    /// The model made the same call with the same result again and again after it was told.
    RepeatedCall,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Completed,
    WaitingInput,
    Error,
    Cancelled,
    /// Stopped before a request that would have passed `--max-budget-usd`; resumable.
    BudgetExceeded,
    /// The session's goal is not met and the run could not go on (its turns or
    /// `agent.goal_timeout_s` ran out, or the goal could not be checked); resumable.
    GoalNotMet,
}

/// What a run used: its own model requests at the top level, and what the agents and advisors
/// it called used, apart.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct RunUsage {
    #[serde(flatten)]
    pub own: RunSpent,
    pub subagents: RunSpent,
    pub advisors: RunSpent,
}

/// Requests' tokens and cost (`cache_*` tokens are parts of `input_tokens`; the cost is null
/// when unknown).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct RunSpent {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub requests: u64,
    /// How many of the requests reported no usage (their tokens are nop's estimate).
    #[serde(skip_serializing_if = "is_zero")]
    pub estimated_requests: u64,
    pub cost_usd: Option<f64>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl From<crate::protocol::Spent> for RunSpent {
    fn from(s: crate::protocol::Spent) -> RunSpent {
        RunSpent {
            input_tokens: s.input_tokens,
            output_tokens: s.output_tokens,
            cache_read_tokens: s.cache_read_tokens,
            cache_write_tokens: s.cache_write_tokens,
            requests: s.requests,
            estimated_requests: s.estimated_requests,
            cost_usd: if s.requests == 0 {
                Some(0.0)
            } else {
                s.cost_usd
            },
        }
    }
}

/// A refusal, for the json output's `permission_denials`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Denial {
    pub tool: String,
    pub reason: String,
}

/// What a successful tool call did, beside the text the model reads: a command's exit code and
/// time, whether the text was cut and where the whole is, the files written. Every field is
/// absent when it does not apply.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ToolOutcome {
    /// The command's exit code (`shell`, command plugins); absent if a signal killed it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The signal that killed the command.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// How long the command itself ran (the event's `duration_ms` is the whole call: checks,
    /// approval, hooks).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command_ms: Option<u64>,
    /// Set when the text was cut: the session's file holding the whole (`out-<ts>.log`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub whole_in: Option<String>,
    /// Files the call wrote, as the tool names them (relative to the repository inside it).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub paths_written: Vec<String>,
}

impl ToolOutcome {
    /// A command's ending: its exit code, or the signal that killed it.
    pub fn command(status: std::process::ExitStatus, ran: std::time::Duration) -> ToolOutcome {
        use std::os::unix::process::ExitStatusExt;
        ToolOutcome {
            exit_code: status.code(),
            signal: status.signal(),
            command_ms: Some(ran.as_millis() as u64),
            ..ToolOutcome::default()
        }
    }
}

/// A file's text before and after a write (`before`: `None` for a new file, or one that was not
/// text): what a front end shows as a diff.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileChange {
    /// As the tool names it: relative to the repository where it is inside it.
    pub path: String,
    pub before: Option<String>,
    pub after: String,
}
