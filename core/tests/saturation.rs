//! Charges and refunds that reach the limits of the arithmetic stay on the
//! safe side: absurd windows are refused, absurd token counts are errors, and
//! a bucket or slot driven to saturation refuses rather than forgets.

use std::sync::Arc;
use std::time::Duration;

use llmgov::{Clock, Config, Governor, ManualClock, Request, Usage};
use serde_json::json;

fn gov(limit: serde_json::Value) -> Governor {
    let config = json!({"scopes": {"p": {"limits": [limit]}}});
    Governor::with_clock(&Config::from_value(config).unwrap(), Arc::new(ManualClock::new(0))).unwrap()
}

/// A window past u64::MAX ns would saturate the bucket's burst to "always
/// fits": such windows are refused when the config loads.
#[test]
fn window_past_400_days_is_refused() {
    let config = json!({"scopes": {"p": {"limits": [{"dimension": "requests", "amount": 1, "window": "600y"}]}}});
    let err = Config::from_value(config).unwrap().validate().unwrap_err();
    assert_eq!(err.code(), "invalid_config");
    assert!(err.to_string().contains("limits[0].window"), "{err}");
}

/// Streamed output past any real size is an error; the largest allowed
/// drives the bucket to the edge of its timeline, and the refund that
/// follows must not erase another permit's reservation.
#[test]
fn huge_overage_then_refund_keeps_other_reservations_bucket() {
    let gov = gov(json!({"dimension": "tokens", "amount": 100, "window": "1m"}));
    let route = gov.route(&["p"]).unwrap();
    let _a = gov.try_acquire(&Request::new(route).input_tokens(60)).unwrap();
    let mut b = gov.try_acquire(&Request::new(route).max_output_tokens(10)).unwrap();
    assert_eq!(gov.add_output(&mut b, u64::MAX).unwrap_err().code(), "invalid_request");
    gov.add_output(&mut b, llmgov::MAX_TOKENS).unwrap();
    let past = gov.add_output(&mut b, 1).unwrap_err();
    assert!(
        matches!(&past, llmgov::Error::InvalidRequest { field: "tokens", value, reason }
            if value == "1" && reason.contains(&format!("streamed to {}", llmgov::MAX_TOKENS + 1))),
        "the total, not only the chunk, says why: {past}"
    );
    gov.settle(&mut b, Usage::new(0, 10)).unwrap();
    // a's 60 and b's 10 are outstanding: 30 fit, not 90.
    let c = gov.try_acquire(&Request::new(route).input_tokens(90));
    assert!(c.is_err(), "a's 60 tokens were erased by b's refund: 90 more admitted");
}

/// Same on a sliding window: the slot count saturates at 2^32-1; the slot is
/// then poisoned, and the refund must not wipe b's 990.
#[test]
fn huge_overage_then_refund_keeps_other_reservations_window() {
    let gov = gov(json!({"dimension": "tokens", "amount": 1000, "window": "1m", "algorithm": "sliding_window"}));
    let route = gov.route(&["p"]).unwrap();
    let mut a = gov.try_acquire(&Request::new(route).input_tokens(10)).unwrap();
    let _b = gov.try_acquire(&Request::new(route).input_tokens(990)).unwrap();
    gov.add_output(&mut a, 1 << 32).unwrap();
    gov.settle(&mut a, Usage::new(10, 0)).unwrap();
    let c = gov.try_acquire(&Request::new(route).input_tokens(1000));
    assert!(c.is_err(), "b's 990 tokens vanished from the window");
}

/// The manual clock never goes backwards, however far it is advanced.
#[test]
fn manual_clock_advance_saturates() {
    let clock = ManualClock::new(10);
    clock.advance(Duration::from_nanos(u64::MAX));
    assert!(clock.now() >= 10, "clock went back to {}", clock.now());
}

/// In a window above 2^31, a refused request's add would saturate its slot:
/// it is refused before it lands, so the slot is not poisoned and the
/// cancelled permit's refund empties the window again.
#[test]
fn a_refused_request_never_saturates_a_large_window() {
    let gov = gov(
        json!({"dimension": "input_tokens", "amount": 3_000_000_000u64, "window": "1d", "algorithm": "sliding_window"}),
    );
    let route = gov.route(&["p"]).unwrap();
    let mut held = gov.try_acquire(&Request::new(route).input_tokens(2_000_000_000)).unwrap();
    assert_eq!(gov.try_acquire(&Request::new(route).input_tokens(2_500_000_000)).unwrap_err().code(), "rate_limited");
    gov.cancel(&mut held).unwrap();
    assert!(gov.try_acquire(&Request::new(route).input_tokens(3_000_000_000)).is_ok(), "the window is empty again");
}

/// The largest sliding window the config takes admits a request of its
/// whole amount; one larger is refused when the config loads.
#[test]
fn the_largest_window_admits_its_whole_amount() {
    let most = (1u64 << 32) - 2;
    let gov = gov(json!({"dimension": "input_tokens", "amount": most, "window": "1d", "algorithm": "sliding_window"}));
    let route = gov.route(&["p"]).unwrap();
    assert!(gov.try_acquire(&Request::new(route).input_tokens(most)).is_ok());
    assert_eq!(gov.try_acquire(&Request::new(route).input_tokens(1)).unwrap_err().code(), "rate_limited");
    let config = json!({"scopes": {"p": {"limits": [
        {"dimension": "input_tokens", "amount": most + 1, "window": "1d", "algorithm": "sliding_window"}]}}});
    let Err(error) = Config::from_value(config).and_then(|c| Governor::new(&c)) else { panic!("refused") };
    assert!(error.to_string().contains(&format!("holds at most {most}")), "{error}");
}

/// At the end of the timeline (a sans-IO caller's `now` near u64::MAX) a
/// token bucket's next arrival would saturate and every request look within
/// the burst: nothing is admitted there instead.
#[test]
fn a_token_bucket_admits_nothing_past_the_end_of_time() {
    let config = json!({"scopes": {"p": {"limits": [{"dimension": "requests", "amount": 1, "window": "1m"}]}}});
    let ledger = llmgov::Ledger::new(&Config::from_value(config).unwrap()).unwrap();
    let route = ledger.route(&["p"]).unwrap();
    let admitted = (0..100).filter(|_| ledger.try_acquire(&Request::new(route), u64::MAX - 1_000).is_ok()).count();
    assert!(admitted <= 1, "1 request a minute admitted {admitted} at one instant");
}
