//! The core's [`llmgov::Metrics`], everything a governor exposes at one
//! moment, as one plain JavaScript object (camelCase), built from the same
//! conversions as `snapshot()` and `queueMetrics()`; and as the core's JSON
//! text, unchanged, for `llmgov top` and every other language.

use napi_derive::napi;

use crate::snapshot::{queue_metrics, snapshot, QueueMetrics, Snapshot};

/// A governor's whole observable state.
#[napi(object)]
pub struct Metrics {
    /// Every scope, limit and counter (as `snapshot()`).
    pub snapshot: Snapshot,
    /// The waiting queues, per traffic class (as `queueMetrics()`).
    pub queues: QueueMetrics,
    /// Refused requests by the dimension named and by who refused, one
    /// entry per pair, zeros included.
    pub refusals: Vec<RefusalCount>,
    /// How far settled requests were from their estimates, per provider
    /// route and side.
    pub estimate_errors: Vec<EstimateErrorSummary>,
    /// Requests sent per request the provider did not refuse: admitted ÷
    /// (admitted − provider rejections); 1 before any success.
    pub retry_amplification: f64,
}

/// Refusals of one dimension by one party.
#[napi(object)]
pub struct RefusalCount {
    /// The dimension the refusal named: a ledger dimension, or `none` for
    /// local refusals that name none (an open breaker, a full queue); for
    /// the provider's, also `daily_requests`, `daily_tokens`, or `unknown`.
    pub dimension: String,
    /// `rejected_locally` (llmgov refused before sending) or
    /// `admitted_then_provider_rejected` (the provider refused after).
    #[napi(ts_type = "'rejected_locally' | 'admitted_then_provider_rejected'")]
    pub gateway_decision: String,
    /// How many.
    pub count: f64,
}

/// The estimate error of one provider route on one side: quantiles of
/// actual ÷ estimated − 1 (0.25 is 25% under).
#[napi(object)]
pub struct EstimateErrorSummary {
    /// The route's scope paths, outermost first.
    pub scopes: Vec<String>,
    /// `input` or `output`.
    #[napi(ts_type = "'input' | 'output'")]
    pub side: String,
    /// Settled requests the quantiles are drawn from.
    pub samples: f64,
    /// The 5th percentile.
    pub p05: f64,
    /// The median: the estimate's bias.
    pub p50: f64,
    /// The 95th percentile.
    pub p95: f64,
}

/// Converts the core's metrics.
pub fn metrics(m: &llmgov::Metrics) -> Metrics {
    Metrics {
        snapshot: snapshot(&m.snapshot),
        queues: queue_metrics(&m.queues),
        refusals: m
            .refusals
            .iter()
            .map(|r| RefusalCount {
                dimension: r.dimension.to_owned(),
                gateway_decision: r.gateway_decision.to_owned(),
                count: r.count as f64,
            })
            .collect(),
        estimate_errors: m
            .estimate_errors
            .iter()
            .map(|e| EstimateErrorSummary {
                scopes: e.scopes.clone(),
                side: e.side.to_owned(),
                samples: e.error.samples as f64,
                p05: e.error.p05,
                p50: e.error.p50,
                p95: e.error.p95,
            })
            .collect(),
        retry_amplification: m.retry_amplification,
    }
}

/// The core's metrics as its own JSON (snake_case): the text `llmgov top`
/// reads, the same in every language.
pub fn metrics_json(m: &llmgov::Metrics) -> napi::Result<String> {
    serde_json::to_string(m).map_err(|e| napi::Error::from_reason(format!("metrics as JSON: {e}")))
}
