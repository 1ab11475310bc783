//! Retry advice and the normalized error object: every rule, deterministic
//! (time and randomness are passed in; nothing sleeps or reads a clock).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use llmgov::feedback::{
    classify_response, Advice, BudgetConfig, Classification, ErrorContext, ErrorObject, ErrorType, GatewayDecision,
    GiveUpReason, LimitDimension, LimitKind, Outcome, ProviderHint, RetryConfig, RetryPolicy, RetryReason,
};
use llmgov::{Dimension, Error};
use serde_json::{json, Value};

const SEC: u64 = 1_000_000_000;
/// An arbitrary monotonic start, far from zero.
const T0: u64 = 1_000 * SEC;
/// Draws mapping to 0, one half and 1.
const ZERO: u64 = 0;
const HALF: u64 = 1 << 63;
const MAX: u64 = u64::MAX;

fn classify(status: u16, headers: &[(&str, &str)], body: &str) -> Classification {
    classify_response(status, headers, body.as_bytes(), ProviderHint::OpenAi, 0)
}

/// A policy whose budget never binds in tests that are not about it.
fn roomy() -> RetryPolicy {
    let budget = BudgetConfig { min_retries: 1_000_000, ..BudgetConfig::default() };
    RetryPolicy::new(RetryConfig { budget, ..RetryConfig::default() }).unwrap()
}

