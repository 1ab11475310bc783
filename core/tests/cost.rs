//! Cost budgets: pricing tables, the `cost` dimension reserved from the
//! estimate and settled with usage, budget thresholds that degrade to a
//! cheaper profile or refuse, and no overspend under concurrent requests.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use llmgov::{classify_response, Config, Dimension, Error, Governor, ManualClock, ProviderHint, Request, Usage};
use serde_json::{json, Value};

/// Prices per 1M tokens: gpt-4o 2.5 in, 10 out; mini 0.15 in, 0.6 out.
fn pricing() -> Value {
    json!({
        "gpt-4o": {"input": 2.5, "cached_input": 1.25, "output": 10.0},
        "mini": {"input": 0.15, "output": 0.6},
    })
}

fn governor(config: Value) -> Governor {
    Governor::with_clock(&Config::from_value(config).unwrap(), Arc::new(ManualClock::new(0))).unwrap()
}

fn cost_limit(gov: &Governor, path: &str) -> (i64, u64) {
    let snapshot = gov.scope_snapshot(gov.scope_id(path).unwrap()).unwrap();
    let limit = snapshot.limit(Dimension::Cost).expect("a cost limit");
    (limit.available, limit.in_use)
}

/// A tenant with a budget of `budget` a day, and two profiles: gpt-4o with
/// thresholds, degrading to mini.
fn routed(budget: f64, thresholds: Value) -> Governor {
    governor(json!({
        "pricing": pricing(),
        "scopes": {
            "openai/gpt-4o": {"provider": true, "pricing": "gpt-4o", "limits": [{"dimension": "requests", "amount": 10000, "window": "1m"}]},
            "openai/mini": {"provider": true, "pricing": "mini", "limits": [{"dimension": "requests", "amount": 10000, "window": "1m"}]},
            "tenants/*": {"limits": [{"dimension": "cost", "budget": budget, "window": "1d", "slots": 24}]},
        },
        "profiles": {
            "gpt-4o": {"deployments": ["openai/gpt-4o"], "budget": thresholds, "fallback_allowed": {"eval": false}},
            "mini": {"deployments": ["openai/mini"]},
        },
    }))
}

#[test]
fn a_budget_is_reserved_from_the_estimate_and_settled_with_usage() {
    let gov = routed(1.0, json!({}));
    let route = gov.route(&["tenants/acme", "openai/gpt-4o"]).unwrap();
    // 100k input + 10k max output: 0.25 + 0.10 = 0.35, in millionths.
    let mut permit = gov.try_acquire(&Request::new(route).input_tokens(100_000).max_output_tokens(10_000)).unwrap();
    assert_eq!(cost_limit(&gov, "tenants/acme"), (650_000, 350_000));
    // It used 2k output, half the prompt from cache: 0.125 + 0.0625 + 0.02.
    gov.settle(&mut permit, Usage::new(100_000, 2_000).with_cached_input(50_000)).unwrap();
    assert_eq!(cost_limit(&gov, "tenants/acme"), (1_000_000 - 207_500, 207_500));
}

#[test]
fn streamed_output_past_the_reservation_is_charged_to_the_budget() {
    let gov = routed(1.0, json!({}));
    let route = gov.route(&["tenants/acme", "openai/gpt-4o"]).unwrap();
    let mut permit = gov.try_acquire(&Request::new(route).input_tokens(0).max_output_tokens(1_000)).unwrap();
    assert_eq!(cost_limit(&gov, "tenants/acme").1, 10_000);
    gov.add_output(&mut permit, 3_000).unwrap();
    assert_eq!(cost_limit(&gov, "tenants/acme").1, 30_000, "3k output at 10 per 1M");
}

#[test]
fn an_exhausted_budget_refuses_on_the_cost_dimension() {
    let gov = routed(0.01, json!({}));
    let route = gov.route(&["tenants/acme", "openai/gpt-4o"]).unwrap();
    let request = Request::new(route).input_tokens(2_000).max_output_tokens(0);
    for _ in 0..2 {
        gov.try_acquire(&request).unwrap(); // 0.005 each
    }
    match gov.try_acquire(&request) {
        Err(Error::RateLimited { scope, dimension: Dimension::Cost, retry_after: Some(wait), .. }) => {
            assert_eq!(&*scope, "tenants/acme");
            assert_eq!(wait, Duration::from_secs(25 * 3600), "a day of one-hour slots, plus the slot it is in");
        }
        other => panic!("expected a cost refusal, got {other:?}"),
    }
    // Other tenants have budgets of their own.
    let other = gov.route(&["tenants/beta", "openai/gpt-4o"]).unwrap();
    gov.try_acquire(&Request { route: other, ..request }).unwrap();
}

