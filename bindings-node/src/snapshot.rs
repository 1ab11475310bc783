//! The core's [`llmgov::Snapshot`] and queue metrics as plain JavaScript
//! objects (camelCase).

use napi_derive::napi;

/// The whole governor at one moment.
#[napi(object)]
pub struct Snapshot {
    /// The clock reading the snapshot was taken at, in milliseconds.
    pub now_ms: f64,
    /// Requests admitted.
    pub admitted: f64,
    /// Requests refused for now (rate limited).
    pub rate_limited: f64,
    /// Requests refused because they can never fit.
    pub never_fits: f64,
    /// Requests refused because a provider scope's breaker was open.
    pub circuit_open: f64,
    /// Requests admitted here and then refused by the provider (reported).
    pub admitted_then_provider_rejected: f64,
    /// Permits that outlived their TTL unsettled.
    pub expired_permits: f64,
    /// Every scope instantiated so far, in id order.
    pub scopes: Vec<ScopeSnapshot>,
}

/// One scope at one moment.
#[napi(object)]
pub struct ScopeSnapshot {
    /// The scope's path.
    pub path: String,
    /// Its limits, in config order.
    pub limits: Vec<LimitSnapshot>,
    /// Provider scopes only: `closed`, `open` or `half_open`.
    pub breaker: Option<String>,
}

/// One limit of one scope at one moment.
#[napi(object)]
pub struct LimitSnapshot {
    /// `requests`, `input_tokens`, `output_tokens`, `tokens`, `concurrency` or `cost`.
    pub dimension: String,
    /// `token_bucket`, `sliding_window` or `concurrency`.
    pub algorithm: String,
    /// The amount as configured.
    pub configured_amount: f64,
    /// The amount enforced, after the safety margin.
    pub amount: f64,
    /// Provider scopes' token buckets: the amount per window enforced now,
    /// after AIMD, slow start and the provider's `limit` headers.
    pub effective_amount: Option<f64>,
    /// The most it holds at once.
    pub burst: f64,
    /// Window length in milliseconds; absent for concurrency.
    pub window_ms: Option<f64>,
    /// What a request could take now; negative while in debt.
    pub available: f64,
    /// What is taken: charged and not yet refilled or aged out, or in
    /// flight. It is `reserved` plus `used`.
    pub in_use: f64,
    /// What pending permits hold here: their estimates, raised by output
    /// streamed past them; on a concurrency limit, the permits in flight.
    pub reserved: f64,
    /// What settled and expired requests hold here, not yet refilled or
    /// aged out (0 when a token bucket has refilled past a long-held permit).
    pub used: f64,
    /// Output and token limits: `max_tokens` or `expected`.
    pub reserves_output: Option<String>,
    /// Concurrency only: permits that expired holding a slot here.
    pub expired: Option<f64>,
}

/// Converts the core's snapshot. Every count is below 2^53 (the core caps
/// amounts there), so numbers are exact.
pub fn snapshot(s: &llmgov::Snapshot) -> Snapshot {
    Snapshot {
        now_ms: s.now_ms as f64,
        admitted: s.admitted as f64,
        rate_limited: s.rate_limited as f64,
        never_fits: s.never_fits as f64,
        circuit_open: s.circuit_open as f64,
        admitted_then_provider_rejected: s.admitted_then_provider_rejected as f64,
        expired_permits: s.expired_permits as f64,
        scopes: s
            .scopes
            .iter()
            .map(|scope| ScopeSnapshot {
                path: scope.path.clone(),
                limits: scope.limits.iter().map(limit).collect(),
                breaker: scope.breaker.map(str::to_owned),
            })
            .collect(),
    }
}

fn limit(l: &llmgov::LimitSnapshot) -> LimitSnapshot {
    LimitSnapshot {
        dimension: l.dimension.as_str().to_owned(),
        algorithm: l.algorithm.to_owned(),
        configured_amount: l.configured_amount as f64,
        amount: l.amount as f64,
        effective_amount: l.effective_amount.map(|n| n as f64),
        burst: l.burst as f64,
        window_ms: l.window_ms.map(|ms| ms as f64),
        available: l.available as f64,
        in_use: l.in_use as f64,
        reserved: l.reserved as f64,
        used: l.used as f64,
        reserves_output: l.reserves_output.map(str::to_owned),
        expired: l.expired.map(|n| n as f64),
    }
}

