//! A settle the core would refuse (a count over 2^40, more cached input
//! than input) is refused here too, names the field, and changes nothing:
//! the permit stays pending with its local reservation and its Redis slot,
//! and a later settle or cancel gives them back.

mod common;

use std::sync::Arc;

use common::{fresh_prefix, redis_url, TIMEOUT};
use llmgov::{Dimension, ManualClock, Usage, MAX_TOKENS};
use llmgov_redis::{Error, RedisGovernor, SharedRoute};

/// A shared scope with one concurrency slot and a token budget, beside a
/// local tenant scope.
fn config(url: &str, prefix: &str) -> String {
    format!(
        r#"
        [scopes."openai/org"]
        limits = [
          {{ dimension = "concurrency", amount = 1 }},
          {{ dimension = "tokens", amount = 10000, window = "1d" }},
        ]
        [scopes."tenants/*"]
        limits = [{{ dimension = "tokens", amount = 100000, window = "1d" }}]
        [redis]
        url = "{url}"
        prefix = "{prefix}"
        expected_processes = 1
        timeout = "{TIMEOUT}"
        [redis.scopes."openai/org"]
        mode = "exact"
        "#
    )
}

/// The usages the core refuses, each with the field its error names.
fn implausible() -> [(Usage, &'static str); 3] {
    [
        (Usage::new(MAX_TOKENS + 1, 0), "input_tokens"),
        (Usage::new(1, 0).with_cached_input(9), "cached_input_tokens"),
        (Usage::new(1, 2 * MAX_TOKENS), "output_tokens"),
    ]
}

fn refused_field(result: Result<(), Error>) -> &'static str {
    match result {
        Err(Error::Core(llmgov::Error::InvalidRequest { field, .. })) => field,
        other => panic!("expected InvalidRequest, got {other:?}"),
    }
}

fn governor(url: &str, test: &str) -> RedisGovernor {
    RedisGovernor::from_toml_with_clock(&config(url, &fresh_prefix(test)), Arc::new(ManualClock::new(0))).unwrap()
}

fn slot_taken(gov: &RedisGovernor, route: &SharedRoute) -> bool {
    match gov.try_acquire(route, Usage::new(1, 1)) {
        Err(Error::RateLimited { dimension: Dimension::Concurrency, .. }) => true,
        Ok(mut permit) => {
            gov.cancel(&mut permit).unwrap();
            false
        }
        Err(other) => panic!("unexpected {other}"),
    }
}

fn local_reserved(gov: &RedisGovernor) -> u64 {
    gov.local().snapshot().scopes.iter().flat_map(|s| s.limits.iter()).map(|l| l.reserved).sum()
}

#[test]
fn a_refused_settle_leaves_the_permit_pending_with_its_slot_until_settled_again() {
    let Some(url) = redis_url("a_refused_settle_leaves_the_permit_pending") else { return };
    let gov = governor(&url, "bad-settle");
    let route = gov.route(&["tenants/a", "openai/org"]).unwrap();
    for (usage, field) in implausible() {
        let mut permit = gov.try_acquire(&route, Usage::new(100, 100)).unwrap();
        assert_eq!(refused_field(gov.settle(&mut permit, usage)), field, "{usage:?}");
        // Nothing was given back: the slot is still held, the tenant still reserved.
        assert!(slot_taken(&gov, &route), "{usage:?}: the slot stays with the pending permit");
        assert_eq!(local_reserved(&gov), 200);
        // The permit is still usable: a plausible settle frees everything.
        gov.settle(&mut permit, Usage::new(100, 10)).unwrap();
        assert!(!slot_taken(&gov, &route), "{usage:?}: the settle gave the slot back");
        assert_eq!(local_reserved(&gov), 0);
        assert_eq!(gov.cancel(&mut permit), Err(Error::AlreadyReconciled));
    }
    // Or cancelled, after a refused settle.
    let mut permit = gov.try_acquire(&route, Usage::new(100, 100)).unwrap();
    assert_eq!(refused_field(gov.settle(&mut permit, Usage::new(1, 0).with_cached_input(2))), "cached_input_tokens");
    gov.cancel(&mut permit).unwrap();
    assert!(!slot_taken(&gov, &route));
}

/// On a route of shared scopes only no local engine checks the usage: the
/// governor itself must, or Redis is charged whatever was settled.
#[test]
fn a_shared_only_route_refuses_an_implausible_settle_and_charges_nothing() {
    let Some(url) = redis_url("a_shared_only_route_refuses_an_implausible_settle") else { return };
    let prefix = fresh_prefix("bad-shared");
    let clock = Arc::new(ManualClock::new(0));
    let gov = RedisGovernor::from_toml_with_clock(&config(&url, &prefix), clock.clone()).unwrap();
    let other = RedisGovernor::from_toml_with_clock(&config(&url, &prefix), clock).unwrap();
    let (route, other_route) = (gov.route(&["openai/org"]).unwrap(), other.route(&["openai/org"]).unwrap());
    for (usage, field) in implausible() {
        let mut permit = gov.try_acquire(&route, Usage::new(100, 100)).unwrap();
        assert_eq!(refused_field(gov.settle(&mut permit, usage)), field, "{usage:?}");
        gov.settle(&mut permit, Usage::new(100, 100)).unwrap();
    }
    // Nothing absurd reached Redis: another process still has the budget
    // (10000 tokens a day, 600 settled) and a plausible estimate is never refused.
    let mut permit = other.try_acquire(&other_route, Usage::new(9000, 0)).unwrap();
    other.settle(&mut permit, Usage::new(9000, 0)).unwrap();

    // Nor is an implausible estimate taken (the token sum could overflow).
    for (estimate, field) in
        [(Usage::new(u64::MAX, 1), "input_tokens"), (Usage::new(1, 0).with_cached_input(9), "cached_input_tokens")]
    {
        match gov.try_acquire(&route, estimate) {
            Err(Error::Core(llmgov::Error::InvalidRequest { field: named, .. })) => assert_eq!(named, field),
            other => panic!("expected InvalidRequest for {estimate:?}, got {other:?}"),
        }
    }
    assert!(!slot_taken(&gov, &route), "a refused estimate holds no slot");
}
