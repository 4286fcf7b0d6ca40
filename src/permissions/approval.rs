//! Approvals: `ask` rules and `--approval` modes need a person's yes. Interactive runs ask on
//! the terminal (once / always / no); headless runs deny, unless `--yes`, and the reason goes to
//! the model and the json output. Every decision is logged.
//!
//! What an "always" covers is a [`Scope`] (a command's prefix, a file's directory, a tool), said
//! in the question, and it holds only for the same [`Gate`]: an "always" given under
//! `--approval always` never lifts a file-access `ask` rule, nor one rule's "always" another's.

use std::future::Future;
use std::path::Path;
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, oneshot};

use super::Source;
use super::scope::{Action, Scope};
use crate::protocol::events::FileChange;

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
    /// Read and plan only: every call that can change something is refused (shell commands run
    /// with the repository read-only), so the agent presents its plan; switching the mode
    /// carries it out.
    Plan,
}

impl ApprovalMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalMode::Never => "never",
            ApprovalMode::OnRequest => "on-request",
            ApprovalMode::Always => "always",
            ApprovalMode::Plan => "plan",
        }
    }

    /// The mode after this one in the cycle the interactive session steps through.
    pub fn next(self) -> ApprovalMode {
        match self {
            ApprovalMode::OnRequest => ApprovalMode::Always,
            ApprovalMode::Always => ApprovalMode::Plan,
            ApprovalMode::Plan => ApprovalMode::Never,
            ApprovalMode::Never => ApprovalMode::OnRequest,
        }
    }

    /// What the mode means for the person, in a line.
    pub fn describe(self) -> &'static str {
        match self {
            ApprovalMode::Never => "nothing is asked; what needs approval is refused",
            ApprovalMode::OnRequest => {
                "edits and commands run without asking (confined); `ask` rules ask"
            }
            ApprovalMode::Always => "every command, edit and plugin tool asks first",
            ApprovalMode::Plan => {
                "the agent reads and plans; nothing is changed (commands only read)"
            }
        }
    }
}

impl From<crate::config::ApprovalSetting> for ApprovalMode {
    fn from(setting: crate::config::ApprovalSetting) -> ApprovalMode {
        use crate::config::ApprovalSetting as S;
        match setting {
            S::Never => ApprovalMode::Never,
            S::OnRequest => ApprovalMode::OnRequest,
            S::Always => ApprovalMode::Always,
            S::Plan => ApprovalMode::Plan,
        }
    }
}

/// A person's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalAnswer {
    Once,
    /// Yes, and do not ask again in this session for what the question's `scope` says.
    Always,
    No,
    /// No, and do this instead: the text goes back to the agent with the refusal.
    Instead(String),
}

/// Why a call may not go on: a rule, a hook, no one to ask, or the person's own answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub reason: String,
    /// The person said no (or Esc), or plan mode held the call: their choice, not a failure.
    pub declined: bool,
}

impl Refusal {
    /// Refused by a rule, a hook or for want of someone to ask.
    pub fn rule(reason: String) -> Refusal {
        Refusal {
            reason,
            declined: false,
        }
    }

    /// The person's (or their mode's) choice.
    pub fn declined(reason: String) -> Refusal {
        Refusal {
            reason,
            declined: true,
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

/// A question for the front end.
#[derive(Debug)]
pub struct ApprovalRequest {
    pub tool: String,
    /// What exactly would happen (the command, the path).
    pub detail: String,
    /// Why approval is needed (the rule).
    pub reason: String,
    /// What an "always" answer would cover, in words (`"cargo test …" commands`, `writing
    /// files under src/cli/`).
    pub scope: String,
    /// The change a `write-file` or `edit-file` call would make, when it can be worked out.
    pub preview: Option<FileChange>,
    pub respond: oneshot::Sender<ApprovalAnswer>,
}

/// Which check asks. An "always" holds for later asks of the same check only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    /// Whether the call may run at all: `--approval always`, or a tool rule.
    Call,
    /// A file-access `ask` rule, by where it is written.
    FileRule(Source),
    /// A command the agent asks to run outside the sandbox, with the user's rights.
    OutsideSandbox,
}

/// A call that needs a person's yes.
#[derive(Debug, Clone)]
pub struct Ask<'a> {
    pub tool: &'a str,
    /// What exactly would happen (the command, the path), as shown.
    pub detail: &'a str,
    /// Why approval is needed (the rule).
    pub reason: &'a str,
    pub gate: Gate,
    /// What the call would do, which the scope of an "always" is made from and matched against.
    pub action: Action,
    /// The repository root (canonical): a file inside it gets its directory as scope.
    pub root: &'a Path,
}

/// What an "always" answer granted.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Grant {
    gate: Gate,
    scope: Scope,
}

pub use crate::protocol::events::Denial;

