//! Provider scopes adapt to the provider's answers: AIMD on 429s, limits
//! discovered from `limit` headers, slow start, and the circuit breaker.
//! All on the manual clock.

use std::sync::Arc;
use std::time::Duration;

use llmgov::{
    classify_response, Config, Dimension, Error, Governor, ManualClock, Permit, ProviderHint, Request, Route,
};
use serde_json::{json, Value};

const NOW_UNIX_MS: u64 = 1_767_225_600_000;
const RATE_LIMITED_TOKENS: &[u8] =
    br#"{"error":{"message":"Rate limit reached for tokens","type":"tokens","code":"rate_limit_exceeded"}}"#;

fn gov_with(config: Value) -> (Governor, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(0));
    (Governor::with_clock(&Config::from_value(config).unwrap(), clock.clone()).unwrap(), clock)
}

/// A provider scope of 600 tokens a minute (one per 100 ms), and plenty of requests.
fn tokens_600(adaptive: Value) -> (Governor, Arc<ManualClock>, Route) {
    let (gov, clock) = gov_with(json!({
        "adaptive": adaptive,
        "scopes": {"openai/org": {"provider": true, "limits": [
            {"dimension": "requests", "amount": 6000, "window": "1m"},
            {"dimension": "tokens", "amount": 600, "window": "1m"},
        ]}},
    }));
    let route = gov.route(&["openai/org"]).unwrap();
    (gov, clock, route)
}

fn limit(gov: &Governor, path: &str, dimension: Dimension) -> llmgov::LimitSnapshot {
    let snapshot = gov.scope_snapshot(gov.scope_id(path).unwrap()).unwrap();
    snapshot.limit(dimension).unwrap().clone()
}

fn effective(gov: &Governor, dimension: Dimension) -> u64 {
    limit(gov, "openai/org", dimension).effective_amount.expect("a provider scope's bucket has one")
}

fn answer(gov: &Governor, permit: &Permit, status: u16, headers: &[(&str, &str)], body: &[u8]) {
    gov.report_classified(permit, &classify_response(status, headers, body, ProviderHint::OpenAi, NOW_UNIX_MS))
        .unwrap();
}

fn take(gov: &Governor, route: Route, tokens: u64) -> Permit {
    gov.try_acquire(&Request::new(route).input_tokens(tokens)).unwrap()
}

#[test]
fn a_429_multiplies_the_rate_by_beta_once_per_overload() {
    let (gov, clock, route) = tokens_600(json!({}));
    let early = take(&gov, route, 10);
    let also_early = take(&gov, route, 10);
    assert_eq!(effective(&gov, Dimension::Tokens), 600);
    answer(&gov, &early, 429, &[("retry-after", "1")], RATE_LIMITED_TOKENS);
    assert_eq!(effective(&gov, Dimension::Tokens), 420, "600 × 0.7");
    assert_eq!(effective(&gov, Dimension::Requests), 6000, "the 429 named tokens");
    // Sent before the decrease: the same overload, not news.
    answer(&gov, &also_early, 429, &[("retry-after", "1")], RATE_LIMITED_TOKENS);
    assert_eq!(effective(&gov, Dimension::Tokens), 420);
    clock.advance(Duration::from_secs(2));
    let late = take(&gov, route, 1);
    answer(&gov, &late, 429, &[("retry-after", "1")], RATE_LIMITED_TOKENS);
    assert_eq!(effective(&gov, Dimension::Tokens), 294, "420 × 0.7: sent after the first decrease");
}

