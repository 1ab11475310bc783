//! Provider feedback on a shared permit: the answer goes to the local scopes
//! of its route (a 429's `retry-after` holds them), and is classified
//! whether or not the route has any; a 429 holds a shared provider scope
//! empty in Redis, for every process.

mod common;

use std::sync::Arc;

use common::{free_port, fresh_prefix, redis_url, TIMEOUT};
use llmgov::{Dimension, LimitKind, ManualClock, Usage};
use llmgov_redis::{Error, RedisGovernor};

fn config(url: &str, prefix: &str) -> String {
    format!(
        r#"
        [scopes."openai/org"]
        provider = true
        limits = [{{ dimension = "requests", amount = 1000, window = "1m" }}]
        [scopes."team"]
        limits = [{{ dimension = "tokens", amount = 100000, window = "1m" }}]
        [redis]
        url = "{url}"
        prefix = "{prefix}"
        expected_processes = 2
        timeout = "{TIMEOUT}"
        [redis.scopes."team"]
        mode = "exact"
        "#
    )
}

const RETRY_AFTER_30S: [(&str, &str); 1] = [("retry-after", "30")];

#[test]
fn a_429_holds_the_local_provider_scope_for_its_retry_after() {
    let Some(url) = redis_url("a_429_holds_the_local_provider_scope") else { return };
    let clock = Arc::new(ManualClock::new(0));
    let gov = RedisGovernor::from_toml_with_clock(&config(&url, &fresh_prefix("feedback")), clock.clone()).unwrap();
    let route = gov.route(&["team", "openai/org"]).unwrap();
    let mut permit = gov.try_acquire(&route, Usage::new(10, 10)).unwrap();
    assert!(permit.feedback_target().has_local_scopes(), "the provider scope is local");
    let classified = gov.report(&permit, 429, &RETRY_AFTER_30S, b"").unwrap();
    assert!(classified.limited && classified.kind == LimitKind::RateLimited, "{classified:?}");
    gov.cancel(&mut permit).unwrap();
    match gov.try_acquire(&route, Usage::new(10, 10)) {
        Err(Error::RateLimited { scope, retry_after, .. }) => {
            assert_eq!(&*scope, "openai/org");
            assert!(retry_after.is_some_and(|d| d.as_secs() >= 29), "{retry_after:?}");
        }
        other => panic!("expected the provider scope to hold the request, got {other:?}"),
    }
    // The hold is the retry-after and a little more: AIMD has slowed the
    // scope's rate too.
    clock.advance(std::time::Duration::from_secs(31));
    gov.try_acquire(&route, Usage::new(10, 10)).unwrap();
    let snapshot = gov.local().snapshot();
    assert_eq!(snapshot.admitted_then_provider_rejected, 1, "the local tally counts the 429");
}

#[test]
fn an_answer_on_a_route_with_no_local_scope_is_classified_only() {
    let Some(url) = redis_url("an_answer_on_a_route_with_no_local_scope") else { return };
    let gov = RedisGovernor::from_toml_with_clock(
        &config(&url, &fresh_prefix("feedback-shared")),
        Arc::new(ManualClock::new(0)),
    )
    .unwrap();
    let route = gov.route(&["team"]).unwrap();
    let mut permit = gov.try_acquire(&route, Usage::new(10, 10)).unwrap();
    assert!(!permit.feedback_target().has_local_scopes());
    assert_eq!(permit.feedback_target().shared_provider_scopes(), 0);
    assert!(gov.report(&permit, 429, &RETRY_AFTER_30S, b"").unwrap().limited);
    assert!(!gov.report(&permit, 200, &[] as &[(&str, &str)], b"").unwrap().limited);
    gov.settle(&mut permit, Usage::new(10, 5)).unwrap();
    gov.try_acquire(&route, Usage::new(10, 10)).unwrap();
}

/// The config of a shared provider scope `openai/key` in `mode`, with a
/// requests and a tokens limit.
fn shared_provider_config(url: &str, prefix: &str, mode: &str) -> String {
    format!(
        r#"
        [scopes."openai/key"]
        provider = true
        limits = [
          {{ dimension = "requests", amount = 1000, window = "1m" }},
          {{ dimension = "tokens", amount = 1000000, window = "1m" }},
        ]
        [redis]
        url = "{url}"
        prefix = "{prefix}"
        expected_processes = 2
        timeout = "{TIMEOUT}"
        [redis.scopes."openai/key"]
        mode = "{mode}"
        "#
    )
}

/// Two processes' governors (one prefix) sharing `openai/key` in `mode`.
fn shared_provider(url: &str, prefix: &str, mode: &str) -> [RedisGovernor; 2] {
    let config = shared_provider_config(url, prefix, mode);
    [(); 2].map(|_| RedisGovernor::from_toml_with_clock(&config, Arc::new(ManualClock::new(0))).unwrap())
}

const TOKENS_429: [(&str, &str); 2] = [("retry-after", "30"), ("x-ratelimit-remaining-tokens", "0")];

