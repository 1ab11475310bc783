//! Two rules of the queue at a tenant's head, on the manual clock: a head
//! leaving at its deadline lets the waiter behind it go at once, and a
//! request's predicted wait counts only the waiters its priority is behind.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use llmgov::{Acquire, Config, Governor, ManualClock, Permit, Request};
use serde_json::json;

fn governor(config: serde_json::Value) -> (Governor, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(0));
    (Governor::with_clock(&Config::from_value(config).unwrap(), clock.clone()).unwrap(), clock)
}

fn poll(future: &mut Acquire) -> Poll<llmgov::Result<Permit>> {
    Pin::new(future).poll(&mut Context::from_waker(Waker::noop()))
}

/// A head that was skipped in a poll (held back by a higher class's head)
/// and whose deadline is that poll's time leaves the queue at the end of
/// the poll. The waiter behind it, on a free scope, can go now: the poll
/// must either admit it or say to poll again at once, as a withdrawn head
/// does. Otherwise it waits for a release or the next deadline.
#[test]
fn a_head_expiring_at_the_end_of_a_poll_lets_the_next_one_go() {
    let (gov, clock) = governor(json!({
        "classes": {"interactive": {"max_wait": "1h"}},
        "shares": {"t": {"weight": 1}},
        "scopes": {
            "t": {"limits": [{"dimension": "requests", "amount": 1000, "window": "1m"}]},
            "s": {"limits": [{"dimension": "concurrency", "amount": 1}]},
            "u": {"limits": [{"dimension": "requests", "amount": 1000, "window": "1m"}]},
        },
    }));
    let (on_s, tenant_s, tenant_u) =
        (gov.route(&["s"]).unwrap(), gov.route(&["t", "s"]).unwrap(), gov.route(&["t", "u"]).unwrap());
    let mut held = gov.try_acquire(&Request::new(on_s)).unwrap();
    // A higher class's head waits for the concurrency slot on `s`: it holds the line there.
    let mut high = gov.acquire(&Request::new(on_s).class(gov.class("interactive")));
    assert!(high.is_waiting());
    // Tenant t: its head waits on `s` for 10 s, the next one is on `u`, which is free.
    let mut first = gov.acquire(&Request::new(tenant_s).deadline(Duration::from_secs(10)));
    let mut second = gov.acquire(&Request::new(tenant_u).deadline(Duration::from_secs(300)));
    assert!(first.is_waiting() && second.is_waiting());
    clock.advance(Duration::from_secs(10));
    let next = gov.wake_waiters();
    assert!(matches!(poll(&mut first), Poll::Ready(Err(llmgov::Error::DeadlineExceeded { .. }))));
    // `second` can pass now: admitted in this poll, or polled again at once.
    if poll(&mut second).is_pending() {
        assert_eq!(next, Some(Duration::ZERO), "the waiter behind an expired head is left for a later deadline");
        gov.wake_waiters();
        assert!(matches!(poll(&mut second), Poll::Ready(Ok(_))));
    }
    assert!(poll(&mut high).is_pending());
    gov.cancel(&mut held).unwrap();
}

/// Within a tenant, a request of higher priority goes before the tenant's
/// waiters of lower priority (module docs, rule 4). Its predicted wait must
/// not count them as ahead of it: a 100-token request at priority 10 that
/// is next in line waits 6 s at 1000 tokens a minute, and is not refused at
/// once for the 5000 tokens of priority 0 queued behind it.
#[test]
fn a_higher_priority_request_is_not_refused_for_the_lower_ones_of_its_tenant() {
    let (gov, clock) = governor(json!({
        "scopes": {"p": {"limits": [{"dimension": "tokens", "amount": 1000, "window": "1m"}]}},
    }));
    let route = gov.route(&["p"]).unwrap();
    let _all = gov.try_acquire(&Request::new(route).input_tokens(1000)).unwrap();
    let mut low: Vec<Acquire> = (0..5)
        .map(|_| gov.acquire(&Request::new(route).input_tokens(1000).deadline(Duration::from_secs(600))))
        .collect();
    assert!(low.iter().all(Acquire::is_waiting));
    let mut urgent = gov.acquire(&Request::new(route).input_tokens(100).priority(10).deadline(Duration::from_secs(10)));
    assert!(urgent.is_waiting(), "refused at once: {:?}", poll(&mut urgent));
    clock.advance(Duration::from_secs(6));
    gov.wake_waiters();
    assert!(matches!(poll(&mut urgent), Poll::Ready(Ok(_))));
    assert!(low.iter_mut().all(|a| poll(a).is_pending()));
}

/// Two classes of equal priority (named only in code, both at the
/// default's 25) share a scope both are backlogged on: they take turns,
/// where the first one named used to take every admission.
#[test]
fn classes_of_equal_priority_take_turns() {
    let (gov, clock) = governor(json!({
        "scopes": {"p": {"limits": [{"dimension": "requests", "amount": 1, "window": "1s"}]}},
    }));
    let route = gov.route(&["p"]).unwrap();
    let _first = gov.try_acquire(&Request::new(route)).unwrap();
    let waiting = |class: &str| -> Vec<Acquire> {
        let request = Request::new(route).class(gov.class(class)).deadline(Duration::from_secs(3600));
        (0..10).map(|_| gov.acquire(&request)).collect()
    };
    let (mut chat, mut summarise) = (waiting("chat"), waiting("summarise"));
    let admitted =
        |futures: &mut [Acquire]| futures.iter_mut().filter_map(|f| poll(f).is_ready().then_some(())).count();
    for _ in 0..10 {
        clock.advance(Duration::from_secs(1));
        gov.wake_waiters();
    }
    let (chat_served, summarise_served) = (admitted(&mut chat), admitted(&mut summarise));
    assert_eq!(chat_served + summarise_served, 10, "one a second");
    assert!(chat_served.abs_diff(summarise_served) <= 2, "chat {chat_served}, summarise {summarise_served}");
}