#[test]
fn the_slower_rate_refills_slower_and_holds_less() {
    let (gov, clock, route) = tokens_600(json!({"decrease": 0.5}));
    let permit = take(&gov, route, 1);
    answer(&gov, &permit, 429, &[("retry-after", "6")], RATE_LIMITED_TOKENS);
    clock.advance(Duration::from_secs(6));
    assert_eq!(limit(&gov, "openai/org", Dimension::Tokens).available, 0, "empty as the cooldown ends");
    clock.advance(Duration::from_secs(6));
    assert_eq!(limit(&gov, "openai/org", Dimension::Tokens).available, 30, "6 s at 300/min, not 60 at 600/min");
    clock.advance(Duration::from_secs(600));
    assert_eq!(limit(&gov, "openai/org", Dimension::Tokens).available, 300, "the burst shrinks with the rate");
    assert!(
        gov.try_acquire(&Request::new(route).input_tokens(600)).is_ok(),
        "a request of the configured burst still fits"
    );
}

#[test]
fn successes_add_a_step_back_per_window_up_to_the_limit() {
    let (gov, clock, route) = tokens_600(json!({"decrease": 0.5, "increase": 0.1}));
    let permit = take(&gov, route, 1);
    answer(&gov, &permit, 429, &[("retry-after", "1")], RATE_LIMITED_TOKENS);
    assert_eq!(effective(&gov, Dimension::Tokens), 300);
    let ok = take(&gov, route, 0);
    answer(&gov, &ok, 200, &[], b"{}");
    assert_eq!(effective(&gov, Dimension::Tokens), 300, "no step within the window of the decrease");
    for (minute, expected) in [(1, 360), (2, 420), (3, 480), (4, 540), (5, 600), (6, 600)] {
        clock.advance(Duration::from_secs(60));
        answer(&gov, &ok, 200, &[], b"{}");
        answer(&gov, &ok, 200, &[], b"{}");
        assert_eq!(effective(&gov, Dimension::Tokens), expected, "minute {minute}: one step per window");
    }
}

#[test]
fn a_limit_left_unset_is_discovered_from_the_headers() {
    let (gov, clock) = gov_with(json!({"scopes": {"openai/org": {"provider": true, "limits": [
        {"dimension": "requests", "window": "1m"},
        {"dimension": "tokens", "window": "1m"},
    ]}}}));
    let route = gov.route(&["openai/org"]).unwrap();
    assert_eq!(effective(&gov, Dimension::Tokens), 0, "unknown yet");
    let probe = take(&gov, route, 5000);
    let second = gov.try_acquire(&Request::new(route).input_tokens(1)).unwrap_err();
    assert!(matches!(second, Error::RateLimited { .. }), "one request per window until the provider says: {second}");
    clock.advance(Duration::from_secs(3));
    let headers = [
        ("x-ratelimit-limit-tokens", "30000"),
        ("x-ratelimit-remaining-tokens", "25000"),
        ("x-ratelimit-limit-requests", "500"),
        ("x-ratelimit-remaining-requests", "499"),
    ];
    answer(&gov, &probe, 200, &headers, b"{}");
    assert_eq!(effective(&gov, Dimension::Tokens), 30000);
    assert_eq!(effective(&gov, Dimension::Requests), 500);
    assert_eq!(limit(&gov, "openai/org", Dimension::Tokens).available, 25000, "the provider's count, not our guess");
    assert_eq!(limit(&gov, "openai/org", Dimension::Requests).available, 499);
    assert!(gov.try_acquire(&Request::new(route).input_tokens(25000)).is_ok());
    assert!(gov.try_acquire(&Request::new(route).input_tokens(1)).is_err());
    clock.advance(Duration::from_secs(1));
    assert_eq!(limit(&gov, "openai/org", Dimension::Tokens).available, 500, "refilling at 30000 a minute");
}

