//! Learned output reservations, input coefficients and accuracy figures:
//! histogram precision, concurrent recording, the registry's keys and
//! defaults, and the EWMA.

use std::sync::Arc;

use llmgov::tokens::{Accuracy, CoefficientConfig, Histogram, InputCoefficients, OutputConfig, OutputModel, Side};
use llmgov::{Config, Error, Governor, Route};

/// The exact nearest-rank quantile of sorted `values`.
fn exact_quantile(sorted: &[u64], q: f64) -> u64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Asserts the histogram's quantile is the exact one rounded up to its
/// bucket: never below, at most 1/32 above.
fn assert_within_precision(histogram: &Histogram, sorted: &[u64], q: f64) {
    let exact = exact_quantile(sorted, q);
    let got = histogram.quantile(q).unwrap();
    assert_eq!(got, Histogram::bucket_range(exact).1, "q {q}: exact {exact}, got {got}");
    assert!(got >= exact && (got - exact) as f64 <= exact as f64 / 32.0, "q {q}: exact {exact}, got {got}");
}

/// A deterministic shuffle, so the order of records is not sorted.
fn scrambled(mut values: Vec<u64>) -> Vec<u64> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    for i in (1..values.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        values.swap(i, (state % (i as u64 + 1)) as usize);
    }
    values
}

#[test]
fn uniform_quantiles_are_within_the_bucket_precision() {
    let values: Vec<u64> = (1..=20_000).collect();
    let histogram = Histogram::new(0);
    scrambled(values.clone()).into_iter().for_each(|v| histogram.record(v));
    for q in [0.0, 0.01, 0.25, 0.5, 0.9, 0.95, 0.99, 1.0] {
        assert_within_precision(&histogram, &values, q);
    }
    assert_eq!(histogram.recorded(), 20_000);
    assert_eq!(histogram.weight(), 20_000.0);
}

#[test]
fn bimodal_quantiles_are_within_the_bucket_precision() {
    // 80% short answers around 150, 20% long ones around 3500.
    let mut values: Vec<u64> = (0..8000).map(|i| 100 + i % 100).chain((0..2000).map(|i| 3000 + i % 1000)).collect();
    let histogram = Histogram::new(0);
    scrambled(values.clone()).into_iter().for_each(|v| histogram.record(v));
    values.sort_unstable();
    for q in [0.1, 0.5, 0.79, 0.8, 0.81, 0.95, 0.99] {
        assert_within_precision(&histogram, &values, q);
    }
    assert!(histogram.quantile(0.8).unwrap() < 200);
    assert!(histogram.quantile(0.81).unwrap() >= 3000);
}

#[test]
fn edge_values_and_queries_never_panic() {
    let histogram = Histogram::new(0);
    assert_eq!(histogram.quantile(0.5), None, "empty");
    histogram.record(0);
    histogram.record(u64::MAX);
    assert_eq!(histogram.quantile(0.0), Some(0));
    assert_eq!(histogram.quantile(1.0), Some(Histogram::MAX_VALUE), "saturated at 2^40");
    assert_eq!(histogram.quantile(f64::NAN), None);
    assert_eq!(histogram.quantile(-3.0), Some(0));
    assert_eq!(histogram.quantile(f64::INFINITY), Some(Histogram::MAX_VALUE));
}

#[test]
fn concurrent_recording_loses_no_counts() {
    let histogram = Arc::new(Histogram::new(0));
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let histogram = Arc::clone(&histogram);
            std::thread::spawn(move || (0..50_000u64).for_each(|i| histogram.record(1 + (i * 7 + t) % 5000)))
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(histogram.recorded(), 400_000);
    assert_eq!(histogram.weight(), 400_000.0, "every increment landed");
}

#[test]
fn concurrent_recording_with_decay_keeps_the_steady_state() {
    // Halvings race the increments; each halving is a CAS, so an increment
    // is halved or not, never lost. In order, the weight ends at the steady
    // state of halving every 1000 records: just under 1000 after the last
    // halving, and never 2000 or more, which a skipped halving would give.
    // A thread preempted between its count and its halving halves later
    // records too: one such halving delayed to the end leaves 750, and with
    // four threads at most four are pending at once, which leaves just over
    // 300. The floor is set under that, so the test holds on a loaded machine.
    let histogram = Arc::new(Histogram::new(1000));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let histogram = Arc::clone(&histogram);
            std::thread::spawn(move || (0..25_000).for_each(|_| histogram.record(500)))
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(histogram.recorded(), 100_000);
    let weight = histogram.weight();
    assert!((250.0..2000.0).contains(&weight), "steady state of halving every 1000: {weight}");
}