fn advise(policy: &RetryPolicy, status: u16, c: &Classification, attempt: u32, random: u64) -> Advice {
    policy.advise(Outcome::response(status, c), attempt, None, T0, random)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn never_retries_what_waiting_cannot_fix() {
    let policy = roomy();
    for status in [400, 401, 403, 404, 422] {
        let c = classify(status, &[], r#"{"error":{"message":"bad"}}"#);
        let advice = advise(&policy, status, &c, 0, HALF);
        assert_eq!(advice, Advice::GiveUp { reason: GiveUpReason::NotRetryable { status, kind: LimitKind::None } });
    }
    // Even when the provider says `x-should-retry: true`.
    let c = classify(400, &[("x-should-retry", "true")], "");
    assert!(matches!(advise(&policy, 400, &c, 0, HALF), Advice::GiveUp { .. }));

    let quota =
        classify(429, &[], r#"{"error":{"message":"quota","type":"insufficient_quota","code":"insufficient_quota"}}"#);
    assert_eq!(quota.kind, LimitKind::QuotaExhausted);
    let advice = advise(&policy, 429, &quota, 0, HALF);
    assert_eq!(
        advice,
        Advice::GiveUp { reason: GiveUpReason::NotRetryable { status: 429, kind: LimitKind::QuotaExhausted } }
    );
    assert_eq!(advice.to_string(), "give up: not retryable: quota_exhausted (status 429)");

    let too_large = classify(413, &[], "");
    assert_eq!(too_large.kind, LimitKind::TooLarge);
    let reason = advise(&policy, 413, &too_large, 0, HALF).give_up_reason();
    assert_eq!(reason, Some(GiveUpReason::NotRetryable { status: 413, kind: LimitKind::TooLarge }));

    // A success is not retried either, and `x-should-retry: false` wins over a 500.
    assert!(matches!(advise(&policy, 200, &classify(200, &[], "{}"), 0, HALF), Advice::GiveUp { .. }));
    let vetoed = classify(500, &[("x-should-retry", "false")], "");
    assert!(matches!(advise(&policy, 500, &vetoed, 0, HALF), Advice::GiveUp { .. }));
}

#[test]
fn retries_what_waiting_can_fix() {
    let policy = roomy();
    let rate = classify(
        429,
        &[],
        r#"{"error":{"message":"Rate limit reached","type":"tokens","code":"rate_limit_exceeded"}}"#,
    );
    let reason = |status, c: &Classification| match advise(&policy, status, c, 0, HALF) {
        Advice::RetryAfter { reason, .. } => reason,
        other => panic!("status {status}: expected a retry, got {other}"),
    };
    assert_eq!(reason(429, &rate), RetryReason::RateLimited { dimension: LimitDimension::Tokens });
    assert_eq!(reason(529, &classify(529, &[], "")), RetryReason::Overloaded);
    assert_eq!(reason(503, &classify(503, &[], "")), RetryReason::Overloaded);
    for status in [408, 409, 500, 502, 504] {
        assert_eq!(reason(status, &classify(status, &[], "")), RetryReason::Transient { status });
    }
}

#[test]
fn connection_errors_are_retried_with_backoff_alone() {
    let policy = roomy();
    let advice = policy.advise(Outcome::ConnectionError, 0, None, T0, MAX);
    assert_eq!(advice, Advice::RetryAfter { delay: ms(500), reason: RetryReason::ConnectionError });
    assert_eq!(advice.to_string(), "retry after 500 ms: connection error");
}

#[test]
fn delay_is_the_larger_of_retry_after_and_full_jitter() {
    let policy = roomy();
    let c = classify(429, &[("retry-after-ms", "700")], "");
    assert_eq!(c.retry_after_ms, Some(700));
    // Attempt 1: the backoff ceiling is 0.5 s × 2 = 1 s.
    let cases = [(ZERO, ms(700)), (HALF, ms(700)), (MAX, ms(1000))];
    for (random, expected) in cases {
        assert_eq!(advise(&policy, 429, &c, 1, random).delay(), Some(expected), "draw {random:#x}");
    }
    // Attempt 2: ceiling 2 s; a half draw (1 s) now beats the retry-after.
    let patient = RetryPolicy::new(RetryConfig { max_retries: 5, ..RetryConfig::default() }).unwrap();
    assert_eq!(advise(&patient, 429, &c, 2, HALF).delay(), Some(ms(1000)));
    let no_header = classify(500, &[], "");
    for (random, expected) in [(ZERO, Duration::ZERO), (HALF, ms(250)), (MAX, ms(500))] {
        assert_eq!(advise(&policy, 500, &no_header, 0, random).delay(), Some(expected), "draw {random:#x}");
    }
    // A retry-after longer than the backoff cap is still honoured.
    let long = classify(429, &[("retry-after", "20")], "");
    assert_eq!(advise(&policy, 429, &long, 0, MAX).delay(), Some(Duration::from_secs(20)));
}

#[test]
fn backoff_doubles_up_to_the_cap() {
    let config = RetryConfig { max_retries: 100, ..RetryConfig::default() };
    let policy = RetryPolicy::new(config).unwrap();
    let ceilings: Vec<u64> = (0..8).map(|attempt| policy.backoff(attempt, MAX).as_millis() as u64).collect();
    assert_eq!(ceilings, [500, 1000, 2000, 4000, 8000, 8000, 8000, 8000]);
    assert_eq!(policy.backoff(5, HALF), Duration::from_secs(4));
    assert_eq!(policy.backoff(u32::MAX, MAX), Duration::from_secs(8));
    let c = classify(500, &[], "");
    let advice = policy.advise(Outcome::response(500, &c), 60, None, T0, MAX);
    assert_eq!(advice.delay(), Some(Duration::from_secs(8)));
}

#[test]
fn attempts_are_bounded() {
    let policy = roomy();
    assert_eq!(policy.config().max_retries, 2);
    let c = classify(500, &[], "");
    assert!(advise(&policy, 500, &c, 0, HALF).delay().is_some());
    assert!(advise(&policy, 500, &c, 1, HALF).delay().is_some());
    let advice = advise(&policy, 500, &c, 2, HALF);
    assert_eq!(advice, Advice::GiveUp { reason: GiveUpReason::AttemptsExhausted { retries: 2 } });
    assert_eq!(advice.to_string(), "give up: attempts exhausted after 2 retries");
    let never = RetryPolicy::new(RetryConfig { max_retries: 0, ..RetryConfig::default() }).unwrap();
    assert!(matches!(never.advise(Outcome::ConnectionError, 0, None, T0, HALF), Advice::GiveUp { .. }));
}

#[test]
fn nothing_is_retried_past_the_deadline() {
    let policy = roomy();
    let c = classify(429, &[("retry-after", "2")], "");
    let outcome = Outcome::response(429, &c);
    let exceeded = Advice::GiveUp { reason: GiveUpReason::DeadlineExceeded };
    // Exactly at the deadline is still in time; a nanosecond short is not.
    assert!(policy.advise(outcome, 0, Some(T0 + 2 * SEC), T0, HALF).delay().is_some());
    assert_eq!(policy.advise(outcome, 0, Some(T0 + 2 * SEC - 1), T0, HALF), exceeded);
    assert_eq!(policy.advise(outcome, 0, Some(T0 - 1), T0, ZERO), exceeded, "deadline already past");
    // The jitter counts too: a zero draw fits where a full one would not.
    let conn = Outcome::ConnectionError;
    assert!(policy.advise(conn, 1, Some(T0 + SEC / 2), T0, ZERO).delay().is_some());
    assert_eq!(policy.advise(conn, 1, Some(T0 + SEC / 2), T0, MAX), exceeded);
    // No overflow near the end of time.
    assert_eq!(policy.advise(outcome, 0, Some(u64::MAX - 1), u64::MAX - 1, HALF), exceeded);
}

#[test]
fn the_delay_written_never_ends_after_the_deadline() {
    // The delay is written in whole milliseconds rounded up; the deadline
    // was checked on the exact one, so the retry advised could start after it.
    let policy = roomy();
    let c = classify(503, &[], "");
    let random = MAX / 3; // a backoff of 166.666666 ms
    let deadline = T0 + policy.backoff(0, random).as_nanos() as u64;
    let advice = policy.advise(Outcome::response(503, &c), 0, Some(deadline), T0, random);
    assert_eq!(advice, Advice::GiveUp { reason: GiveUpReason::DeadlineExceeded }, "{advice}");
    // The written delay is the one checked, and is what `delay()` says.
    let advice = policy.advise(Outcome::response(503, &c), 0, Some(T0 + 167 * 1_000_000), T0, random);
    assert_eq!(advice.delay(), Some(ms(167)));
    assert_eq!(serde_json::to_value(advice).unwrap()["delay_ms"], 167);
}

#[test]
fn refusals_spend_no_budget() {
    let policy = RetryPolicy::default();
    let c = classify(401, &[], "");
    for _ in 0..50 {
        advise(&policy, 401, &c, 0, HALF);
        policy.advise(Outcome::ConnectionError, 0, Some(T0), T0, MAX);
        policy.advise(Outcome::ConnectionError, 5, None, T0, MAX);
    }
    assert_eq!(policy.budget().available(T0), 10);
}

fn take_all(policy: &RetryPolicy, now: u64) -> usize {
    (0..1000)
        .map(|_| policy.advise(Outcome::ConnectionError, 0, None, now, HALF))
        .take_while(|advice| advice.delay().is_some())
        .count()
}

#[test]
fn budget_allows_a_tenth_of_requests_or_the_minimum() {
    let policy = RetryPolicy::default();
    // A quiet client still gets the minimum.
    assert_eq!(policy.budget().allowance(T0), 10);
    for _ in 0..300 {
        policy.record_request(T0);
    }
    assert_eq!(take_all(&policy, T0), 30);
    let advice = policy.advise(Outcome::ConnectionError, 0, None, T0, HALF);
    assert_eq!(advice, Advice::GiveUp { reason: GiveUpReason::BudgetExhausted });
    assert_eq!(advice.to_string(), "give up: retry budget exhausted");

    let fresh = RetryPolicy::default();
    for _ in 0..100 {
        fresh.record_request(T0);
    }
    assert_eq!(take_all(&fresh, T0), 10);
}

#[test]
fn budget_window_slides() {
    let policy = RetryPolicy::default();
    for _ in 0..100 {
        policy.record_request(T0);
    }
    assert_eq!(take_all(&policy, T0), 10);
    // 30 s later, 100 more requests raise the allowance to 20: 10 more.
    for _ in 0..100 {
        policy.record_request(T0 + 30 * SEC);
    }
    assert_eq!(take_all(&policy, T0 + 30 * SEC), 10);
    // Just under a minute after T0 everything still counts.
    assert_eq!(policy.budget().available(T0 + 60 * SEC - 1), 0);
    // At T0 + 60 s the first 100 requests and 10 retries leave: 100 requests
    // and 10 retries remain, so still nothing.
    assert_eq!(policy.budget().allowance(T0 + 60 * SEC), 10);
    assert_eq!(take_all(&policy, T0 + 60 * SEC), 0);
    // At T0 + 90 s the window is empty: the minimum again.
    assert_eq!(take_all(&policy, T0 + 90 * SEC), 10);
}

#[test]
fn budget_is_shared_across_threads_without_overspending() {
    let policy = Arc::new(RetryPolicy::default());
    for _ in 0..200 {
        policy.record_request(T0);
    }
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let policy = Arc::clone(&policy);
            std::thread::spawn(move || take_all(&policy, T0))
        })
        .collect();
    let taken: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    // Racers may refuse each other spuriously (add-then-check), never overspend;
    // whatever they left is still there for a lone caller.
    assert!(taken <= 20, "overspent: {taken}");
    assert_eq!(taken + take_all(&policy, T0), 20);
}

#[test]
fn bad_budget_configs_are_refused() {
    let config = |budget| RetryConfig { budget, ..RetryConfig::default() };
    let negative = BudgetConfig { ratio: -0.1, ..BudgetConfig::default() };
    assert!(matches!(RetryPolicy::new(config(negative)), Err(Error::InvalidConfig { .. })));
    let zero_window = BudgetConfig { window: Duration::ZERO, ..BudgetConfig::default() };
    assert!(RetryPolicy::new(config(zero_window)).is_err());
}

#[test]
fn advice_serializes_with_tagged_reasons() {
    let retry = Advice::RetryAfter {
        delay: Duration::from_micros(1_500_100),
        reason: RetryReason::RateLimited { dimension: LimitDimension::Tokens },
    };
    let value = serde_json::to_value(retry).unwrap();
    assert_eq!(
        value,
        json!({"advice": "retry_after", "delay_ms": 1501, "reason": {"code": "rate_limited", "dimension": "tokens"}})
    );
    let give_up = Advice::GiveUp { reason: GiveUpReason::NotRetryable { status: 401, kind: LimitKind::None } };
    let value = serde_json::to_value(give_up).unwrap();
    assert_eq!(value, json!({"advice": "give_up", "reason": {"code": "not_retryable", "status": 401, "kind": "none"}}));
    assert_eq!(serde_json::from_value::<Advice>(value).unwrap(), give_up);
    let whole = Advice::RetryAfter { delay: ms(250), reason: RetryReason::Transient { status: 502 } };
    assert_eq!(serde_json::from_str::<Advice>(&serde_json::to_string(&whole).unwrap()).unwrap(), whole);
}

fn context() -> ErrorContext {
    ErrorContext::new()
        .route(["tenants/acme", "openai/org/gpt-4o"])
        .provider_scope("openai/org/gpt-4o")
        .tenant("tenants/acme")
        .request_class("interactive")
        .estimates(3000, 1000)
        .trace_id("4bf92f3577b34da6a3ce929d0e0e4736")
}

fn keys(value: &Value) -> BTreeSet<String> {
    value.as_object().expect("an object").keys().cloned().collect()
}

fn rate_limited(scope: &str) -> Error {
    // `Error::RateLimited` is non-exhaustive: build it the way a user gets it.
    let gov = llmgov::Governor::from_toml(&format!(
        "[scopes.\"{scope}\"]\nlimits = [{{ dimension = \"tokens\", amount = 5000, window = \"1m\" }}]"
    ))
    .unwrap();
    let route = gov.route(&[scope]).unwrap();
    let request = llmgov::Request::new(route).input_tokens(4000).max_output_tokens(1000);
    let _permit = gov.try_acquire(&request).unwrap();
    let error = gov.try_acquire(&request).unwrap_err();
    assert!(matches!(&error, Error::RateLimited { retry_after: Some(_), .. }));
    error
}

#[test]
fn both_constructors_produce_the_same_fields() {
    let local = rate_limited("openai/org/gpt-4o");
    let local = ErrorObject::from_local_denial(&local, &context()).unwrap();
    let remote = ErrorObject::from_provider(&classify(429, &[("retry-after", "20")], ""), &context());
    let (local, remote) = (serde_json::to_value(&local).unwrap(), serde_json::to_value(&remote).unwrap());
    assert_eq!(keys(&local), keys(&remote));
    let expected: BTreeSet<String> = [
        "type",
        "limiter",
        "scope",
        "provider_scope",
        "route",
        "retry_after_ms",
        "tenant",
        "request_class",
        "estimated_input_tokens",
        "estimated_output_tokens",
        "gateway_decision",
        "fallback_allowed",
        "trace_id",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(keys(&local), expected);
    // An empty context keeps every key, as null.
    let bare = serde_json::to_value(ErrorObject::from_provider(&classify(500, &[], ""), &ErrorContext::new())).unwrap();
    assert_eq!(keys(&bare), expected);
    assert_eq!(bare["trace_id"], Value::Null);
}

#[test]
fn local_denial_values() {
    let error = rate_limited("openai/org/gpt-4o");
    let Error::RateLimited { retry_after: Some(wait), .. } = &error else { panic!("expected a rate limit") };
    let object = ErrorObject::from_local_denial(&error, &context()).unwrap();
    let value = serde_json::to_value(&object).unwrap();
    assert_eq!(value["type"], "rate_limited");
    assert_eq!(value["limiter"], "tokens");
    assert_eq!(value["scope"], "openai/org/gpt-4o");
    assert_eq!(value["provider_scope"], "openai/org/gpt-4o");
    assert_eq!(value["route"], json!(["tenants/acme", "openai/org/gpt-4o"]));
    assert_eq!(value["retry_after_ms"], json!(llmgov::ceil_ms(*wait)));
    assert_eq!(value["tenant"], "tenants/acme");
    assert_eq!(value["request_class"], "interactive");
    assert_eq!(
        (value["estimated_input_tokens"].as_u64(), value["estimated_output_tokens"].as_u64()),
        (Some(3000), Some(1000))
    );
    assert_eq!(value["gateway_decision"], "rejected_locally");
    assert_eq!(value["fallback_allowed"], true, "a provider scope's limit: another route may fit");
    assert_eq!(value["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(serde_json::from_value::<ErrorObject>(value).unwrap(), object);

    // A tenant's budget follows it onto every route; a pinned request never moves.
    let tenant = rate_limited("tenants/acme");
    assert!(!ErrorObject::from_local_denial(&tenant, &context()).unwrap().fallback_allowed);
    assert!(!ErrorObject::from_local_denial(&error, &context().pinned(true)).unwrap().fallback_allowed);
}

#[test]
fn never_fits_and_non_denials() {
    let gov = llmgov::Governor::from_toml(
        "[scopes.\"openai/org\"]\nlimits = [{ dimension = \"tokens\", amount = 100, window = \"1m\" }]",
    )
    .unwrap();
    let route = gov.route(&["openai/org"]).unwrap();
    let error = gov.try_acquire(&llmgov::Request::new(route).input_tokens(500)).unwrap_err();
    assert!(matches!(error, Error::NeverFits { dimension: Dimension::Tokens, .. }));
    let object = ErrorObject::from_local_denial(&error, &context()).unwrap();
    assert_eq!(object.error_type, ErrorType::TooLarge);
    assert_eq!((object.retry_after_ms, object.scope.as_deref()), (None, Some("openai/org")));
    assert_eq!(object.gateway_decision, GatewayDecision::RejectedLocally);

    let config_error = llmgov::Governor::from_toml(
        "[scopes.\"x\"]\nlimits = [{ dimension = \"tokens\", amount = 0, window = \"1m\" }]",
    )
    .unwrap_err();
    assert_eq!(ErrorObject::from_local_denial(&config_error, &context()), None);
}

#[test]
fn provider_rejection_values() {
    let body = r#"{"error":{"message":"Rate limit reached","type":"tokens","code":"rate_limit_exceeded"}}"#;
    let c = classify(429, &[("retry-after", "20")], body);
    let value = serde_json::to_value(ErrorObject::from_provider(&c, &context())).unwrap();
    assert_eq!(value["type"], "rate_limited");
    assert_eq!(value["limiter"], "tokens");
    assert_eq!(value["scope"], "openai/org/gpt-4o");
    assert_eq!(value["retry_after_ms"], 20_000);
    assert_eq!(value["gateway_decision"], "admitted_then_provider_rejected");
    assert_eq!(value["fallback_allowed"], true);
    assert_eq!(value["tenant"], "tenants/acme");

    let table = [
        (classify(529, &[], ""), ErrorType::Overloaded, true),
        (classify(413, &[], ""), ErrorType::TooLarge, false),
        (classify(500, &[], ""), ErrorType::ProviderError, true),
        (classify(401, &[], ""), ErrorType::ProviderError, false),
        (
            classify(
                429,
                &[],
                r#"{"error":{"message":"quota","type":"insufficient_quota","code":"insufficient_quota"}}"#,
            ),
            ErrorType::QuotaExhausted,
            true,
        ),
    ];
    for (c, error_type, fallback) in table {
        let object = ErrorObject::from_provider(&c, &context());
        assert_eq!((object.error_type, object.fallback_allowed), (error_type, fallback), "{c:?}");
        assert!(!ErrorObject::from_provider(&c, &context().pinned(true)).fallback_allowed);
    }
    let unknown = ErrorObject::from_provider(&classify(500, &[], ""), &context());
    assert_eq!(unknown.limiter, None, "no limit refused a plain 500");
}
