//! HTB ceilings hold over time, whatever the size of the requests under
//! them; found in the scheduler's semantic audit. Manual time, no sleeps.

use llmgov::scheduler::{Outcome, Scheduler};
use llmgov::{Config, Ledger, Request};
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
