//! What the user trusted nop to run outside the sandbox, or to widen the agent's rules, in one
//! repository; decided when it is used, by content, from a record the model cannot reach.
//!
//! A *subject* is something of the repository's that would run with the user's rights or widen
//! what the agent may do: a `.nop/` that would be the workspace (its settings that widen
//! confinement, its permission files), the hooks of a Claude Code settings file, the scripts
//! nop's own hooks name, an MCP server (`.mcp.json`, `.nop/plugins/`), `core.hooksPath` in the
//! work tree, and (for `nop permissions import`) a settings file's permission rules. Each
//! subject is a list of *facets*: a file, or the part of a file that matters (`hooks` of a
//! settings file, one server of `.mcp.json`), with the files its commands name (`named.rs`).
//! A subject is trusted when every facet holds what the user trusted ([`Record`]); an empty
//! facet (no such file, no such part) has nothing to trust. New or changed: not run, not used.
//!
//! Nothing here depends on a run ending in order: a record is written only by the user's own
//! commands (`nop trust --yes`, `nop init`, `nop config set`, answering the question nop asks on
//! a terminal), never by what a run notices.

mod named;
mod record;
mod subjects;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

pub use named::{in_command_line as named_in_command_line, normal as named_normal};
pub use record::{Base, Entry, Record, RecordError, Store};
pub use subjects::{
    all as subjects, claude_hooks_facet, claude_permissions, covered, named_files,
    permission_rules, workspace,
};

/// The most of a file hashed: a larger one cannot be trusted.
const MAX_HASHED: u64 = 16 << 20;
/// The most of a facet's text kept in the record, to show a diff when it changes.
const MAX_TEXT: usize = 64 * 1024;

/// What a facet holds now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    Held {
        sha256: String,
        /// The text, when it is short UTF-8.
        text: Option<String>,
    },
    /// What can never be trusted, and why (a named pipe, a file over the size limit).
    Untrustable(String),
}

/// A file, or the part of one that matters, as it is now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facet {
    /// Relative to the repository's top (absolute outside it), with `#part` for part of a file.
    pub key: String,
    /// `None`: no such file or part; nothing to trust.
    pub content: Option<Content>,
}

impl Facet {
    /// The file at `path` (absolute): its bytes (a symbolic link: where it leads and what is
    /// there), `None` when there is nothing (or a link to nothing, or a directory).
    pub fn file(base: &Base, path: &Path) -> Facet {
        let key = base.key(path);
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            return Facet { key, content: None };
        };
        let mut prefix = Vec::new();
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(path).unwrap_or_default();
            prefix = format!("link to {}\n", target.display()).into_bytes();
        }
        let content = match std::fs::metadata(path) {
            Err(_) => None,
            Ok(m) if m.is_dir() => None,
            Ok(m) if !m.is_file() => Some(Content::Untrustable(
                "it is not a regular file (a named pipe or a device: what it holds is whatever \
                 writes to it)"
                    .into(),
            )),
            Ok(_) => match crate::capped_file::read(path, MAX_HASHED) {
                Ok(Some(bytes)) => {
                    let mut all = prefix;
                    all.extend_from_slice(&bytes);
                    Some(held(&all))
                }
                Ok(None) => None,
                Err(e) => Some(Content::Untrustable(format!("it cannot be read: {e}"))),
            },
        };
        Facet { key, content }
    }

    /// Part `part` of the file at `path`, as `text` (`None` or empty: nothing to trust).
    pub fn part(base: &Base, path: &Path, part: &str, text: Option<String>) -> Facet {
        Facet {
            key: format!("{}#{part}", base.key(path)),
            content: text
                .filter(|t| !t.trim().is_empty())
                .map(|t| held(t.as_bytes())),
        }
    }

    /// The file this facet is of (its key without `#part`).
    pub fn file_key(&self) -> &str {
        self.key
            .split_once('#')
            .map_or(self.key.as_str(), |(f, _)| f)
    }

    fn text(&self) -> Option<&str> {
        match &self.content {
            Some(Content::Held { text, .. }) => text.as_deref(),
            _ => None,
        }
    }
}

