//! Waiting for admission by profile, on the manual clock: in the queue of
//! the deployment that should pass first, among those the request's class
//! may use; refused at once when nothing can pass; refused after the wait if
//! a budget threshold was crossed meanwhile.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use llmgov::{Config, Dimension, Error, Governor, ManualClock, ProfileStep, Request, Routed};
use serde_json::{json, Value};

fn governor(config: Value) -> (Governor, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(0));
    (Governor::with_clock(&Config::from_value(config).unwrap(), clock.clone()).unwrap(), clock)
}

fn poll(future: &mut Pin<Box<impl Future<Output = llmgov::Result<Routed>>>>) -> Poll<llmgov::Result<Routed>> {
    future.as_mut().poll(&mut Context::from_waker(Waker::noop()))
}

/// Three deployments taking one request per 10 s, 5 s and (the fallback) 2 s.
fn three_paces() -> (Governor, Arc<ManualClock>) {
    let pace = |secs: u64| {
        json!({"provider": true, "limits": [
            {"dimension": "requests", "amount": 1, "window": format!("{secs}s")},
            {"dimension": "tokens", "amount": 10000, "window": "1m"},
        ]})
    };
    governor(json!({
        "scopes": {"a/org": pace(10), "b/org": pace(5), "c/org": pace(2)},
        "profiles": {
            "main": {"deployments": ["a/org", "b/org"], "fallback": "spare", "fallback_allowed": {"eval": false}},
            "spare": {"deployments": ["c/org"]},
        },
    }))
}

#[test]
fn a_waiter_queues_on_the_deployment_that_passes_first_its_class_may_use() {
    let (gov, clock) = three_paces();
    let profile = gov.profile::<&str>("main", &[]).unwrap();
    let request = Request::new(profile.primary()).input_tokens(10);
    let taken: Vec<_> = (0..3).map(|_| gov.try_acquire_profile(&profile, &request).unwrap().deployment).collect();
    assert_eq!(taken.iter().map(|d| &**d).collect::<Vec<_>>(), ["a/org", "b/org", "c/org"]);

    // Every deployment is busy: the fallback frees first (2 s).
    let mut any = Box::pin(gov.acquire_profile(&profile, &request));
    assert!(poll(&mut any).is_pending());
    // A class that may not fall back waits on its own profile's soonest: b (5 s).
    let eval = Request { class: gov.class("eval"), ..request };
    let ProfileStep::Wait(wait) = gov.step_profile(&profile, &eval).unwrap() else { panic!("all are busy") };
    assert_eq!(wait.deployment(), "b/org");
    let mut own = Box::pin(gov.acquire_profile(&profile, &eval));
    assert!(poll(&mut own).is_pending());

    clock.advance(Duration::from_secs(2));
    gov.wake_waiters();
    let Poll::Ready(Ok(routed)) = poll(&mut any) else { panic!("c refilled at 2 s") };
    assert_eq!((&*routed.deployment, &*routed.profile, routed.fell_back), ("c/org", "spare", true));
    assert!(poll(&mut own).is_pending(), "eval never leaves its profile");
    clock.advance(Duration::from_secs(3));
    gov.wake_waiters();
    let Poll::Ready(Ok(routed)) = poll(&mut own) else { panic!("b refilled at 5 s") };
    assert_eq!((&*routed.deployment, routed.fell_back), ("b/org", false));
}

#[test]
fn what_can_never_pass_is_refused_at_once_and_a_short_deadline_too() {
    let (gov, _clock) = three_paces();
    let profile = gov.profile::<&str>("main", &[]).unwrap();
    let huge = Request::new(profile.primary()).input_tokens(20_000);
    match gov.acquire_profile_blocking(&profile, &huge, None) {
        Err(Error::NeverFits { dimension: Dimension::Tokens, .. }) => {}
        other => panic!("expected never_fits, got {other:?}"),
    }
    let request = Request::new(profile.primary()).input_tokens(10);
    for _ in 0..3 {
        gov.try_acquire_profile(&profile, &request).unwrap();
    }
    // The soonest deployment passes in 2 s: a 1 s deadline cannot be met.
    let hurried = request.deadline(Duration::from_secs(1));
    match gov.acquire_profile_blocking(&profile, &hurried, None) {
        Err(Error::DeadlineExceeded { retry_after: Some(wait), .. }) => assert_eq!(wait, Duration::from_secs(2)),
        other => panic!("expected deadline_exceeded, got {other:?}"),
    }
    assert_eq!(gov.snapshot().never_fits, 1);
}

