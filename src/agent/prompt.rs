//! The system prompt of a new session: the agent's prompt file, the environment, the project
//! instructions (AGENTS.md / CLAUDE.md from the root down to the working directory, see
//! [`super::instructions`]), and the list of skills (names and whole descriptions, within the
//! budget of [`crate::skills::prompt_section`]).

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};

use super::instructions::{Instructions, Sources, Status};
use crate::config::AgentDef;
use crate::workspace::Workspace;

/// The coder prompt this build ships, used when agents.yml does not define `coder`.
pub const BUILTIN_CODER: &str = include_str!("../../.nop/.system/agents/coder.md");

/// An agent's prompt file cannot be read. The I/O error is in the text and not also the
/// `source()`, which a chain printer (`{:#}`, how `main` prints a failed run) would repeat.
#[derive(Debug, thiserror::Error)]
#[error("{}: {error} (the prompt file of agent `{agent}` in agents.yml)", path.display())]
pub struct PromptError {
    agent: String,
    path: std::path::PathBuf,
    error: std::io::Error,
}

/// The prompt file `agents.yml` names for `agent`, or `builtin` when there is none (or it cannot
/// be read) — for the agents nop calls itself: summarizer, splitter, and a prompt history's base.
pub fn configured_prompt(ws: &Workspace, agent: &str, builtin: &str) -> String {
    ws.agents()
        .ok()
        .and_then(|a| a.get(agent).and_then(|d| d.prompt.clone()))
        .and_then(|p| ws.read_file(&p).ok())
        .unwrap_or_else(|| builtin.to_string())
}

/// Builds the system prompt for `agent` in `ws`, for a run started in `cwd` (the repository root
/// or a directory inside it).
pub fn system_prompt(
    ws: &Workspace,
    cwd: &Path,
    agent_name: &str,
    agent: Option<&AgentDef>,
    now: DateTime<Utc>,
) -> Result<String, PromptError> {
    build(ws, cwd, agent_name, &[], agent, now).map(|(prompt, _)| prompt)
}

/// [`system_prompt`] for a subagent called by `ancestors` (nearest first): the files its
/// instructions import must pass its rules narrowed by every caller's, as its tool calls do.
pub fn subagent_prompt(
    ws: &Workspace,
    cwd: &Path,
    agent_name: &str,
    ancestors: &[String],
    agent: Option<&AgentDef>,
    now: DateTime<Utc>,
) -> Result<String, PromptError> {
    build(ws, cwd, agent_name, ancestors, agent, now).map(|(prompt, _)| prompt)
}

/// [`system_prompt`], and warnings for the user: the agent's long-term memory could not be read
/// (the prompt then goes without it), an instruction file was left out or cut, the repository
/// has Claude Code permission rules nop never imported (said once per content of the file, so
/// only where the warnings reach the user). Never silent.
pub fn system_prompt_noting(
    ws: &Workspace,
    cwd: &Path,
    agent_name: &str,
    agent: Option<&AgentDef>,
    now: DateTime<Utc>,
) -> Result<(String, Vec<String>), PromptError> {
    let (prompt, mut warnings) = build(ws, cwd, agent_name, &[], agent, now)?;
    // Under nop those rules protect nothing until imported.
    let state = ws.nop_dir().join("state");
    warnings.extend(crate::permissions::claude::unimported(&ws.root, &state));
    Ok((prompt, warnings))
}

