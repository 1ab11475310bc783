//! What routing by profile costs beside a plain acquire, in one run, on the
//! manual clock: `try_acquire_profile` ranks a profile's deployments by
//! normalized headroom and reserves the roomiest; `try_acquire` reserves a
//! route already chosen. `cargo bench -p llmgov --bench routing`.

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use llmgov::{Config, Governor, ManualClock, Request, Usage};
use serde_json::json;

/// Three provider deployments of one model, under one tenant template;
/// limits so large nothing is refused.
fn governor() -> Governor {
    let limits = json!([
        {"dimension": "requests", "amount": 1u64 << 40, "window": "1m"},
        {"dimension": "tokens", "amount": 1u64 << 50, "window": "1m"},
    ]);
    let config = json!({
        "scopes": {
            "openai/org/key-1": {"provider": true, "limits": limits},
            "openai/org/key-2": {"provider": true, "limits": limits},
            "azure/eastus": {"provider": true, "limits": limits},
            "tenants/*": {"limits": [{"dimension": "concurrency", "amount": 1_000_000}]},
        },
        "profiles": {"gpt-4o": {"deployments": ["openai/org/key-1", "openai/org/key-2", "azure/eastus"]}},
    });
    Governor::with_clock(&Config::from_value(config).unwrap(), Arc::new(ManualClock::new(0))).unwrap()
}

fn routing(c: &mut Criterion) {
    let mut group = c.benchmark_group("routing");
    let gov = governor();
    let route = gov.route(&["tenants/acme", "openai/org/key-1"]).unwrap();
    let request = Request::new(route).input_tokens(1200).max_output_tokens(400);
    group.bench_function("try_acquire_settle_one_route", |b| {
        b.iter(|| {
            let mut permit = gov.try_acquire(&request).unwrap();
            gov.settle(&mut permit, Usage::new(1200, 250)).unwrap();
        })
    });
    let profile = gov.profile("gpt-4o", &["tenants/acme"]).unwrap();
    let request = Request::new(profile.primary()).input_tokens(1200).max_output_tokens(400);
    group.bench_function("try_acquire_profile_settle_3_deployments", |b| {
        b.iter(|| {
            let mut routed = gov.try_acquire_profile(&profile, &request).unwrap();
            gov.settle(&mut routed.permit, Usage::new(1200, 250)).unwrap();
        })
    });
    group.finish();
}

criterion_group!(benches, routing);
criterion_main!(benches);
