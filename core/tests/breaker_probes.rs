//! Probes of provider scopes' circuit breakers: a probe not sent is given
//! back, to the breaker it was claimed from, so that the next request may go
//! as the probe at once rather than after a further pause.

use std::sync::{Arc, Barrier};

use llmgov::{classify_response, Config, Error, Ledger, ProviderHint, Request};
use serde_json::json;

const SEC: u64 = 1_000_000_000;

fn failure() -> llmgov::feedback::Classification {
    classify_response(503, &[("x", "y")], b"", ProviderHint::Auto, 0)
}

#[test]
fn a_cancelled_probe_is_given_back() {
    let config = Config::from_value(json!({
        "adaptive": {"breaker": {"failures": 1, "pauses": ["30s"]}},
        "scopes": {"a": {"provider": true, "limits": [{"dimension": "requests", "amount": 1000, "window": "1m"}]}}
    }))
    .unwrap();
    let ledger = Ledger::new(&config).unwrap();
    let route = ledger.route(&["a"]).unwrap();
    ledger.observe(route, &failure(), 0).unwrap();
    let now = 31 * SEC;
    let mut probe = ledger.try_acquire(&Request::new(route), now).unwrap();
    assert!(
        matches!(ledger.try_acquire(&Request::new(route), now), Err(Error::CircuitOpen { .. })),
        "one probe at a time"
    );
    ledger.cancel(&mut probe, now).unwrap();
    let mut next = ledger.try_acquire(&Request::new(route), now + 1).expect("the next request goes as the probe");
    // It is the probe now: the breaker is held for the others again.
    assert!(matches!(ledger.try_acquire(&Request::new(route), now + 2), Err(Error::CircuitOpen { .. })));
    // A settled probe is not given back: its answer decides.
    ledger.settle(&mut next, llmgov::Usage::new(0, 0), now + 3).unwrap();
    assert!(matches!(ledger.try_acquire(&Request::new(route), now + 4), Err(Error::CircuitOpen { .. })));
}

/// When a request claims `a`'s probe and then loses `b`'s to another
/// thread, it gives `a`'s back with `a`'s own pause end; given `b`'s, `a`
/// stayed held shut with no probe out. A race: tried many times.
#[test]
fn a_probe_given_back_after_losing_another_is_free_again() {
    // B has many limits, widening the window between its gate in the
    // reservation loop and its claim.
    let many: Vec<_> =
        (0..64).map(|i| json!({"dimension": "requests", "amount": 1_000_000 + i, "window": "1m"})).collect();
    let config = Config::from_value(json!({
        "adaptive": {"breaker": {"failures": 1, "pauses": ["1s"]}},
        "scopes": {
            "a": {"provider": true, "limits": [{"dimension": "requests", "amount": 1_000_000, "window": "1m"}]},
            "b": {"provider": true, "limits": many},
        }
    }))
    .unwrap();
    let (mut races, mut held_shut) = (0, 0);
    for _ in 0..3_000 {
        let ledger = Arc::new(Ledger::new(&config).unwrap());
        let (ab, a, b) =
            (ledger.route(&["a", "b"]).unwrap(), ledger.route(&["a"]).unwrap(), ledger.route(&["b"]).unwrap());
        ledger.observe(ab, &failure(), 0).unwrap();
        let now = 2 * SEC;
        let barrier = Arc::new(Barrier::new(2));
        let other = {
            let (ledger, barrier) = (ledger.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                ledger.try_acquire(&Request::new(b), now)
            })
        };
        barrier.wait();
        let both = ledger.try_acquire(&Request::new(ab), now);
        let lost_b = matches!(&both, Err(Error::CircuitOpen { scope, .. }) if &**scope == "b");
        if lost_b && other.join().unwrap().is_ok() {
            races += 1;
            held_shut += usize::from(ledger.try_acquire(&Request::new(a), now).is_err());
        }
    }
    assert_eq!(held_shut, 0, "`a` held shut with no probe out in {held_shut} of {races} races");
}