#[test]
fn a_route_needs_exactly_one_price_for_its_budget() {
    let gov = routed(1.0, json!({}));
    let err = gov.route(&["tenants/acme"]).unwrap_err();
    assert!(err.to_string().contains("tenants/acme") && err.to_string().contains("pricing"), "{err}");
    let err = gov.route(&["tenants/acme", "openai/gpt-4o", "openai/mini"]).unwrap_err();
    assert!(err.to_string().contains("priced differently"), "{err}");
    // Without a budget, an unpriced route is fine.
    gov.route(&["openai/gpt-4o"]).unwrap();
}

/// A scope with a price and no limit only prices its routes; with
/// neither, it is a config error.
#[test]
fn a_scope_may_only_price_its_routes() {
    let gov = governor(json!({
        "pricing": pricing(),
        "scopes": {
            "models/gpt-4o": {"pricing": "gpt-4o", "limits": []},
            "tenants/*": {"limits": [{"dimension": "cost", "budget": 1.0, "window": "1d", "algorithm": "token_bucket"}]},
        },
    }));
    let route = gov.route(&["tenants/acme", "models/gpt-4o"]).unwrap();
    gov.try_acquire(&Request::new(route).input_tokens(100_000)).unwrap();
    assert_eq!(cost_limit(&gov, "tenants/acme"), (750_000, 250_000), "priced as gpt-4o");
    // 1000 in, 1000 out at gpt-4o's prices; nothing on an unpriced route.
    assert_eq!(gov.ledger().price_of(route, &Usage::new(1000, 1000)).unwrap(), 12_500);
    let plain =
        governor(json!({"scopes": {"a": {"limits": [{"dimension": "requests", "amount": 9, "window": "1m"}]}}}));
    let unpriced = plain.route(&["a"]).unwrap();
    assert_eq!(plain.ledger().price_of(unpriced, &Usage::new(1000, 1000)).unwrap(), 0);
    let limitless = json!({"scopes": {"models/gpt-4o": {"limits": []}}});
    let err = Config::from_value(limitless).and_then(|c| Governor::new(&c)).unwrap_err();
    assert!(err.to_string().contains("scopes.models/gpt-4o.limits"), "{err}");
}

#[test]
fn provider_feedback_never_moves_a_budget() {
    let gov = governor(json!({
        "pricing": pricing(),
        "scopes": {"openai/gpt-4o": {"provider": true, "pricing": "gpt-4o", "limits": [
            {"dimension": "requests", "amount": 100, "window": "1m"},
            {"dimension": "cost", "budget": 1.0, "window": "1d"},
        ]}},
    }));
    let route = gov.route(&["openai/gpt-4o"]).unwrap();
    let before = cost_limit(&gov, "openai/gpt-4o");
    // A 429 that names no dimension cools every limit of the scope but the budget.
    let feedback = classify_response(429, &[("retry-after", "30")], b"", ProviderHint::Auto, 0);
    gov.observe(route, &feedback).unwrap();
    assert_eq!(cost_limit(&gov, "openai/gpt-4o"), before);
    let snapshot = gov.scope_snapshot(gov.scope_id("openai/gpt-4o").unwrap()).unwrap();
    assert!(snapshot.limit(Dimension::Requests).unwrap().available <= 0, "the request limit did cool down");
}

