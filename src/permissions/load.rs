//! Reading `.nop/.permissions/agent-*.yml`, with `extends` and the fallback to agent-default.yml.
//! A repository without `.nop/.permissions/` reads the texts `nop init` would install there, so
//! it is confined exactly as a freshly initialised one. Where the directory exists it is the
//! user's and the only source: a missing file there is never filled in from the built-in texts
//! (the fallback to agent-default.yml holds, and without that file an agent has no rules), and
//! a file that cannot be read or parsed is an error (fail closed).

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

/// The built-in text of agent `name`'s permission file, if nop ships one.
fn built_in(name: &str) -> Option<&'static str> {
    crate::templates::get(&format!(".permissions/agent-{name}.yml"))
}

/// Whether the repository at `root` has no permission directory (a dangling link counts as
/// one), so that the built-in texts stand in for it.
fn without_directory(root: &Path) -> bool {
    std::fs::symlink_metadata(root.join(PERMISSIONS_DIR))
        .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
}

/// Parses agent `name`'s file at `path` (in the repository at `root`), or its built-in text when
/// the repository has no permission directory; `Ok(None)` when there is neither. The flag says
/// the rules are built in.
fn parse(
    root: &Path,
    path: &Path,
    name: &str,
    built_in_only: bool,
) -> Result<Option<(File, bool)>, PermissionError> {
    if built_in_only {
        return match built_in(name) {
            Some(text) => parse_text(path, text).map(|file| Some((file, true))),
            None => Ok(None),
        };
    }
    let (text, builtin) = match std::fs::read_to_string(path) {
        Ok(text) => (text, false),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            match built_in(name).filter(|_| without_directory(root)) {
                Some(text) => (text.to_string(), true),
                None => return Ok(None),
            }
        }
        Err(e) => {
            return Err(PermissionError::Io {
                path: path.to_path_buf(),
                message: e.to_string(),
            });
        }
    };
    parse_text(path, &text).map(|file| Some((file, builtin)))
}

/// Whether `text`, as the permission file at `path`, parses and says something; `Err` names the
/// file and line.
pub fn check_text(path: &Path, text: &str) -> Result<(), PermissionError> {
    let file = parse_text(path, text)?;
    // Every rule must also compile, as loading it would.
    for entry in file.file_access.iter().flatten() {
        let access = FileAccess::parse(&entry.access.value).ok_or_else(|| {
            parse_err(
                path,
                &entry.access,
                format!(
                    "access `{}` is not one of read, read-only, deny, ask",
                    entry.access.value
                ),
            )
        })?;
        FileRule::new(&entry.pattern.value, access, Source::Floor)
            .map_err(|m| parse_err(path, &entry.pattern, m))?;
    }
    for tool in file
        .tools
        .iter()
        .flat_map(|t| t.allowed.iter().flatten().chain(t.denied.iter().flatten()))
    {
        Pattern::tool(&tool.value, Source::Floor).map_err(|m| parse_err(path, tool, m))?;
    }
    Ok(())
}

