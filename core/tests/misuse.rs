//! Misuse from the public API is an error, never a panic: handles of
//! another governor, a clock that runs backwards, absurd configs and usage.

use std::sync::Arc;

use llmgov::{Config, Governor, Ledger, ManualClock, Request, Usage};
use serde_json::json;

fn config(limits: serde_json::Value) -> Config {
    Config::from_value(json!({"scopes": {"p": {"limits": limits}, "q": {"limits": limits}}})).unwrap()
}

/// A route made by another governor is refused with an error.
#[test]
fn foreign_route_is_an_error() {
    let limits = json!([{"dimension": "requests", "amount": 5, "window": "1m"}]);
    let g1 = Governor::with_clock(&config(limits.clone()), Arc::new(ManualClock::new(0))).unwrap();
    let g2 = Governor::with_clock(&config(limits), Arc::new(ManualClock::new(0))).unwrap();
    let route = g1.route(&["p"]).unwrap();
    let err = g2.try_acquire(&Request::new(route)).unwrap_err();
    assert_eq!((err.code(), err.to_string().contains("another governor")), ("invalid_request", true), "{err}");
}

/// The sans-IO ledger settled at a `now` before the admission (a caller's
/// clocks disagree) reconciles without underflow.
#[test]
fn settle_at_an_earlier_now_does_not_panic() {
    let ledger = Ledger::new(&config(json!([
        {"dimension": "tokens", "amount": 100, "window": "1m", "algorithm": "sliding_window"}])))
    .unwrap();
    let route = ledger.route(&["p"]).unwrap();
    let mut p = ledger.try_acquire(&Request::new(route).input_tokens(10), 5_000_000_000).unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        ledger.settle(&mut p, Usage::new(20, 0), 1_000_000_000).map(drop)
    }));
    assert!(r.is_ok(), "settle at a now 4 s before the admission panicked");
}

/// A sliding window of 2^30 slots (16 GiB, scanned on every acquire) is
/// refused when the config loads.
#[test]
fn huge_slot_count_is_refused() {
    let c = Config::from_value(json!({"scopes": {"p": {"limits": [
        {"dimension": "tokens", "amount": 100, "window": "13d", "algorithm": "sliding_window", "slots": 1u64 << 30}]}}}))
    .unwrap();
    let r = std::panic::catch_unwind(|| Governor::new(&c).map(drop));
    assert!(matches!(r, Ok(Err(_))), "expected InvalidConfig for slots = 2^30");
}

/// Usage past any real size is an error; the largest allowed puts a bucket
/// deep in debt, and its snapshot still reads without overflow.
#[test]
fn snapshot_of_huge_debt_does_not_panic() {
    let limits = json!([{"dimension": "tokens", "amount": 1_000_000_000u64, "window": "1s"}]);
    let gov = Governor::with_clock(&config(limits), Arc::new(ManualClock::new(0))).unwrap();
    let route = gov.route(&["p"]).unwrap();
    let mut p = gov.try_acquire(&Request::new(route).input_tokens(1)).unwrap();
    assert_eq!(gov.settle(&mut p, Usage::new(1, u64::MAX)).unwrap_err().code(), "invalid_request");
    gov.settle(&mut p, Usage::new(1, llmgov::MAX_TOKENS)).unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| gov.snapshot()));
    assert!(r.is_ok(), "snapshot panicked");
}
