//! Rule sets, decisions, path normalisation and the built-in floor.

use std::path::{Component, Path, PathBuf};

use globset::{GlobBuilder, GlobMatcher};
use serde::Serialize;

/// Where a rule comes from, for `nop permissions explain` and error messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Source {
    /// Built into nop; no permission file can lift it.
    Floor,
    File {
        path: PathBuf,
        line: usize,
    },
    /// The text `nop init` installs at `path`, which does not exist: a repository without the
    /// file is confined by nop's defaults.
    BuiltIn {
        path: PathBuf,
        line: usize,
    },
    /// A folder of the user's skills (`~/.claude/skills/pdf`…): readable, never writable.
    Skill,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Floor => f.write_str("nop's built-in floor"),
            Source::File { path, line: 0 } => write!(f, "{}", path.display()),
            Source::File { path, line } => write!(f, "{}:{line}", path.display()),
            Source::BuiltIn { path, line: 0 } => write!(f, "built-in default {}", path.display()),
            Source::BuiltIn { path, line } => {
                write!(f, "built-in default {}:{line}", path.display())
            }
            Source::Skill => f.write_str("one of your skill folders, read-only"),
        }
    }
}

/// A file-access level (seed 002 §5.3, plus `ask`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FileAccess {
    /// Read and write.
    Read,
    ReadOnly,
    Deny,
    /// Needs a person's approval.
    Ask,
}

impl FileAccess {
    pub fn parse(s: &str) -> Option<FileAccess> {
        match s {
            "read" => Some(FileAccess::Read),
            "read-only" => Some(FileAccess::ReadOnly),
            "deny" => Some(FileAccess::Deny),
            "ask" => Some(FileAccess::Ask),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            FileAccess::Read => "read",
            FileAccess::ReadOnly => "read-only",
            FileAccess::Deny => "deny",
            FileAccess::Ask => "ask",
        }
    }
}

/// What an operation needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    Read,
    Write,
}

/// The answer to one check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "decision", rename_all = "lowercase")]
pub enum Decision {
    Allow {
        source: Source,
    },
    Deny {
        reason: String,
        source: Option<Source>,
    },
    Ask {
        source: Source,
    },
}

impl Decision {
    fn rank(&self) -> u8 {
        match self {
            Decision::Allow { .. } => 0,
            Decision::Ask { .. } => 1,
            Decision::Deny { .. } => 2,
        }
    }

    pub fn is_allowed(&self) -> bool {
        matches!(self, Decision::Allow { .. })
    }
}

/// A tool-name glob (`*`, `shell`, `github.*`).
#[derive(Debug, Clone)]
pub struct Pattern {
    pub text: String,
    matcher: GlobMatcher,
    pub source: Source,
}

impl Pattern {
    pub fn tool(text: &str, source: Source) -> Result<Pattern, RuleError> {
        let matcher = GlobBuilder::new(text)
            .literal_separator(false)
            .build()
            .map_err(|e| RuleError::Glob {
                what: "tool pattern",
                pattern: text.to_string(),
                message: e.to_string(),
            })?
            .compile_matcher();
        Ok(Pattern {
            text: text.to_string(),
            matcher,
            source,
        })
    }

    fn matches(&self, name: &str) -> bool {
        self.matcher.is_match(name)
    }
}

/// One `file-access` rule.
#[derive(Debug, Clone)]
pub struct FileRule {
    pub pattern: String,
    pub access: FileAccess,
    pub source: Source,
    matcher: GlobMatcher,
    /// `dir/**` also covers `dir` itself.
    dir_matcher: Option<GlobMatcher>,
    absolute: bool,
}

