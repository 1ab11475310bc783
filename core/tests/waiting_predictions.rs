//! Predicted waits that must hold, found in the scheduler's semantic audit:
//! a request is refused at once when it could not be admitted by its
//! deadline, and waits when it could; a head refused at its deadline holds
//! nobody back. Manual clock.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use llmgov::scheduler::{Outcome, Scheduler};
use llmgov::{classify_response, Acquire, Config, Error, Governor, Ledger, ManualClock, Permit, ProviderHint, Request};
use serde_json::json;

const SECOND: u64 = 1_000_000_000;

fn governor(config: serde_json::Value) -> (Governor, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(0));
    (Governor::with_clock(&Config::from_value(config).unwrap(), clock.clone()).unwrap(), clock)
}

fn poll(future: &mut Acquire) -> Poll<llmgov::Result<Permit>> {
    Pin::new(future).poll(&mut Context::from_waker(Waker::noop()))
}

/// Ten requests a minute on `p`, counted in a sliding window.
fn ten_a_minute_sliding() -> serde_json::Value {
    json!({"scopes": {"p": {"limits": [
        {"dimension": "requests", "amount": 10, "window": "1m", "algorithm": "sliding_window"}]}}})
}

#[test]
fn a_full_sliding_window_is_predicted_to_free_when_its_charges_age_out() {
    let (gov, clock) = governor(ten_a_minute_sliding());
    let route = gov.route(&["p"]).unwrap();
    let _all: Vec<Permit> = (0..10).map(|_| gov.try_acquire(&Request::new(route)).unwrap()).collect();
    // Every charge was made at 0: nothing frees before a minute, so a
    // request that may wait 10 s is refused now, not after 10 s of waiting.
    let mut impatient = gov.acquire(&Request::new(route).deadline(Duration::from_secs(10)));
    match poll(&mut impatient) {
        Poll::Ready(Err(Error::DeadlineExceeded { waited, retry_after, .. })) => {
            assert_eq!(waited, Duration::ZERO);
            let after = retry_after.expect("a refusal at once says when");
            assert!(after >= Duration::from_secs(59), "retry_after {after:?}");
        }
        other => panic!("expected a refusal at once, got {other:?}"),
    }
    assert_eq!(gov.queue_metrics().depth, 0, "nobody waits for a failure");
    // Near the end of the window, the same request waits and passes.
    clock.advance(Duration::from_secs(55));
    let mut patient = gov.acquire(&Request::new(route).deadline(Duration::from_secs(10)));
    assert!(patient.is_waiting(), "refused at once: {:?}", poll(&mut patient));
    clock.advance(Duration::from_secs(6));
    gov.wake_waiters();
    assert!(matches!(poll(&mut patient), Poll::Ready(Ok(_))));
}

#[test]
fn a_sliding_window_about_to_free_is_not_refused_at_once() {
    let (gov, clock) = governor(ten_a_minute_sliding());
    let route = gov.route(&["p"]).unwrap();
    let _all: Vec<Permit> = (0..10).map(|_| gov.try_acquire(&Request::new(route)).unwrap()).collect();
    clock.advance(Duration::from_secs(58));
    // All ten free within 2 s or so; a rate of one per 6 s would say 60 s for ten.
    let waiters: Vec<Acquire> =
        (0..10).map(|_| gov.acquire(&Request::new(route).deadline(Duration::from_secs(10)))).collect();
    assert!(waiters.iter().all(Acquire::is_waiting), "a wait of about 2 s is within 10 s");
    clock.advance(Duration::from_secs(3));
    gov.wake_waiters();
    let mut waiters = waiters;
    assert!(waiters.iter_mut().all(|w| matches!(poll(w), Poll::Ready(Ok(_)))));
}

fn breaker_gov() -> (Governor, Arc<ManualClock>, llmgov::Route) {
    let (gov, clock) = governor(json!({
        "adaptive": {"breaker": {"failures": 3, "pauses": ["30s", "2m"]}},
        "scopes": {"openai/org": {"provider": true, "limits": [{"dimension": "requests", "amount": 6000, "window": "1m"}]}},
    }));
    let route = gov.route(&["openai/org"]).unwrap();
    let permit = gov.try_acquire(&Request::new(route)).unwrap();
    for _ in 0..3 {
        let answer = classify_response::<&str, &str>(500, &[], b"{}", ProviderHint::OpenAi, 0);
        gov.report_classified(&permit, &answer).unwrap();
    }
    (gov, clock, route)
}

fn circuit_open(result: Poll<llmgov::Result<Permit>>) -> Duration {
    match result {
        Poll::Ready(Err(Error::CircuitOpen { retry_after, .. })) => retry_after,
        other => panic!("expected an open circuit at once, got {other:?}"),
    }
}

