//! A refund gives capacity back now, up to the burst, as a provider that
//! reconciles reservations does (Anthropic charges `max_tokens` up front and
//! returns the unused part at the end). It never leaves a bucket holding more
//! than its burst, however late it comes.

use std::sync::Arc;
use std::time::Duration;

use llmgov::{Config, Dimension, Governor, ManualClock, Request, Usage};
use serde_json::json;

fn gov() -> (Governor, Arc<ManualClock>) {
    let config = json!({"scopes": {"p": {"limits": [{"dimension": "tokens", "amount": 100, "window": "1m"}]}}});
    let clock = Arc::new(ManualClock::new(0));
    (Governor::with_clock(&Config::from_value(config).unwrap(), clock.clone()).unwrap(), clock)
}

fn available(gov: &Governor) -> i64 {
    let id = gov.scope_id("p").unwrap();
    gov.scope_snapshot(id).unwrap().limit(Dimension::Tokens).unwrap().available
}

/// A request that outlives its charge's refill and ends unused gives its
/// tokens back, as the provider's bucket would; no more than the burst.
#[test]
fn late_cancel_returns_capacity_up_to_the_burst() {
    let (gov, clock) = gov();
    let route = gov.route(&["p"]).unwrap();
    let req = Request::new(route).input_tokens(100);
    let mut a = gov.try_acquire(&req).unwrap();
    clock.advance(Duration::from_secs(60));
    let _b = gov.try_acquire(&req).unwrap();
    assert_eq!(available(&gov), 0);
    gov.cancel(&mut a).unwrap();
    assert_eq!(available(&gov), 100, "the provider's bucket is full again too");
    let _c = gov.try_acquire(&req).unwrap();
    assert!(gov.try_acquire(&Request::new(route).input_tokens(1)).is_err(), "nothing past the burst");
}

/// Settling a long stream low gives back the unused output, capped.
#[test]
fn late_settle_returns_unused_output_capped() {
    let (gov, clock) = gov();
    let route = gov.route(&["p"]).unwrap();
    let mut a = gov.try_acquire(&Request::new(route).max_output_tokens(100)).unwrap();
    clock.advance(Duration::from_secs(30));
    assert_eq!(available(&gov), 50);
    gov.settle(&mut a, Usage::new(0, 5)).unwrap();
    assert_eq!(available(&gov), 100, "95 back, capped at the burst");
    clock.advance(Duration::from_secs(60));
    assert_eq!(available(&gov), 100);
}
