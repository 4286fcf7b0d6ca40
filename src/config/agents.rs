//! `.nop/agents.yml`: the agents of this repository (seed 000's agents_config.yaml).
//!
//! ```yaml
//! agents:
//!   - name: coder
//!     description: General coding agent
//!     prompt: .system/agents/coder.md   # relative to .nop/
//!     enabled: true
//!     capabilities: [code, shell]
//!     # priority: 0-100 and interruptible: only agents that declare a priority take part in
//!     # preemption; the others are never paused or refused.
//!     config: { session.lock_timeout_s: 20 }   # agent layer of the configuration
//!     isolation: worktree   # as a subagent: its own git worktree and branch (default none)
//! ```

use std::collections::HashSet;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{ConfigError, first_line};
use crate::protocol::TextPos;

/// An agent a new session cannot be created for: not in agents.yml (`path`), or disabled there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", if *.disabled { format!("agent `{}` is disabled in {}", .name, .path.display()) } else { format!("no agent `{}` in {}", .name, .path.display()) })]
pub struct NoSuchAgent {
    pub name: String,
    pub path: std::path::PathBuf,
    pub disabled: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentsFile {
    #[serde(default)]
    pub agents: Vec<AgentDef>,
    /// Seed 000's "future extensions": per-user overrides and time-of-day adjustments.
    #[serde(default)]
    pub priority_rules: PriorityRules,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriorityRules {
    /// user → agent → priority, replacing the agent's own for that user.
    #[serde(default)]
    pub users: std::collections::BTreeMap<String, std::collections::BTreeMap<String, u8>>,
    /// Adjustments by local time of day.
    #[serde(default)]
    pub time: Vec<TimeRule>,
}

/// `adjust` is added to the priority of `agents` between `from` and `to` (local "HH:MM"; a
/// range may cross midnight, e.g. 22:00–07:00).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimeRule {
    pub agents: Vec<String>,
    pub from: String,
    pub to: String,
    pub adjust: i16,
}

fn minutes(hhmm: &str) -> Option<u32> {
    let (h, m) = hhmm.trim().split_once(':')?;
    let (h, m): (u32, u32) = (h.parse().ok()?, m.parse().ok()?);
    (h < 24 && m < 60).then_some(h * 60 + m)
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentDef {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// System prompt file, relative to `.nop/`.
    #[serde(default)]
    pub prompt: Option<String>,
    /// 0–100, higher wins; `None` keeps the agent out of preemption altogether.
    #[serde(default)]
    pub priority: Option<u8>,
    #[serde(default = "yes")]
    pub interruptible: bool,
    #[serde(default = "yes")]
    pub enabled: bool,
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// Configuration overrides for sessions of this agent (dotted or nested keys).
    #[serde(default)]
    pub config: Map<String, Value>,
    /// Whether a running session of this agent takes queued messages in between tool calls
    /// (seed 004's `_interrupt_enabled`); off, they wait until the task is done.
    #[serde(default = "yes")]
    pub interrupt_enabled: bool,
    /// Words that make a prompt an emergency (seed 000's `is_emergency_situation`): a prompt
    /// containing one (case-insensitively) runs with the emergency boost, as `--emergency` does.
    #[serde(default)]
    pub emergency_keywords: Vec<String>,
    /// Where the agent works when another agent calls it: `none` (the caller's tree) or
    /// `worktree` (a git worktree of its own on a new branch, its changes committed there).
    #[serde(default, skip_serializing_if = "Isolation::is_none")]
    pub isolation: Isolation,
}

/// An agent definition's `isolation`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Isolation {
    /// A subagent works in its caller's tree.
    #[default]
    None,
    /// A subagent works in its own git worktree (`checkpoint::isolate`).
    Worktree,
}

impl Isolation {
    pub fn is_none(&self) -> bool {
        *self == Isolation::None
    }
}

impl AgentDef {
    /// The first of this agent's emergency keywords that `prompt` contains, ignoring case.
    pub fn emergency_keyword(&self, prompt: &str) -> Option<&str> {
        let prompt = prompt.to_lowercase();
        self.emergency_keywords
            .iter()
            .map(|k| k.trim())
            .find(|k| !k.is_empty() && prompt.contains(&k.to_lowercase()))
    }
}

fn yes() -> bool {
    true
}

/// The agent that exists without being listed in agents.yml.
pub const BUILT_IN_AGENT: &str = "coder";

impl AgentsFile {
    /// Parses and validates agents.yml text; errors name the file and, where known, the line.
    pub fn parse(path: &Path, text: &str) -> Result<AgentsFile, ConfigError> {
        let err = |pos: Option<TextPos>, message: String| ConfigError::Parse {
            path: path.to_path_buf(),
            pos,
            message,
        };
        if text.trim().is_empty() {
            return Ok(AgentsFile::default());
        }
        let file: AgentsFile = serde_saphyr::from_str(text).map_err(|e| {
            let pos = e.location().map(|l| TextPos {
                line: usize::try_from(l.line()).unwrap_or(0),
                column: usize::try_from(l.column()).unwrap_or(0),
            });
            err(pos, first_line(&e.to_string()))
        })?;
        for rule in &file.priority_rules.time {
            if minutes(&rule.from).is_none() || minutes(&rule.to).is_none() {
                return Err(err(
                    None,
                    format!(
                        "priority_rules.time: `{}`–`{}` is not HH:MM–HH:MM",
                        rule.from, rule.to
                    ),
                ));
            }
        }
        let mut names = HashSet::new();
        for agent in &file.agents {
            let pos = line_of(text, &agent.name);
            let valid_name = !agent.name.is_empty()
                && agent
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            if !valid_name {
                return Err(err(
                    pos,
                    format!(
                        "agent name `{}` may only use letters, digits, `-` and `_`",
                        agent.name
                    ),
                ));
            }
            if !names.insert(agent.name.as_str()) {
                return Err(err(pos, format!("agent `{}` is defined twice", agent.name)));
            }
            if let Some(p) = agent.priority.filter(|p| *p > 100) {
                return Err(err(
                    pos,
                    format!("agent `{}`: priority {p} is outside 0–100", agent.name),
                ));
            }
        }
        Ok(file)
    }