impl FileRule {
    /// A rule for `pattern`: relative to the repository root, absolute, or `~/…` (the home
    /// directory, from `HOME`).
    pub fn new(pattern: &str, access: FileAccess, source: Source) -> Result<FileRule, RuleError> {
        let trimmed = pattern.trim();
        if trimmed.is_empty() {
            return Err(RuleError::Empty);
        }
        let expanded;
        let trimmed = match trimmed.strip_prefix("~/") {
            Some(rest) => {
                let home = std::env::var_os("HOME")
                    .filter(|h| Path::new(h).is_absolute())
                    .ok_or_else(|| RuleError::NoHome(pattern.to_string()))?;
                expanded = format!("{}/{rest}", Path::new(&home).display());
                expanded.as_str()
            }
            None => trimmed,
        };
        let normalised = trimmed.strip_prefix("./").unwrap_or(trimmed);
        let compile = |p: &str| {
            GlobBuilder::new(p)
                .literal_separator(true)
                .backslash_escape(true)
                .build()
                .map(|g| g.compile_matcher())
                .map_err(|e| RuleError::Glob {
                    what: "pattern",
                    pattern: pattern.to_string(),
                    message: e.to_string(),
                })
        };
        let dir_matcher = match normalised.strip_suffix("/**") {
            Some(dir) if !dir.is_empty() => Some(compile(dir)?),
            _ => None,
        };
        Ok(FileRule {
            pattern: normalised.to_string(),
            access,
            source,
            matcher: compile(normalised)?,
            dir_matcher,
            absolute: normalised.starts_with('/'),
        })
    }

    /// Whether the rule covers a canonical path (`relative`: the same path relative to the
    /// repository root, when it is inside it).
    pub fn matches(&self, relative: Option<&str>, absolute: &str) -> bool {
        let target = if self.absolute {
            Some(absolute)
        } else {
            relative
        };
        let Some(target) = target else { return false };
        self.matcher.is_match(target)
            || self
                .dir_matcher
                .as_ref()
                .is_some_and(|m| m.is_match(target))
    }

    /// The part before the first glob character, as a path (`src/**/*.rs` → `src`).
    pub fn literal_prefix(&self) -> &str {
        let p = self.pattern.as_str();
        let end = p.find(['*', '?', '[', '{']).unwrap_or(p.len());
        let prefix = &p[..end];
        match prefix.rfind('/') {
            Some(i) if end < p.len() => &prefix[..i],
            _ if end < p.len() => "",
            _ => prefix,
        }
    }

    /// Whether the rule covers a whole subtree (`dir/**`, `**`) rather than a finer pattern.
    pub fn is_subtree(&self) -> bool {
        let p = self.pattern.as_str();
        p == "**" || (p.ends_with("/**") && !p[..p.len() - 3].contains(GLOB_CHARS))
    }

    /// Whether the rule names one path exactly (no glob character).
    pub fn is_literal(&self) -> bool {
        !self.pattern.contains(GLOB_CHARS)
    }

    /// Whether the rule is a pattern that is neither one path nor one whole subtree
    /// (`**/*.pem`, `src/*.rs`): what it covers depends on the names that exist.
    pub fn is_glob(&self) -> bool {
        !self.is_literal() && !self.is_subtree()
    }

    pub fn is_absolute(&self) -> bool {
        self.absolute
    }
}

const GLOB_CHARS: [char; 4] = ['*', '?', '[', '{'];

/// One agent's rules: its tools and its file rules, in order.
#[derive(Debug, Clone)]
pub struct RuleSet {
    pub agent: String,
    /// The files the rules came from, most specific first.
    pub files: Vec<PathBuf>,
    /// Those of `files` that do not exist: their rules are the built-in defaults.
    pub built_in: Vec<PathBuf>,
    pub tools_allowed: Vec<Pattern>,
    pub tools_denied: Vec<Pattern>,
    pub rules: Vec<FileRule>,
}

impl RuleSet {
    pub fn empty(agent: &str) -> RuleSet {
        RuleSet {
            agent: agent.to_string(),
            files: Vec::new(),
            built_in: Vec::new(),
            tools_allowed: Vec::new(),
            tools_denied: Vec::new(),
            rules: Vec::new(),
        }
    }

