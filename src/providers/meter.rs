//! What a run spends, and its budget (`--max-budget-usd`, `agent.max_budget_usd`).
//!
//! Every model request of the run — its own turns, its subagents', its advisors' — is charged
//! here at the model's price ([`crate::providers::pricing`]). Before each request the turn loop
//! asks whether the run can afford it: the request's cost is estimated from the previous one of
//! the same conversation (its prompt read back from the cache, what was added since written to
//! it, an answer as long), and the run stops before a request that would take the total past
//! the budget.

use std::sync::Mutex;

use super::ToolSpec;
use super::pricing::{Price, price_for};
use crate::config::Config;
use crate::protocol::{Message, Spent, TokenUsage, Usage};

/// Who spent: the session the run is for, an agent it called, or an advisor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spender {
    Subagent,
    Advisor,
}

pub struct Meter {
    model: String,
    price: Option<Price>,
    /// `None`: no limit.
    budget: Option<f64>,
    /// Everything the run spent, at every depth.
    total: Mutex<Spent>,
    /// What the agents and advisors the top-level session called spent (`own` unused).
    called: Mutex<Usage>,
}

/// Why the run stopped before a request.
/// A budget is set but the model has no price: nop could not count against it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "a budget of ${budget:.2} is set (--max-budget-usd / agent.max_budget_usd) but nop has no \
     price for model `{model}`; add one under `pricing` in .nop/config.yml, e.g. pricing: \
     {{\"{model}\": {{input: 3.0, output: 15.0, cache_read: 0.3}}}} (US dollars per million tokens)"
)]
pub struct Unpriced {
    pub budget: f64,
    pub model: String,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "stopped before a model request that would pass the budget of ${budget:.2} (spent ${spent:.4}, the next request would cost about ${next:.4})"
)]
pub struct OverBudget {
    pub budget: f64,
    pub spent: f64,
    pub next: f64,
}

impl Meter {
    pub fn new(config: &Config, model: &str) -> Meter {
        let budget = config.agent.max_budget_usd;
        Meter {
            model: model.to_string(),
            price: price_for(model, &config.pricing),
            budget: (budget > 0.0).then_some(budget),
            total: Mutex::new(Spent::default()),
            called: Mutex::new(Usage::default()),
        }
    }

    /// A budget needs a price: a run with one and a model nop has no price for is refused
    /// before it starts, with what to do.
    pub fn check_priced(&self) -> Result<(), Unpriced> {
        match (self.budget, self.price) {
            (Some(budget), None) => Err(Unpriced {
                budget,
                model: self.model.clone(),
            }),
            _ => Ok(()),
        }
    }

    /// The cost of `tokens` (`None` when the price is unknown), added to the run's total.
    pub fn charge(&self, tokens: &TokenUsage) -> Option<f64> {
        let cost = self.price.map(|p| p.cost(tokens));
        if let Ok(mut total) = self.total.lock() {
            total.record(tokens, cost);
        }
        cost
    }

    /// Whether the run can afford a request estimated at `next`.
    pub fn afford(&self, next: &TokenUsage) -> Result<(), OverBudget> {
        let (Some(budget), Some(price)) = (self.budget, self.price) else {
            return Ok(());
        };
        let spent = self
            .total
            .lock()
            .map(|t| t.cost_usd.unwrap_or(0.0))
            .unwrap_or(0.0);
        let next = price.cost(next);
        if spent + next > budget {
            return Err(OverBudget {
                budget,
                spent,
                next,
            });
        }
        Ok(())
    }

    /// Adds what an agent or advisor called by the top-level session spent.
    pub fn add_called(&self, who: Spender, spent: &Spent) {
        if let Ok(mut called) = self.called.lock() {
            match who {
                Spender::Subagent => called.subagents.add(spent),
                Spender::Advisor => called.advisors.add(spent),
            }
        }
    }

    /// What the top-level session's subagents and advisors spent.
    pub fn called(&self) -> Usage {
        self.called.lock().map(|c| *c).unwrap_or_default()
    }
}

