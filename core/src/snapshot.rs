//! Point-in-time views of the ledger, serializable as JSON.

use serde::Serialize;

use crate::dimension::CostParts;
use crate::ledger::breaker::State;
use crate::ledger::limit::{Rule, TtlSlots};
use crate::ledger::registry::Scope;
use crate::ledger::Ledger;
use crate::time::NS_PER_MS;
use crate::Dimension;

/// The whole ledger at one moment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Snapshot {
    /// The clock reading the snapshot was taken at, in milliseconds.
    pub now_ms: u64,
    /// Requests admitted.
    pub admitted: u64,
    /// Requests refused for now (rate limited).
    pub rate_limited: u64,
    /// Requests refused because they can never fit.
    pub never_fits: u64,
    /// Requests refused because a provider scope's breaker was open.
    pub circuit_open: u64,
    /// Requests admitted here and then refused by the provider, as reported
    /// through [`crate::Ledger::observe`] (distinct from `rate_limited`,
    /// which llmgov refused itself).
    pub admitted_then_provider_rejected: u64,
    /// Permits that outlived their TTL unsettled: callers that forgot to
    /// settle, or crashed.
    pub expired_permits: u64,
    /// Every scope instantiated so far, in id order.
    pub scopes: Vec<ScopeSnapshot>,
}

/// One scope at one moment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScopeSnapshot {
    /// The scope's path.
    pub path: String,
    /// Its limits, in config order.
    pub limits: Vec<LimitSnapshot>,
    /// Provider scopes only: `closed`, `open` or `half_open`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub breaker: Option<&'static str>,
}

/// One limit of one scope at one moment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LimitSnapshot {
    /// What it counts.
    pub dimension: Dimension,
    /// `token_bucket`, `sliding_window` or `concurrency`.
    pub algorithm: &'static str,
    /// The amount as configured.
    pub configured_amount: u64,
    /// The amount enforced, after the safety margin.
    pub amount: u64,
    /// Provider scopes' token buckets: the amount per window enforced now,
    /// after AIMD, slow start and the provider's `limit` headers (0 while a
    /// limit left to discovery is still unknown).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub effective_amount: Option<u64>,
    /// The most it holds at once.
    pub burst: u64,
    /// Window length in milliseconds; absent for concurrency.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_ms: Option<u64>,
    /// What a request could take now; negative while in debt.
    pub available: i64,
    /// What is taken: charged and not yet refilled or aged out, or in
    /// flight. It is `reserved` plus `used`.
    pub in_use: u64,
    /// What pending permits (admitted, not yet settled, cancelled or
    /// expired) hold here: their estimates, raised by output streamed past
    /// them. On a concurrency limit, the permits in flight.
    pub reserved: u64,
    /// What is in use besides: the charges of settled and expired requests
    /// not yet refilled or aged out of the window. A token bucket refills
    /// reservations too, so a permit held longer than the window can leave
    /// `reserved` above `in_use`; `used` is then 0.
    pub used: u64,
    /// Output and token limits: what each request reserves for its output,
    /// `max_tokens` or `expected`. Where it is `max_tokens`, a tighter
    /// `max_tokens` on requests raises throughput.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reserves_output: Option<&'static str>,
    /// Concurrency only: permits that expired holding a slot here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expired: Option<u64>,
}

impl ScopeSnapshot {
    /// The first limit of `dimension`, if the scope has one.
    pub fn limit(&self, dimension: Dimension) -> Option<&LimitSnapshot> {
        self.limits.iter().find(|l| l.dimension == dimension)
    }
}

pub(crate) fn build(ledger: &Ledger, now: u64) -> Snapshot {
    let counts = ledger.counts(now);
    let reserved = ledger.reserved(now);
    Snapshot {
        now_ms: now / NS_PER_MS,
        admitted: counts.admitted,
        rate_limited: counts.rate_limited,
        never_fits: counts.never_fits,
        circuit_open: counts.circuit_open,
        admitted_then_provider_rejected: counts.provider_rejected,
        expired_permits: counts.expired,
        scopes: ledger
            .registry()
            .iter()
            .map(|(index, s)| scope(s, reserved.get(&index).unwrap_or(&CostParts::default()), now, ledger.ttl()))
            .collect(),
    }
}

/// One scope, whose pending permits reserve `reserved`.
pub(crate) fn scope(scope: &Scope, reserved: &CostParts, now: u64, ttl: TtlSlots) -> ScopeSnapshot {
    let reserved = reserved.costs();
    let limits = scope
        .limits
        .iter()
        .zip(scope.buckets.iter())
        .enumerate()
        .map(|(i, (limit, bucket))| {
            let pace = scope.pace(i);
            let (available, in_use) = limit.usage_at(bucket, now, ttl, pace);
            let reserved = limit.cost(&reserved);
            let effective_amount = match (&limit.rule, pace) {
                (Rule::TokenBucket(p), Some(pace)) => Some(pace.effective_amount(limit.shape(p))),
                _ => None,
            };
            LimitSnapshot {
                dimension: limit.dimension,
                algorithm: match limit.rule {
                    Rule::TokenBucket(_) => "token_bucket",
                    Rule::SlidingWindow { .. } => "sliding_window",
                    Rule::Concurrency { .. } => "concurrency",
                },
                configured_amount: limit.configured_amount,
                amount: limit.amount,
                effective_amount,
                burst: limit.burst,
                window_ms: limit.window_ns.map(|ns| ns / NS_PER_MS),
                available,
                in_use,
                reserved,
                used: in_use.saturating_sub(reserved),
                reserves_output: limit.reserves_output(),
                expired: limit.expired_at(bucket, now, ttl),
            }
        })
        .collect();
    let breaker = scope.adaptation.as_deref().map(|a| match a.breaker.state(now) {
        State::Closed => "closed",
        State::Open => "open",
        State::HalfOpen => "half_open",
    });
    ScopeSnapshot { path: scope.path.to_string(), limits, breaker }
}
