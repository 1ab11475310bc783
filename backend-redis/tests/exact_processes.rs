//! Exact mode across 8 processes against one Redis and one global limit:
//! exactly the limit is admitted, never one more.

mod common;

use std::sync::Arc;

use common::{fresh_prefix, read_value, redis_url, spawn_worker, TIMEOUT, URL_VAR, WORKER_VAR};
use llmgov::{ManualClock, Usage};
use llmgov_redis::{Error, RedisGovernor};

const PROCESSES: usize = 8;
const LIMIT: u64 = 300;
const ATTEMPTS_PER_PROCESS: usize = 100;

/// A daily limit: over a test of seconds it refills nothing, so the count
/// admitted is exactly the bucket.
fn config(url: &str, prefix: &str) -> String {
    format!(
        r#"
        [scopes."openai/org/gpt-4o"]
        limits = [
          {{ dimension = "requests", amount = {LIMIT}, window = "1d" }},
          {{ dimension = "tokens", amount = 10000000, window = "1d" }},
        ]
        [scopes."tenants/*"]
        limits = [{{ dimension = "requests", amount = 1000, window = "1m" }}]
        [redis]
        url = "{url}"
        prefix = "{prefix}"
        expected_processes = {PROCESSES}
        timeout = "{TIMEOUT}"
        [redis.scopes."openai/org/gpt-4o"]
        mode = "exact"
        "#
    )
}

/// The worker body: tries `ATTEMPTS_PER_PROCESS` requests, settles each
/// admitted one, prints how many were admitted.
#[test]
fn worker_entry() {
    if std::env::var(WORKER_VAR).as_deref() != Ok("exact") {
        return;
    }
    let gov =
        RedisGovernor::from_toml(&config(&std::env::var(URL_VAR).unwrap(), &std::env::var("PREFIX").unwrap())).unwrap();
    let route = gov.route(&["tenants/worker", "openai/org/gpt-4o"]).unwrap();
    let mut admitted = 0;
    for _ in 0..ATTEMPTS_PER_PROCESS {
        match gov.try_acquire(&route, Usage::new(100, 50)) {
            Ok(mut permit) => {
                admitted += 1;
                gov.settle(&mut permit, Usage::new(100, 20)).unwrap();
            }
            Err(Error::RateLimited { dimension, .. }) => assert_eq!(dimension, llmgov::Dimension::Requests),
            Err(other) => panic!("unexpected {other}"),
        }
    }
    let health = gov.health();
    assert!(!health.degraded && health.fallback_admissions == 0, "{health:?}");
    println!("admitted={admitted}");
}

#[test]
fn eight_processes_admit_exactly_the_global_limit() {
    let Some(url) = redis_url("eight_processes_admit_exactly_the_global_limit") else { return };
    let prefix = fresh_prefix("exact8");
    let mut workers: Vec<_> = (0..PROCESSES)
        .map(|_| spawn_worker("worker_entry", "exact", &[(URL_VAR, url.clone()), ("PREFIX", prefix.clone())]))
        .collect();
    let admitted: u64 = workers.iter_mut().map(|w| read_value(w, "admitted").parse::<u64>().unwrap()).sum();
    for mut worker in workers {
        assert!(worker.wait().unwrap().success());
    }
    assert!((PROCESSES * ATTEMPTS_PER_PROCESS) as u64 > LIMIT, "the test must ask for more than the limit");
    assert_eq!(admitted, LIMIT, "exact mode admits the limit, not one more or less");

    // The bucket is empty for everyone, including a process that never took part.
    let gov = RedisGovernor::from_toml(&config(&url, &prefix)).unwrap();
    let route = gov.route(&["openai/org/gpt-4o"]).unwrap();
    assert!(matches!(gov.try_acquire(&route, Usage::new(1, 1)), Err(Error::RateLimited { .. })));
}

#[test]
fn settle_refunds_and_charges_the_difference_in_redis() {
    let Some(url) = redis_url("settle_refunds_and_charges_the_difference_in_redis") else { return };
    let prefix = fresh_prefix("settle");
    let text = format!(
        r#"
        [scopes."p/shared"]
        limits = [{{ dimension = "tokens", amount = 1000, window = "1d" }}]
        [redis]
        url = "{url}"
        prefix = "{prefix}"
        expected_processes = 2
        timeout = "{TIMEOUT}"
        [redis.scopes."p/shared"]
        mode = "exact"
        "#
    );
    let clock = Arc::new(ManualClock::new(0));
    let a = RedisGovernor::from_toml_with_clock(&text, clock.clone()).unwrap();
    let b = RedisGovernor::from_toml_with_clock(&text, clock).unwrap();
    let route_a = a.route(&["p/shared"]).unwrap();
    let route_b = b.route(&["p/shared"]).unwrap();

    // 900 reserved by A: B cannot take 200.
    let mut big = a.try_acquire(&route_a, Usage::new(400, 500)).unwrap();
    assert!(matches!(b.try_acquire(&route_b, Usage::new(100, 100)), Err(Error::RateLimited { .. })));
    // A used 500 of its 900: 400 come back, and B fits.
    a.settle(&mut big, Usage::new(400, 100)).unwrap();
    let mut small = b.try_acquire(&route_b, Usage::new(300, 100)).unwrap();
    // B's request ran long: 200 more charged; the bucket (1000 - 500 - 600) is in debt.
    b.settle(&mut small, Usage::new(300, 300)).unwrap();
    assert!(matches!(a.try_acquire(&route_a, Usage::new(1, 0)), Err(Error::RateLimited { .. })));
    assert_eq!(a.settle(&mut big, Usage::new(1, 1)), Err(Error::AlreadyReconciled));

    // A cancel gives everything back.
    let other = fresh_prefix("cancel");
    let c = RedisGovernor::from_toml(&text.replace(&prefix, &other)).unwrap();
    let route_c = c.route(&["p/shared"]).unwrap();
    let mut permit = c.try_acquire(&route_c, Usage::new(500, 500)).unwrap();
    c.cancel(&mut permit).unwrap();
    let mut again = c.try_acquire(&route_c, Usage::new(500, 500)).unwrap();
    c.settle(&mut again, Usage::new(500, 500)).unwrap();
}

