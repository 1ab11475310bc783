//! `Governor::prometheus`: the state in the Prometheus text format, per
//! scope and dimension, with the counters, breakers and queues.

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
    let slots = r#"{scope="tenants/acme",dimension="concurrency",window_ms="none"}"#;
    assert_eq!(value(&text, &format!("llmgov_utilisation{slots}")), 0.5);
    assert_eq!(value(&text, "llmgov_admitted_total"), 2.0);
    assert_eq!(value(&text, "llmgov_rate_limited_total"), 1.0);
    assert_eq!(value(&text, "llmgov_provider_rejected_total"), 1.0);
    assert_eq!(value(&text, r#"llmgov_breaker{scope="openai/org",state="closed"}"#), 1.0);
    assert!(text.contains("# TYPE llmgov_limit gauge"), "{text}");
    assert!(text.trim_end().ends_with("# EOF"), "{text}");
}
