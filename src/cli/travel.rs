//! `nop sessions export` and `nop sessions import`: a session as one file that travels
//! between clones (a CI runner and a laptop), in `nop::session`'s archive format.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{Context as _, Result};

use super::context::Context;

/// `nop sessions export ID [-o FILE]`: the session and its parent chain, with the values of
/// the environment's secrets (the provider key, every variable shell commands lose) scrubbed.
pub fn export(ctx: &Context, id: &str, to: Option<&str>, out: &mut impl Write) -> Result<ExitCode> {
    let id = ctx.store.resolve(id)?;
    let secrets = secrets(ctx);
    let scrub = |text: &str| {
        secrets
            .iter()
            .fold(text.to_string(), |text, (name, value)| {
                text.replace(value.as_str(), &format!("[{name} scrubbed by nop]"))
            })
    };
    let moved = match to {
        None | Some("-") => ctx.store.export(&id, &ctx.ws.root, &scrub, out)?,
        Some(path) => {
            // Written whole or not at all.
            let dir = std::path::Path::new(path)
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(std::path::Path::new("."));
            let mut file = tempfile::NamedTempFile::new_in(dir)
                .with_context(|| format!("cannot write in {}", dir.display()))?;
            let moved = ctx.store.export(&id, &ctx.ws.root, &scrub, &mut file)?;
            file.as_file().sync_all()?;
            file.persist(path)
                .with_context(|| format!("cannot write {path}"))?;
            moved
        }
    };
    eprintln!(
        "exported session {} ({} file(s){}); import it in another clone with `nop sessions import FILE`",
        moved.session,
        moved.files,
        match moved.sessions.len() {
            1 => String::new(),
            n => format!(", with the {} session(s) it was forked from", n - 1),
        }
    );
    Ok(ExitCode::SUCCESS)
}

/// `nop sessions import FILE` (`-`: standard input).
pub fn import(ctx: &Context, from: &str, json: bool, out: &mut impl Write) -> Result<ExitCode> {
    let moved = if from == "-" {
        ctx.store
            .import(&mut std::io::stdin().lock(), &ctx.ws.root)?
    } else {
        let file = std::fs::File::open(from).with_context(|| format!("cannot read {from}"))?;
        ctx.store
            .import(&mut std::io::BufReader::new(file), &ctx.ws.root)
            .with_context(|| from.to_string())?
    };
    if json {
        writeln!(out, "{}", serde_json::to_string(&moved)?)?;
    } else {
        writeln!(
            out,
            "imported session {}; go on with `nop -r {}` or `nop run --session {} \"…\"`",
            moved.session, moved.session, moved.session
        )?;
        if !moved.kept.is_empty() {
            writeln!(out, "kept as they are here: {}", moved.kept.join(", "))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The values an archive must not carry: those of the variables shell commands lose (the
/// provider's key variables, names like credentials, URLs with a password), each at least 6
/// characters long (a shorter one would scrub ordinary words).
fn secrets(ctx: &Context) -> Vec<(String, String)> {
    let settings = nop::tools::SandboxSettings::from_config(&ctx.resolved.config);
    let env = ctx
        .env
        .iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect::<Vec<(std::ffi::OsString, std::ffi::OsString)>>();
    let (_, removed) = nop::tools::confine::filtered_env(&settings, env);
    let mut secrets: Vec<(String, String)> = removed
        .into_iter()
        .filter_map(|name| {
            let value = ctx.env.get(&name)?.clone();
            (value.chars().count() >= 6).then_some((name, value))
        })
        .collect();
    // The longest first: a value inside another is scrubbed after it.
    secrets.sort_by_key(|(_, value)| std::cmp::Reverse(value.len()));
    secrets
}
