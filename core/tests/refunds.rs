//! A refund gives back only what of its charge has not refilled yet: a
//! long request cancelled or settled low must not hand out capacity that
//! reservations made since already hold.

use std::sync::Arc;
use std::time::Duration;

use llmgov::{Config, Governor, ManualClock, Request, Usage};
use serde_json::json;

fn gov() -> (Governor, Arc<ManualClock>) {
    let config = json!({"scopes": {"p": {"limits": [{"dimension": "tokens", "amount": 100, "window": "1m"}]}}});
    let clock = Arc::new(ManualClock::new(0));
    (Governor::with_clock(&Config::from_value(config).unwrap(), clock.clone()).unwrap(), clock)
}

/// Acquired, refilled, then cancelled: the bucket still holds only the
/// second request, and a third is refused.
#[test]
fn cancel_after_refill_gives_nothing_back() {
    let (gov, clock) = gov();
    let route = gov.route(&["p"]).unwrap();
    let req = Request::new(route).input_tokens(100);
    let mut a = gov.try_acquire(&req).unwrap();
    clock.advance(Duration::from_secs(60)); // a's charge has fully refilled
    let _b = gov.try_acquire(&req).unwrap(); // legit: bucket is full
    gov.cancel(&mut a).unwrap(); // e.g. client timed out in a queue
    let c = gov.try_acquire(&req);
    assert!(c.is_err(), "admitted 200 tokens at t=60s on a bucket of burst 100");
}

#[test]
fn settle_low_after_refill_gives_nothing_back() {
    let (gov, clock) = gov();
    let route = gov.route(&["p"]).unwrap();
    let mut a = gov.try_acquire(&Request::new(route).max_output_tokens(100)).unwrap();
    clock.advance(Duration::from_secs(60)); // a 60 s stream
    let _b = gov.try_acquire(&Request::new(route).input_tokens(100)).unwrap();
    gov.settle(&mut a, Usage::new(0, 5)).unwrap();
    let c = gov.try_acquire(&Request::new(route).input_tokens(95));
    assert!(c.is_err(), "100 + 95 admitted at one instant on a burst of 100");
}
