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

/// Callers pass their own `now`, and one may lag far behind another (a
/// thread stalled between reading the clock and acquiring). However far,
/// its call must not take a slot that later calls still count.
mod callers_far_behind {
    use llmgov::{Ledger, Request};

    use super::*;

    const SECOND: u64 = 1_000_000_000;

    /// A window of 10 a second (60 slots of 1/60 s, a ring of 64): a
    /// caller 128 slots behind lands on the position of the full slot.
    #[test]
    fn are_refused_by_a_window_without_resetting_its_count() {
        let config = json!({"scopes": {"p": {"limits": [
            {"dimension": "requests", "amount": 10, "window": "1s", "algorithm": "sliding_window"}]}}});
        let ledger = Ledger::new(&Config::from_value(config).unwrap()).unwrap();
        let request = Request::new(ledger.route(&["p"]).unwrap());
        let (now, behind) = (200 * SECOND / 60, 72 * SECOND / 60);
        let admitted = (0..10).filter(|_| ledger.try_acquire(&request, now).is_ok()).count();
        assert_eq!(admitted, 10);
        assert!(ledger.try_acquire(&request, behind).is_err(), "the window is full");
        assert!(ledger.try_acquire(&request, now).is_err(), "still full: the late call reset nothing");
    }

    /// An overage settled by a caller a ring behind is still charged: at
    /// the ring's latest slot, where later calls count it.
    #[test]
    fn still_pay_their_overage() {
        let config = json!({"scopes": {"p": {"limits": [
            {"dimension": "input_tokens", "amount": 100, "window": "1s", "algorithm": "sliding_window"}]}}});
        let ledger = Ledger::new(&Config::from_value(config).unwrap()).unwrap();
        let request = |tokens| Request::new(ledger.route(&["p"]).unwrap()).input_tokens(tokens);
        let slot = |i: u64| i * SECOND / 60;
        let mut early = ledger.try_acquire(&request(10), slot(100)).unwrap();
        let _latest = ledger.try_acquire(&request(10), slot(200)).unwrap();
        ledger.settle(&mut early, llmgov::Usage::new(60, 0), slot(72)).unwrap();
        assert!(ledger.try_acquire(&request(50), slot(200)).is_err(), "10 + 50 of overage + 50 > 100");
        assert!(ledger.try_acquire(&request(40), slot(200)).is_ok());
    }

    /// Concurrency slots age out at the permit TTL (1 s slots here, in a
    /// ring of 32): a caller 64 s behind lands on the live slot's position.
    #[test]
    fn are_refused_by_concurrency_without_expiring_live_permits() {
        let config = json!({"permit_ttl": "16s", "scopes": {"p": {"limits": [
            {"dimension": "concurrency", "amount": 2}]}}});
        let ledger = Ledger::new(&Config::from_value(config).unwrap()).unwrap();
        let request = Request::new(ledger.route(&["p"]).unwrap());
        let _held = [ledger.try_acquire(&request, 100 * SECOND), ledger.try_acquire(&request, 100 * SECOND)];
        assert!(ledger.try_acquire(&request, 36 * SECOND).is_err(), "both slots are in flight");
        assert!(ledger.try_acquire(&request, 100 * SECOND).is_err(), "still in flight");
        assert_eq!(ledger.snapshot(100 * SECOND).expired_permits, 0);
    }
}
