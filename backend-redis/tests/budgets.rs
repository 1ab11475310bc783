//! Cost budgets on shared scopes, against a real Redis: two governors (two
//! processes) spend one budget exactly, priced by the route's one priced
//! scope wherever it lives; settles refund or charge the price of the
//! actual usage; and a shared budget must say it is a token bucket.

mod common;

use common::{fresh_prefix, redis_url, TIMEOUT};
use llmgov::{Dimension, Usage};
use llmgov_redis::{Error, RedisGovernor};

const MODEL: &str = "openai/org/gpt-4o";

/// gpt-4o's prices per million tokens: 1000 in and 1000 out cost 12 500
/// millionths of a dollar.
fn config(url: &str, prefix: &str, mode: &str, budget_on: &str, shared: &str) -> String {
    format!(
        r#"
        [pricing.gpt-4o]
        input = 2.5
        output = 10.0
        [scopes."{MODEL}"]
        pricing = "gpt-4o"
        limits = [{{ dimension = "requests", amount = 100000, window = "1m" }}]
        [scopes."{budget_on}"]
        limits = [{{ dimension = "cost", budget = 0.1, window = "1d", algorithm = "token_bucket" }}]
        [redis]
        url = "{url}"
        prefix = "{prefix}"
        expected_processes = 2
        timeout = "{TIMEOUT}"
        [redis.scopes."{shared}"]
        mode = "{mode}"
        "#
    )
}

fn spend_together(mode: &str) {
    let Some(url) = redis_url(&format!("two_governors_spend_one_shared_budget_{mode}")) else { return };
    let text = config(&url, &fresh_prefix(&format!("budget-{mode}")), mode, "teams/ml", "teams/ml");
    let (a, b) = (RedisGovernor::from_toml(&text).unwrap(), RedisGovernor::from_toml(&text).unwrap());
    let paths = ["teams/ml", MODEL];
    let (route_a, route_b) = (a.route(&paths).unwrap(), b.route(&paths).unwrap());
    let request = Usage::new(1000, 1000);
    let mut held = Vec::new();
    for i in 0..20 {
        let (gov, route) = if i % 2 == 0 { (&a, &route_a) } else { (&b, &route_b) };
        match gov.try_acquire(route, request) {
            Ok(permit) => held.push((i % 2, permit)),
            Err(Error::RateLimited { dimension: Dimension::Cost, ref scope, .. }) => assert_eq!(&**scope, "teams/ml"),
            Err(other) => panic!("{other}"),
        }
    }
    // 0.1 of a dollar at 12 500 millionths a request: 8, across both.
    match mode {
        "exact" => assert_eq!(held.len(), 8, "exact mode spends the budget exactly"),
        _ => assert!(held.len() <= 8, "leased mode never spends past the budget: {}", held.len()),
    }
    // Each used half its output: it cost 7500 of the 12 500 reserved, so
    // 5000 comes back on each.
    for (which, permit) in &mut held {
        let gov = if *which == 0 { &a } else { &b };
        gov.settle(permit, Usage::new(1000, 500)).unwrap();
    }
    if mode == "exact" {
        let more = (0..10).filter_map(|_| a.try_acquire(&route_a, request).ok()).count();
        assert_eq!(more, 3, "8 × 5000 refunded is 40 000: three more requests of 12 500");
    }
}

#[test]
fn two_governors_spend_one_shared_budget_exactly() {
    spend_together("exact");
}

#[test]
fn two_governors_spend_one_shared_budget_in_leased_mode() {
    spend_together("leased");
}

#[test]
fn a_local_budget_is_priced_by_a_shared_scope() {
    let Some(url) = redis_url("a_local_budget_is_priced_by_a_shared_scope") else { return };
    // The budget stays local; the priced provider scope is the shared one.
    let text = config(&url, &fresh_prefix("budget-local"), "exact", "teams/ml", MODEL);
    let gov = RedisGovernor::from_toml(&text).unwrap();
    let route = gov.route(&["teams/ml", MODEL]).unwrap();
    let admitted = (0..20).filter_map(|_| gov.try_acquire(&route, Usage::new(1000, 1000)).ok()).count();
    assert_eq!(admitted, 8);
}

#[test]
fn a_shared_budget_must_say_it_is_a_token_bucket() {
    let text = config("redis://127.0.0.1:1", "budget-config", "exact", "teams/ml", "teams/ml")
        .replace(r#", algorithm = "token_bucket""#, "");
    match RedisGovernor::from_toml(&text).err() {
        Some(Error::InvalidConfig { field, reason, .. }) => {
            assert_eq!(field, "scopes.teams/ml.limits[0].algorithm");
            assert!(reason.contains("token_bucket"), "{reason}");
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
}

#[test]
fn redis_away_a_shared_budget_admits_its_safe_share() {
    // Nobody listens on port 1: every call fails at once.
    let text = config("redis://127.0.0.1:1", &fresh_prefix("budget-away"), "exact", "teams/ml", "teams/ml");
    let gov = RedisGovernor::from_toml(&text).unwrap();
    let route = gov.route(&["teams/ml", MODEL]).unwrap();
    let admitted: Vec<_> = (0..20).filter_map(|_| gov.try_acquire(&route, Usage::new(1000, 1000)).ok()).collect();
    // Half of 0.1 with two processes expected: four requests of 12 500.
    assert_eq!(admitted.len(), 4);
    assert!(admitted.iter().all(|p| p.from_fallback()));
    assert!(gov.health().degraded);
}
