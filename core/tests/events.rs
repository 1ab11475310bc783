//! The event hook: local denials, provider rejections and breaker changes
//! reach the application's callback, once each, as they happen.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use llmgov::events::Event;
use llmgov::feedback::{LimitDimension, LimitKind};
use llmgov::{Config, Error, Governor, ManualClock, Request};
use serde_json::json;

fn hooked(config: serde_json::Value) -> (Governor, Arc<ManualClock>, Arc<Mutex<Vec<Event>>>) {
    let clock = Arc::new(ManualClock::new(0));
    let gov = Governor::with_clock(&Config::from_value(config).unwrap(), clock.clone()).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    gov.set_event_hook(Arc::new(move |event: &Event| log.lock().unwrap().push(event.clone()))).unwrap();
    (gov, clock, seen)
}

#[test]
fn denials_rejections_and_breaker_changes_reach_the_hook() {
    let (gov, clock, seen) = hooked(json!({
        "adaptive": {"breaker": {"failures": 2, "pauses": ["10s"]}},
        "scopes": {"openai/org": {"provider": true, "limits": [{"dimension": "tokens", "amount": 600, "window": "1m"}]}},
    }));
    let route = gov.route(&["openai/org"]).unwrap();
    let permit = gov.try_acquire(&Request::new(route).input_tokens(500)).unwrap();
    assert!(gov.try_acquire(&Request::new(route).input_tokens(200).class(gov.class("batch"))).is_err());
    let body = br#"{"error":{"type":"tokens","code":"rate_limit_exceeded"}}"#;
    gov.report(&permit, 429, &[("retry-after", "1")], body).unwrap();
    gov.report(&permit, 503, &[("retry-after", "1")], b"").unwrap();
    clock.advance(Duration::from_secs(10));
    let probe = gov.try_acquire(&Request::new(route)).unwrap();
    gov.report(&probe, 200, &[] as &[(&str, &str)], b"{}").unwrap();

    let events = seen.lock().unwrap().clone();
    assert_eq!(
        events[0],
        Event::Denied {
            code: "rate_limited",
            scope: Some("openai/org".into()),
            dimension: Some("tokens"),
            retry_after_ms: Some(10_000),
            class: "batch".into(),
        }
    );
    assert_eq!(
        events[1],
        Event::ProviderRejected {
            scopes: vec!["openai/org".into()],
            kind: LimitKind::RateLimited,
            dimension: LimitDimension::Tokens,
            retry_after_ms: Some(1000),
        }
    );
    assert!(matches!(&events[2], Event::ProviderRejected { kind: LimitKind::Overloaded, .. }), "{events:?}");
    assert_eq!(events[3], Event::BreakerChanged { scope: "openai/org".into(), state: "open" });
    assert_eq!(events[4], Event::BreakerChanged { scope: "openai/org".into(), state: "closed" });
    assert_eq!(events.len(), 5, "{events:?}");
    let json = serde_json::to_value(&events[3]).unwrap();
    assert_eq!(json, json!({"event": "breaker_changed", "scope": "openai/org", "state": "open"}));
}

#[test]
fn a_governor_takes_one_hook() {
    let (gov, _clock, _seen) =
        hooked(json!({"scopes": {"p": {"limits": [{"dimension": "requests", "amount": 1, "window": "1m"}]}}}));
    let second = gov.set_event_hook(Arc::new(|_: &Event| {})).unwrap_err();
    assert!(matches!(second, Error::InvalidRequest { field: "event_hook", .. }), "{second}");
}

#[test]
fn a_refusal_at_the_queue_is_a_denial_too() {
    let (gov, _clock, seen) = hooked(json!({
        "classes": {"batch": {"queue_bound": 1}},
        "scopes": {"p": {"limits": [{"dimension": "requests", "amount": 1, "window": "1h"}]}},
    }));
    let route = gov.route(&["p"]).unwrap();
    let request = Request::new(route).class(gov.class("batch"));
    let _held = gov.try_acquire(&request).unwrap();
    let _waiting = gov.acquire(&request);
    let full = gov.acquire_blocking(&request, Some(Duration::ZERO)).unwrap_err();
    assert_eq!(full.code(), "queue_full");
    let events = seen.lock().unwrap().clone();
    assert!(
        matches!(events.last(), Some(Event::Denied { code: "queue_full", class, .. }) if class == "batch"),
        "{events:?}"
    );
}

