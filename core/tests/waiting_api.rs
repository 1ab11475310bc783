//! The waiting API on the manual clock: acquire (async, any executor) and
//! acquire_blocking wait, wake on time, settle and cancel, honour deadlines
//! and queue bounds, and leave no reservation behind when a waiter leaves.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use llmgov::{Acquire, Config, Dimension, Error, Governor, ManualClock, Permit, Request, Usage};

fn governor(toml: &str) -> (Governor, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(0));
    (Governor::with_clock(&Config::from_toml(toml).unwrap(), clock.clone()).unwrap(), clock)
}

/// 600 tokens a minute (10 a second), one scope.
const TOKENS: &str = r#"
    [scopes."p"]
    limits = [{ dimension = "tokens", amount = 600, window = "1m" }]
"#;

fn poll(future: &mut Acquire) -> Poll<llmgov::Result<Permit>> {
    Pin::new(future).poll(&mut Context::from_waker(Waker::noop()))
}

fn in_use(gov: &Governor) -> u64 {
    gov.snapshot().scopes[0].limits[0].in_use
}

#[test]
fn a_request_that_fits_is_admitted_at_once() {
    let (gov, _) = governor(TOKENS);
    let route = gov.route(&["p"]).unwrap();
    let mut future = gov.acquire(&Request::new(route).input_tokens(100));
    assert!(matches!(poll(&mut future), Poll::Ready(Ok(_))));
    assert!(gov.acquire_blocking(&Request::new(route).input_tokens(100), None).is_ok());
}

#[test]
fn a_waiter_is_admitted_when_the_clock_reaches_the_refill() {
    let (gov, clock) = governor(TOKENS);
    let route = gov.route(&["p"]).unwrap();
    let _first = gov.try_acquire(&Request::new(route).input_tokens(600)).unwrap();
    let mut waiting = gov.acquire(&Request::new(route).input_tokens(100));
    assert!(poll(&mut waiting).is_pending());
    // 100 tokens at 10 a second: ten seconds.
    assert_eq!(gov.wake_waiters(), Some(Duration::from_secs(10)));
    clock.advance(Duration::from_millis(9_999));
    gov.wake_waiters();
    assert!(poll(&mut waiting).is_pending());
    clock.advance(Duration::from_millis(1));
    assert_eq!(gov.wake_waiters(), None);
    assert!(matches!(poll(&mut waiting), Poll::Ready(Ok(_))));
    let metrics = gov.queue_metrics();
    assert_eq!((metrics.depth, metrics.classes[0].admitted), (0, 1));
    assert_eq!(metrics.classes[0].longest_admitted_wait_ms, 10_000);
}

/// The snapshot counts requests refused, not a waiter's tries: a request
/// that waited and passed was never refused.
#[test]
fn a_waiters_tries_are_not_counted_as_refusals() {
    let (gov, clock) = governor(TOKENS);
    let route = gov.route(&["p"]).unwrap();
    let _first = gov.try_acquire(&Request::new(route).input_tokens(600)).unwrap();
    assert!(gov.try_acquire(&Request::new(route).input_tokens(100)).is_err(), "refused: counted");
    let mut waiting = gov.acquire(&Request::new(route).input_tokens(100));
    for _ in 0..9 {
        clock.advance(Duration::from_secs(1));
        gov.wake_waiters();
        assert!(poll(&mut waiting).is_pending());
    }
    clock.advance(Duration::from_secs(1));
    gov.wake_waiters();
    assert!(matches!(poll(&mut waiting), Poll::Ready(Ok(_))));
    let never = gov.acquire_blocking(&Request::new(route).input_tokens(601), None);
    assert!(matches!(never, Err(Error::NeverFits { .. })), "{never:?}");
    let snapshot = gov.snapshot();
    assert_eq!((snapshot.admitted, snapshot.rate_limited, snapshot.never_fits), (2, 1, 1));
    let local: u64 =
        gov.metrics().refusals.iter().filter(|r| r.gateway_decision == "rejected_locally").map(|r| r.count).sum();
    assert_eq!(local, 2, "the tally agrees");
}