    fn check_tool(&self, tool: &str) -> Decision {
        if let Some(p) = self.tools_denied.iter().find(|p| p.matches(tool)) {
            return Decision::Deny {
                reason: format!(
                    "tool `{tool}` is denied for agent `{}` (`{}`)",
                    self.agent, p.text
                ),
                source: Some(p.source.clone()),
            };
        }
        match self.tools_allowed.iter().find(|p| p.matches(tool)) {
            Some(p) => Decision::Allow {
                source: p.source.clone(),
            },
            None => Decision::Deny {
                reason: format!(
                    "tool `{tool}` is not in the allowed tools of agent `{}`",
                    self.agent
                ),
                source: self.files.first().map(|f| {
                    let (path, line) = (f.clone(), 0);
                    if self.built_in.contains(f) {
                        Source::BuiltIn { path, line }
                    } else {
                        Source::File { path, line }
                    }
                }),
            },
        }
    }

    fn check_path(
        &self,
        relative: Option<&str>,
        absolute: &str,
        access: Access,
        only: impl Fn(&FileRule) -> bool,
    ) -> Decision {
        let rule = floor()
            .iter()
            .chain(self.rules.iter())
            .filter(|r| only(r))
            .find(|r| r.matches(relative, absolute));
        let Some(rule) = rule else {
            let reason = match relative {
                Some(_) => format!("no file-access rule of agent `{}` covers it", self.agent),
                None => "it is outside the repository and no rule names it".to_string(),
            };
            return Decision::Deny {
                reason,
                source: None,
            };
        };
        let source = rule.source.clone();
        match (rule.access, access) {
            (FileAccess::Read, _) | (FileAccess::ReadOnly, Access::Read) => {
                Decision::Allow { source }
            }
            (FileAccess::Ask, _) => Decision::Ask { source },
            (FileAccess::ReadOnly, Access::Write) => Decision::Deny {
                reason: format!("`{}` is read-only", rule.pattern),
                source: Some(source),
            },
            (FileAccess::Deny, _) => Decision::Deny {
                reason: format!("`{}` is denied", rule.pattern),
                source: Some(source),
            },
        }
    }
}

/// The rules no permission file can lift (seed 002 §5.3).
pub(super) fn floor() -> &'static [FileRule] {
    static FLOOR: std::sync::OnceLock<Vec<FileRule>> = std::sync::OnceLock::new();
    FLOOR.get_or_init(|| {
        [
            (".nop/.permissions/**", FileAccess::Deny),
            // The file checkpoints hold every file of the tree: reading them would be reading
            // around the rules, writing them would change what `nop undo` puts back.
            (".nop/checkpoints/**", FileAccess::Deny),
            (".nop/.system/**", FileAccess::ReadOnly),
            (".nop/**", FileAccess::ReadOnly),
            // Everything git reads later, outside any sandbox, when the user runs it: the
            // configuration (core.fsmonitor, hooksPath, aliases, filters), hooks, `commondir`,
            // `info/`, module and worktree directories, and the index (whose gitlinks send git
            // into directories the model made). A name that does not exist yet (a new
            // `commondir`) cannot be protected while the directory is writable, so the whole of
            // `.git` (a directory, or the pointer file of a worktree or submodule) is read-only,
            // as Codex CLI makes it: the agent reads history but does not stage or commit.
            (".git/**", FileAccess::ReadOnly),
            // Other agents' configuration, which nop or those agents read later and act on
            // outside any sandbox: MCP servers they would start (`.mcp.json`, Codex's
            // `config.toml`), permission rules and hooks (Claude Code's settings).
            (".mcp.json", FileAccess::ReadOnly),
            (".claude/settings.json", FileAccess::ReadOnly),
            (".claude/settings.local.json", FileAccess::ReadOnly),
            (".codex/**", FileAccess::ReadOnly),
        ]
        .into_iter()
        .filter_map(|(p, a)| FileRule::new(p, a, Source::Floor).ok())
        .collect()
    })
}

