//! Deficit round robin keeps no credit for a tenant that stopped waiting;
//! found in the scheduler's semantic audit. Manual time, no sleeps.

use llmgov::scheduler::{Outcome, Scheduler, WaiterId};
use llmgov::{Config, Ledger, Request};
use serde_json::json;

const SECOND: u64 = 1_000_000_000;

#[test]
fn a_tenant_whose_waiter_left_keeps_no_deficit_for_its_next_requests() {
    let config = Config::from_value(json!({"scopes": {
        "p": {"limits": [{"dimension": "tokens", "amount": 100_000, "window": "1m"}]},
        "tenants/*": {"limits": [{"dimension": "requests", "amount": 1_000_000, "window": "1m"}]},
    }}))
    .unwrap();
    let ledger = Ledger::new(&config).unwrap();
    let mut scheduler = Scheduler::new(&config).unwrap();
    let (a, b) = (ledger.route(&["tenants/a", "p"]).unwrap(), ledger.route(&["tenants/b", "p"]).unwrap());
    let _drained = ledger.try_acquire(&Request::new(ledger.route(&["p"]).unwrap()).input_tokens(100_000), 0).unwrap();
    let mut out: Vec<Outcome> = Vec::new();
    // A's 50k-token request is credited quanta until it could go, and
    // holds the line; then A gives up on it.
    let large = scheduler.submit(&ledger, Request::new(a).input_tokens(50_000), "", None, 0).unwrap();
    scheduler.poll(0, &mut |r| ledger.try_acquire(r, 0), &mut out);
    assert!(out.is_empty(), "{out:?}");
    assert!(scheduler.withdraw(large));
    // Both tenants now stream 500-token requests; 10k tokens have refilled.
    let now = 6 * SECOND;
    let mut of_b: Vec<WaiterId> = Vec::new();
    for _ in 0..20 {
        scheduler.submit(&ledger, Request::new(a).input_tokens(500), "", None, now).unwrap();
        of_b.push(scheduler.submit(&ledger, Request::new(b).input_tokens(500), "", None, now).unwrap());
    }
    scheduler.poll(now, &mut |r| ledger.try_acquire(r, now), &mut out);
    let admitted = |of: &dyn Fn(WaiterId) -> bool| {
        out.iter().filter(|o| matches!(o, Outcome::Admitted { .. }) && of(o.waiter())).count() * 500
    };
    let (to_a, to_b) = (admitted(&|w| !of_b.contains(&w)), admitted(&|w| of_b.contains(&w)));
    assert_eq!(to_a + to_b, 10_000);
    // Equal weights, one quantum (4096) each a round: B is not shut out by
    // credit A earned for a request it withdrew.
    assert!(to_b >= 4000, "A got {to_a} tokens, B {to_b}");
}