/// Before its limit is learned a provider scope admits one request a
/// window, to learn it from the answer. A request cancelled (never sent)
/// gives its admission back; one settled (sent, answered) keeps it.
#[test]
fn a_cancelled_request_gives_back_the_admission_an_unlearned_limit_allows() {
    let (gov, _clock) = gov_with(json!({"scopes": {"openai/org": {"provider": true, "limits": [
        {"dimension": "tokens", "window": "1d"},
    ]}}}));
    let route = gov.route(&["openai/org"]).unwrap();
    let request = Request::new(route).input_tokens(100).max_output_tokens(50);
    let mut cancelled = gov.try_acquire(&request).unwrap();
    assert!(gov.try_acquire(&request).is_err(), "one request a window until the provider says");
    gov.cancel(&mut cancelled).unwrap();
    let mut settled = gov.try_acquire(&request).expect("the cancelled request's admission is back");
    gov.settle(&mut settled, llmgov::Usage::new(100, 10)).unwrap();
    let refused = gov.try_acquire(&request).unwrap_err();
    assert!(matches!(refused, Error::RateLimited { .. }), "a sent request keeps its admission: {refused}");
}

#[test]
fn output_streamed_before_a_limit_is_learned_costs_no_windows_of_debt() {
    let (gov, clock) = gov_with(json!({"scopes": {"openai/org": {"provider": true, "limits": [
        {"dimension": "tokens", "window": "1m"},
    ]}}}));
    let route = gov.route(&["openai/org"]).unwrap();
    let mut permit = gov.try_acquire(&Request::new(route).input_tokens(100).max_output_tokens(50)).unwrap();
    for _ in 0..20 {
        // 5 tokens a chunk: the last ten chunks are past max_tokens.
        gov.add_output(&mut permit, 5).unwrap();
        clock.advance(Duration::from_millis(100));
    }
    gov.observe(
        route,
        &classify_response(200, &[("x-ratelimit-limit-tokens", "30000")], b"{}", ProviderHint::OpenAi, 0),
    )
    .unwrap();
    gov.settle(&mut permit, llmgov::Usage::new(100, 100)).unwrap();
    // The request took the window's one admission; a window later the
    // learned 30000 a minute are there (ten streamed chunks each charged a
    // window used to hold the bucket ten minutes more).
    clock.advance(Duration::from_secs(60));
    assert!(gov.try_acquire(&Request::new(route).input_tokens(1000)).is_ok());
}

#[test]
fn a_provider_limit_lower_than_configured_wins_and_a_higher_one_does_not() {
    let (gov, _clock, route) = tokens_600(json!({}));
    let permit = take(&gov, route, 0);
    answer(&gov, &permit, 200, &[("x-ratelimit-limit-tokens", "300")], b"{}");
    assert_eq!(effective(&gov, Dimension::Tokens), 300);
    answer(&gov, &permit, 200, &[("x-ratelimit-limit-tokens", "900")], b"{}");
    assert_eq!(effective(&gov, Dimension::Tokens), 600, "never above the configured limit");
}

#[test]
fn discovery_applies_the_safety_margin_and_needs_matching_windows() {
    let (gov, _clock) = gov_with(json!({"safety_margin": 0.5, "scopes": {"openai/org": {"provider": true, "limits": [
        {"dimension": "tokens", "window": "1m"},
        {"dimension": "tokens", "window": "1d"},
    ]}}}));
    let route = gov.route(&["openai/org"]).unwrap();
    let permit = take(&gov, route, 1);
    answer(&gov, &permit, 200, &[("x-ratelimit-limit-tokens", "1000")], b"{}");
    let snapshot = gov.scope_snapshot(gov.scope_id("openai/org").unwrap()).unwrap();
    assert_eq!(snapshot.limits[0].effective_amount, Some(500), "1000 × 0.5");
    assert_eq!(snapshot.limits[1].effective_amount, Some(0), "a per-minute header says nothing of a day");
}

#[test]
fn a_ramp_starts_low_and_grows_a_step_a_minute_with_successes() {
    let (gov, clock, route) = tokens_600(json!({"ramp": {"start": 0.25, "step": 0.25}, "increase": 0.5}));
    assert_eq!(effective(&gov, Dimension::Tokens), 150);
    assert_eq!(limit(&gov, "openai/org", Dimension::Tokens).available, 150, "the first burst is a quarter");
    let ok = take(&gov, route, 0);
    for expected in [300, 450, 600, 600] {
        clock.advance(Duration::from_secs(60));
        answer(&gov, &ok, 200, &[], b"{}");
        assert_eq!(effective(&gov, Dimension::Tokens), expected, "the ramp's step caps AIMD's larger one");
    }
    clock.advance(Duration::from_secs(600));
    assert_eq!(effective(&gov, Dimension::Tokens), 600, "growth needs successes, not just time");
}

