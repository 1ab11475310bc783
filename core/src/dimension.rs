//! What a limit counts, and what a request costs on it.

use serde::{Deserialize, Serialize};

use crate::pricing::Price;

/// The quantity a limit counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dimension {
    /// Requests started in the window.
    Requests,
    /// Prompt tokens in the window.
    InputTokens,
    /// Completion tokens in the window.
    OutputTokens,
    /// Prompt plus completion tokens in the window.
    Tokens,
    /// Requests in flight at once; has no window.
    Concurrency,
    /// Money spent in the window, priced by the route's pricing table, in
    /// millionths of the currency the prices are in (see [`crate::config::PriceConfig`]).
    Cost,
}

impl Dimension {
    /// The name used in configs, scenarios, errors and every binding.
    pub fn as_str(self) -> &'static str {
        match self {
            Dimension::Requests => "requests",
            Dimension::InputTokens => "input_tokens",
            Dimension::OutputTokens => "output_tokens",
            Dimension::Tokens => "tokens",
            Dimension::Concurrency => "concurrency",
            Dimension::Cost => "cost",
        }
    }
}

impl std::fmt::Display for Dimension {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The most tokens any one count may hold: about a trillion, far past any
/// model's context, and far enough below 2^64 that sums never overflow.
pub const MAX_TOKENS: u64 = 1 << 40;

/// The error for a token count above [`MAX_TOKENS`].
#[cold]
pub(crate) fn too_many_tokens(field: &'static str, value: u64) -> crate::Error {
    crate::Error::InvalidRequest {
        field,
        value: value.to_string(),
        reason: format!("more than {MAX_TOKENS} tokens; no request is that large"),
    }
}

/// Token counts of one request: the estimate at admission, or the actual
/// usage at settlement.
///
/// `input_tokens` includes `cached_input_tokens` (as OpenAI reports
/// `prompt_tokens`); limits that do not count cache reads (Anthropic's input
/// limit) subtract them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Usage {
    /// All prompt tokens, cached ones included.
    #[serde(default)]
    pub input_tokens: u64,
    /// The part of `input_tokens` read from the provider's prompt cache.
    #[serde(default)]
    pub cached_input_tokens: u64,
    /// Completion tokens: reserved (the estimate) or produced (the actual).
    #[serde(default)]
    pub output_tokens: u64,
}

impl Usage {
    /// Usage of `input_tokens` prompt and `output_tokens` completion tokens, none cached.
    pub fn new(input_tokens: u64, output_tokens: u64) -> Self {
        Usage { input_tokens, cached_input_tokens: 0, output_tokens }
    }

    /// The same usage with `cached` of its input tokens read from cache.
    pub fn with_cached_input(mut self, cached: u64) -> Self {
        self.cached_input_tokens = cached;
        self
    }

    /// Checks that every count is plausible (at most [`MAX_TOKENS`]) and
    /// the cached part does not exceed the whole: the checks the ledger
    /// makes of every estimate and settlement, for backends that charge a
    /// usage elsewhere. The error names the field and the value.
    #[inline]
    pub fn validate(&self) -> crate::Result<()> {
        let largest = self.input_tokens.max(self.output_tokens);
        if largest > MAX_TOKENS || self.cached_input_tokens > self.input_tokens {
            return Err(self.invalid());
        }
        Ok(())
    }

    #[cold]
    fn invalid(&self) -> crate::Error {
        for (field, value) in [("input_tokens", self.input_tokens), ("output_tokens", self.output_tokens)] {
            if value > MAX_TOKENS {
                return too_many_tokens(field, value);
            }
        }
        crate::Error::InvalidRequest {
            field: "cached_input_tokens",
            value: self.cached_input_tokens.to_string(),
            reason: format!("exceeds input_tokens ({})", self.input_tokens),
        }
    }
}

/// Which of a request's quantities a limit charges: its dimension, for
/// input whether cache reads count, and for output whether the limit
/// reserves `max_tokens` or the expected output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CostKind {
    /// One per request: the requests and concurrency dimensions.
    One,
    Input,
    UncachedInput,
    Output,
    Tokens,
    UncachedTokens,
    ExpectedOutput,
    ExpectedTokens,
    UncachedExpectedTokens,
    /// The request's price, with `max_tokens` as its output.
    Cost,
    /// The request's price, with the expected output.
    ExpectedCost,
}

impl CostKind {
    pub fn of(dimension: Dimension, count_cached_input: bool, reserve_expected: bool) -> Self {
        use CostKind::*;
        match (dimension, count_cached_input, reserve_expected) {
            (Dimension::Requests | Dimension::Concurrency, _, _) => One,
            (Dimension::InputTokens, true, _) => Input,
            (Dimension::InputTokens, false, _) => UncachedInput,
            (Dimension::OutputTokens, _, false) => Output,
            (Dimension::OutputTokens, _, true) => ExpectedOutput,
            (Dimension::Tokens, true, false) => Tokens,
            (Dimension::Tokens, false, false) => UncachedTokens,
            (Dimension::Tokens, true, true) => ExpectedTokens,
            (Dimension::Tokens, false, true) => UncachedExpectedTokens,
            (Dimension::Cost, _, false) => Cost,
            (Dimension::Cost, _, true) => ExpectedCost,
        }
    }