#[test]
fn a_429_holds_a_shared_provider_scope_for_every_process_and_refunds_do_not_shorten_it() {
    let Some(url) = redis_url("a_429_holds_a_shared_provider_scope") else { return };
    let [a, b] = shared_provider(&url, &fresh_prefix("feedback-hold"), "exact");
    let (route_a, route_b) = (a.route(&["openai/key"]).unwrap(), b.route(&["openai/key"]).unwrap());
    // Reserved before the 429, refunded after it.
    let mut early = a.try_acquire(&route_a, Usage::new(20_000, 20_000)).unwrap();
    let mut refused = a.try_acquire(&route_a, Usage::new(10, 10)).unwrap();
    assert_eq!(refused.feedback_target().shared_provider_scopes(), 1);
    // An answer that is no rate limit holds nothing.
    a.report(&refused, 200, &[] as &[(&str, &str)], b"").unwrap();
    b.settle(&mut b.try_acquire(&route_b, Usage::new(10, 10)).unwrap(), Usage::new(10, 10)).unwrap();

    let classified = a.report(&refused, 429, &TOKENS_429, b"").unwrap();
    assert_eq!(classified.kind, LimitKind::RateLimited);
    a.cancel(&mut refused).unwrap();
    a.settle(&mut early, Usage::new(10, 10)).unwrap();
    for (gov, route) in [(&b, &route_b), (&a, &route_a)] {
        match gov.try_acquire(route, Usage::new(10, 10)) {
            Err(Error::RateLimited { scope, dimension, retry_after }) => {
                assert_eq!((&*scope, dimension), ("openai/key", Dimension::Tokens), "the 429 named tokens");
                assert!(retry_after.is_some_and(|d| d.as_secs() >= 29), "the whole hold: {retry_after:?}");
            }
            other => panic!("expected the shared provider scope to hold the request, got {other:?}"),
        }
    }
}

#[test]
fn a_429_on_a_leased_provider_scope_empties_this_lease_and_every_next_one() {
    let Some(url) = redis_url("a_429_on_a_leased_provider_scope") else { return };
    let [a, b] = shared_provider(&url, &fresh_prefix("feedback-leased"), "leased");
    let (route_a, route_b) = (a.route(&["openai/key"]).unwrap(), b.route(&["openai/key"]).unwrap());
    let mut sent = a.try_acquire(&route_a, Usage::new(10, 10)).unwrap();
    b.settle(&mut b.try_acquire(&route_b, Usage::new(10, 10)).unwrap(), Usage::new(10, 10)).unwrap();
    a.report(&sent, 429, &[("retry-after", "30")], b"").unwrap();
    a.cancel(&mut sent).unwrap();
    let refusal = |gov: &RedisGovernor, route| match gov.try_acquire(route, Usage::new(10, 10)) {
        Err(Error::RateLimited { scope, dimension, retry_after }) => {
            assert!(retry_after.is_some_and(|d| d.as_secs() >= 29), "the renewal says the hold: {retry_after:?}");
            Some((scope.to_string(), dimension))
        }
        Ok(mut permit) => gov.cancel(&mut permit).map(|()| None).unwrap(),
        Err(other) => panic!("{other:?}"),
    };
    // A 429 naming no limit holds every per-minute one; requests come first.
    let held = Some(("openai/key".to_string(), Dimension::Requests));
    assert_eq!(refusal(&a, &route_a), held, "the reporting process gave its lease up");
    // The other spends at most what its lease still held, then renews into the hold.
    let admitted_from_lease = (0..64).take_while(|_| refusal(&b, &route_b).is_none()).count();
    assert!(admitted_from_lease < 64, "b was never held");
    assert_eq!(refusal(&b, &route_b), held);
}

#[test]
fn a_feedback_target_of_another_governor_is_refused() {
    let Some(url) = redis_url("a_feedback_target_of_another_governor") else { return };
    let [a, b] = shared_provider(&url, &fresh_prefix("feedback-foreign"), "exact");
    let mut permit = a.try_acquire(&a.route(&["openai/key"]).unwrap(), Usage::new(10, 10)).unwrap();
    match b.report_sent(&permit.feedback_target(), 429, &TOKENS_429, b"") {
        Err(Error::Core(llmgov::Error::InvalidRequest { field, .. })) => assert_eq!(field, "permit"),
        other => panic!("expected InvalidRequest, got {other:?}"),
    }
    a.cancel(&mut permit).unwrap();
    a.try_acquire(&a.route(&["openai/key"]).unwrap(), Usage::new(10, 10)).unwrap();
}

#[test]
fn while_redis_is_away_the_safe_share_holds_a_shared_provider_scope_after_a_429() {
    let url = format!("redis://127.0.0.1:{}", free_port());
    let clock = Arc::new(ManualClock::new(0));
    let config = shared_provider_config(&url, &fresh_prefix("feedback-away"), "exact");
    let gov = RedisGovernor::from_toml_with_clock(&config, clock.clone()).unwrap();
    let route = gov.route(&["openai/key"]).unwrap();
    let mut sent = gov.try_acquire(&route, Usage::new(10, 10)).unwrap();
    assert!(sent.from_fallback());
    gov.report(&sent, 429, &RETRY_AFTER_30S, b"").unwrap();
    gov.cancel(&mut sent).unwrap();
    match gov.try_acquire(&route, Usage::new(10, 10)) {
        Err(Error::RateLimited { scope, retry_after, .. }) => {
            assert_eq!(&*scope, "openai/key");
            assert!(retry_after.is_some_and(|d| d.as_secs() >= 29), "{retry_after:?}");
        }
        other => panic!("expected the safe share to hold the provider scope, got {other:?}"),
    }
    clock.advance(std::time::Duration::from_secs(31));
    assert!(gov.try_acquire(&route, Usage::new(10, 10)).unwrap().from_fallback());
    assert!(gov.health().degraded);
}
