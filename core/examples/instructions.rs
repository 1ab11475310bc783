//! A loop of ledger calls to count instructions under callgrind, which
//! counts the same on a busy machine as on an idle one (criterion's
//! nanoseconds do not). BENCHMARKS.md quotes its figures.
//!
//! ```text
//! cargo build --release -p llmgov --example instructions
//! valgrind --tool=callgrind target/release/examples/instructions acquire 1 1 100000
//! ```
//!
//! Arguments: what to call (`acquire`: `try_acquire` alone; `round`:
//! `try_acquire` + `settle`; `governor`: the `governor` crate's `check()`
//! with its fake clock's advance), then dimensions (1 = requests … 5 = all
//! five, as in `benches/ledger.rs`), nested scopes and calls. Instructions
//! per call: the total of a run, less that of a run of 0 calls, over the calls.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::FakeRelativeClock;
use governor::{Quota, RateLimiter};
use llmgov::{Config, Ledger, Request, Usage};
use serde_json::json;

/// Dimensions in the order they are added, as in `benches/ledger.rs`.
const DIMENSIONS: [&str; 5] = ["requests", "input_tokens", "output_tokens", "tokens", "concurrency"];

fn argument(args: &[String], i: usize, name: &str, default: u64) -> u64 {
    match args.get(i) {
        None => default,
        Some(value) => value.parse().unwrap_or_else(|_| panic!("{name} must be a whole number, not {value:?}")),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let what = args.first().map_or("acquire", String::as_str);
    let dimensions = argument(&args, 1, "dimensions", 1).clamp(1, 5) as usize;
    let depth = argument(&args, 2, "scopes", 1).max(1);
    let calls = argument(&args, 3, "calls", 100_000);
    let limits: Vec<_> = DIMENSIONS[..dimensions]
        .iter()
        .map(|d| match *d {
            "concurrency" => json!({"dimension": d, "amount": 1_000_000}),
            _ => json!({"dimension": d, "amount": 1u64 << 50, "window": "1s"}),
        })
        .collect();
    let paths: Vec<String> =
        (1..=depth).map(|d| (0..d).map(|i| format!("s{i}")).collect::<Vec<_>>().join("/")).collect();
    let scopes: serde_json::Map<_, _> = paths.iter().map(|p| (p.clone(), json!({"limits": limits}))).collect();
    let ledger = Ledger::new(&Config::from_value(json!({"scopes": scopes})).unwrap()).unwrap();
    let route = ledger.route(&[paths.last().unwrap()]).unwrap();
    match what {
        "acquire" => {
            let request = Request::new(route);
            for i in 1..=calls {
                black_box(ledger.try_acquire(black_box(&request), i * 1_000).unwrap());
            }
        }
        "round" => {
            let request = Request::new(route).input_tokens(1200).max_output_tokens(400);
            for i in 1..=calls {
                let mut permit = ledger.try_acquire(black_box(&request), i * 1_000).unwrap();
                ledger.settle(&mut permit, Usage::new(1200, 250), i * 1_000).unwrap();
            }
        }
        "governor" => {
            let clock = FakeRelativeClock::default();
            let limiter = RateLimiter::direct_with_clock(Quota::per_second(NonZeroU32::MAX), clock.clone());
            for _ in 0..calls {
                clock.advance(Duration::from_nanos(1_000));
                black_box(limiter.check()).unwrap();
            }
        }
        other => panic!("what to call: acquire, round or governor, not {other:?}"),
    }
}
