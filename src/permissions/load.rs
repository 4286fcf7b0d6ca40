//! Reading `.nop/.permissions/agent-*.yml`, with `extends` and the fallback to agent-default.yml.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_saphyr::Spanned;

use super::policy::{FileAccess, FileRule, Pattern, Policy, RuleSet, Source};
use crate::protocol::TextPos;

pub const PERMISSIONS_DIR: &str = ".nop/.permissions";

#[derive(Debug, Clone, thiserror::Error)]
pub enum PermissionError {
    #[error("{}{}: {message}", path.display(), pos.map(|p| format!(":{}:{}", p.line, p.column)).unwrap_or_default())]
    Parse {
        path: PathBuf,
        pos: Option<TextPos>,
        message: String,
    },
    #[error("{}: {message}", path.display())]
    Io { path: PathBuf, message: String },
    #[error("no permission file for agent `{agent}`: {} does not exist (run `nop init` to install the defaults)", path.display())]
    Missing { agent: String, path: PathBuf },
    #[error("permission files extend each other in a cycle: {}", chain.join(" → "))]
    Cycle { chain: Vec<String> },
    #[error("{}:{line}: `extends: {name}` names {}, which does not exist", from.display(), path.display())]
    ExtendsMissing {
        from: PathBuf,
        line: usize,
        name: String,
        path: PathBuf,
    },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    agent: Option<String>,
    #[serde(default)]
    extends: Option<Spanned<String>>,
    #[serde(default)]
    tools: Option<Tools>,
    #[serde(default, rename = "file-access")]
    file_access: Option<Vec<RuleEntry>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Tools {
    #[serde(default)]
    allowed: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    denied: Option<Vec<Spanned<String>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleEntry {
    pattern: Spanned<String>,
    access: Spanned<String>,
}

fn file_of(root: &Path, agent: &str) -> PathBuf {
    root.join(PERMISSIONS_DIR)
        .join(format!("agent-{agent}.yml"))
}

fn pos(location: &serde_saphyr::Location) -> Option<TextPos> {
    let line = usize::try_from(location.line()).ok().filter(|l| *l > 0)?;
    Some(TextPos {
        line,
        column: usize::try_from(location.column()).unwrap_or(0),
    })
}

fn parse(path: &Path) -> Result<Option<File>, PermissionError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(PermissionError::Io {
                path: path.to_path_buf(),
                message: e.to_string(),
            });
        }
    };
    if text.trim().is_empty() {
        return Err(PermissionError::Parse {
            path: path.to_path_buf(),
            pos: None,
            message: "the file is empty (an empty permission file would grant nothing; say so with `tools: {allowed: []}`)".into(),
        });
    }
    let file: File = serde_saphyr::from_str(&text).map_err(|e| PermissionError::Parse {
        path: path.to_path_buf(),
        pos: e.location().as_ref().and_then(pos),
        message: crate::config::first_line(&e.to_string()),
    })?;
    let sets_nothing = file.agent.is_none()
        && file.extends.is_none()
        && file.tools.is_none()
        && file.file_access.is_none();
    if sets_nothing {
        return Err(PermissionError::Parse {
            path: path.to_path_buf(),
            pos: None,
            message: "the file sets nothing (comments only): it would deny every tool and file; \
                      say so with `tools: {allowed: []}` if that is meant"
                .into(),
        });
    }
    Ok(Some(file))
}

