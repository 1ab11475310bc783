//! `Governor::prometheus`: the state in the Prometheus text format, per
//! scope and dimension, with the counters, breakers and queues.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use llmgov::{classify_response, Config, Governor, ManualClock, ProviderHint, Request, Usage};
use serde_json::json;

fn line<'a>(text: &'a str, prefix: &str) -> &'a str {
    text.lines().find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("no `{prefix}` in\n{text}"))
}

fn value(text: &str, prefix: &str) -> f64 {
    line(text, prefix).rsplit(' ').next().unwrap().parse().unwrap()
}

#[test]
fn limits_counters_breakers_and_queues_are_exposed() {
    // A decrease exact in binary keeps the effective burst a whole number.
    let config = json!({"adaptive": {"decrease": 0.75}, "scopes": {
        "openai/org": {"provider": true, "limits": [
            {"dimension": "requests", "amount": 500, "window": "1m"},
            {"dimension": "tokens", "amount": 30000, "window": "1m"},
            {"dimension": "tokens", "amount": 1000000, "window": "1d"},
        ]},
        "tenants/*": {"limits": [{"dimension": "concurrency", "amount": 2}]},
    }});
    let clock = Arc::new(ManualClock::new(0));
    let gov = Governor::with_clock(&Config::from_value(config).unwrap(), clock.clone()).unwrap();
    let route = gov.route(&["tenants/acme", "openai/org"]).unwrap();
    let mut permit = gov.try_acquire(&Request::new(route).input_tokens(6000)).unwrap();
    let _held = gov.try_acquire(&Request::new(route).input_tokens(100)).unwrap();
    assert!(gov.try_acquire(&Request::new(route)).is_err(), "two in flight at most");
    let body = br#"{"error":{"type":"tokens","code":"rate_limit_exceeded"}}"#;
    gov.report_classified(&permit, &classify_response(429, &[("retry-after", "2")], body, ProviderHint::OpenAi, 0))
        .unwrap();
    gov.settle(&mut permit, Usage::new(6000, 0)).unwrap();
    clock.advance(Duration::from_secs(2));

    let text = gov.prometheus();
    let tokens = r#"{scope="openai/org",dimension="tokens",window_ms="60000"}"#;
    assert_eq!(value(&text, &format!("llmgov_limit{tokens}")), 30000.0);
    assert_eq!(value(&text, &format!("llmgov_limit_effective{tokens}")), 22500.0, "AIMD took it to 0.75");
    assert_eq!(value(&text, &format!("llmgov_in_use{tokens}")), 22500.0, "empty as the 429's cooldown ends");
    let daily = r#"{scope="openai/org",dimension="tokens",window_ms="86400000"}"#;
    assert_eq!(value(&text, &format!("llmgov_in_use{daily}")), 6077.0, "6100 less 2 s of 1M a day");
    assert_eq!(value(&text, &format!("llmgov_reserved{daily}")), 100.0, "the permit still held");
    assert_eq!(value(&text, &format!("llmgov_used{daily}")), 5977.0);
    let slots = r#"{scope="tenants/acme",dimension="concurrency",window_ms="none"}"#;
    assert_eq!(value(&text, &format!("llmgov_utilisation{slots}")), 0.5);
    assert_eq!(value(&text, &format!("llmgov_reserved{slots}")), 1.0);
    assert_eq!(value(&text, "llmgov_admitted_total"), 2.0);
    assert_eq!(value(&text, "llmgov_rate_limited_total"), 1.0);
    assert_eq!(value(&text, "llmgov_provider_rejected_total"), 1.0);
    assert_eq!(value(&text, r#"llmgov_breaker{scope="openai/org",state="closed"}"#), 1.0);
    assert!(text.contains("# TYPE llmgov_limit gauge"), "{text}");
    assert!(text.trim_end().ends_with("# EOF"), "{text}");
    // Refusals by dimension and by who refused.
    let local = r#"llmgov_refusals_total{dimension="concurrency",gateway_decision="rejected_locally"}"#;
    assert_eq!(value(&text, local), 1.0);
    let provider = r#"llmgov_refusals_total{dimension="tokens",gateway_decision="admitted_then_provider_rejected"}"#;
    assert_eq!(value(&text, provider), 1.0);
    assert_eq!(value(&text, r#"llmgov_refusals_total{dimension="requests",gateway_decision="rejected_locally"}"#), 0.0);
    // One of two admitted was refused by the provider: two sent per success.
    assert_eq!(value(&text, "llmgov_retry_amplification"), 2.0);
    // The estimate was exact: no error on input.
    let input = r#"route="openai/org",side="input""#;
    assert_eq!(value(&text, &format!(r#"llmgov_estimate_error{{{input},quantile="0.5"}}"#)), 0.0);
    assert_eq!(value(&text, &format!("llmgov_estimate_samples_total{{{input}}}")), 1.0);

    // The same figures, as JSON, from `metrics()`.
    let metrics = serde_json::to_value(gov.metrics()).unwrap();
    assert_eq!(metrics["retry_amplification"], 2.0);
    assert_eq!(metrics["snapshot"]["admitted"], 2);
    assert!(metrics["queues"]["classes"].is_array(), "{metrics}");
    let refusals = metrics["refusals"].as_array().unwrap();
    let count = |dimension: &str, decision: &str| {
        refusals.iter().find(|r| r["dimension"] == dimension && r["gateway_decision"] == decision).unwrap()["count"]
            .clone()
    };
    assert_eq!(count("concurrency", "rejected_locally"), 1);
    assert_eq!(count("tokens", "admitted_then_provider_rejected"), 1);
    assert_eq!(count("requests", "rejected_locally"), 0);
    let input = metrics["estimate_errors"].as_array().unwrap().iter().find(|e| e["side"] == "input").unwrap();
    assert_eq!(input["scopes"], json!(["openai/org"]));
    assert_eq!((input["samples"].clone(), input["p50"].clone()), (json!(1), json!(0.0)));
}

#[test]
fn a_provider_refusing_every_request_reads_as_amplification_not_as_none() {
    let config = json!({"scopes": {"openai/org": {"provider": true, "limits": [
        {"dimension": "requests", "amount": 500, "window": "1m"},
    ]}}});
    let clock = Arc::new(ManualClock::new(0));
    let gov = Governor::with_clock(&Config::from_value(config).unwrap(), clock.clone()).unwrap();
    let route = gov.route(&["openai/org"]).unwrap();
    assert_eq!(gov.metrics().retry_amplification, 1.0, "nothing admitted yet");
    let body = br#"{"error":{"type":"insufficient_quota","code":"insufficient_quota"}}"#;
    for refused in 1..=3 {
        let mut permit = gov.try_acquire(&Request::new(route)).unwrap();
        gov.report_classified(&permit, &classify_response(429, &[] as &[(&str, &str)], body, ProviderHint::OpenAi, 0))
            .unwrap();
        gov.cancel(&mut permit).unwrap();
        clock.advance(Duration::from_secs(120));
        assert_eq!(gov.metrics().retry_amplification, f64::from(refused), "{refused} sent, none served");
    }
    let mut served = gov.try_acquire(&Request::new(route)).unwrap();
    gov.settle(&mut served, Usage::new(0, 0)).unwrap();
    assert_eq!(gov.metrics().retry_amplification, 4.0, "four sent for one served");
    assert_eq!(value(&gov.prometheus(), "llmgov_retry_amplification"), 4.0);
}

#[test]
fn queue_depth_oldest_waiter_and_expiries_are_exposed() {
    let config = json!({
        "permit_ttl": "1m",
        "scopes": {"p": {"limits": [{"dimension": "requests", "amount": 1, "window": "1m"}]}},
    });
    let clock = Arc::new(ManualClock::new(0));
    let gov = Governor::with_clock(&Config::from_value(config).unwrap(), clock.clone()).unwrap();
    let route = gov.route(&["p"]).unwrap();
    let request = Request::new(route);
    // Held past its TTL: it expires unsettled.
    let _forgotten = gov.try_acquire(&request).unwrap();
    let mut waiter = gov.acquire(&request);
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    assert!(std::pin::Pin::new(&mut waiter).poll(&mut context).is_pending(), "it queues");
    clock.advance(Duration::from_millis(1500));

    let text = gov.prometheus();
    assert_eq!(value(&text, r#"llmgov_queue_depth{class=""}"#), 1.0);
    assert_eq!(value(&text, r#"llmgov_queue_oldest_wait_seconds{class=""}"#), 1.5);
    assert_eq!(value(&text, "llmgov_expired_permits_total"), 0.0, "not yet");

    // Past the window the waiter passes; past the TTL the first expires.
    clock.advance(Duration::from_secs(120));
    gov.wake_waiters();
    assert!(std::pin::Pin::new(&mut waiter).poll(&mut context).is_ready());
    let text = gov.prometheus();
    assert_eq!(value(&text, r#"llmgov_queue_depth{class=""}"#), 0.0);
    assert_eq!(value(&text, r#"llmgov_queue_oldest_wait_seconds{class=""}"#), 0.0);
    assert_eq!(value(&text, "llmgov_expired_permits_total"), 1.0);
    assert_eq!(gov.metrics().snapshot.expired_permits, 1);
}

#[test]
fn waits_and_borrowed_capacity_are_exposed_per_class() {
    // A tenant guaranteed 100 tokens a minute: its first 100 are its own,
    // what it gets past them is borrowed.
    let config = json!({
        "scopes": {"p": {"limits": [{"dimension": "requests", "amount": 1, "window": "1s"}]}, "tenants/*": {"limits": [{"dimension": "concurrency", "amount": 10}]}},
        "shares": {"tenants/*": {"guarantee": 100, "window": "1m"}},
    });
    let clock = Arc::new(ManualClock::new(0));
    let gov = Governor::with_clock(&Config::from_value(config).unwrap(), clock.clone()).unwrap();
    let route = gov.route(&["tenants/acme", "p"]).unwrap();
    let request = Request::new(route).input_tokens(100);
    let _first = gov.try_acquire(&request).unwrap();
    // Two waiters: admitted after 1 s and 2 s.
    let mut waiting = [gov.acquire(&request), gov.acquire(&request)];
    let waker = std::task::Waker::noop();
    let mut context = std::task::Context::from_waker(waker);
    for _ in 0..2 {
        clock.advance(Duration::from_secs(1));
        gov.wake_waiters();
    }
    for acquire in &mut waiting {
        assert!(std::pin::Pin::new(acquire).poll(&mut context).is_ready());
    }
    let text = gov.prometheus();
    assert!(text.contains("# TYPE llmgov_queue_wait_seconds histogram"), "{text}");
    assert_eq!(value(&text, r#"llmgov_queue_wait_seconds_bucket{le="0.5",class=""}"#), 0.0);
    assert_eq!(value(&text, r#"llmgov_queue_wait_seconds_bucket{le="1.0",class=""}"#), 1.0);
    assert_eq!(value(&text, r#"llmgov_queue_wait_seconds_bucket{le="2.5",class=""}"#), 2.0);
    assert_eq!(value(&text, r#"llmgov_queue_wait_seconds_count{class=""}"#), 2.0);
    assert_eq!(value(&text, r#"llmgov_queue_wait_seconds_sum{class=""}"#), 3.0);
    assert_eq!(value(&text, r#"llmgov_queue_borrowed_tokens_total{class=""}"#), 100.0, "the second one's");
}

#[test]
fn two_limits_of_one_dimension_and_window_are_two_series() {
    // A provider-mirroring token bucket and a strict sliding window on the
    // same minute: each must keep its own series, or one hides the other.
    let config = json!({"scopes": {"a": {"limits": [
        {"dimension": "tokens", "amount": 1000, "window": "1m"},
        {"dimension": "tokens", "amount": 500, "window": "1m", "algorithm": "sliding_window"},
        {"dimension": "requests", "amount": 10, "window": "1m"},
    ]}}});
    let clock = Arc::new(ManualClock::new(0));
    let gov = Governor::with_clock(&Config::from_value(config).unwrap(), clock).unwrap();
    let route = gov.route(&["a"]).unwrap();
    let _permit = gov.try_acquire(&Request::new(route).input_tokens(100)).unwrap();
    let text = gov.prometheus();
    let bucket = r#"{scope="a",dimension="tokens",window_ms="60000",limit="0"}"#;
    let window = r#"{scope="a",dimension="tokens",window_ms="60000",limit="1"}"#;
    assert_eq!(value(&text, &format!("llmgov_limit{bucket}")), 1000.0, "{text}");
    assert_eq!(value(&text, &format!("llmgov_limit{window}")), 500.0, "{text}");
    assert_eq!(value(&text, &format!("llmgov_utilisation{bucket}")), 0.1);
    assert_eq!(value(&text, &format!("llmgov_utilisation{window}")), 0.2);
    // A limit alone in its dimension and window keeps the plain labels.
    assert_eq!(value(&text, r#"llmgov_limit{scope="a",dimension="requests",window_ms="60000"}"#), 10.0);
}