/// A governor of one shared scope, `p/shared`, of `amount` tokens a minute.
fn tokens_a_minute(url: &str, test: &str, amount: u64) -> RedisGovernor {
    let text = format!(
        r#"
        [scopes."p/shared"]
        limits = [{{ dimension = "tokens", amount = {amount}, window = "1m" }}]
        [redis]
        url = "{url}"
        prefix = "{}"
        expected_processes = 2
        timeout = "{TIMEOUT}"
        [redis.scopes."p/shared"]
        mode = "exact"
        "#,
        fresh_prefix(test)
    );
    RedisGovernor::from_toml(&text).unwrap()
}

#[test]
fn a_request_that_can_never_fit_is_told_at_once() {
    let Some(url) = redis_url("a_request_that_can_never_fit_is_told_at_once") else { return };
    let gov = tokens_a_minute(&url, "never", 1000);
    let route = gov.route(&["p/shared"]).unwrap();
    match gov.try_acquire(&route, Usage::new(900, 200)) {
        Err(Error::NeverFits { cost: 1100, burst: 1000, .. }) => {}
        other => panic!("expected NeverFits, got {other:?}"),
    }
}

/// A request of the whole burst fits a full bucket, whatever the rounding
/// of its refill time: at 1117 tokens a minute, a token takes a fractional
/// 53715.3... microseconds, and such a request used to be refused for ever.
#[test]
fn a_request_of_the_whole_burst_fits_a_full_bucket() {
    let Some(url) = redis_url("a_request_of_the_whole_burst_fits_a_full_bucket") else { return };
    let gov = tokens_a_minute(&url, "whole-burst", 1117);
    let route = gov.route(&["p/shared"]).unwrap();
    let permit = gov.try_acquire(&route, Usage::new(1117, 0));
    assert!(permit.is_ok(), "{:?}", permit.err());
    assert!(matches!(gov.try_acquire(&route, Usage::new(1, 0)), Err(Error::RateLimited { .. })), "and it is full");
}

#[test]
fn a_request_on_two_shared_scopes_holds_both_or_neither() {
    let Some(url) = redis_url("a_request_on_two_shared_scopes_holds_both_or_neither") else { return };
    let text = format!(
        r#"
        [scopes."openai/org"]
        limits = [{{ dimension = "tokens", amount = 1000, window = "1d" }}]
        [scopes."openai/org/gpt-4o"]
        limits = [{{ dimension = "tokens", amount = 500, window = "1d" }}]
        [redis]
        url = "{url}"
        prefix = "{}"
        expected_processes = 2
        timeout = "{TIMEOUT}"
        [redis.scopes."openai/org"]
        mode = "exact"
        [redis.scopes."openai/org/gpt-4o"]
        mode = "exact"
        "#,
        fresh_prefix("two-scopes")
    );
    let gov = RedisGovernor::from_toml(&text).unwrap();
    let model = gov.route(&["openai/org/gpt-4o"]).unwrap(); // the org is its ancestor: both scopes
    let org = gov.route(&["openai/org"]).unwrap();
    let _held = gov.try_acquire(&model, Usage::new(200, 200)).unwrap(); // org 400/1000, model 400/500
                                                                        // The org has room for 200, the model does not: refused, and the org's
                                                                        // reservation is given back.
    match gov.try_acquire(&model, Usage::new(100, 100)) {
        Err(Error::RateLimited { scope, .. }) => assert_eq!(&*scope, "openai/org/gpt-4o"),
        other => panic!("expected the model scope to refuse, got {other:?}"),
    }
    let mut rest = gov.try_acquire(&org, Usage::new(300, 300)).unwrap(); // exactly the 600 left
    assert!(matches!(gov.try_acquire(&org, Usage::new(1, 0)), Err(Error::RateLimited { .. })));
    gov.cancel(&mut rest).unwrap();
}

/// A shared refusal after the local part was reserved gives the local part
/// back: the tenant's budget is whole again.
#[test]
fn a_shared_refusal_gives_the_local_reservation_back() {
    let Some(url) = redis_url("a_shared_refusal_gives_the_local_reservation_back") else { return };
    let gov =
        RedisGovernor::from_toml_with_clock(&config(&url, &fresh_prefix("local-back")), Arc::new(ManualClock::new(0)))
            .unwrap();
    let route = gov.route(&["tenants/acme", "openai/org/gpt-4o"]).unwrap();
    let reserved =
        || -> u64 { gov.local().snapshot().scopes.iter().flat_map(|s| s.limits.iter()).map(|l| l.reserved).sum() };
    let mut admitted = 0;
    while let Ok(mut permit) = gov.try_acquire(&route, Usage::new(1, 0)) {
        gov.settle(&mut permit, Usage::new(1, 0)).unwrap();
        admitted += 1;
    }
    assert_eq!(admitted, LIMIT, "refused by the shared requests limit");
    assert_eq!(reserved(), 0, "the refused request's tenant reservation was given back");
}
