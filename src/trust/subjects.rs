//! The subjects a repository holds, found by reading files only (never by running anything of
//! the repository's): its `.nop/` workspace, Claude Code's hooks and permission rules, the
//! scripts nop's hooks name, MCP servers and plugins, and `core.hooksPath` in the work tree.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{Base, Facet, Kind, Subject, named};
use crate::config::servers::{self, Spec};

/// The most of a settings or configuration file read.
const MAX_SETTINGS: u64 = 1 << 20;
/// Permission files or git hooks looked at in one directory.
const MAX_ENTRIES: usize = 200;

/// Every subject of the repository at `root` (canonical), `env` finding the user's files.
pub fn all(root: &Path, base: &Base, env: &BTreeMap<String, String>) -> Vec<Subject> {
    let mut out = Vec::new();
    out.extend(workspace(root, base));
    out.extend(claude_hooks(root, base, env));
    out.extend(nop_hook_scripts(root, base, env));
    out.extend(servers(root, base, env));
    out.extend(git_hooks(base));
    out.extend(claude_permissions(root, base));
    out.retain(Subject::matters);
    out
}

/// The `.nop/` of `dir` as a workspace: what its config.yml and agents.yml set that widens
/// (`crate::config::widens`), and its permission files. `None` when it holds none of them. A
/// `.nop/` below the repository's top (`nested`) is a subject as soon as it has a config.yml:
/// becoming the workspace is itself something the user decides (it would take the
/// repository's rules away from everything under it).
pub fn workspace(dir: &Path, base: &Base) -> Option<Subject> {
    let nop = dir.join(".nop");
    let config = nop.join("config.yml");
    let agents = nop.join("agents.yml");
    let nested = dir != base.top && config.is_file();
    let mut facets = vec![
        Facet::part(
            base,
            &config,
            "workspace",
            nested.then(|| format!("{}/ is the workspace of what is under it", base.key(dir))),
        ),
        Facet::part(
            base,
            &config,
            "settings",
            text_of(&config).map(|t| crate::config::widening_text(&t)),
        ),
        Facet::part(
            base,
            &agents,
            "settings",
            text_of(&agents).map(|t| agents_widening(&agents, &t)),
        ),
    ];
    let mut permission_files: Vec<PathBuf> = std::fs::read_dir(nop.join(".permissions"))
        .into_iter()
        .flatten()
        .flatten()
        .take(MAX_ENTRIES)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "yml"))
        .collect();
    permission_files.sort();
    facets.extend(permission_files.iter().map(|p| Facet::file(base, p)));
    let subject = Subject {
        kind: Kind::Workspace,
        name: format!("the workspace {}/", base.key(&nop)),
        facets,
    };
    subject.matters().then_some(subject)
}

fn agents_widening(path: &Path, text: &str) -> String {
    match crate::config::AgentsFile::parse(path, text) {
        Ok(file) => file
            .agents
            .iter()
            .map(|a| {
                crate::config::widening_overrides(&a.config)
                    .lines()
                    .map(|l| format!("{}.{l}\n", a.name))
                    .collect::<String>()
            })
            .collect(),
        Err(_) => text.to_string(),
    }
}

/// A settings or configuration file's text; `None` when there is none (or it cannot be read:
/// what cannot be read is not used either).
fn text_of(path: &Path) -> Option<String> {
    crate::capped_file::read(path, MAX_SETTINGS)
        .ok()
        .flatten()
        .and_then(|b| String::from_utf8(b).ok())
}

fn json_of(path: &Path) -> Option<Value> {
    serde_json::from_str(&text_of(path)?).ok()
}

/// The `hooks` of a Claude Code settings file inside the repository, as a facet.
pub fn claude_hooks_facet(base: &Base, path: &Path) -> Option<Facet> {
    // Reached through a link (HOME a link to the repository) it is still the repository's.
    let real = path
        .parent()
        .and_then(|d| std::fs::canonicalize(d).ok())
        .zip(path.file_name())
        .map(|(d, n)| d.join(n))
        .unwrap_or_else(|| path.to_path_buf());
    let path = real.as_path();
    if !path.starts_with(&base.top) {
        return None;
    }
    let text = text_of(path).map(|t| match serde_json::from_str::<Value>(&t) {
        Ok(v) => v
            .get("hooks")
            .map(|h| serde_json::to_string_pretty(h).unwrap_or_default())
            .unwrap_or_default(),
        // What does not parse is not used; as a facet it is its text.
        Err(_) => t,
    });
    Some(Facet::part(base, path, "hooks", text))
}