fn breaker_gov() -> (Governor, Arc<ManualClock>, Route) {
    let (gov, clock) = gov_with(json!({
        "adaptive": {"breaker": {"failures": 3, "pauses": ["30s", "2m"]}, "ramp": {"start": 0.5, "step": 0.5}},
        "scopes": {
            "openai/org": {"provider": true, "limits": [{"dimension": "requests", "amount": 6000, "window": "1m"}]},
            "tenants/*": {"limits": [{"dimension": "requests", "amount": 6000, "window": "1m"}]},
        },
    }));
    let route = gov.route(&["tenants/a", "openai/org"]).unwrap();
    (gov, clock, route)
}

fn circuit_open(result: Result<Permit, Error>) -> Duration {
    match result {
        Err(Error::CircuitOpen { scope, retry_after, .. }) => {
            assert_eq!(&*scope, "openai/org");
            retry_after
        }
        other => panic!("expected an open circuit, got {other:?}"),
    }
}

#[test]
fn consecutive_failures_open_the_breaker_and_a_probe_closes_it() {
    let (gov, clock, route) = breaker_gov();
    let request = Request::new(route);
    let permits: Vec<Permit> = (0..4).map(|_| gov.try_acquire(&request).unwrap()).collect();
    answer(&gov, &permits[0], 500, &[], b"{}");
    answer(&gov, &permits[1], 200, &[], b"{}");
    answer(&gov, &permits[2], 503, &[], b"{}");
    answer(&gov, &permits[3], 500, &[], b"{}");
    assert!(gov.try_acquire(&request).is_ok(), "a success between failures resets the count");
    let tenant_before = limit(&gov, "tenants/a", Dimension::Requests).available;
    answer(&gov, &permits[3], 529, &[], b"{}");
    assert_eq!(circuit_open(gov.try_acquire(&request)), Duration::from_secs(30));
    assert_eq!(limit(&gov, "tenants/a", Dimension::Requests).available, tenant_before, "nothing reserved anywhere");
    assert_eq!(gov.snapshot().circuit_open, 1);
    assert_eq!(gov.scope_snapshot(gov.scope_id("openai/org").unwrap()).unwrap().breaker, Some("open"));

    clock.advance(Duration::from_secs(30));
    let probe = gov.try_acquire(&request).expect("the pause is over: one probe goes");
    assert_eq!(circuit_open(gov.try_acquire(&request)), Duration::from_secs(30), "only one probe at a time");
    answer(&gov, &probe, 500, &[], b"{}");
    assert_eq!(circuit_open(gov.try_acquire(&request)), Duration::from_secs(120), "the next pause is longer");

    clock.advance(Duration::from_secs(120));
    let probe = gov.try_acquire(&request).unwrap();
    answer(&gov, &probe, 200, &[], b"{}");
    assert_eq!(gov.scope_snapshot(gov.scope_id("openai/org").unwrap()).unwrap().breaker, Some("closed"));
    assert!(gov.try_acquire(&request).is_ok());
    assert_eq!(effective(&gov, Dimension::Requests), 3000, "a reopened deployment ramps from the start");
}

#[test]
fn a_lost_probe_is_replaced_after_a_pause() {
    let (gov, clock, route) = breaker_gov();
    let request = Request::new(route);
    let permit = gov.try_acquire(&request).unwrap();
    for _ in 0..3 {
        answer(&gov, &permit, 500, &[], b"{}");
    }
    clock.advance(Duration::from_secs(30));
    let _lost = gov.try_acquire(&request).unwrap();
    clock.advance(Duration::from_secs(29));
    assert!(gov.try_acquire(&request).is_err());
    clock.advance(Duration::from_secs(1));
    assert!(gov.try_acquire(&request).is_ok(), "a probe that never answers does not hold the breaker forever");
}

