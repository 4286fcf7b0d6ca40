//! Custom slash commands in the front end ([`nop::slash_commands`] finds and expands them): the
//! user's folders, the built-in commands winning a clash, a prompt that begins with `/name`
//! expanded (headless and in the interactive session), and `nop commands list`.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;
use nop::slash_commands::{CustomCommand, Discovery};
use serde_json::json;

use super::agents::shown_path;
use super::context::Context;
use super::term::style::{json_safe, one_line};

/// The user's command folders, after the repository's: `$XDG_CONFIG_HOME/nop/commands` (else
/// `~/.config/nop/commands`), then `~/.claude/commands`.
pub fn user_dirs(env: &BTreeMap<String, String>) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(dir) = nop::config::user_config_path(env)
        .as_deref()
        .and_then(Path::parent)
    {
        dirs.push(dir.join("commands"));
    }
    if let Some(home) = home(env) {
        dirs.push(home.join(".claude/commands"));
    }
    dirs
}

fn home(env: &BTreeMap<String, String>) -> Option<PathBuf> {
    env.get("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute())
}

/// The custom commands that apply, and those a built-in command of the same name hides.
pub struct Custom {
    pub found: Discovery,
    pub hidden_by_builtin: Vec<CustomCommand>,
}

/// Whether `/name` is one of the interactive session's own commands.
pub fn is_builtin(name: &str) -> bool {
    let slashed = format!("/{name}");
    slashed == "/quit" || super::slash::COMMANDS.iter().any(|(c, _)| *c == slashed)
}

/// The custom commands of the repository at `root` and of the user.
pub fn load(root: &Path, user_dirs: &[PathBuf]) -> Custom {
    let mut found = nop::slash_commands::discover(root, user_dirs);
    let (hidden, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut found.commands)
        .into_iter()
        .partition(|c| is_builtin(&c.name));
    found.commands = kept;
    Custom {
        found,
        hidden_by_builtin: hidden,
    }
}

impl Custom {
    /// `input` expanded, when it begins with `/name` of a custom command; `None` otherwise (a
    /// prompt such as `/etc/hosts is empty, why?` stays as it is).
    pub fn expand(&self, input: &str) -> Option<String> {
        let (name, arguments) = nop::slash_commands::split_invocation(input.trim_start())?;
        let command = self.found.get(name)?;
        tracing::info!(op = "slash-command", command = %name, path = %command.path.display(), "expanded");
        Some(nop::slash_commands::expand(&command.body, arguments))
    }

    /// `(/name, help)` of each custom command, for `/help`, the `/` menu and Tab.
    pub fn menu(&self) -> Vec<(String, String)> {
        self.found
            .commands
            .iter()
            .map(|c| {
                let hint = c
                    .argument_hint
                    .as_deref()
                    .map_or(String::new(), |h| format!("{} · ", one_line(h)));
                (
                    format!("/{}", c.name),
                    format!("{hint}{}", one_line(&c.description)),
                )
            })
            .collect()
    }
}

/// A headless prompt that begins with a custom command, expanded (Claude Code's `-p "/cmd"`);
/// anything else as it is. Files left out are said on stderr.
pub fn expand_headless(ctx: &Context, prompt: String) -> String {
    if !prompt.trim_start().starts_with('/') {
        return prompt;
    }
    let custom = load(&ctx.ws.root, &user_dirs(&ctx.env));
    for w in &custom.found.warnings {
        eprintln!("warning: {}", one_line(w));
    }
    custom.expand(&prompt).unwrap_or(prompt)
}

/// `nop commands list`.
pub fn list(ctx: &Context, json: bool, out: &mut impl Write) -> Result<ExitCode> {
    let custom = load(&ctx.ws.root, &user_dirs(&ctx.env));
    let home = home(&ctx.env);
    let shown = |p: &Path| shown_path(p, &ctx.ws.root, home.as_deref());
    let row = |c: &CustomCommand| {
        json!({
            "name": format!("/{}", c.name),
            "description": c.description,
            "argumentHint": c.argument_hint,
            "path": c.path,
            "source": shown(&c.source),
            "user": c.user,
        })
    };
    if json {
        let value = json!({
            "commands": custom.found.commands.iter().map(row).collect::<Vec<_>>(),
            "shadowed": custom.found.shadowed.iter().map(row).collect::<Vec<_>>(),
            "hiddenByBuiltin": custom.hidden_by_builtin.iter().map(row).collect::<Vec<_>>(),
            "warnings": custom.found.warnings,
        });
        writeln!(out, "{}", json_safe(serde_json::to_string_pretty(&value)?))?;
        return Ok(ExitCode::SUCCESS);
    }
    for w in &custom.found.warnings {
        eprintln!("warning: {}", one_line(w));
    }
    if custom.found.commands.is_empty() {
        writeln!(
            out,
            "no custom commands (add one as .nop/commands/<name>.md or ~/.claude/commands/<name>.md)"
        )?;
    }
    let all = || {
        custom
            .found
            .commands
            .iter()
            .chain(&custom.found.shadowed)
            .chain(&custom.hidden_by_builtin)
    };
    let width = all().map(|c| c.name.chars().count() + 1).max().unwrap_or(4);
    for c in &custom.found.commands {
        let hint = c
            .argument_hint
            .as_deref()
            .map_or(String::new(), |h| format!("{} ", one_line(h)));
        writeln!(
            out,
            "/{:<width$} {hint}{}  ({})",
            one_line(&c.name),
            one_line(&c.description),
            shown(&c.path)
        )?;
    }
    if !custom.found.shadowed.is_empty() {
        writeln!(out, "\nshadowed (an earlier folder has the name):")?;
        for c in &custom.found.shadowed {
            writeln!(out, "/{:<width$} {}", one_line(&c.name), shown(&c.path))?;
        }
    }
    if !custom.hidden_by_builtin.is_empty() {
        writeln!(out, "\nhidden by a built-in command of the same name:")?;
        for c in &custom.hidden_by_builtin {
            writeln!(out, "/{:<width$} {}", one_line(&c.name), shown(&c.path))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