#[test]
fn a_release_wakes_a_waiter_on_concurrency() {
    let (gov, _) = governor(
        r#"
        [scopes."p"]
        limits = [{ dimension = "concurrency", amount = 1 }]
    "#,
    );
    let route = gov.route(&["p"]).unwrap();
    let mut first = gov.acquire_blocking(&Request::new(route), None).unwrap();
    let mut second = gov.acquire(&Request::new(route));
    assert!(poll(&mut second).is_pending());
    gov.settle(&mut first, Usage::new(0, 0)).unwrap();
    let Poll::Ready(Ok(mut second)) = poll(&mut second) else { panic!("the settle should admit the waiter") };
    let mut third = gov.acquire(&Request::new(route));
    assert!(poll(&mut third).is_pending());
    gov.cancel(&mut second).unwrap();
    assert!(matches!(poll(&mut third), Poll::Ready(Ok(_))));
}

#[test]
fn a_blocked_thread_is_woken_by_a_settle() {
    let (gov, _) = governor(
        r#"
        [scopes."p"]
        limits = [{ dimension = "concurrency", amount = 1 }]
    "#,
    );
    let route = gov.route(&["p"]).unwrap();
    let mut first = gov.try_acquire(&Request::new(route)).unwrap();
    let waiter = {
        let gov = gov.clone();
        std::thread::spawn(move || gov.acquire_blocking(&Request::new(route), None))
    };
    while gov.queue_metrics().depth == 0 {
        assert!(!waiter.is_finished(), "the waiter returned instead of queueing");
        std::thread::yield_now();
    }
    gov.settle(&mut first, Usage::new(0, 0)).unwrap();
    assert!(waiter.join().unwrap().is_ok());
}

#[test]
fn a_dropped_waiter_leaves_the_queue_and_a_granted_one_gives_its_permit_back() {
    let (gov, clock) = governor(TOKENS);
    let route = gov.route(&["p"]).unwrap();
    let _all = gov.try_acquire(&Request::new(route).input_tokens(600)).unwrap();
    let mut left = gov.acquire(&Request::new(route).input_tokens(100));
    assert!(poll(&mut left).is_pending());
    drop(left);
    assert_eq!(gov.queue_metrics().classes[0].withdrawn, 1);
    assert_eq!(gov.queue_metrics().depth, 0);

    // Granted by the poll, then dropped before anyone took the permit.
    let mut granted = gov.acquire(&Request::new(route).input_tokens(100));
    assert!(poll(&mut granted).is_pending());
    clock.advance(Duration::from_secs(10));
    gov.wake_waiters();
    assert_eq!(in_use(&gov), 600);
    drop(granted);
    assert_eq!(in_use(&gov), 500, "the permit granted to a dropped waiter is cancelled");
}

#[test]
fn a_predicted_wait_past_the_deadline_is_refused_at_once() {
    let (gov, _) = governor(TOKENS);
    let route = gov.route(&["p"]).unwrap();
    let _all = gov.try_acquire(&Request::new(route).input_tokens(600)).unwrap();
    let request = Request::new(route).input_tokens(100).deadline(Duration::from_secs(5));
    match gov.acquire_blocking(&request, None) {
        Err(error @ Error::DeadlineExceeded { .. }) => {
            assert_eq!(error.code(), "deadline_exceeded");
            let Error::DeadlineExceeded { waited, retry_after, .. } = error else { unreachable!() };
            assert_eq!(waited, Duration::ZERO);
            assert_eq!(retry_after, Some(Duration::from_secs(10)));
        }
        other => panic!("expected deadline_exceeded, got {other:?}"),
    }
    assert_eq!(gov.queue_metrics().classes[0].refused_deadline, 1);
}

#[test]
fn a_waiter_is_refused_when_its_timeout_passes_and_never_admitted_after_it() {
    let (gov, clock) = governor(TOKENS);
    let route = gov.route(&["p"]).unwrap();
    let mut all = gov.try_acquire(&Request::new(route).input_tokens(600)).unwrap();
    let waiter = {
        let gov = gov.clone();
        std::thread::spawn(move || {
            gov.acquire_blocking(&Request::new(route).input_tokens(100), Some(Duration::from_secs(30)))
        })
    };
    while gov.queue_metrics().depth == 0 {
        assert!(!waiter.is_finished(), "the waiter returned instead of queueing");
        std::thread::yield_now();
    }
    // Debt: settle far above the estimate, so the bucket is empty for long.
    gov.settle(&mut all, Usage::new(6000, 0)).unwrap();
    clock.advance(Duration::from_secs(31));
    gov.wake_waiters();
    match waiter.join().unwrap() {
        Err(Error::DeadlineExceeded { waited, .. }) => assert_eq!(waited, Duration::from_secs(31)),
        other => panic!("expected deadline_exceeded, got {other:?}"),
    }
    assert_eq!(gov.queue_metrics().classes[0].expired, 1);
}