/// The commands of a Claude Code settings file's `hooks`.
fn claude_commands(settings: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for groups in settings
        .get("hooks")
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|m| m.values())
    {
        for group in groups.as_array().into_iter().flatten() {
            for hook in group
                .get("hooks")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(command) = hook.get("command").and_then(Value::as_str) {
                    out.push(command.to_string());
                }
            }
        }
    }
    out
}

/// The hooks of each Claude Code settings file: the project's two (their `hooks` and the files
/// their commands name) and the user's (the files in the repository its commands name).
fn claude_hooks(root: &Path, base: &Base, env: &BTreeMap<String, String>) -> Vec<Subject> {
    let mut out = Vec::new();
    let mut seen: Vec<PathBuf> = Vec::new();
    let files = crate::config::claude_settings_files(root, env);
    // The project's files first: when HOME is the repository, the user's file is one of them.
    for path in files.iter().rev() {
        let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
        if seen.contains(&real) {
            continue;
        }
        seen.push(real.clone());
        let Some(settings) = json_of(path) else {
            // Present but unparsable: the hooks of it are not run; its text is the facet.
            if let Some(facet) = claude_hooks_facet(base, path).filter(|f| f.content.is_some()) {
                out.push(Subject {
                    kind: Kind::Hooks,
                    name: format!("hooks of {}", facet.file_key()),
                    facets: vec![facet],
                });
            }
            continue;
        };
        let mut facets: Vec<Facet> = claude_hooks_facet(base, path).into_iter().collect();
        for command in claude_commands(&settings) {
            facets.extend(named_files(base, &in_command(&command, root)));
        }
        dedup(&mut facets);
        out.push(Subject {
            kind: Kind::Hooks,
            name: format!("hooks of {}", shown(base, path, env)),
            facets,
        });
    }
    out.reverse();
    out
}

/// The scripts nop's own hooks name (in the user's config.yml, the repository's, agents.yml):
/// their settings are trusted with the workspace, the files they run here.
fn nop_hook_scripts(root: &Path, base: &Base, env: &BTreeMap<String, String>) -> Option<Subject> {
    let mut commands = Vec::new();
    if let Some(text) = crate::config::user_config_path(env).and_then(|p| text_of(&p)) {
        commands.extend(crate::config::hook_commands(&text));
    }
    if let Some(text) = text_of(&root.join(".nop/config.yml")) {
        commands.extend(crate::config::hook_commands(&text));
    }
    let agents = root.join(".nop/agents.yml");
    if let Some(file) =
        text_of(&agents).and_then(|t| crate::config::AgentsFile::parse(&agents, &t).ok())
    {
        for agent in &file.agents {
            commands.extend(crate::config::hook_commands_in_overrides(&agent.config));
        }
    }
    let mut facets = Vec::new();
    for command in &commands {
        facets.extend(named_files(base, &in_command(command, root)));
    }
    dedup(&mut facets);
    let subject = Subject {
        kind: Kind::Hooks,
        name: "scripts nop's hooks run".to_string(),
        facets,
    };
    subject.matters().then_some(subject)
}

/// The MCP servers nop would start or connect to: those the repository declares (each server
/// of `.mcp.json`, each `.nop/plugins/<name>/config.yml`) and the files any server's command
/// names in the repository.
fn servers(root: &Path, base: &Base, env: &BTreeMap<String, String>) -> Vec<Subject> {
    server_subjects(root, base, env)
        .into_iter()
        .map(|(_, s)| s)
        .collect()
}

/// [`servers`], each with the name nop knows the server by.
pub fn server_subjects(
    root: &Path,
    base: &Base,
    env: &BTreeMap<String, String>,
) -> Vec<(String, Subject)> {
    let (found, _) = servers::discover(root, env);
    let mcp_json = root.join(".mcp.json");
    let raw = json_of(&mcp_json);
    let mut out = Vec::new();
    for server in found {
        let inside = server.source.starts_with(&base.top);
        let mut facets = Vec::new();
        let (kind, name) = match &server.spec {
            Ok(Spec::Dir(dir)) => {
                let config = dir.join("config.yml");
                facets.push(Facet::file(base, &config));
                let command = text_of(&config).and_then(|t| plugin_mcp(&t));
                if let Some(mcp) = command {
                    facets.extend(named_files(base, &server_files(&mcp, root)));
                }
                (
                    Kind::Plugin,
                    format!("plugin `{}` ({})", server.name, shown(base, dir, env)),
                )
            }
            Ok(Spec::Mcp(config)) => {
                if inside && server.source == mcp_json {
                    let entry = raw
                        .as_ref()
                        .and_then(|v| v.get("mcpServers"))
                        .and_then(|s| s.get(&server.name))
                        .map(|e| serde_json::to_string_pretty(e).unwrap_or_default());
                    facets.push(Facet::part(
                        base,
                        &mcp_json,
                        &format!("mcpServers.{}", server.name),
                        entry,
                    ));
                }
                facets.extend(named_files(base, &server_files(config, root)));
                (
                    Kind::McpServer,
                    format!(
                        "MCP server `{}` of {}",
                        server.name,
                        shown(base, &server.source, env)
                    ),
                )
            }
            Err(_) if inside => {
                // A declaration nop cannot use starts nothing; its text still counts once fixed.
                facets.push(Facet::file(base, &server.source));
                (
                    Kind::McpServer,
                    format!(
                        "MCP server `{}` of {}",
                        server.name,
                        shown(base, &server.source, env)
                    ),
                )
            }
            Err(_) => continue,
        };
        dedup(&mut facets);
        out.push((server.name.clone(), Subject { kind, name, facets }));
    }
    out
}

