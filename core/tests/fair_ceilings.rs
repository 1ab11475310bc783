//! HTB ceilings hold over time, whatever the size of the requests under
//! them; found in the scheduler's semantic audit. Manual time, no sleeps.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use llmgov::scheduler::{Outcome, Scheduler};
use llmgov::{Acquire, Config, Error, Governor, Ledger, ManualClock, Permit, Request};
use serde_json::json;

const SECOND: u64 = 1_000_000_000;

#[test]
fn a_ceiling_holds_over_time_for_requests_larger_than_its_window() {
    let config = Config::from_value(json!({
        "scopes": {"tenants/*": {"limits": [{"dimension": "tokens", "amount": 1_000_000, "window": "1m"}]}},
        "shares": {"tenants/a": {"ceiling": 1000, "window": "1m"}},
    }))
    .unwrap();
    let ledger = Ledger::new(&config).unwrap();
    let mut scheduler = Scheduler::new(&config).unwrap();
    let route = ledger.route(&["tenants/a"]).unwrap();
    let (mut admitted_tokens, mut waiting) = (0u64, false);
    let mut out: Vec<Outcome> = Vec::new();
    let minutes = 20;
    for second in 0..=minutes * 60 {
        let now = second * SECOND;
        if !waiting {
            // Five windows' worth at once: it passes when the meter is
            // empty, and must keep the tenant out for five windows.
            let request = Request::new(route).input_tokens(5000);
            scheduler.submit(&ledger, request, "", Some(u64::MAX), now).expect("queued");
            waiting = true;
        }
        scheduler.poll(now, &mut |r| ledger.try_acquire(r, now), &mut out);
        for outcome in out.drain(..) {
            match outcome {
                Outcome::Admitted { mut permit, .. } => {
                    admitted_tokens += 5000;
                    waiting = false;
                    ledger.cancel(&mut permit, now).unwrap();
                }
                Outcome::Refused { error, .. } => panic!("refused: {error:?}"),
            }
        }
    }
    // 1000 a minute, and one request's worth at the start.
    let bound = 1000 * minutes + 5000;
    assert!(admitted_tokens <= bound, "admitted {admitted_tokens} tokens in {minutes} min, ceiling allows {bound}");
}

fn governor(config: serde_json::Value) -> (Governor, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(0));
    (Governor::with_clock(&Config::from_value(config).unwrap(), clock.clone()).unwrap(), clock)
}

fn poll(future: &mut Acquire) -> Poll<llmgov::Result<Permit>> {
    Pin::new(future).poll(&mut Context::from_waker(Waker::noop()))
}

/// Tenant `a` may have 1000 tokens a minute; the scope itself has plenty.
fn ceiling_1000() -> serde_json::Value {
    json!({
        "scopes": {"tenants/*": {"limits": [{"dimension": "tokens", "amount": 1_000_000, "window": "1m"}]}},
        "shares": {"tenants/a": {"ceiling": 1000, "window": "1m"}},
    })
}

fn refused_at_once(result: Poll<llmgov::Result<Permit>>, at_least: Duration) {
    match result {
        Poll::Ready(Err(Error::DeadlineExceeded { waited, retry_after, .. })) => {
            assert_eq!(waited, Duration::ZERO);
            assert!(retry_after.unwrap() >= at_least, "retry_after {retry_after:?}");
        }
        other => panic!("expected a refusal at once, got {other:?}"),
    }
}

/// Tenant `a` sends 900 tokens (the ceiling is untouched: admitted at once,
/// the meter is then full until 54 s), then 900 more in `class` (they fit
/// at 48 s), then 900 in the default class: those fit at 102 s at the
/// earliest, past their minute, so they are refused at once.
fn third_request_refused(class: &str) {
    let (gov, _clock) = governor(ceiling_1000());
    let route = gov.route(&["tenants/a"]).unwrap();
    let request = Request::new(route).input_tokens(900).deadline(Duration::from_secs(60));
    let mut first = gov.acquire(&request);
    assert!(matches!(poll(&mut first), Poll::Ready(Ok(_))), "the ceiling is untouched");
    let mut second = gov.acquire(&request.class(gov.class(class)));
    assert!(second.is_waiting(), "{:?}", poll(&mut second));
    let mut third = gov.acquire(&request);
    refused_at_once(poll(&mut third), Duration::from_secs(100));
    assert_eq!(gov.queue_metrics().depth, 1);
}

#[test]
fn a_wait_for_a_ceiling_counts_what_the_tenant_has_waiting_before_it() {
    third_request_refused("");
}

#[test]
fn a_wait_for_a_ceiling_counts_what_the_tenant_has_waiting_in_a_higher_class() {
    third_request_refused("agent");
}