#[test]
fn decay_follows_a_changing_workload() {
    let histogram = Histogram::tracking(500, 0.95);
    (0..5000).for_each(|_| histogram.record(4000));
    assert_eq!(histogram.tracked(), Some(Histogram::bucket_range(4000).1));
    // Outputs shrink: the old tail fades within a few half-lives.
    (0..3000).for_each(|_| histogram.record(300));
    assert_eq!(histogram.tracked(), Some(Histogram::bucket_range(300).1));
    // They grow again: followed as soon as they are 5% of the weight.
    (0..100).for_each(|_| histogram.record(2000));
    assert_eq!(histogram.tracked(), Some(Histogram::bucket_range(2000).1));
}

/// Two routes of one governor, as an application would key the model.
fn routes() -> (Route, Route) {
    let config = Config::from_toml(
        r#"
        [scopes."a"]
        limits = [{ dimension = "requests", amount = 100, window = "1m" }]
        [scopes."b"]
        limits = [{ dimension = "requests", amount = 100, window = "1m" }]
        "#,
    )
    .unwrap();
    let gov = Governor::new(&config).unwrap();
    (gov.route(&["a"]).unwrap(), gov.route(&["b"]).unwrap())
}

#[test]
fn the_registry_separates_routes_and_classes() {
    let model = OutputModel::new(OutputConfig::default()).unwrap();
    let (a, b) = routes();
    (0..100).for_each(|_| model.record(a, "chat", 100));
    (0..100).for_each(|_| model.record(a, "summary", 2000));
    (0..100).for_each(|_| model.record(b, "chat", 700));
    assert_eq!(model.reservation(a, "chat", Some(8192)), Histogram::bucket_range(100).1);
    assert_eq!(model.reservation(a, "summary", Some(8192)), Histogram::bucket_range(2000).1);
    assert_eq!(model.reservation(b, "chat", Some(8192)), Histogram::bucket_range(700).1);
    assert_eq!(model.reservation(b, "summary", Some(8192)), 8192, "no history for (b, summary)");
    assert_eq!(model.histogram(a, "chat").unwrap().recorded(), 100);
    assert!(model.histogram(b, "nothing").is_none());
}

#[test]
fn with_no_history_a_request_reserves_max_tokens() {
    let model = OutputModel::new(OutputConfig::default()).unwrap();
    let (a, _) = routes();
    assert_eq!(model.reservation(a, "chat", Some(4096)), 4096);
    assert_eq!(model.learned(a, "chat"), None);
    // Below min_samples (20) the history is not trusted yet.
    (0..19).for_each(|_| model.record(a, "chat", 10));
    assert_eq!(model.reservation(a, "chat", Some(4096)), 4096);
    model.record(a, "chat", 10);
    assert_eq!(model.reservation(a, "chat", Some(4096)), 10);
}

#[test]
fn without_max_tokens_the_configured_default_applies_then_the_learned_quantile() {
    let config = OutputConfig { default_max_tokens: 512, ..OutputConfig::default() };
    let model = OutputModel::new(config).unwrap();
    let (a, _) = routes();
    assert_eq!(model.reservation(a, "chat", None), 512, "never the model's whole context");
    assert_eq!(OutputModel::<u8>::new(OutputConfig::default()).unwrap().reservation(0, "x", None), 1024);
    (0..50).for_each(|_| model.record(a, "chat", 3000));
    assert_eq!(model.reservation(a, "chat", None), Histogram::bucket_range(3000).1, "uncapped by the default");
}

#[test]
fn the_reservation_is_min_of_max_tokens_and_the_quantile() {
    let model = OutputModel::new(OutputConfig { quantile: 0.9, ..OutputConfig::default() }).unwrap();
    let (a, _) = routes();
    (1..=1000).for_each(|v| model.record(a, "chat", v));
    let p90 = Histogram::bucket_range(900).1;
    assert_eq!(model.learned(a, "chat"), Some(p90));
    assert_eq!(model.reservation(a, "chat", Some(4096)), p90);
    assert_eq!(model.reservation(a, "chat", Some(500)), 500, "max_tokens caps it");
    assert_eq!(model.reservation(a, "chat", Some(0)), 0);
}

#[test]
fn bad_output_configs_are_refused() {
    for config in [
        OutputConfig { quantile: 0.0, ..OutputConfig::default() },
        OutputConfig { quantile: 1.5, ..OutputConfig::default() },
        OutputConfig { quantile: f64::NAN, ..OutputConfig::default() },
        OutputConfig { default_max_tokens: 0, ..OutputConfig::default() },
        OutputConfig { default_max_tokens: llmgov::MAX_TOKENS + 1, ..OutputConfig::default() },
    ] {
        let err = OutputModel::<u8>::new(config).unwrap_err();
        assert!(matches!(err, Error::InvalidConfig { .. }), "{err}");
    }
}