#[test]
fn too_large_and_client_errors_do_not_trip_the_breaker() {
    let (gov, _clock, route) = breaker_gov();
    let request = Request::new(route);
    let permit = gov.try_acquire(&request).unwrap();
    for _ in 0..5 {
        answer(&gov, &permit, 413, &[], b"{}");
    }
    assert!(gov.try_acquire(&request).is_ok());
}

#[test]
fn adaptive_config_errors_name_the_field_and_value() {
    let bad = |config: Value, field: &str, value: &str| {
        let err = Config::from_value(config).unwrap().validate().unwrap_err();
        match &err {
            Error::InvalidConfig { field: f, value: v, .. } => {
                assert_eq!((f.as_str(), v.as_str()), (field, value), "{err}")
            }
            other => panic!("expected a config error, got {other:?}"),
        }
    };
    let scope = json!({"provider": true, "limits": [{"dimension": "tokens", "amount": 10, "window": "1m"}]});
    bad(json!({"adaptive": {"decrease": 1.0}, "scopes": {"p": scope}}), "adaptive.decrease", "1");
    bad(json!({"adaptive": {"ramp": {"start": 0, "step": 0.1}}, "scopes": {"p": scope}}), "adaptive.ramp.start", "0");
    bad(json!({"adaptive": {"breaker": {"pauses": []}}, "scopes": {"p": scope}}), "adaptive.breaker.pauses", "[]");
    bad(
        json!({"adaptive": {"breaker": {"pauses": ["soon"]}}, "scopes": {"p": scope}}),
        "adaptive.breaker.pauses[0]",
        "soon",
    );
    bad(
        json!({"scopes": {"own": {"limits": [{"dimension": "tokens", "window": "1m"}]}}}),
        "scopes.own.limits[0].amount",
        "",
    );
    bad(
        json!({"scopes": {"p": {"provider": true, "limits": [{"dimension": "concurrency"}]}}}),
        "scopes.p.limits[0].amount",
        "",
    );
    // Headers state limits per minute or per day: a limit in another window
    // would never learn its amount.
    bad(
        json!({"scopes": {"p": {"provider": true, "limits": [{"dimension": "requests", "window": "1h"}]}}}),
        "scopes.p.limits[0].window",
        "1h",
    );
}

#[test]
fn a_waiter_waits_out_an_open_breaker_and_goes_as_the_probe() {
    let (gov, clock, route) = breaker_gov();
    let request = Request::new(route);
    let permit = gov.try_acquire(&request).unwrap();
    for _ in 0..3 {
        answer(&gov, &permit, 500, &[], b"{}");
    }
    let waiting = gov.acquire(&request);
    assert_eq!(gov.queue_metrics().depth, 1, "an open breaker queues the request, it does not refuse it");
    clock.advance(Duration::from_secs(30));
    gov.wake_waiters();
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let probe = runtime.block_on(waiting).expect("admitted as the probe when the pause ends");
    assert_eq!(circuit_open(gov.try_acquire(&request)), Duration::from_secs(30), "one probe at a time");
    answer(&gov, &probe, 200, &[], b"{}");
    assert!(gov.try_acquire(&request).is_ok());
}

#[test]
fn a_request_that_cannot_outwait_an_open_breaker_is_refused_at_once() {
    let (gov, _clock, route) = breaker_gov();
    let permit = gov.try_acquire(&Request::new(route)).unwrap();
    for _ in 0..3 {
        answer(&gov, &permit, 500, &[], b"{}");
    }
    let impatient = Request::new(route).deadline(Duration::from_secs(5));
    assert_eq!(circuit_open(gov.acquire_blocking(&impatient, None)), Duration::from_secs(30));
    assert_eq!(gov.queue_metrics().depth, 0, "nobody waits for a failure");
}

