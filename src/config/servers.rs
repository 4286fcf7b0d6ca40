//! Where plugins are declared, in order of precedence (the first to name a plugin wins):
//!
//! 1. `.nop/plugins/<name>/config.yml` in the repository;
//! 2. the repository's `.mcp.json` (Claude Code's project servers);
//! 3. the user's `~/.claude.json`, `projects["<repository root>"].mcpServers` (Claude Code's
//!    local scope);
//! 4. the user's `~/.config/nop/plugins/<name>/config.yml` (`$XDG_CONFIG_HOME/nop/plugins`);
//! 5. the user's `~/.claude.json`, top-level `mcpServers` (Claude Code's user scope);
//! 6. the user's Codex configuration, `[mcp_servers.<name>]` of `$CODEX_HOME/config.toml`
//!    (`~/.codex/config.toml`).
//!
//! Every file here is untrusted input: one that cannot be read or parsed is reported once,
//! naming it, and set aside; a file larger than [`MAX_FILE`] is not read.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use crate::protocol::TextPos;

/// One MCP server as nop starts it: a stdio command or a streamable-HTTP endpoint.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpConfig {
    /// The program of a stdio server (or `url` for a remote one).
    #[serde(default)]
    pub command: String,
    /// A remote server's endpoint (streamable HTTP).
    #[serde(default)]
    pub url: Option<String>,
    /// HTTP headers sent to a remote server, `${VAR}` expanded.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The variable holding the bearer token sent to a remote server (`Authorization`).
    #[serde(default)]
    pub bearer_token_env_var: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default = "default_startup")]
    pub startup_timeout_s: f64,
    /// Each call's time limit; `tools.timeout_s` when not set.
    #[serde(default)]
    pub timeout_s: Option<f64>,
    /// The working directory (relative to the repository root); a private empty directory
    /// outside the repository when not set.
    #[serde(default)]
    pub cwd: Option<String>,
}

fn default_startup() -> f64 {
    20.0
}

impl Default for McpConfig {
    fn default() -> McpConfig {
        McpConfig {
            command: String::new(),
            url: None,
            headers: BTreeMap::new(),
            bearer_token_env_var: None,
            args: Vec::new(),
            env: BTreeMap::new(),
            startup_timeout_s: default_startup(),
            timeout_s: None,
            cwd: None,
        }
    }
}

/// The largest file read here (`~/.claude.json` also holds Claude Code's history).
pub const MAX_FILE: u64 = 32 << 20;

/// What declares a plugin.
#[derive(Debug, Clone)]
pub enum Spec {
    /// A folder with `config.yml` (nop's own layout).
    Dir(PathBuf),
    /// A server of another agent's configuration.
    Mcp(McpConfig),
}

/// A plugin found in `source` (a file), or why its declaration cannot be used.
#[derive(Debug, Clone)]
pub struct Found {
    pub name: String,
    pub source: PathBuf,
    pub spec: Result<Spec, DeclarationError>,
}

/// Why a file that declares servers, or one server of it, cannot be used; each names the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeclarationError {
    #[error("{}: larger than {} MB, not read", .0.display(), MAX_FILE >> 20)]
    TooLarge(PathBuf),
    #[error("{}: {message}", path.display())]
    Unreadable { path: PathBuf, message: String },
    #[error("{}: not UTF-8: {message}", path.display())]
    NotUtf8 { path: PathBuf, message: String },
    /// Not JSON, or not TOML: where, as the parser says it.
    #[error("{}{}: {message}", path.display(), pos.map(|p| format!(":{}:{}", p.line, p.column)).unwrap_or_default())]
    Parse {
        path: PathBuf,
        pos: Option<TextPos>,
        message: String,
    },
    /// Claude Code's `mcpServers` is not a map of servers.
    #[error("{}: `mcpServers` is not an object", .0.display())]
    NotObject(PathBuf),
    /// Codex's `mcp_servers` is not a table of servers.
    #[error("{}: `mcp_servers` is not a table", .0.display())]
    NotTable(PathBuf),
    /// One server of the file (`mcpServers.<name>`, `mcp_servers.<name>`).
    #[error("{}: {key}.{name}: {source}", path.display())]
    Entry {
        path: PathBuf,
        key: &'static str,
        name: String,
        source: Box<EntryError>,
    },
}