#[test]
fn thresholds_degrade_to_the_cheaper_profile_then_refuse() {
    let gov = routed(1.0, json!({"degrade_at": 0.6, "degrade_to": "mini", "refuse_at": 0.85}));
    let profile = gov.profile("gpt-4o", &["tenants/acme"]).unwrap();
    // 0.25 a request on gpt-4o (100k input).
    let big = Request::new(profile.primary()).input_tokens(100_000);
    for _ in 0..3 {
        let routed = gov.try_acquire_profile(&profile, &big).unwrap();
        assert_eq!(&*routed.profile, "gpt-4o");
        assert!(!routed.degraded);
    }
    // 75% spent: past 0.6, so the cheaper profile serves (0.015 each).
    let cheap = gov.try_acquire_profile(&profile, &big).unwrap();
    assert!(cheap.degraded && !cheap.fell_back);
    assert_eq!((&*cheap.profile, &*cheap.deployment), ("mini", "openai/mini"));
    assert_eq!(cost_limit(&gov, "tenants/acme").1, 765_000);
    // A class that may not leave its profile is refused at the degrade threshold instead.
    let eval = Request { class: gov.class("eval"), ..big };
    match gov.try_acquire_profile(&profile, &eval) {
        Err(Error::RateLimited { scope, dimension: Dimension::Cost, .. }) => assert_eq!(&*scope, "tenants/acme"),
        other => panic!("expected a budget refusal, got {other:?}"),
    }
    // Degraded requests take the budget past 0.85: now every request is refused.
    for _ in 0..6 {
        gov.try_acquire_profile(&profile, &big).unwrap();
    }
    assert_eq!(cost_limit(&gov, "tenants/acme").1, 855_000);
    match gov.try_acquire_profile(&profile, &big) {
        Err(Error::RateLimited { dimension: Dimension::Cost, retry_after: Some(wait), .. }) => {
            assert!(wait > Duration::from_secs(24 * 3600), "the spend leaves a day's window: {wait:?}");
        }
        other => panic!("expected a budget refusal, got {other:?}"),
    }
}

/// gpt-4o falls back to opus (six times dearer); past gpt-4o's thresholds
/// the budget closes it, and its fallback must not spend the budget anyway.
fn with_a_dearer_fallback(thresholds: Value) -> Governor {
    let mut prices = pricing();
    prices["opus"] = json!({"input": 15.0, "output": 75.0});
    let requests = |amount: u32| json!([{"dimension": "requests", "amount": amount, "window": "1m"}]);
    governor(json!({
        "pricing": prices,
        "scopes": {
            "openai/gpt-4o": {"provider": true, "pricing": "gpt-4o", "limits": requests(10000)},
            "openai/mini": {"provider": true, "pricing": "mini", "limits": requests(1)},
            "anthropic/opus": {"provider": true, "pricing": "opus", "limits": requests(10000)},
            "tenants/*": {"limits": [{"dimension": "cost", "budget": 10.0, "window": "1d", "slots": 24}]},
        },
        "profiles": {
            "gpt-4o": {"deployments": ["openai/gpt-4o"], "fallback": "opus", "budget": thresholds},
            "mini": {"deployments": ["openai/mini"]},
            "opus": {"deployments": ["anthropic/opus"]},
        },
    }))
}

#[test]
fn past_its_thresholds_a_profile_does_not_fall_back_to_spend_the_budget() {
    for thresholds in [json!({"refuse_at": 0.1}), json!({"degrade_at": 0.1, "degrade_to": "mini"})] {
        let gov = with_a_dearer_fallback(thresholds.clone());
        let profile = gov.profile("gpt-4o", &["tenants/acme"]).unwrap();
        let big = Request::new(profile.primary()).input_tokens(200_000); // 0.5 on gpt-4o
        for _ in 0..2 {
            assert_eq!(&*gov.try_acquire_profile(&profile, &big).unwrap().profile, "gpt-4o");
        }
        if thresholds.get("degrade_to").is_some() {
            let cheap = gov.try_acquire_profile(&profile, &big).unwrap();
            assert!(cheap.degraded && &*cheap.profile == "mini", "{thresholds}");
        }
        // Refused past refuse_at, or with mini's one request a minute spent:
        // opus would have spent 3.0 of the budget.
        match gov.try_acquire_profile(&profile, &big) {
            Err(Error::RateLimited { .. }) => {}
            Ok(routed) => panic!("{thresholds}: admitted on {} after its thresholds closed gpt-4o", routed.profile),
            Err(other) => panic!("{thresholds}: {other:?}"),
        }
        assert!(cost_limit(&gov, "tenants/acme").1 < 1_100_000, "{thresholds}: nothing spent on opus");
    }
}