/// The floor's part that depends on the user and the repository: the record of what the user
/// trusts (`crate::trust`) hidden wherever it is (HOME may be the repository, XDG_STATE_HOME a
/// temp directory), and what trust covers read-only, so that a trusted hook script, server or
/// `core.hooksPath` hook cannot be rewritten during a run. Absolute rules: they hold for a
/// subagent in another root too.
fn trust_floor(root: &Path) -> Vec<FileRule> {
    let mut rules = Vec::new();
    let mut add = |pattern: String, access: FileAccess| {
        if let Ok(rule) = FileRule::new(&pattern, access, Source::Floor) {
            rules.push(rule);
        }
    };
    if let Some(store) = crate::trust::process_store() {
        // Made now if need be: a directory that does not exist cannot be masked, and the agent
        // could make it with a record of its own.
        let _ = store.ensure();
        let dir = std::fs::canonicalize(store.dir()).unwrap_or_else(|_| store.dir().to_path_buf());
        add(format!("{}/**", glob_escape(&dir)), FileAccess::Deny);
    }
    let (files, dirs) = crate::trust::covered(root, &crate::trust::process_env());
    for file in files {
        add(glob_escape(&file), FileAccess::ReadOnly);
    }
    for dir in dirs {
        add(format!("{}/**", glob_escape(&dir)), FileAccess::ReadOnly);
    }
    rules
}

