//! `nop agents list`, `nop plugins list` and `nop skills list`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;

use super::context::Context;

use super::term::style::{json_safe, one_line};
use super::{exit_code, render};
use serde_json::json;

/// `nop agents list`: each agent with its priority as it stands now for `user`.
pub fn agents(ctx: &Context, json: bool, out: &mut impl Write) -> Result<ExitCode> {
    let agents = ctx.ws.agents()?;
    let minute = {
        use chrono::Timelike;
        let now = chrono::Local::now();
        now.hour() * 60 + now.minute()
    };
    render::agents(out, &agents, &ctx.user, minute, json)?;
    Ok(ExitCode::SUCCESS)
}

/// `nop plugins list`: each plugin's state, source file and tools (MCP servers started and
/// stopped), in order of precedence.
pub fn plugins(ctx: &Context, json: bool, out: &mut impl Write) -> Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let (_, statuses) = rt.block_on(nop::plugins::load_all(
        &ctx.ws.root,
        &nop::tools::SandboxSettings::from_config(ctx.config()),
        &ctx.env,
    ));
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&statuses)?)?;
    } else if statuses.is_empty() {
        writeln!(
            out,
            "no plugins (add one under .nop/plugins/<name>/config.yml)"
        )?;
    } else {
        for s in &statuses {
            writeln!(out, "{:<16} {}  ({})", s.name, s.state, s.source)?;
            for note in &s.notes {
                writeln!(out, "  note: {note}")?;
            }
            for t in &s.tools {
                writeln!(out, "  {t}")?;
            }
        }
    }
    Ok(exit_code(!statuses.iter().any(|s| s.failed())))
}

/// How a skill's or a command's folder is shown: relative to the repository, `~/…` in the home
/// directory, else whole.
pub fn shown_path(path: &Path, root: &Path, home: Option<&Path>) -> String {
    if let Ok(relative) = path.strip_prefix(root) {
        return relative.display().to_string();
    }
    if let Some(relative) = home.and_then(|h| path.strip_prefix(h).ok()) {
        return format!("~/{}", relative.display());
    }
    path.display().to_string()
}

/// `nop skills list`: the skills the agent can load, where each was found, and the ones
/// shadowed by an earlier skill of the same name; files left out are warnings on stderr.
pub fn skills(ctx: &Context, json: bool, out: &mut impl Write) -> Result<ExitCode> {
    let home = ctx
        .env
        .get("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute());
    // As the default agent sees them: a skill its rules do not let it read is not listed.
    let agent = &ctx.config().agent.default;
    let rules = nop::permissions::load_policy(&ctx.ws.root, agent).ok();
    let readable = |real: &Path| {
        rules.as_ref().is_some_and(|p| {
            p.check_resolved(real, nop::permissions::Access::Read)
                .is_allowed()
        })
    };
    let found = nop::skills::discover_in(&ctx.ws.root, home.as_deref(), &readable);
    let shown = |p: &Path| shown_path(p, &ctx.ws.root, home.as_deref());
    let first_line = |d: &str| one_line(d.lines().next().unwrap_or(""));
    let row = |s: &nop::skills::Skill| {
        json!({
            "name": s.name,
            "description": s.description,
            "dir": s.dir,
            "source": shown(&s.source),
            "user": s.user,
        })
    };
    if json {
        let value = json!({
            "skills": found.skills.iter().map(row).collect::<Vec<_>>(),
            "shadowed": found.shadowed.iter().map(|s| {
                let mut r = row(s);
                r["shadowedBy"] = json!(found.get(&s.name).map(|w| w.dir.clone()));
                r
            }).collect::<Vec<_>>(),
            "warnings": found.warnings,
        });
        writeln!(out, "{}", json_safe(serde_json::to_string_pretty(&value)?))?;
        return Ok(ExitCode::SUCCESS);
    }
    for w in &found.warnings {
        eprintln!("warning: {}", one_line(w));
    }
    if found.skills.is_empty() {
        writeln!(
            out,
            "no skills (add one as .agents/skills/<name>/SKILL.md or ~/.claude/skills/<name>/SKILL.md)"
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    let width = found
        .skills
        .iter()
        .chain(&found.shadowed)
        .map(|s| s.name.chars().count())
        .max()
        .unwrap_or(4)
        .max(4);
    let source_width = found
        .skills
        .iter()
        .chain(&found.shadowed)
        .map(|s| shown(&s.source).chars().count())
        .max()
        .unwrap_or(6)
        .max(6);
    writeln!(
        out,
        "{:<width$}  {:<source_width$}  DESCRIPTION",
        "NAME", "SOURCE"
    )?;
    for s in &found.skills {
        writeln!(
            out,
            "{:<width$}  {:<source_width$}  {}",
            one_line(&s.name),
            shown(&s.source),
            first_line(&s.description)
        )?;
    }
    if !found.shadowed.is_empty() {
        writeln!(out, "\nshadowed (an earlier skill has the name):")?;
        for s in &found.shadowed {
            let by = found.get(&s.name).map_or(String::new(), |w| shown(&w.dir));
            writeln!(
                out,
                "{:<width$}  {:<source_width$}  by {}",
                one_line(&s.name),
                shown(&s.source),
                by
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