fn held(bytes: &[u8]) -> Content {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let sha256 = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    let text = (bytes.len() <= MAX_TEXT)
        .then(|| String::from_utf8(bytes.to_vec()).ok())
        .flatten();
    Content::Held { sha256, text }
}

/// What a subject is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// A `.nop/` that is (or would be) the workspace: its widening settings, its permissions.
    Workspace,
    /// Hook commands: a Claude Code settings file's, or the scripts nop's own hooks name.
    Hooks,
    /// An MCP server nop would start, or connect to with your credentials.
    McpServer,
    /// A `.nop/plugins/<name>/` whose MCP server nop would start.
    Plugin,
    /// Hooks your git runs from the work tree (`core.hooksPath`).
    GitHooks,
    /// A Claude Code settings file's permission rules (for `nop permissions import` only).
    PermissionRules,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Workspace => "workspace",
            Kind::Hooks => "hooks",
            Kind::McpServer => "mcp-server",
            Kind::Plugin => "plugin",
            Kind::GitHooks => "git-hooks",
            Kind::PermissionRules => "permission-rules",
        }
    }
}

/// Something of the repository's that runs with the user's rights or widens the agent's rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    pub kind: Kind,
    /// What it is, as the user reads it ("hooks of .claude/settings.json").
    pub name: String,
    pub facets: Vec<Facet>,
}

impl Subject {
    /// The files of its facets, each once, in order.
    pub fn files(&self) -> Vec<String> {
        let mut files: Vec<String> = Vec::new();
        for facet in &self.facets {
            if facet.content.is_some() && !files.iter().any(|f| f == facet.file_key()) {
                files.push(facet.file_key().to_string());
            }
        }
        files
    }

    /// Whether any facet holds anything.
    fn matters(&self) -> bool {
        self.facets.iter().any(|f| f.content.is_some())
    }
}

/// Why a subject is not trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Why {
    /// Never trusted in this repository.
    New,
    /// Trusted once, changed since.
    Changed,
    /// It can never be trusted as it is (a named pipe, a file too large to hash).
    Untrustable,
    /// The record cannot be read.
    RecordUnusable,
}

impl Why {
    pub fn as_str(self) -> &'static str {
        match self {
            Why::New => "new",
            Why::Changed => "changed",
            Why::Untrustable => "untrustable",
            Why::RecordUnusable => "record-unusable",
        }
    }
}

/// A facet that is not as trusted: what it held when trusted and what it holds now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub key: String,
    pub before: Option<String>,
    pub now: Option<String>,
    /// Why it can never be trusted, if so.
    pub untrustable: Option<String>,
}

/// A subject that is not trusted, with what makes it so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Untrusted {
    pub subject: Subject,
    pub why: Why,
    pub changes: Vec<Change>,
    /// The record's problem, when it cannot be read.
    pub record_error: Option<String>,
}