/// Why one server entry of another agent's configuration cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntryError {
    #[error("`{key}` must be a string, not {value}")]
    NotString { key: String, value: Value },
    #[error("`{key}` must be an object, not {value}")]
    NotObject { key: String, value: Value },
    #[error("`{key}` must be a list, not {value}")]
    NotList { key: String, value: Value },
    #[error("`{key}` must be a positive number, not {value}")]
    NotPositive { key: String, value: Value },
    /// Codex's `env_http_headers.<header>`, which names a variable.
    #[error("`env_http_headers.{0}` must be a string")]
    HeaderVariable(String),
    #[error("no `{0}`")]
    Missing(&'static str),
    #[error(
        "the older HTTP+SSE transport (`type: sse`) is not supported; nop speaks \
         streamable HTTP (`type: http`)"
    )]
    Sse,
    #[error("unknown server type `{0}`")]
    UnknownType(String),
}

/// Every plugin declared for the repository at `root` given nop's environment `env`, first
/// declaration of each name first; and the declarations a name clash set aside, with the source
/// that won.
///
/// Found is not started: whether a server the repository declares (or whose command names its
/// files) may start is `crate::trust`'s to say, when it is about to.
pub fn discover(
    root: &Path,
    env: &BTreeMap<String, String>,
) -> (Vec<Found>, Vec<(Found, PathBuf)>) {
    let home = env
        .get("HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute());
    let claude = home.as_ref().map(|h| h.join(".claude.json"));
    let claude_json = claude.as_ref().and_then(|p| read_claude_json(p));
    let mut all = Vec::new();
    all.extend(dirs(&root.join(".nop/plugins")));
    all.extend(project_mcp_json(root));
    if let (Some(path), Some(json)) = (&claude, &claude_json) {
        match json {
            Ok(json) => all.extend(claude_local(path, json, root)),
            Err(why) => all.push(unreadable(path, why.clone())),
        }
    }
    if let Some(dir) =
        crate::config::user_config_path(env).and_then(|p| p.parent().map(Path::to_path_buf))
    {
        all.extend(dirs(&dir.join("plugins")));
    }
    if let (Some(path), Some(Ok(json))) = (&claude, &claude_json) {
        all.extend(servers(path, json.get("mcpServers")));
    }
    let codex_home = env
        .get("CODEX_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| home.as_ref().map(|h| h.join(".codex")));
    if let Some(dir) = codex_home {
        all.extend(codex(&dir.join("config.toml")));
    }
    let mut kept: Vec<Found> = Vec::new();
    let mut shadowed = Vec::new();
    for found in all {
        match kept.iter().find(|k| k.name == found.name) {
            Some(winner) => {
                let by = winner.source.clone();
                shadowed.push((found, by));
            }
            None => kept.push(found),
        }
    }
    (kept, shadowed)
}

/// A file that could not be used, as a plugin entry named after it.
fn unreadable(path: &Path, why: DeclarationError) -> Found {
    Found {
        name: path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        source: path.to_path_buf(),
        spec: Err(why),
    }
}

/// The plugin folders of `dir`, in name order.
fn dirs(dir: &Path) -> Vec<Found> {
    let mut found: Vec<Found> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().join("config.yml").is_file())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            Some(Found {
                name,
                source: e.path().join("config.yml"),
                spec: Ok(Spec::Dir(e.path())),
            })
        })
        .collect();
    found.sort_by(|a, b| a.name.cmp(&b.name));
    found
}

