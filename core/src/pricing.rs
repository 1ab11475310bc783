//! Prices per model, and what a request costs at them: the `cost`
//! dimension's quantity.
//!
//! Prices and budgets are plain numbers in one currency of the user's
//! choice. Costs are counted in millionths of it, so that a price per
//! million tokens is a price per token in those units: gpt-4o-mini's $0.15
//! per 1M input tokens is 0.15 micro-dollars a token. Every cost is
//! rounded up, the side that never lets a budget overspend.

use serde::{Deserialize, Serialize};

use crate::{Error, Result, Usage};

/// Units of cost per whole currency unit: costs are counted in millionths.
pub const COST_UNITS_PER_CURRENCY: f64 = 1_000_000.0;

/// A model's prices, per million tokens, in the currency the config's
/// budgets are in.
///
/// ```toml
/// [pricing.gpt-4o]
/// input = 2.50
/// cached_input = 1.25
/// output = 10.00
///
/// [scopes."openai/org-main/gpt-4o"]
/// pricing = "gpt-4o"
/// limits = [{ dimension = "requests", amount = 500, window = "1m" }]
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceConfig {
    /// Per million prompt tokens not read from the prompt cache.
    pub input: f64,
    /// Per million prompt tokens read from the cache. Default: `input`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input: Option<f64>,
    /// Per million completion tokens.
    pub output: f64,
}

/// A compiled price: cost units (millionths of the currency) per token.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Price {
    input: f64,
    cached_input: f64,
    output: f64,
}

/// The most a price per million tokens may be: far above any model's, and
/// low enough that no plausible request's cost overflows.
const MAX_PRICE: f64 = 1_000_000.0;

impl PriceConfig {
    /// Validates the prices of pricing table `name`.
    pub(crate) fn compile(&self, name: &str) -> Result<Price> {
        let check = |field: &str, value: f64| {
            if value.is_finite() && (0.0..=MAX_PRICE).contains(&value) {
                Ok(value)
            } else {
                let reason = format!("a price per million tokens must be between 0 and {MAX_PRICE}");
                Err(Error::config(format!("pricing.{name}.{field}"), value, reason))
            }
        };
        let input = check("input", self.input)?;
        Ok(Price {
            input,
            cached_input: check("cached_input", self.cached_input.unwrap_or(input))?,
            output: check("output", self.output)?,
        })
    }
}

impl Price {
    /// What `usage` costs, in cost units, when `output` completion tokens
    /// are counted (its own, or the expected output).
    #[inline]
    pub fn cost(&self, usage: &Usage, output: u64) -> u64 {
        let cached = usage.cached_input_tokens;
        let uncached = usage.input_tokens - cached;
        let cost = uncached as f64 * self.input + cached as f64 * self.cached_input + output as f64 * self.output;
        // Token counts are at most 2^40 and prices at most 10^6, so this
        // stays far below 2^64 before the cast.
        cost.ceil() as u64
    }
}

/// A budget in currency units as cost units, or why it cannot be one.
pub(crate) fn budget_units(field: &str, budget: f64) -> Result<u64> {
    let units = (budget * COST_UNITS_PER_CURRENCY).floor();
    if !budget.is_finite() || units < 1.0 {
        return Err(Error::config(field, budget, "a budget must be at least one millionth of the currency"));
    }
    if units > (1u64 << 53) as f64 {
        return Err(Error::config(field, budget, "must be at most 9 billion currency units"));
    }
    Ok(units as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpt_4o() -> Price {
        PriceConfig { input: 2.5, cached_input: Some(1.25), output: 10.0 }.compile("gpt-4o").unwrap()
    }

    #[test]
    fn a_million_tokens_cost_the_listed_price() {
        let price = gpt_4o();
        assert_eq!(price.cost(&Usage::new(1_000_000, 0), 0), 2_500_000);
        assert_eq!(price.cost(&Usage::new(0, 0), 1_000_000), 10_000_000);
        assert_eq!(price.cost(&Usage::new(1_000_000, 0).with_cached_input(1_000_000), 0), 1_250_000);
    }

    #[test]
    fn costs_round_up() {
        let mini = PriceConfig { input: 0.15, cached_input: None, output: 0.6 }.compile("mini").unwrap();
        // 10 tokens at 0.15 micro-dollars each: 1.5, charged as 2.
        assert_eq!(mini.cost(&Usage::new(10, 0), 0), 2);
        assert_eq!(mini.cost(&Usage::new(10, 0).with_cached_input(10), 0), 2, "cached input defaults to input");
    }

    #[test]
    fn bad_prices_name_the_field() {
        let err = PriceConfig { input: -1.0, cached_input: None, output: 1.0 }.compile("m").unwrap_err();
        assert!(err.to_string().contains("pricing.m.input"), "{err}");
        let err = PriceConfig { input: 1.0, cached_input: Some(f64::NAN), output: 1.0 }.compile("m").unwrap_err();
        assert!(err.to_string().contains("pricing.m.cached_input"), "{err}");
    }

    #[test]
    fn budgets_convert_to_millionths() {
        assert_eq!(budget_units("b", 12.5).unwrap(), 12_500_000);
        assert!(budget_units("b", 0.0).is_err());
        assert!(budget_units("b", f64::INFINITY).is_err());
        assert!(budget_units("b", 1e12).is_err());
    }
}
