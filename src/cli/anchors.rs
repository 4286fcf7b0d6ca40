//! The anchors' headless flags, as a CI step written for `claude -p` or `codex exec` passes
//! them: `--allowedTools`/`--disallowedTools` (Claude Code's tool names, or nop's) become the
//! run's own narrowing of its agent's tools, `--permission-mode` an approval mode. Nothing
//! here widens what the agent's rules allow.

use anyhow::{Result, bail};

use nop::config::RunTools;
use nop::permissions::ApprovalMode;

/// The tools Claude Code lets a headless run use without asking, whatever `--allowedTools`
/// says: reading, searching and the plan.
const NEVER_ASKED: [&str; 4] = ["read-file", "list-files", "search-files", "update-plan"];

/// The run's narrowing of `allowed` and `disallowed` (each as given, a list separated by commas
/// or spaces), and what of them nop cannot honour as written (a warning each).
pub fn run_tools(allowed: &[String], disallowed: &[String]) -> Result<(RunTools, Vec<String>)> {
    let mut warnings = Vec::new();
    let allowed = if allowed.is_empty() {
        None
    } else {
        let mut names: Vec<String> = NEVER_ASKED.iter().map(|n| n.to_string()).collect();
        names.extend(tools("--allowedTools", allowed, &mut warnings)?);
        Some(names)
    };
    let denied = tools("--disallowedTools", disallowed, &mut warnings)?;
    Ok((RunTools { allowed, denied }, warnings))
}

/// Claude Code's `--permission-mode` as nop's approval mode.
pub fn permission_mode(mode: &str) -> Result<ApprovalMode> {
    nop::permissions::claude::approval_mode(mode)
        .map_err(|e| anyhow::anyhow!("--permission-mode {mode}: {e}"))
}

/// nop's tools for the tool names of `lists` given with `flag`.
fn tools(flag: &str, lists: &[String], warnings: &mut Vec<String>) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for name in lists.iter().flat_map(|list| split(list)) {
        let (tool, specifier) = match name.split_once('(') {
            Some((tool, rest)) => (tool, Some(rest.trim_end_matches(')'))),
            None => (name.as_str(), None),
        };
        if tool.contains('-') || tool.contains('.') {
            // nop's own name.
            out.push(tool.to_string());
            continue;
        }
        match nop::permissions::claude::tools_of(tool) {
            Ok(names) => out.extend(names),
            Err(e) => bail!("{flag} {name}: {e}"),
        }
        if let Some(specifier) = specifier.filter(|s| !s.is_empty() && *s != "*") {
            warnings.push(format!(
                "{flag} {name}: nop cannot narrow `{tool}` to `{specifier}`; the rule applies to \
                 the whole tool (shell commands stay confined by the sandbox and the file rules)"
            ));
        }
    }
    Ok(out)
}

/// The names of one flag's value: separated by commas or spaces, except inside `( )`.
fn split(list: &str) -> Vec<String> {
    let (mut names, mut name, mut depth) = (Vec::new(), String::new(), 0u32);
    for c in list.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' | ' ' if depth == 0 => {
                if !name.trim().is_empty() {
                    names.push(name.trim().to_string());
                }
                name.clear();
                continue;
            }
            _ => {}
        }
        name.push(c);
    }
    if !name.trim().is_empty() {
        names.push(name.trim().to_string());
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn claude_codes_names_become_nops_tools_and_a_command_pattern_is_said_to_be_whole() {
        let (tools, warnings) = run_tools(
            &["Edit,Bash(git diff:*) mcp__github__create_issue".into()],
            &["Task".into(), "write-file".into()],
        )
        .expect("translated");
        assert_eq!(
            tools.allowed.clone().expect("a list"),
            [
                "read-file",
                "list-files",
                "search-files",
                "update-plan",
                "edit-file",
                "write-file",
                "shell",
                "github.create_issue"
            ]
        );
        assert_eq!(tools.denied, ["call-agent", "write-file"]);
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("`git diff:*`"), "{warnings:?}");
        assert_eq!(tools.refuses("read-file"), None);
        assert_eq!(
            tools.refuses("github.delete_repo").as_deref(),
            Some(
                "tool `github.delete_repo` is not among this run's allowed tools (--allowedTools)"
            )
        );
        assert!(
            tools
                .refuses("write-file")
                .unwrap()
                .contains("--disallowedTools")
        );
        assert!(tools.refuses("call-agent").is_some());
    }

    #[test]
    fn what_nop_has_no_tool_for_is_a_usage_error_and_no_flag_narrows_nothing() {
        let e = run_tools(&["WebFetch".into()], &[]).expect_err("no web tool");
        assert_eq!(
            e.to_string(),
            "--allowedTools WebFetch: nop has no web tool like `WebFetch`"
        );
        let (tools, warnings) = run_tools(&[], &[]).expect("nothing");
        assert_eq!(tools, RunTools::default());
        assert!(warnings.is_empty());
        assert_eq!(permission_mode("plan").expect("plan"), ApprovalMode::Plan);
        assert_eq!(
            permission_mode("dontAsk").expect("never"),
            ApprovalMode::Never
        );
        assert!(permission_mode("bypassPermissions").is_err());
    }
}