/// `path` as a glob that matches it alone.
pub(super) fn glob_escape(path: &Path) -> String {
    let mut out = String::new();
    for c in path.to_string_lossy().chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '{' | '}' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The git directories outside the root that its `.git` names: the gitdir of a worktree or
/// submodule checkout (`.git` is a file), and the common directory it or `.git/commondir` points
/// at; canonical. Read-only to the agent like `.git` itself.
pub fn external_git_dirs(root: &Path) -> Vec<PathBuf> {
    let Some(repo) = crate::gitdir::at(root) else {
        return Vec::new();
    };
    let mut dirs = vec![repo.gitdir, repo.common];
    dirs.retain(|d| !d.starts_with(root.join(".git")));
    dirs.sort();
    dirs.dedup();
    dirs
}

/// What git follows from the root into other git directories, read-only to the agent: the git
/// directories a `.git` file names ([`external_git_dirs`]) and, for each submodule (a gitlink in
/// the index), its `.git` in the working tree, or its directory while it has none (an
/// uninitialised submodule: a `.git` made there would be followed). Canonical, existing paths.
fn git_protected(root: &Path) -> Vec<PathBuf> {
    let mut paths = external_git_dirs(root);
    let Some(repo) = crate::gitdir::find(root) else {
        return paths;
    };
    let top = repo.top;
    for link in super::gitlinks::gitlinks(&repo.gitdir.join("index")) {
        let dir = top.join(&link);
        let dot_git = dir.join(".git");
        let target = if dot_git.symlink_metadata().is_ok() {
            dot_git
        } else {
            dir
        };
        // Never the root or a directory above it: protecting that would stop all work.
        if let Ok(target) = std::fs::canonicalize(&target)
            && target.starts_with(root)
            && target != root
        {
            paths.push(target);
        }
    }
    paths.sort();
    paths.dedup();
    paths
}

/// The effective permissions of a run: one rule set, or the intersection of a subagent's with
/// its parents' (every set must allow; the strictest answer wins).
#[derive(Debug, Clone)]
pub struct Policy {
    root: PathBuf,
    sets: Vec<RuleSet>,
    /// [`git_protected`] of the root: read-only whatever the rules say.
    git_dirs: Vec<PathBuf>,
    /// Whether the user's skill folders outside the root are readable where no rule names them
    /// (`crate::skills::readable_dirs`, found the first time a path outside the root is read).
    /// Never written through this.
    user_skills: bool,
    skill_dirs: std::sync::OnceLock<Vec<PathBuf>>,
    /// The run's own narrowing of the tools (`--allowedTools`, `--disallowedTools`).
    run_tools: crate::config::RunTools,
}

impl Policy {
    pub fn new(root: PathBuf, sets: Vec<RuleSet>) -> Policy {
        let git_dirs = git_protected(&root);
        let trusted = trust_floor(&root);
        let sets = sets
            .into_iter()
            .map(|mut set| {
                set.rules = trusted.iter().cloned().chain(set.rules).collect();
                set
            })
            .collect();
        Policy {
            root,
            sets,
            git_dirs,
            user_skills: false,
            skill_dirs: std::sync::OnceLock::new(),
            run_tools: crate::config::RunTools::default(),
        }
    }

    /// This policy narrowed by a run's own tool lists: a tool they leave out is denied.
    pub fn with_run_tools(mut self, tools: &crate::config::RunTools) -> Policy {
        self.run_tools = tools.clone();
        self
    }

    /// This policy with the user's skill folders readable (canonical paths outside the root,
    /// [`crate::skills::readable_dirs`]): a path beneath one that no rule of a set names may be
    /// read, not written. A symbolic link inside such a folder is judged where it leads.
    pub fn with_user_skills(mut self) -> Policy {
        self.user_skills = true;
        self
    }

    /// The user's skill folders this policy lets the file tools read.
    pub fn skill_dirs(&self) -> &[PathBuf] {
        if !self.user_skills {
            return &[];
        }
        self.skill_dirs
            .get_or_init(|| crate::skills::readable_dirs(&self.root))
    }

    /// What git follows from the root into other git directories (read-only): the git
    /// directories the root's `.git` file names, each submodule's `.git`.
    pub fn git_dirs(&self) -> &[PathBuf] {
        &self.git_dirs
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn sets(&self) -> &[RuleSet] {
        &self.sets
    }

    /// This policy (a subagent's in a root of its own: an isolated worktree) limited by its
    /// caller's rules wherever they reach: each `deny`, `read-only` and `ask` rule of `caller`,
    /// the floor's included, anchored at the caller's root as an absolute rule and put first.
    /// So the subagent's shell and file tools meet, at the caller's repository (by its path
    /// beside the worktree), what the caller's agent would meet there: its secrets hidden, its
    /// `.nop/.permissions` and checkpoint store hidden, its `.git` read-only.
    pub fn confined_by(mut self, caller: &Policy) -> Policy {
        if caller.root == self.root {
            return self.narrowed_by(caller);
        }
        let anchored = caller.anchored_narrowing();
        for set in &mut self.sets {
            set.rules = anchored
                .iter()
                .cloned()
                .chain(set.rules.drain(..))
                .collect();
        }
        for dir in &caller.git_dirs {
            if !self.git_dirs.contains(dir) {
                self.git_dirs.push(dir.clone());
            }
        }
        self
    }

    /// The rules of this policy that narrow (deny, read-only, ask), the floor's first, as
    /// absolute rules anchored at its root.
    fn anchored_narrowing(&self) -> Vec<FileRule> {
        let root = glob_escape(&self.root);
        let rules = floor()
            .iter()
            .chain(self.sets.iter().flat_map(|s| s.rules.iter()))
            .filter(|r| r.access != FileAccess::Read);
        let mut out: Vec<FileRule> = Vec::new();
        for rule in rules {
            let pattern = if rule.is_absolute() {
                rule.pattern.clone()
            } else {
                format!("{root}/{}", rule.pattern)
            };
            if out
                .iter()
                .any(|r| r.pattern == pattern && r.access == rule.access)
            {
                continue;
            }
            if let Ok(anchored) = FileRule::new(&pattern, rule.access, rule.source.clone()) {
                out.push(anchored);
            }
        }
        out
    }

    /// This policy limited by `parent`'s: a subagent can never do what its caller may not.
    pub fn narrowed_by(mut self, parent: &Policy) -> Policy {
        self.sets.extend(parent.sets.iter().cloned());
        self
    }

    fn strictest(&self, decide: impl Fn(&RuleSet) -> Decision) -> Decision {
        self.sets
            .iter()
            .map(decide)
            .max_by_key(Decision::rank)
            .unwrap_or(Decision::Deny {
                reason: "no permission rules".into(),
                source: None,
            })
    }

    /// May this agent call `tool`? Denied first, then allowed (seed 002 §5.2).
    pub fn check_tool(&self, tool: &str) -> Decision {
        let decision = self.strictest(|set| set.check_tool(tool));
        if matches!(decision, Decision::Deny { .. }) {
            return decision;
        }
        match self.run_tools.refuses(tool) {
            Some(reason) => Decision::Deny {
                reason,
                source: None,
            },
            None => decision,
        }
    }

    /// Normalises `path` (relative to the root, or absolute; `.`/`..` and symbolic links
    /// resolved, for paths that do not exist yet through their nearest existing parent) and
    /// decides. Returns the resolved path with the decision.
    pub fn check_path(&self, path: &str, access: Access) -> (Option<PathBuf>, Decision) {
        match resolve(&self.root, path) {
            Ok(resolved) => {
                let decision = self.check_resolved(&resolved, access);
                (Some(resolved), decision)
            }
            Err(reason) => (
                None,
                Decision::Deny {
                    reason: format!("`{path}`: {reason}"),
                    source: None,
                },
            ),
        }
    }

    /// Whether a rule of some set (the floor included) names `resolved` (canonical) and denies
    /// reading it: what no copy of the tree nop keeps (file checkpoints) may hold. The
    /// catch-all `**` does not count (it is how an advisor's or a narrow agent's rules say
    /// "nothing else", not that a file is secret), nor does a path no rule covers.
    pub fn denied_to_some_agent(&self, resolved: &Path) -> bool {
        let relative = resolved
            .strip_prefix(&self.root)
            .ok()
            .map(|r| r.to_string_lossy().into_owned());
        let absolute = resolved.to_string_lossy();
        self.sets.iter().any(|set| {
            matches!(
                set.check_path(relative.as_deref(), &absolute, Access::Read, |r| {
                    r.pattern != "**"
                }),
                Decision::Deny {
                    source: Some(_),
                    ..
                }
            )
        })
    }

    /// Decides for a path that is already canonical.
    pub fn check_resolved(&self, resolved: &Path, access: Access) -> Decision {
        self.check_resolved_by(resolved, access, |_| true)
    }

    /// Decides for a canonical path with only the rules `only` keeps (the floor included).
    pub fn check_resolved_by(
        &self,
        resolved: &Path,
        access: Access,
        only: impl Fn(&FileRule) -> bool + Copy,
    ) -> Decision {
        let relative = resolved
            .strip_prefix(&self.root)
            .ok()
            .map(|r| r.to_string_lossy().into_owned());
        let absolute = resolved.to_string_lossy();
        let skill = relative.is_none()
            && access == Access::Read
            && self.skill_dirs().iter().any(|d| resolved.starts_with(d));
        let decision = self.strictest(|set| {
            match set.check_path(relative.as_deref(), &absolute, access, only) {
                // No rule names it: a user skill's own files are readable like a repository's.
                Decision::Deny { source: None, .. } if skill => Decision::Allow {
                    source: Source::Skill,
                },
                decision => decision,
            }
        });
        match self.git_dirs.iter().find(|d| resolved.starts_with(d)) {
            Some(dir) if access == Access::Write && decision.is_allowed() => Decision::Deny {
                reason: format!(
                    "{} is git metadata the repository points to (a worktree's or submodule's): \
                     git reads it later, outside any sandbox",
                    dir.strip_prefix(&self.root).unwrap_or(dir).display()
                ),
                source: Some(Source::Floor),
            },
            _ => decision,
        }
    }
}

/// Why a permission rule's pattern is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    #[error("the pattern is empty")]
    Empty,
    #[error("pattern `{0}`: HOME is not set")]
    NoHome(String),
    #[error("{what} `{pattern}`: {message}")]
    Glob {
        what: &'static str,
        pattern: String,
        message: String,
    },
}

/// Why a path cannot be resolved ([`resolve`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("the path is empty")]
    Empty,
    #[error("the path contains a NUL byte")]
    Nul,
    #[error("cannot resolve {}: {}", .0.display(), .1)]
    Unreadable(PathBuf, String),
    #[error("{} is a symbolic link to a missing target", .0.display())]
    DanglingLink(PathBuf),
    #[error("`..` after a directory that does not exist")]
    ParentOfMissing,
    #[error("no part of it exists")]
    Nothing,
}