/// The transports report a refused answer, then cancel its permit (the
/// provider served nothing). For a probe, the report reopens the breaker
/// for the next, longer pause; the cancel must not hand the probe back as
/// if the request had never been sent. On the manual clock both happen at
/// the instant the probe was acquired, where the reopened pause's end is
/// the very value the cancel looked for.
#[test]
fn a_probe_refused_then_cancelled_keeps_the_longer_pause() {
    let config = Config::from_value(json!({
        "adaptive": {"breaker": {"failures": 1, "pauses": ["30s", "2m"]}},
        "scopes": {"a": {"provider": true, "limits": [{"dimension": "requests", "amount": 1000, "window": "1m"}]}}
    }))
    .unwrap();
    let ledger = Ledger::new(&config).unwrap();
    let route = ledger.route(&["a"]).unwrap();
    ledger.observe(route, &failure(), 0).unwrap();
    let now = 30 * SEC;
    let mut probe = ledger.try_acquire(&Request::new(route), now).expect("the pause is over: the probe goes");
    ledger.report(&probe, &failure(), now).unwrap();
    ledger.cancel(&mut probe, now).unwrap();
    match ledger.try_acquire(&Request::new(route), now) {
        Err(Error::CircuitOpen { retry_after, .. }) => {
            assert_eq!(retry_after, std::time::Duration::from_secs(120), "the second pause, in full")
        }
        other => panic!("the failed probe reopened the breaker for 2 minutes, got {other:?}"),
    }
}

/// A success of a request sent before the breaker opened says how the
/// provider was then, as its failure would (which is old news): only the
/// probe's answer closes the breaker.
#[test]
fn a_late_success_from_before_the_opening_does_not_close_the_breaker() {
    let config = Config::from_value(json!({
        "adaptive": {"breaker": {"failures": 1, "pauses": ["30s", "2m"]}},
        "scopes": {"a": {"provider": true, "limits": [{"dimension": "requests", "amount": 1000, "window": "1m"}]}}
    }))
    .unwrap();
    let ledger = Ledger::new(&config).unwrap();
    let route = ledger.route(&["a"]).unwrap();
    let old = ledger.try_acquire(&Request::new(route), SEC).unwrap();
    ledger.observe(route, &failure(), 2 * SEC).unwrap();
    let probe = ledger.try_acquire(&Request::new(route), 32 * SEC).expect("the pause is over: the probe goes");
    let success = classify_response(200, &[("x", "y")], b"{}", ProviderHint::Auto, 0);
    ledger.report(&old, &success, 33 * SEC).unwrap();
    assert!(
        matches!(ledger.try_acquire(&Request::new(route), 33 * SEC), Err(Error::CircuitOpen { .. })),
        "still half-open: the probe has not answered"
    );
    ledger.report(&probe, &failure(), 34 * SEC).unwrap();
    match ledger.try_acquire(&Request::new(route), 34 * SEC) {
        Err(Error::CircuitOpen { retry_after, .. }) => assert_eq!(retry_after, std::time::Duration::from_secs(120)),
        other => panic!("the probe's failure reopens for the second pause, got {other:?}"),
    }
}

/// Failures of requests sent before the breaker last opened are the
/// outage it already answered: once the probe has closed it, they do not
/// count towards opening it again.
#[test]
fn late_failures_from_before_the_opening_do_not_reopen_a_closed_breaker() {
    let config = Config::from_value(json!({
        "adaptive": {"breaker": {"failures": 2, "pauses": ["30s"]}},
        "scopes": {"a": {"provider": true, "limits": [{"dimension": "requests", "amount": 1000, "window": "1m"}]}}
    }))
    .unwrap();
    let ledger = Ledger::new(&config).unwrap();
    let route = ledger.route(&["a"]).unwrap();
    let in_flight: Vec<_> = (0..3).map(|_| ledger.try_acquire(&Request::new(route), SEC).unwrap()).collect();
    ledger.report(&in_flight[0], &failure(), 2 * SEC).unwrap();
    ledger.observe(route, &failure(), 2 * SEC).unwrap();
    assert!(matches!(ledger.try_acquire(&Request::new(route), 2 * SEC), Err(Error::CircuitOpen { .. })));
    let probe = ledger.try_acquire(&Request::new(route), 32 * SEC).expect("the pause is over: the probe goes");
    let success = classify_response(200, &[("x", "y")], b"{}", ProviderHint::Auto, 0);
    ledger.report(&probe, &success, 33 * SEC).unwrap();
    ledger.report(&in_flight[1], &failure(), 34 * SEC).unwrap();
    ledger.report(&in_flight[2], &failure(), 35 * SEC).unwrap();
    assert!(
        ledger.try_acquire(&Request::new(route), 35 * SEC).is_ok(),
        "two failures of requests sent before the opening are old news"
    );
}

