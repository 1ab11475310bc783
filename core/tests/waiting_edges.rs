//! Edges of waiting found in review, each pinned on the manual clock:
//! invalid requests refused before they queue, waiters that leave, limits
//! discovered from headers, and share ceilings on requests that never wait.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use llmgov::scheduler::{Outcome, Scheduler};
use llmgov::{classify_response, Acquire, Config, Error, Governor, Ledger, ManualClock, Permit, ProviderHint, Request};
use serde_json::json;

fn governor(config: serde_json::Value) -> (Governor, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(0));
    (Governor::with_clock(&Config::from_value(config).unwrap(), clock.clone()).unwrap(), clock)
}

fn poll(future: &mut Acquire) -> Poll<llmgov::Result<Permit>> {
    Pin::new(future).poll(&mut Context::from_waker(Waker::noop()))
}

/// One request a minute on scope `p`.
fn one_a_minute() -> serde_json::Value {
    json!({"scopes": {"p": {"limits": [{"dimension": "requests", "amount": 1, "window": "1m"}]}}})
}

fn assert_invalid(result: llmgov::Result<impl std::fmt::Debug>, field: &str, value: &str) {
    match result {
        Err(Error::InvalidRequest { field: f, value: v, .. }) => assert_eq!((f, v.as_str()), (field, value)),
        other => panic!("expected invalid_request on {field} = {value}, got {other:?}"),
    }
}

#[test]
fn the_scheduler_refuses_an_invalid_request_before_queueing_it() {
    let config = Config::from_value(one_a_minute()).unwrap();
    let ledger = Ledger::new(&config).unwrap();
    let mut scheduler = Scheduler::new(&config).unwrap();
    let route = ledger.route(&["p"]).unwrap();
    let _first = ledger.try_acquire(&Request::new(route), 0).unwrap();
    let deadline = Some(300_000_000_000);
    scheduler.submit(&ledger, Request::new(route), "", deadline, 0).unwrap();
    // The same error, field and value as the ledger gives at admission.
    let huge = Request::new(route).input_tokens(u64::MAX);
    assert_invalid(ledger.try_acquire(&huge, 0), "input_tokens", &u64::MAX.to_string());
    assert_invalid(scheduler.submit(&ledger, huge, "", deadline, 0), "input_tokens", &u64::MAX.to_string());
    let cached = Request::new(route).input_tokens(10).cached_input_tokens(11);
    assert_invalid(scheduler.submit(&ledger, cached, "", deadline, 0), "cached_input_tokens", "11");
    assert_eq!(scheduler.depth(), 1, "only the valid request waits");
    let mut out: Vec<Outcome> = Vec::new();
    scheduler.poll(0, &mut |r| ledger.try_acquire(r, 0), &mut out);
    assert!(out.is_empty(), "{out:?}");
    // Its deadline passes: the one waiter is refused and taken out.
    scheduler.poll(400_000_000_000, &mut |r| ledger.try_acquire(r, 400_000_000_000), &mut out);
    assert_eq!(out.len(), 1);
    assert!(matches!(out[0], Outcome::Refused { error: Error::DeadlineExceeded { .. }, .. }));
    assert_eq!(scheduler.depth(), 0);
}

#[test]
fn acquire_refuses_an_invalid_request_at_once_while_others_wait() {
    let (gov, clock) = governor(one_a_minute());
    let route = gov.route(&["p"]).unwrap();
    let _first = gov.try_acquire(&Request::new(route)).unwrap();
    let five_minutes = Duration::from_secs(300);
    let mut valid = gov.acquire(&Request::new(route).deadline(five_minutes));
    assert!(valid.is_waiting());
    for _ in 0..2 {
        let mut huge = gov.acquire(&Request::new(route).input_tokens(u64::MAX).deadline(five_minutes));
        assert!(!huge.is_waiting(), "an invalid request must not queue");
        let Poll::Ready(result) = poll(&mut huge) else { panic!("refused at once") };
        assert_invalid(result, "input_tokens", &u64::MAX.to_string());
    }
    assert_eq!(gov.queue_metrics().depth, 1);
    // Every deadline passes; the poll that expires the waiter does not panic.
    clock.advance(Duration::from_secs(400));
    gov.wake_waiters();
    assert!(matches!(poll(&mut valid), Poll::Ready(Err(Error::DeadlineExceeded { .. }))));
    assert_eq!(gov.queue_metrics().depth, 0);
}