/// No decrease has happened yet when the clock is young: a 429 observed
/// without its permit in the governor's first second is news too.
#[test]
fn a_429_observed_in_the_first_second_lowers_the_rate() {
    let (gov, clock, route) = tokens_600(json!({}));
    clock.advance(Duration::from_millis(500));
    let refused = classify_response(429, &[("retry-after", "1")], RATE_LIMITED_TOKENS, ProviderHint::OpenAi, 0);
    gov.observe(route, &refused).unwrap();
    assert_eq!(effective(&gov, Dimension::Tokens), 420, "600 × 0.7");
}

/// A 429 that names no limit holds the scope's per-minute buckets empty
/// until its retry-after; it says nothing of a daily quota, which draining
/// would leave a day to refill (a day's 14400 requests at 10 a minute).
#[test]
fn a_429_naming_no_limit_does_not_drain_a_daily_quota() {
    let (gov, clock) = gov_with(json!({"scopes": {"groq/org": {"provider": true, "limits": [
        {"dimension": "requests", "amount": 600, "window": "1m"},
        {"dimension": "requests", "amount": 14400, "window": "1d"},
    ]}}}));
    let route = gov.route(&["groq/org"]).unwrap();
    let permit = take(&gov, route, 0);
    answer(&gov, &permit, 429, &[("retry-after", "1")], b"");
    assert!(gov.try_acquire(&Request::new(route)).is_err(), "held empty until the retry-after");
    clock.advance(Duration::from_secs(61));
    let admitted = (0..100).filter(|_| gov.try_acquire(&Request::new(route)).is_ok()).count();
    assert_eq!(admitted, 100, "a minute on, the per-minute bucket has refilled and the day's quota is untouched");
}

/// The transports report a refusal, then cancel its permit. The cancel's
/// refund must not reopen a bucket the 429 holds empty until its
/// retry-after: the provider said when to come back.
#[test]
fn a_cancel_after_a_429_keeps_the_bucket_empty_until_the_retry_after() {
    let (gov, clock, route) = tokens_600(json!({}));
    let mut refused = take(&gov, route, 300);
    answer(&gov, &refused, 429, &[("retry-after", "20")], RATE_LIMITED_TOKENS);
    gov.cancel(&mut refused).unwrap();
    clock.advance(Duration::from_secs(5));
    let early = gov.try_acquire(&Request::new(route).input_tokens(10));
    assert!(matches!(early, Err(Error::RateLimited { .. })), "5 s into a 20 s retry-after: {early:?}");
}

/// A deployment made from a template long after the governor started
/// ramps a step a minute from when it was made, not from the clock's zero.
#[test]
fn a_template_deployment_made_late_ramps_from_when_it_was_made() {
    let (gov, clock) = gov_with(json!({
        "adaptive": {"ramp": {"start": 0.25, "step": 0.25}, "increase": 0.5},
        "scopes": {"openai/keys/*": {"provider": true, "limits": [{"dimension": "tokens", "amount": 600, "window": "1m"}]}},
    }));
    clock.advance(Duration::from_secs(3600));
    let route = gov.route(&["openai/keys/new"]).unwrap();
    let key = |gov: &Governor| limit(gov, "openai/keys/new", Dimension::Tokens).effective_amount.unwrap();
    assert_eq!(key(&gov), 150);
    let ok = take(&gov, route, 0);
    answer(&gov, &ok, 200, &[], b"{}");
    assert_eq!(key(&gov), 150, "made a moment ago: no step yet");
    clock.advance(Duration::from_secs(60));
    answer(&gov, &ok, 200, &[], b"{}");
    assert_eq!(key(&gov), 300);
}

