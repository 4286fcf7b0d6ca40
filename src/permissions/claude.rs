//! Claude Code's permission rules (`.claude/settings.json`, `.claude/settings.local.json`,
//! `~/.claude/settings.json`) read as what they mean in nop: `nop permissions import` translates
//! them into a permission file, and a run warns once about a settings file with rules that were
//! never imported (under nop a deny rule there protects nothing).
//!
//! What translates: `Read(path)`, `Edit(path)`, `Write(path)` (and `MultiEdit`, `NotebookEdit`)
//! become `file-access` rules; bare tool names and `mcp__server__tool` become `tools.allowed` /
//! `tools.denied`; `additionalDirectories` become writable directories; `defaultMode` becomes the
//! approval mode. `allow: Bash(npm run test:*)` asks for nothing nop does not already do (it
//! runs commands without asking, confined): it is said so, with the nearest rule nop has
//! (`shell.outside_sandbox`, not written: it would widen what the agent may do). What nop has
//! no rule for (`deny: Bash(rm:*)`: nop cannot refuse one command; `WebFetch(domain:…)`: no web
//! tool) is reported with the reason, never dropped silently.
//!
//! The settings files are the repository's, so untrusted: a file over [`MAX_BYTES`] or that is
//! not JSON is an error naming it, and a rule that is not a string is reported, not a crash.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::policy::FileAccess;

/// The most of a settings file that is read.
pub const MAX_BYTES: u64 = 1024 * 1024;

/// The settings files of a project, relative to its root, in the order Claude Code layers them.
pub const PROJECT_FILES: [&str; 2] = [".claude/settings.json", ".claude/settings.local.json"];

/// A settings file that cannot be used.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}: {message}", path.display())]
pub struct SettingsError {
    pub path: PathBuf,
    pub message: String,
}

/// What one rule becomes in nop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A `file-access` rule.
    File { pattern: String, access: FileAccess },
    /// A name for `tools.denied`.
    ToolDenied(String),
    /// A name for `tools.allowed`.
    ToolAllowed(String),
    /// The `approval` setting.
    Approval(String),
    /// Nothing to write: nop already does what the rule allows; the text says how, and the
    /// nearest rule nop has.
    AlreadySo(String),
}

/// Why a rule of a settings file means nothing in nop.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Untranslated {
    #[error("not a string")]
    NotString,
    #[error("the rule has no closing `)`")]
    Unclosed,
    #[error("the path is empty")]
    EmptyPath,
    #[error("`{0}` goes up with `..`, which nop patterns cannot say")]
    GoesUp(String),
    #[error("the directory is empty")]
    EmptyDirectory,
    #[error("`{0}` goes above `/`")]
    AboveRoot(String),
    #[error("nop has no web tool like `{0}`")]
    NoWebTool(String),
    #[error("`{0}` is not a Claude Code tool nop knows")]
    UnknownTool(String),
    /// `ask` for every call of a tool.
    #[error(
        "nop cannot ask before every call of one tool; `--approval always` asks before \
         every call that changes something ({0})"
    )]
    AskEveryCall(String),
    /// `deny: Bash(…)`: nop confines commands instead.
    #[error(
        "nop cannot refuse one shell command (`{0}`): every command runs confined to the file \
         rules instead, so deny the paths it must not read or change; `deny: Bash` denies the \
         shell tool, and a PreToolUse hook on `Bash` can refuse this command"
    )]
    ShellDeny(String),
    /// `ask: Bash(…)`.
    #[error(
        "nop cannot ask before one shell command (`{0}`): `--approval always` asks before every \
         command (an \"always\" answer then covers a command prefix for the session)"
    )]
    ShellAsk(String),
    #[error("nop's rules for `{tool}` cannot name what it is called with (`{specifier}`)")]
    Specifier { tool: String, specifier: String },
    /// `bypassPermissions`.
    #[error(
        "nop has no mode that lifts its rules; `on-request` asks only where a rule says \
         `ask`, and commands stay confined"
    )]
    Bypass,
    #[error("`{0}` is not a Claude Code mode nop knows")]
    UnknownMode(String),
}

/// One rule of a settings file and what became of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Where it is: `allow`, `deny`, `ask`, `additionalDirectories` or `defaultMode`.
    pub list: &'static str,
    /// The rule as written.
    pub text: String,
    /// What it becomes, or why it cannot be translated.
    pub result: Result<Vec<Change>, Untranslated>,
}

/// A settings file's permission rules, translated.
#[derive(Debug, Clone)]
pub struct Settings {
    pub path: PathBuf,
    /// The `permissions` object as read (for "already imported" and the state file).
    pub permissions: Value,
    pub rules: Vec<Rule>,
}

