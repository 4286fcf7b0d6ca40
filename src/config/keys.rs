//! What the configuration's keys accept, and the words for a key that is wrong: the accepted
//! range of each numeric key (checked at load and named in every message about a bad value),
//! short names for the keys a user sets first, "did you mean" for a misspelt key, and the
//! refusal of keys that would put an API key in a file.

use serde_json::Value;

/// The keys that run commands with the user's rights, loosen the shell's confinement or the
/// approvals, or send the provider's key somewhere: what a repository's files may set only while
/// the user trusts them (`crate::trust`). Every `hooks.*` key is one.
pub const WIDENING: &[&str] = &[
    "sandbox",
    "approval",
    "shell.network",
    "shell.namespaces",
    "shell.env_exclude",
    "shell.env_keep",
    "shell.outside_sandbox",
    "provider.base_url",
    "provider.api_key_env",
];

/// Whether `key` is one of [`WIDENING`] or a hook.
pub fn widens(key: &str) -> bool {
    key.starts_with("hooks.") || key == "hooks" || WIDENING.contains(&key)
}

/// The values a numeric key accepts. Every numeric key has one (a unit test sees to it), so a
/// message about a bad number can always say what would have been right.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Limit {
    /// A whole number from `min` to `max` (`None`: as large as the type holds, which is more
    /// than anyone needs, so it is not worth printing).
    Whole { min: u64, max: Option<u64> },
    /// A number above `min` (or from it, when `from_min`) up to `max`, in `unit`.
    Number {
        min: f64,
        from_min: bool,
        max: f64,
        unit: &'static str,
    },
}

const U32: Option<u64> = Some(u32::MAX as u64);

const fn seconds(from_min: bool, max: f64) -> Limit {
    Limit::Number {
        min: 0.0,
        from_min,
        max,
        unit: " seconds",
    }
}

/// Each numeric key and what it accepts.
const LIMITS: &[(&str, Limit)] = &[
    ("session.lock_timeout_s", seconds(false, 3600.0)),
    (
        "session.seal_kb",
        Limit::Whole {
            min: 16,
            max: Some(1_048_576),
        },
    ),
    (
        "provider.max_attempts",
        Limit::Whole {
            min: 1,
            max: Some(100),
        },
    ),
    ("provider.retry_base_ms", Limit::Whole { min: 0, max: None }),
    ("provider.retry_max_ms", Limit::Whole { min: 0, max: None }),
    ("provider.connect_timeout_s", seconds(false, 86_400.0)),
    ("provider.stream_idle_timeout_s", seconds(false, 86_400.0)),
    ("provider.max_tokens", Limit::Whole { min: 0, max: U32 }),
    ("tools.timeout_s", seconds(false, 86_400.0)),
    (
        "shell.caches_max_mb",
        Limit::Whole {
            min: 0,
            max: Some(1_048_576),
        },
    ),
    (
        "tools.output_max_bytes",
        Limit::Whole {
            min: 1000,
            max: None,
        },
    ),
    ("agent.max_turns", Limit::Whole { min: 1, max: U32 }),
    (
        "agent.max_parallel",
        Limit::Whole {
            min: 1,
            max: Some(64),
        },
    ),
    ("agent.goal_timeout_s", seconds(false, 604_800.0)),
    (
        "agent.max_budget_usd",
        Limit::Number {
            min: 0.0,
            from_min: true,
            max: 1_000_000.0,
            unit: " US dollars (0: no limit)",
        },
    ),
    ("subagents.timeout_s", seconds(false, 86_400.0)),
    ("subagents.max_depth", Limit::Whole { min: 0, max: U32 }),
    ("advisors.timeout_s", seconds(false, 86_400.0)),
    ("advisors.max_retries", Limit::Whole { min: 0, max: U32 }),
    ("advisors.retry_delay_s", seconds(true, 3600.0)),
    (
        "compaction.context_window",
        Limit::Whole { min: 0, max: None },
    ),
    (
        "compaction.threshold",
        Limit::Number {
            min: 0.0,
            from_min: false,
            max: 1.0,
            unit: "",
        },
    ),
    (
        "compaction.max_messages",
        Limit::Whole { min: 0, max: None },
    ),
    ("compaction.keep_last", Limit::Whole { min: 0, max: None }),
    // A negative or endless wait would stop nop when it turns the value into a duration.
    ("queue.idle_timeout_s", seconds(true, 31_536_000.0)),
    ("chat.wait_min_s", seconds(true, 3600.0)),
    ("chat.wait_max_s", seconds(true, 3600.0)),
    ("chat.max_delay_s", seconds(true, 600.0)),
    (
        "checkpoints.max_file_mb",
        Limit::Number {
            min: 0.0,
            from_min: true,
            max: 1_000_000.0,
            unit: " MiB",
        },
    ),
    // Clamped where it is used (1 ms to a day), so any number will do.
    (
        "hooks.timeout_s",
        Limit::Number {
            min: f64::NEG_INFINITY,
            from_min: false,
            max: f64::INFINITY,
            unit: " seconds",
        },
    ),
    (
        "hooks.max_stop_continuations",
        Limit::Whole {
            min: 0,
            max: Some(1000),
        },
    ),
];