/// The system prompt and the warnings about what went into it.
fn build(
    ws: &Workspace,
    cwd: &Path,
    agent_name: &str,
    ancestors: &[String],
    agent: Option<&AgentDef>,
    now: DateTime<Utc>,
) -> Result<(String, Vec<String>), PromptError> {
    let base = match agent.and_then(|a| a.prompt.as_deref()) {
        // A prompt file nop ships and that is not there reads as its built-in text.
        Some(relative) => ws.read_file(relative).map_err(|error| PromptError {
            agent: agent_name.to_string(),
            path: ws.nop_dir().join(relative),
            error,
        })?,
        None => BUILTIN_CODER.to_string(),
    };
    // The agent's long-term memory: its prompt history's summaries follow the prompt (seed 001).
    let mut warnings = Vec::new();
    let memory = match crate::memory::MemoryStore::new(&ws.nop_dir()).load(agent_name) {
        Ok(memory) => memory,
        Err(e) => {
            let warning = format!(
                "the long-term memory of `{agent_name}` could not be read, so this session \
                 starts without it: {e}"
            );
            tracing::warn!(agent = %agent_name, op = "memory", result = "unreadable", "{warning}");
            warnings.push(warning);
            None
        }
    };
    let mut prompt = match memory {
        Some(m) => m.current_prompt(&base),
        None => base.trim_end().to_string(),
    };
    let place = match cwd.strip_prefix(&ws.root) {
        Ok(below) if !below.as_os_str().is_empty() => format!(
            "- Repository root: {}\n- Working directory of the user: {} (tool paths are relative \
             to the repository root)\n",
            ws.root.display(),
            below.display()
        ),
        _ => format!(
            "- Repository root (working directory): {}\n",
            ws.root.display()
        ),
    };
    prompt.push_str(&format!(
        "\n\n# Environment\n{place}- Platform: {}\n- Date: {}\n",
        std::env::consts::OS,
        now.format("%Y-%m-%d")
    ));
    let instructions = instructions_for(ws, cwd, agent_name, ancestors);
    if let Some(section) = instructions.section {
        prompt.push_str(&section);
    }
    warnings.extend(instructions.warnings);
    // Only the skills this agent may read, links resolved: a description is read by nop, and
    // would otherwise carry a denied file's words into every prompt.
    let rules = crate::permissions::load_chain(&ws.root, agent_name, ancestors).ok();
    let readable = |real: &Path| {
        rules.as_ref().is_some_and(|p| {
            p.check_resolved(real, crate::permissions::Access::Read)
                .is_allowed()
        })
    };
    let skills = crate::skills::discover(&ws.root, &readable);
    for warning in &skills.warnings {
        tracing::warn!(op = "skills", result = "left out", "{warning}");
    }
    warnings.extend(skills.warnings.iter().cloned());
    prompt.push_str(&crate::skills::prompt_section(
        &skills.skills,
        crate::skills::PROMPT_BUDGET,
    ));
    Ok((prompt, warnings))
}

/// The project instructions of a session of `agent_name` (called by `ancestors`, nearest first)
/// started in `cwd`: the user's files (from `HOME` and `CODEX_HOME`), the repository's, and what
/// they import as the agent's rules allow. Which files were used is logged.
pub fn instructions_for(
    ws: &Workspace,
    cwd: &Path,
    agent_name: &str,
    ancestors: &[String],
) -> Instructions {
    let var = |name: &str| {
        std::env::var_os(name)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    let home = var("HOME");
    let codex_home = var("CODEX_HOME").or_else(|| home.as_ref().map(|h| h.join(".codex")));
    let policy =
        crate::permissions::load_chain(&ws.root, agent_name, ancestors).map_err(|e| e.to_string());
    let instructions = super::instructions::project_instructions(&Sources {
        root: &ws.root,
        cwd,
        home: home.as_deref(),
        codex_home: codex_home.as_deref(),
        rules: policy.as_ref().map_err(String::as_str),
        max_bytes: super::instructions::MAX_BYTES,
    });
    let used: Vec<&str> = instructions
        .files
        .iter()
        .filter(|f| matches!(f.status, Status::Used | Status::Cut { .. }))
        .map(|f| f.label.as_str())
        .collect();
    if !instructions.files.is_empty() {
        tracing::info!(agent = %agent_name, op = "instructions", files = ?used, "project instructions read");
    }
    instructions
}