/// A provider scope whose token limit is left to the provider's headers.
fn discovered() -> serde_json::Value {
    json!({"scopes": {"openai": {"provider": true, "limits": [{"dimension": "tokens", "window": "1m"}]}}})
}

#[test]
fn a_wait_on_a_discovered_limit_is_predicted_at_the_providers_rate() {
    let (gov, clock) = governor(discovered());
    let route = gov.route(&["openai"]).unwrap();
    let headers = [("x-ratelimit-limit-tokens", "30000"), ("x-ratelimit-remaining-tokens", "30000")];
    gov.observe(route, &classify_response(200, &headers, b"{}", ProviderHint::OpenAi, 0)).unwrap();
    let limit = &gov.snapshot().scopes[0].limits[0];
    assert_eq!((limit.amount, limit.effective_amount), (0, Some(30_000)));
    let _all = gov.try_acquire(&Request::new(route).input_tokens(30_000)).unwrap();
    // 500 tokens refill in 1 s at 30000 a minute; the request may wait 10 s.
    let mut small = gov.acquire(&Request::new(route).input_tokens(500).deadline(Duration::from_secs(10)));
    assert!(small.is_waiting(), "refused at once: {:?}", poll(&mut small));
    assert_eq!(gov.wake_waiters(), Some(Duration::from_secs(1)));
    clock.advance(Duration::from_millis(999));
    gov.wake_waiters();
    assert!(poll(&mut small).is_pending());
    clock.advance(Duration::from_millis(1));
    gov.wake_waiters();
    assert!(matches!(poll(&mut small), Poll::Ready(Ok(_))));
}

#[test]
fn a_wait_on_an_undiscovered_limit_is_predicted_at_a_request_a_window() {
    let (gov, clock) = governor(discovered());
    let route = gov.route(&["openai"]).unwrap();
    let _first = gov.try_acquire(&Request::new(route).input_tokens(500)).unwrap();
    let request = Request::new(route).input_tokens(500);
    // The next request goes a window later: refused at once with less patience.
    match gov.acquire_blocking(&request.deadline(Duration::from_secs(59)), None) {
        Err(Error::DeadlineExceeded { waited, retry_after, .. }) => {
            assert_eq!((waited, retry_after), (Duration::ZERO, Some(Duration::from_secs(60))))
        }
        other => panic!("expected a refusal at once, got {other:?}"),
    }
    let mut next = gov.acquire(&request.deadline(Duration::from_secs(60)));
    assert!(next.is_waiting(), "refused at once: {:?}", poll(&mut next));
    clock.advance(Duration::from_secs(60));
    gov.wake_waiters();
    assert!(matches!(poll(&mut next), Poll::Ready(Ok(_))));
}

/// 10000 tokens a minute on scope `p`.
fn tokens() -> serde_json::Value {
    json!({"scopes": {"p": {"limits": [{"dimension": "tokens", "amount": 10000, "window": "1m"}]}}})
}

#[test]
fn a_head_that_leaves_lets_the_waiters_it_held_back_go_at_once() {
    let (gov, _clock) = governor(tokens());
    let route = gov.route(&["p"]).unwrap();
    let _held = gov.try_acquire(&Request::new(route).input_tokens(9000)).unwrap(); // 1000 left
    let minute = Duration::from_secs(60);
    let mut big = gov.acquire(&Request::new(route).input_tokens(5000).deadline(minute));
    let mut small = gov.acquire(&Request::new(route).input_tokens(500).deadline(minute));
    assert!(poll(&mut big).is_pending() && poll(&mut small).is_pending(), "the big head holds the line");
    drop(big);
    // 1000 tokens are free and nobody else waits: no wake_waiters, no timer.
    assert!(matches!(poll(&mut small), Poll::Ready(Ok(_))), "the small waiter is still parked");
    let metrics = gov.queue_metrics();
    assert_eq!((metrics.depth, metrics.classes[0].withdrawn, metrics.classes[0].admitted), (0, 1, 1));
}

