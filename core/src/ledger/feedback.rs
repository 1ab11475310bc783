//! What a provider's answer changes in the ledger: the limits of the
//! route's provider scopes follow its rate-limit headers and its 429s.

use std::sync::atomic::Ordering;

use super::limit::{Limit, ProviderWord};
use super::permit::{Permit, Route};
use super::registry::{Adaptation, Scope};
use super::Ledger;
use crate::feedback::{cooldown, Classification, LimitDimension, LimitKind, LimitShape};
use crate::{Dimension, Result};

/// The windows providers' `limit` headers state amounts in: a discovered
/// limit has one of them (see [`states_amount_of`]).
pub(crate) const MINUTE_NS: u64 = 60_000_000_000;
pub(crate) const DAY_NS: u64 = 24 * 60 * MINUTE_NS;

/// What the provider's answers are matched to.
fn shape_of(limit: &Limit) -> LimitShape {
    LimitShape { dimension: limit.dimension, window_ns: limit.window_ns }
}

/// Whether a `limit` header for `reported` states `limit`'s amount: the
/// windows must match, a minute for per-minute headers, a day for daily ones.
fn states_amount_of(reported: LimitDimension, limit: &Limit) -> bool {
    let window = if matches!(reported, LimitDimension::DailyRequests | LimitDimension::DailyTokens) {
        DAY_NS
    } else {
        MINUTE_NS
    };
    limit.window_ns == Some(window) && shape_of(limit).reports_on(reported)
}

/// A provider scope's breaker opened (or, `open` false, closed).
#[derive(Debug, Clone)]
pub(crate) struct BreakerChange {
    pub scope: std::sync::Arc<str>,
    pub open: bool,
}

/// What an answer is to a breaker: `Some(true)` a success, `Some(false)` a
/// failure of the provider's.
fn verdict(feedback: &Classification) -> Option<bool> {
    match (feedback.kind, feedback.status) {
        // The request's own fault: says nothing of the provider.
        (LimitKind::TooLarge, _) => None,
        // By status, not `retryable`: `x-should-retry: false` on a 500
        // (Anthropic sends it) says not to retry, not that the provider is well.
        (LimitKind::None, 0) => Some(!feedback.retryable),
        (LimitKind::None, status) => Some(!(status >= 500 || matches!(status, 408 | 409))),
        _ => Some(false),
    }
}

impl Ledger {
    /// Feeds a provider's answer to a request on `route` back into the
    /// route's provider scopes (scopes configured with `provider = true`;
    /// other scopes are llmgov's own budgets):
    /// - a `limit` header sets a token bucket's amount where the config left
    ///   it unset, or lowers it where the provider's is lower (discovery; a
    ///   limit of 0 is ignored);
    /// - a `remaining` count lower than a bucket believes takes it down to it;
    /// - a 429 rate limit empties the bucket of the dimension it names (every
    ///   per-minute bucket of the provider scope when it names none: daily
    ///   quotas only for a 429 that names them), holds it empty
    ///   until the retry-after (else that dimension's reset, else 1 s; for
    ///   one window at most: longer is another limit's wait), and
    ///   multiplies its rate by the AIMD decrease; a window with successes
    ///   adds a step back;
    /// - consecutive failures (429s, 5xx, 529) open the scope's breaker, and
    ///   the success of the probe after its pause closes it (restarting a
    ///   ramp, if configured).
    ///
    /// Without the permit, a 429 within a second of the last decrease counts
    /// as the same overload; [`Self::report`] dates it by its permit. Every
    /// refusal counts as admitted-then-rejected in the snapshot. Sliding
    /// windows and concurrency have no timeline to push. Returns how many
    /// limits changed.
    pub fn observe(&self, route: Route, feedback: &Classification, now: u64) -> Result<usize> {
        self.check_route(route)?;
        Ok(self.feed_back(route, feedback, None, now, &mut Vec::new()))
    }

    /// [`Self::observe`] for the answer to `permit`'s request: a 429 for a
    /// request sent before the last decrease or breaker opening is old news
    /// and lowers the rate only once.
    pub fn report(&self, permit: &Permit, feedback: &Classification, now: u64) -> Result<usize> {
        self.check_route(permit.route)?;
        Ok(self.feed_back(permit.route, feedback, Some(permit.acquired_at), now, &mut Vec::new()))
    }

