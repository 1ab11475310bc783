//! A provider's answers fed back into the ledger: `remaining` headers lower
//! the provider scope's buckets, a 429 empties the one it names until the
//! retry-after, and llmgov's own budgets are left alone.

use std::sync::Arc;
use std::time::Duration;

use llmgov::{classify_response, Config, Dimension, Governor, ManualClock, ProviderHint, Request};
use serde_json::json;

const NOW_UNIX_MS: u64 = 1_767_225_600_000;

fn gov() -> (Governor, Arc<ManualClock>) {
    let config = json!({"scopes": {
        "openai/org": {"provider": true, "limits": [
            {"dimension": "requests", "amount": 600, "window": "1m"},
            {"dimension": "tokens", "amount": 60000, "window": "1m"},
            {"dimension": "requests", "amount": 10000, "window": "1d"},
        ]},
        "tenants/*": {"limits": [{"dimension": "tokens", "amount": 60000, "window": "1m"}]},
    }});
    let clock = Arc::new(ManualClock::new(0));
    (Governor::with_clock(&Config::from_value(config).unwrap(), clock.clone()).unwrap(), clock)
}

fn available(gov: &Governor, path: &str, dimension: Dimension, window_ms: u64) -> i64 {
    let snapshot = gov.scope_snapshot(gov.scope_id(path).unwrap()).unwrap();
    snapshot.limits.iter().find(|l| l.dimension == dimension && l.window_ms == Some(window_ms)).unwrap().available
}

#[test]
fn remaining_headers_lower_only_the_provider_scope() {
    let (gov, _clock) = gov();
    let route = gov.route(&["tenants/a", "openai/org"]).unwrap();
    let headers = [("x-ratelimit-remaining-tokens", "1500"), ("x-ratelimit-remaining-requests", "599")];
    let feedback = classify_response(200, &headers, b"{}", ProviderHint::OpenAi, NOW_UNIX_MS);
    assert_eq!(gov.observe(route, &feedback).unwrap(), 2);
    assert_eq!(available(&gov, "openai/org", Dimension::Tokens, 60_000), 1500);
    assert_eq!(available(&gov, "openai/org", Dimension::Requests, 60_000), 599);
    assert_eq!(
        available(&gov, "openai/org", Dimension::Requests, 86_400_000),
        10000,
        "a daily limit is not per-minute"
    );
    assert_eq!(available(&gov, "tenants/a", Dimension::Tokens, 60_000), 60000, "our own budget is not the provider's");
    assert_eq!(gov.snapshot().admitted_then_provider_rejected, 0);
}

#[test]
fn a_429_empties_the_named_bucket_until_the_retry_after() {
    let (gov, clock) = gov();
    let route = gov.route(&["tenants/a", "openai/org"]).unwrap();
    let body = br#"{"error":{"message":"Rate limit reached for tokens","type":"tokens","code":"rate_limit_exceeded"}}"#;
    let feedback = classify_response(429, &[("retry-after", "20")], body, ProviderHint::OpenAi, NOW_UNIX_MS);
    gov.observe(route, &feedback).unwrap();
    let request = Request::new(route).input_tokens(100);
    assert!(gov.try_acquire(&request).is_err(), "held empty");
    assert_eq!(available(&gov, "openai/org", Dimension::Requests, 60_000), 600, "requests were not what refused");
    clock.advance(Duration::from_secs(20));
    assert_eq!(available(&gov, "openai/org", Dimension::Tokens, 60_000), 0, "empty when the cooldown ends");
    clock.advance(Duration::from_secs(1));
    assert!(gov.try_acquire(&request).is_ok(), "then refilling at the configured rate");
    assert_eq!(gov.snapshot().admitted_then_provider_rejected, 1);
}

#[test]
fn a_429_that_names_nothing_cools_every_per_minute_bucket_of_the_provider_scope() {
    let (gov, clock) = gov();
    let route = gov.route(&["openai/org"]).unwrap();
    let feedback = classify_response(429, &[("retry-after", "5")], b"", ProviderHint::Auto, NOW_UNIX_MS);
    assert_eq!(gov.observe(route, &feedback).unwrap(), 2);
    clock.advance(Duration::from_secs(5));
    assert_eq!(available(&gov, "openai/org", Dimension::Requests, 60_000), 0);
    assert_eq!(available(&gov, "openai/org", Dimension::Tokens, 60_000), 0);
    assert_eq!(
        available(&gov, "openai/org", Dimension::Requests, 86_400_000),
        10000,
        "a daily quota is drained only by a 429 that names it"
    );
}

#[test]
fn a_retry_after_longer_than_a_window_holds_each_bucket_for_its_window_at_most() {
    let (gov, clock) = gov();
    let route = gov.route(&["openai/org"]).unwrap();
    let absurd = [("retry-after", "99999999999")];
    gov.observe(route, &classify_response(429, &absurd, b"", ProviderHint::Auto, NOW_UNIX_MS)).unwrap();
    clock.advance(Duration::from_secs(60));
    assert_eq!(available(&gov, "openai/org", Dimension::Requests, 60_000), 0, "the minute's bucket, held a minute");
    clock.advance(Duration::from_secs(1));
    let after = gov.try_acquire(&Request::new(route));
    assert!(after.is_ok(), "free again after its window: {after:?}");
    let daily = [("retry-after", "99999999999")];
    let body = br#"{"error":{"message":"Rate limit reached on requests per day (RPD)","type":"requests"}}"#;
    gov.observe(route, &classify_response(429, &daily, body, ProviderHint::OpenAi, NOW_UNIX_MS)).unwrap();
    clock.advance(Duration::from_secs(86_400));
    assert_eq!(available(&gov, "openai/org", Dimension::Requests, 86_400_000), 0, "the day's, held a day");
    clock.advance(Duration::from_secs(60));
    let after = gov.try_acquire(&Request::new(route));
    assert!(after.is_ok(), "free again after its window: {after:?}");
}

#[test]
fn a_limit_header_of_zero_is_ignored() {
    let (gov, _clock) = gov();
    let route = gov.route(&["openai/org"]).unwrap();
    let headers = [("x-ratelimit-limit-requests", "0")];
    gov.observe(route, &classify_response(200, &headers, b"{}", ProviderHint::OpenAi, NOW_UNIX_MS)).unwrap();
    let snapshot = gov.scope_snapshot(gov.scope_id("openai/org").unwrap()).unwrap();
    let requests = snapshot.limits.iter().find(|l| l.window_ms == Some(60_000) && l.dimension == Dimension::Requests);
    assert_eq!(requests.unwrap().effective_amount, Some(600), "a provider enforcing 0 would refuse everything");
    assert_eq!((0..10).filter(|_| gov.try_acquire(&Request::new(route)).is_ok()).count(), 10);
}

#[test]
fn report_classifies_and_feeds_back_a_permits_answer() {
    let (gov, _clock) = gov();
    let route = gov.route(&["openai/org"]).unwrap();
    let mut permit = gov.try_acquire(&Request::new(route).input_tokens(10)).unwrap();
    let body = br#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}"#;
    let feedback = gov.report(&permit, 429, &[("x-ratelimit-remaining-requests", "3")], body).unwrap();
    assert!(!feedback.retryable);
    assert_eq!(
        available(&gov, "openai/org", Dimension::Requests, 60_000),
        3,
        "headers apply even to a billing refusal"
    );
    gov.cancel(&mut permit).unwrap();
    assert_eq!(gov.snapshot().admitted_then_provider_rejected, 1);
}
