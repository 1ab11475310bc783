//! Streamed output on a shared permit: `add_output` charges the route's
//! local scopes as the core's permits do, with no Redis call; the shared
//! scopes reserved `max_tokens` already and are charged any more at settle.

mod common;

use std::sync::Arc;

use common::{fresh_prefix, redis_url, TIMEOUT};
use llmgov::{ManualClock, Usage};
use llmgov_redis::{Error, RedisGovernor};

/// A shared team budget, and a local provider scope of 100 output tokens a minute.
fn config(url: &str, prefix: &str) -> String {
    format!(
        r#"
        [scopes."team"]
        limits = [{{ dimension = "tokens", amount = 100000, window = "1m" }}]
        [scopes."openai/key"]
        limits = [{{ dimension = "output_tokens", amount = 100, window = "1m" }}]
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

const PATHS: [&str; 2] = ["team", "openai/key"];

#[test]
fn streamed_output_is_charged_on_the_local_scopes_without_a_redis_call() {
    let Some(url) = redis_url("streamed_output_is_charged_on_the_local_scopes") else { return };
    let gov =
        RedisGovernor::from_toml_with_clock(&config(&url, &fresh_prefix("streamed")), Arc::new(ManualClock::new(0)))
            .unwrap();
    let route = gov.route(&PATHS).unwrap();
    let mut streaming = gov.try_acquire(&route, Usage::new(10, 40)).unwrap();
    let calls = gov.health().redis_calls;
    // 40 reserved; 70 streamed charges 30 more at once, locally.
    gov.add_output(&mut streaming, 30).unwrap();
    gov.add_output(&mut streaming, 40).unwrap();
    assert_eq!(gov.health().redis_calls, calls, "add_output never calls Redis");
    match gov.try_acquire(&route, Usage::new(10, 40)) {
        Err(Error::RateLimited { scope, .. }) => assert_eq!(&*scope, "openai/key", "70 of 100 streamed"),
        other => panic!("expected the local scope to refuse, got {other:?}"),
    }
    let mut small = gov.try_acquire(&route, Usage::new(10, 30)).expect("30 of 100 left");
    gov.cancel(&mut small).unwrap();
    gov.settle(&mut streaming, Usage::new(10, 70)).unwrap();
    assert!(matches!(gov.add_output(&mut streaming, 1), Err(Error::AlreadyReconciled)));
    assert!(!gov.health().degraded);
}

#[test]
fn a_bad_or_late_streamed_count_is_refused_by_name() {
    // No server: the route's shared part comes from the safe share.
    let url = format!("redis://127.0.0.1:{}", common::free_port());
    let clock = Arc::new(ManualClock::new(0));
    let gov = RedisGovernor::from_toml_with_clock(&config(&url, &fresh_prefix("streamed-bad")), clock.clone()).unwrap();
    let route = gov.route(&PATHS).unwrap();
    let mut permit = gov.try_acquire(&route, Usage::new(10, 40)).unwrap();
    assert!(permit.from_fallback());
    match gov.add_output(&mut permit, llmgov::MAX_TOKENS + 1) {
        Err(Error::Core(llmgov::Error::InvalidRequest { field, value, .. })) => {
            assert_eq!((field, value), ("tokens", (llmgov::MAX_TOKENS + 1).to_string()));
        }
        other => panic!("expected InvalidRequest, got {other:?}"),
    }
    // Past the permit TTL (10 min) and its slot (TTL/16).
    clock.advance(std::time::Duration::from_secs(700));
    let late = gov.add_output(&mut permit, 1);
    assert!(matches!(late, Err(Error::Core(llmgov::Error::PermitExpired))), "{late:?}");
}
