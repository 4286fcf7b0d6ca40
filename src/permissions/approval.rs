//! Approvals: `ask` rules and `--approval` modes need a person's yes. Interactive runs ask on
//! the terminal (once / always for this session / no); headless runs deny, unless `--yes`, and
//! the reason goes to the model and the json output. Every decision is logged.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, oneshot};

/// When to ask the person.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ApprovalMode {
    /// Never ask: what needs approval is denied.
    Never,
    /// Ask where a rule says `ask`.
    #[default]
    OnRequest,
    /// Also ask before every call that can change something (shell, write-file, edit-file).
    Always,
}

/// A person's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalAnswer {
    Once,
    /// Yes, and do not ask again for the same thing in this session.
    Always,
    No,
    /// No, and do this instead: the text goes back to the agent with the refusal.
    Instead(String),
}

/// A question for the front end.
#[derive(Debug)]
pub struct ApprovalRequest {
    pub tool: String,
    /// What exactly would happen (the command, the path).
    pub detail: String,
    /// Why approval is needed (the rule).
    pub reason: String,
    pub respond: oneshot::Sender<ApprovalAnswer>,
}

pub use crate::protocol::events::Denial;

#[derive(Debug, Clone, Default)]
pub struct Approver {
    mode: ApprovalMode,
    yes: bool,
    prompt: Option<mpsc::UnboundedSender<ApprovalRequest>>,
    always: Arc<Mutex<HashSet<String>>>,
    denials: Arc<Mutex<Vec<Denial>>>,
}

impl Approver {
    /// Without a person: approvals are denied, or granted by `--yes`.
    pub fn headless(mode: ApprovalMode, yes: bool) -> Approver {
        Approver {
            mode,
            yes,
            ..Approver::default()
        }
    }

    /// With a person answering through `prompt`.
    pub fn interactive(
        mode: ApprovalMode,
        prompt: mpsc::UnboundedSender<ApprovalRequest>,
    ) -> Approver {
        Approver {
            mode,
            prompt: Some(prompt),
            ..Approver::default()
        }
    }

    pub fn mode(&self) -> ApprovalMode {
        self.mode
    }

    /// Asks for approval of `detail`; `Err(reason)` when refused. `key` identifies what an
    /// "always" answer covers.
    pub async fn approve(
        &self,
        key: &str,
        tool: &str,
        detail: &str,
        reason: &str,
    ) -> Result<(), String> {
        if self.always.lock().is_ok_and(|a| a.contains(key)) {
            return Ok(());
        }
        if self.mode == ApprovalMode::Never {
            return Err(format!("{reason}; approvals are off (--approval never)"));
        }
        if self.yes {
            tracing::info!(
                op = "approval",
                result = "approved",
                tool,
                detail,
                "approved by --yes: {reason}"
            );
            return Ok(());
        }
        let Some(prompt) = &self.prompt else {
            return Err(format!(
                "{reason}; no one to approve it in a headless run (pass --yes to approve)"
            ));
        };
        let (tx, rx) = oneshot::channel();
        let request = ApprovalRequest {
            tool: tool.to_string(),
            detail: detail.to_string(),
            reason: reason.to_string(),
            respond: tx,
        };
        if prompt.send(request).is_err() {
            return Err(format!("{reason}; the approval prompt is gone"));
        }
        let answer = rx.await.unwrap_or(ApprovalAnswer::No);
        tracing::info!(op = "approval", result = ?answer, tool, detail, "{reason}");
        match answer {
            ApprovalAnswer::Once => Ok(()),
            ApprovalAnswer::Always => {
                if let Ok(mut always) = self.always.lock() {
                    always.insert(key.to_string());
                }
                Ok(())
            }
            ApprovalAnswer::No => Err(format!("{reason}; the user said no")),
            ApprovalAnswer::Instead(text) => Err(format!(
                "{reason}; the user said no, and asks you to do this instead: {text}"
            )),
        }
    }

    pub fn record_denial(&self, tool: &str, reason: &str) {
        tracing::warn!(op = "permission", result = "denied", tool, "{reason}");
        if let Ok(mut d) = self.denials.lock() {
            d.push(Denial {
                tool: tool.to_string(),
                reason: reason.to_string(),
            });
        }
    }

    pub fn denials(&self) -> Vec<Denial> {
        self.denials.lock().map(|d| d.clone()).unwrap_or_default()
    }
}