/// Every traffic class's queue at one moment.
#[napi(object)]
pub struct QueueMetrics {
    /// Requests waiting, all classes together.
    pub depth: f64,
    /// One entry per class that has had a waiter, highest priority first.
    pub classes: Vec<ClassMetrics>,
}

/// One traffic class's queue (counts since the governor was made).
#[napi(object)]
pub struct ClassMetrics {
    /// The class's name (empty for the default class): `klass`, as in
    /// requests, events and errors (`class` can't be destructured in JS).
    pub klass: String,
    /// Its priority.
    pub priority: i32,
    /// Requests waiting now.
    pub depth: f64,
    /// Its queue bound.
    pub queue_bound: f64,
    /// How long its oldest waiter has waited, in ms (0 if none).
    pub oldest_wait_ms: f64,
    /// Its maximum wait, in ms.
    pub max_wait_ms: f64,
    /// The longest wait of a request admitted so far, in ms.
    pub longest_admitted_wait_ms: f64,
    /// Waiters admitted (a request admitted at once never queues).
    pub admitted: f64,
    /// Waiters whose deadline passed while they waited.
    pub expired: f64,
    /// Refused at once: the queue was full.
    pub refused_queue_full: f64,
    /// Refused at once: the predicted wait was past the deadline.
    pub refused_deadline: f64,
    /// Waiters refused for another reason (they can never pass).
    pub refused_other: f64,
    /// Waiters that left before an answer (aborted).
    pub withdrawn: f64,
    /// Tenants with waiters now.
    pub tenants: f64,
    /// How long admitted waiters waited.
    pub wait: WaitHistogram,
    /// Tokens admitted to flows with a guaranteed share beyond it, borrowed
    /// from capacity others left unused.
    pub borrowed_tokens: f64,
}

/// How long admitted waiters waited: a histogram whose buckets are not
/// cumulative (Prometheus's `_bucket` series sum them).
#[napi(object)]
pub struct WaitHistogram {
    /// Each bucket's upper bound in milliseconds, from 1 to 600000; the
    /// last is `Infinity`.
    pub bounds_ms: Vec<f64>,
    /// Waits in each bucket: at most its bound, above its predecessor's.
    pub counts: Vec<f64>,
    /// Waits counted (the counts' sum).
    pub count: f64,
    /// All waits together, in milliseconds.
    pub sum_ms: f64,
}

/// Converts the core's queue metrics.
pub fn queue_metrics(m: &llmgov::QueueMetrics) -> QueueMetrics {
    QueueMetrics {
        depth: m.depth as f64,
        classes: m
            .classes
            .iter()
            .map(|c| ClassMetrics {
                klass: c.class.clone(),
                priority: c.priority,
                depth: c.depth as f64,
                queue_bound: c.queue_bound as f64,
                oldest_wait_ms: c.oldest_wait_ms as f64,
                max_wait_ms: c.max_wait_ms as f64,
                longest_admitted_wait_ms: c.longest_admitted_wait_ms as f64,
                admitted: c.admitted as f64,
                expired: c.expired as f64,
                refused_queue_full: c.refused_queue_full as f64,
                refused_deadline: c.refused_deadline as f64,
                refused_other: c.refused_other as f64,
                withdrawn: c.withdrawn as f64,
                tenants: c.tenants as f64,
                wait: wait_histogram(&c.wait),
                borrowed_tokens: c.borrowed_tokens as f64,
            })
            .collect(),
    }
}

fn wait_histogram(h: &llmgov::scheduler::WaitHistogram) -> WaitHistogram {
    let (bounds_ms, counts) =
        h.buckets().into_iter().map(|(bound_s, n)| ((bound_s * 1000.0).round(), n as f64)).unzip();
    WaitHistogram { bounds_ms, counts, count: h.count() as f64, sum_ms: h.sum_ns as f64 / 1e6 }
}