#[test]
fn the_global_safety_margin_leaves_budgets_whole() {
    // A budget of 25 is 25 under a global margin of 0.9 (slack against a
    // provider's counting), not 22.5; a scope's own margin still scales it.
    let budget = |scope_margin: Option<f64>| {
        let mut tenants = json!({"limits": [
            {"dimension": "cost", "budget": 25.0, "window": "1d", "algorithm": "token_bucket"},
            {"dimension": "tokens", "amount": 100_000_000, "window": "1d"},
        ]});
        if let Some(margin) = scope_margin {
            tenants["safety_margin"] = json!(margin);
        }
        let gov = governor(json!({
            "safety_margin": 0.9,
            "pricing": pricing(),
            "scopes": {"openai/gpt-4o": {"pricing": "gpt-4o", "limits": [{"dimension": "requests", "amount": 100, "window": "1m"}]},
                       "teams/*": tenants},
        }));
        let route = gov.route(&["teams/a", "openai/gpt-4o"]).unwrap();
        gov.try_acquire(&Request::new(route)).unwrap();
        let snapshot = gov.scope_snapshot(gov.scope_id("teams/a").unwrap()).unwrap();
        (snapshot.limit(Dimension::Cost).unwrap().amount, snapshot.limit(Dimension::Tokens).unwrap().amount)
    };
    assert_eq!(budget(None), (25_000_000, 90_000_000), "the budget whole, the token limit at 90%");
    assert_eq!(budget(Some(0.8)), (20_000_000, 80_000_000));
}

#[test]
fn a_budget_reserving_the_expected_output_reserves_it_for_a_request_stating_no_max_tokens() {
    // 1000 input (0.0025) each and no max_tokens. `reserve_output =
    // "expected"` on a budget alone reserved nothing for output (the
    // governor learned and filled in expected outputs only for token
    // limits): 400 were admitted on a budget of 1.0, and 4000 output each
    // (0.04) then spent it 17 times over. The default 1024 is reserved.
    let gov = governor(json!({
        "pricing": pricing(),
        "scopes": {
            "openai/gpt-4o": {"pricing": "gpt-4o", "limits": [{"dimension": "requests", "amount": 500, "window": "1m"}]},
            "teams/*": {"limits": [{"dimension": "cost", "budget": 1.0, "window": "1d", "reserve_output": "expected"}]},
        },
    }));
    let route = gov.route(&["teams/a", "openai/gpt-4o"]).unwrap();
    let mut admitted = Vec::new();
    while let Ok(permit) = gov.try_acquire(&Request::new(route).input_tokens(1000)) {
        admitted.push(permit);
    }
    assert_eq!(admitted.len(), 78, "1.0 ÷ (0.0025 + 1024 × 0.00001)");
    for mut permit in admitted {
        gov.settle(&mut permit, Usage::new(1000, 4000)).unwrap();
    }
    let (available, _) = cost_limit(&gov, "teams/a");
    assert!(available > -4_000_000, "overspent by more than the overages in flight: {available}");
}

#[test]
fn budget_config_errors_name_the_field_and_value() {
    let bad = |limit: Value, extra: Value| {
        let mut config = json!({"pricing": pricing(), "scopes": {"t": {"limits": [limit]}}});
        for (k, v) in extra.as_object().unwrap() {
            config[k] = v.clone();
        }
        Config::from_value(config).and_then(|c| c.validate()).unwrap_err().to_string()
    };
    let cost = |extra: Value| {
        let mut limit = json!({"dimension": "cost", "window": "1d"});
        limit.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        limit
    };
    let err = bad(cost(json!({"amount": 5})), json!({}));
    assert!(err.contains("scopes.t.limits[0].amount") && err.contains("budget"), "{err}");
    let err = bad(cost(json!({})), json!({}));
    assert!(err.contains("scopes.t.limits[0].budget"), "{err}");
    let err = bad(cost(json!({"budget": -1.0})), json!({}));
    assert!(err.contains("`-1`"), "{err}");
    let err = bad(cost(json!({"budget": 10000.0})), json!({}));
    assert!(err.contains("token_bucket"), "a sliding window's ring holds 4294.97: {err}");
    let err = bad(cost(json!({"budget": 10.0, "algorithm": "token_bucket", "burst": 5})), json!({}));
    assert!(err.contains("limits[0].burst"), "{err}");
    let err = bad(json!({"dimension": "tokens", "budget": 5.0, "window": "1m"}), json!({}));
    assert!(err.contains("only cost limits have a budget"), "{err}");
    let err = bad(cost(json!({"budget": 1.0})), json!({"pricing": {"m": {"input": -2.0, "output": 1.0}}}));
    assert!(err.contains("pricing.m.input") && err.contains("`-2`"), "{err}");
    let mut config = json!({"pricing": pricing(), "scopes": {"d": {"pricing": "gpt-5", "limits": [
        {"dimension": "requests", "amount": 1, "window": "1m"}]}}});
    let err = Config::from_value(config.clone()).unwrap().validate().unwrap_err().to_string();
    assert!(err.contains("scopes.d.pricing") && err.contains("gpt-5"), "{err}");
    config["scopes"]["d"]["pricing"] = json!("mini");
    for (budget, field) in [
        (json!({"degrade_at": 0.6}), "budget.degrade_to"),
        (json!({"degrade_at": 0.9, "degrade_to": "p", "refuse_at": 0.8}), "budget.degrade_at"),
        (json!({"refuse_at": 1.5}), "budget.refuse_at"),
        (json!({"degrade_at": 0.5, "degrade_to": "nope"}), "budget.degrade_to"),
        (json!({"degrade_at": 0.5, "degrade_to": "p"}), "profiles.p.fallback"),
    ] {
        config["profiles"] = json!({"p": {"deployments": ["d"], "budget": budget}});
        let err = Config::from_value(config.clone()).unwrap().validate().unwrap_err().to_string();
        assert!(err.contains(field), "{field}: {err}");
    }
}

