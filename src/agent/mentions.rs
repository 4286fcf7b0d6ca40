//! `@path` mentions in what the user types: each mentioned file is attached to the user message
//! as a fenced block naming its path, after the text as typed. A file is attached only when the
//! agent could read it with `read-file` at that moment: the same tool rule, file rules (an `ask`
//! rule asks, as for the tool), `before-tool` hooks and verified open; anything else is a warning
//! for the user, and the model gets nothing of the file.
//!
//! Syntax: `@` at the start of the text or after whitespace, then the path up to the next
//! whitespace (`@"a path with spaces"` in double quotes); sentence punctuation at its end
//! (`.,;:!?)]}'"`) is not part of it. Relative paths are taken from the user's working
//! directory. Lines inside a fenced code block hold no mentions; neither does `me@example.com`.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use crate::hooks::{self, HookOutcome};
use crate::permissions::{Access, Action, Ask, Decision, Gate, Refusal};
use crate::tools::{ToolContext, paths};

/// The most of one file that is attached; the rest is left to `read-file`.
pub const FILE_MAX_BYTES: usize = 256 * 1024;
/// The most that one message's attachments hold together.
pub const TOTAL_MAX_BYTES: usize = 1024 * 1024;

/// The tool whose permissions a mention has.
const TOOL: &str = "read-file";

/// A mention as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mention {
    /// What follows the `@`, as typed (quotes included), for messages to the user.
    pub typed: String,
    /// The path it names.
    pub path: String,
}

/// A user's text with its mentions attached.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expanded {
    /// What the model is sent and session.json holds.
    pub text: String,
    /// The paths attached (relative to the repository root when inside it).
    pub attached: Vec<String>,
    /// Why a mention was not attached, or was attached cut, for the user.
    pub warnings: Vec<String>,
}

/// The mentions in `text`, in order, each path once.
pub fn mentions(text: &str) -> Vec<Mention> {
    let mut found: Vec<Mention> = Vec::new();
    let mut in_fence = false;
    for line in text.split('\n') {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        let mut previous: Option<char> = None;
        for (i, c) in line.char_indices() {
            if c == '@'
                && previous.is_none_or(char::is_whitespace)
                && let Some(m) = mention_at(&line[i + 1..])
                && !found.iter().any(|f| f.path == m.path)
            {
                found.push(m);
            }
            previous = Some(c);
        }
    }
    found
}

/// The mention whose text (after the `@`) starts `rest`, if it is one.
fn mention_at(rest: &str) -> Option<Mention> {
    if let Some(quoted) = rest.strip_prefix('"') {
        let end = quoted.find('"')?;
        let path = &quoted[..end];
        return (!path.trim().is_empty()).then(|| Mention {
            typed: format!("\"{path}\""),
            path: path.to_string(),
        });
    }
    let token = rest.split(char::is_whitespace).next().unwrap_or_default();
    let path = token.trim_end_matches(['.', ',', ';', ':', '!', '?', ')', ']', '}', '\'', '"']);
    if path.is_empty() || path.starts_with('@') {
        return None;
    }
    Some(Mention {
        typed: path.to_string(),
        path: path.to_string(),
    })
}

/// A file read for attaching.
struct Attachment {
    label: String,
    text: String,
    size: u64,
}