#[test]
fn a_class_that_cannot_outwait_an_open_breaker_is_refused_at_once() {
    let (gov, _clock, route) = breaker_gov();
    // No deadline of its own, but interactive waits 10 s at most: the 30 s
    // pause cannot be outwaited.
    let mut interactive = gov.acquire(&Request::new(route).class(gov.class("interactive")));
    assert_eq!(circuit_open(poll(&mut interactive)), Duration::from_secs(30));
    assert_eq!(gov.queue_metrics().depth, 0, "nobody waits for a failure");
}

#[test]
fn an_open_breaker_refuses_an_impatient_request_at_once_while_others_wait() {
    let (gov, _clock, route) = breaker_gov();
    let mut patient = gov.acquire(&Request::new(route).deadline(Duration::from_secs(60)));
    assert!(patient.is_waiting(), "{:?}", poll(&mut patient));
    let mut impatient = gov.acquire(&Request::new(route).deadline(Duration::from_secs(5)));
    assert_eq!(circuit_open(poll(&mut impatient)), Duration::from_secs(30));
    assert_eq!(gov.queue_metrics().depth, 1, "only the patient one waits");
}

/// 10000 tokens a minute on `p`.
fn tokens() -> Config {
    Config::from_value(json!({"scopes": {"p": {"limits": [
        {"dimension": "tokens", "amount": 10000, "window": "1m"}]}}}))
    .unwrap()
}

#[test]
fn a_head_refused_at_its_deadline_does_not_hold_back_the_waiter_behind_it() {
    let config = tokens();
    let ledger = Ledger::new(&config).unwrap();
    let mut scheduler = Scheduler::new(&config).unwrap();
    let route = ledger.route(&["p"]).unwrap();
    let _most = ledger.try_acquire(&Request::new(route).input_tokens(9000), 0).unwrap();
    // 4000 more need 24 s: the large one may wait 30 s, the small one 10 min.
    let large = scheduler.submit(&ledger, Request::new(route).input_tokens(5000), "", Some(30 * SECOND), 0).unwrap();
    let small = scheduler.submit(&ledger, Request::new(route).input_tokens(100), "", None, 0).unwrap();
    let mut out: Vec<Outcome> = Vec::new();
    scheduler.poll(0, &mut |r| ledger.try_acquire(r, 0), &mut out);
    assert!(out.is_empty(), "{out:?}");
    // Someone who never queues takes most of the refill meanwhile.
    let _direct = ledger.try_acquire(&Request::new(route).input_tokens(4000), 20 * SECOND).unwrap();
    let now = 30 * SECOND;
    scheduler.poll(now, &mut |r| ledger.try_acquire(r, now), &mut out);
    let answered: Vec<_> = out.iter().map(|o| (o.waiter(), matches!(o, Outcome::Admitted { .. }))).collect();
    // The large one is refused at its deadline; 2000 tokens are there, so
    // the small one goes in the same poll, not when the large one's 3000
    // more would have refilled.
    assert!(answered.contains(&(large, false)), "{out:?}");
    assert!(answered.contains(&(small, true)), "{out:?}");
    assert_eq!(scheduler.depth(), 0);
}

/// Tenant `acme` may spend 0.01 a day on gpt-4o (2.5 per 1M input tokens).
fn budget_of_a_cent() -> serde_json::Value {
    json!({
        "pricing": {"gpt-4o": {"input": 2.5, "output": 10.0}},
        "scopes": {
            "openai/gpt-4o": {"provider": true, "pricing": "gpt-4o",
                "limits": [{"dimension": "requests", "amount": 10000, "window": "1m"}]},
            "tenants/*": {"limits": [{"dimension": "cost", "budget": 0.01, "window": "1d", "slots": 24}]},
        },
    })
}

#[test]
fn a_spent_budget_refuses_at_once_instead_of_queueing_until_the_deadline() {
    let (gov, _clock) = governor(budget_of_a_cent());
    let route = gov.route(&["tenants/acme", "openai/gpt-4o"]).unwrap();
    let request = Request::new(route).input_tokens(2_000).max_output_tokens(0);
    // Two requests at 0.005 each spend the cent.
    let _spent: Vec<Permit> = (0..2).map(|_| gov.try_acquire(&request).unwrap()).collect();
    // Nothing of the budget comes back for about a day; the request may wait 10 min.
    let mut next = gov.acquire(&request.deadline(Duration::from_secs(600)));
    match poll(&mut next) {
        Poll::Ready(Err(Error::DeadlineExceeded { waited, retry_after, .. })) => {
            assert_eq!(waited, Duration::ZERO);
            let after = retry_after.expect("a refusal at once says when");
            assert!(after >= Duration::from_secs(23 * 3600), "retry_after {after:?}");
        }
        other => panic!("expected a refusal at once, got {other:?}"),
    }
    assert_eq!(gov.queue_metrics().depth, 0, "nobody waits for a failure");
}