/// The rule set of one agent: its file (or agent-default.yml), then what it extends.
pub fn load_ruleset(root: &Path, agent: &str) -> Result<RuleSet, PermissionError> {
    let mut chain: Vec<String> = Vec::new();
    let mut set = RuleSet::empty(agent);
    let mut tools_allowed_done = false;
    let mut tools_denied_done = false;
    let mut next = Some(agent.to_string());
    // The file and line of the `extends` that named `next`, if one did.
    let mut named_by: Option<(PathBuf, usize)> = None;
    let shown = |name: &str| format!("agent-{name}.yml");
    while let Some(name) = next.take() {
        if chain.contains(&name) {
            chain.push(name);
            return Err(PermissionError::Cycle {
                chain: chain.iter().map(|n| shown(n)).collect(),
            });
        }
        chain.push(name.clone());
        let path = file_of(root, &name);
        let (file, path, name) = match parse(&path)? {
            Some(file) => (file, path, name),
            // A file named by `extends` must exist: a typo never silently means "default".
            None if named_by.is_some() => {
                let (from, line) = named_by.take().unwrap_or_default();
                return Err(PermissionError::ExtendsMissing {
                    from,
                    line,
                    name: name.clone(),
                    path,
                });
            }
            None if name != "default" => {
                let default = file_of(root, "default");
                match parse(&default)? {
                    Some(file) => (file, default, "default".to_string()),
                    None => {
                        return Err(PermissionError::Missing {
                            agent: agent.to_string(),
                            path,
                        });
                    }
                }
            }
            None => {
                return Err(PermissionError::Missing {
                    agent: agent.to_string(),
                    path,
                });
            }
        };
        if !chain.contains(&name) {
            chain.push(name.clone());
        }
        set.files.push(path.clone());
        let source = |s: &Spanned<String>| Source::File {
            path: path.clone(),
            line: usize::try_from(s.referenced.line()).unwrap_or(0),
        };
        if let Some(tools) = &file.tools {
            if let (Some(allowed), false) = (&tools.allowed, tools_allowed_done) {
                set.tools_allowed = allowed
                    .iter()
                    .map(|s| Pattern::tool(&s.value, source(s)))
                    .collect::<Result<_, _>>()
                    .map_err(|m| parse_err(&path, &allowed[0], m))?;
                tools_allowed_done = true;
            }
            if let (Some(denied), false) = (&tools.denied, tools_denied_done) {
                set.tools_denied = denied
                    .iter()
                    .map(|s| Pattern::tool(&s.value, source(s)))
                    .collect::<Result<_, _>>()
                    .map_err(|m| parse_err(&path, &denied[0], m))?;
                tools_denied_done = true;
            }
        }
        for entry in file.file_access.iter().flatten() {
            let access = FileAccess::parse(&entry.access.value).ok_or_else(|| {
                parse_err(
                    &path,
                    &entry.access,
                    format!(
                        "access `{}` is not one of read, read-only, deny, ask",
                        entry.access.value
                    ),
                )
            })?;
            let rule = FileRule::new(&entry.pattern.value, access, source(&entry.pattern))
                .map_err(|m| parse_err(&path, &entry.pattern, m))?;
            set.rules.push(rule);
        }
        named_by = file.extends.as_ref().map(|e| {
            (
                path.clone(),
                usize::try_from(e.referenced.line()).unwrap_or(0),
            )
        });
        next = match &file.extends {
            Some(parent) => Some(parent.value.clone()),
            None if name != "default" => Some("default".to_string()),
            None => None,
        };
        let _ = file.agent;
    }
    Ok(set)
}

fn parse_err(path: &Path, at: &Spanned<String>, message: String) -> PermissionError {
    PermissionError::Parse {
        path: path.to_path_buf(),
        pos: pos(&at.referenced),
        message,
    }
}

/// The policy of `agent` in the repository at `root` (canonical).
pub fn load_policy(root: &Path, agent: &str) -> Result<Policy, PermissionError> {
    Ok(Policy::new(
        root.to_path_buf(),
        vec![load_ruleset(root, agent)?],
    ))
}

/// Parses every permission file; returns each file with its error, if any.
pub fn validate_all(root: &Path) -> Vec<(PathBuf, Result<(), PermissionError>)> {
    let dir = root.join(PERMISSIONS_DIR);
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter_map(|n| {
            n.strip_prefix("agent-")
                .and_then(|r| r.strip_suffix(".yml"))
                .map(str::to_string)
        })
        .collect();
    names.sort();
    if !names.iter().any(|n| n == "default") {
        names.insert(0, "default".into());
    }
    names
        .into_iter()
        .map(|name| (file_of(root, &name), load_ruleset(root, &name).map(drop)))
        .collect()
}

/// The policy of `agent` called by `ancestors` (nearest first): its own rules narrowed by each
/// caller's, read afresh.
pub fn load_chain(
    root: &Path,
    agent: &str,
    ancestors: &[String],
) -> Result<Policy, PermissionError> {
    let mut sets = vec![load_ruleset(root, agent)?];
    for ancestor in ancestors {
        sets.push(load_ruleset(root, ancestor)?);
    }
    Ok(Policy::new(root.to_path_buf(), sets))
}