/// The text of `path` as JSON: `None` when there is no such file.
fn read_json(path: &Path) -> Option<Result<Value, DeclarationError>> {
    Some(
        read_capped(path)?
            .and_then(|bytes| serde_json::from_slice(&bytes).map_err(|e| json_error(path, &e))),
    )
}

/// A file that is not JSON (or not of the shape asked for), with where.
fn json_error(path: &Path, e: &serde_json::Error) -> DeclarationError {
    DeclarationError::Parse {
        path: path.to_path_buf(),
        pos: Some(TextPos {
            line: e.line(),
            column: e.column(),
        }),
        message: e.to_string(),
    }
}

/// What nop reads of `~/.claude.json`: `mcpServers` and each project's `mcpServers`, as JSON of
/// that shape. Claude Code keeps its history in the same file (megabytes for a long-time user):
/// the rest is skipped as it is parsed, never built, which keeps it off every run's start-up.
fn read_claude_json(path: &Path) -> Option<Result<Value, DeclarationError>> {
    #[derive(serde::Deserialize)]
    struct Servers {
        #[serde(default, rename = "mcpServers")]
        mcp_servers: Option<Value>,
    }
    #[derive(serde::Deserialize)]
    struct ClaudeJson {
        #[serde(default, rename = "mcpServers")]
        mcp_servers: Option<Value>,
        #[serde(default)]
        projects: BTreeMap<String, Servers>,
    }
    Some(read_capped(path)?.and_then(|bytes| {
        let parsed: ClaudeJson =
            serde_json::from_slice(&bytes).map_err(|e| json_error(path, &e))?;
        let mut json = serde_json::Map::new();
        if let Some(servers) = parsed.mcp_servers {
            json.insert("mcpServers".into(), servers);
        }
        let projects: serde_json::Map<String, Value> = parsed
            .projects
            .into_iter()
            .filter_map(|(root, p)| {
                let servers = p.mcp_servers?;
                Some((root, serde_json::json!({ "mcpServers": servers })))
            })
            .collect();
        json.insert("projects".into(), Value::Object(projects));
        Ok(Value::Object(json))
    }))
}

/// The servers of the repository's `.mcp.json`.
fn project_mcp_json(root: &Path) -> Vec<Found> {
    let path = root.join(".mcp.json");
    match read_json(&path) {
        None => Vec::new(),
        Some(Ok(json)) => servers(&path, json.get("mcpServers")),
        Some(Err(why)) => vec![unreadable(&path, why)],
    }
}

/// The bytes of `path`, at most [`MAX_FILE`]; `None` when there is no such file.
fn read_capped(path: &Path) -> Option<Result<Vec<u8>, DeclarationError>> {
    match crate::capped_file::read(path, MAX_FILE) {
        Ok(None) => None,
        Ok(Some(bytes)) => Some(Ok(bytes)),
        Err(crate::capped_file::CappedError::TooLarge(..)) => {
            Some(Err(DeclarationError::TooLarge(path.to_path_buf())))
        }
        Err(e) => Some(Err(DeclarationError::Unreadable {
            path: path.to_path_buf(),
            message: e.to_string(),
        })),
    }
}

