//! What a model request costs: a built-in table of list prices for the common OpenAI and
//! Anthropic models, under the `pricing` map of the configuration (any model, a local one at 0).
//!
//! A model that is in neither has no price, and its cost is unknown: nop never guesses from a
//! similar name. A built-in entry matches the model's name exactly, or followed by a date
//! (`claude-sonnet-4-5-20250929`, `gpt-4o-2024-08-06`) or `-latest`.

use std::collections::BTreeMap;

use crate::config::ModelPrice;
use crate::protocol::TokenUsage;

/// US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    pub input: f64,
    pub output: f64,
    pub cache_write: f64,
    pub cache_read: f64,
}

impl Price {
    /// What `tokens` cost, in US dollars.
    pub fn cost(&self, tokens: &TokenUsage) -> f64 {
        (tokens.uncached_input() as f64 * self.input
            + tokens.cache_write_tokens as f64 * self.cache_write
            + tokens.cache_read_tokens as f64 * self.cache_read
            + tokens.output_tokens as f64 * self.output)
            / 1_000_000.0
    }
}

impl From<ModelPrice> for Price {
    fn from(p: ModelPrice) -> Price {
        Price {
            input: p.input,
            output: p.output,
            cache_write: p.cache_write.unwrap_or(p.input),
            cache_read: p.cache_read.unwrap_or(p.input),
        }
    }
}

/// List prices (US dollars per million tokens: input, output, cache write, cache read) as the
/// providers published them in November 2025. Anthropic's cache write is the 5-minute one;
/// OpenAI bills no cache write (input price).
const BUILT_IN: &[(&str, [f64; 4])] = &[
    ("claude-opus-4-5", [5.0, 25.0, 6.25, 0.50]),
    ("claude-opus-4-1", [15.0, 75.0, 18.75, 1.50]),
    ("claude-opus-4", [15.0, 75.0, 18.75, 1.50]),
    ("claude-sonnet-4-5", [3.0, 15.0, 3.75, 0.30]),
    ("claude-sonnet-4", [3.0, 15.0, 3.75, 0.30]),
    ("claude-3-7-sonnet", [3.0, 15.0, 3.75, 0.30]),
    ("claude-3-5-sonnet", [3.0, 15.0, 3.75, 0.30]),
    ("claude-haiku-4-5", [1.0, 5.0, 1.25, 0.10]),
    ("claude-3-5-haiku", [0.80, 4.0, 1.0, 0.08]),
    ("claude-3-haiku", [0.25, 1.25, 0.30, 0.03]),
    ("gpt-5.1", [1.25, 10.0, 1.25, 0.125]),
    ("gpt-5", [1.25, 10.0, 1.25, 0.125]),
    ("gpt-5-codex", [1.25, 10.0, 1.25, 0.125]),
    ("gpt-5-mini", [0.25, 2.0, 0.25, 0.025]),
    ("gpt-5-nano", [0.05, 0.40, 0.05, 0.005]),
    ("gpt-4.1", [2.0, 8.0, 2.0, 0.50]),
    ("gpt-4.1-mini", [0.40, 1.60, 0.40, 0.10]),
    ("gpt-4.1-nano", [0.10, 0.40, 0.10, 0.025]),
    ("gpt-4o", [2.50, 10.0, 2.50, 1.25]),
    ("gpt-4o-mini", [0.15, 0.60, 0.15, 0.075]),
    ("o3", [2.0, 8.0, 2.0, 0.50]),
    ("o4-mini", [1.10, 4.40, 1.10, 0.275]),
];

/// The price of `model`: the configuration's `pricing` entry for exactly that name, else the
/// built-in one; `None` when neither knows it.
pub fn price_for(model: &str, configured: &BTreeMap<String, ModelPrice>) -> Option<Price> {
    if let Some(price) = configured.get(model) {
        return Some((*price).into());
    }
    BUILT_IN
        .iter()
        .find(|(name, _)| is_version_of(model, name))
        .map(|(_, [input, output, cache_write, cache_read])| Price {
            input: *input,
            output: *output,
            cache_write: *cache_write,
            cache_read: *cache_read,
        })
}

/// `model` is `name`, or `name` with a release date or `-latest` after it.
fn is_version_of(model: &str, name: &str) -> bool {
    let Some(rest) = model.strip_prefix(name) else {
        return false;
    };
    let digits = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit() || c == '-');
    match rest.strip_prefix('-') {
        None => rest.is_empty(),
        Some("latest") => true,
        Some(date) => digits(date) && date.chars().filter(char::is_ascii_digit).count() == 8,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn dated_names_match_and_similar_names_do_not() {
        let none = BTreeMap::new();
        let input = |m: &str| price_for(m, &none).map(|p| p.input);
        assert_eq!(input("claude-sonnet-4-5-20250929"), Some(3.0));
        assert_eq!(input("gpt-4o-2024-08-06"), Some(2.5));
        assert_eq!(input("gpt-4o-mini"), Some(0.15));
        assert_eq!(input("claude-3-5-sonnet-latest"), Some(3.0));
        // A name that only starts like a known one has no price, never a guessed one.
        assert_eq!(input("gpt-5-pro"), None);
        assert_eq!(input("gpt-4o-audio-preview"), None);
        assert_eq!(input("llama3:8b"), None);
    }

    #[test]
    fn the_configuration_wins_and_cache_prices_default_to_the_input_price() {
        let mut configured = BTreeMap::new();
        configured.insert(
            "gpt-4o".to_string(),
            ModelPrice {
                input: 1.0,
                output: 2.0,
                cache_write: None,
                cache_read: Some(0.5),
            },
        );
        let price = price_for("gpt-4o", &configured);
        assert_eq!(
            price,
            Some(Price {
                input: 1.0,
                output: 2.0,
                cache_write: 1.0,
                cache_read: 0.5
            })
        );
    }

    #[test]
    fn cached_tokens_are_billed_at_the_cache_prices() {
        let price = Price {
            input: 3.0,
            output: 15.0,
            cache_write: 3.75,
            cache_read: 0.30,
        };
        let tokens = TokenUsage {
            input_tokens: 1_000_000,
            output_tokens: 100_000,
            cache_read_tokens: 800_000,
            cache_write_tokens: 100_000,
            estimated: false,
        };
        // 100k uncached at 3, 100k written at 3.75, 800k read at 0.30, 100k out at 15.
        let expected = 0.3 + 0.375 + 0.24 + 1.5;
        assert!((price.cost(&tokens) - expected).abs() < 1e-9);
    }
}