#[test]
fn a_refusal_after_waiting_reaches_the_hook_once_from_the_future_and_the_blocking_call() {
    // One in flight at once: a waiter's wait depends on a release, so it is
    // queued (not refused at once) and refused when its deadline passes.
    let (gov, clock, seen) = hooked(json!({
        "scopes": {"p": {"limits": [{"dimension": "concurrency", "amount": 1}]}},
    }));
    let route = gov.route(&["p"]).unwrap();
    let _held = gov.try_acquire(&Request::new(route)).unwrap();
    let request = Request::new(route).deadline(Duration::from_secs(5)).class(gov.class("batch"));
    let mut waiting = gov.acquire(&request);
    assert!(waiting.is_waiting());
    assert!(seen.lock().unwrap().is_empty());
    clock.advance(Duration::from_secs(6));
    gov.wake_waiters();
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    match std::future::Future::poll(std::pin::Pin::new(&mut waiting), &mut context) {
        std::task::Poll::Ready(Err(Error::DeadlineExceeded { .. })) => {}
        other => panic!("expected a deadline refusal, got {other:?}"),
    }
    // A blocking wait, refused the same way on its own thread, told once too.
    let gov = Arc::new(gov);
    let waiter = {
        let gov = gov.clone();
        std::thread::spawn(move || gov.acquire_blocking(&request, None))
    };
    while gov.queue_metrics().depth == 0 {
        assert!(!waiter.is_finished(), "the waiter returned instead of queueing");
        std::thread::yield_now();
    }
    clock.advance(Duration::from_secs(6));
    gov.wake_waiters();
    assert!(matches!(waiter.join().unwrap(), Err(Error::DeadlineExceeded { .. })));
    let events = seen.lock().unwrap().clone();
    let deadlines: Vec<_> = events
        .iter()
        .filter(|e| matches!(e, Event::Denied { code: "deadline_exceeded", class, .. } if class == "batch"))
        .collect();
    assert_eq!(deadlines.len(), 2, "{events:?}");
    let text = gov.prometheus();
    assert!(
        text.contains(r#"llmgov_refusals_total{dimension="none",gateway_decision="rejected_locally"} 2"#),
        "{text}"
    );
}

#[test]
fn a_refusal_given_as_the_caller_gives_up_still_reaches_the_hook() {
    // The deadline passes and the waiter is refused, then its caller drops
    // the wait (a Go ctx deadline, a Python cancel, an AbortSignal) before
    // taking the answer: the queue counted an expiry, so the hook and the
    // tally must too.
    let (gov, clock, seen) = hooked(json!({
        "scopes": {"p": {"limits": [{"dimension": "concurrency", "amount": 1}]}},
    }));
    let route = gov.route(&["p"]).unwrap();
    let _held = gov.try_acquire(&Request::new(route)).unwrap();
    let request = Request::new(route).deadline(Duration::from_secs(5)).class(gov.class("batch"));
    let waiting = gov.acquire(&request);
    assert!(waiting.is_waiting());
    clock.advance(Duration::from_secs(6));
    gov.wake_waiters();
    drop(waiting);
    let events = seen.lock().unwrap().clone();
    assert!(matches!(events.as_slice(), [Event::Denied { code: "deadline_exceeded", .. }]), "{events:?}");
    assert_eq!(gov.queue_metrics().classes.iter().map(|c| c.expired).sum::<u64>(), 1);
    let text = gov.prometheus();
    assert!(
        text.contains(r#"llmgov_refusals_total{dimension="none",gateway_decision="rejected_locally"} 1"#),
        "{text}"
    );
}
