//! `nop permissions import [--from PATH] [--agent NAME] [--dry-run]`: Claude Code's permission
//! rules translated into nop's permission file (and its `defaultMode` into the approval mode),
//! every rule that cannot be translated printed with the reason. The user's command, run outside
//! any sandbox: `.nop/.permissions/` is denied to the agent.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Result, anyhow, bail};

use nop::config::{Origin, read_config_text, set_key};
use nop::permissions::claude::{self, Change, Planned};
use nop::permissions::{PERMISSIONS_DIR, load_policy};
use nop::workspace::InitAction;

use super::context::Context;
use super::term::style::one_line;

/// `nop permissions import`.
#[expect(clippy::too_many_lines, reason = "a debt: listed in AGENTS.md")]
pub fn import(
    ctx: &Context,
    from: Option<&Path>,
    agent: &str,
    dry_run: bool,
    allow_outside: bool,
    out: &mut impl Write,
) -> Result<ExitCode> {
    let root = &ctx.ws.root;
    let home = ctx.home().map(Path::to_path_buf);
    let sources: Vec<PathBuf> = match from {
        Some(path) => vec![ctx.cwd.join(path)],
        None => claude::PROJECT_FILES
            .iter()
            .map(|f| root.join(f))
            .filter(|p| p.exists())
            .collect(),
    };
    if sources.is_empty() {
        bail!(
            "no Claude Code settings file in {} ({}); name one with --from PATH",
            root.display(),
            claude::PROJECT_FILES.join(", ")
        );
    }
    let dir = root.join(PERMISSIONS_DIR);
    // Without `.nop/.permissions/` (no `nop init` yet) the agents have nop's built-in rules:
    // the import starts from their text, and writing creates `.nop/` as `nop init` does.
    let uninitialised =
        std::fs::symlink_metadata(&dir).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound);
    // Only what the user trusts: a settings file in the repository may be the model's work
    // (written in a run, or merged from a branch it committed on). On a terminal the question
    // is asked below, once the rules are shown; elsewhere it is `nop trust`'s.
    let interactive = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    let mut to_trust = Vec::new();
    for path in &sources {
        let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
        let (base, subject, verdict) = nop::trust::permission_rules_check(root, &real, &ctx.env);
        if let Err(untrusted) = verdict {
            if !interactive && !dry_run {
                bail!(
                    "{}: not imported: {}",
                    shown(root, home.as_deref(), path),
                    untrusted.warning()
                );
            }
            to_trust.extend(subject.map(|s| (base, s)));
        }
    }
    let target = dir.join(format!("agent-{agent}.yml"));
    let built_in = || nop::templates::get(&format!(".permissions/agent-{agent}.yml"));
    let old = match std::fs::read_to_string(&target) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && uninitialised => {
            built_in().map(str::to_string)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && agent != "default" => None,
        Err(e) => bail!("{}: {e}", target.display()),
    };

    let mut planned: Vec<Planned> = Vec::new();
    let mut approval: Option<String> = None;
    let mut untranslated = 0usize;
    let mut already_so = 0usize;
    let mut read = Vec::new();
    for path in &sources {
        let settings = claude::load(path, root, home.as_deref())?
            .ok_or_else(|| anyhow!("{}: no such file", path.display()))?;
        let label = shown(root, home.as_deref(), path);
        writeln!(out, "{label}:")?;
        if settings.rules.is_empty() {
            writeln!(out, "  no permission rules")?;
        }
        for rule in &settings.rules {
            let text = one_line(&rule.text);
            match &rule.result {
                Ok(changes) => {
                    let said: Vec<String> = changes.iter().map(describe).collect();
                    writeln!(
                        out,
                        "  {:<8} {text}  →  {}",
                        list_name(rule.list),
                        said.join(", ")
                    )?;
                    for change in changes {
                        match change {
                            Change::Approval(mode) => approval = Some(mode.clone()),
                            Change::AlreadySo(_) => already_so += 1,
                            other => planned.push(Planned {
                                change: other.clone(),
                                list: rule.list,
                                from: format!("{label}: {} {}", rule.list, rule.text),
                            }),
                        }
                    }
                }
                Err(why) => {
                    untranslated += 1;
                    writeln!(
                        out,
                        "  {:<8} {text}  →  not translated: {}",
                        list_name(rule.list),
                        one_line(&why.to_string())
                    )?;
                }
            }
        }
        read.push((label, settings.permissions));
    }

    // Claude Code: deny wins over ask, ask over allow, whichever file says it; in nop the first
    // matching rule wins.
    let rank = |list: &str| match list {
        "deny" => 0,
        "ask" => 1,
        _ => 2,
    };
    planned.sort_by_key(|p| rank(p.list));
    let current = load_policy(root, agent).ok();
    let merged = claude::merge(
        &target,
        old.as_deref(),
        &planned,
        current.as_ref(),
        allow_outside,
    )
    .map_err(|e| anyhow!("{}: {e}", target.display()))?;
    let shown_target = shown(root, home.as_deref(), &target);
    writeln!(out)?;
    if uninitialised {
        writeln!(
            out,
            "{} does not exist yet (no `nop init`): the rules start from nop's built-in ones{}",
            shown(root, home.as_deref(), &dir),
            if dry_run {
                ""
            } else {
                ", and writing them creates .nop/ as `nop init` does"
            }
        )?;
    }
    if merged.added.is_empty() {
        writeln!(out, "nothing to add to {shown_target}")?;
    } else {
        writeln!(
            out,
            "rules added to {shown_target} (at the top, so they come first):"
        )?;
        for line in &merged.added {
            writeln!(out, "  + {}", one_line(line))?;
        }
    }
    for line in &merged.already {
        writeln!(out, "  = {}", one_line(line))?;
    }
    for line in &merged.refused {
        writeln!(out, "  ! {}", one_line(line))?;
    }
    // The mode is taken only over nop's default: a settings file must not loosen what the user
    // chose (`always` → `on-request`).
    let now = ctx.config().approval.as_str();
    let config_edit = match &approval {
        Some(mode) if mode != now && now != "on-request" => {
            writeln!(
                out,
                "approval: kept {now} (your setting), not {mode} as the settings file says"
            )?;
            None
        }
        Some(mode) if mode != now => {
            let path = ctx.ws.config_path();
            // A repository without `.nop/` reads config.yml as its template: the edit starts
            // from it, as `nop init` will write it first.
            let old_config = read_config_text(&path)?
                .or_else(|| nop::templates::get("config.yml").map(str::to_string));
            let edit = set_key(
                &Origin::File(path.clone()),
                old_config.as_deref(),
                "approval",
                mode,
            )?;
            writeln!(
                out,
                "approval: {} → {mode} in {}",
                ctx.config().approval.as_str(),
                shown(root, home.as_deref(), &path)
            )?;
            Some((path, edit.text))
        }
        _ => None,
    };
    if already_so > 0 {
        writeln!(
            out,
            "{already_so} rule{} need{} nothing: nop already does what {} allow{} (see above)",
            if already_so == 1 { "" } else { "s" },
            if already_so == 1 { "s" } else { "" },
            if already_so == 1 { "it" } else { "they" },
            if already_so == 1 { "s" } else { "" }
        )?;
    }
    if untranslated > 0 {
        writeln!(
            out,
            "{untranslated} rule{} could not be translated (see above): nop does not enforce {}",
            if untranslated == 1 { "" } else { "s" },
            if untranslated == 1 { "it" } else { "them" }
        )?;
    }
    if dry_run {
        writeln!(out, "dry run: nothing written")?;
        return Ok(ExitCode::SUCCESS);
    }
    if !to_trust.is_empty() {
        let files: Vec<String> = to_trust.iter().flat_map(|(_, s)| s.files()).collect();
        out.flush()?;
        eprint!(
            "{} {} not trusted in this repository (it may be the agent's work). Import these rules \
             from it? [y/N] ",
            files.join(", "),
            if files.len() == 1 { "is" } else { "are" }
        );
        let mut line = String::new();
        std::io::stdin().read_line(&mut line)?;
        if !matches!(line.trim(), "y" | "Y" | "yes") {
            writeln!(out, "nothing written")?;
            return Ok(ExitCode::from(super::exit::ERROR));
        }
        for (base, subject) in &to_trust {
            nop::trust::accept(&ctx.env, base, std::slice::from_ref(subject))?;
        }
    }
    // The user's own command: a workspace they trusted stays trusted with these rules.
    let trusted_before =
        nop::trust::workspace_check_in(root, nop::trust::Store::from_env(&ctx.env).as_ref())
            .is_ok();
    let writes = !merged.added.is_empty() || config_edit.is_some();
    let fresh = if uninitialised && writes {
        init_for_import(root, out)?
    } else {
        false
    };
    if !merged.added.is_empty() {
        nop::session::replace_file(&target, merged.text.as_bytes())?;
    }
    if let Some((path, text)) = config_edit {
        nop::session::replace_file(&path, text.as_bytes())?;
    }
    if (trusted_before || fresh)
        && let Err(e) = nop::trust::accept_workspace(&ctx.env, root)
    {
        writeln!(out, "warning: {e}")?;
    }
    let state = ctx.ws.nop_dir().join("state");
    for (label, permissions) in &read {
        if let Err(e) = claude::remember(&state, label, permissions) {
            writeln!(out, "warning: cannot record that {label} was imported: {e}")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Creates `.nop/` at `root` as `nop init` does, for the imported rules to go to; whether all
/// of it is nop's own (nothing kept that differs from its template, as `nop init` judges it),
/// so that the workspace may be trusted as `nop init` trusts it.
fn init_for_import(root: &Path, out: &mut impl Write) -> Result<bool> {
    let report = nop::workspace::init(root, false, chrono::Utc::now())?;
    let nop_dir = root.join(nop::workspace::NOP_DIR);
    let mut created = 0;
    let mut foreign = false;
    for (path, action) in &report {
        match action {
            InitAction::Created => created += 1,
            _ => {
                let template = path
                    .strip_prefix(&nop_dir)
                    .ok()
                    .and_then(|rel| nop::templates::get(&rel.to_string_lossy()));
                foreign |= template
                    .is_none_or(|t| std::fs::read(path).ok().as_deref() != Some(t.as_bytes()));
            }
        }
    }
    writeln!(
        out,
        "created .nop/ ({created} files, as `nop init` does) for the rules to go to"
    )?;
    Ok(!foreign)
}

/// `allow`, `deny`, `ask`, or the key's name.
fn list_name(list: &str) -> &str {
    match list {
        "additionalDirectories" => "dir",
        "defaultMode" => "mode",
        other => other,
    }
}

/// A change as the user reads it.
fn describe(change: &Change) -> String {
    match change {
        Change::File { pattern, access } => format!("{pattern}: {}", access.as_str()),
        Change::ToolDenied(name) => format!("tools.denied {name}"),
        Change::ToolAllowed(name) => format!("tools.allowed {name}"),
        Change::Approval(mode) => format!("approval: {mode}"),
        Change::AlreadySo(why) => format!("nothing to import: {why}"),
    }
}

/// `path` relative to the root inside it, `~/…` under the home directory, else as it is.
fn shown(root: &Path, home: Option<&Path>, path: &Path) -> String {
    if let Ok(rel) = path.strip_prefix(root) {
        return rel.display().to_string();
    }
    if let Some(rel) = home.and_then(|h| path.strip_prefix(h).ok()) {
        return format!("~/{}", rel.display());
    }
    path.display().to_string()
}
