//! `nop config set`: one key of a config.yml changed in its text, so that everything else in
//! the file (comments, order, blank lines) stays as the user left it.
//!
//! The edit works on lines of block-style YAML: it replaces the key's line (and the block of a
//! list under it) or inserts the key into its section. The result is trusted only when it
//! parses to exactly the old values with the one key changed; otherwise (flow-style sections,
//! anything this line model does not follow) the file is written from its values, which loses
//! its comments, and [`Edit::comments_kept`] says so.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::layout::{Line, Place, key_of, locate, parse_lines};
use super::{
    Config, ConfigError, Origin, canonical_key, check_leaf, flatten, keys, must_be, parse_file,
    scalar, set_path, to_value,
};

/// A configuration file's new text after [`set_key`].
#[derive(Debug, Clone, PartialEq)]
pub struct Edit {
    /// The full key set (a short name such as `model` becomes `provider.model`).
    pub key: String,
    /// The value it now has.
    pub value: Value,
    /// The file's new text; it loads (as the layer `origin` says).
    pub text: String,
    /// False when the file had to be written from its values, without its comments.
    pub comments_kept: bool,
}

/// Sets `key` to the value typed as `value_text` in the configuration file `origin` names,
/// whose text is `old` (`None`: no file yet). Nothing is written here; an error means the file
/// must not be written: an unknown key (with close keys), a key that would hold the API key, a
/// value the key does not accept (with what it accepts), an old file that does not load.
pub fn set_key(
    origin: &Origin,
    old: Option<&str>,
    key: &str,
    value_text: &str,
) -> Result<Edit, ConfigError> {
    let written = Origin::Cli("nop config set".into());
    let key = canonical_key(key.trim()).to_string();
    let defaults = to_value(&Config::default());
    let mut known = Vec::new();
    flatten("", &defaults, &mut |k, _| known.push(k));
    if !known.contains(&key) {
        if keys::is_secret_key(&key) {
            return Err(ConfigError::Secret { key });
        }
        let hint = keys::hint(&key, known.into_iter());
        return Err(ConfigError::UnknownKey {
            key,
            origin: written,
            hint,
        });
    }
    let value =
        typed_value(&defaults, &key, value_text).map_err(|message| ConfigError::Invalid {
            key: key.clone(),
            origin: written.clone(),
            message,
        })?;

    let old = old.unwrap_or_default();
    let path = match origin {
        Origin::User(path) | Origin::File(path) => path.clone(),
        _ => "config.yml".into(),
    };
    let before = parse_file(origin, old).map_err(|e| ConfigError::Unchanged {
        path: path.clone(),
        source: Box::new(e),
    })?;
    let refused = |e| ConfigError::Refused {
        path: path.clone(),
        source: Box::new(e),
    };
    let mut expected: BTreeMap<String, Value> = before.into_iter().collect();
    expected.insert(key.clone(), value.clone());

    let parts: Vec<&str> = key.split('.').collect();
    let edited = edit_lines(old, &parts, &render(&value));
    if loads_as(origin, &edited, &expected).map_err(refused)? {
        return Ok(Edit {
            key,
            value,
            text: edited,
            comments_kept: true,
        });
    }
    let mut nested = Value::Object(Map::new());
    for (k, v) in &expected {
        set_path(&mut nested, k, v.clone());
    }
    let text = serde_saphyr::to_string(&nested).map_err(|e| ConfigError::Invalid {
        key: key.clone(),
        origin: written.clone(),
        message: format!("cannot write the file: {e}"),
    })?;
    if !loads_as(origin, &text, &expected).map_err(refused)? {
        return Err(ConfigError::Invalid {
            key,
            origin: written,
            message: "cannot write the file so that it loads with this value; nothing was \
                      changed"
                .into(),
        });
    }
    Ok(Edit {
        key,
        value,
        comments_kept: !old.lines().any(|l| l.trim_start().starts_with('#')),
        text,
    })
}

