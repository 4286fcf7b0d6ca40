//! File access for tools, through the agent's permissions: every path is normalised and checked
//! before use (never cached), `ask` rules go to the approver, and the file is then opened through
//! a descriptor whose real path is checked again, so a symbolic link swapped in between the check
//! and the use cannot redirect the operation.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::{FileChange, ToolContext, ToolError};
use crate::permissions::{Access, Action, Ask, Decision, Gate};
use crate::tools::ToolErrorKind;

/// The largest file whose old text is read for a diff (a write's result, an approval's preview):
/// a bigger one has none.
pub const DIFF_MAX_BYTES: u64 = 1 << 20;

/// Resolves and checks `path` for `access` by tool `tool`; returns the canonical path.
pub async fn resolve(
    ctx: &ToolContext,
    tool: &str,
    path: &str,
    access: Access,
) -> Result<PathBuf, ToolError> {
    resolve_previewing(ctx, tool, path, access, std::future::ready(None)).await
}

/// [`resolve`], showing `preview` (the change the tool would make, worked out only if a person
/// is asked) when an `ask` rule asks.
pub async fn resolve_previewing(
    ctx: &ToolContext,
    tool: &str,
    path: &str,
    access: Access,
    preview: impl std::future::Future<Output = Option<FileChange>>,
) -> Result<PathBuf, ToolError> {
    let (resolved, decision) = ctx.policy.check_path(path, access);
    decide(ctx, tool, path, access, resolved, decision, preview).await
}

/// The canonical path `path` names and, when the rules do not deny reading it, the text it
/// holds now: what a preview of a change to it starts from. Never asks anyone. `None` for a
/// path that cannot be resolved; the text is `None` for a file that is missing, denied, not a
/// regular file, over [`DIFF_MAX_BYTES`], or not UTF-8.
pub async fn current_text(ctx: &ToolContext, path: &str) -> Option<(PathBuf, Option<String>)> {
    let resolved = crate::permissions::resolve(&ctx.root, path).ok()?;
    let readable = !matches!(
        ctx.policy.check_resolved(&resolved, Access::Read),
        Decision::Deny { .. }
    ) && tokio::fs::metadata(&resolved)
        .await
        .is_ok_and(|m| m.len() <= DIFF_MAX_BYTES);
    let text = if readable {
        read_verified_async(ctx, &resolved)
            .await
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok())
    } else {
        None
    };
    Some((resolved, text))
}

async fn decide(
    ctx: &ToolContext,
    tool: &str,
    path: &str,
    access: Access,
    resolved: Option<PathBuf>,
    decision: Decision,
    preview: impl std::future::Future<Output = Option<FileChange>>,
) -> Result<PathBuf, ToolError> {
    let verb = match access {
        Access::Read => "read",
        Access::Write => "write",
    };
    match (decision, resolved) {
        (Decision::Allow { .. }, Some(resolved)) => Ok(resolved),
        (Decision::Ask { source }, Some(resolved)) => {
            let reason = format!("{verb} `{path}` needs approval ({source})");
            let detail = format!("{verb} {}", display(&ctx.root, &resolved));
            let ask = Ask {
                tool,
                detail: &detail,
                reason: &reason,
                gate: Gate::FileRule(source),
                action: Action::File {
                    path: resolved.clone(),
                    access,
                },
                root: &ctx.root,
            };
            // Ctrl-C ends the wait for an answer at once.
            let arguments = serde_json::json!({"path": path});
            let answer = tokio::select! {
                answer = super::orchestrator::ask_approval(
                    ctx, ask, &arguments, preview,
                ) => answer,
                () = ctx.cancel.cancelled() => return Err(ToolError::aborted()),
            };
            match answer {
                Ok(()) => Ok(resolved),
                Err(refusal) => Err(super::orchestrator::refused(ctx, tool, refusal)),
            }
        }
        (Decision::Deny { reason, source }, _) => {
            let rule = source.map(|s| format!(" ({s})")).unwrap_or_default();
            Err(denied(
                ctx,
                tool,
                format!("{verb} `{path}` refused: {reason}{rule}"),
            ))
        }
        (_, None) => Err(denied(ctx, tool, format!("`{path}` cannot be resolved"))),
    }
}

fn denied(ctx: &ToolContext, tool: &str, reason: String) -> ToolError {
    ctx.approver.record_denial(tool, &reason);
    ToolError::model(ToolErrorKind::PermissionDenied, reason)
}

/// The real path of an open descriptor (Linux: /proc/self/fd).
fn real_path(file: &std::fs::File) -> Option<PathBuf> {
    use std::os::fd::AsRawFd;
    std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()
}

/// Opens a file that `resolve` allowed for reading, re-checking the file actually opened. Only
/// regular files: a FIFO would block until something writes to it, a device may never end.
pub fn open_verified(ctx: &ToolContext, path: &Path) -> Result<std::fs::File, ToolError> {
    let failed = |e: std::io::Error| {
        ToolError::model(
            ToolErrorKind::of_io(&e, ToolErrorKind::ReadFailed),
            format!("{}: {e}", display(&ctx.root, path)),
        )
    };
    // Non-blocking so that opening a FIFO does not wait for a writer; it is refused below.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(path)
        .map_err(failed)?;
    verify(ctx, &file, path, Access::Read)?;
    let kind = file.metadata().map_err(failed)?.file_type();
    if !kind.is_file() {
        use std::os::unix::fs::FileTypeExt as _;
        let what = if kind.is_fifo() {
            "a named pipe (FIFO)"
        } else if kind.is_dir() {
            "a directory (use list-files)"
        } else if kind.is_socket() {
            "a socket"
        } else {
            "a device"
        };
        return Err(ToolError::model(
            ToolErrorKind::NotAFile,
            format!("{} is {what}, not a regular file", display(&ctx.root, path)),
        ));
    }
    Ok(file)
}