/// The `mcp:` section of a plugin's config.yml, read leniently (for the files it names).
fn plugin_mcp(text: &str) -> Option<crate::config::McpConfig> {
    #[derive(serde::Deserialize)]
    struct Plugin {
        #[serde(default)]
        mcp: Option<crate::config::McpConfig>,
    }
    serde_saphyr::from_str::<Plugin>(text).ok()?.mcp
}

/// The files a server's program and arguments name, relative to its `cwd` (or the root).
fn server_files(config: &crate::config::McpConfig, root: &Path) -> Vec<PathBuf> {
    if config.url.is_some() || config.command.is_empty() {
        return Vec::new();
    }
    let cwd = config
        .cwd
        .as_ref()
        .map_or_else(|| root.to_path_buf(), |c| named::normal(&root.join(c)));
    let vars = project_vars(root);
    let words: Vec<String> = std::iter::once(&config.command)
        .chain(config.args.iter())
        .filter_map(|w| {
            let split = named::split(w, &vars);
            // One argument is one word whatever it holds: only its variables are expanded.
            (split.len() == 1 && split[0].len() == 1).then(|| split[0][0].clone())
        })
        .collect();
    named::files_of(&words, &cwd)
}

fn project_vars(root: &Path) -> [(&'static str, &Path); 2] {
    [("CLAUDE_PROJECT_DIR", root), ("NOP_PROJECT_DIR", root)]
}

/// The files a hook command line run in `root` names.
pub fn in_command(command: &str, root: &Path) -> Vec<PathBuf> {
    named::in_command_line(command, root, &project_vars(root))
}

/// Facets of the files of `paths` the agent could write: in the repository, or in a temp
/// directory. (A file elsewhere is the user's, out of the agent's reach.)
pub fn named_files(base: &Base, paths: &[PathBuf]) -> Vec<Facet> {
    paths
        .iter()
        .filter_map(|p| reachable(base, p))
        .map(|p| Facet::file(base, &p))
        .collect()
}

/// `path` (absolute, normal) where the agent could write it, its directory resolved; `None`
/// elsewhere.
fn reachable(base: &Base, path: &Path) -> Option<PathBuf> {
    let parent = path.parent()?;
    let name = path.file_name()?;
    let dir = std::fs::canonicalize(parent).unwrap_or_else(|_| parent.to_path_buf());
    let resolved = dir.join(name);
    let temp = [Path::new("/tmp"), Path::new("/dev/shm")];
    let tmpdir = crate::trust::process_env().get("TMPDIR").map(PathBuf::from);
    let in_temp = temp.iter().any(|t| resolved.starts_with(t))
        || tmpdir.is_some_and(|t| t.is_absolute() && resolved.starts_with(t));
    (resolved.starts_with(&base.top) || in_temp).then_some(resolved)
}

/// `core.hooksPath` when it lies in the work tree (husky's `.husky/`): the hook files there,
/// which your git runs on commit. For husky's own layout (`.husky/_`, whose stubs run
/// `.husky/<hook>`), the directory above too.
fn git_hooks(base: &Base) -> Option<Subject> {
    let dirs = hooks_dirs(base);
    let mut facets = Vec::new();
    for dir in &dirs {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .take(MAX_ENTRIES)
            .map(|e| e.path())
            .filter(|p| p.symlink_metadata().is_ok_and(|m| !m.is_dir()))
            .collect();
        files.sort();
        facets.extend(files.iter().map(|f| Facet::file(base, f)));
    }
    let first = dirs.first()?;
    let subject = Subject {
        kind: Kind::GitHooks,
        name: format!("git hooks in {}/ (core.hooksPath)", base.key(first)),
        facets,
    };
    subject.matters().then_some(subject)
}

/// The directories of `core.hooksPath` in the work tree (read from git's files, never by
/// running git), canonical; husky's `_` brings its parent.
pub fn hooks_dirs(base: &Base) -> Vec<PathBuf> {
    let Some(repo) = crate::gitdir::at(&base.top) else {
        return Vec::new();
    };
    let mut value = None;
    for config in [
        repo.common.join("config"),
        repo.gitdir.join("config.worktree"),
    ] {
        if let Some(text) = text_of(&config)
            && let Some(v) = core_hooks_path(&text)
        {
            value = Some(v);
        }
    }
    let Some(value) = value else {
        return Vec::new();
    };
    let path = named::normal(&base.top.join(value));
    let Ok(dir) = std::fs::canonicalize(&path) else {
        return Vec::new();
    };
    if !dir.starts_with(&base.top) || dir == base.top || !dir.is_dir() {
        return Vec::new();
    }
    let mut dirs = vec![dir.clone()];
    if dir.file_name().is_some_and(|n| n == "_")
        && let Some(parent) = dir.parent().filter(|p| *p != base.top)
    {
        dirs.insert(0, parent.to_path_buf());
    }
    dirs
}

/// `core.hooksPath` of a git configuration file's text (the last one set).
fn core_hooks_path(text: &str) -> Option<String> {
    let mut in_core = false;
    let mut found = None;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_core = line
                .trim_start_matches('[')
                .trim_end_matches(']')
                .trim()
                .eq_ignore_ascii_case("core");
            continue;
        }
        if !in_core {
            continue;
        }
        if let Some((key, value)) = line.split_once('=')
            && key.trim().eq_ignore_ascii_case("hookspath")
        {
            let value = value.trim();
            let value = value.split(['#', ';']).next().unwrap_or(value).trim();
            found = Some(value.trim_matches('"').to_string());
        }
    }
    found
}

