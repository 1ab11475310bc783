//! The round trip the C and Go benches measure, in Rust on the same
//! governor (a `Governor` on a manual clock that stands still, the shapes
//! of `bench/shapes.h`): what the bindings add is their figure minus this.
//! Run: `make bench-c` (or `cargo bench -p llmgov-c --bench roundtrip`).

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use llmgov_core::{Config, Governor, ManualClock, Request, Usage};
use serde_json::json;

fn shape(depth: usize, dimensions: usize) -> (Config, String) {
    let limits: Vec<_> = ["requests", "input_tokens", "output_tokens", "tokens"][..dimensions]
        .iter()
        .map(|d| json!({"dimension": d, "amount": 1u64 << 50, "window": "1s"}))
        .collect();
    let paths: Vec<String> =
        (1..=depth).map(|d| (0..d).map(|i| format!("s{i}")).collect::<Vec<_>>().join("/")).collect();
    let scopes: serde_json::Map<_, _> = paths.iter().map(|p| (p.clone(), json!({ "limits": limits }))).collect();
    (Config::from_value(json!({ "scopes": scopes })).expect("valid shape"), paths.last().cloned().unwrap_or_default())
}

fn try_acquire_settle(c: &mut Criterion) {
    let mut group = c.benchmark_group("rust/try_acquire_settle");
    for (name, depth, dimensions) in [("1x1", 1, 1), ("6x4", 6, 4)] {
        let (config, path) = shape(depth, dimensions);
        let gov = Governor::with_clock(&config, Arc::new(ManualClock::new(0))).expect("governor");
        let request = Request::new(gov.route(&[path]).expect("route")).input_tokens(1200).max_output_tokens(400);
        group.bench_function(name, |b| {
            b.iter(|| {
                let mut permit = gov.try_acquire(&request).expect("admitted");
                gov.settle(&mut permit, Usage::new(1200, 250)).expect("settled");
            })
        });
    }
    group.finish();
}

criterion_group!(benches, try_acquire_settle);
criterion_main!(benches);