/// Reads the settings file at `path` (at most [`MAX_BYTES`]); `Ok(None)` when there is none.
fn read(path: &Path) -> Result<Option<Value>, SettingsError> {
    let error = |message: String| SettingsError {
        path: path.to_path_buf(),
        message,
    };
    // A regular file only: a named pipe in its place must not hold nop up.
    let Some(bytes) =
        crate::capped_file::read(path, MAX_BYTES).map_err(|e| error(e.to_string()))?
    else {
        return Ok(None);
    };
    let value: Value =
        serde_json::from_slice(&bytes).map_err(|e| error(format!("it is not JSON: {e}")))?;
    Ok(Some(value))
}

/// The directory a settings file's `/path` rules are relative to: the project that holds
/// `.claude/` (for `~/.claude/settings.json`, the home directory), else the file's directory.
pub fn base_of(path: &Path) -> PathBuf {
    let dir = path.parent().unwrap_or(Path::new("/"));
    match dir.file_name() {
        Some(name) if name == ".claude" => dir.parent().unwrap_or(dir).to_path_buf(),
        _ => dir.to_path_buf(),
    }
}

/// The settings file at `path` translated for the repository at `root`; `Ok(None)` when there is
/// no such file.
pub fn load(
    path: &Path,
    root: &Path,
    home: Option<&Path>,
) -> Result<Option<Settings>, SettingsError> {
    let Some(value) = read(path)? else {
        return Ok(None);
    };
    let permissions = value.get("permissions").cloned().unwrap_or(Value::Null);
    let base = base_of(path);
    let paths = Paths {
        root,
        base: &base,
        home,
    };
    let mut rules = Vec::new();
    if !permissions.is_null() && !permissions.is_object() {
        return Err(SettingsError {
            path: path.to_path_buf(),
            message: "`permissions` is not an object".into(),
        });
    }
    for list in ["deny", "ask", "allow"] {
        for item in entries(&permissions, list) {
            let (text, result) = match item.as_str() {
                Some(text) => (text.to_string(), translate(list, text, &paths)),
                None => (item.to_string(), Err(Untranslated::NotString)),
            };
            rules.push(Rule { list, text, result });
        }
    }
    for item in entries(&permissions, "additionalDirectories") {
        let (text, result) = match item.as_str() {
            Some(text) => (text.to_string(), directory(text, &paths)),
            None => (item.to_string(), Err(Untranslated::NotString)),
        };
        rules.push(Rule {
            list: "additionalDirectories",
            text,
            result,
        });
    }
    if let Some(mode) = permissions.get("defaultMode") {
        let text = mode
            .as_str()
            .map_or_else(|| mode.to_string(), str::to_string);
        rules.push(Rule {
            list: "defaultMode",
            result: approval(&text),
            text,
        });
    }
    Ok(Some(Settings {
        path: path.to_path_buf(),
        permissions,
        rules,
    }))
}

/// The items of `permissions[list]` (none when it is missing or not a list).
fn entries<'v>(permissions: &'v Value, list: &str) -> impl Iterator<Item = &'v Value> {
    permissions
        .get(list)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// What rule paths are taken against.
struct Paths<'a> {
    root: &'a Path,
    /// What `/x` is relative to.
    base: &'a Path,
    home: Option<&'a Path>,
}

impl Paths<'_> {
    /// A path of a rule as a nop pattern: `//abs` absolute, `~/x` under the home directory, `/x`
    /// from the settings' project, `./x` from the root, and a bare `x` without a slash, as in
    /// gitignore, at any depth.
    fn pattern(&self, path: &str) -> Result<String, Untranslated> {
        let path = path.trim();
        if path.is_empty() {
            return Err(Untranslated::EmptyPath);
        }
        let mut out = if let Some(abs) = path.strip_prefix("//") {
            self.placed(&Path::new("/").join(abs))
        } else if path.starts_with("~/") {
            path.to_string()
        } else if let Some(rel) = path.strip_prefix('/') {
            self.placed(&self.base.join(rel))
        } else if let Some(rel) = path.strip_prefix("./") {
            rel.to_string()
        } else if path.trim_end_matches('/').contains('/') || path.starts_with("**") {
            path.to_string()
        } else {
            format!("**/{path}")
        };
        if out.ends_with('/') {
            out.push_str("**");
        }
        if out.split('/').any(|part| part == "..") {
            return Err(Untranslated::GoesUp(path.to_string()));
        }
        if out.is_empty() {
            out = "**".into();
        }
        Ok(out)
    }

    /// An absolute path as a nop pattern: relative to the root inside it, `~/…` under the home
    /// directory, else absolute.
    fn placed(&self, path: &Path) -> String {
        let text = path.to_string_lossy();
        let trailing = if text.ends_with('/') { "/" } else { "" };
        if let Ok(rel) = path.strip_prefix(self.root) {
            let rel = rel.to_string_lossy();
            return if rel.is_empty() {
                "**".into()
            } else {
                format!("{rel}{trailing}")
            };
        }
        if let Some(rel) = self.home.and_then(|h| path.strip_prefix(h).ok()) {
            return format!("~/{}{trailing}", rel.to_string_lossy());
        }
        text.into_owned()
    }
}

