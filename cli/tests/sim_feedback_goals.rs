//! Issue 4's goals on the simulator, with fixed seeds: llmgov learns from
//! the provider's answers (headers, 429s) where its configured limits are
//! wrong, unknown or change under it.

use std::path::Path;

use llmgov_cli::sim::{self, Report, StrategyReport};

fn run(name: &str) -> Report {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios").join(format!("{name}.toml"));
    let report = sim::simulate_file(&path).unwrap();
    println!("{report}");
    report
}

fn llmgov(report: &Report) -> &StrategyReport {
    report.strategies.iter().find(|s| s.name.starts_with("llmgov")).expect("an llmgov row")
}

/// At most 1% of requests drew a 429, all were served, within 1.15 × the bound.
fn assert_learned(report: &Report) {
    let ours = llmgov(report);
    let requests = (ours.succeeded as f64 / ours.success_rate).round();
    assert!(ours.provider_429s as f64 <= 0.01 * requests, "{} 429s of {requests}\n{report}", ours.provider_429s);
    assert_eq!(ours.success_rate, 1.0, "{report}");
    assert!(ours.bound_ratio <= 1.15, "makespan {:.3} x the bound\n{report}", ours.bound_ratio);
}

#[test]
fn limits_configured_twice_too_high() {
    let report = run("limits_2x_too_high");
    assert_learned(&report);
    let seed = report.strategies.iter().find(|s| s.name.starts_with("seed")).unwrap();
    assert!(seed.provider_429s > 100, "the same config without feedback draws 429s\n{report}");
}

#[test]
fn limits_unset_are_learned_from_headers() {
    let report = run("limits_unknown");
    assert_learned(&report);
}

#[test]
fn when_the_provider_halves_its_limits_429s_stop_within_two_windows() {
    let report = run("provider_halves");
    let ours = llmgov(&report);
    let (halved_at, window) = (300.0, 60.0);
    let last = ours.last_429_s.unwrap_or(0.0);
    assert!(last <= halved_at + 2.0 * window, "last 429 at {last:.1} s\n{report}");
    assert_eq!(ours.success_rate, 1.0);
    let backoff = report.strategies.iter().find(|s| s.name.starts_with("backoff")).unwrap();
    assert!(backoff.last_429_s.unwrap() > halved_at + 10.0 * window, "the naive client keeps hitting it\n{report}");
}

#[test]
fn a_thousand_clients_on_an_exhausted_limit_do_not_storm() {
    let report = run("exhausted_herd");
    let ours = llmgov(&report);
    assert!(ours.retry_amplification <= 1.1, "amplification {:.3}\n{report}", ours.retry_amplification);
    assert_eq!(ours.success_rate, 1.0);
    let naive = report.strategies.iter().find(|s| s.name.starts_with("fixed")).unwrap();
    assert!(naive.retry_amplification > 10.0, "{report}");
}