#[test]
fn the_scheduler_asks_for_a_poll_when_a_head_leaves_and_only_then() {
    let config = Config::from_value(tokens()).unwrap();
    let ledger = Ledger::new(&config).unwrap();
    let mut scheduler = Scheduler::new(&config).unwrap();
    let route = ledger.route(&["p"]).unwrap();
    let _held = ledger.try_acquire(&Request::new(route).input_tokens(9000), 0).unwrap();
    let ids: Vec<_> = [5000, 500, 400]
        .into_iter()
        .map(|n| scheduler.submit(&ledger, Request::new(route).input_tokens(n), "", None, 0).unwrap())
        .collect();
    let mut out: Vec<Outcome> = Vec::new();
    scheduler.poll(0, &mut |r| ledger.try_acquire(r, 0), &mut out);
    assert!(out.is_empty(), "{out:?}");
    let refill = scheduler.poll_timeout().unwrap();
    assert!(refill > 0);
    // The last in line held nobody back: the next poll stays at the refill.
    assert!(scheduler.withdraw(ids[2]));
    assert_eq!(scheduler.poll_timeout(), Some(refill));
    // The head did: poll now, and the 500 tokens behind it pass.
    assert!(scheduler.withdraw(ids[0]));
    assert_eq!(scheduler.poll_timeout(), Some(0));
    scheduler.poll(1, &mut |r| ledger.try_acquire(r, 1), &mut out);
    assert!(matches!(out[..], [Outcome::Admitted { waiter, .. }] if waiter == ids[1]), "{out:?}");
    assert!(!scheduler.withdraw(ids[1]), "answered already");
}

/// Tenants under `tenants/*`, a million tokens a minute each; acme may be
/// served at most 1000 tokens a minute.
fn acme_ceiling() -> serde_json::Value {
    json!({
        "shares": {"tenants/acme": {"ceiling": 1000, "window": "1m"}},
        "scopes": {"tenants/*": {"limits": [{"dimension": "tokens", "amount": 1_000_000, "window": "1m"}]}}
    })
}

#[test]
fn a_ceiling_binds_requests_admitted_without_waiting() {
    let (gov, clock) = governor(acme_ceiling());
    let acme = gov.route(&["tenants/acme"]).unwrap();
    let mut futures: Vec<Acquire> = (0..10).map(|_| gov.acquire(&Request::new(acme).input_tokens(500))).collect();
    let ready: Vec<bool> = futures.iter_mut().map(|f| poll(f).is_ready()).collect();
    assert_eq!(ready, [true, true, false, false, false, false, false, false, false, false], "1000 tokens at t=0");
    // The ceiling lets 500 more through every 30 s, to the next in line.
    clock.advance(Duration::from_secs(30));
    gov.wake_waiters();
    let ready: Vec<bool> = futures[2..].iter_mut().map(|f| poll(f).is_ready()).collect();
    assert_eq!(ready, [true, false, false, false, false, false, false, false]);
    // A tenant without a ceiling is not held: a million tokens at once.
    let other = gov.route(&["tenants/other"]).unwrap();
    for _ in 0..10 {
        assert!(poll(&mut gov.acquire(&Request::new(other).input_tokens(100_000))).is_ready());
    }
}