/// The nop tools a Claude Code tool name stands for; `Err` says why there are none.
pub fn tools_of(name: &str) -> Result<Vec<String>, Untranslated> {
    let names: &[&str] = match name {
        "Read" => &["read-file", "list-files", "search-files"],
        "Edit" | "MultiEdit" | "Write" | "NotebookEdit" => &["edit-file", "write-file"],
        "Bash" => &["shell"],
        "Glob" | "LS" => &["list-files"],
        "Grep" => &["search-files"],
        "Task" | "Agent" => &["call-agent"],
        "TodoWrite" => &["update-plan"],
        "WebFetch" | "WebSearch" => {
            return Err(Untranslated::NoWebTool(name.to_string()));
        }
        _ => {
            if let Some(rest) = name.strip_prefix("mcp__") {
                return Ok(vec![match rest.split_once("__") {
                    Some((server, tool)) if !tool.is_empty() => format!("{server}.{tool}"),
                    _ => format!("{}.*", rest.trim_end_matches('_')),
                }]);
            }
            return Err(Untranslated::UnknownTool(name.to_string()));
        }
    };
    Ok(names.iter().map(|n| n.to_string()).collect())
}

/// What the rule `text` in the list `list` (`allow`, `deny`, `ask`) becomes.
fn translate(list: &str, text: &str, paths: &Paths<'_>) -> Result<Vec<Change>, Untranslated> {
    let text = text.trim();
    let (tool, specifier) = match text.split_once('(') {
        Some((tool, rest)) => {
            let inner = rest.strip_suffix(')').ok_or(Untranslated::Unclosed)?;
            (tool.trim(), Some(inner.trim()))
        }
        None => (text, None),
    };
    let specifier = specifier.filter(|s| !s.is_empty() && *s != "*" && *s != "**");
    let Some(specifier) = specifier else {
        let tools = tools_of(tool)?;
        return match list {
            "deny" => Ok(tools.into_iter().map(Change::ToolDenied).collect()),
            "allow" => Ok(tools.into_iter().map(Change::ToolAllowed).collect()),
            _ => Err(Untranslated::AskEveryCall(tool.to_string())),
        };
    };
    let reading = match tool {
        "Read" => true,
        "Edit" | "MultiEdit" | "Write" | "NotebookEdit" => false,
        "Bash" => return shell(list, specifier),
        "WebFetch" | "WebSearch" => return Err(Untranslated::NoWebTool(tool.to_string())),
        _ => {
            tools_of(tool)?;
            return Err(Untranslated::Specifier {
                tool: tool.to_string(),
                specifier: specifier.to_string(),
            });
        }
    };
    let pattern = paths.pattern(specifier)?;
    let access = match (list, reading) {
        ("deny", true) => FileAccess::Deny,
        ("deny", false) => FileAccess::ReadOnly,
        ("ask", _) => FileAccess::Ask,
        (_, true) => FileAccess::ReadOnly,
        (_, false) => FileAccess::Read,
    };
    Ok(vec![Change::File { pattern, access }])
}

/// A `Bash(…)` rule: Claude Code's `npm run test:*` (a prefix), `git diff` (exact), `npm *`
/// (a glob). An `allow` is what nop does already (it runs commands without asking, confined to
/// the file rules); its nearest rule, `shell.outside_sandbox`, would run the command with the
/// user's rights and is named, not written: a command such as `npm run test` runs what the
/// repository's files say, and the agent can write them.
fn shell(list: &str, specifier: &str) -> Result<Vec<Change>, Untranslated> {
    let command = specifier.trim();
    let glob = match command.strip_suffix(":*") {
        Some(prefix) => format!("{}*", prefix.trim_end()),
        None => command.to_string(),
    };
    match list {
        "allow" => Ok(vec![Change::AlreadySo(format!(
            "nop runs `{command}` without asking already, confined to the file rules; \
             `shell.outside_sandbox: [{}]` in .nop/config.yml would run it outside the \
             sandbox with your rights without a question (not imported: it widens what the \
             agent may do)",
            serde_json::Value::String(glob)
        ))]),
        "deny" => Err(Untranslated::ShellDeny(command.to_string())),
        _ => Err(Untranslated::ShellAsk(command.to_string())),
    }
}

/// An `additionalDirectories` entry: a directory the agent may read and write.
fn directory(text: &str, paths: &Paths<'_>) -> Result<Vec<Change>, Untranslated> {
    let text = text.trim().trim_end_matches('/');
    if text.is_empty() {
        return Err(Untranslated::EmptyDirectory);
    }
    let path = match text.strip_prefix("~/") {
        Some(_) => return Ok(vec![file(format!("{text}/**"), FileAccess::Read)]),
        None if text.starts_with('/') => PathBuf::from(text),
        None => paths.root.join(text),
    };
    let path = normalise(&path).ok_or_else(|| Untranslated::AboveRoot(text.to_string()))?;
    let pattern = paths.placed(&path);
    let pattern = if pattern == "**" {
        pattern
    } else {
        format!("{pattern}/**")
    };
    Ok(vec![file(pattern, FileAccess::Read)])
}