    /// Whether output tokens count: streamed output must be charged here.
    pub fn counts_output(self) -> bool {
        !matches!(self, CostKind::One | CostKind::Input | CostKind::UncachedInput)
    }
}

/// What one usage costs on each [`CostKind`], worked out once per call
/// instead of once per limit (a route of six scopes has two dozen limits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Costs([u64; 11]);

impl Costs {
    /// Costs of nothing at all: what a cancelled request is charged.
    pub const NONE: Costs = Costs([0; 11]);

    /// The costs of `usage`, where limits that reserve the expected output
    /// count `expected_output` instead of `usage.output_tokens`, priced at
    /// `price` (a route without one has no cost limits: see
    /// [`crate::ledger::Ledger::route`]).
    #[inline]
    pub fn of(usage: &Usage, expected_output: u64, price: Option<&Price>) -> Self {
        let (input, uncached) = (usage.input_tokens, usage.input_tokens - usage.cached_input_tokens);
        let (out, expected) = (usage.output_tokens, expected_output);
        let cost = |output| price.map_or(0, |p| p.cost(usage, output));
        Self::from_parts([1, input, uncached, out, expected, cost(out), cost(expected)])
    }

    /// The costs of every kind, from the parts each is a sum of (see
    /// [`CostParts`]): `[count, input, uncached input, output, expected
    /// output, cost, expected cost]`.
    #[inline(always)]
    fn from_parts([one, input, uncached, out, expected, cost, expected_cost]: [u64; CostParts::LEN]) -> Self {
        Costs([
            one,
            input,
            uncached,
            out,
            input.saturating_add(out),
            uncached.saturating_add(out),
            expected,
            input.saturating_add(expected),
            uncached.saturating_add(expected),
            cost,
            expected_cost,
        ])
    }

    /// The costs of an actual usage: there is no expectation left.
    #[inline]
    pub fn actual(usage: &Usage, price: Option<&Price>) -> Self {
        Self::of(usage, usage.output_tokens, price)
    }

    #[inline]
    pub fn get(&self, kind: CostKind) -> u64 {
        self.0[kind as usize]
    }
}

/// The parts every [`CostKind`] of a [`Costs`] is a sum of: one, input,
/// uncached input, output, expected output, cost and expected cost. Sums of
/// parts give sums of costs, so books can keep seven numbers per route
/// instead of eleven. Signed: a permit booked on one thread may be taken
/// off on another.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CostParts(pub [i64; CostParts::LEN]);

impl CostParts {
    pub const LEN: usize = 7;

    /// One permit, reserving nothing else.
    pub const ONE: CostParts = CostParts([1, 0, 0, 0, 0, 0, 0]);

    #[inline]
    pub fn of(costs: &Costs) -> Self {
        let c = &costs.0;
        CostParts([c[0], c[1], c[2], c[3], c[6], c[9], c[10]].map(|v| v as i64))
    }

    /// `self - other`, part by part.
    #[inline]
    pub fn minus(&self, other: &CostParts) -> Self {
        CostParts(std::array::from_fn(|i| self.0[i].wrapping_sub(other.0[i])))
    }

    /// Adds `other`, part by part.
    pub fn add(&mut self, other: &CostParts) {
        self.0.iter_mut().zip(other.0).for_each(|(a, b)| *a = a.wrapping_add(b));
    }

    /// The costs these parts add up to; a part below zero (a sum read while
    /// another thread updates it) counts as zero.
    pub fn costs(&self) -> Costs {
        Costs::from_parts(self.0.map(|v| v.max(0) as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pricing::PriceConfig;

    #[test]
    fn sums_of_parts_give_sums_of_costs() {
        let price = PriceConfig { input: 2.5, cached_input: Some(1.25), output: 10.0 }.compile("gpt").unwrap();
        let requests =
            [(Usage::new(1200, 300).with_cached_input(200), 150), (Usage::new(7, 4000), 4000), (Usage::new(0, 0), 0)];
        let costs: Vec<Costs> =
            requests.iter().map(|(usage, expected)| Costs::of(usage, *expected, Some(&price))).collect();
        let mut parts = CostParts::default();
        costs.iter().for_each(|c| parts.add(&CostParts::of(c)));
        let summed = parts.costs();
        for kind in 0..11 {
            assert_eq!(summed.0[kind], costs.iter().map(|c| c.0[kind]).sum::<u64>(), "kind {kind}");
        }
        assert_eq!(parts.minus(&CostParts::of(&costs[0])).costs(), {
            let mut rest = CostParts::of(&costs[1]);
            rest.add(&CostParts::of(&costs[2]));
            rest.costs()
        });
    }
}
