//! Real threads hammering one shared root. The clock stands still, so
//! nothing refills: the ledger must admit exactly the limit, never more, and
//! every refusal must give back what it held.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;

use llmgov::{Config, Dimension, Error, Governor, ManualClock, Request, Usage};
use serde_json::json;

const THREADS: usize = 8;

fn governor(root_limits: serde_json::Value) -> Governor {
    let config = json!({
        "scopes": {
            "root": { "limits": root_limits },
            "root/*": { "limits": [{"dimension": "requests", "amount": 1_000_000, "window": "1d"}] },
        }
    });
    Governor::with_clock(&Config::from_value(config).unwrap(), Arc::new(ManualClock::new(0))).unwrap()
}

/// Every thread acquires on its own child of `root` until refused
/// `give_up_after` times in a row; returns how many were admitted in all.
fn hammer(gov: &Governor, tokens: u64, give_up_after: u32) -> u64 {
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (gov, barrier) = (gov.clone(), barrier.clone());
            thread::spawn(move || {
                let route = gov.route(&[format!("root/t{t}")]).unwrap();
                barrier.wait();
                let (mut admitted, mut refusals) = (0u64, 0);
                while refusals < give_up_after {
                    match gov.try_acquire(&Request::new(route).input_tokens(tokens)) {
                        Ok(mut permit) => {
                            admitted += 1;
                            refusals = 0;
                            gov.settle(&mut permit, Usage::new(tokens, 0)).unwrap();
                        }
                        Err(Error::RateLimited { .. }) => refusals += 1,
                        Err(e) => panic!("{e}"),
                    }
                }
                admitted
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).sum()
}

/// Admits what the racing threads' spurious refusals left, single-threaded.
fn drain(gov: &Governor, tokens: u64) -> u64 {
    let route = gov.route(&["root/drain"]).unwrap();
    let mut admitted = 0;
    while let Ok(mut permit) = gov.try_acquire(&Request::new(route).input_tokens(tokens)) {
        gov.settle(&mut permit, Usage::new(tokens, 0)).unwrap();
        admitted += 1;
    }
    admitted
}

#[test]
fn token_bucket_root_admits_exactly_its_limit() {
    let gov = governor(json!([{"dimension": "requests", "amount": 20_000, "window": "1d"}]));
    let raced = hammer(&gov, 0, 200);
    assert!(raced <= 20_000, "over-admitted: {raced}");
    assert_eq!(raced + drain(&gov, 0), 20_000);
}

#[test]
fn sliding_window_root_admits_exactly_its_limit() {
    let gov = governor(
        json!([{"dimension": "input_tokens", "amount": 30_000, "window": "1h", "algorithm": "sliding_window"}]),
    );
    let raced = hammer(&gov, 3, 200);
    assert!(raced * 3 <= 30_000, "over-admitted: {raced} requests of 3 tokens");
    assert_eq!(raced + drain(&gov, 3), 10_000);
    let root = gov.scope_snapshot(gov.scope_id("root").unwrap()).unwrap();
    assert_eq!(root.limit(Dimension::InputTokens).unwrap().in_use, 30_000);
}

#[test]
fn concurrency_root_never_exceeds_its_slots() {
    let gov = governor(json!([{"dimension": "concurrency", "amount": 3}]));
    let in_flight = Arc::new(AtomicU64::new(0));
    let peak = Arc::new(AtomicU64::new(0));
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (gov, in_flight, peak, barrier) = (gov.clone(), in_flight.clone(), peak.clone(), barrier.clone());
            thread::spawn(move || {
                let route = gov.route(&[format!("root/t{t}")]).unwrap();
                barrier.wait();
                let mut admitted = 0;
                while admitted < 2_000 {
                    if let Ok(mut permit) = gov.try_acquire(&Request::new(route)) {
                        let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                        peak.fetch_max(now, Ordering::SeqCst);
                        in_flight.fetch_sub(1, Ordering::SeqCst);
                        gov.settle(&mut permit, Usage::default()).unwrap();
                        admitted += 1;
                    }
                }
            })
        })
        .collect();
    handles.into_iter().for_each(|h| h.join().unwrap());
    assert!(peak.load(Ordering::SeqCst) <= 3, "peak in flight {}", peak.load(Ordering::SeqCst));
    let root = gov.scope_snapshot(gov.scope_id("root").unwrap()).unwrap();
    assert_eq!(root.limit(Dimension::Concurrency).unwrap().in_use, 0, "every slot came back");
    assert_eq!(gov.snapshot().admitted, THREADS as u64 * 2_000);
}

/// Permits acquired on one thread and settled on another leave the books
/// exact: while a pending permit holds anything, the roots report it as
/// reserved; once all are settled, nothing is reserved and what was settled
/// is used.
#[test]
fn reserved_balances_across_threads() {
    let gov = governor(json!([
        {"dimension": "tokens", "amount": 1_000_000_000u64, "window": "1d", "algorithm": "sliding_window"},
        {"dimension": "concurrency", "amount": 1_000_000}
    ]));
    const PER_THREAD: u64 = 2_000;
    let (sender, receiver) = std::sync::mpsc::channel();
    let receiver = std::sync::Mutex::new(receiver);
    let barrier = Barrier::new(THREADS);
    thread::scope(|s| {
        for t in 0..THREADS {
            let (gov, barrier, sender, receiver) = (&gov, &barrier, sender.clone(), &receiver);
            s.spawn(move || {
                let route = gov.route(&[format!("root/t{t}")]).unwrap();
                barrier.wait();
                for i in 0..PER_THREAD {
                    let permit = gov.try_acquire(&Request::new(route).input_tokens(10).max_output_tokens(5)).unwrap();
                    sender.send(permit).unwrap();
                    // Settle someone's permit, often another thread's.
                    if i % 2 == 1 {
                        for _ in 0..2 {
                            let mut permit = receiver.lock().unwrap().recv().unwrap();
                            gov.settle(&mut permit, Usage::new(10, 1)).unwrap();
                        }
                    }
                }
            });
        }
    });
    let admitted = THREADS as u64 * PER_THREAD;
    let tokens = |gov: &Governor| gov.snapshot().scopes.iter().find(|s| s.path == "root").unwrap().limits[0].clone();
    let settled = tokens(&gov);
    assert_eq!(settled.reserved, 0, "every permit is settled");
    assert_eq!(settled.used, admitted * 11);
    let root = gov.snapshot().scopes.into_iter().find(|s| s.path == "root").unwrap();
    assert_eq!(root.limit(Dimension::Concurrency).unwrap().reserved, 0);
    // Ten left pending on this thread show up at once.
    let route = gov.route(&["root/t0"]).unwrap();
    let held: Vec<_> = (0..10).map(|_| gov.try_acquire(&Request::new(route).input_tokens(7)).unwrap()).collect();
    assert_eq!(tokens(&gov).reserved, 70);
    assert_eq!(tokens(&gov).used, admitted * 11);
    drop(held);
}