fn file(pattern: String, access: FileAccess) -> Change {
    Change::File { pattern, access }
}

/// `path` with `.` and `..` taken away lexically.
fn normalise(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    Some(out)
}

/// `defaultMode` as nop's approval mode.
fn approval(mode: &str) -> Result<Vec<Change>, Untranslated> {
    Ok(vec![Change::Approval(approval_mode(mode)?.as_str().into())])
}

/// A Claude Code permission mode (`defaultMode`, `--permission-mode`) as nop's approval mode:
/// none lifts nop's rules.
pub fn approval_mode(mode: &str) -> Result<super::ApprovalMode, Untranslated> {
    Ok(match mode {
        "default" | "acceptEdits" => super::ApprovalMode::OnRequest,
        "plan" => super::ApprovalMode::Plan,
        "dontAsk" => super::ApprovalMode::Never,
        "bypassPermissions" => return Err(Untranslated::Bypass),
        other => return Err(Untranslated::UnknownMode(other.to_string())),
    })
}

/// Whether a settings file's `permissions` holds anything that means something to permissions.
pub fn has_rules(permissions: &Value) -> bool {
    ["allow", "deny", "ask", "additionalDirectories"]
        .iter()
        .any(|list| entries(permissions, list).next().is_some())
        || permissions.get("defaultMode").is_some()
}

/// Where nop remembers which settings files' rules were imported or warned about.
const STATE_FILE: &str = "claude-settings.json";

/// The state file under `state_dir`: settings file (relative to the root) → its `permissions`.
fn remembered(state_dir: &Path) -> serde_json::Map<String, Value> {
    let path = state_dir.join(STATE_FILE);
    std::fs::read(&path)
        .ok()
        .filter(|b| b.len() as u64 <= MAX_BYTES)
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .and_then(|v| v.as_object().cloned())
        .unwrap_or_default()
}

/// Records that the settings file `label` with `permissions` was imported or warned about.
pub fn remember(state_dir: &Path, label: &str, permissions: &Value) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut state = remembered(state_dir);
    state.insert(label.to_string(), permissions.clone());
    std::fs::create_dir_all(state_dir)?;
    let mut temp = tempfile::NamedTempFile::new_in(state_dir)?;
    temp.write_all(&serde_json::to_vec_pretty(&Value::Object(state))?)?;
    temp.as_file().sync_all()?;
    temp.persist(state_dir.join(STATE_FILE))
        .map_err(|e| e.error)?;
    Ok(())
}

/// Warnings, once per content of their rules, about the project's settings files whose rules
/// were never imported; each is remembered in `state_dir` so the next run is quiet until the
/// file's rules change. A settings file that cannot be read is the hooks loader's warning
/// (`config::hooks`).
pub fn unimported(root: &Path, state_dir: &Path) -> Vec<String> {
    let state = remembered(state_dir);
    let mut warnings = Vec::new();
    for label in PROJECT_FILES {
        let path = root.join(label);
        // Never a suggestion to import what the user has not trusted: the file may be the
        // model's bait (a harmless deny beside an allow of the secrets).
        let real = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        let (_, _, verdict) =
            crate::trust::permission_rules_check(root, &real, &crate::trust::process_env());
        if verdict.is_err() {
            continue;
        }
        let settings = match load(&path, root, None) {
            Ok(Some(settings)) => settings,
            Ok(None) => continue,
            // The hooks' loader reads the same file first and says it cannot be used, for its
            // hooks and its rules (`config::hooks`): one warning, not two.
            Err(_) => continue,
        };
        if !has_rules(&settings.permissions) || state.get(label) == Some(&settings.permissions) {
            continue;
        }
        let denies = settings.rules.iter().filter(|r| r.list == "deny").count();
        let protects = if denies > 0 {
            format!(
                "its {denies} deny rule{} protect{} nothing under nop until imported",
                if denies == 1 { "" } else { "s" },
                if denies == 1 { "s" } else { "" }
            )
        } else {
            "its rules do nothing under nop until imported".to_string()
        };
        warnings.push(format!(
            "{label} has Claude Code permission rules that nop does not read: {protects}; run \
             `nop permissions import` to translate them into nop's rules (this warning is given \
             once for this content of the file)"
        ));
        if let Err(e) = remember(state_dir, label, &settings.permissions) {
            tracing::warn!(
                op = "permissions",
                "cannot record that {label} was warned about: {e}"
            );
        }
    }
    warnings
}

/// A change to make to a permission file, with the rule it comes from.
#[derive(Debug, Clone)]
pub struct Planned {
    pub change: Change,
    /// `allow`, `deny`, `ask` or `additionalDirectories`.
    pub list: &'static str,
    /// `.claude/settings.json: deny Read(./secrets/**)`, for the comment above the rule.
    pub from: String,
}