/// The servers of Codex's `config.toml`: `[mcp_servers.<name>]`, those not `enabled = false`.
fn codex(path: &Path) -> Vec<Found> {
    let parsed = match read_capped(path) {
        None => return Vec::new(),
        Some(Err(why)) => return vec![unreadable(path, why)],
        Some(Ok(bytes)) => String::from_utf8(bytes)
            .map_err(|e| DeclarationError::NotUtf8 {
                path: path.to_path_buf(),
                message: e.to_string(),
            })
            .and_then(|text| {
                toml::from_str::<toml::Table>(&text).map_err(|e| DeclarationError::Parse {
                    path: path.to_path_buf(),
                    pos: None,
                    message: crate::config::first_line(e.message()),
                })
            })
            .and_then(|table| {
                serde_json::to_value(table).map_err(|e| DeclarationError::Parse {
                    path: path.to_path_buf(),
                    pos: None,
                    message: e.to_string(),
                })
            }),
    };
    let json = match parsed {
        Ok(json) => json,
        Err(why) => return vec![unreadable(path, why)],
    };
    let Some(servers) = json.get("mcp_servers") else {
        return Vec::new();
    };
    let Some(map) = servers.as_object() else {
        return vec![unreadable(
            path,
            DeclarationError::NotTable(path.to_path_buf()),
        )];
    };
    let mut found: Vec<Found> = map
        .iter()
        .filter(|(_, entry)| entry.get("enabled") != Some(&Value::Bool(false)))
        .map(|(name, entry)| Found {
            name: name.clone(),
            source: path.to_path_buf(),
            spec: codex_entry(entry)
                .map(Spec::Mcp)
                .map_err(|source| DeclarationError::Entry {
                    path: path.to_path_buf(),
                    key: "mcp_servers",
                    name: name.clone(),
                    source: Box::new(source),
                }),
        })
        .collect();
    found.sort_by(|a, b| a.name.cmp(&b.name));
    found
}

/// One server as Codex writes it: `command`, `args`, `env`, `cwd`, or `url`,
/// `bearer_token_env_var`, `http_headers`, `env_http_headers` (header → variable); and
/// `startup_timeout_sec`, `tool_timeout_sec`.
fn codex_entry(entry: &Value) -> Result<McpConfig, EntryError> {
    let mut config = if entry.get("url").is_some() {
        let mut config = mcp_entry(&serde_json::json!({
            "type": "http",
            "url": entry.get("url"),
            "headers": entry.get("http_headers"),
        }))?;
        if let Some(map) = entry.get("env_http_headers").and_then(Value::as_object) {
            for (header, var) in map {
                let var = var
                    .as_str()
                    .ok_or_else(|| EntryError::HeaderVariable(header.clone()))?;
                config.headers.insert(header.clone(), format!("${{{var}}}"));
            }
        }
        config.bearer_token_env_var = match entry.get("bearer_token_env_var") {
            None => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => {
                return Err(EntryError::NotString {
                    key: "bearer_token_env_var".into(),
                    value: other.clone(),
                });
            }
        };
        config
    } else {
        mcp_entry(entry)?
    };
    let seconds = |key: &str| -> Result<Option<f64>, EntryError> {
        match entry.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .filter(|s| s.is_finite() && *s > 0.0)
                .map(Some)
                .ok_or_else(|| EntryError::NotPositive {
                    key: key.into(),
                    value: v.clone(),
                }),
        }
    };
    if let Some(s) = seconds("startup_timeout_sec")? {
        config.startup_timeout_s = s;
    }
    config.timeout_s = seconds("tool_timeout_sec")?;
    Ok(config)
}

/// Claude Code's local scope: the servers `~/.claude.json` keeps for this repository.
fn claude_local(path: &Path, json: &Value, root: &Path) -> Vec<Found> {
    let projects = json.get("projects");
    let canonical = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let entry = [root, canonical.as_path()]
        .iter()
        .find_map(|r| projects.and_then(|p| p.get(r.to_string_lossy().as_ref())));
    servers(path, entry.and_then(|e| e.get("mcpServers")))
}

/// The entries of an `mcpServers` object, in name order.
fn servers(path: &Path, servers: Option<&Value>) -> Vec<Found> {
    let Some(servers) = servers else {
        return Vec::new();
    };
    let Some(map) = servers.as_object() else {
        return vec![unreadable(
            path,
            DeclarationError::NotObject(path.to_path_buf()),
        )];
    };
    let mut found: Vec<Found> = map
        .iter()
        .map(|(name, entry)| Found {
            name: name.clone(),
            source: path.to_path_buf(),
            spec: mcp_entry(entry)
                .map(Spec::Mcp)
                .map_err(|source| DeclarationError::Entry {
                    path: path.to_path_buf(),
                    key: "mcpServers",
                    name: name.clone(),
                    source: Box::new(source),
                }),
        })
        .collect();
    found.sort_by(|a, b| a.name.cmp(&b.name));
    found
}