#[test]
fn a_wait_for_a_ceiling_past_the_deadline_is_refused_at_once() {
    let (gov, clock) = governor(acme_ceiling());
    let acme = gov.route(&["tenants/acme"]).unwrap();
    let _all = gov.acquire_blocking(&Request::new(acme).input_tokens(1000), None).unwrap();
    let request = Request::new(acme).input_tokens(500);
    match gov.acquire_blocking(&request.deadline(Duration::from_secs(29)), None) {
        Err(Error::DeadlineExceeded { waited, retry_after, .. }) => {
            assert_eq!((waited, retry_after), (Duration::ZERO, Some(Duration::from_secs(30))))
        }
        other => panic!("expected a refusal at once, got {other:?}"),
    }
    let mut patient = gov.acquire(&request.deadline(Duration::from_secs(30)));
    assert!(patient.is_waiting());
    clock.advance(Duration::from_secs(30));
    gov.wake_waiters();
    assert!(matches!(poll(&mut patient), Poll::Ready(Ok(_))));
}

/// One request in flight at a time on scope `p`.
fn one_at_a_time() -> serde_json::Value {
    json!({"scopes": {"p": {"limits": [{"dimension": "concurrency", "amount": 1}]}}})
}

fn in_flight(gov: &Governor) -> u64 {
    gov.snapshot().scopes[0].limits[0].in_use
}

#[test]
fn an_acquire_dropped_unpolled_gives_back_the_permit_granted_at_the_call() {
    let (gov, _clock) = governor(one_at_a_time());
    let route = gov.route(&["p"]).unwrap();
    // As a `select!` whose other branch is ready first drops it.
    let admitted = gov.acquire(&Request::new(route));
    assert!(!admitted.is_waiting(), "admitted at the call");
    assert_eq!(in_flight(&gov), 1);
    let mut behind = gov.acquire(&Request::new(route));
    assert!(poll(&mut behind).is_pending());
    drop(admitted);
    assert_eq!(gov.snapshot().scopes[0].limits[0].reserved, 1, "only the waiter's permit is held");
    // The slot it gave back goes to the waiter at once.
    let Poll::Ready(Ok(mut permit)) = poll(&mut behind) else { panic!("the waiter is still parked") };
    drop(behind);
    assert_eq!(in_flight(&gov), 1, "a permit handed out is not cancelled with its future");
    gov.cancel(&mut permit).unwrap();
    assert_eq!(in_flight(&gov), 0);
}

/// A waker that drops another waiter's `Acquire` when woken, as an executor
/// may when waking a task drops the last reference to another.
struct DropsOnWake(std::sync::Mutex<Option<Acquire>>);

impl std::task::Wake for DropsOnWake {
    fn wake(self: Arc<Self>) {
        self.0.lock().unwrap().take();
    }
}

#[test]
fn a_waker_that_drops_another_waiter_does_not_deadlock_the_queue() {
    let (gov, clock) = governor(one_a_minute());
    let gov = Arc::new(gov);
    let route = gov.route(&["p"]).unwrap();
    let _first = gov.try_acquire(&Request::new(route)).unwrap();
    let mut second = gov.acquire(&Request::new(route));
    let third = gov.acquire(&Request::new(route));
    let waker = Arc::new(DropsOnWake(std::sync::Mutex::new(Some(third))));
    assert!(Pin::new(&mut second).poll(&mut Context::from_waker(&Waker::from(waker.clone()))).is_pending());
    clock.advance(Duration::from_secs(60));
    // Admitting `second` wakes its task, which drops `third`: leaving the
    // queue from inside the wake. The queue lock must not be held then. A
    // deadlock would hang, so the wake runs on a thread watched by a channel.
    let (done, finished) = std::sync::mpsc::channel();
    let waking = gov.clone();
    std::thread::spawn(move || {
        waking.wake_waiters();
        done.send(()).unwrap();
    });
    if finished.recv_timeout(Duration::from_secs(30)).is_err() {
        // Dropping the governor would wait on the deadlocked lock too.
        std::mem::forget((gov, second));
        panic!("wake_waiters deadlocked: a waker ran under the queue lock");
    }
    assert!(waker.0.lock().unwrap().is_none(), "the waker ran");
    assert!(matches!(poll(&mut second), Poll::Ready(Ok(_))));
    assert_eq!(gov.queue_metrics().depth, 0, "the dropped waiter left the queue");
}