/// A limit that does not count cache reads is predicted on what it counts:
/// a request whose uncached input fits waits its turn, not refused as never
/// fitting (the ledger alone admits it), and its wait is that of its
/// uncached part.
#[test]
fn a_request_whose_cache_reads_are_not_counted_is_predicted_on_what_is_counted() {
    let (gov, clock) = governor(json!({"scopes": {"anthropic": {"limits": [
        {"dimension": "requests", "amount": 1, "window": "1m"},
        {"dimension": "input_tokens", "amount": 80000, "window": "1m", "count_cached_input": false},
    ]}}}));
    let route = gov.route(&["anthropic"]).unwrap();
    // 150k input, 100k of it cache reads: 50k counted, within 80k.
    let cached = Request::new(route).input_tokens(150_000).cached_input_tokens(100_000);
    let _first = gov.try_acquire(&Request::new(route)).unwrap();
    let mut waiter = gov.acquire(&cached.deadline(Duration::from_secs(120)));
    assert!(waiter.is_waiting(), "refused at once: {:?}", poll(&mut waiter));
    clock.advance(Duration::from_secs(60));
    gov.wake_waiters();
    assert!(matches!(poll(&mut waiter), Poll::Ready(Ok(_))));
}

/// A request over its whole cost budget never fits: refused at once even
/// when a head holds the line it would queue behind (which keeps it from
/// reaching the ledger), as it is when nobody waits.
#[test]
fn a_request_over_its_whole_budget_is_refused_at_once_behind_a_held_line() {
    let (gov, _clock) = governor(json!({
        "pricing": {"gpt-4o": {"input": 2.5, "output": 10.0}},
        "scopes": {
            "openai/gpt-4o": {"provider": true, "pricing": "gpt-4o",
                "limits": [{"dimension": "requests", "amount": 1, "window": "1m"}]},
            "tenants/*": {"limits": [{"dimension": "cost", "budget": 0.01, "window": "1d", "slots": 24}]},
        },
    }));
    let acme = gov.route(&["tenants/acme", "openai/gpt-4o"]).unwrap();
    let other = gov.route(&["tenants/other", "openai/gpt-4o"]).unwrap();
    // 10k input at 2.5 per 1M tokens: 0.025, over the whole budget of 0.01.
    let too_dear = Request::new(acme).input_tokens(10_000);
    assert!(matches!(gov.try_acquire(&too_dear), Err(Error::NeverFits { .. })));
    let _first = gov.try_acquire(&Request::new(other)).unwrap();
    let head = gov.acquire(&Request::new(other));
    assert!(head.is_waiting());
    let mut behind = gov.acquire(&too_dear.deadline(Duration::from_secs(300)));
    let answer = poll(&mut behind);
    assert!(matches!(answer, Poll::Ready(Err(Error::NeverFits { .. }))), "{answer:?}");
}

/// Another tenant's backlog queues ahead only on the limits it charges: on
/// a shared provider with room to spare it is nothing, so a tenant whose
/// own limit is untouched is predicted to pass now, not refused as if it
/// had to wait behind the other tenant's line on its own limit.
#[test]
fn another_tenants_backlog_counts_only_on_the_scopes_it_charges() {
    let (gov, _clock) = governor(json!({"scopes": {
        "p": {"limits": [{"dimension": "tokens", "amount": 1_000_000, "window": "1m"}]},
        "tenants/a": {"limits": [{"dimension": "tokens", "amount": 1000, "window": "1m"}]},
        "tenants/b": {"limits": [{"dimension": "tokens", "amount": 6000, "window": "1m"}]},
    }}));
    let a = gov.route(&["tenants/a", "p"]).unwrap();
    let b = gov.route(&["tenants/b", "p"]).unwrap();
    let _all_of_b = gov.try_acquire(&Request::new(b).input_tokens(6000)).unwrap();
    let agent = gov.class("agent");
    let backlog: Vec<Acquire> = (0..50).map(|_| gov.acquire(&Request::new(b).input_tokens(100).class(agent))).collect();
    assert!(backlog.iter().all(Acquire::is_waiting));
    let mut waiter = gov.acquire(&Request::new(a).input_tokens(100).deadline(Duration::from_secs(10)));
    let answer = poll(&mut waiter);
    assert!(matches!(answer, Poll::Ready(Ok(_))), "tenants/a is untouched and p has room: {answer:?}");
}
