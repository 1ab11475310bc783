//! Prometheus text exposition of a governor's state, built with the
//! `prometheus-client` crate from its [`Metrics`]: a pure function of what
//! they say, so an application serves it from whatever HTTP server it
//! already runs.

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, LabelSetEncoder, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::{Registry, Unit};

use crate::metrics::Metrics;
use crate::scheduler::{QueueMetrics, WaitHistogram};
use crate::{LimitSnapshot, ScopeSnapshot};

/// Labels of one limit of one scope.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct LimitLabels {
    scope: String,
    dimension: String,
    /// The window in milliseconds, or `none` for concurrency; tells apart
    /// two limits of one dimension (per minute and per day).
    window_ms: String,
    /// The limit's position in its scope's config, only where the labels
    /// above name more than one limit (a token bucket and a sliding window
    /// on the same minute): one series each, rather than the last written
    /// hiding the others. Left out otherwise, so the usual labels stay short.
    limit: Option<usize>,
}

impl EncodeLabelSet for LimitLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        let named = [("scope", self.scope.as_str()), ("dimension", &self.dimension), ("window_ms", &self.window_ms)];
        named.as_slice().encode(encoder)?;
        match self.limit {
            Some(index) => [("limit", index.to_string())].encode(encoder),
            None => Ok(()),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ScopeLabels {
    scope: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClassLabels {
    class: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RefusalLabels {
    class: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecisionLabels {
    dimension: String,
    gateway_decision: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EstimateLabels {
    route: String,
    side: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QuantileLabels {
    route: String,
    side: String,
    quantile: String,
}

/// A histogram already counted elsewhere: the scheduler counts waits under
/// its own lock, and `prometheus-client`'s `Histogram` can only be fed one
/// observation at a time, so this encodes the counts as they are. Set once,
/// as a family hands out shared references.
#[derive(Debug, Default)]
struct Counted(std::sync::OnceLock<WaitHistogram>);

impl TypedMetric for Counted {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for Counted {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let histogram = self.0.get().copied().unwrap_or_default();
        // The encoder sums the buckets into Prometheus's cumulative ones.
        let buckets = histogram.buckets();
        encoder.encode_histogram::<NoLabelSet>(histogram.sum_ns as f64 / 1e9, histogram.count(), &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

type Gauges = Family<LimitLabels, Gauge>;
type Ratios = Family<LimitLabels, Gauge<f64, std::sync::atomic::AtomicU64>>;

/// The per-limit families.
#[derive(Default)]
struct Limits {
    amount: Gauges,
    effective: Gauges,
    in_use: Gauges,
    reserved: Gauges,
    used: Gauges,
    available: Gauges,
    utilisation: Ratios,
}

impl Limits {
    fn record(&self, scope: &ScopeSnapshot) {
        for (index, limit) in scope.limits.iter().enumerate() {
            let alike =
                |other: &LimitSnapshot| other.dimension == limit.dimension && other.window_ms == limit.window_ms;
            let shared = scope.limits.iter().filter(|other| alike(other)).count() > 1;
            let labels = LimitLabels {
                scope: scope.path.clone(),
                dimension: limit.dimension.as_str().to_owned(),
                window_ms: limit.window_ms.map_or_else(|| "none".to_owned(), |w| w.to_string()),
                limit: shared.then_some(index),
            };
            self.record_limit(&labels, limit);
        }
    }

    fn record_limit(&self, labels: &LimitLabels, limit: &LimitSnapshot) {
        let effective = limit.effective_amount.unwrap_or(limit.amount);
        self.amount.get_or_create(labels).set(clamp(limit.amount));
        self.effective.get_or_create(labels).set(clamp(effective));
        self.in_use.get_or_create(labels).set(clamp(limit.in_use));
        self.reserved.get_or_create(labels).set(clamp(limit.reserved));
        self.used.get_or_create(labels).set(clamp(limit.used));
        self.available.get_or_create(labels).set(limit.available);
        let utilisation = if effective == 0 { 0.0 } else { limit.in_use as f64 / effective as f64 };
        self.utilisation.get_or_create(labels).set(utilisation);
    }

    fn register(self, registry: &mut Registry) {
        registry.register(
            "llmgov_limit",
            "A limit's amount per window (at once for concurrency), after the safety margin",
            self.amount,
        );
        registry.register(
            "llmgov_limit_effective",
            "The amount enforced now, after AIMD, slow start and the provider's limit headers",
            self.effective,
        );
        registry.register(
            "llmgov_in_use",
            "What is taken of the limit: charged and not yet refilled, or in flight",
            self.in_use,
        );
        registry.register(
            "llmgov_reserved",
            "What pending permits hold of the limit (estimates not yet settled), or in flight",
            self.reserved,
        );
        registry.register(
            "llmgov_used",
            "What settled and expired requests hold of the limit: in use less reserved",
            self.used,
        );
        registry.register(
            "llmgov_available",
            "What one request could take now; negative while in debt",
            self.available,
        );
        registry.register("llmgov_utilisation", "In use divided by the effective limit", self.utilisation);
    }
}

fn clamp(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn counter(registry: &mut Registry, name: &str, help: &str, value: u64) {
    let metric = Counter::<u64>::default();
    metric.inc_by(value);
    registry.register(name, help, metric);
}

fn queues(registry: &mut Registry, metrics: &QueueMetrics) {
    let depth = Family::<ClassLabels, Gauge>::default();
    let oldest = Family::<ClassLabels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
    let admitted = Family::<ClassLabels, Counter>::default();
    let borrowed = Family::<ClassLabels, Counter>::default();
    let refused = Family::<RefusalLabels, Counter>::default();
    let waits = Family::<ClassLabels, Counted>::default();
    for class in &metrics.classes {
        let labels = ClassLabels { class: class.class.clone() };
        depth.get_or_create(&labels).set(clamp(class.depth as u64));
        oldest.get_or_create(&labels).set(class.oldest_wait_ms as f64 / 1000.0);
        admitted.get_or_create(&labels).inc_by(class.admitted);
        borrowed.get_or_create(&labels).inc_by(class.borrowed_tokens);
        let _ = waits.get_or_create(&labels).0.set(class.wait);
        for (reason, count) in [
            ("deadline_passed", class.expired),
            ("queue_full", class.refused_queue_full),
            ("predicted_past_deadline", class.refused_deadline),
            ("other", class.refused_other),
            ("withdrawn", class.withdrawn),
        ] {
            refused
                .get_or_create(&RefusalLabels { class: class.class.clone(), reason: reason.to_owned() })
                .inc_by(count);
        }
    }
    registry.register("llmgov_queue_depth", "Requests waiting in the class's queue", depth);
    registry.register_with_unit(
        "llmgov_queue_oldest_wait",
        "How long the class's oldest waiter has waited",
        Unit::Seconds,
        oldest,
    );
    registry.register("llmgov_queue_admitted", "Waiters admitted", admitted);
    registry.register("llmgov_queue_refused", "Waiters that left without a permit, by reason", refused);
    registry.register(
        "llmgov_queue_borrowed_tokens",
        "Tokens admitted past the flows' guaranteed shares, borrowed from capacity others left unused",
        borrowed,
    );
    registry.register_with_unit(
        "llmgov_queue_wait",
        "How long admitted waiters waited, per class",
        Unit::Seconds,
        waits,
    );
}

/// Refusals by dimension and side, estimate errors, and retry amplification.
fn observed(registry: &mut Registry, metrics: &Metrics) {
    let refusals = Family::<DecisionLabels, Counter>::default();
    for refusal in &metrics.refusals {
        let labels = DecisionLabels {
            dimension: refusal.dimension.to_owned(),
            gateway_decision: refusal.gateway_decision.to_owned(),
        };
        refusals.get_or_create(&labels).inc_by(refusal.count);
    }
    registry.register(
        "llmgov_refusals",
        "Refused requests by the dimension named and by who refused: llmgov before sending \
         (rejected_locally) or the provider after llmgov admitted (admitted_then_provider_rejected)",
        refusals,
    );
    let errors = Family::<QuantileLabels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
    let samples = Family::<EstimateLabels, Counter>::default();
    for estimate in &metrics.estimate_errors {
        let (route, side, summary) = (estimate.scopes.join(","), estimate.side, &estimate.error);
        for (quantile, value) in [("0.05", summary.p05), ("0.5", summary.p50), ("0.95", summary.p95)] {
            let labels = QuantileLabels { route: route.clone(), side: side.to_owned(), quantile: quantile.to_owned() };
            errors.get_or_create(&labels).set(value);
        }
        samples.get_or_create(&EstimateLabels { route, side: side.to_owned() }).inc_by(summary.samples);
    }
    registry.register(
        "llmgov_estimate_error",
        "Quantiles of actual ÷ estimated − 1 per provider route and side (input, output); 0.25 is 25% under",
        errors,
    );
    registry.register("llmgov_estimate_samples", "Settled requests the estimate error is drawn from", samples);
    let gauge = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
    gauge.set(metrics.retry_amplification);
    registry.register(
        "llmgov_retry_amplification",
        "Requests sent per request the provider did not refuse: admitted ÷ (admitted − provider rejections)",
        gauge,
    );
}

/// The governor's state in the Prometheus text format (OpenMetrics, ending
/// in `# EOF`).
pub(crate) fn exposition(metrics: &Metrics) -> String {
    let snapshot = &metrics.snapshot;
    let mut registry = Registry::default();
    let limits = Limits::default();
    let breakers = Family::<ScopeLabels, Gauge>::default();
    for scope in &snapshot.scopes {
        limits.record(scope);
        if let Some(state) = scope.breaker {
            breakers.get_or_create(&ScopeLabels { scope: scope.path.clone(), state: state.to_owned() }).set(1);
        }
    }
    limits.register(&mut registry);
    registry.register("llmgov_breaker", "A provider scope's circuit breaker: 1 for its current state", breakers);
    let counts = [
        ("llmgov_admitted", "Requests admitted", snapshot.admitted),
        ("llmgov_rate_limited", "Requests refused for now by a limit", snapshot.rate_limited),
        ("llmgov_never_fits", "Requests refused because they can never fit", snapshot.never_fits),
        ("llmgov_circuit_open", "Requests refused because a breaker was open", snapshot.circuit_open),
        ("llmgov_expired_permits", "Permits that outlived their TTL unsettled", snapshot.expired_permits),
        (
            "llmgov_provider_rejected",
            "Requests admitted here and then refused by the provider",
            snapshot.admitted_then_provider_rejected,
        ),
    ];
    for (name, help, value) in counts {
        counter(&mut registry, name, help, value);
    }
    queues(&mut registry, &metrics.queues);
    observed(&mut registry, metrics);
    let mut text = String::new();
    encode(&mut text, &registry).expect("writing to a String cannot fail");
    text
}
