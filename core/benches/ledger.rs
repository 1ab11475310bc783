//! Acquire + settle on the manual clock, against the `governor` crate's
//! `check()` in the same run. Run: `cargo bench -p llmgov --bench ledger`.

use std::num::NonZeroU32;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use governor::clock::FakeRelativeClock;
use governor::{Quota, RateLimiter};
use llmgov::ledger::gcra::GcraParams;
use llmgov::{Config, Ledger, Request, Route, Usage};
use serde_json::json;

/// Dimensions in the order they are added: 1 = requests … 5 = all five.
const DIMENSIONS: [&str; 5] = ["requests", "input_tokens", "output_tokens", "tokens", "concurrency"];

/// Limits so large that nothing is ever refused: the bench measures the
/// cost of reserving, not of waiting.
fn limits(dimensions: usize) -> serde_json::Value {
    DIMENSIONS[..dimensions]
        .iter()
        .map(|d| match *d {
            "concurrency" => json!({"dimension": d, "amount": 1_000_000}),
            _ => json!({"dimension": d, "amount": 1u64 << 50, "window": "1s"}),
        })
        .collect()
}

/// A ledger with a chain of `depth` nested scopes, each with `dimensions`
/// limits, and the route of its deepest path.
fn nested(depth: usize, dimensions: usize) -> (Ledger, Route) {
    let paths: Vec<String> =
        (1..=depth).map(|d| (0..d).map(|i| format!("s{i}")).collect::<Vec<_>>().join("/")).collect();
    let scopes: serde_json::Map<_, _> =
        paths.iter().map(|p| (p.clone(), json!({"limits": limits(dimensions)}))).collect();
    let ledger = Ledger::new(&Config::from_value(json!({"scopes": scopes})).unwrap()).unwrap();
    let route = ledger.route(&[paths.last().unwrap()]).unwrap();
    assert_eq!(ledger.route_scopes(route).unwrap().len(), depth);
    (ledger, route)
}

fn acquire_settle(c: &mut Criterion) {
    let mut group = c.benchmark_group("acquire_settle");
    let shapes = [(1, 1), (1, 3), (1, 5), (3, 1), (3, 3), (3, 5), (6, 1), (6, 3), (6, 4), (6, 5)];
    for (depth, dimensions) in shapes {
        let (ledger, route) = nested(depth, dimensions);
        let request = Request::new(route).input_tokens(1200).max_output_tokens(400);
        let mut now = 0u64;
        group.bench_function(BenchmarkId::from_parameter(format!("{depth}x{dimensions}")), |b| {
            b.iter(|| {
                now += 1_000;
                let mut permit = ledger.try_acquire(&request, now).unwrap();
                ledger.settle(&mut permit, Usage::new(1200, 250), now).unwrap();
            })
        });
    }
    group.finish();
}

fn acquire_vs_governor(c: &mut Criterion) {
    let mut group = c.benchmark_group("acquire_1x1");
    let (ledger, route) = nested(1, 1);
    let request = Request::new(route);
    let mut now = 0u64;
    group.bench_function("llmgov_try_acquire", |b| {
        b.iter(|| {
            now += 1_000;
            ledger.try_acquire(&request, now).unwrap()
        })
    });
    // The bucket primitive alone: the part of an acquire that does what
    // governor's check does (no route, no permit, no expiry books).
    let params = GcraParams::new(1 << 50, 1_000_000_000, 1 << 50);
    let tat = AtomicU64::new(0);
    let mut now = 0u64;
    group.bench_function("llmgov_gcra_bucket_only", |b| {
        b.iter(|| {
            now += 1_000;
            params.try_reserve(&tat, 1, now).unwrap()
        })
    });
    let clock = FakeRelativeClock::default();
    let limiter = RateLimiter::direct_with_clock(Quota::per_second(NonZeroU32::MAX), clock.clone());
    group.bench_function("governor_check", |b| {
        b.iter(|| {
            clock.advance(Duration::from_nanos(1_000));
            limiter.check().unwrap()
        })
    });
    group.finish();
}

/// Two threads on one shared root, each on its own child, started together.
fn shared_root(c: &mut Criterion) {
    let mut group = c.benchmark_group("shared_root_2_threads");
    let config = json!({"scopes": {
        "root": {"limits": limits(4)},
        "root/*": {"limits": limits(4)},
    }});
    let ledger = Arc::new(Ledger::new(&Config::from_value(config).unwrap()).unwrap());
    // Virtual time runs on across batches, so buckets never fall behind.
    let mut start = 0u64;
    group.bench_function("acquire_settle_2x4", |b| {
        b.iter_custom(|iters| {
            let barrier = Arc::new(Barrier::new(2));
            let handles: Vec<_> = (0..2)
                .map(|t| {
                    let (ledger, barrier) = (ledger.clone(), barrier.clone());
                    std::thread::spawn(move || {
                        let route = ledger.route(&[format!("root/t{t}")]).unwrap();
                        let request = Request::new(route).input_tokens(1200).max_output_tokens(400);
                        barrier.wait();
                        let begin = Instant::now();
                        for i in 0..iters {
                            let now = start + (i + 1) * 1_000;
                            let mut permit = ledger.try_acquire(&request, now).unwrap();
                            ledger.settle(&mut permit, Usage::new(1200, 250), now).unwrap();
                        }
                        begin.elapsed()
                    })
                })
                .collect();
            start += (iters + 1) * 1_000;
            // Each thread's time per pair: the slower thread bounds the run.
            handles.into_iter().map(|h| h.join().unwrap()).max().unwrap()
        })
    });
    group.finish();
}

criterion_group!(benches, acquire_settle, acquire_vs_governor, shared_root);
criterion_main!(benches);