/// The permission file at `path` whose text is `text`, parsed.
fn parse_text(path: &Path, text: &str) -> Result<File, PermissionError> {
    if text.trim().is_empty() {
        return Err(PermissionError::Parse {
            path: path.to_path_buf(),
            pos: None,
            message: "the file is empty (an empty permission file would grant nothing; say so with `tools: {allowed: []}`)".into(),
        });
    }
    let file: File = serde_saphyr::from_str(text).map_err(|e| PermissionError::Parse {
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
    Ok(file)
}

/// The rule set of one agent: its file (or agent-default.yml), then what it extends.
pub fn load_ruleset(root: &Path, agent: &str) -> Result<RuleSet, PermissionError> {
    load_ruleset_from(root, agent, false)
}

/// The rule sets that bound agent `agent` (every one must allow): its files' rules; and, in a
/// workspace the user has not trusted (`crate::trust`: a cloned repository, a `.nop/` nobody
/// looked at), the built-in rules beside them, so that the repository's files may narrow what
/// the agent does (their deny, read-only and ask rules all hold) and never widen it.
fn rulesets(root: &Path, agent: &str) -> Result<Vec<RuleSet>, PermissionError> {
    let set = load_ruleset_from(root, agent, false)?;
    if without_directory(root) || crate::trust::workspace_check(root).is_ok() {
        return Ok(vec![set]);
    }
    Ok(vec![set, load_ruleset_from(root, agent, true)?])
}

#[expect(clippy::too_many_lines, reason = "a debt: listed in AGENTS.md")]
fn load_ruleset_from(
    root: &Path,
    agent: &str,
    built_in_only: bool,
) -> Result<RuleSet, PermissionError> {
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
        let (file, path, name) = match parse(root, &path, &name, built_in_only)? {
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
                match parse(root, &default, "default", built_in_only)? {
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
        let (file, builtin) = file;
        set.files.push(path.clone());
        if builtin {
            set.built_in.push(path.clone());
        }
        let source = |s: &Spanned<String>| {
            let line = usize::try_from(s.referenced.line()).unwrap_or(0);
            if builtin {
                Source::BuiltIn {
                    path: path.clone(),
                    line,
                }
            } else {
                Source::File {
                    path: path.clone(),
                    line,
                }
            }
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

fn parse_err(path: &Path, at: &Spanned<String>, message: impl ToString) -> PermissionError {
    PermissionError::Parse {
        path: path.to_path_buf(),
        pos: pos(&at.referenced),
        message: message.to_string(),
    }
}

/// The policy of `agent` in the repository at `root` (canonical).
pub fn load_policy(root: &Path, agent: &str) -> Result<Policy, PermissionError> {
    Ok(Policy::new(root.to_path_buf(), rulesets(root, agent)?).with_user_skills())
}

/// The agents that have permission files (the built-in ones where the repository has no
/// permission directory), `default` first.
fn agent_names(root: &Path) -> Vec<String> {
    let dir = root.join(PERMISSIONS_DIR);
    let agent_of = |n: &str| {
        n.strip_prefix("agent-")
            .and_then(|r| r.strip_suffix(".yml"))
            .map(str::to_string)
    };
    let mut names: Vec<String> = if without_directory(root) {
        crate::templates::under(".permissions/")
            .filter_map(agent_of)
            .collect()
    } else {
        std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter_map(|n| agent_of(&n))
            .collect()
    };
    names.sort();
    if !names.iter().any(|n| n == "default") {
        names.insert(0, "default".into());
    }
    names
}

/// Parses every permission file (the built-in ones where the repository has no permission
/// directory); returns each file with its error, if any.
pub fn validate_all(root: &Path) -> Vec<(PathBuf, Result<(), PermissionError>)> {
    agent_names(root)
        .into_iter()
        .map(|name| (file_of(root, &name), load_ruleset(root, &name).map(drop)))
        .collect()
}

/// Every agent's rules side by side (plus the floor alone), for what holds whichever agent
/// runs: [`Policy::denied_to_some_agent`]. A permission file that does not parse is left out
/// and returned with its error.
pub fn load_every_agent(root: &Path) -> (Policy, Vec<PermissionError>) {
    let mut sets = vec![RuleSet::empty("floor")];
    let mut errors = Vec::new();
    for name in agent_names(root) {
        match rulesets(root, &name) {
            Ok(more) => sets.extend(more),
            Err(e) => errors.push(e),
        }
    }
    (Policy::new(root.to_path_buf(), sets), errors)
}

/// The policy of `agent` called by `ancestors` (nearest first): its own rules narrowed by each
/// caller's, read afresh.
pub fn load_chain(
    root: &Path,
    agent: &str,
    ancestors: &[String],
) -> Result<Policy, PermissionError> {
    let mut sets = rulesets(root, agent)?;
    for ancestor in ancestors {
        sets.extend(rulesets(root, ancestor)?);
    }
    Ok(Policy::new(root.to_path_buf(), sets).with_user_skills())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Allowed tools, denied tools, and each file rule with its line.
    type Said = (Vec<String>, Vec<String>, Vec<(String, FileAccess, usize)>);

    /// What a rule set says, without where it was read from.
    fn said(set: &RuleSet) -> Said {
        let line = |s: &Source| match s {
            Source::File { line, .. } | Source::BuiltIn { line, .. } => *line,
            Source::Floor | Source::Skill => 0,
        };
        (
            set.tools_allowed.iter().map(|p| p.text.clone()).collect(),
            set.tools_denied.iter().map(|p| p.text.clone()).collect(),
            set.rules
                .iter()
                .map(|r| (r.pattern.clone(), r.access, line(&r.source)))
                .collect(),
        )
    }

    /// Without `.nop/.permissions/`, every agent gets exactly the rules `nop init` would install,
    /// line for line; the sources say they are built in.
    #[test]
    fn without_permission_files_the_rules_are_those_init_installs() -> anyhow::Result<()> {
        let bare = tempfile::tempdir()?;
        let initialised = tempfile::tempdir()?;
        crate::workspace::init(initialised.path(), false, chrono::Utc::now())?;
        for agent in [
            "default",
            "coder",
            "retry-advisor",
            "consistency-checker",
            "compression-advisor",
            "goal-checker",
            "summarizer",
            "splitter",
            "someone-else",
        ] {
            crate::trust::accept_workspace(&crate::trust::process_env(), initialised.path())?;
            let built_in = load_ruleset(bare.path(), agent)?;
            let installed = load_ruleset(initialised.path(), agent)?;
            assert_eq!(said(&built_in), said(&installed), "{agent}");
            assert_eq!(built_in.built_in, built_in.files, "{agent}");
            assert!(installed.built_in.is_empty());
            assert!(
                built_in
                    .rules
                    .iter()
                    .all(|r| matches!(r.source, Source::BuiltIn { .. })),
                "{agent}"
            );
        }
        let checked = validate_all(bare.path());
        assert_eq!(checked.len(), validate_all(initialised.path()).len());
        assert!(checked.iter().all(|(_, r)| r.is_ok()));
        Ok(())
    }

    /// A permission file that exists but is broken or unreadable is an error, not a fallback to
    /// the built-in rules.
    #[test]
    fn a_broken_file_fails_closed_even_where_a_built_in_one_exists() -> anyhow::Result<()> {
        let root = tempfile::tempdir()?;
        let dir = root.path().join(PERMISSIONS_DIR);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("agent-default.yml"), "tools: [\n")?;
        assert!(matches!(
            load_ruleset(root.path(), "coder"),
            Err(PermissionError::Parse { .. })
        ));
        std::fs::write(dir.join("agent-default.yml"), "# nothing\n")?;
        assert!(load_ruleset(root.path(), "default").is_err());
        std::fs::remove_file(dir.join("agent-default.yml"))?;
        std::fs::create_dir(dir.join("agent-default.yml"))?;
        assert!(matches!(
            load_ruleset(root.path(), "default"),
            Err(PermissionError::Io { .. })
        ));
        std::fs::remove_dir(dir.join("agent-default.yml"))?;
        std::fs::write(dir.join("agent-coder.yml"), "extends: nobody\n")?;
        assert!(matches!(
            load_ruleset(root.path(), "coder"),
            Err(PermissionError::ExtendsMissing { .. })
        ));
        Ok(())
    }
    /// Where the permission directory exists, it is the only source: a missing agent file falls
    /// back to the user's agent-default.yml, and without that there are no rules (an error),
    /// never the built-in ones. A dangling link in place of the directory counts as one.
    #[test]
    fn an_existing_directory_is_never_filled_in_from_the_built_in_texts() -> anyhow::Result<()> {
        let root = tempfile::tempdir()?;
        let dir = root.path().join(PERMISSIONS_DIR);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(
            dir.join("agent-default.yml"),
            "tools:\n  allowed: [read-file]\nfile-access:\n  - pattern: \"**\"\n    access: read-only\n",
        )?;
        crate::trust::accept_workspace(&crate::trust::process_env(), root.path())?;
        let set = load_ruleset(root.path(), "retry-advisor")?;
        assert_eq!(set.files, [dir.join("agent-default.yml")]);
        assert!(set.built_in.is_empty());
        assert_eq!(set.rules.len(), 1);
        std::fs::remove_file(dir.join("agent-default.yml"))?;
        for agent in ["default", "retry-advisor", "coder"] {
            assert!(
                matches!(
                    load_ruleset(root.path(), agent),
                    Err(PermissionError::Missing { .. })
                ),
                "{agent}"
            );
        }
        std::fs::remove_dir(&dir)?;
        std::os::unix::fs::symlink(root.path().join("nowhere"), &dir)?;
        assert!(matches!(
            load_ruleset(root.path(), "default"),
            Err(PermissionError::Missing { .. })
        ));
        Ok(())
    }
}
