//! Permissions (seed 002 §5, §8.3): per-agent YAML rules for tools and files, a built-in floor no
//! file can lift, path normalisation, and the intersection that keeps subagents from widening
//! their parent's rights.
//!
//! ```yaml
//! # .nop/.permissions/agent-<name>.yml (agent-default.yml for agents without one)
//! extends: default            # optional; agent files fall back to agent-default.yml anyway
//! tools:
//!   allowed: ["*"]            # "*" and globs such as "github.*"; checked after denied
//!   denied: [shell]
//! file-access:                # first match wins
//!   - pattern: "secrets/**"
//!     access: deny            # read | read-only | deny | ask
//!   - pattern: "**"
//!     access: read            # read and write
//! ```
//!
//! Files are read afresh for every check (they are small), so an edit takes effect on the next
//! tool call; a file that cannot be parsed fails closed with its path and line.

pub mod approval;
pub mod claude;
mod gitlinks;
mod landlock_map;
mod load;
mod policy;
mod scope;
mod shell_view;
pub use gitlinks::{git_tracks, gitlinks};
#[cfg(test)]
pub(crate) use shell_view::test_support;
pub use shell_view::{Effect, Layers, Protection, ShellOptions, ShellView};

pub use approval::{
    ApprovalAnswer, ApprovalMode, ApprovalRequest, Approver, Ask, Denial, Gate, Refusal,
};
pub use load::{
    PERMISSIONS_DIR, PermissionError, check_text, load_chain, load_every_agent, load_policy,
    validate_all,
};
pub use policy::{
    Access, Decision, FileAccess, Policy, RuleSet, Source, external_git_dirs, resolve,
};
pub use scope::command_matches;
pub use scope::{Action, Scope};

/// The confinement of shell commands under `policy`.
pub fn shell_view(policy: &Policy, options: &ShellOptions) -> ShellView {
    use crate::sandbox::{Mechanism, Spec};
    match options.mechanism {
        Mechanism::Namespaces => shell_view::namespace_view(policy, options),
        Mechanism::Landlock => landlock_map::landlock_view(policy, options),
        Mechanism::Unconfined => ShellView {
            spec: Spec {
                mechanism: Mechanism::Unconfined,
                required: options.required,
                grants: Vec::new(),
                mounts: Vec::new(),
                network: true,
                parent: Some(std::process::id()),
            },
            writable_roots: vec![std::path::PathBuf::from("/")],
            protections: Vec::new(),
            limits: vec!["nothing is confined: commands run with your rights".to_string()],
            git_layers: Vec::new(),
        },
    }
}