/// One server as Claude Code writes it: `{command, args, env, cwd}` (stdio) or
/// `{type: "http", url, headers}` (streamable HTTP). Keys nop does not use are ignored.
fn mcp_entry(entry: &Value) -> Result<McpConfig, EntryError> {
    let text = |key: &str| -> Result<Option<String>, EntryError> {
        match entry.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(EntryError::NotString {
                key: key.into(),
                value: other.clone(),
            }),
        }
    };
    let kind = text("type")?.unwrap_or_else(|| {
        if entry.get("url").is_some() {
            "http".into()
        } else {
            "stdio".into()
        }
    });
    let strings = |key: &str| -> Result<BTreeMap<String, String>, EntryError> {
        match entry.get(key) {
            None | Some(Value::Null) => Ok(BTreeMap::new()),
            Some(Value::Object(map)) => map
                .iter()
                .map(|(k, v)| {
                    v.as_str()
                        .map(|v| (k.clone(), v.to_string()))
                        .ok_or_else(|| EntryError::NotString {
                            key: format!("{key}.{k}"),
                            value: v.clone(),
                        })
                })
                .collect(),
            Some(other) => Err(EntryError::NotObject {
                key: key.into(),
                value: other.clone(),
            }),
        }
    };
    match kind.as_str() {
        "stdio" => {}
        "http" | "streamable-http" | "streamable_http" => {
            return Ok(McpConfig {
                url: Some(text("url")?.ok_or(EntryError::Missing("url"))?),
                headers: strings("headers")?,
                ..McpConfig::default()
            });
        }
        "sse" => return Err(EntryError::Sse),
        other => return Err(EntryError::UnknownType(other.to_string())),
    }
    let command = text("command")?.ok_or(EntryError::Missing("command"))?;
    let args = match entry.get("args") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, a)| {
                a.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| EntryError::NotString {
                        key: format!("args[{i}]"),
                        value: a.clone(),
                    })
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(EntryError::NotList {
                key: "args".into(),
                value: other.clone(),
            });
        }
    };
    Ok(McpConfig {
        command,
        args,
        env: strings("env")?,
        cwd: text("cwd")?,
        ..McpConfig::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn codex_tables_become_servers() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("config.toml");
        std::fs::write(
            &path,
            "model = \"o3\"\n[mcp_servers.docs]\ncommand = \"npx\"\nargs = [\"-y\", \"docs\"]\nenv = { A = \"1\" }\nstartup_timeout_sec = 5\ntool_timeout_sec = 30\n\n[mcp_servers.off]\ncommand = \"x\"\nenabled = false\n\n[mcp_servers.web]\nurl = \"https://example.com/mcp\"\nbearer_token_env_var = \"WEB_TOKEN\"\nhttp_headers = { X-A = \"b\" }\nenv_http_headers = { X-Key = \"WEB_KEY\" }\n",
        )
        .expect("write");
        let found = codex(&path);
        assert_eq!(
            found.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(),
            ["docs", "web"]
        );
        let Ok(Spec::Mcp(docs)) = &found[0].spec else {
            panic!("{:?}", found[0].spec)
        };
        assert_eq!(
            (
                docs.command.as_str(),
                docs.args.len(),
                docs.env["A"].as_str(),
                docs.startup_timeout_s,
                docs.timeout_s
            ),
            ("npx", 2, "1", 5.0, Some(30.0))
        );
        let Ok(Spec::Mcp(web)) = &found[1].spec else {
            panic!("{:?}", found[1].spec)
        };
        assert_eq!(web.url.as_deref(), Some("https://example.com/mcp"));
        assert_eq!(web.bearer_token_env_var.as_deref(), Some("WEB_TOKEN"));
        assert_eq!(web.headers["X-A"], "b");
        assert_eq!(web.headers["X-Key"], "${WEB_KEY}");
        std::fs::write(&path, "[mcp_servers\n").expect("write");
        let bad = codex(&path);
        assert_eq!(bad.len(), 1);
        assert!(matches!(&bad[0].spec, Err(e) if e.to_string().contains("config.toml")));
    }

    #[test]
    fn claude_entries_become_servers_and_bad_ones_say_why() {
        let config = mcp_entry(&json!({"command": "npx", "args": ["-y", "x"], "env": {"A": "${B}"}, "cwd": "tools", "alwaysAllow": []}))
            .expect("stdio");
        assert_eq!(
            (
                config.command.as_str(),
                config.args.len(),
                config.cwd.as_deref()
            ),
            ("npx", 2, Some("tools"))
        );
        for (entry, wanted) in [
            (json!({"args": []}), "no `command`"),
            (json!({"command": 3}), "`command` must be a string"),
            (
                json!({"command": "x", "args": "y"}),
                "`args` must be a list",
            ),
            (
                json!({"command": "x", "env": {"A": 1}}),
                "`env.A` must be a string",
            ),
            (
                json!({"type": "sse", "url": "https://x/sse"}),
                "`type: sse`) is not supported",
            ),
            (json!({"type": "http"}), "no `url`"),
            (json!({"type": "ws"}), "unknown server type `ws`"),
        ] {
            let error = mcp_entry(&entry).expect_err(wanted).to_string();
            assert!(error.contains(wanted), "{entry}: {error}");
        }
    }

    #[test]
    fn a_file_or_entry_that_cannot_be_used_is_named_in_the_words_users_know() {
        let dir = tempfile::tempdir().expect("dir");
        let said = |found: Vec<Found>| -> Vec<String> {
            found
                .into_iter()
                .filter_map(|f| f.spec.err().map(|e| e.to_string()))
                .collect()
        };
        let json = dir.path().join(".mcp.json");
        let j = json.display();
        std::fs::write(&json, "{").expect("write");
        let e = serde_json::from_str::<Value>("{").expect_err("not JSON");
        assert_eq!(
            said(project_mcp_json(dir.path())),
            [format!("{j}:{}:{}: {e}", e.line(), e.column())]
        );
        for (text, wanted) in [
            (r#"{"mcpServers": 3}"#, "`mcpServers` is not an object"),
            (
                r#"{"mcpServers": {"x": {"type": "ws"}}}"#,
                "mcpServers.x: unknown server type `ws`",
            ),
        ] {
            std::fs::write(&json, text).expect("write");
            assert_eq!(
                said(project_mcp_json(dir.path())),
                [format!("{j}: {wanted}")]
            );
        }
        let toml = dir.path().join("config.toml");
        let t = toml.display();
        std::fs::write(&toml, [0xff]).expect("write");
        assert_eq!(
            said(codex(&toml)),
            [format!(
                "{t}: not UTF-8: invalid utf-8 sequence of 1 bytes from index 0"
            )]
        );
        for (text, wanted) in [
            ("mcp_servers = 3", "`mcp_servers` is not a table"),
            (
                "[mcp_servers.w]\nurl = \"u\"\nenv_http_headers = { X = 1 }",
                "mcp_servers.w: `env_http_headers.X` must be a string",
            ),
            (
                "[mcp_servers.w]\nurl = \"u\"\nbearer_token_env_var = 3",
                "mcp_servers.w: `bearer_token_env_var` must be a string, not 3",
            ),
            (
                "[mcp_servers.w]\ncommand = \"x\"\ntool_timeout_sec = -1",
                "mcp_servers.w: `tool_timeout_sec` must be a positive number, not -1",
            ),
        ] {
            std::fs::write(&toml, text).expect("write");
            assert_eq!(said(codex(&toml)), [format!("{t}: {wanted}")]);
        }
    }
}