#[test]
fn a_budget_threshold_crossed_while_waiting_refuses_and_holds_nothing() {
    let (gov, clock) = governor(json!({
        "pricing": {"gpt-4o": {"input": 2.5, "output": 10.0}},
        "scopes": {
            "openai/gpt-4o": {"provider": true, "pricing": "gpt-4o", "limits": [{"dimension": "tokens", "amount": 150_000, "window": "1m"}]},
            "tenants/*": {"limits": [{"dimension": "cost", "budget": 1.0, "window": "1d"}]},
        },
        "profiles": {"gpt-4o": {"deployments": ["openai/gpt-4o"], "budget": {"refuse_at": 0.3}}},
    }));
    let profile = gov.profile("gpt-4o", &["tenants/acme"]).unwrap();
    // 100k input: 0.25 each.
    let request = Request::new(profile.primary()).input_tokens(100_000);
    gov.try_acquire_profile(&profile, &request).unwrap();
    let mut waiting = Box::pin(gov.acquire_profile(&profile, &request));
    assert!(poll(&mut waiting).is_pending(), "50k tokens left of 150k a minute");
    // Meanwhile a request straight on the route takes the spend to 0.35,
    // and 40k more tokens: 10k left, so the waiter needs 36 s of refill.
    let route = gov.route(&["tenants/acme", "openai/gpt-4o"]).unwrap();
    let _direct = gov.try_acquire(&Request::new(route).input_tokens(40_000)).unwrap();
    clock.advance(Duration::from_secs(35));
    gov.wake_waiters();
    assert!(poll(&mut waiting).is_pending());
    clock.advance(Duration::from_secs(1));
    gov.wake_waiters();
    match poll(&mut waiting) {
        Poll::Ready(Err(Error::RateLimited { dimension: Dimension::Cost, scope, .. })) => {
            assert_eq!(&*scope, "tenants/acme")
        }
        other => panic!("expected the threshold's refusal, got {other:?}"),
    }
    let tenant = gov.scope_snapshot(gov.scope_id("tenants/acme").unwrap()).unwrap();
    assert_eq!(tenant.limit(Dimension::Cost).unwrap().in_use, 350_000, "the waiter's permit was cancelled");
}

/// The thresholds are checked against the spend before the request, as
/// `try_acquire_profile` checks them: a waiter's own reservation, taken
/// once admitted, must not count against it.
#[test]
fn a_waiters_own_reservation_does_not_cross_a_threshold_for_it() {
    let (gov, clock) = governor(json!({
        "pricing": {"gpt-4o": {"input": 2.5, "output": 10.0}},
        "scopes": {
            "openai/gpt-4o": {"provider": true, "pricing": "gpt-4o", "limits": [{"dimension": "tokens", "amount": 150_000, "window": "1m"}]},
            "tenants/*": {"limits": [{"dimension": "cost", "budget": 1.0, "window": "1d"}]},
        },
        "profiles": {"gpt-4o": {"deployments": ["openai/gpt-4o"], "budget": {"refuse_at": 0.3}}},
    }));
    let profile = gov.profile("gpt-4o", &["tenants/acme"]).unwrap();
    // 100k input: 0.25 each, so the spend before the second is 0.25, below 0.3.
    let request = Request::new(profile.primary()).input_tokens(100_000);
    gov.try_acquire_profile(&profile, &request).unwrap();
    let mut waiting = Box::pin(gov.acquire_profile(&profile, &request));
    assert!(poll(&mut waiting).is_pending(), "50k tokens left of 150k a minute");
    clock.advance(Duration::from_secs(20));
    gov.wake_waiters();
    match poll(&mut waiting) {
        Poll::Ready(Ok(routed)) => assert_eq!(&*routed.deployment, "openai/gpt-4o"),
        other => panic!("admitted as try_acquire_profile would have admitted it, got {other:?}"),
    }
    let tenant = gov.scope_snapshot(gov.scope_id("tenants/acme").unwrap()).unwrap();
    assert_eq!(tenant.limit(Dimension::Cost).unwrap().in_use, 500_000);
}