/// The canonical form of `path`: its longest existing prefix canonicalised (symbolic links and
/// `..` resolved by the kernel) with the rest, which does not exist yet, appended. A `..` in that
/// rest is refused (it would be resolved against a directory that is not there).
pub fn resolve(root: &Path, path: &str) -> Result<PathBuf, PathError> {
    if path.trim().is_empty() {
        return Err(PathError::Empty);
    }
    if path.contains('\0') {
        return Err(PathError::Nul);
    }
    // `~` is the home directory, as in a shell and in Claude Code's tools (not a directory
    // named `~` in the repository).
    let in_home = if path == "~" {
        Some("")
    } else {
        path.strip_prefix("~/")
    };
    let joined = match (in_home, crate::skills::home()) {
        (Some(rest), Some(home)) => home.join(rest),
        _ if Path::new(path).is_absolute() => PathBuf::from(path),
        _ => root.join(path),
    };
    let mut existing = joined.clone();
    let mut rest = Vec::new();
    loop {
        match std::fs::canonicalize(&existing) {
            Ok(canonical) => {
                let mut out = canonical;
                for part in rest.iter().rev() {
                    out.push(part);
                }
                return Ok(out);
            }
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(PathError::Unreadable(existing, e.to_string()));
            }
            Err(_) => match existing.components().next_back() {
                Some(Component::Normal(name)) => {
                    // A dangling symbolic link: where it points is not a path we checked.
                    if std::fs::symlink_metadata(&existing)
                        .is_ok_and(|m| m.file_type().is_symlink())
                    {
                        return Err(PathError::DanglingLink(existing));
                    }
                    rest.push(name.to_os_string());
                    existing.pop();
                }
                Some(Component::CurDir) => {
                    existing.pop();
                }
                Some(Component::ParentDir) => {
                    return Err(PathError::ParentOfMissing);
                }
                _ => return Err(PathError::Nothing),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(pattern: &str) -> FileRule {
        FileRule::new(pattern, FileAccess::Read, Source::Floor).unwrap()
    }

    #[test]
    fn patterns_are_told_apart_and_home_is_expanded() {
        assert!(rule("**").is_subtree() && !rule("**").is_glob());
        assert!(rule("src/**").is_subtree());
        assert!(rule("./Cargo.lock").is_literal());
        assert_eq!(rule("./Cargo.lock").pattern, "Cargo.lock");
        assert!(rule("**/*.pem").is_glob());
        assert!(rule("src/*.rs").is_glob());
        assert_eq!(rule("src/*.rs").literal_prefix(), "src");
        if let Some(home) = std::env::var_os("HOME").filter(|h| Path::new(h).is_absolute()) {
            let r = rule("~/.npm/**");
            assert!(r.is_absolute() && r.is_subtree());
            assert_eq!(
                r.literal_prefix(),
                format!("{}/.npm", Path::new(&home).display())
            );
        }
    }

    #[test]
    fn the_floor_keeps_all_of_git_read_only() {
        let set = RuleSet {
            rules: vec![rule("**")],
            ..RuleSet::empty("coder")
        };
        let policy = Policy::new(PathBuf::from("/repo"), vec![set]);
        for path in [
            "/repo/.git/hooks/pre-commit",
            "/repo/.git/config",
            "/repo/.git/modules/sub/hooks/post-checkout",
            "/repo/.git/modules/sub/config",
            "/repo/.git/commondir",
            "/repo/.git/index",
            "/repo/.git/worktrees/wt/gitdir",
            "/repo/.git",
        ] {
            let write = policy.check_resolved(Path::new(path), Access::Write);
            assert!(
                matches!(
                    &write,
                    Decision::Deny {
                        source: Some(Source::Floor),
                        ..
                    }
                ),
                "{path}: {write:?}"
            );
            assert!(
                policy
                    .check_resolved(Path::new(path), Access::Read)
                    .is_allowed()
            );
        }
        assert!(
            policy
                .check_resolved(Path::new("/repo/.gitignore"), Access::Write)
                .is_allowed()
        );
        assert!(
            !policy
                .check_resolved(Path::new("/repo/.nop/checkpoints/objects/x"), Access::Read)
                .is_allowed()
        );
    }
}
