//! What a provider's answer changes in the ledger: the limits of the
//! route's provider scopes follow its rate-limit headers and its 429s.

use std::sync::atomic::Ordering;

use super::limit::Limit;
use super::permit::Route;
use super::Ledger;
use crate::feedback::{Classification, LimitDimension, LimitKind};
use crate::{Dimension, Result};

/// Windows at least this long hold daily quotas; shorter ones the
/// per-minute limits that providers report without saying "daily".
const DAILY_WINDOW_NS: u64 = 3_600_000_000_000;

/// How long a 429 that says nothing of when to come back holds a bucket.
const DEFAULT_COOLDOWN_MS: u64 = 1_000;

/// Whether the provider's `reported` dimension is what `limit` counts.
fn reports_on(reported: LimitDimension, limit: &Limit) -> bool {
    let daily = limit.window_ns.is_some_and(|w| w >= DAILY_WINDOW_NS);
    match reported {
        LimitDimension::DailyRequests => daily && limit.dimension == Dimension::Requests,
        LimitDimension::DailyTokens => daily && limit.dimension == Dimension::Tokens,
        other => !daily && other.ledger_dimension() == Some(limit.dimension),
    }
}

impl Ledger {
    /// Feeds a provider's answer to a request on `route` back into the
    /// limits of the route's provider scopes (scopes configured with
    /// `provider = true`; other scopes are llmgov's own budgets):
    /// - a `remaining` count lower than a bucket believes takes it down to it;
    /// - a 429 rate limit empties the bucket of the dimension it names (every
    ///   bucket of the provider scope when it names none) and holds it empty
    ///   until the retry-after, else that dimension's reset, else 1 s.
    ///
    /// Every refusal counts as admitted-then-rejected in the snapshot. Only
    /// token buckets move: sliding windows and concurrency have no timeline
    /// to push. Returns how many limits changed.
    pub fn observe(&self, route: Route, feedback: &Classification, now: u64) -> Result<usize> {
        self.check_route(route)?;
        if feedback.limited {
            self.refusals.provider_rejected.fetch_add(1, Ordering::Relaxed);
        }
        let cool_until = (feedback.kind == LimitKind::RateLimited).then(|| {
            let wait_ms = feedback.retry_after_ms.or_else(|| feedback.reset_ms.get(&feedback.dimension).copied());
            now.saturating_add(wait_ms.unwrap_or(DEFAULT_COOLDOWN_MS).saturating_mul(1_000_000))
        });
        let named = feedback.dimension != LimitDimension::Unknown;
        let mut changed = 0;
        for &index in self.registry.route(route.id) {
            let scope = self.registry.get(index);
            if !scope.provider {
                continue;
            }
            for (limit, bucket) in scope.limits.iter().zip(scope.buckets.iter()) {
                let remaining = feedback.remaining.iter().find(|(d, _)| reports_on(**d, limit)).map(|(_, &r)| r);
                let cool = cool_until.filter(|_| !named || reports_on(feedback.dimension, limit));
                changed += usize::from(limit.feed_back(bucket, remaining, cool, now));
            }
        }
        Ok(changed)
    }
}