/// A permission file's new text, and what was added or found there already.
#[derive(Debug, Clone, Default)]
pub struct Merged {
    pub text: String,
    /// Each rule added, as a line for the user.
    pub added: Vec<String>,
    /// Each rule left out because the file already says it or more, and why.
    pub already: Vec<String>,
    /// Each rule left out because it would let the agent reach outside the repository.
    pub refused: Vec<String>,
}

/// Whether a pattern names a place outside the repository (absolute or under `~/`).
fn outside(pattern: &str) -> bool {
    pattern.starts_with('/') || pattern.starts_with("~/")
}

/// What an existing permission file says, as far as merging needs to know.
#[derive(Debug, Default, serde::Deserialize)]
struct Existing {
    #[serde(default)]
    tools: Option<ExistingTools>,
    #[serde(default, rename = "file-access")]
    file_access: Option<Vec<ExistingRule>>,
}

#[derive(Debug, Default, serde::Deserialize)]
struct ExistingTools {
    #[serde(default)]
    allowed: Option<Vec<String>>,
    #[serde(default)]
    denied: Option<Vec<String>>,
}

#[derive(Debug, serde::Deserialize)]
struct ExistingRule {
    pattern: String,
    access: String,
}

/// `text` safe inside a YAML comment: one line, no control characters (nor the line and
/// paragraph separators a YAML 1.1 reader would break the line at).
fn comment_safe(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') {
                '?'
            } else {
                c
            }
        })
        .collect()
}

/// `old` (the permission file at `path`, `None` when there is none yet) with `planned` added:
/// file rules at the top of `file-access` (deny first, as listed), tool names in `tools`.
/// `current` is the agent's policy now: an `allow` it already grants is not added (a narrower
/// rule at the top would take rights away). An `allow` outside the repository is added only with
/// `allow_outside`. The result is checked to load; an `Err` means nothing may be written.
#[expect(clippy::too_many_lines, reason = "a debt: listed in AGENTS.md")]
pub fn merge(
    path: &Path,
    old: Option<&str>,
    planned: &[Planned],
    current: Option<&super::Policy>,
    allow_outside: bool,
) -> Result<Merged, String> {
    let old_text = old.unwrap_or("extends: default\n");
    if let Some(old) = old {
        super::load::check_text(path, old).map_err(|e| {
            format!("{e}; the file is left as it is: fix it first (`nop permissions check`)")
        })?;
    }
    let existing: Existing = serde_saphyr::from_str(old_text).unwrap_or_default();
    let had_rule = |pattern: &str, access: FileAccess| {
        existing
            .file_access
            .iter()
            .flatten()
            .any(|r| r.pattern == pattern && r.access == access.as_str())
    };
    let mut merged = Merged::default();
    let mut block = String::new();
    let mut denied: Vec<String> = Vec::new();
    let mut allowed: Vec<String> = Vec::new();
    let tools = existing.tools.unwrap_or_default();
    let (old_allowed, old_denied) = (
        tools.allowed.unwrap_or_default(),
        tools.denied.unwrap_or_default(),
    );
    for plan in planned {
        match &plan.change {
            Change::File { pattern, access } => {
                let access = *access;
                if had_rule(pattern, access)
                    || block.contains(&format!("pattern: {}\n", quoted(pattern)))
                {
                    merged.already.push(format!(
                        "{pattern}: {} (already in the file)",
                        access.as_str()
                    ));
                    continue;
                }
                let widens = matches!(plan.list, "allow" | "additionalDirectories");
                if widens && outside(pattern) && !allow_outside {
                    merged.refused.push(format!(
                        "{pattern}: {} (not imported without --allow-outside: it lets the agent \
                         reach outside the repository, and a settings file in the repository may \
                         be the model's work)",
                        access.as_str()
                    ));
                    continue;
                }
                // An allow goes first in the file: above a deny (a read-only, an ask) it would
                // lift it. The user's rules stand; the allow is not imported.
                if widens && let Some(lifted) = current.and_then(|p| lifts(p, pattern, access)) {
                    merged.refused.push(format!(
                        "{pattern}: {} (not imported: it would lift {lifted}; change that rule \
                         yourself if the settings file is right)",
                        access.as_str()
                    ));
                    continue;
                }
                if widens && let Some(source) = current.and_then(|p| granted(p, pattern, access)) {
                    merged.already.push(format!(
                        "{pattern}: {} (already allowed by {source})",
                        access.as_str()
                    ));
                    continue;
                }
                block.push_str(&format!(
                    "INDENT# from {}\nINDENT- pattern: {}\nINDENT  access: {}\n",
                    comment_safe(&plan.from),
                    quoted(pattern),
                    access.as_str()
                ));
                merged
                    .added
                    .push(format!("file-access  {pattern}: {}", access.as_str()));
            }
            Change::ToolDenied(name) => {
                if old_denied.contains(name) || denied.contains(name) {
                    merged
                        .already
                        .push(format!("tools.denied {name} (already in the file)"));
                } else {
                    denied.push(name.clone());
                    merged.added.push(format!("tools.denied {name}"));
                }
            }
            Change::ToolAllowed(name) => {
                let allowed_now = current.is_some_and(|p| p.check_tool(name).is_allowed());
                if allowed_now || old_allowed.contains(name) || allowed.contains(name) {
                    merged
                        .already
                        .push(format!("tools.allowed {name} (already allowed)"));
                } else {
                    allowed.push(name.clone());
                    merged.added.push(format!("tools.allowed {name}"));
                }
            }
            Change::Approval(_) | Change::AlreadySo(_) => {}
        }
    }
    let mut lines: Vec<String> = old_text.lines().map(str::to_string).collect();
    if !block.is_empty() {
        insert_rules(&mut lines, &block);
    }
    if !denied.is_empty() {
        extend_tools(&mut lines, "denied", &old_denied, &denied)?;
    }
    if !allowed.is_empty() {
        extend_tools(&mut lines, "allowed", &old_allowed, &allowed)?;
    }
    let mut text = lines.join("\n");
    text.push('\n');
    super::load::check_text(path, &text)
        .map_err(|e| format!("the merged file would not load ({e}); nothing was written"))?;
    merged.text = text;
    Ok(merged)
}