#[test]
fn a_learned_limit_lowered_while_a_request_is_in_flight_refunds_only_what_it_charged() {
    let (gov, clock) = gov_with(json!({"scopes": {"openai/org": {"provider": true, "limits": [
        {"dimension": "tokens", "window": "1m"},
    ]}}}));
    let route = gov.route(&["openai/org"]).unwrap();
    let learn = |limit: &str| {
        let feedback = classify_response(200, &[("x-ratelimit-limit-tokens", limit)], b"{}", ProviderHint::OpenAi, 0);
        gov.observe(route, &feedback).unwrap();
    };
    learn("10000");
    // Each costs half a minute at 10000 a minute: together, the whole bucket.
    let mut unused = take(&gov, route, 5000);
    let _in_flight = take(&gov, route, 5000);
    learn("1000");
    gov.settle(&mut unused, llmgov::Usage::new(0, 0)).unwrap();
    // The refund is the half minute charged: 500 tokens at 1000 a minute,
    // not 5000 tokens' worth at the new rate (the whole bucket again).
    assert!(gov.try_acquire(&Request::new(route).input_tokens(600)).is_err(), "600 > the 500 refunded");
    // A request acquired after the fall paid the new rate and gets it back.
    clock.advance(Duration::from_millis(1));
    let mut after = take(&gov, route, 500);
    gov.settle(&mut after, llmgov::Usage::new(0, 0)).unwrap();
    assert!(gov.try_acquire(&Request::new(route).input_tokens(500)).is_ok());
}

/// Anthropic refuses on input tokens a minute; the scope models its limits
/// as a combined `tokens` limit. The retry-after holds all the same.
#[test]
fn a_429_naming_a_dimension_the_scope_does_not_model_holds_the_nearest_one() {
    let (gov, clock) = gov_with(json!({"scopes": {"anthropic/org": {"provider": true, "limits": [
        {"dimension": "requests", "amount": 50, "window": "1m"},
        {"dimension": "tokens", "amount": 60000, "window": "1m"},
    ]}}}));
    let route = gov.route(&["anthropic/org"]).unwrap();
    let permit = take(&gov, route, 100);
    let body = br#"{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization of 50,000 input tokens per minute."}}"#;
    let refused = classify_response(429, &[("retry-after", "30")], body, ProviderHint::Anthropic, NOW_UNIX_MS);
    assert_eq!(refused.dimension, llmgov::LimitDimension::InputTokens);
    assert_eq!(gov.report_classified(&permit, &refused).unwrap(), 1, "the tokens limit, not the requests one");
    clock.advance(Duration::from_secs(29));
    assert!(matches!(gov.try_acquire(&Request::new(route).input_tokens(100)), Err(Error::RateLimited { .. })));
    // The bucket refills from empty at the retry-after, at the decreased rate.
    clock.advance(Duration::from_secs(2));
    assert!(gov.try_acquire(&Request::new(route).input_tokens(100)).is_ok(), "the retry-after is over");
}

/// A 429 naming what the scope models nothing near (requests, on a scope
/// of tokens only) holds the scope's rates as one naming nothing would.
#[test]
fn a_429_naming_a_dimension_nothing_near_holds_every_rate() {
    let (gov, clock) = gov_with(json!({"scopes": {"openai/org": {"provider": true, "limits": [
        {"dimension": "tokens", "amount": 60000, "window": "1m"},
        {"dimension": "tokens", "amount": 1000000, "window": "1d"},
    ]}}}));
    let route = gov.route(&["openai/org"]).unwrap();
    let permit = take(&gov, route, 100);
    answer(
        &gov,
        &permit,
        429,
        &[("retry-after", "5")],
        br#"{"error":{"message":"Rate limit reached for requests","type":"requests","code":"rate_limit_exceeded"}}"#,
    );
    clock.advance(Duration::from_secs(4));
    assert!(gov.try_acquire(&Request::new(route).input_tokens(100)).is_err());
    // Then the minute's bucket refills; the daily quota was never drained
    // (from empty, 100 tokens of it would take 8.6 s).
    clock.advance(Duration::from_secs(2));
    assert!(gov.try_acquire(&Request::new(route).input_tokens(100)).is_ok());
}
