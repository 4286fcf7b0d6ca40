//! The names tools have on the wire. The model APIs accept `^[a-zA-Z0-9_-]{1,64}$` only, while an
//! MCP server may name a tool with dots, slashes or any Unicode (`files.count`, `get/issue`), and
//! plugin tools are `<plugin>.<tool>`. Each request maps the names of the tools it offers both
//! ways, so any name round-trips.

use std::collections::HashMap;

use super::ToolSpec;

/// The longest name OpenAI and Anthropic accept.
const MAX: usize = 64;

/// One request's tool names, local (`github.files.count`) ↔ wire (`github__files__count`).
#[derive(Debug, Default)]
pub(crate) struct WireNames {
    to_wire: HashMap<String, String>,
    to_local: HashMap<String, String>,
}

impl WireNames {
    /// The readable form of each name (`.` → `__`, any other character the APIs refuse → `_`),
    /// unless it is too long or another tool of the list already has it: then its first 55
    /// characters and a hash of the whole name.
    pub(crate) fn new(tools: &[ToolSpec]) -> WireNames {
        let mut names = WireNames::default();
        for tool in tools {
            if names.to_wire.contains_key(&tool.name) {
                continue;
            }
            let mut wire = readable(&tool.name);
            if wire.len() > MAX || wire.is_empty() || names.to_local.contains_key(&wire) {
                let mut salt = 0u32;
                loop {
                    let head: String = wire.chars().take(MAX - 9).collect();
                    wire = format!("{head}_{:08x}", hash(&tool.name, salt));
                    if !names.to_local.contains_key(&wire) {
                        break;
                    }
                    salt += 1;
                }
            }
            names.to_local.insert(wire.clone(), tool.name.clone());
            names.to_wire.insert(tool.name.clone(), wire);
        }
        names
    }

    /// The wire name of `local`; a tool not offered in this request (a call in the history)
    /// gets the readable form.
    pub(crate) fn wire(&self, local: &str) -> String {
        self.to_wire
            .get(local)
            .cloned()
            .unwrap_or_else(|| readable(local).chars().take(MAX).collect())
    }

    /// The local name of a tool the model called; a name that was not offered comes back as
    /// its first `__` turned into `.`, which names no tool and is refused as such.
    pub(crate) fn local(&self, wire: &str) -> String {
        self.to_local
            .get(wire)
            .cloned()
            .unwrap_or_else(|| wire.replacen("__", ".", 1))
    }
}

fn readable(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            '.' => out.push_str("__"),
            c if c.is_ascii_alphanumeric() || c == '_' || c == '-' => out.push(c),
            _ => out.push('_'),
        }
    }
    out
}

/// FNV-1a of `name` and `salt`: stable across runs and builds, so a conversation's earlier calls
/// keep their wire names.
fn hash(name: &str, salt: u32) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in name.bytes().chain(salt.to_le_bytes()) {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: String::new(),
            parameters: serde_json::json!({"type": "object"}),
        }
    }

    #[test]
    fn every_name_round_trips_within_the_apis_limits() {
        let long = format!("demo.{}", "x".repeat(80));
        let local = [
            "read-file",
            "demo.echo",
            "demo.files.count",
            "demo.files__count",
            "demo.get/issue",
            "demo.get:issue",
            "demo.résumé",
            "demo.日本",
            "demo.読む",
            "demo.read_file",
            long.as_str(),
        ];
        let specs: Vec<ToolSpec> = local.iter().map(|n| spec(n)).collect();
        let names = WireNames::new(&specs);
        let mut seen = std::collections::HashSet::new();
        for name in local {
            let wire = names.wire(name);
            assert!(
                !wire.is_empty()
                    && wire.len() <= MAX
                    && wire
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
                "{name} → {wire}"
            );
            assert!(seen.insert(wire.clone()), "{wire} given twice");
            assert_eq!(names.local(&wire), name, "{wire}");
        }
        // The readable form wherever it is free.
        assert_eq!(names.wire("demo.echo"), "demo__echo");
        assert_eq!(names.wire("demo.files.count"), "demo__files__count");
        assert_eq!(names.wire("read-file"), "read-file");
        // The same list gives the same names.
        assert_eq!(WireNames::new(&specs).wire(&long), names.wire(&long));
    }
}