/// `text` as a YAML double-quoted scalar.
fn quoted(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_else(|_| format!("{text:?}"))
}

/// The source of the rule that already grants `access` (as an `allow` would) to the place
/// `pattern` names, if one does.
fn granted(policy: &super::Policy, pattern: &str, access: FileAccess) -> Option<String> {
    let rule = super::policy::FileRule::new(pattern, access, super::Source::Floor).ok()?;
    let prefix = rule.literal_prefix();
    let prefix = if prefix.is_empty() { "." } else { prefix };
    let need = if access == FileAccess::Read {
        super::Access::Write
    } else {
        super::Access::Read
    };
    match policy.check_path(prefix, need) {
        (_, super::Decision::Allow { source }) => Some(source.to_string()),
        _ => None,
    }
}

/// The first rule of `policy` (not the floor: nothing lifts it) that an allow of `access` to
/// `pattern`, put first, would lift: a `deny` or `ask` where the two patterns meet, a
/// `read-only` where the allow also writes. Said as `pattern: access (file:line)`.
fn lifts(policy: &super::Policy, pattern: &str, access: FileAccess) -> Option<String> {
    let allow = super::policy::FileRule::new(pattern, access, super::Source::Floor).ok()?;
    let root = policy.root();
    let narrower = |rule: &super::policy::FileRule| match rule.access {
        FileAccess::Deny | FileAccess::Ask => true,
        FileAccess::ReadOnly => access == FileAccess::Read,
        FileAccess::Read => false,
    };
    policy
        .sets()
        .iter()
        .flat_map(|s| s.rules.iter())
        .filter(|r| r.source != super::Source::Floor && narrower(r))
        .find(|r| meet(root, &allow, r))
        .map(|r| format!("`{}: {}` ({})", r.pattern, r.access.as_str(), r.source))
}

/// Whether two rules cover a common path: one's literal part (or a name beneath it) is
/// matched by both.
fn meet(root: &Path, a: &super::policy::FileRule, b: &super::policy::FileRule) -> bool {
    let place = |rule: &super::policy::FileRule| {
        let prefix = rule.literal_prefix();
        if rule.is_absolute() {
            PathBuf::from(prefix)
        } else {
            root.join(prefix)
        }
    };
    let mut candidates = Vec::new();
    for p in [place(a), place(b)] {
        candidates.push(p.join("nop_probe_name"));
        candidates.push(p);
    }
    candidates.iter().any(|path| {
        let relative = path
            .strip_prefix(root)
            .ok()
            .map(|r| r.to_string_lossy().into_owned());
        let absolute = path.to_string_lossy();
        a.matches(relative.as_deref(), &absolute) && b.matches(relative.as_deref(), &absolute)
    })
}

/// Puts `block` (lines starting with `INDENT`) at the top of `file-access`.
fn insert_rules(lines: &mut Vec<String>, block: &str) {
    let at = lines
        .iter()
        .position(|l| l.trim_end() == "file-access:" || l.trim_end() == "file-access: []");
    let Some(at) = at else {
        if lines.last().is_some_and(|l| !l.trim().is_empty()) {
            lines.push(String::new());
        }
        lines.push("file-access:".into());
        lines.extend(block.replace("INDENT", "  ").lines().map(str::to_string));
        return;
    };
    lines[at] = "file-access:".into();
    let indent: String = lines[at + 1..]
        .iter()
        .find(|l| l.trim_start().starts_with("- "))
        .map(|l| l[..l.len() - l.trim_start().len()].to_string())
        .unwrap_or_else(|| "  ".into());
    let new: Vec<String> = block
        .replace("INDENT", &indent)
        .lines()
        .map(str::to_string)
        .collect();
    lines.splice(at + 1..at + 1, new);
}

