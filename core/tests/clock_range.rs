//! Rings keep 32-bit slot epochs. A ledger first used at a large `now`, or
//! idle for 2^31 slots and more, must read its rings as empty, not as full
//! of entries from the future.

use std::sync::Arc;
use std::time::Duration;

use llmgov::{Config, Error, Governor, ManualClock, Request};
use serde_json::json;

/// 100 ms sliding window, 60 slots of 1_666_667 ns: 2^31 slots = 41.4 days.
const SLOT_NS: u64 = 1_666_667;

fn window_gov(start: u64) -> (Governor, Arc<ManualClock>) {
    let config = json!({"scopes": {"p": {"limits": [
        {"dimension": "requests", "amount": 10, "window": "100ms", "algorithm": "sliding_window"}]}}});
    let clock = Arc::new(ManualClock::new(start));
    (Governor::with_clock(&Config::from_value(config).unwrap(), clock.clone()).unwrap(), clock)
}

/// A fresh governor on a clock whose origin is ~41 days back (e.g. a
/// binding passing CLOCK_MONOTONIC on a host up 6 weeks) admits.
#[test]
fn fresh_window_at_a_large_clock_admits() {
    let (gov, _clock) = window_gov((1u64 << 31) * SLOT_NS);
    let route = gov.route(&["p"]).unwrap();
    match gov.try_acquire(&Request::new(route)) {
        Ok(_) => {}
        Err(e) => panic!("empty window refused its first request: {e:?}"),
    }
}

/// Same after an idle period on a normal clock.
#[test]
fn window_idle_for_2_pow_31_slots_admits() {
    let (gov, clock) = window_gov(0);
    let route = gov.route(&["p"]).unwrap();
    gov.try_acquire(&Request::new(route)).unwrap();
    clock.advance(Duration::from_nanos((1u64 << 31) * SLOT_NS));
    let r = gov.try_acquire(&Request::new(route));
    assert!(r.is_ok(), "after 41 days idle: {r:?}");
}

/// The concurrency ring, permit_ttl 1s (62.5 ms TTL slots), on a clock
/// 4.25 years from its origin.
#[test]
fn fresh_concurrency_at_a_large_clock_admits() {
    let config = json!({"permit_ttl": "1s", "scopes": {"p": {"limits": [{"dimension": "concurrency", "amount": 5}]}}});
    let clock = Arc::new(ManualClock::new((1u64 << 31) * 62_500_000));
    let gov = Governor::with_clock(&Config::from_value(config).unwrap(), clock).unwrap();
    let route = gov.route(&["p"]).unwrap();
    match gov.try_acquire(&Request::new(route)) {
        Ok(_) => {}
        Err(Error::RateLimited { retry_after, .. }) => {
            panic!("0 of 5 slots used, refused (retry_after {retry_after:?})")
        }
        Err(e) => panic!("{e}"),
    }
}

/// A full window left idle for 2^31 slots admits again (and computes no
/// retry from a wrapped entry).
#[test]
fn window_idle_for_2_pow_31_slots_admits_its_whole_amount() {
    let config = json!({"scopes": {"p": {"limits": [
        {"dimension": "requests", "amount": 1, "window": "100ms", "algorithm": "sliding_window"}]}}});
    let clock = Arc::new(ManualClock::new(0));
    let gov = Governor::with_clock(&Config::from_value(config).unwrap(), clock.clone()).unwrap();
    let route = gov.route(&["p"]).unwrap();
    gov.try_acquire(&Request::new(route)).unwrap();
    clock.advance(Duration::from_nanos((1u64 << 31) * SLOT_NS));
    let r = gov.try_acquire(&Request::new(route));
    assert!(r.is_ok(), "{r:?}");
}
