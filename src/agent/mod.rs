//! The agent loop and the runtime around it (seed 003).
//!
//! An agent does business logic only: given the conversation it answers with an
//! [`AgentResponse`] whose status is WAITING_INPUT, COMPLETED or ERROR. The seed's "adapter" is
//! the lifecycle (`lifecycle/`, phases on the [`Runtime`]; a subagent's in `subagent.rs`): it
//! creates and loads sessions, sets ids, records messages and moves the session through its
//! states; every session, a run's, a chat's or a subagent's, opens and closes through its
//! behaviours' points (`around/`); what the agent answers never depends on a session id (the
//! id appears in its log lines only).

mod around;
mod chat;
mod chat_handle;
mod conversation;
pub mod engine;
mod error;
mod file_checkpoint;
#[cfg(test)]
mod fixture;
pub mod goal;
pub mod handle;
mod instruction_imports;
pub mod instructions;
mod interrupts;
mod lifecycle;
pub mod mentions;
pub mod prompt;
pub mod recall;
pub mod runtime;
mod subagent;
pub mod summarize;
mod task;
mod turn;
mod untrusted;

pub use chat_handle::{ChatHandle, Quiet};
pub use conversation::Conversation;
pub use error::RunError;
pub use handle::{Approvals, Delivery, Handle, Op, Open, SessionHandle, deliver};
pub use runtime::{RunRequest, Runtime};
pub use turn::ModelAgent;

// What a run spends and its budget (`super::meter` in this module's files): it lives with the
// prices in `providers`, so the advisors estimate a request without naming `agent`.
use crate::providers::meter;

/// The three answers an agent can give (seed 003).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentStatus {
    /// The agent asked the user something and waits for the answer.
    WaitingInput,
    Completed,
    Error,
    /// The run stopped before a request that would have passed its budget.
    OverBudget,
    /// The run made its `--max-turns` model requests without finishing.
    MaxTurns,
    /// The session's goal was checked and is not met, and the run may not go on (its turns or
    /// time ran out, or the goal could not be checked).
    GoalNotMet,
    /// The model made the same call with the same result again and again, after it was told.
    RepeatedCall,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentResponse {
    pub status: AgentStatus,
    /// The final answer, the question, or the error.
    pub message: String,
}

/// The run was stopped by the user (Ctrl-C, SIGTERM) before the agent answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interrupted;