    /// [`Self::observe`] (`sent_at` `None`) or [`Self::report`], noting in
    /// `changes` every breaker that opened or closed.
    pub(crate) fn feed_back_noting(
        &self,
        route: Route,
        feedback: &Classification,
        sent_at: Option<u64>,
        now: u64,
        changes: &mut Vec<BreakerChange>,
    ) -> Result<usize> {
        self.check_route(route)?;
        Ok(self.feed_back(route, feedback, sent_at, now, changes))
    }

    /// When the circuit breaker of provider scope `path` lets a request
    /// through again (its pause's end, or the hold of the probe out), on
    /// the ledger's clock; `None` while closed, and for a path that is no
    /// provider scope here.
    pub fn breaker_open_until(&self, path: &str) -> Option<u64> {
        let scope = self.registry.get(self.registry.lookup(path)?);
        scope.adaptation.as_deref()?.breaker.open_until()
    }

    /// The paths of the provider scopes on `route`.
    pub(crate) fn provider_paths(&self, route: Route) -> Vec<String> {
        let scopes = self.registry.route(route.id).iter();
        scopes.filter(|s| s.provider).map(|s| s.path.to_string()).collect()
    }

    /// Tells `scope`'s breaker how the request went, recording any change
    /// in `changes`; whether the breaker closed again.
    fn judge_breaker(
        &self,
        scope: &Scope,
        adaptation: &Adaptation,
        feedback: &Classification,
        sent_at: Option<u64>,
        now: u64,
        changes: &mut Vec<BreakerChange>,
    ) -> bool {
        let reopened = match verdict(feedback) {
            Some(true) => adaptation.breaker.succeeded(sent_at),
            Some(false) => {
                if adaptation.breaker.failed(&self.registry.adaptive, sent_at, now) {
                    changes.push(BreakerChange { scope: scope.path.clone(), open: true });
                }
                false
            }
            None => false,
        };
        if reopened {
            changes.push(BreakerChange { scope: scope.path.clone(), open: false });
        }
        reopened
    }

    fn feed_back(
        &self,
        route: Route,
        feedback: &Classification,
        sent_at: Option<u64>,
        now: u64,
        changes: &mut Vec<BreakerChange>,
    ) -> usize {
        if feedback.limited {
            self.refusals.provider_rejected.fetch_add(1, Ordering::Relaxed);
        }
        let adaptive = &self.registry.adaptive;
        let mut changed = 0;
        for scope in self.registry.route(route.id) {
            let Some(adaptation) = scope.adaptation.as_deref() else { continue };
            let reopened = self.judge_breaker(scope, adaptation, feedback, sent_at, now, changes);
            let shapes: Vec<LimitShape> = scope.limits.iter().map(shape_of).collect();
            let held = cooldown(feedback, &shapes, now);
            for (l, (limit, bucket)) in scope.limits.iter().zip(scope.buckets.iter()).enumerate() {
                // A budget is the user's, not the provider's: nothing it says moves it.
                if limit.dimension == Dimension::Cost {
                    continue;
                }
                let pace = &adaptation.paces[l];
                if reopened {
                    pace.restart(adaptive, now);
                }
                let find = |map: &std::collections::BTreeMap<LimitDimension, u64>,
                            f: fn(LimitDimension, &Limit) -> bool| {
                    map.iter().find(|(d, _)| f(**d, limit)).map(|(_, &v)| v)
                };
                let cooled = held.get(l).copied().flatten();
                let word = ProviderWord {
                    limit: find(&feedback.limit, states_amount_of),
                    remaining: find(&feedback.remaining, |d, limit| shape_of(limit).reports_on(d)),
                    cool_until: cooled,
                };
                changed += usize::from(limit.feed_back(bucket, pace, word, now, self.ttl));
                if cooled.is_some() {
                    pace.decrease(adaptive, sent_at, now);
                } else if let (Some(true), Some(window)) = (verdict(feedback), limit.window_ns) {
                    pace.increase(adaptive, window, now);
                }
            }
        }
        changed
    }
}