/// Adds `names` to `tools.<key>` (whose items are `old`): the one-line list rewritten, or the key
/// added under `tools:`.
fn extend_tools(
    lines: &mut Vec<String>,
    key: &str,
    old: &[String],
    names: &[String],
) -> Result<(), String> {
    let all: Vec<String> = old.iter().chain(names).map(|n| quoted(n)).collect();
    let tools_at = lines.iter().position(|l| l.trim_end() == "tools:");
    let Some(tools_at) = tools_at else {
        if lines.iter().any(|l| l.starts_with("tools:")) {
            return Err(format!(
                "`tools:` is not written as a block; add {} to tools.{key} yourself",
                names.join(", ")
            ));
        }
        lines.push("tools:".into());
        lines.push(format!("  {key}: [{}]", all.join(", ")));
        return Ok(());
    };
    let prefix = format!("{key}:");
    let key_at = lines[tools_at + 1..]
        .iter()
        .take_while(|l| l.trim().is_empty() || l.starts_with(' ') || l.starts_with('#'))
        .position(|l| l.trim_start().starts_with(&prefix))
        .map(|i| i + tools_at + 1);
    match key_at {
        Some(i) => {
            let line = &lines[i];
            let value = line.trim_start()[prefix.len()..].trim();
            if !(value.starts_with('[') && value.ends_with(']')) {
                return Err(format!(
                    "tools.{key} is not a one-line list; add {} to it yourself",
                    names.join(", ")
                ));
            }
            let indent = &line[..line.len() - line.trim_start().len()];
            lines[i] = format!("{indent}{key}: [{}]", all.join(", "));
        }
        None => lines.insert(tools_at + 1, format!("  {key}: [{}]", all.join(", "))),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn paths() -> (PathBuf, PathBuf) {
        (PathBuf::from("/repo"), PathBuf::from("/home/me"))
    }

    fn one(list: &str, text: &str) -> Result<Vec<Change>, Untranslated> {
        let (root, home) = paths();
        let p = Paths {
            root: &root,
            base: &root,
            home: Some(&home),
        };
        translate(list, text, &p)
    }

    fn f(pattern: &str, access: FileAccess) -> Result<Vec<Change>, Untranslated> {
        Ok(vec![file(pattern.into(), access)])
    }

    #[test]
    fn path_rules_become_file_rules_in_every_path_form() {
        assert_eq!(
            one("deny", "Read(./secrets/**)"),
            f("secrets/**", FileAccess::Deny)
        );
        assert_eq!(one("deny", "Read(.env)"), f("**/.env", FileAccess::Deny));
        assert_eq!(
            one("deny", "Read(//etc/shadow)"),
            f("/etc/shadow", FileAccess::Deny)
        );
        assert_eq!(one("deny", "Read(//repo/x/y)"), f("x/y", FileAccess::Deny));
        assert_eq!(
            one("deny", "Read(/src/**/*.pem)"),
            f("src/**/*.pem", FileAccess::Deny)
        );
        assert_eq!(
            one("allow", "Read(~/.zshrc)"),
            f("~/.zshrc", FileAccess::ReadOnly)
        );
        assert_eq!(
            one("deny", "Edit(docs/**)"),
            f("docs/**", FileAccess::ReadOnly)
        );
        assert_eq!(
            one("allow", "Write(build/)"),
            f("**/build/**", FileAccess::Read)
        );
        assert_eq!(
            one("ask", "Edit(./deploy/**)"),
            f("deploy/**", FileAccess::Ask)
        );
        assert!(one("deny", "Read(../up)").is_err());
    }

    #[test]
    fn tools_and_what_nop_cannot_say() {
        assert_eq!(
            one("deny", "Bash"),
            Ok(vec![Change::ToolDenied("shell".into())])
        );
        assert_eq!(
            one("deny", "mcp__github__create_issue"),
            Ok(vec![Change::ToolDenied("github.create_issue".into())])
        );
        assert_eq!(
            one("allow", "mcp__github"),
            Ok(vec![Change::ToolAllowed("github.*".into())])
        );
        let Ok(changes) = one("allow", "Bash(npm run test:*)") else {
            panic!("an allowed command is what nop already does");
        };
        let [Change::AlreadySo(said)] = changes.as_slice() else {
            panic!("{changes:?}");
        };
        assert!(
            said.starts_with("nop runs `npm run test:*` without asking already")
                && said.contains("`shell.outside_sandbox: [\"npm run test*\"]`"),
            "{said}"
        );
        assert_eq!(
            one("deny", "Bash(rm -rf:*)"),
            Err(Untranslated::ShellDeny("rm -rf:*".into()))
        );
        assert_eq!(
            one("ask", "Bash(git push)"),
            Err(Untranslated::ShellAsk("git push".into()))
        );
        assert_eq!(
            one("allow", "WebFetch(domain:example.com)"),
            Err(Untranslated::NoWebTool("WebFetch".into()))
        );
        assert!(one("ask", "Bash").is_err());
        assert!(one("deny", "Frobnicate").is_err());
        assert!(one("deny", "Read(x").is_err());
        assert_eq!(approval("plan"), Ok(vec![Change::Approval("plan".into())]));
        assert!(approval("bypassPermissions").is_err());
    }

    #[test]
    fn each_reason_is_said_in_the_words_users_know() {
        let (root, home) = paths();
        let p = Paths {
            root: &root,
            base: &root,
            home: Some(&home),
        };
        let why = |result: Result<Vec<Change>, Untranslated>| result.unwrap_err().to_string();
        for (rule, said) in [
            ("Read(x", "the rule has no closing `)`"),
            (
                "Read(a/../../b)",
                "`a/../../b` goes up with `..`, which nop patterns cannot say",
            ),
            ("WebSearch", "nop has no web tool like `WebSearch`"),
            (
                "Frobnicate",
                "`Frobnicate` is not a Claude Code tool nop knows",
            ),
            (
                "Bash(curl:*)",
                "nop cannot refuse one shell command (`curl:*`): every command runs confined to \
                 the file rules instead, so deny the paths it must not read or change; \
                 `deny: Bash` denies the shell tool, and a PreToolUse hook on `Bash` can refuse \
                 this command",
            ),
            (
                "Grep(TODO)",
                "nop's rules for `Grep` cannot name what it is called with (`TODO`)",
            ),
        ] {
            assert_eq!(why(translate("deny", rule, &p)), said, "{rule}");
        }
        assert_eq!(
            why(translate("ask", "Read", &p)),
            "nop cannot ask before every call of one tool; `--approval always` asks before \
             every call that changes something (Read)"
        );
        assert_eq!(why(directory(" / ", &p)), "the directory is empty");
        assert_eq!(why(directory("../../..", &p)), "`../../..` goes above `/`");
        assert_eq!(
            why(approval("bypassPermissions")),
            "nop has no mode that lifts its rules; `on-request` asks only where a rule says \
             `ask`, and commands stay confined"
        );
        assert_eq!(
            why(approval("yolo")),
            "`yolo` is not a Claude Code mode nop knows"
        );
        assert_eq!(Untranslated::NotString.to_string(), "not a string");
        assert_eq!(Untranslated::EmptyPath.to_string(), "the path is empty");
    }

    #[test]
    fn additional_directories_are_writable_places() {
        let (root, home) = paths();
        let p = Paths {
            root: &root,
            base: &root,
            home: Some(&home),
        };
        assert_eq!(directory("../docs/", &p), f("/docs/**", FileAccess::Read));
        assert_eq!(directory("~/notes", &p), f("~/notes/**", FileAccess::Read));
        assert_eq!(directory("/home/me/x", &p), f("~/x/**", FileAccess::Read));
        assert_eq!(directory("sub", &p), f("sub/**", FileAccess::Read));
    }

    fn planned(change: Change, list: &'static str, from: &str) -> Planned {
        Planned {
            change,
            list,
            from: from.into(),
        }
    }

    #[test]
    fn merging_keeps_the_file_and_never_lets_a_rule_text_out_of_its_comment() {
        let path = Path::new("agent-default.yml");
        let old = "# mine\ntools:\n  allowed: [\"*\"]\n  denied: []\nfile-access:\n    - pattern: \"**\"\n      access: read\n";
        let merged = merge(
            path,
            Some(old),
            &[
                planned(
                    file("a/**".into(), FileAccess::Deny),
                    "deny",
                    "x: deny Read(a)\n  - pattern: \"**\"\u{2028}    access: deny",
                ),
                planned(Change::ToolDenied("shell".into()), "deny", "x"),
            ],
            None,
            false,
        )
        .expect("merged");
        assert_eq!(
            merged.text,
            "# mine\ntools:\n  allowed: [\"*\"]\n  denied: [\"shell\"]\nfile-access:\n    \
             # from x: deny Read(a)?  - pattern: \"**\"?    access: deny\n    - pattern: \"a/**\"\n      \
             access: deny\n    - pattern: \"**\"\n      access: read\n"
        );
        let block_list = "tools:\n  allowed: [\"*\"]\n  denied:\n    - shell\n";
        let refused = merge(
            path,
            Some(block_list),
            &[planned(Change::ToolDenied("x".into()), "deny", "x")],
            None,
            false,
        );
        assert!(refused.unwrap_err().contains("not a one-line list"));
        let broken = merge(path, Some("tools: [\n"), &[], None, false);
        assert!(broken.unwrap_err().contains("the file is left as it is"));
    }
}