impl Limit {
    /// What the key accepts, to follow "must be".
    pub(crate) fn describe(&self) -> String {
        match *self {
            Limit::Whole {
                min,
                max: Some(max),
            } => format!("a whole number from {min} to {max}"),
            Limit::Whole { min: 0, max: None } => "a whole number, 0 or more".to_string(),
            Limit::Whole { min, max: None } => format!("a whole number, at least {min}"),
            Limit::Number { min, max, unit, .. } if min.is_infinite() && max.is_infinite() => {
                match unit {
                    "" => "a number".to_string(),
                    unit => format!("a number of{unit}"),
                }
            }
            Limit::Number {
                min,
                from_min: true,
                max,
                unit,
            } => format!("{min} to {max}{unit}"),
            Limit::Number {
                min,
                from_min: false,
                max,
                unit,
            } => format!("more than {min} and at most {max}{unit}"),
        }
    }

    fn admits(&self, value: &Value) -> bool {
        match *self {
            Limit::Whole { min, max } => value
                .as_u64()
                .is_some_and(|v| v >= min && max.is_none_or(|max| v <= max)),
            Limit::Number {
                min, from_min, max, ..
            } => value.as_f64().is_some_and(|v| {
                (v > min || (from_min && v == min))
                    && v <= max
                    && (v.is_finite() || max.is_infinite())
            }),
        }
    }
}

pub(crate) fn limit(key: &str) -> Option<Limit> {
    LIMITS.iter().find(|(k, _)| *k == key).map(|(_, l)| *l)
}

/// The numeric keys of `config` (the typed configuration as a value) outside their limits:
/// `(key, problem)`.
pub(crate) fn out_of_range(config: &Value) -> Vec<(&'static str, String)> {
    LIMITS
        .iter()
        .filter_map(|(key, limit)| {
            let value = lookup(config, key)?;
            (!limit.admits(value))
                .then(|| (*key, format!("must be {}, not {value}", limit.describe())))
        })
        .collect()
}

fn lookup<'v>(root: &'v Value, key: &str) -> Option<&'v Value> {
    key.split('.').try_fold(root, |node, part| node.get(part))
}

/// What `key` accepts, in words, given its default and the deserialiser's complaint about a
/// value that did not fit (which names the variants of an enumeration).
pub(crate) fn accepted(key: &str, default: Option<&Value>, complaint: &str) -> String {
    if let Some(limit) = limit(key) {
        return limit.describe();
    }
    if key == "advisors.retry_on" {
        return "`all` or a list of error kinds, such as [Timeout, NotFound]".to_string();
    }
    if key == super::PRICING_KEY {
        return "a map from model name to {input, output, cache_write, cache_read}, in US dollars per million tokens".to_string();
    }
    if let Some(variants) = variants(complaint) {
        return format!("one of {}", variants.join(", "));
    }
    match default {
        Some(Value::Bool(_)) => "true or false".to_string(),
        Some(Value::Array(_)) => "a list of strings, such as [\"a\", \"b\"]".to_string(),
        _ => "a string".to_string(),
    }
}

