//! Output reservations: a limit reserves `max_tokens` (providers that charge
//! it at admission) or the expected output (providers that charge actual
//! usage, and llmgov's own budgets), and settles both to the actual output.

use std::sync::Arc;

use llmgov::{Config, Dimension, Governor, ManualClock, Request, Usage};
use serde_json::json;

fn gov() -> Governor {
    let config = json!({"scopes": {
        "provider": {"limits": [{"dimension": "output_tokens", "amount": 10_000, "window": "1m"}]},
        "tenants/*": {"limits": [{"dimension": "tokens", "amount": 10_000, "window": "1m", "reserve_output": "expected"}]},
    }});
    Governor::with_clock(&Config::from_value(config).unwrap(), Arc::new(ManualClock::new(0))).unwrap()
}

fn in_use(gov: &Governor, path: &str, dimension: Dimension) -> u64 {
    let snapshot = gov.scope_snapshot(gov.scope_id(path).unwrap()).unwrap();
    snapshot.limit(dimension).unwrap().in_use
}

#[test]
fn each_limit_reserves_what_it_is_configured_to() {
    let gov = gov();
    let route = gov.route(&["tenants/a", "provider"]).unwrap();
    let request = Request::new(route).input_tokens(100).max_output_tokens(4000).expected_output_tokens(300);
    let mut permit = gov.try_acquire(&request).unwrap();
    assert_eq!(in_use(&gov, "provider", Dimension::OutputTokens), 4000);
    assert_eq!(in_use(&gov, "tenants/a", Dimension::Tokens), 400);
    gov.settle(&mut permit, Usage::new(100, 350)).unwrap();
    assert_eq!(in_use(&gov, "provider", Dimension::OutputTokens), 350);
    assert_eq!(in_use(&gov, "tenants/a", Dimension::Tokens), 450, "overage beyond the expectation is charged");
}

#[test]
fn expectation_never_exceeds_max_tokens_and_defaults_to_it() {
    let gov = gov();
    let route = gov.route(&["tenants/b"]).unwrap();
    gov.try_acquire(&Request::new(route).max_output_tokens(200).expected_output_tokens(900)).unwrap();
    assert_eq!(in_use(&gov, "tenants/b", Dimension::Tokens), 200);
    gov.try_acquire(&Request::new(route).max_output_tokens(50)).unwrap();
    assert_eq!(in_use(&gov, "tenants/b", Dimension::Tokens), 250);
}

#[test]
fn streamed_output_is_charged_past_each_reservation() {
    let gov = gov();
    let route = gov.route(&["tenants/c", "provider"]).unwrap();
    let request = Request::new(route).max_output_tokens(1000).expected_output_tokens(100);
    let mut permit = gov.try_acquire(&request).unwrap();
    gov.add_output(&mut permit, 250).unwrap();
    assert_eq!(in_use(&gov, "tenants/c", Dimension::Tokens), 250, "past the expectation, charged as it streams");
    assert_eq!(in_use(&gov, "provider", Dimension::OutputTokens), 1000, "within max_tokens, already paid");
    gov.add_output(&mut permit, 1000).unwrap();
    assert_eq!(in_use(&gov, "provider", Dimension::OutputTokens), 1250);
    assert_eq!(permit.charged_expected_output(), 1250);
}

#[test]
fn the_snapshot_says_what_each_limit_reserves() {
    let gov = gov();
    gov.route(&["tenants/d", "provider"]).unwrap();
    let provider = gov.scope_snapshot(gov.scope_id("provider").unwrap()).unwrap();
    assert_eq!(provider.limits[0].reserves_output, Some("max_tokens"));
    let tenant = gov.scope_snapshot(gov.scope_id("tenants/d").unwrap()).unwrap();
    assert_eq!(tenant.limits[0].reserves_output, Some("expected"));
}

#[test]
fn only_output_counting_limits_reserve_output() {
    let config = json!({"scopes": {"p": {"limits": [
        {"dimension": "requests", "amount": 5, "window": "1m", "reserve_output": "expected"}]}}});
    let err = Config::from_value(config).unwrap().validate().unwrap_err().to_string();
    assert!(err.contains("limits[0].reserve_output") && err.contains("expected"), "{err}");
}

#[test]
fn a_request_stating_no_max_tokens_reserves_the_configured_default_on_expected_limits() {
    let config = json!({
        "output": {"default_max_tokens": 1024},
        "scopes": {
            "provider": {"limits": [{"dimension": "output_tokens", "amount": 10_000, "window": "1m"}]},
            "tenants/*": {"limits": [{"dimension": "tokens", "amount": 10_000, "window": "1m", "reserve_output": "expected"}]},
        },
    });
    let gov = Governor::with_clock(&Config::from_value(config).unwrap(), Arc::new(ManualClock::new(0))).unwrap();
    let route = gov.route(&["tenants/a", "provider"]).unwrap();
    let mut permit = gov.try_acquire(&Request::new(route).input_tokens(100)).unwrap();
    assert_eq!(permit.charged_expected_output(), 1024, "not 0: the answer's length is unbounded");
    assert_eq!(in_use(&gov, "tenants/a", Dimension::Tokens), 1124);
    assert_eq!(in_use(&gov, "provider", Dimension::OutputTokens), 0, "max_tokens limits reserve what is stated");
    gov.settle(&mut permit, Usage::new(100, 300)).unwrap();
    assert_eq!(in_use(&gov, "tenants/a", Dimension::Tokens), 400);
    assert_eq!(in_use(&gov, "provider", Dimension::OutputTokens), 300);
}

#[test]
fn an_expected_output_beyond_any_request_is_refused_by_name() {
    let gov = gov();
    let route = gov.route(&["tenants/a"]).unwrap();
    let error = gov.try_acquire(&Request::new(route).expected_output_tokens(u64::MAX)).unwrap_err();
    assert!(
        matches!(&error, llmgov::Error::InvalidRequest { field: "expected_output_tokens", value, .. } if value == &u64::MAX.to_string()),
        "{error}"
    );
    assert_eq!(in_use(&gov, "tenants/a", Dimension::Tokens), 0);
}