/// `text` with the files it mentions attached, as the agent of `ctx` may read them; relative
/// paths are taken from `cwd`.
pub async fn expand(ctx: &ToolContext, cwd: &Path, text: &str) -> Expanded {
    let found = mentions(text);
    let mut expanded = Expanded {
        text: text.to_string(),
        ..Expanded::default()
    };
    if found.is_empty() {
        return expanded;
    }
    let mut attachments: Vec<Attachment> = Vec::new();
    let mut seen: Vec<PathBuf> = Vec::new();
    let mut used = 0usize;
    for mention in found {
        // Relative to the root where the working directory is inside it, so that what the
        // permission check says names the path as the rules do.
        let full = match cwd.strip_prefix(&ctx.root) {
            _ if Path::new(&mention.path).is_absolute() => PathBuf::from(&mention.path),
            Ok(below) => below.join(&mention.path),
            Err(_) => cwd.join(&mention.path),
        };
        let room = TOTAL_MAX_BYTES.saturating_sub(used).min(FILE_MAX_BYTES);
        let outcome = if room == 0 {
            Err(format!(
                "this message's attachments already hold {TOTAL_MAX_BYTES} bytes"
            ))
        } else {
            attach(ctx, &full.to_string_lossy(), room, &seen).await
        };
        match outcome {
            Ok(Some((resolved, attachment))) => {
                seen.push(resolved);
                used += attachment.text.len();
                if (attachment.text.len() as u64) < attachment.size {
                    expanded.warnings.push(format!(
                        "@{} is attached cut: its first {} of {} bytes",
                        mention.typed,
                        attachment.text.len(),
                        attachment.size
                    ));
                }
                attachments.push(attachment);
            }
            Ok(None) => {}
            Err(why) => {
                let warning = format!("@{} is not attached: {why}", mention.typed);
                tracing::warn!(session = %ctx.session_id, agent = %ctx.agent, op = "mention", result = "refused", "{warning}");
                expanded.warnings.push(warning);
            }
        }
    }
    if attachments.is_empty() {
        return expanded;
    }
    expanded.text = render(text, &attachments);
    expanded.attached = attachments.into_iter().map(|a| a.label).collect();
    tracing::info!(session = %ctx.session_id, agent = %ctx.agent, op = "mention", result = "attached", files = ?expanded.attached, "mentioned files attached");
    expanded
}

/// The line that begins the attachments of a user message.
pub const ATTACHED: &str =
    "Files the user attached with @ (as they were when this message was sent):\n";

/// What the user typed of a stored user message, without the files attached to it, and
/// whether files were attached.
pub fn as_typed(content: &str) -> (&str, bool) {
    match content.find(ATTACHED) {
        Some(at) => (content[..at].trim_end(), true),
        None => (content, false),
    }
}

/// `text`, then each attachment in a fence that names its path.
fn render(text: &str, attachments: &[Attachment]) -> String {
    let mut out = text.to_string();
    out.push_str(if text.ends_with('\n') { "\n" } else { "\n\n" });
    out.push_str(ATTACHED);
    for a in attachments {
        let fence = "`".repeat(longest_backtick_run(&a.text).max(2) + 1);
        out.push_str(&format!("\n{fence}{}\n{}", a.label, a.text));
        if !a.text.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(&fence);
        out.push('\n');
        if (a.text.len() as u64) < a.size {
            out.push_str(&format!(
                "[{} is cut here: its first {} of {} bytes are attached; read-file reads the rest]\n",
                a.label,
                a.text.len(),
                a.size
            ));
        }
    }
    out
}

fn longest_backtick_run(text: &str) -> usize {
    text.split(|c| c != '`').map(str::len).max().unwrap_or(0)
}