/// The values an enumeration takes, from serde's complaint about one it does not: "unknown
/// variant `opnai`, expected `openai` or `anthropic`" (or "expected one of `a`, `b`, `c`").
fn variants(complaint: &str) -> Option<Vec<String>> {
    let (_, expected) = complaint.split_once("unknown variant `")?;
    let (_, expected) = expected.split_once(", expected ")?;
    let expected = expected.split(" (got").next().unwrap_or(expected);
    let expected = expected.strip_prefix("one of ").unwrap_or(expected);
    let list: Vec<String> = expected
        .split(", ")
        .flat_map(|part| part.split(" or "))
        .map(|v| v.trim().trim_matches('`').to_string())
        .filter(|v| !v.is_empty())
        .collect();
    (!list.is_empty()).then_some(list)
}

/// "; did you mean `openai`?" when `shown` (the value as the message shows it, perhaps quoted)
/// is a near miss of one of the values an enumeration takes; empty otherwise.
pub(crate) fn closest_variant(complaint: &str, shown: &str) -> String {
    let typed = shown.trim().trim_matches(['"', '\'']).to_lowercase();
    let limit = (typed.chars().count() / 3).clamp(1, 2);
    variants(complaint)
        .unwrap_or_default()
        .into_iter()
        .map(|v| (distance(&typed, &v), v))
        .filter(|(d, _)| *d <= limit)
        .min()
        .map(|(_, v)| format!("; did you mean `{v}`?"))
        .unwrap_or_default()
}

/// Short names for the keys a user sets first, as the environment has `NOP_MODEL`.
const ALIASES: &[(&str, &str)] = &[
    ("model", "provider.model"),
    ("provider", "provider.kind"),
    ("base_url", "provider.base_url"),
    ("api_key_env", "provider.api_key_env"),
];

/// The full name of `key`, which may be one of the short names.
pub fn canonical_key(key: &str) -> &str {
    ALIASES
        .iter()
        .find(|(alias, _)| *alias == key)
        .map_or(key, |(_, full)| full)
}

/// Whether `key` names the API key itself rather than the variable that holds it: such a
/// value must never be written to a file.
pub fn is_secret_key(key: &str) -> bool {
    let last = key.rsplit('.').next().unwrap_or(key).to_lowercase();
    let last = last.replace(['-', '_'], "");
    matches!(
        last.as_str(),
        "apikey" | "key" | "token" | "apitoken" | "secret" | "password" | "authorization"
    )
}

/// At most five known keys close to `key`, closest first: by edit distance to the whole key,
/// or to a key's last part (`model` finds `provider.model`).
pub(crate) fn suggestions<'k>(key: &str, known: impl Iterator<Item = &'k str>) -> Vec<&'k str> {
    let typed = key.to_lowercase();
    let limit = (typed.chars().count() / 3).max(2);
    let mut scored: Vec<(usize, &str)> = known
        .filter_map(|candidate| {
            let last = candidate.rsplit('.').next().unwrap_or(candidate);
            let score = distance(&typed, candidate).min(distance(&typed, last));
            (score <= limit).then_some((score, candidate))
        })
        .collect();
    scored.sort();
    scored.into_iter().take(5).map(|(_, k)| k).collect()
}

/// "did you mean `a`, `b` or `c`?", or where to find the keys when nothing is close.
pub(crate) fn hint(key: &str, known: impl Iterator<Item = String>) -> String {
    let known: Vec<String> = known.collect();
    let close = suggestions(key, known.iter().map(String::as_str));
    let quoted: Vec<String> = close.iter().map(|k| format!("`{k}`")).collect();
    match quoted.as_slice() {
        [] => "`nop config show` lists every key".to_string(),
        [one] => format!("did you mean {one}?"),
        [rest @ .., last] => format!("did you mean {} or {last}?", rest.join(", ")),
    }
}