const THREADS: u64 = 8;

/// `THREADS` threads started together each try 2000 requests of 1k input
/// and 500 max output (reserving 0.0075) on one tenant's 0.5 budget, and
/// settle each admitted one with `output(thread, i)` output tokens. Returns
/// the governor, what the settles spent in millionths, and how many passed.
fn spend_concurrently(output: fn(u64, u64) -> u64) -> (Arc<Governor>, u64, u64) {
    let gov = Arc::new(routed(0.5, json!({})));
    let route = gov.route(&["tenants/acme", "openai/gpt-4o"]).unwrap();
    let spent = Arc::new(AtomicU64::new(0));
    let start = Arc::new(Barrier::new(THREADS as usize));
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (gov, spent, start) = (gov.clone(), spent.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                let mut admitted = 0;
                for i in 0..2_000u64 {
                    let request = Request::new(route).input_tokens(1_000).max_output_tokens(500);
                    let Ok(mut permit) = gov.try_acquire(&request) else { continue };
                    let output = output(t, i);
                    gov.settle(&mut permit, Usage::new(1_000, output)).unwrap();
                    spent.fetch_add(2_500 + output * 10, Ordering::Relaxed);
                    admitted += 1;
                }
                admitted
            })
        })
        .collect();
    let admitted = workers.into_iter().map(|w| w.join().unwrap()).sum();
    let spent = spent.load(Ordering::Relaxed);
    // A refusal leaves less than one estimate (7500) free, plus what the
    // other threads' permits then in flight gave back (4000 at most each).
    assert!(spent > 500_000 - 7_500 - 7 * 4_000, "refused while an estimate still fitted: spent {spent}");
    assert_eq!(cost_limit(&gov, "tenants/acme").1, spent, "the budget holds exactly the settled costs");
    (gov, spent, admitted)
}

/// Eight threads spend one budget at once, each settling for no more than
/// it reserved: together they never spend past the budget.
#[test]
fn concurrent_requests_never_overspend_a_budget() {
    let (_, spent, admitted) = spend_concurrently(|t, i| 100 + (t * 31 + i * 17) % 401);
    assert!(spent <= 500_000, "spent {spent} millionths of a 500000 budget");
    assert!(admitted > 66, "{admitted}");
}

/// Eight threads spend one budget at once, and some requests use more
/// output than they reserved: a settle debits the overage at once, so the
/// budget is overspent by no more than the overages of the requests in
/// flight when it ran out (one per thread), and nothing passes after.
#[test]
fn concurrent_overages_overspend_by_at_most_the_requests_then_in_flight() {
    // One request in three uses 600..900 output: 1000..4000 over its 500.
    const MOST_OVER: u64 = 4_000;
    let (gov, spent, _) =
        spend_concurrently(|t, i| if (t + i) % 3 == 0 { 600 + (t * 31 + i * 17) % 301 } else { 100 + i % 401 });
    assert!(spent <= 500_000 + THREADS * MOST_OVER, "spent {spent} millionths of a 500000 budget");
    let route = gov.route(&["tenants/acme", "openai/gpt-4o"]).unwrap();
    let refused = gov.try_acquire(&Request::new(route).input_tokens(1_000).max_output_tokens(500)).unwrap_err();
    assert!(matches!(refused, Error::RateLimited { dimension: Dimension::Cost, .. }), "{refused:?}");
}