/// Past `degrade_at` a request goes to the cheaper profile: one that
/// crossed it while waiting too, as it would had it just arrived, rather
/// than being refused until the spend leaves the budget's window.
#[test]
fn a_degrade_threshold_crossed_while_waiting_degrades() {
    let (gov, clock) = governor(json!({
        "pricing": {"gpt-4o": {"input": 2.5, "output": 10.0}, "mini": {"input": 0.15, "output": 0.6}},
        "scopes": {
            "openai/gpt-4o": {"provider": true, "pricing": "gpt-4o", "limits": [{"dimension": "tokens", "amount": 150_000, "window": "1m"}]},
            "openai/mini": {"provider": true, "pricing": "mini", "limits": [{"dimension": "tokens", "amount": 1_000_000, "window": "1m"}]},
            "tenants/*": {"limits": [{"dimension": "cost", "budget": 1.0, "window": "1d"}]},
        },
        "profiles": {
            "gpt-4o": {"deployments": ["openai/gpt-4o"], "budget": {"degrade_at": 0.3, "degrade_to": "mini"}},
            "mini": {"deployments": ["openai/mini"]},
        },
    }));
    let profile = gov.profile("gpt-4o", &["tenants/acme"]).unwrap();
    let request = Request::new(profile.primary()).input_tokens(100_000);
    gov.try_acquire_profile(&profile, &request).unwrap();
    let mut waiting = Box::pin(gov.acquire_profile(&profile, &request));
    assert!(poll(&mut waiting).is_pending(), "50k tokens left of 150k a minute");
    let route = gov.route(&["tenants/acme", "openai/gpt-4o"]).unwrap();
    let _direct = gov.try_acquire(&Request::new(route).input_tokens(40_000)).unwrap();
    clock.advance(Duration::from_secs(36));
    gov.wake_waiters();
    match poll(&mut waiting) {
        Poll::Ready(Ok(routed)) => {
            assert!(routed.degraded, "{routed:?}");
            assert_eq!((&*routed.profile, &*routed.deployment), ("mini", "openai/mini"));
        }
        other => panic!("the spend is past degrade_at: the cheaper profile serves it, got {other:?}"),
    }
    let tenant = gov.scope_snapshot(gov.scope_id("tenants/acme").unwrap()).unwrap();
    assert_eq!(tenant.limit(Dimension::Cost).unwrap().in_use, 365_000, "0.25 + 0.1 on gpt-4o, 0.015 on mini");
}

/// The deployment to wait on is the one predicted to pass first with the
/// line already waiting on each: behind 20 waiters on x (one a second), a
/// request that may wait 10 s waits on y, which frees in 2 s with nobody
/// waiting, instead of being refused for x's line.
#[test]
fn a_profile_request_waits_on_the_deployment_that_frees_first_counting_its_line() {
    let pace = |secs: u64| json!({"provider": true, "limits": [{"dimension": "requests", "amount": 1, "window": format!("{secs}s")}]});
    let (gov, clock) = governor(json!({
        "scopes": {"x/org": pace(1), "y/org": pace(2)},
        "profiles": {"main": {"deployments": ["x/org", "y/org"]}},
    }));
    let profile = gov.profile::<&str>("main", &[]).unwrap();
    let request = Request::new(profile.primary());
    for _ in 0..2 {
        gov.try_acquire_profile(&profile, &request).unwrap();
    }
    let x = gov.route(&["x/org"]).unwrap();
    let queued_on_x: Vec<llmgov::Acquire> = (0..20).map(|_| gov.acquire(&Request::new(x))).collect();
    assert!(queued_on_x.iter().all(llmgov::Acquire::is_waiting));
    let hurried = request.deadline(Duration::from_secs(10));
    let mut routed = Box::pin(gov.acquire_profile(&profile, &hurried));
    let first = poll(&mut routed);
    assert!(first.is_pending(), "y/org frees in 2 s with nobody waiting, yet: {first:?}");
    clock.advance(Duration::from_secs(2));
    gov.wake_waiters();
    match poll(&mut routed) {
        Poll::Ready(Ok(routed)) => assert_eq!(&*routed.deployment, "y/org"),
        other => panic!("{other:?}"),
    }
}