/// Optimal string alignment distance: insertions, deletions, substitutions and swaps of two
/// neighbours each cost one (`modle` is one step from `model`).
pub fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let width = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * width];
    for i in 0..=a.len() {
        d[i * width] = i;
    }
    for (j, cell) in d.iter_mut().enumerate().take(width) {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[(i - 1) * width + j] + 1)
                .min(d[i * width + j - 1] + 1)
                .min(d[(i - 1) * width + j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[(i - 2) * width + j - 2] + 1);
            }
            d[i * width + j] = best;
        }
    }
    d[a.len() * width + b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use pretty_assertions::assert_eq;

    fn leaves() -> Vec<(String, Value)> {
        let defaults = serde_json::to_value(Config::default()).unwrap_or(Value::Null);
        let mut out = Vec::new();
        super::super::flatten("", &defaults, &mut |k, v| out.push((k, v.clone())));
        out
    }

    #[test]
    fn every_numeric_key_has_a_limit_and_every_limit_a_key() {
        let leaves = leaves();
        for (key, value) in &leaves {
            if value.is_number() {
                assert!(limit(key).is_some(), "{key} has no entry in LIMITS");
            }
        }
        for (key, _) in LIMITS {
            assert!(
                leaves.iter().any(|(k, v)| k == key && v.is_number()),
                "LIMITS names {key}, which is not a numeric key"
            );
        }
        // The defaults are within their own limits.
        let defaults = serde_json::to_value(Config::default()).unwrap_or(Value::Null);
        assert_eq!(out_of_range(&defaults), Vec::new());
    }

    #[test]
    fn limits_say_what_is_accepted() {
        assert_eq!(
            limit("agent.max_turns").map(|l| l.describe()),
            Some("a whole number from 1 to 4294967295".to_string())
        );
        assert_eq!(
            limit("session.lock_timeout_s").map(|l| l.describe()),
            Some("more than 0 and at most 3600 seconds".to_string())
        );
        assert_eq!(
            limit("tools.output_max_bytes").map(|l| l.describe()),
            Some("a whole number, at least 1000".to_string())
        );
        assert_eq!(
            limit("hooks.timeout_s").map(|l| l.describe()),
            Some("a number of seconds".to_string())
        );
        assert_eq!(
            accepted(
                "log.level",
                None,
                "unknown variant `loud`, expected one of `error`, `warn`, `info`, `debug` (got \"loud\")"
            ),
            "one of error, warn, info, debug"
        );
        assert_eq!(
            accepted("advisors.enabled", Some(&Value::Bool(true)), ""),
            "true or false"
        );
    }

    #[test]
    fn suggestions_are_few_and_close() {
        let leaves = leaves();
        let known = || leaves.iter().map(|(k, _)| k.as_str());
        assert_eq!(suggestions("modle", known()), vec!["provider.model"]);
        assert_eq!(
            suggestions("session.lock_timout_s", known()),
            vec!["session.lock_timeout_s"]
        );
        assert!(suggestions("timeout", known()).len() <= 5);
        assert!(suggestions("timeout", known()).contains(&"tools.timeout_s"));
        assert_eq!(suggestions("zzzzzzzzzzzz", known()), Vec::<&str>::new());
        assert_eq!(
            hint("lgo.level", leaves.iter().map(|(k, _)| k.clone())),
            "did you mean `log.level`?"
        );
    }

    #[test]
    fn secret_keys_are_recognised() {
        for key in [
            "provider.api_key",
            "api_key",
            "provider.apiKey",
            "provider.token",
        ] {
            assert!(is_secret_key(key), "{key}");
        }
        for key in ["provider.api_key_env", "provider.model", "shell.env_keep"] {
            assert!(!is_secret_key(key), "{key}");
        }
    }
}