/// The value `text` stands for when `key` takes it: YAML scalar syntax first (`5`, `true`),
/// then a flow list (`["A", "B"]`), then the text as a string (`3.5` for a model's name). The
/// same for `nop config set`, `--set` and `NOP_*` variables.
pub(super) fn typed_value(defaults: &Value, key: &str, text: &str) -> Result<Value, String> {
    let mut complaint = None;
    let list = serde_saphyr::from_str::<Value>(text)
        .ok()
        .filter(Value::is_array);
    // `a #b` typed for a string is that string, not `a` and a comment.
    let yaml = match scalar(text) {
        Value::String(_) if !text.trim_start().starts_with(['"', '\'']) => {
            Value::String(text.to_string())
        }
        yaml => yaml,
    };
    for candidate in [Some(yaml), list, Some(Value::String(text.to_string()))]
        .into_iter()
        .flatten()
    {
        match check_leaf(defaults, key, &candidate) {
            Ok(()) => return Ok(candidate),
            Err(e) => complaint = complaint.or(Some(e.to_string())),
        }
    }
    Err(must_be(defaults, key, &complaint.unwrap_or_default(), text))
}

/// Whether `text` loads and holds exactly `expected`. An error is the loader's, for a file
/// that would not load whatever its layout (a value out of range with the rest).
fn loads_as(
    origin: &Origin,
    text: &str,
    expected: &BTreeMap<String, Value>,
) -> Result<bool, ConfigError> {
    match parse_file(origin, text) {
        Ok(values) => Ok(values.into_iter().collect::<BTreeMap<_, _>>() == *expected),
        Err(e @ ConfigError::Invalid { .. }) => Err(e),
        Err(_) => Ok(false),
    }
}

/// `value` as YAML on the right of `key: `: plain when it reads back as the same string,
/// otherwise JSON (a JSON string or list is valid YAML).
fn render(value: &Value) -> String {
    if let Value::String(s) = value {
        let plain = !s.contains('#')
            && s.trim() == s
            && serde_saphyr::from_str::<Value>(&format!("k: {s}")).ok()
                == Some(serde_json::json!({ "k": s }));
        if plain {
            return s.clone();
        }
    }
    value.to_string()
}

/// The line of `# key: …` at `indent` in the section below `parent` (the whole file for a
/// top-level key): a key shown commented out, as the shipped config.yml shows them all.
fn commented_out(
    lines: &[Line<'_>],
    parent: Option<usize>,
    indent: usize,
    key: &str,
) -> Option<usize> {
    let (start, end) = match parent {
        Some(p) => {
            let end = lines
                .iter()
                .enumerate()
                .skip(p + 1)
                .find(|(_, l)| l.content && l.indent <= lines[p].indent)
                .map_or(lines.len(), |(j, _)| j);
            (p + 1, end)
        }
        None => (0, lines.len()),
    };
    (start..end).find(|&i| {
        let l = &lines[i];
        let body = l.text.trim_start_matches(' ');
        !l.content
            && l.indent == indent
            && body
                .strip_prefix('#')
                .map(|rest| rest.trim_start_matches(' '))
                .and_then(key_of)
                .is_some_and(|(k, _)| k == key)
    })
}

/// The comment at the end of a value (` # …`), outside quotes.
fn trailing_comment(rest: &str) -> &str {
    let mut quote = None;
    let mut previous = ' ';
    for (i, c) in rest.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '#') if previous == ' ' || previous == '\t' => {
                let start = rest[..i].trim_end_matches([' ', '\t']).len();
                return &rest[start..];
            }
            _ => {}
        }
        previous = c;
    }
    ""
}

