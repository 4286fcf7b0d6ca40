//! What model requests used and cost: the tokens of one request ([`TokenUsage`]), a running
//! total with its price in US dollars ([`Spent`]), and a session's total with what the agents and
//! advisors it called spent, shown apart ([`Usage`], `usage` in session.json).
//!
//! A cost is `None` when it is not known (no price for the model): never a made-up figure. A
//! total with one unknown part is unknown.

use serde::{Deserialize, Serialize};

/// The tokens of one model request (or a sum of them). `input_tokens` is the whole prompt,
/// cached parts included; `cache_read_tokens` of it were served from the provider's prompt
/// cache and `cache_write_tokens` were written to it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    /// The server reported no usage: the figures are nop's estimate (four characters a token).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub estimated: bool,
}

impl TokenUsage {
    /// The input tokens billed at the full input price.
    pub fn uncached_input(&self) -> u64 {
        self.input_tokens
            .saturating_sub(self.cache_read_tokens)
            .saturating_sub(self.cache_write_tokens)
    }
}

/// A running total of requests: tokens and cost (camelCase in session.json).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Spent {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub requests: u64,
    /// How many of the requests reported no usage, so that their tokens are nop's estimate.
    #[serde(skip_serializing_if = "is_zero")]
    pub estimated_requests: u64,
    /// US dollars; absent when unknown (no price for the model of one of the requests, or a
    /// session written before nop counted costs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

impl Spent {
    /// Adds one request and its cost.
    pub fn record(&mut self, tokens: &TokenUsage, cost: Option<f64>) {
        self.add(&Spent {
            input_tokens: tokens.input_tokens,
            output_tokens: tokens.output_tokens,
            cache_read_tokens: tokens.cache_read_tokens,
            cache_write_tokens: tokens.cache_write_tokens,
            requests: 1,
            estimated_requests: u64::from(tokens.estimated),
            cost_usd: cost,
        });
    }

    /// Adds another total. Nothing spent adds nothing; an unknown cost makes the sum unknown.
    pub fn add(&mut self, other: &Spent) {
        if other.requests == 0 && other.input_tokens == 0 && other.output_tokens == 0 {
            return;
        }
        self.cost_usd = match (self.is_empty(), self.cost_usd, other.cost_usd) {
            (true, _, cost) => cost,
            (false, Some(a), Some(b)) => Some(a + b),
            _ => None,
        };
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_read_tokens += other.cache_read_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
        self.requests += other.requests;
        self.estimated_requests += other.estimated_requests;
    }

    pub fn is_empty(&self) -> bool {
        self.requests == 0 && self.input_tokens == 0 && self.output_tokens == 0
    }

    /// The cost for a person: `$0.0123`, or `unknown`.
    pub fn cost_text(&self) -> String {
        cost_text(self.cost_usd)
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A cost for a person: `$0.0123` (four decimals below a dollar), `$12.34`, or `unknown`.
pub fn cost_text(cost: Option<f64>) -> String {
    match cost {
        Some(c) if c < 1.0 => format!("${c:.4}"),
        Some(c) => format!("${c:.2}"),
        None => "unknown".to_string(),
    }
}

/// A session's `usage` in session.json: its own requests at the top level, and what the agents
/// and advisors it called spent for it (each of those also in its own session), shown apart.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    #[serde(flatten)]
    pub own: Spent,
    #[serde(default, skip_serializing_if = "Spent::is_empty")]
    pub subagents: Spent,
    #[serde(default, skip_serializing_if = "Spent::is_empty")]
    pub advisors: Spent,
}

impl Usage {
    /// Everything: own requests, subagents and advisors.
    pub fn total(&self) -> Spent {
        let mut total = self.own;
        total.add(&self.subagents);
        total.add(&self.advisors);
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn tokens(input: u64) -> TokenUsage {
        TokenUsage {
            input_tokens: input,
            output_tokens: 1,
            ..TokenUsage::default()
        }
    }

    #[test]
    fn one_unknown_cost_makes_the_total_unknown_and_nothing_spent_changes_nothing() {
        let mut spent = Spent::default();
        spent.record(&tokens(10), Some(0.5));
        spent.record(&tokens(10), Some(0.25));
        assert_eq!(spent.cost_usd, Some(0.75));
        spent.add(&Spent::default());
        assert_eq!(spent.cost_usd, Some(0.75));
        spent.record(&tokens(10), None);
        assert_eq!((spent.cost_usd, spent.requests), (None, 3));
        spent.record(&tokens(10), Some(1.0));
        assert_eq!(spent.cost_usd, None);
    }

    #[test]
    fn a_session_written_before_costs_were_counted_has_an_unknown_cost() -> serde_json::Result<()> {
        let old: Usage =
            serde_json::from_str(r#"{"inputTokens": 5, "outputTokens": 2, "requests": 1}"#)?;
        assert_eq!(old.own.cost_usd, None);
        let mut usage = old;
        usage.own.record(&tokens(1), Some(1.0));
        assert_eq!(usage.total().cost_usd, None);
        let fresh = serde_json::to_value(Usage::default())?;
        assert_eq!(
            fresh,
            serde_json::json!({"inputTokens": 0, "outputTokens": 0, "cacheReadTokens": 0, "cacheWriteTokens": 0, "requests": 0})
        );
        Ok(())
    }

    #[test]
    fn costs_read_as_a_person_expects() {
        assert_eq!(cost_text(Some(0.01234)), "$0.0123");
        assert_eq!(cost_text(Some(12.345)), "$12.35");
        assert_eq!(cost_text(None), "unknown");
    }
}