impl Untrusted {
    /// One line for a warning: what, why, and what to do.
    pub fn warning(&self) -> String {
        let why = match self.why {
            Why::New => "new: never trusted in this repository".to_string(),
            Why::Changed => format!(
                "changed since you trusted it: {}",
                self.changes
                    .iter()
                    .map(|c| c.key.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Why::Untrustable => self
                .changes
                .iter()
                .find_map(|c| {
                    c.untrustable
                        .as_ref()
                        .map(|u| format!("{} cannot be trusted: {u}", c.key))
                })
                .unwrap_or_else(|| "it cannot be trusted".into()),
            Why::RecordUnusable => self
                .record_error
                .clone()
                .unwrap_or_else(|| "the trust record cannot be read".into()),
        };
        let what = match self.subject.kind {
            Kind::Workspace => {
                "its hooks, plugins and the settings and rules that widen what the agent may do are left out"
            }
            Kind::GitHooks => {
                "nop cannot stop your git from running them: look at them before you commit"
            }
            Kind::PermissionRules => "`nop permissions import` will not read it",
            _ => "left out",
        };
        format!(
            "not trusted: {} ({}) [{why}]: {what}; `nop trust` shows it, `nop trust --yes` trusts it",
            self.subject.name,
            self.subject.files().join(", ")
        )
    }
}

impl Record {
    /// Whether `subject` holds what the user trusted; if not, why and what changed.
    pub fn check(&self, subject: &Subject) -> Result<(), Untrusted> {
        let failing: Vec<&Facet> = subject.facets.iter().filter(|f| !self.trusts(f)).collect();
        if failing.is_empty() {
            return Ok(());
        }
        let changes: Vec<Change> = failing
            .iter()
            .map(|f| Change {
                key: f.key.clone(),
                before: self.previous(&f.key).and_then(|e| e.text.clone()),
                now: f.text().map(str::to_string),
                untrustable: match &f.content {
                    Some(Content::Untrustable(why)) => Some(why.clone()),
                    _ => None,
                },
            })
            .collect();
        let why = if let Some(e) = self.broken() {
            let _ = e;
            Why::RecordUnusable
        } else if changes.iter().any(|c| c.untrustable.is_some()) {
            Why::Untrustable
        } else if failing.iter().any(|f| self.previous(&f.key).is_some()) {
            Why::Changed
        } else {
            Why::New
        };
        Err(Untrusted {
            subject: subject.clone(),
            why,
            changes,
            record_error: self.broken().map(ToString::to_string),
        })
    }

    /// The subjects of `subjects` that are not trusted.
    pub fn untrusted(&self, subjects: &[Subject]) -> Vec<Untrusted> {
        subjects
            .iter()
            .filter(|s| s.matters())
            .filter_map(|s| self.check(s).err())
            .collect()
    }
}

/// The environment the library finds the user's record from when it is given none: the one the
/// binary passes ([`use_env`]), else the process's.
static ENV: std::sync::RwLock<Option<Arc<BTreeMap<String, String>>>> = std::sync::RwLock::new(None);

/// Where the process's record is found: the binary calls it with the environment it resolved,
/// before anything else (an embedding program or a test may call it again).
pub fn use_env(env: &BTreeMap<String, String>) {
    let mut slot = ENV.write().unwrap_or_else(|e| e.into_inner());
    *slot = Some(Arc::new(env.clone()));
}

/// The environment of [`use_env`] (or the process's).
pub fn process_env() -> Arc<BTreeMap<String, String>> {
    if let Some(env) = ENV.read().unwrap_or_else(|e| e.into_inner()).as_ref() {
        return Arc::clone(env);
    }
    let env = Arc::new(default_env());
    let mut slot = ENV.write().unwrap_or_else(|e| e.into_inner());
    Arc::clone(slot.get_or_insert(env))
}

#[cfg(test)]
fn default_env() -> BTreeMap<String, String> {
    // The unit tests' own HOME, never the developer's record.
    let home = format!("/var/tmp/nop-tests/unit-home-{}", std::process::id());
    BTreeMap::from([("HOME".to_string(), home)])
}

#[cfg(not(test))]
fn default_env() -> BTreeMap<String, String> {
    std::env::vars().collect()
}

/// The user's store, from [`process_env`].
pub fn process_store() -> Option<Store> {
    Store::from_env(&process_env())
}

/// Whether the `.nop/` of `dir` (canonical) may be the workspace and its settings and rules
/// used: trusted, or with nothing that widens anything. From the process's record.
pub fn workspace_check(dir: &Path) -> Result<(), Untrusted> {
    workspace_check_in(dir, process_store().as_ref())
}

/// Whether the `.nop/` of `dir` (canonical), below `outermost` (the repository's top, or
/// outside git the outermost directory with a `.nop/config.yml`), may be the workspace.
pub fn nested_workspace_check(dir: &Path, outermost: &Path) -> Result<(), Untrusted> {
    let mut base = Base::of(dir);
    if crate::gitdir::find(dir).is_none() {
        base = Base {
            top: outermost.to_path_buf(),
            main: None,
        };
    }
    let Some(subject) = subjects::workspace(dir, &base) else {
        return Ok(());
    };
    Record::load(process_store().as_ref(), &base).check(&subject)
}

/// [`workspace_check`] with the record of `store`. The answer is kept while none of the files
/// it was read from changed (the permission files are read for every tool call, by every
/// agent's rules).
pub fn workspace_check_in(dir: &Path, store: Option<&Store>) -> Result<(), Untrusted> {
    /// The workspace, the store, what the answer was read from, the answer.
    type Kept = (
        PathBuf,
        Option<Store>,
        Vec<subjects::Stamp>,
        Result<(), Untrusted>,
    );
    static LAST: std::sync::Mutex<Vec<Kept>> = std::sync::Mutex::new(Vec::new());
    let base = Base::of(dir);
    let stamps = subjects::workspace_stamps(dir, store.map(|s| s.file_for(&base.top)).as_deref());
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((.., answer)) = last
        .iter()
        .find(|(d, s, st, _)| d == dir && s.as_ref() == store && *st == stamps)
    {
        return answer.clone();
    }
    let answer = match subjects::workspace(dir, &base) {
        None => Ok(()),
        Some(subject) => Record::load(store, &base).check(&subject),
    };
    last.retain(|(d, s, ..)| !(d == dir && s.as_ref() == store));
    if last.len() >= 16 {
        drop(last.remove(0));
    }
    last.push((dir.to_path_buf(), store.cloned(), stamps, answer.clone()));
    answer
}

/// Decides, at the moment of use, whether a hook command may run: the part of its settings
/// file (`origin`, a Claude Code file in the repository) and the files it names must hold what
/// the user trusted. `root` is where it runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Gate {
    store: Option<Store>,
}

impl Gate {
    pub fn new(store: Option<Store>) -> Gate {
        Gate { store }
    }