#[test]
fn a_full_class_queue_refuses_at_once() {
    let (gov, _) = governor(&format!("{TOKENS}\n[classes.small]\nqueue_bound = 2\n"));
    let route = gov.route(&["p"]).unwrap();
    let class = gov.class("small");
    let _all = gov.try_acquire(&Request::new(route).input_tokens(600)).unwrap();
    let request = Request::new(route).input_tokens(10).class(class);
    let waiting: Vec<Acquire> = (0..2).map(|_| gov.acquire(&request)).collect();
    match gov.acquire_blocking(&request, None) {
        Err(error @ Error::QueueFull { .. }) => {
            assert_eq!(error.code(), "queue_full");
            let Error::QueueFull { class, bound, retry_after, .. } = error else { unreachable!() };
            assert_eq!((&*class, bound), ("small", 2));
            assert!(retry_after.is_some());
        }
        other => panic!("expected queue_full, got {other:?}"),
    }
    let metrics = gov.queue_metrics();
    let small = metrics.class("small").unwrap();
    assert_eq!((small.depth, small.refused_queue_full, small.queue_bound), (2, 1, 2));
    drop(waiting);
}

#[test]
fn a_request_that_never_fits_is_refused_at_once() {
    let (gov, _) = governor(TOKENS);
    let route = gov.route(&["p"]).unwrap();
    let refused = gov.acquire_blocking(&Request::new(route).input_tokens(601), None);
    assert!(matches!(refused, Err(Error::NeverFits { dimension: Dimension::Tokens, cost: 601, burst: 600, .. })));
}

#[test]
fn higher_priority_requests_of_a_tenant_go_first() {
    let (gov, clock) = governor(TOKENS);
    let route = gov.route(&["p"]).unwrap();
    let _all = gov.try_acquire(&Request::new(route).input_tokens(600)).unwrap();
    let mut low = gov.acquire(&Request::new(route).input_tokens(100));
    let mut high = gov.acquire(&Request::new(route).input_tokens(100).priority(5));
    clock.advance(Duration::from_secs(10));
    gov.wake_waiters();
    assert!(poll(&mut low).is_pending());
    assert!(poll(&mut high).is_ready());
}

#[test]
fn bad_class_and_share_settings_name_the_field() {
    for (toml, field) in [
        ("[classes.x]\nqueue_bound = 0", "classes.x.queue_bound"),
        ("[classes.x]\nmax_wait = \"soon\"", "classes.x.max_wait"),
        ("[shares.\"t/*\"]\nweight = 0", "shares.t/*.weight"),
        ("[shares.t]\nguarantee = 10\nceiling = 5", "shares.t.ceiling"),
    ] {
        let text = format!("{TOKENS}\n{toml}");
        match Governor::from_toml(&text) {
            Err(Error::InvalidConfig { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{toml}: expected invalid_config, got {other:?}"),
        }
        assert!(Config::from_toml(&text).unwrap().validate().is_err());
    }
}

#[test]
fn the_future_can_move_to_any_task_and_outlive_the_borrow() {
    fn spawnable<T: Send + Sync + 'static>(_: &T) {}
    let (gov, _) = governor(TOKENS);
    let route = gov.route(&["p"]).unwrap();
    let future = gov.acquire(&Request::new(route).input_tokens(1));
    drop(gov);
    spawnable(&future);
    assert!(!future.is_waiting());
}

/// On the real clock, under tokio: the governor's timer thread wakes the
/// waiter at the refill (no assertion on time, only that it comes).
#[tokio::test]
async fn the_timer_thread_wakes_an_async_waiter_on_the_real_clock() {
    let gov = Governor::from_toml(
        r#"
        [scopes."p"]
        limits = [{ dimension = "requests", amount = 1, window = "20ms" }]
    "#,
    )
    .unwrap();
    let route = gov.route(&["p"]).unwrap();
    for _ in 0..3 {
        gov.acquire(&Request::new(route)).await.unwrap();
    }
}
