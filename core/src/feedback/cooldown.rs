//! What a provider's 429 holds: which limits of a provider scope it names,
//! and until when they stay empty. The ledger applies it to its own
//! buckets; the Redis backend to the buckets it shares between processes,
//! so that every process holds back, not only the one that was refused.

use super::{Classification, LimitDimension, LimitKind};
use crate::Dimension;

/// Windows at least this long hold daily quotas; shorter ones the
/// per-minute limits that providers report without saying "daily".
const DAILY_WINDOW_NS: u64 = 3_600_000_000_000;

/// How long a 429 that says nothing of when to come back holds a bucket.
const DEFAULT_COOLDOWN_MS: u64 = 1_000;

/// A limit as a provider's answer is matched to it: what it counts, over
/// which window (`None` for concurrency, which has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitShape {
    /// What the limit counts.
    pub dimension: Dimension,
    /// Its window, in nanoseconds.
    pub window_ns: Option<u64>,
}

impl LimitShape {
    /// Whether it holds a daily quota rather than a per-minute rate.
    pub fn is_daily(&self) -> bool {
        self.window_ns.is_some_and(|w| w >= DAILY_WINDOW_NS)
    }

    /// Whether the provider's `reported` dimension is what this limit counts.
    pub(crate) fn reports_on(&self, reported: LimitDimension) -> bool {
        let daily = self.is_daily();
        match reported {
            LimitDimension::DailyRequests => daily && self.dimension == Dimension::Requests,
            LimitDimension::DailyTokens => daily && self.dimension == Dimension::Tokens,
            other => !daily && other.ledger_dimension() == Some(self.dimension),
        }
    }
}

/// What a 429 for `named` refuses on a provider scope of `limits`: the
/// dimension it names where a limit counts it; else the nearest the scope
/// models (a combined `tokens` limit holds input and output tokens, and
/// separate ones hold `tokens`); else nothing in particular, as for a 429
/// naming none. The provider names what it counts, which need not be what
/// the scope models, and its retry-after holds either way.
fn refused_dimensions(named: LimitDimension, limits: &[LimitShape]) -> &'static [LimitDimension] {
    use LimitDimension::*;
    let modelled = |dimensions: &[LimitDimension]| limits.iter().any(|l| dimensions.iter().any(|&d| l.reports_on(d)));
    let (exactly, nearest): (&'static [LimitDimension], &'static [LimitDimension]) = match named {
        Requests => (&[Requests], &[]),
        Tokens => (&[Tokens], &[InputTokens, OutputTokens]),
        InputTokens => (&[InputTokens], &[Tokens]),
        OutputTokens => (&[OutputTokens], &[Tokens]),
        Concurrency => (&[Concurrency], &[]),
        DailyRequests => (&[DailyRequests], &[]),
        DailyTokens => (&[DailyTokens], &[]),
        Unknown => (&[], &[]),
    };
    [exactly, nearest].into_iter().find(|dimensions| modelled(dimensions)).unwrap_or(&[])
}

/// Until when a rate-limited answer holds each of a provider scope's
/// `limits` empty, from `now` (any clock's nanoseconds): `held[i]` for
/// `limits[i]`, `None` where it holds nothing. Empty for an answer that is
/// not a 429 rate limit.
///
/// A 429 holds the limits of the dimension it names (every per-minute limit
/// when it names none: daily quotas only for a 429 that names them) until
/// its retry-after, else that dimension's reset, else 1 s; for one window
/// at most, since a bucket held empty for a whole window has given nothing
/// in it, and a longer wait is another limit's (or absurd:
/// `retry-after: 99999999999`). Budgets (`cost`) are the user's: a provider
/// holds none.
///
/// ```
/// use llmgov::feedback::{classify_response, cooldown, LimitShape, ProviderHint};
/// use llmgov::Dimension;
///
/// let answer = classify_response(429, &[("retry-after", "20"), ("x-ratelimit-remaining-tokens", "0")], b"", ProviderHint::OpenAi, 0);
/// let minute = Some(60_000_000_000);
/// let limits = [
///     LimitShape { dimension: Dimension::Requests, window_ns: minute },
///     LimitShape { dimension: Dimension::Tokens, window_ns: minute },
/// ];
/// assert_eq!(cooldown(&answer, &limits, 5), vec![None, Some(5 + 20_000_000_000)]);
/// ```
pub fn cooldown(feedback: &Classification, limits: &[LimitShape], now: u64) -> Vec<Option<u64>> {
    if feedback.kind != LimitKind::RateLimited {
        return Vec::new();
    }
    let wait_ms = feedback.retry_after_ms.or_else(|| feedback.reset_ms.get(&feedback.dimension).copied());
    let until = now.saturating_add(wait_ms.unwrap_or(DEFAULT_COOLDOWN_MS).saturating_mul(1_000_000));
    let refused = refused_dimensions(feedback.dimension, limits);
    let held = |limit: &LimitShape| match refused {
        // A 429 naming no limit is a rate's: draining a daily quota for it
        // would leave a day of refill to wait out.
        [] => !limit.is_daily(),
        dimensions => dimensions.iter().any(|&d| limit.reports_on(d)),
    };
    limits
        .iter()
        .map(|limit| {
            let window_later = now.saturating_add(limit.window_ns.unwrap_or(u64::MAX));
            (limit.dimension != Dimension::Cost && held(limit)).then(|| until.min(window_later))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::feedback::{classify_response, ProviderHint};

    const MINUTE: Option<u64> = Some(60_000_000_000);
    const DAY: Option<u64> = Some(86_400_000_000_000);

    fn shape(dimension: Dimension, window_ns: Option<u64>) -> LimitShape {
        LimitShape { dimension, window_ns }
    }

    fn answer(status: u16, headers: &[(&str, &str)]) -> Classification {
        classify_response(status, headers, b"", ProviderHint::OpenAi, 0)
    }

    #[test]
    fn a_429_naming_no_limit_holds_every_rate_but_no_daily_quota_nor_budget() {
        let limits = [shape(Dimension::Requests, MINUTE), shape(Dimension::Requests, DAY), shape(Dimension::Cost, DAY)];
        let held = cooldown(&answer(429, &[("retry-after", "3")]), &limits, 0);
        assert_eq!(held, vec![Some(3_000_000_000), None, None]);
    }

    #[test]
    fn a_429_naming_tokens_holds_the_nearest_limits_the_scope_models() {
        let limits = [shape(Dimension::InputTokens, MINUTE), shape(Dimension::OutputTokens, MINUTE)];
        let named = answer(429, &[("retry-after", "2"), ("x-ratelimit-remaining-tokens", "0")]);
        assert_eq!(cooldown(&named, &limits, 0), vec![Some(2_000_000_000); 2]);
    }

    #[test]
    fn the_hold_lasts_one_window_at_most_and_one_second_when_unsaid() {
        let limits = [shape(Dimension::Requests, Some(500_000_000)), shape(Dimension::Tokens, MINUTE)];
        assert_eq!(cooldown(&answer(429, &[]), &limits, 7), vec![Some(500_000_007), Some(1_000_000_007)]);
        let long = answer(429, &[("retry-after", "99999999999")]);
        assert_eq!(cooldown(&long, &limits, 0), vec![Some(500_000_000), Some(60_000_000_000)]);
    }

    #[test]
    fn an_answer_that_is_no_rate_limit_holds_nothing() {
        let limits = [shape(Dimension::Requests, MINUTE)];
        assert!(cooldown(&answer(200, &[]), &limits, 0).is_empty());
        assert!(cooldown(&answer(503, &[("retry-after", "5")]), &limits, 0).is_empty());
    }
}
