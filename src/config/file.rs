//! A config.yml, the user's or the repository's: where the user's is, its text, and its values
//! parsed with the position, key and accepted values of anything wrong in it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{Config, ConfigError, Origin, check_leaf, first_line, flatten, keys, layout, to_value};
use crate::protocol::TextPos;

/// The user's configuration file: `$XDG_CONFIG_HOME/nop/config.yml`, else
/// `$HOME/.config/nop/config.yml`, from the environment given. An empty or relative value is
/// ignored, as the XDG Base Directory specification says; `None` when neither is usable.
pub fn user_config_path(env: &BTreeMap<String, String>) -> Option<PathBuf> {
    let absolute = |var: &str| env.get(var).map(PathBuf::from).filter(|p| p.is_absolute());
    absolute("XDG_CONFIG_HOME")
        .or_else(|| absolute("HOME").map(|home| home.join(".config")))
        .map(|dir| dir.join("nop").join("config.yml"))
}

/// The text of a configuration file, `None` if there is none; an error names the file (and
/// the byte where it stops being UTF-8).
pub fn read_config_text(path: &Path) -> Result<Option<String>, ConfigError> {
    match std::fs::read(path) {
        Ok(bytes) => crate::protocol::decode_utf8(bytes)
            .map(Some)
            .map_err(|(pos, message)| ConfigError::Parse {
                path: path.to_path_buf(),
                pos: Some(pos),
                message,
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ConfigError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Parses a config.yml (the user's or the repository's, as `origin` says), reporting unknown
/// keys and wrong types with their position.
pub(super) fn parse_file(origin: &Origin, text: &str) -> Result<Vec<(String, Value)>, ConfigError> {
    let path = match origin {
        Origin::User(path) | Origin::File(path) => path.as_path(),
        _ => Path::new("config.yml"),
    };
    let parse_err = |e: serde_saphyr::Error| {
        let pos = e.location().map(|l| TextPos {
            line: usize::try_from(l.line()).unwrap_or(0),
            column: usize::try_from(l.column()).unwrap_or(0),
        });
        ConfigError::Parse {
            path: path.to_path_buf(),
            pos,
            message: first_line(&e.to_string()),
        }
    };
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    // Typed parse first: it finds unknown keys and wrong types with their line and column.
    let config: Config = match serde_saphyr::from_str(text) {
        Ok(config) => config,
        Err(e) => return Err(explain(text, parse_err(e))),
    };
    if let Some((key, message)) = config.check_ranges().into_iter().next() {
        return Err(ConfigError::Invalid {
            key: key.to_string(),
            origin: origin.clone(),
            message,
        });
    }
    // The keys the file sets, as written; read without a type, `sandbox: off` is the boolean
    // false (YAML 1.1), which the key does not take: such a value is the one the typed parse
    // gave it.
    let value: Value = serde_saphyr::from_str(text).map_err(parse_err)?;
    let typed = to_value(&config);
    let defaults = to_value(&Config::default());
    let mut out = Vec::new();
    flatten("", &value, &mut |key, value| {
        match key.split('.').try_fold(&typed, |node, part| node.get(part)) {
            // A section whose keys are all commented out (`log:` alone) sets nothing.
            Some(Value::Object(_)) if value.is_null() => {}
            Some(typed) if check_leaf(&defaults, &key, value).is_err() => {
                out.push((key, typed.clone()))
            }
            _ => out.push((key, value.clone())),
        }
    });
    Ok(out)
}

/// A typed parse error said in the configuration's words: the parser knows the position
/// ("invalid u32" at 19:14) but not the key, nor what would have been accepted. When the text
/// is valid YAML, the first key that is unknown or holds a value it does not accept is named,
/// with close keys or the accepted values.
fn explain(text: &str, error: ConfigError) -> ConfigError {
    let ConfigError::Parse { path, pos, message } = error else {
        return error;
    };
    let Ok(value) = serde_saphyr::from_str::<Value>(text) else {
        return ConfigError::Parse { path, pos, message };
    };
    let defaults = to_value(&Config::default());
    let mut known: Vec<String> = Vec::new();
    flatten("", &defaults, &mut |key, _| known.push(key));
    let mut found = None;
    flatten("", &value, &mut |key, value| {
        if found.is_some() {
            return;
        }
        let section = format!("{key}.");
        let problem = if known.contains(&key) {
            match check_leaf(&defaults, &key, value) {
                Ok(()) => return,
                Err(complaint) => format!(
                    "`{key}` {}",
                    must_be(&defaults, &key, &complaint.to_string(), &value.to_string())
                ),
            }
        } else if known.iter().any(|k| k.starts_with(&section)) {
            // `hooks:` with nothing under it, or a section given a value of its own.
            if value.is_null() {
                return;
            }
            format!("`{key}` is a section: put its keys under it, indented")
        } else {
            format!(
                "unknown configuration key `{key}`; {}",
                keys::hint(&key, known.iter().cloned())
            )
        };
        found = Some((key, problem));
    });
    let Some((key, problem)) = found else {
        return ConfigError::Parse { path, pos, message };
    };
    // The parser's position is the more precise one when it is on the key's line.
    let pos = match (layout::position_of(text, &key), pos) {
        (Some(at), Some(pos)) if at.line == pos.line => Some(pos),
        (Some(at), _) => Some(at),
        (None, pos) => pos,
    };
    ConfigError::Parse {
        path,
        pos,
        message: problem,
    }
}

/// "must be a whole number from 1 to 4294967295, not -5": what `key` accepts, given the
/// deserialiser's complaint about `shown`.
pub(super) fn must_be(defaults: &Value, key: &str, complaint: &str, shown: &str) -> String {
    let default = key
        .split('.')
        .try_fold(defaults, |node, part| node.get(part));
    format!(
        "must be {}, not {shown}{}",
        keys::accepted(key, default, complaint),
        keys::closest_variant(complaint, shown)
    )
}
