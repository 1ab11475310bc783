//! Provider feedback on a shared permit: the answer goes to the local scopes
//! of its route (a 429's `retry-after` holds them), and is classified
//! whether or not the route has any.

mod common;

use std::sync::Arc;

use common::{fresh_prefix, redis_url, TIMEOUT};
use llmgov::{LimitKind, ManualClock, Usage};
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
    assert!(permit.feedback_target().is_some(), "the provider scope is local");
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
    assert!(permit.feedback_target().is_none());
    assert!(gov.report(&permit, 429, &RETRY_AFTER_30S, b"").unwrap().limited);
    assert!(!gov.report(&permit, 200, &[] as &[(&str, &str)], b"").unwrap().limited);
    gov.settle(&mut permit, Usage::new(10, 5)).unwrap();
    gov.try_acquire(&route, Usage::new(10, 10)).unwrap();
}
