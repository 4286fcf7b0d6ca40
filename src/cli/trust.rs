//! `nop trust [--yes] [--revoke PATH] [--json]`, and the question a run asks on a terminal:
//! what of the repository nop would run outside the sandbox (or would let widen the agent's
//! rules) that the user has not trusted, each with why (new; changed, with a diff), and the
//! user's answer recorded outside the repository (`nop::trust`).

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Result, bail};
use serde_json::json;
use similar::{ChangeTag, TextDiff};

use nop::trust::{self, Base, Untrusted, Why};
use nop::workspace::Workspace;

use super::context::{Context, Invocation};
use super::term::style::visible;

/// Lines of one file shown at most, new or as a diff.
const SHOWN_LINES: usize = 40;

/// What of the workspace `ws` is not trusted (`nop::trust::review_all`).
pub fn untrusted(ws: &Workspace, env: &BTreeMap<String, String>) -> (Base, Vec<Untrusted>) {
    trust::review_all(&ws.root, &ws.set_aside, env)
}

/// `nop trust`: list what is not trusted; `--yes` trusts it; `--revoke PATH` takes trust back.
pub fn command(
    inv: &Invocation,
    ws: &Workspace,
    yes: bool,
    revoke: Option<&Path>,
    json: bool,
    out: &mut impl Write,
) -> Result<ExitCode> {
    let env = &inv.env;
    if let Some(path) = revoke {
        let base = Base::of(&ws.root);
        let absolute = nop::trust::named_normal(&inv.cwd.join(path));
        let real = std::fs::canonicalize(&absolute).unwrap_or(absolute);
        let key = base.key(&real);
        let store = trust::Store::from_env(env);
        let taken = trust::Record::revoke(store.as_ref(), &base, &key)?;
        if json {
            writeln!(out, "{}", json!({"revoked": key, "entries": taken}))?;
        } else if taken == 0 {
            writeln!(out, "nothing trusted at {key}")?;
        } else {
            writeln!(
                out,
                "no longer trusted: {key} ({taken} entr{})",
                if taken == 1 { "y" } else { "ies" }
            )?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    if yes {
        if let Some(session) = running_here(ws) {
            bail!(
                "a nop run is working in this repository (session {session}): what it changes is \
                 never trusted while it works; run `nop trust` again once it has ended"
            );
        }
        let found = trust::accept_all(&ws.root, &ws.set_aside, env)?;
        if json {
            let names: Vec<&str> = found.iter().map(|u| u.subject.name.as_str()).collect();
            writeln!(out, "{}", json!({"trusted": names}))?;
        } else if found.is_empty() {
            writeln!(
                out,
                "nothing to review: nop trusts everything it would run here"
            )?;
        } else {
            for u in &found {
                writeln!(out, "trusted  {}", visible(&u.subject.name))?;
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let (base, found) = untrusted(ws, env);
    if json {
        let items: Vec<_> = found.iter().map(as_json).collect();
        writeln!(
            out,
            "{}",
            json!({"repository": base.top, "untrusted": items})
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    if found.is_empty() {
        writeln!(
            out,
            "nothing to review: nop trusts everything it would run here"
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    write_review(&base, &found, out)?;
    writeln!(
        out,
        "`nop trust --yes` trusts all of it as it is now; `nop trust --revoke PATH` takes trust back."
    )?;
    Ok(ExitCode::SUCCESS)
}

/// A session of `ws` some process runs now, if any.
fn running_here(ws: &Workspace) -> Option<String> {
    let dir = ws.sessions_dir();
    std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().join("session.json").is_file())
        .find(|e| nop::session::RunGuard::is_busy(&e.path()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
}

/// One untrusted subject as the event and `--json` give it.
pub fn as_json(u: &Untrusted) -> serde_json::Value {
    json!({
        "kind": u.subject.kind.as_str(),
        "name": u.subject.name,
        "files": u.subject.files(),
        "why": u.why.as_str(),
    })
}

/// What is not trusted, each with why, the new text or a diff.
pub fn write_review(base: &Base, found: &[Untrusted], out: &mut impl Write) -> Result<()> {
    writeln!(
        out,
        "not trusted in {} (nop runs or uses none of it until you trust it):",
        visible(&base.top.display().to_string())
    )?;
    for u in found {
        let why = match u.why {
            Why::New => "new".to_string(),
            Why::Changed => "changed since you trusted it".to_string(),
            Why::Untrustable => "cannot be trusted as it is".to_string(),
            Why::RecordUnusable => u.record_error.clone().unwrap_or_default(),
        };
        writeln!(out)?;
        writeln!(out, "  {} — {}", visible(&u.subject.name), visible(&why))?;
        for change in &u.changes {
            writeln!(out, "    {}:", visible(&change.key))?;
            if let Some(reason) = &change.untrustable {
                writeln!(out, "      {}", visible(reason))?;
                continue;
            }
            match (&change.before, &change.now) {
                (Some(before), Some(now)) => write_diff(before, now, out)?,
                (_, Some(now)) => write_lines(now, "      ", out)?,
                (_, None) => writeln!(out, "      (binary or too long to show)")?,
            }
        }
    }
    writeln!(out)?;
    Ok(())
}

fn write_lines(text: &str, indent: &str, out: &mut impl Write) -> Result<()> {
    let lines: Vec<&str> = text.lines().collect();
    for line in lines.iter().take(SHOWN_LINES) {
        writeln!(out, "{indent}{}", visible(line))?;
    }
    if lines.len() > SHOWN_LINES {
        writeln!(out, "{indent}… {} more lines", lines.len() - SHOWN_LINES)?;
    }
    Ok(())
}

fn write_diff(before: &str, now: &str, out: &mut impl Write) -> Result<()> {
    let diff = TextDiff::from_lines(before, now);
    let mut shown = 0;
    let mut left = 0;
    for change in diff.iter_all_changes() {
        let sign = match change.tag() {
            ChangeTag::Equal => continue,
            ChangeTag::Delete => '-',
            ChangeTag::Insert => '+',
        };
        if shown == SHOWN_LINES {
            left += 1;
            continue;
        }
        shown += 1;
        writeln!(
            out,
            "      {sign} {}",
            visible(change.value().trim_end_matches('\n'))
        )?;
    }
    if left > 0 {
        writeln!(out, "      … {left} more changed lines")?;
    }
    Ok(())
}

/// Before a run on a terminal: shows what is not trusted and asks once; the answer is recorded
/// (yes) or not (no: it is left out, and the run says so). Returns whether it trusted anything
/// (the context must then be opened again: what it resolved has changed). Never asks when
/// stdin or stderr is not a terminal.
pub fn ask(ctx: &Context) -> Result<bool> {
    if !std::io::stdin().is_terminal() || !std::io::stderr().is_terminal() {
        return Ok(false);
    }
    let (base, found) = untrusted(&ctx.ws, &ctx.env);
    let found: Vec<Untrusted> = found
        .into_iter()
        .filter(|u| {
            u.subject.kind != trust::Kind::PermissionRules
                && u.why != Why::RecordUnusable
                && u.why != Why::Untrustable
        })
        .collect();
    if found.is_empty() {
        return Ok(false);
    }
    let mut err = std::io::stderr();
    write_review(&base, &found, &mut err)?;
    if let Some(session) = running_here(&ctx.ws) {
        writeln!(
            err,
            "a nop run is working in this repository now (session {session}): some of this may be its work"
        )?;
    }
    write!(
        err,
        "Trust these for this repository? They run with your rights, outside the sandbox. [y/N] "
    )?;
    err.flush()?;
    let answer = super::keys::read_key()?;
    writeln!(err)?;
    if !matches!(answer, Some('y' | 'Y')) {
        writeln!(err, "left out for this run; `nop trust` shows them again")?;
        return Ok(false);
    }
    let subjects: Vec<_> = found.iter().map(|u| u.subject.clone()).collect();
    trust::accept(&ctx.env, &base, &subjects)?;
    Ok(true)
}