/// The permission rules of the project's Claude Code settings files.
pub fn claude_permissions(root: &Path, base: &Base) -> Vec<Subject> {
    crate::config::claude_project_files(root)
        .into_iter()
        .filter_map(|path| permission_rules(base, &path))
        .collect()
}

/// The permission rules of the settings file at `path` (absolute) as a subject; `None` when
/// there is no such file. A file outside the repository is the user's: no facet, trusted.
pub fn permission_rules(base: &Base, path: &Path) -> Option<Subject> {
    let text = text_of(path)?;
    let rules = match serde_json::from_str::<Value>(&text) {
        Ok(v) => v
            .get("permissions")
            .map(|p| serde_json::to_string_pretty(p).unwrap_or_default()),
        Err(_) => Some(text),
    };
    let facet = Facet::part(base, path, "permissions", rules);
    let name = format!("permission rules of {}", facet.file_key());
    let facets = if path.starts_with(&base.top) {
        vec![facet]
    } else {
        Vec::new()
    };
    Some(Subject {
        kind: Kind::PermissionRules,
        name,
        facets,
    })
}

/// What nop's floor keeps read-only to the agent so that what trust covers cannot change during
/// a run: every file in the repository (or a temp directory) a hook or server names (and a link
/// there, as itself), and the `core.hooksPath` directories in the work tree. Existing paths;
/// the files first, then the directories. What the configuration names is read again only when
/// one of the files that declare it changed (this runs for every tool call).
pub fn covered(root: &Path, env: &BTreeMap<String, String>) -> (Vec<PathBuf>, Vec<PathBuf>) {
    type Cached = (Vec<Stamp>, Vec<PathBuf>, Vec<PathBuf>);
    static CACHE: std::sync::Mutex<Option<(PathBuf, Cached)>> = std::sync::Mutex::new(None);
    let stamps = declarations(root, env);
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    let (named, dirs) = match cache.as_ref() {
        Some((r, (s, named, dirs))) if r == root && *s == stamps => (named.clone(), dirs.clone()),
        _ => {
            let (named, dirs) = named_by_configuration(root, env);
            *cache = Some((root.to_path_buf(), (stamps, named.clone(), dirs.clone())));
            (named, dirs)
        }
    };
    drop(cache);
    let mut files: Vec<PathBuf> = Vec::new();
    for path in named {
        if let Ok(real) = std::fs::canonicalize(&path)
            && real.is_file()
            && !files.contains(&real)
        {
            files.push(real);
        }
        if path
            .symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink())
            && !files.contains(&path)
        {
            files.push(path);
        }
    }
    files.sort();
    (files, dirs)
}

