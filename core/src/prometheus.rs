//! Prometheus text exposition of a governor's state, built with the
//! `prometheus-client` crate from a [`Snapshot`] and the queues'
//! [`QueueMetrics`]: a pure function of what they say, so an application
//! serves it from whatever HTTP server it already runs.

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

use crate::scheduler::QueueMetrics;
use crate::{LimitSnapshot, Snapshot};

/// Labels of one limit of one scope.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitLabels {
    scope: String,
    dimension: String,
    /// The window in milliseconds, or `none` for concurrency; tells apart
    /// two limits of one dimension (per minute and per day).
    window_ms: String,
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

type Gauges = Family<LimitLabels, Gauge>;
type Ratios = Family<LimitLabels, Gauge<f64, std::sync::atomic::AtomicU64>>;

/// The per-limit families.
#[derive(Default)]
struct Limits {
    amount: Gauges,
    effective: Gauges,
    in_use: Gauges,
    available: Gauges,
    utilisation: Ratios,
}

impl Limits {
    fn record(&self, scope: &str, limit: &LimitSnapshot) {
        let labels = LimitLabels {
            scope: scope.to_owned(),
            dimension: limit.dimension.as_str().to_owned(),
            window_ms: limit.window_ms.map_or_else(|| "none".to_owned(), |w| w.to_string()),
        };
        let effective = limit.effective_amount.unwrap_or(limit.amount);
        self.amount.get_or_create(&labels).set(clamp(limit.amount));
        self.effective.get_or_create(&labels).set(clamp(effective));
        self.in_use.get_or_create(&labels).set(clamp(limit.in_use));
        self.available.get_or_create(&labels).set(limit.available);
        let utilisation = if effective == 0 { 0.0 } else { limit.in_use as f64 / effective as f64 };
        self.utilisation.get_or_create(&labels).set(utilisation);
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
    let refused = Family::<RefusalLabels, Counter>::default();
    for class in &metrics.classes {
        let labels = ClassLabels { class: class.class.clone() };
        depth.get_or_create(&labels).set(clamp(class.depth as u64));
        oldest.get_or_create(&labels).set(class.oldest_wait_ms as f64 / 1000.0);
        admitted.get_or_create(&labels).inc_by(class.admitted);
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
}

/// The governor's state in the Prometheus text format (OpenMetrics, ending
/// in `# EOF`).
pub(crate) fn exposition(snapshot: &Snapshot, queue_metrics: &QueueMetrics) -> String {
    let mut registry = Registry::default();
    let limits = Limits::default();
    let breakers = Family::<ScopeLabels, Gauge>::default();
    for scope in &snapshot.scopes {
        for limit in &scope.limits {
            limits.record(&scope.path, limit);
        }
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
    queues(&mut registry, queue_metrics);
    let mut text = String::new();
    encode(&mut text, &registry).expect("writing to a String cannot fail");
    text
}