fn edit_lines(text: &str, path: &[&str], rendered: &str) -> String {
    let lines = parse_lines(text);
    let mut out: Vec<String> = lines.iter().map(|l| l.text.to_string()).collect();
    match locate(&lines, path) {
        Place::Found { line, last } => {
            let l = &lines[line];
            let colon = l.key.as_ref().map_or(0, |(_, c)| *c);
            let rest = l.text[colon + 1..].trim_end_matches('\r');
            let comment = trailing_comment(rest);
            out[line] = format!("{}: {rendered}{comment}", &l.text[..colon]);
            // Only the value's own lines go; comments after them stay.
            out.drain(line + 1..=last);
        }
        Place::Missing {
            depth,
            indent,
            parent,
            ..
        } if depth + 1 == path.len()
            && let Some(i) = commented_out(&lines, parent, indent, path[depth]) =>
        {
            let body = lines[i].text.trim_start_matches(' ');
            let rest = body
                .strip_prefix('#')
                .unwrap_or(body)
                .trim_start_matches(' ');
            let comment = key_of(rest)
                .map(|(_, colon)| trailing_comment(rest[colon + 1..].trim_end_matches('\r')))
                .unwrap_or_default()
                .trim_start();
            let line = format!("{}{}: {rendered}", " ".repeat(indent), path[depth]);
            out[i] = if comment.is_empty() {
                line
            } else {
                // The comment stays in its column where the value leaves room.
                let column =
                    lines[i].text.trim_end_matches('\r').chars().count() - comment.chars().count();
                let width = line.chars().count();
                format!(
                    "{line}{}{comment}",
                    " ".repeat(column.saturating_sub(width).max(1))
                )
            };
        }
        Place::Missing {
            depth,
            after,
            indent,
            ..
        } => {
            let new: Vec<String> = path[depth..]
                .iter()
                .enumerate()
                .map(|(k, part)| {
                    let pad = " ".repeat(indent + 2 * k);
                    if depth + k + 1 == path.len() {
                        format!("{pad}{part}: {rendered}")
                    } else {
                        format!("{pad}{part}:")
                    }
                })
                .collect();
            match after {
                Some(i) => {
                    out.splice(i + 1..i + 1, new);
                }
                None => {
                    // At the end, after a blank line that sets it apart from what is there.
                    while out.last().is_some_and(|l| l.trim().is_empty()) {
                        out.pop();
                    }
                    if !out.is_empty() {
                        out.push(String::new());
                    }
                    out.extend(new);
                    out.push(String::new());
                }
            }
        }
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use std::path::PathBuf;

    fn user() -> Origin {
        Origin::User(PathBuf::from("/home/u/.config/nop/config.yml"))
    }

    fn set(old: &str, key: &str, value: &str) -> Edit {
        match set_key(&user(), Some(old), key, value) {
            Ok(edit) => edit,
            Err(e) => panic!("{key} = {value}: {e}"),
        }
    }

    #[test]
    fn a_new_file_gets_the_key_in_its_section() {
        let edit = set("", "model", "gpt-4.1");
        assert_eq!(edit.key, "provider.model");
        assert_eq!(edit.text, "provider:\n  model: gpt-4.1\n");
        let edit = set(&edit.text, "provider.api_key_env", "MY_KEY");
        assert_eq!(
            edit.text,
            "provider:\n  model: gpt-4.1\n  api_key_env: MY_KEY\n"
        );
        let edit = set(&edit.text, "log.level", "debug");
        assert_eq!(
            edit.text,
            "provider:\n  model: gpt-4.1\n  api_key_env: MY_KEY\n\nlog:\n  level: debug\n"
        );
        let edit = set(&edit.text, "sandbox", "off");
        // `off` alone would read as the boolean false (YAML 1.1).
        assert!(
            edit.text.ends_with("\n\nsandbox: \"off\"\n"),
            "{:?}",
            edit.text
        );
    }

    #[test]
    fn comments_and_order_are_kept() {
        let old = "# mine\nprovider:\n  # the model\n  model: old   # was old\n  kind: openai\n\n# tail\nlog:\n  level: info\n";
        let edit = set(old, "provider.model", "new-model");
        assert!(edit.comments_kept);
        assert_eq!(
            edit.text,
            "# mine\nprovider:\n  # the model\n  model: new-model   # was old\n  kind: openai\n\n# tail\nlog:\n  level: info\n"
        );
        let edit = set(old, "provider.base_url", "http://127.0.0.1:8080/v1");
        assert_eq!(
            edit.text,
            "# mine\nprovider:\n  # the model\n  model: old   # was old\n  kind: openai\n  base_url: http://127.0.0.1:8080/v1\n\n# tail\nlog:\n  level: info\n"
        );
    }

    #[test]
    fn a_key_shown_commented_out_is_set_where_it_is_shown() {
        let old = "log:\n  # error | warn | info | debug\n  # level: info\n\n# sandbox: best-effort\nprovider:\n  # model: gpt-4.1   # required\n  # kind: openai\n";
        let edit = set(old, "log.level", "debug");
        assert_eq!(
            edit.text,
            "log:\n  # error | warn | info | debug\n  level: debug\n\n# sandbox: best-effort\nprovider:\n  # model: gpt-4.1   # required\n  # kind: openai\n"
        );
        let edit = set(&edit.text, "model", "m");
        assert!(
            edit.text
                .contains("provider:\n  model: m           # required\n  # kind: openai\n"),
            "{}",
            edit.text
        );
        let edit = set(&edit.text, "sandbox", "required");
        assert!(edit.text.contains("\nsandbox: required\n"), "{}", edit.text);
    }

    #[test]
    fn the_shipped_config_takes_every_key_in_place() {
        let shipped = include_str!("../../.nop/config.yml");
        for (key, value) in [
            ("provider.model", "gpt-4.1"),
            ("provider.kind", "anthropic"),
            ("log.level", "debug"),
            ("sandbox", "required"),
            ("shell.env_keep", r#"["HOME"]"#),
            ("hooks.timeout_s", "5"),
        ] {
            let edit = set(shipped, key, value);
            assert!(edit.comments_kept, "{key}");
            assert_eq!(
                edit.text.lines().count(),
                shipped.lines().count(),
                "{key}: the commented-out line is set, none added"
            );
        }
    }

    #[test]
    fn a_list_value_replaces_the_old_list() {
        let old = "shell:\n  env_keep:\n    - A\n    - B\n  # keep me\n  network: allow\n";
        let edit = set(old, "shell.env_keep", r#"["C"]"#);
        assert_eq!(
            edit.text,
            "shell:\n  env_keep: [\"C\"]\n  # keep me\n  network: allow\n"
        );
    }

    #[test]
    fn strings_that_would_read_as_something_else_are_quoted() {
        assert_eq!(
            set("", "model", "3.5").text,
            "provider:\n  model: \"3.5\"\n"
        );
        assert_eq!(
            set("", "model", "a #b").text,
            "provider:\n  model: \"a #b\"\n"
        );
        assert_eq!(set("", "model", "true").value, Value::String("true".into()));
    }

    #[test]
    fn a_flow_style_section_is_rewritten_without_comments() {
        let old = "# note\nprovider: {kind: openai}\n";
        let edit = set(old, "model", "m");
        assert!(!edit.comments_kept);
        let values: BTreeMap<String, Value> = parse_file(&user(), &edit.text)
            .unwrap_or_default()
            .into_iter()
            .collect();
        assert_eq!(values["provider.model"], Value::String("m".into()));
        assert_eq!(values["provider.kind"], Value::String("openai".into()));
    }

    #[test]
    fn bad_keys_values_and_files_are_refused() {
        let err = |old: &str, key: &str, value: &str| {
            set_key(&user(), Some(old), key, value)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        let e = err("", "agent.max_turns", "-1");
        assert!(
            e.contains("agent.max_turns")
                && e.contains("must be a whole number from 1 to 4294967295, not -1"),
            "{e}"
        );
        let e = err("", "provider.api_key", "sk-123");
        assert!(e.contains("provider.api_key_env"), "{e}");
        assert!(!e.contains("sk-123"), "{e}");
        let e = err("", "provider.api_key_env", "sk-abc-123");
        assert!(e.contains("never the key itself"), "{e}");
        let e = err("", "modle", "x");
        assert!(e.contains("did you mean `provider.model`?"), "{e}");
        let e = err("log: [unclosed\n", "model", "x");
        assert!(e.contains("was not changed"), "{e}");
        let e = err("chat:\n  wait_max_s: 10\n", "chat.wait_min_s", "20");
        assert!(
            e.contains("was not changed: with that value it would not load")
                && e.contains("wait_min_s (20)"),
            "{e}"
        );
    }
}