/// Anthropic sends some 500s with `x-should-retry: false`: not worth a
/// retry, but a provider failure all the same, which the breaker counts
/// (it counts 429s and 5xx), never a success.
#[test]
fn a_5xx_the_provider_says_not_to_retry_is_still_a_failure() {
    let config = Config::from_value(json!({
        "adaptive": {"breaker": {"failures": 2, "pauses": ["30s"]}},
        "scopes": {"a": {"provider": true, "limits": [{"dimension": "requests", "amount": 1000, "window": "1m"}]}}
    }))
    .unwrap();
    let ledger = Ledger::new(&config).unwrap();
    let route = ledger.route(&["a"]).unwrap();
    let body = br#"{"type":"error","error":{"type":"api_error","message":"Internal server error"}}"#;
    let api_error = classify_response(500, &[("x-should-retry", "false")], body, ProviderHint::Anthropic, 0);
    assert!(!api_error.retryable);
    ledger.observe(route, &api_error, SEC).unwrap();
    ledger.observe(route, &api_error, 2 * SEC).unwrap();
    assert!(
        matches!(ledger.try_acquire(&Request::new(route), 2 * SEC), Err(Error::CircuitOpen { .. })),
        "two consecutive 500s open it"
    );
}

/// A governor that admits elsewhere (through Redis) and only feeds answers
/// back: a request sent once the pause was over, with no probe claimed
/// here, answers as the probe. Its failure reopens the breaker for the next
/// pause; its success closes it.
#[test]
fn an_answer_to_a_request_sent_past_the_pause_is_the_probes() {
    use llmgov::{Governor, ManualClock};
    let config = Config::from_value(json!({
        "adaptive": {"breaker": {"failures": 2, "pauses": ["30s", "2m"]}},
        "scopes": {"a": {"provider": true, "limits": [{"dimension": "requests", "amount": 1000, "window": "1m"}]}}
    }))
    .unwrap();
    let clock = Arc::new(ManualClock::new(0));
    let gov = Governor::with_clock(&config, clock.clone()).unwrap();
    let route = gov.route(&["a"]).unwrap();
    let success = classify_response(200, &[("x", "y")], b"", ProviderHint::Auto, 0);
    gov.observe_sent(route, 0, &failure()).unwrap();
    assert_eq!(gov.breaker_open_until("a"), None, "one failure of two");
    gov.observe_sent(route, 0, &failure()).unwrap();
    assert_eq!(gov.breaker_open_until("a"), Some(30 * SEC));
    assert_eq!(gov.breaker_open_until("b"), None, "no such scope");
    // Sent during the pause: of the outage that opened it.
    clock.set(31 * SEC);
    gov.observe_sent(route, 10 * SEC, &failure()).unwrap();
    assert_eq!(gov.breaker_open_until("a"), Some(30 * SEC));
    gov.observe_sent(route, 10 * SEC, &success).unwrap();
    assert_eq!(gov.breaker_open_until("a"), Some(30 * SEC));
    // Sent after it: the probe failed, so the next pause.
    gov.observe_sent(route, 30 * SEC, &failure()).unwrap();
    assert_eq!(gov.breaker_open_until("a"), Some(31 * SEC + 120 * SEC));
    clock.set(200 * SEC);
    gov.observe_sent(route, 160 * SEC, &success).unwrap();
    assert_eq!(gov.breaker_open_until("a"), None, "the probe succeeded");
}