#[derive(Debug, Clone, Default)]
pub struct Approver {
    /// Shared by every clone (the run, its subagents, the front end that switches it).
    mode: Arc<Mutex<ApprovalMode>>,
    yes: bool,
    prompt: Option<mpsc::UnboundedSender<ApprovalRequest>>,
    always: Arc<Mutex<Vec<Grant>>>,
    denials: Arc<Mutex<Vec<Denial>>>,
}

impl Approver {
    /// Without a person: approvals are denied, or granted by `--yes`.
    pub fn headless(mode: ApprovalMode, yes: bool) -> Approver {
        Approver {
            mode: Arc::new(Mutex::new(mode)),
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
            mode: Arc::new(Mutex::new(mode)),
            prompt: Some(prompt),
            ..Approver::default()
        }
    }

    pub fn mode(&self) -> ApprovalMode {
        self.mode.lock().map(|m| *m).unwrap_or_default()
    }

    /// Switches the mode for every call from now on (`/mode`, Shift+Tab).
    pub fn set_mode(&self, mode: ApprovalMode) {
        if let Ok(mut m) = self.mode.lock() {
            *m = mode;
        }
    }

    /// Asks for approval of `ask`; `Err` when refused. `preview` is awaited only when a
    /// person is actually asked.
    pub async fn approve(
        &self,
        ask: Ask<'_>,
        preview: impl Future<Output = Option<FileChange>>,
    ) -> Result<(), Refusal> {
        let Ask {
            tool,
            detail,
            reason,
            ..
        } = ask;
        if self.covered(&ask.gate, &ask.action) {
            tracing::info!(
                op = "approval",
                result = "approved",
                tool,
                detail,
                "covered by an earlier \"always\": {reason}"
            );
            return Ok(());
        }
        if self.mode() == ApprovalMode::Never {
            return Err(Refusal::rule(format!(
                "{reason}; approvals are off (--approval never)"
            )));
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
            return Err(Refusal::rule(format!(
                "{reason}; no one to approve it in a headless run (pass --yes to approve)"
            )));
        };
        let scope = Scope::of(&ask.action, ask.root);
        let (tx, rx) = oneshot::channel();
        let request = ApprovalRequest {
            tool: tool.to_string(),
            detail: detail.to_string(),
            reason: reason.to_string(),
            scope: scope.describe(ask.root),
            preview: preview.await,
            respond: tx,
        };
        if prompt.send(request).is_err() {
            return Err(Refusal::rule(format!(
                "{reason}; the approval prompt is gone"
            )));
        }
        let answer = rx.await.unwrap_or(ApprovalAnswer::No);
        tracing::info!(op = "approval", result = ?answer, tool, detail, ?scope, "{reason}");
        match answer {
            ApprovalAnswer::Once => Ok(()),
            ApprovalAnswer::Always => {
                if let Ok(mut always) = self.always.lock() {
                    let grant = Grant {
                        gate: ask.gate,
                        scope,
                    };
                    if !always.contains(&grant) {
                        always.push(grant);
                    }
                }
                Ok(())
            }
            ApprovalAnswer::No => Err(Refusal::declined(format!("{reason}; the user said no"))),
            ApprovalAnswer::Instead(text) => Err(Refusal::declined(format!(
                "{reason}; the user said no, and asks you to do this instead: {text}"
            ))),
        }
    }

    /// Whether `ask` would be put to someone (a person, or a `permission-request` hook): not
    /// covered by an earlier "always", approvals not off, no `--yes`.
    pub fn would_ask(&self, ask: &Ask<'_>) -> bool {
        !self.covered(&ask.gate, &ask.action) && self.mode() != ApprovalMode::Never && !self.yes
    }

    /// Whether a person answers approval questions (the interactive session).
    pub fn has_person(&self) -> bool {
        self.prompt.is_some()
    }

