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
    let scrub = scrubber(ctx);
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

/// What takes the environment's secrets out of a text (see [`secrets`]).
fn scrubber(ctx: &Context) -> impl Fn(&str) -> String {
    let secrets = secrets(ctx);
    move |text: &str| {
        secrets
            .iter()
            .fold(text.to_string(), |text, (name, value)| {
                text.replace(value.as_str(), &format!("[{name} scrubbed by nop]"))
            })
    }
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

/// The ref a session travels under in the repository (`nop sessions push`/`pull`).
fn session_ref(id: &str) -> String {
    format!("refs/nop/sessions/{id}")
}

/// The file a session's commit holds.
const ARCHIVE_NAME: &str = "session.nop";

/// The largest archive `pull` reads (1 GiB).
const MAX_ARCHIVE: u64 = 1 << 30;

/// `git` in `root`, as nop runs it for itself: the user's configuration (remotes and their
/// credentials are the point), but no hook, fsmonitor or pager; `input` on its standard input.
fn git(root: &std::path::Path, args: &[&str], input: Option<&[u8]>) -> Result<Vec<u8>> {
    use std::process::Stdio;
    let mut child = std::process::Command::new("git")
        .arg("-C")
        .arg(root)
        .args([
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "core.fsmonitor=false",
        ])
        .args(["--no-pager"])
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot run git")?;
    if let (Some(bytes), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin.write_all(bytes)?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        anyhow::bail!(
            "git {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out.stdout)
}

/// The text of git's answer, trimmed.
fn git_text(root: &std::path::Path, args: &[&str], input: Option<&[u8]>) -> Result<String> {
    Ok(String::from_utf8_lossy(&git(root, args, input)?)
        .trim()
        .to_string())
}

/// `nop sessions push ID [REMOTE]`: the session's archive committed under
/// `refs/nop/sessions/ID` (on top of what that ref held: the session's travels are a history)
/// and pushed to `REMOTE` (default `origin`).
pub fn push(ctx: &Context, id: &str, remote: &str) -> Result<ExitCode> {
    let id = ctx.store.resolve(id)?;
    let root = &ctx.ws.root;
    let scrub = scrubber(ctx);
    let mut archive = Vec::new();
    let moved = ctx.store.export(&id, root, &scrub, &mut archive)?;
    let blob = git_text(
        root,
        &["hash-object", "-w", "--no-filters", "--stdin"],
        Some(&archive),
    )?;
    let tree = git_text(
        root,
        &["mktree"],
        Some(format!("100644 blob {blob}\t{ARCHIVE_NAME}\n").as_bytes()),
    )?;
    let reference = session_ref(&id);
    let parent = git_text(
        root,
        &["rev-parse", "--verify", "--quiet", &reference],
        None,
    )
    .ok();
    let message = format!("nop session {id}\n\nExported by nop sessions push.\n");
    let mut args = vec![
        "-c",
        "user.name=nop",
        "-c",
        "user.email=nop@localhost",
        "commit-tree",
        &tree,
        "-m",
        &message,
    ];
    if let Some(parent) = parent.as_deref().filter(|p| !p.is_empty()) {
        args.extend(["-p", parent]);
    }
    let commit = git_text(root, &args, None)?;
    git(root, &["update-ref", &reference, &commit], None)?;
    git(
        root,
        &[
            "push",
            "--quiet",
            remote,
            &format!("{reference}:{reference}"),
        ],
        None,
    )?;
    eprintln!(
        "pushed session {id} ({} file(s)) to {remote} as {reference}; in another clone: nop sessions pull {id} {remote}",
        moved.files
    );
    Ok(ExitCode::SUCCESS)
}

/// `nop sessions pull ID [REMOTE]`: fetches `refs/nop/sessions/ID` from `REMOTE` and imports
/// the session it holds (see [`import`]).
pub fn pull(ctx: &Context, id: &str, remote: &str, out: &mut impl Write) -> Result<ExitCode> {
    if !nop::protocol::ids::looks_like_id(id) {
        anyhow::bail!("`{id}` is not a session id (a pull needs the whole id)");
    }
    let root = &ctx.ws.root;
    let reference = session_ref(id);
    git(
        root,
        &[
            "fetch",
            "--quiet",
            "--no-tags",
            remote,
            &format!("+{reference}:{reference}"),
        ],
        None,
    )?;
    let object = format!("{reference}:{ARCHIVE_NAME}");
    // What a remote holds is untrusted: its size is checked before it is read.
    let size: u64 = git_text(root, &["cat-file", "-s", &object], None)?
        .parse()
        .unwrap_or(u64::MAX);
    if size > MAX_ARCHIVE {
        anyhow::bail!("{object} of {remote} is {size} bytes, more than a session archive may be");
    }
    let archive = git(root, &["cat-file", "blob", &object], None)?;
    let moved = ctx
        .store
        .import(&mut archive.as_slice(), root)
        .with_context(|| format!("{reference} of {remote}"))?;
    if moved.session != id {
        anyhow::bail!(
            "{reference} of {remote} holds session {}, not {id}",
            moved.session
        );
    }
    writeln!(
        out,
        "pulled session {id} from {remote}; go on with `nop -r {id}` or `nop run --session {id} \"…\"`"
    )?;
    Ok(ExitCode::SUCCESS)
}