#[test]
fn the_coefficient_converges_to_the_ratio() {
    let coefficients = InputCoefficients::new(CoefficientConfig::default()).unwrap();
    let (a, b) = routes();
    assert_eq!(coefficients.coefficient(a), 1.0, "documented default");
    // Claude-like: 1.25 × the o200k count.
    for _ in 0..60 {
        coefficients.record(a, 800, 1000);
    }
    let c = coefficients.coefficient(a);
    assert!((c - 1.25).abs() < 0.01 * 1.25, "alpha 0.1 over 60 samples: {c}");
    assert_eq!(coefficients.estimate(a, 2000), (2000.0 * c).ceil() as u64);
    assert_eq!(coefficients.coefficient(b), 1.0, "routes learn apart");
    coefficients.record(b, 0, 500);
    assert_eq!(coefficients.coefficient(b), 1.0, "a zero count carries no ratio");
}

#[test]
fn the_coefficient_is_clamped() {
    let coefficients = InputCoefficients::new(CoefficientConfig::default()).unwrap();
    let (a, b) = routes();
    coefficients.record(a, 1, 1_000_000);
    let c = coefficients.coefficient(a);
    assert!((c - 1.2).abs() < 1e-9, "one outlier moves it by alpha × (max − c) at most: {c}");
    (0..500).for_each(|_| coefficients.record(a, 1, u64::MAX));
    let c = coefficients.coefficient(a);
    assert!(c <= 3.0 && c > 2.999, "approaches the ceiling, never past it: {c}");
    // With alpha 1 each sample replaces the coefficient: clamped exactly.
    let eager = InputCoefficients::new(CoefficientConfig { alpha: 1.0, ..CoefficientConfig::default() }).unwrap();
    eager.record(a, 1, u64::MAX);
    assert_eq!(eager.coefficient(a), 3.0);
    eager.record(b, 1000, 0);
    assert_eq!(eager.coefficient(b), 0.5);
    assert_eq!(eager.estimate(b, u64::MAX), (u64::MAX as f64 * 0.5) as u64, "saturating, no panic");
    assert_eq!(eager.estimate(a, u64::MAX), u64::MAX, "saturating, no panic");
}

#[test]
fn concurrent_coefficient_updates_all_land() {
    let config = CoefficientConfig { alpha: 1.0, ..CoefficientConfig::default() };
    let coefficients = Arc::new(InputCoefficients::<u8>::new(config).unwrap());
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let coefficients = Arc::clone(&coefficients);
            std::thread::spawn(move || (0..10_000).for_each(|_| coefficients.record(0, 100, 200)))
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(coefficients.coefficient(0), 2.0);
}

#[test]
fn bad_coefficient_configs_are_refused() {
    let base = CoefficientConfig::default();
    for config in [
        CoefficientConfig { alpha: 0.0, ..base.clone() },
        CoefficientConfig { alpha: 1.1, ..base.clone() },
        CoefficientConfig { min: 0.0, ..base.clone() },
        CoefficientConfig { max: 0.4, ..base.clone() },
        CoefficientConfig { initial: 5.0, ..base.clone() },
        CoefficientConfig { max: f64::INFINITY, ..base.clone() },
    ] {
        assert!(InputCoefficients::<u8>::new(config).is_err());
    }
}

#[test]
fn accuracy_reports_relative_error_quantiles_per_route_and_side() {
    let accuracy = Accuracy::new(0);
    let (a, b) = routes();
    // Inputs: exact half the time, 20% under-estimated the other half.
    for i in 0..1000 {
        accuracy.record(a, Side::Input, 1000, if i % 2 == 0 { 1000 } else { 1200 });
    }
    // Outputs: reserved 1000, answered 100..=1000.
    for i in 0..1000u64 {
        accuracy.record(a, Side::Output, 1000, 100 + i * 900 / 999);
    }
    let input = accuracy.summary(a, Side::Input).unwrap();
    assert_eq!(input.samples, 1000);
    assert_eq!(input.p05, 0.0, "an exact estimate reads as exactly 0");
    assert!((input.p95 - 0.2).abs() < 0.02, "{input:?}");
    let output = accuracy.summary(a, Side::Output).unwrap();
    assert!((output.p50 + 0.45).abs() < 0.02, "{output:?}");
    assert!((output.p05 + 0.855).abs() < 0.02, "{output:?}");
    assert!(accuracy.summary(b, Side::Input).is_none());
    assert_eq!(accuracy.samples(a, Side::Output), 1000);
    accuracy.record(b, Side::Output, 0, 10);
    accuracy.record(b, Side::Output, 0, 0);
    assert!(accuracy.relative_error(b, Side::Output, 1.0).unwrap() > 1e5, "estimated 0, got 10");
}