/// The previous request of a conversation: how long its prompt was (in tokens and messages)
/// and its answer.
#[derive(Debug, Clone, Copy)]
pub struct Previous {
    pub tokens: TokenUsage,
    pub messages: usize,
}

/// The tokens the next request of a conversation will likely use. After a previous request,
/// its prompt is read from the cache and what was added since is written; the answer is as long
/// as the last one. The first request writes its whole prompt (estimated at 4 characters a
/// token).
pub fn estimate_next(
    previous: Option<Previous>,
    messages: &[Message],
    tools: &[ToolSpec],
) -> TokenUsage {
    match previous {
        Some(p) if p.messages <= messages.len() => {
            let added = estimate_tokens(&messages[p.messages..]);
            TokenUsage {
                input_tokens: p.tokens.input_tokens + p.tokens.output_tokens + added,
                output_tokens: p.tokens.output_tokens,
                cache_read_tokens: p.tokens.input_tokens,
                cache_write_tokens: p.tokens.output_tokens + added,
                estimated: true,
            }
        }
        // The first request, or one after a compaction rewrote the conversation.
        previous => {
            let tools: usize = tools
                .iter()
                .map(|t| t.name.len() + t.description.len() + t.parameters.to_string().len())
                .sum();
            let input = estimate_tokens(messages) + tools as u64 / 4;
            TokenUsage {
                input_tokens: input,
                output_tokens: previous.map_or(0, |p| p.tokens.output_tokens),
                cache_read_tokens: 0,
                cache_write_tokens: input,
                estimated: true,
            }
        }
    }
}

/// A rough token count (four characters a token, plus a little per message): the pre-check only
/// needs to know when a conversation approaches the window.
pub fn estimate_tokens(messages: &[Message]) -> u64 {
    messages
        .iter()
        .map(|m| {
            let calls: usize = m
                .tool_calls
                .iter()
                .map(|c| c.name.len() + c.arguments.to_string().len())
                .sum();
            ((m.content.len() + calls) / 4 + 4) as u64
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;
    use pretty_assertions::assert_eq;

    fn meter(budget: f64, model: &str) -> Meter {
        let mut config = Config::default();
        config.agent.max_budget_usd = budget;
        Meter::new(&config, model)
    }

    #[test]
    fn a_request_that_would_pass_the_budget_is_not_afforded() {
        let meter = meter(0.10, "gpt-4o");
        // 10,000 uncached input tokens at $2.50/M: $0.025 each.
        let request = TokenUsage {
            input_tokens: 10_000,
            ..TokenUsage::default()
        };
        for _ in 0..3 {
            assert_eq!(meter.afford(&request), Ok(()));
            meter.charge(&request);
        }
        // $0.075 spent; a fourth would make $0.10 exactly (allowed), a fifth would not.
        assert_eq!(meter.afford(&request), Ok(()));
        meter.charge(&request);
        let stop = meter.afford(&request);
        assert!(matches!(stop, Err(OverBudget { .. })), "{stop:?}");
    }

    #[test]
    fn a_budget_without_a_price_is_refused_and_no_budget_needs_none() {
        assert!(meter(1.0, "my-local-model").check_priced().is_err());
        assert!(meter(0.0, "my-local-model").check_priced().is_ok());
        assert_eq!(
            meter(0.0, "my-local-model").charge(&TokenUsage::default()),
            None
        );
    }

    #[test]
    fn the_next_request_reads_the_previous_prompt_and_writes_what_was_added() {
        let messages = vec![
            Message::new(crate::protocol::Role::User, "x".repeat(400), Utc::now()),
            Message::new(crate::protocol::Role::Tool, "y".repeat(4000), Utc::now()),
        ];
        let previous = Previous {
            tokens: TokenUsage {
                input_tokens: 100,
                output_tokens: 20,
                ..TokenUsage::default()
            },
            messages: 1,
        };
        let next = estimate_next(Some(previous), &messages, &[]);
        assert_eq!(next.cache_read_tokens, 100);
        assert_eq!(next.output_tokens, 20);
        assert!(next.cache_write_tokens >= 1000 + 20, "{next:?}");
        assert_eq!(
            next.input_tokens,
            next.cache_read_tokens + next.cache_write_tokens
        );
    }
}