    pub fn get(&self, name: &str) -> Option<&AgentDef> {
        self.agents.iter().find(|a| a.name == name)
    }

    /// The agent a new session may be created for: one defined and enabled here, or the built-in
    /// `coder`, which exists even where agents.yml does not list it (one rule for `nop run` and
    /// `nop sessions new`). The error says why not, naming `path`.
    pub fn for_new_session(
        &self,
        name: &str,
        path: &Path,
    ) -> Result<Option<&AgentDef>, NoSuchAgent> {
        let no = |disabled| NoSuchAgent {
            name: name.to_string(),
            path: path.to_path_buf(),
            disabled,
        };
        match self.get(name) {
            Some(def) if !def.enabled => Err(no(true)),
            Some(def) => Ok(Some(def)),
            None if name == BUILT_IN_AGENT => Ok(None),
            None => Err(no(false)),
        }
    }

    /// The priority of `agent` for `user` at local time `minute_of_day` (0–1439), with an
    /// emergency boost of 20 (seed 000's dynamic priority); `None` for an agent that takes no
    /// part in preemption.
    pub fn effective_priority(
        &self,
        agent: &str,
        user: &str,
        minute_of_day: u32,
        emergency: bool,
    ) -> Option<u8> {
        let def = self.get(agent)?;
        let base = self
            .priority_rules
            .users
            .get(user)
            .and_then(|o| o.get(agent))
            .copied()
            .or(def.priority)?;
        let mut p = i32::from(base);
        for rule in &self.priority_rules.time {
            let (Some(from), Some(to)) = (minutes(&rule.from), minutes(&rule.to)) else {
                continue;
            };
            let inside = if from <= to {
                (from..to).contains(&minute_of_day)
            } else {
                minute_of_day >= from || minute_of_day < to
            };
            if inside && rule.agents.iter().any(|a| a == agent) {
                p += i32::from(rule.adjust);
            }
        }
        if emergency {
            p += 20;
        }
        Some(p.clamp(0, 100) as u8)
    }
}

/// The line of the `name:` entry of agent `name`, for error messages.
fn line_of(text: &str, name: &str) -> Option<TextPos> {
    text.lines().enumerate().find_map(|(i, line)| {
        let rest = line.trim_start().trim_start_matches('-').trim_start();
        let value = rest.strip_prefix("name:")?.trim().trim_matches(['"', '\'']);
        (value == name).then_some(TextPos {
            line: i + 1,
            column: line.len() - line.trim_start().len() + 1,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emergency_keywords_match_anywhere_in_any_case() -> anyhow::Result<()> {
        let def: AgentDef =
            serde_saphyr::from_str("name: car\nemergency_keywords: [紧急, Emergency, \" \"]\n")?;
        assert_eq!(def.emergency_keyword("这是紧急情况"), Some("紧急"));
        assert_eq!(
            def.emergency_keyword("an EMERGENCY stop"),
            Some("Emergency")
        );
        assert_eq!(def.emergency_keyword("all calm here"), None);
        let plain: AgentDef = serde_saphyr::from_str("name: plain\n")?;
        assert_eq!(plain.emergency_keyword("emergency"), None);
        Ok(())
    }

    #[test]
    fn parses_the_shipped_file() -> anyhow::Result<()> {
        let text = include_str!("../../.nop/agents.yml");
        let file = AgentsFile::parse(Path::new("agents.yml"), text)?;
        assert!(file.get("coder").is_some());
        assert!(file.get("coder").is_some_and(|c| c.priority.is_none()));
        Ok(())
    }

    #[test]
    fn parses_the_seed_000_example() -> anyhow::Result<()> {
        let text = include_str!("../../examples/agents/seed-000-priorities.yml");
        let file = AgentsFile::parse(Path::new("seed-000-priorities.yml"), text)?;
        let phone = file.get("phone_agent");
        assert!(phone.is_some_and(|a| a.priority == Some(90) && !a.interruptible));
        assert!(
            file.get("music_agent")
                .is_some_and(|a| a.priority == Some(20) && a.interruptible)
        );
        assert_eq!(file.agents.len(), 7);
        Ok(())
    }

    #[test]
    fn user_overrides_time_rules_and_emergencies_adjust_priorities() -> anyhow::Result<()> {
        let text = "agents:\n  - name: music_agent\n    priority: 20\n  - name: coder\npriority_rules:\n  users:\n    alice: {music_agent: 50}\n  time:\n    - agents: [music_agent]\n      from: \"22:00\"\n      to: \"07:00\"\n      adjust: -10\n";
        let file = AgentsFile::parse(Path::new("agents.yml"), text)?;
        let noon = 12 * 60;
        let night = 23 * 60;
        assert_eq!(
            file.effective_priority("music_agent", "bob", noon, false),
            Some(20)
        );
        assert_eq!(
            file.effective_priority("music_agent", "alice", noon, false),
            Some(50)
        );
        assert_eq!(
            file.effective_priority("music_agent", "bob", night, false),
            Some(10)
        );
        assert_eq!(
            file.effective_priority("music_agent", "bob", 6 * 60, true),
            Some(30)
        );
        assert_eq!(file.effective_priority("coder", "bob", noon, true), None);
        Ok(())
    }

    #[test]
    fn isolation_is_none_unless_an_agent_asks_for_a_worktree() -> anyhow::Result<()> {
        let text = "agents:\n  - name: a\n  - name: b\n    isolation: worktree\n  - name: c\n    isolation: none\n";
        let file = AgentsFile::parse(Path::new("agents.yml"), text)?;
        let isolation = |n: &str| file.get(n).map(|a| a.isolation);
        assert_eq!(isolation("a"), Some(Isolation::None));
        assert_eq!(isolation("b"), Some(Isolation::Worktree));
        assert_eq!(isolation("c"), Some(Isolation::None));
        let err = AgentsFile::parse(
            Path::new("agents.yml"),
            "agents:\n  - name: a\n    isolation: sandbox\n",
        )
        .map(drop);
        let message = err.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            message.starts_with("agents.yml:3:") && message.contains("sandbox"),
            "{message}"
        );
        assert!(message.contains("worktree"), "{message}");
        Ok(())
    }

    #[test]
    fn rejects_duplicates_bad_priorities_and_unknown_fields() {
        for (text, needle) in [
            ("agents:\n  - name: a\n  - name: a\n", "twice"),
            ("agents:\n  - name: a\n    priority: 101\n", "0–100"),
            ("agents:\n  - name: a\n    priorty: 5\n", "priorty"),
            ("agents:\n  - name: 'a b'\n", "letters"),
        ] {
            let err = AgentsFile::parse(Path::new("agents.yml"), text).map(drop);
            assert!(
                matches!(&err, Err(e) if e.to_string().contains(needle)),
                "{text}: {err:?}"
            );
        }
    }
}
