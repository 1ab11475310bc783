//! Everything a governor exposes at one moment, in one serializable value:
//! the ledger's snapshot, the waiting queues, and what the governor observed
//! beyond them (refusals by dimension and by who refused, estimate errors,
//! retry amplification). The Prometheus exposition is drawn from it, and
//! `llmgov top` reads its JSON, so the two never disagree.

use serde::Serialize;

use crate::scheduler::QueueMetrics;
use crate::tokens::ErrorSummary;
use crate::Snapshot;

/// A governor's whole observable state: [`crate::Governor::metrics`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Metrics {
    /// Every scope, limit and counter.
    pub snapshot: Snapshot,
    /// The waiting queues, per traffic class.
    pub queues: QueueMetrics,
    /// Refused requests by the dimension named and by who refused, one
    /// entry per pair (zeros included, so a dashboard sees every series).
    pub refusals: Vec<RefusalCount>,
    /// How far settled requests were from their estimates, per provider
    /// route and side.
    pub estimate_errors: Vec<EstimateError>,
    /// Requests sent per request the provider did not refuse: admitted ÷
    /// (admitted − provider rejections); 1.0 before anything is admitted.
    /// While nothing admitted has succeeded it is admitted ÷ 1, so that a
    /// provider refusing every request reads as the worst, not as 1.0.
    pub retry_amplification: f64,
}

/// Refusals of one dimension by one party.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RefusalCount {
    /// The dimension the refusal named: a ledger dimension, or `none` for
    /// local refusals that name none (an open breaker, a full queue); for
    /// the provider's, also `daily_requests`, `daily_tokens`, or `unknown`
    /// where it did not say.
    pub dimension: &'static str,
    /// `rejected_locally` (llmgov refused before sending) or
    /// `admitted_then_provider_rejected` (the provider refused after llmgov
    /// admitted).
    pub gateway_decision: &'static str,
    /// How many.
    pub count: u64,
}

/// The estimate error of one provider route on one side.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EstimateError {
    /// The route's scope paths, outermost first.
    pub scopes: Vec<String>,
    /// `input` or `output`.
    pub side: &'static str,
    /// Quantiles of actual ÷ estimated − 1 (0.25 is 25% under).
    #[serde(flatten)]
    pub error: ErrorSummary,
}

impl Metrics {
    /// Admitted ÷ admitted requests the provider did not refuse (see
    /// [`Metrics::retry_amplification`]); finite, since JSON has no infinity.
    pub(crate) fn amplification(snapshot: &Snapshot) -> f64 {
        if snapshot.admitted == 0 {
            return 1.0;
        }
        let successes = snapshot.admitted.saturating_sub(snapshot.admitted_then_provider_rejected);
        snapshot.admitted as f64 / successes.max(1) as f64
    }
}