/// The files hooks and servers name where the agent could write them (existing or not), and
/// the `core.hooksPath` directories.
fn named_by_configuration(
    root: &Path,
    env: &BTreeMap<String, String>,
) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let base = Base::of(root);
    let mut named: Vec<PathBuf> = Vec::new();
    let subjects = [
        claude_hooks(root, &base, env),
        nop_hook_scripts(root, &base, env).into_iter().collect(),
        servers(root, &base, env),
    ];
    for facet in subjects.iter().flatten().flat_map(|s| s.facets.iter()) {
        if facet.key.contains('#') {
            continue;
        }
        let path = if Path::new(&facet.key).is_absolute() {
            PathBuf::from(&facet.key)
        } else {
            base.top.join(&facet.key)
        };
        if !named.contains(&path) {
            named.push(path);
        }
    }
    (named, hooks_dirs(&base))
}

/// A file's identity and state, to notice that it changed.
pub type Stamp = (PathBuf, Option<(i64, i64, u64, u64)>);

fn stamp(path: PathBuf) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    let state = std::fs::metadata(&path)
        .ok()
        .map(|m| (m.mtime(), m.mtime_nsec(), m.ino(), m.size()));
    (path, state)
}

/// What [`workspace`] of `dir` is read from, and the record (`record`), each with its stamp.
pub fn workspace_stamps(dir: &Path, record: Option<&Path>) -> Vec<Stamp> {
    let nop = dir.join(".nop");
    let mut paths = vec![
        nop.join("config.yml"),
        nop.join("agents.yml"),
        nop.join(".permissions"),
    ];
    paths.extend(
        std::fs::read_dir(nop.join(".permissions"))
            .into_iter()
            .flatten()
            .flatten()
            .take(MAX_ENTRIES)
            .map(|e| e.path()),
    );
    paths.extend(record.map(Path::to_path_buf));
    // The repository's identity: a `.git` that appears or moves changes the record's base.
    paths.push(dir.join(".git"));
    paths.into_iter().map(stamp).collect()
}

/// The files that declare hooks, servers and `core.hooksPath`, each with its stamp.
fn declarations(root: &Path, env: &BTreeMap<String, String>) -> Vec<Stamp> {
    let mut paths: Vec<PathBuf> = crate::config::claude_settings_files(root, env);
    paths.extend([
        root.join(".mcp.json"),
        root.join(".nop/config.yml"),
        root.join(".nop/agents.yml"),
        root.join(".nop/plugins"),
    ]);
    let home = env
        .get("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute());
    if let Some(home) = &home {
        paths.push(home.join(".claude.json"));
        paths.push(home.join(".codex/config.toml"));
    }
    if let Some(codex) = env.get("CODEX_HOME") {
        paths.push(Path::new(codex).join("config.toml"));
    }
    let mut plugin_dirs = vec![root.join(".nop/plugins")];
    if let Some(user) = crate::config::user_config_path(env) {
        if let Some(dir) = user.parent() {
            paths.push(dir.join("plugins"));
            plugin_dirs.push(dir.join("plugins"));
        }
        paths.push(user);
    }
    for dir in plugin_dirs {
        for entry in std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .take(MAX_ENTRIES)
        {
            paths.push(entry.path().join("config.yml"));
        }
    }
    if let Some(repo) = crate::gitdir::find(root) {
        paths.push(repo.common.join("config"));
        paths.push(repo.gitdir.join("config.worktree"));
    }
    paths.into_iter().map(stamp).collect()
}

fn dedup(facets: &mut Vec<Facet>) {
    let mut seen: Vec<String> = Vec::new();
    facets.retain(|f| {
        if seen.contains(&f.key) {
            false
        } else {
            seen.push(f.key.clone());
            true
        }
    });
}

/// `path` as the user reads it: relative inside the repository, `~/…` in HOME.
fn shown(base: &Base, path: &Path, env: &BTreeMap<String, String>) -> String {
    if let Ok(rel) = path.strip_prefix(&base.top) {
        return rel.display().to_string();
    }
    if let Some(rel) = env.get("HOME").and_then(|h| path.strip_prefix(h).ok()) {
        return format!("~/{}", rel.display());
    }
    path.display().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_hooks_path_is_read_from_git_config_text() {
        let text = "[core]\n\trepositoryformatversion = 0\n[Core]\n\thooksPath = \".husky/_\" # husky\n[user]\n\thooksPath = x\n";
        assert_eq!(core_hooks_path(text).as_deref(), Some(".husky/_"));
        assert_eq!(core_hooks_path("[core]\nbare = false\n"), None);
    }
}
