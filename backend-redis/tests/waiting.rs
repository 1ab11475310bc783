//! `acquire_blocking` on shared scopes, against a real Redis: a waiter is
//! admitted when the shared bucket refills (exact and leased mode) or when
//! another governor frees a concurrency slot, and gives up at its timeout,
//! at once when the predicted wait is already past it.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{fresh_prefix, redis_url, TIMEOUT};
use llmgov::{Dimension, ManualClock, Usage};
use llmgov_redis::{Error, RedisGovernor, SharedRoute};

const SCOPE: &str = "openai/org/gpt-4o";
const REQUEST: Usage = Usage { input_tokens: 10, cached_input_tokens: 0, output_tokens: 10 };

fn config(url: &str, prefix: &str, mode: &str, limits: &str) -> String {
    format!(
        r#"
        [scopes."{SCOPE}"]
        limits = [{limits}]
        [redis]
        url = "{url}"
        prefix = "{prefix}"
        expected_processes = 1
        timeout = "{TIMEOUT}"
        [redis.scopes."{SCOPE}"]
        mode = "{mode}"
        "#
    )
}

fn governor(text: &str) -> (RedisGovernor, SharedRoute) {
    let gov = RedisGovernor::from_toml(text).unwrap();
    let route = gov.route(&[SCOPE]).unwrap();
    (gov, route)
}

/// Takes every request the bucket holds, then waits for one more.
fn drain_then_wait(mode: &str) {
    let Some(url) = redis_url(&format!("a_waiter_is_admitted_when_the_bucket_refills_{mode}")) else { return };
    let prefix = fresh_prefix(&format!("wait-refill-{mode}"));
    // Five a second: the sixth request can pass 200 ms after the fifth.
    let limits = r#"{ dimension = "requests", amount = 5, window = "1s" }"#;
    let (gov, route) = governor(&config(&url, &prefix, mode, limits));
    let mut held: Vec<_> = std::iter::from_fn(|| gov.try_acquire(&route, REQUEST).ok()).take(10).collect();
    assert!(!held.is_empty() && held.len() <= 5, "{} admitted from a bucket of 5", held.len());
    assert!(matches!(gov.try_acquire(&route, REQUEST), Err(Error::RateLimited { .. })));
    let calls_before = gov.health().redis_calls;
    held.push(gov.acquire_blocking(&route, REQUEST, None).expect("admitted once the bucket refills"));
    // Slept for the time Redis predicted (the bucket's, or in leased mode
    // the lease renewal's), rather than asking again and again.
    let calls = gov.health().redis_calls - calls_before;
    assert!(calls <= 3, "{calls} Redis calls for one wait of about 200 ms");
    for permit in &mut held {
        gov.settle(permit, REQUEST).unwrap();
    }
    assert!(!gov.health().degraded);
}

#[test]
fn a_waiter_is_admitted_when_the_bucket_refills_in_exact_mode() {
    drain_then_wait("exact");
}

#[test]
fn a_waiter_is_admitted_when_the_bucket_refills_in_leased_mode() {
    drain_then_wait("leased");
}

/// Holds the one request a minute allows, then waits a second for another.
fn wait_past_the_timeout(mode: &str) {
    let Some(url) = redis_url(&format!("a_predicted_wait_past_the_timeout_is_refused_at_once_{mode}")) else { return };
    let prefix = fresh_prefix(&format!("wait-predicted-{mode}"));
    let limits = r#"{ dimension = "requests", amount = 1, window = "1m" }"#;
    let text = config(&url, &prefix, mode, limits);
    // A manual clock: `waited` is exactly zero, as no time passes on it.
    let gov = RedisGovernor::from_toml_with_clock(&text, Arc::new(ManualClock::new(0))).unwrap();
    let route = gov.route(&[SCOPE]).unwrap();
    let mut first = gov.try_acquire(&route, REQUEST).unwrap();
    let calls_before = gov.health().redis_calls;
    match gov.acquire_blocking(&route, REQUEST, Some(Duration::from_secs(1))) {
        Err(Error::DeadlineExceeded { waited, retry_after: Some(predicted) }) => {
            assert_eq!(waited, Duration::ZERO);
            let minute = Duration::from_secs(60);
            assert!(predicted > minute - Duration::from_secs(10) && predicted <= minute, "{predicted:?}");
        }
        other => panic!("expected DeadlineExceeded, got {other:?}"),
    }
    assert_eq!(gov.health().redis_calls - calls_before, 1, "refused on the first answer");
    gov.settle(&mut first, REQUEST).unwrap();
}

#[test]
fn a_predicted_wait_past_the_timeout_is_refused_at_once_in_exact_mode() {
    wait_past_the_timeout("exact");
}

#[test]
fn a_predicted_wait_past_the_timeout_is_refused_at_once_in_leased_mode() {
    wait_past_the_timeout("leased");
}

#[test]
fn a_waiter_takes_the_slot_another_governor_frees_and_gives_up_at_its_timeout() {
    let Some(url) = redis_url("a_waiter_takes_the_slot_another_governor_frees") else { return };
    let prefix = fresh_prefix("wait-slot");
    let text = config(&url, &prefix, "exact", r#"{ dimension = "concurrency", amount = 1 }"#);
    // Two governors on one prefix stand for two processes.
    let ((holder, holder_route), (waiter, waiter_route)) = (governor(&text), governor(&text));
    let mut held = holder.try_acquire(&holder_route, REQUEST).unwrap();

    match waiter.acquire_blocking(&waiter_route, REQUEST, Some(Duration::from_millis(30))) {
        Err(Error::DeadlineExceeded { retry_after: None, .. }) => {}
        other => panic!("a slot held throughout: expected DeadlineExceeded, got {other:?}"),
    }

    let calls_before = waiter.health().redis_calls;
    std::thread::scope(|s| {
        let waiting = s.spawn(|| waiter.acquire_blocking(&waiter_route, REQUEST, None));
        // Free the slot only once the waiter has been refused and is polling.
        let guard = Instant::now();
        while waiter.health().redis_calls < calls_before + 2 {
            assert!(guard.elapsed() < Duration::from_secs(30), "the waiter never tried");
            std::thread::yield_now();
        }
        holder.settle(&mut held, REQUEST).unwrap();
        let mut permit = waiting.join().unwrap().expect("admitted once the slot is freed");
        assert!(
            matches!(
                holder.try_acquire(&holder_route, REQUEST),
                Err(Error::RateLimited { dimension: Dimension::Concurrency, .. })
            ),
            "the waiter holds the one slot"
        );
        waiter.settle(&mut permit, REQUEST).unwrap();
    });
}