/// The file at `path` as `read-file` would give it to the agent of `ctx`, at most `room` bytes;
/// `None` when it is one of `seen` already; `Err` saying why it may not or cannot be attached.
async fn attach(
    ctx: &ToolContext,
    path: &str,
    room: usize,
    seen: &[PathBuf],
) -> Result<Option<(PathBuf, Attachment)>, String> {
    // As for a tool call: the permissions as they are now, the tool rule before the file rules.
    let policy = crate::permissions::load_chain(&ctx.root, &ctx.agent, &ctx.ancestors)
        .map_err(|e| format!("the permission files cannot be read: {e}"))?;
    let mut ctx = ctx.clone();
    ctx.policy = policy;
    let ctx = &ctx;
    match ctx.policy.check_tool(TOOL) {
        Decision::Allow { .. } => {}
        Decision::Deny { reason, source } => {
            let rule = source.map(|s| format!(" ({s})")).unwrap_or_default();
            let reason = format!(
                "{TOOL} is not allowed to agent `{}`: {reason}{rule}",
                ctx.agent
            );
            ctx.approver.record_denial(TOOL, &reason);
            return Err(reason);
        }
        Decision::Ask { source } => {
            let resolved =
                crate::permissions::resolve(&ctx.root, path).map_err(|e| e.to_string())?;
            let reason = format!("calling `{TOOL}` needs approval ({source})");
            let detail = format!("read {}", paths::display(&ctx.root, &resolved));
            let ask = Ask {
                tool: TOOL,
                detail: &detail,
                reason: &reason,
                gate: Gate::Call,
                action: Action::File {
                    path: resolved,
                    access: Access::Read,
                },
                root: &ctx.root,
            };
            let arguments = serde_json::json!({"path": path});
            let answer = tokio::select! {
                answer = crate::tools::orchestrator::ask_approval(
                    ctx, ask, &arguments, std::future::ready(None),
                ) => answer,
                () = ctx.cancel.cancelled() => Err(Refusal::rule("cancelled".to_string())),
            };
            if let Err(refusal) = answer {
                ctx.approver.record_denial(TOOL, &refusal.reason);
                return Err(refusal.reason);
            }
        }
    }
    let resolved = paths::resolve(ctx, TOOL, path, Access::Read)
        .await
        .map_err(|e| e.to_string())?;
    if seen.contains(&resolved) {
        return Ok(None);
    }
    let label = paths::display(&ctx.root, &resolved);
    let event = hooks::HookEvent::BeforeTool {
        about: hooks::About {
            session_id: &ctx.session_id,
            agent: &ctx.agent,
        },
        tool: TOOL,
        call_id: None,
        arguments: std::borrow::Cow::Owned(serde_json::json!({"path": label})),
        mention: true,
    };
    if let HookOutcome::Blocked(reason) = hooks::fire(&ctx.hooks, &ctx.root, &event).await {
        return Err(format!("blocked by a before-tool hook: {reason}"));
    }
    let (read_ctx, at) = (ctx.clone(), resolved.clone());
    let (text, size) = tokio::task::spawn_blocking(move || read(&read_ctx, &at, room))
        .await
        .map_err(|e| e.to_string())??;
    Ok(Some((resolved, Attachment { label, text, size })))
}

/// The first `room` bytes of the file at `path` (opened as `read-file` opens it: a regular file,
/// its real path checked again) as text, and its size.
fn read(ctx: &ToolContext, path: &Path, room: usize) -> Result<(String, u64), String> {
    let file = paths::open_verified(ctx, path).map_err(|e| e.to_string())?;
    let size = file.metadata().map_err(|e| e.to_string())?.len();
    let mut bytes = Vec::new();
    file.take(room as u64)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.iter().take(8192).any(|b| *b == 0) {
        return Err("it is a binary file".into());
    }
    super::instructions::utf8_prefix(bytes)
        .ok_or_else(|| "it is not UTF-8 text".to_string())
        .map(|text| (text, size))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn paths_of(text: &str) -> Vec<String> {
        mentions(text).into_iter().map(|m| m.path).collect()
    }

    #[test]
    fn a_mention_starts_the_text_or_follows_whitespace() {
        assert_eq!(
            paths_of("@src/lib.rs and\t@./docs/x.md, then @../up."),
            ["src/lib.rs", "./docs/x.md", "../up"]
        );
        assert_eq!(
            paths_of("mail me@example.com or (@x) or `@y`"),
            Vec::<String>::new()
        );
        assert_eq!(
            paths_of("@ alone, @, @@twice, @. and @\"\""),
            Vec::<String>::new()
        );
        assert_eq!(paths_of("@a @a @b"), ["a", "b"]);
        assert_eq!(paths_of("read @\"my notes.txt\" please"), ["my notes.txt"]);
        assert_eq!(
            paths_of("see @/etc/passwd\n```java\n@Override\n```\n@after"),
            ["/etc/passwd", "after"]
        );
    }

    #[test]
    fn an_attachment_is_fenced_longer_than_any_fence_inside_it() {
        let a = Attachment {
            label: "README.md".into(),
            text: "```sh\nls\n```".into(),
            size: 12,
        };
        assert_eq!(
            render("look at @README.md\n", &[a]),
            "look at @README.md\n\nFiles the user attached with @ (as they were when this \
             message was sent):\n\n````README.md\n```sh\nls\n```\n````\n"
        );
    }

    #[test]
    fn the_typed_part_of_a_message_leaves_the_attachments_out() {
        let stored = render(
            "look at @a.txt",
            &[Attachment {
                label: "a.txt".into(),
                text: "secret body\n".into(),
                size: 12,
            }],
        );
        assert_eq!(as_typed(&stored), ("look at @a.txt", true));
        assert_eq!(as_typed("plain"), ("plain", false));
    }
}