    /// `Ok` when `command` (run in `root`) may run; else why not.
    pub fn hook(&self, root: &Path, command: &str, origin: Option<&Path>) -> Result<(), Untrusted> {
        let base = Base::of(root);
        let mut facets = Vec::new();
        let mut name = format!("the hook `{command}`");
        if let Some(origin) = origin
            && let Some(facet) = claude_hooks_facet(&base, origin)
        {
            name = format!("hooks of {}", facet.file_key());
            facets.push(facet);
        }
        facets.extend(named_files(&base, &subjects::in_command(command, root)));
        let subject = Subject {
            kind: Kind::Hooks,
            name,
            facets,
        };
        if !subject.matters() {
            return Ok(());
        }
        Record::load(self.store.as_ref(), &base).check(&subject)
    }
}

/// The servers declared for the repository at `root` that may not start (or be connected to),
/// by name, with why: decided now, from the record of `env`'s user.
pub fn untrusted_servers(
    root: &Path,
    env: &BTreeMap<String, String>,
) -> BTreeMap<String, Untrusted> {
    let base = Base::of(root);
    let record = Record::load(Store::from_env(env).as_ref(), &base);
    subjects::server_subjects(root, &base, env)
        .into_iter()
        .filter_map(|(name, subject)| {
            let matters = subject.matters();
            let verdict = record.check(&subject);
            matters.then_some(verdict.err()?).map(|u| (name, u))
        })
        .collect()
}

/// Every subject of the repository at `root` (canonical) that is not trusted, but the
/// permission rules of settings files: what the start of a run shows and asks about.
pub fn review(root: &Path, env: &BTreeMap<String, String>) -> (Base, Vec<Untrusted>) {
    let base = Base::of(root);
    let record = Record::load(Store::from_env(env).as_ref(), &base);
    let subjects: Vec<Subject> = subjects::all(root, &base, env)
        .into_iter()
        .filter(|s| s.kind != Kind::PermissionRules)
        .collect();
    (base, record.untrusted(&subjects))
}

/// Everything of the workspace at `root` that is not trusted: what a run would use
/// ([`review`]), the `.nop/`s below it passed over as the workspace (`set_aside`), and the
/// permission rules of Claude Code's settings files. What `nop trust` lists.
pub fn review_all(
    root: &Path,
    set_aside: &[PathBuf],
    env: &BTreeMap<String, String>,
) -> (Base, Vec<Untrusted>) {
    let (base, mut found) = review(root, env);
    let record = Record::load(Store::from_env(env).as_ref(), &base);
    let mut more: Vec<Subject> = set_aside
        .iter()
        .filter_map(|dir| subjects::workspace(dir, &base))
        .collect();
    more.extend(subjects::claude_permissions(root, &base));
    found.extend(record.untrusted(&more));
    (base, found)
}

/// Trusts everything [`review_all`] lists, as it is now (`nop trust --yes`); returns it.
pub fn accept_all(
    root: &Path,
    set_aside: &[PathBuf],
    env: &BTreeMap<String, String>,
) -> Result<Vec<Untrusted>, RecordError> {
    let (base, found) = review_all(root, set_aside, env);
    let subjects: Vec<Subject> = found.iter().map(|u| u.subject.clone()).collect();
    accept(env, &base, &subjects)?;
    Ok(found)
}

/// Records every facet of `subjects` as trusted, as it is now.
pub fn accept(
    env: &BTreeMap<String, String>,
    base: &Base,
    subjects: &[Subject],
) -> Result<(), RecordError> {
    let facets: Vec<&Facet> = subjects.iter().flat_map(|s| s.facets.iter()).collect();
    Record::accept(Store::from_env(env).as_ref(), base, &facets)
}

/// Trusts what `nop init`, `nop config set` or `nop permissions import` wrote into the `.nop/`
/// of `dir`: its workspace subject as it is now, if it was trusted before the write
/// (`was_trusted`) or the write made it (init).
pub fn accept_workspace(env: &BTreeMap<String, String>, dir: &Path) -> Result<(), RecordError> {
    let base = Base::of(dir);
    match subjects::workspace(dir, &base) {
        Some(subject) => accept(env, &base, &[subject]),
        None => Ok(()),
    }
}

/// Whether the permission rules of the settings file at `path` (absolute, canonical) may be
/// imported into the repository at `root`: the user's own file outside it, or one they trusted
/// as it is now. With the subject, to trust it ([`accept`]).
pub fn permission_rules_check(
    root: &Path,
    path: &Path,
    env: &BTreeMap<String, String>,
) -> (Base, Option<Subject>, Result<(), Untrusted>) {
    let base = Base::of(root);
    let Some(subject) = subjects::permission_rules(&base, path) else {
        return (base, None, Ok(()));
    };
    let verdict = if subject.matters() {
        Record::load(Store::from_env(env).as_ref(), &base).check(&subject)
    } else {
        Ok(())
    };
    (base, Some(subject), verdict)
}

/// Trusts the files the hook `commands` (run in `root`) name, as they are now: what the user
/// named in `nop config set hooks.… …`.
pub fn accept_commands(
    env: &BTreeMap<String, String>,
    root: &Path,
    commands: &[String],
) -> Result<(), RecordError> {
    let base = Base::of(root);
    let facets: Vec<Facet> = commands
        .iter()
        .flat_map(|c| named_files(&base, &subjects::in_command(c, root)))
        .collect();
    Record::accept(
        Store::from_env(env).as_ref(),
        &base,
        &facets.iter().collect::<Vec<_>>(),
    )
}

/// A path as the user reads it: relative to `base`'s top inside it.
pub fn shown(base: &Base, path: &Path) -> PathBuf {
    PathBuf::from(base.key(path))
}