/// Reads a file that `resolve` allowed, re-checking the file actually opened.
/// [`read_verified`] on the blocking pool, so that a tool's time limit holds while the disk
/// stalls.
pub async fn read_verified_async(ctx: &ToolContext, path: &Path) -> Result<Vec<u8>, ToolError> {
    let (ctx, path) = (ctx.clone(), path.to_path_buf());
    tokio::task::spawn_blocking(move || read_verified(&ctx, &path))
        .await
        .map_err(ToolError::fatal("reading a file failed"))?
}

/// [`write_verified`] on the blocking pool (it fsyncs).
pub async fn write_verified_async(
    ctx: &ToolContext,
    path: &Path,
    bytes: Vec<u8>,
) -> Result<(), ToolError> {
    let (ctx, path) = (ctx.clone(), path.to_path_buf());
    tokio::task::spawn_blocking(move || write_verified(&ctx, &path, &bytes))
        .await
        .map_err(ToolError::fatal("writing a file failed"))?
}

pub fn read_verified(ctx: &ToolContext, path: &Path) -> Result<Vec<u8>, ToolError> {
    let mut file = open_verified(ctx, path)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(|e| {
        ToolError::model(
            ToolErrorKind::of_io(&e, ToolErrorKind::ReadFailed),
            format!("{}: {e}", display(&ctx.root, path)),
        )
    })?;
    Ok(bytes)
}

/// Replaces a file that `resolve` allowed, atomically, through a descriptor of its directory
/// whose real path is re-checked: the temp file and the rename both happen in that directory.
pub fn write_verified(ctx: &ToolContext, path: &Path, bytes: &[u8]) -> Result<(), ToolError> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(ToolError::model(
            ToolErrorKind::InvalidPath,
            format!("{} has no file name", path.display()),
        ));
    };
    let dir_file = open_creating_parents(ctx, dir)?;
    let real_dir = real_path(&dir_file)
        .ok_or_else(|| ToolError::FatalMessage("cannot read /proc/self/fd".into()))?;
    let decision = ctx
        .policy
        .check_resolved(&real_dir.join(name), Access::Write);
    if !decision.is_allowed() && !matches!(decision, Decision::Ask { .. }) {
        return Err(denied(
            ctx,
            "write",
            format!(
                "{} changed while being checked; refused",
                display(&ctx.root, path)
            ),
        ));
    }
    use std::os::fd::AsRawFd;
    let via_fd = PathBuf::from(format!("/proc/self/fd/{}", dir_file.as_raw_fd())).join(name);
    crate::session::replace_file(&via_fd, bytes)
        .map_err(|e| ToolError::model(ToolErrorKind::WriteFailed, e.to_string()))
}

/// Opens directory `dir`, creating what is missing of it one component at a time, each relative
/// to the descriptor of its parent and never through a symbolic link: a directory swapped for a
/// link while this runs cannot make it create anything elsewhere. The deepest existing
/// ancestor is opened by path and its real path re-checked.
fn open_creating_parents(ctx: &ToolContext, dir: &Path) -> Result<std::fs::File, ToolError> {
    use nix::fcntl::{OFlag, openat};
    use nix::sys::stat::{Mode, mkdirat};
    let failed = |at: &Path, e: &dyn std::fmt::Display| {
        ToolError::model(
            ToolErrorKind::WriteFailed,
            format!("{}: {e}", display(&ctx.root, at)),
        )
    };
    let mut existing = dir.to_path_buf();
    let mut missing = Vec::new();
    while std::fs::symlink_metadata(&existing).is_err() {
        let (Some(parent), Some(name)) = (existing.parent(), existing.file_name()) else {
            return Err(failed(dir, &"no part of it exists"));
        };
        missing.push(name.to_os_string());
        existing = parent.to_path_buf();
    }
    let mut current = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW).bits())
        .open(&existing)
        .map_err(|e| failed(&existing, &e))?;
    if !missing.is_empty() {
        let real = real_path(&current)
            .ok_or_else(|| ToolError::FatalMessage("cannot read /proc/self/fd".into()))?;
        if real != existing && !ctx.policy.check_resolved(&real, Access::Write).is_allowed() {
            return Err(denied(
                ctx,
                "write",
                format!(
                    "{} changed while being checked; refused",
                    display(&ctx.root, dir)
                ),
            ));
        }
    }
    for name in missing.iter().rev() {
        let at = existing.join(name);
        match mkdirat(&current, name.as_os_str(), Mode::from_bits_truncate(0o777)) {
            Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
            Err(e) => return Err(failed(&at, &e)),
        }
        let next = openat(
            &current,
            name.as_os_str(),
            OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| failed(&at, &e))?;
        current = std::fs::File::from(next);
        existing = at;
    }
    Ok(current)
}

fn verify(
    ctx: &ToolContext,
    file: &std::fs::File,
    path: &Path,
    access: Access,
) -> Result<(), ToolError> {
    let real = real_path(file)
        .ok_or_else(|| ToolError::FatalMessage("cannot read /proc/self/fd".into()))?;
    if real != path {
        let decision = ctx.policy.check_resolved(&real, access);
        if !decision.is_allowed() {
            return Err(denied(
                ctx,
                "read",
                format!(
                    "{} changed while being checked; refused",
                    display(&ctx.root, path)
                ),
            ));
        }
    }
    Ok(())
}

/// `path` relative to `root` for display (`path` itself if it is not inside).
pub fn display(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string()
}