    /// Whether an earlier "always" for the same gate covers `action`.
    fn covered(&self, gate: &Gate, action: &Action) -> bool {
        self.always.lock().is_ok_and(|grants| {
            grants
                .iter()
                .any(|g| &g.gate == gate && g.scope.covers(action))
        })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::permissions::Access;
    use pretty_assertions::assert_eq;
    use std::path::PathBuf;

    fn shell(line: &str) -> Action {
        Action::Command {
            line: line.to_string(),
            workdir: None,
        }
    }

    fn ask<'a>(detail: &'a str, gate: Gate, action: Action, root: &'a Path) -> Ask<'a> {
        Ask {
            tool: "shell",
            detail,
            reason: "--approval always",
            gate,
            action,
            root,
        }
    }

    /// A question as the person saw it: detail, scope, preview.
    type Asked = (String, String, Option<FileChange>);

    /// An interactive approver whose person answers every question with the next of
    /// `answers`, and the questions it was asked.
    fn person(answers: Vec<ApprovalAnswer>) -> (Approver, tokio::task::JoinHandle<Vec<Asked>>) {
        let (tx, mut rx) = mpsc::unbounded_channel::<ApprovalRequest>();
        let approver = Approver::interactive(ApprovalMode::Always, tx);
        let asked = tokio::spawn(async move {
            let mut asked = Vec::new();
            let mut answers = answers.into_iter();
            while let Some(q) = rx.recv().await {
                asked.push((q.detail, q.scope, q.preview));
                let _ = q.respond.send(answers.next().unwrap_or(ApprovalAnswer::No));
            }
            asked
        });
        (approver, asked)
    }

    #[tokio::test]
    async fn always_covers_the_scope_it_named_and_nothing_else() {
        let root = PathBuf::from("/repo");
        let (approver, asked) = person(vec![ApprovalAnswer::Always, ApprovalAnswer::No]);
        let none = || std::future::ready(None);
        let call = |line: &'static str| ask(line, Gate::Call, shell(line), &root);
        assert_eq!(approver.approve(call("ls -la"), none()).await, Ok(()));
        // Covered: asked no more, and a clone shares what was granted.
        assert_eq!(approver.approve(call("ls src"), none()).await, Ok(()));
        assert_eq!(approver.clone().approve(call("ls"), none()).await, Ok(()));
        // Outside it: asked again (and refused).
        assert!(
            approver
                .approve(call("ls; echo pwned"), none())
                .await
                .is_err()
        );
        drop(approver);
        let asked = asked.await.unwrap_or_default();
        let shown: Vec<(&str, &str)> = asked
            .iter()
            .map(|(d, s, _)| (d.as_str(), s.as_str()))
            .collect();
        assert_eq!(
            shown,
            [
                ("ls -la", "\"ls …\" commands"),
                ("ls; echo pwned", "this exact command")
            ]
        );
    }

    #[tokio::test]
    async fn an_always_never_lifts_a_different_gate() {
        let root = PathBuf::from("/repo");
        let (approver, asked) = person(vec![
            ApprovalAnswer::Always,
            ApprovalAnswer::Always,
            ApprovalAnswer::No,
        ]);
        let write = |path: &str| Action::File {
            path: PathBuf::from(path),
            access: Access::Write,
        };
        let rule = |line| Source::File {
            path: ".nop/.permissions/agent-default.yml".into(),
            line,
        };
        let none = || std::future::ready(None);
        // `--approval always` for README.md covers every write in the repository…
        let mode = ask("README.md", Gate::Call, write("/repo/README.md"), &root);
        assert_eq!(approver.approve(mode, none()).await, Ok(()));
        let mode = ask("src/lib.rs", Gate::Call, write("/repo/src/lib.rs"), &root);
        assert_eq!(approver.approve(mode, none()).await, Ok(()));
        // … but not a file an `ask` rule names; that rule's "always" not another rule's file.
        let secret = ask(
            "secrets/a",
            Gate::FileRule(rule(3)),
            write("/repo/secrets/a"),
            &root,
        );
        assert_eq!(approver.approve(secret.clone(), none()).await, Ok(()));
        assert_eq!(approver.approve(secret, none()).await, Ok(()));
        let other = ask(
            "secrets/b",
            Gate::FileRule(rule(7)),
            write("/repo/secrets/b"),
            &root,
        );
        assert!(approver.approve(other, none()).await.is_err());
        drop(approver);
        let asked: Vec<String> = asked
            .await
            .unwrap_or_default()
            .into_iter()
            .map(|(d, _, _)| d)
            .collect();
        assert_eq!(asked, ["README.md", "secrets/a", "secrets/b"]);
    }

    #[tokio::test]
    async fn the_preview_is_worked_out_only_for_a_person() {
        let root = PathBuf::from("/repo");
        let change = FileChange {
            path: "a.txt".into(),
            before: Some("one\n".into()),
            after: "two\n".into(),
        };
        let worked = Arc::new(Mutex::new(0));
        let preview = || {
            let (worked, change) = (worked.clone(), change.clone());
            async move {
                if let Ok(mut n) = worked.lock() {
                    *n += 1;
                }
                Some(change)
            }
        };
        let a = || ask("a.txt", Gate::Call, shell("true"), &root);
        let headless = Approver::headless(ApprovalMode::Always, false);
        assert!(headless.approve(a(), preview()).await.is_err());
        let yes = Approver::headless(ApprovalMode::Always, true);
        assert_eq!(yes.approve(a(), preview()).await, Ok(()));
        assert_eq!(worked.lock().map(|n| *n).unwrap_or(99), 0);

        let (approver, asked) = person(vec![ApprovalAnswer::Always]);
        assert_eq!(approver.approve(a(), preview()).await, Ok(()));
        assert_eq!(approver.approve(a(), preview()).await, Ok(()));
        drop(approver);
        let asked = asked.await.unwrap_or_default();
        assert_eq!(asked.len(), 1);
        assert_eq!(asked[0].2.as_ref(), Some(&change));
        assert_eq!(worked.lock().map(|n| *n).unwrap_or(99), 1);
    }
}
