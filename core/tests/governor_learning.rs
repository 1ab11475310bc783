//! The governor learns output lengths per route and class from settled
//! usage, and reserves them on limits with `reserve_output = "expected"`.

use std::sync::Arc;

use llmgov::{Config, Dimension, Governor, ManualClock, Request, Usage};
use serde_json::json;

fn gov(output: serde_json::Value) -> Governor {
    let config = json!({
        "output": output,
        "scopes": {
            "provider": {"limits": [{"dimension": "output_tokens", "amount": 1_000_000, "window": "1m"}]},
            "tenants/*": {"limits": [{"dimension": "output_tokens", "amount": 1_000_000, "window": "1m", "reserve_output": "expected"}]},
        }
    });
    Governor::with_clock(&Config::from_value(config).unwrap(), Arc::new(ManualClock::new(0))).unwrap()
}

fn in_use(gov: &Governor, path: &str) -> u64 {
    let snapshot = gov.scope_snapshot(gov.scope_id(path).unwrap()).unwrap();
    snapshot.limit(Dimension::OutputTokens).unwrap().in_use
}

/// Settles `n` requests in `class` that each produced `output` tokens.
fn settle_many(gov: &Governor, request: Request, n: u64, output: u64) {
    for _ in 0..n {
        let mut permit = gov.try_acquire(&request).unwrap();
        gov.settle(&mut permit, Usage::new(0, output)).unwrap();
    }
}

#[test]
fn reserves_max_tokens_until_it_has_history_then_the_learned_p95() {
    let gov = gov(json!({"min_samples": 20}));
    let route = gov.route(&["tenants/a", "provider"]).unwrap();
    let request = Request::new(route).max_output_tokens(4000);
    settle_many(&gov, request, 19, 300);
    let _held = gov.try_acquire(&request).unwrap();
    assert_eq!(in_use(&gov, "tenants/a"), 19 * 300 + 4000, "19 samples: still max_tokens");
    let gov = gov_with_history(300);
    let route = gov.route(&["tenants/a", "provider"]).unwrap();
    let _held = gov.try_acquire(&Request::new(route).max_output_tokens(4000)).unwrap();
    let reserved = in_use(&gov, "tenants/a") - 40 * 300;
    assert!((300..=310).contains(&reserved), "learned p95 of 300s, within a bucket: {reserved}");
    assert_eq!(in_use(&gov, "provider") - 40 * 300, 4000, "the provider limit still reserves max_tokens");
}

fn gov_with_history(output: u64) -> Governor {
    let gov = gov(json!({}));
    let route = gov.route(&["tenants/a", "provider"]).unwrap();
    settle_many(&gov, Request::new(route).max_output_tokens(4000), 40, output);
    gov
}

#[test]
fn classes_learn_apart() {
    let gov = gov(json!({}));
    let route = gov.route(&["tenants/b"]).unwrap();
    let (chat, batch) = (gov.class("chat"), gov.class("batch"));
    assert_eq!(gov.class("chat"), chat, "interned once");
    settle_many(&gov, Request::new(route).max_output_tokens(8000).class(chat), 30, 100);
    settle_many(&gov, Request::new(route).max_output_tokens(8000).class(batch), 30, 3000);
    assert!(gov.expected_output(route, chat, Some(8000)) <= 104);
    assert!((3000..=3100).contains(&gov.expected_output(route, batch, Some(8000))));
    assert_eq!(gov.expected_output(route, llmgov::ClassId::default(), Some(8000)), 8000, "no history");
    assert_eq!(gov.expected_output(route, llmgov::ClassId::default(), None), 1024, "no max_tokens: the default");
}

#[test]
fn an_explicit_expectation_wins_and_nothing_is_learned_without_expected_limits() {
    let gov = gov_with_history(300);
    let route = gov.route(&["tenants/c"]).unwrap();
    let _held = gov.try_acquire(&Request::new(route).max_output_tokens(4000).expected_output_tokens(50)).unwrap();
    assert_eq!(in_use(&gov, "tenants/c"), 50);
    let plain = Governor::from_preset("openai-gpt-4o-tier1").unwrap();
    assert!(!plain.ledger().reserves_expected_output());
}

#[test]
fn a_bad_output_config_names_the_field() {
    let config = json!({"output": {"quantile": 1.5}, "scopes": {"p": {"limits": [{"dimension": "requests", "amount": 1, "window": "1s"}]}}});
    let err = Config::from_value(config).unwrap().validate().unwrap_err().to_string();
    assert!(err.contains("output.quantile") && err.contains("1.5"), "{err}");
}

#[test]
fn settles_record_how_far_estimates_were() {
    let gov = gov(json!({}));
    let route = gov.route(&["provider"]).unwrap();
    for _ in 0..50 {
        let mut permit = gov.try_acquire(&Request::new(route).input_tokens(1000).max_output_tokens(400)).unwrap();
        gov.settle(&mut permit, Usage::new(1100, 200)).unwrap();
    }
    let input = gov.estimate_accuracy(route, llmgov::tokens::Side::Input).unwrap();
    assert_eq!(input.samples, 50);
    assert!((input.p50 - 0.1).abs() < 0.01, "actual input 10% over the estimate: {input:?}");
    // The first 20 reserved max_tokens and used half of it; after that the
    // learned reservation matches the answers.
    let output = gov.estimate_accuracy(route, llmgov::tokens::Side::Output).unwrap();
    assert!((output.p05 + 0.5).abs() < 0.02, "half of max_tokens used before learning: {output:?}");
    assert!(output.p50.abs() < 0.02, "learned reservations fit: {output:?}");
}

#[test]
fn a_streamed_answer_is_judged_against_the_estimate_not_what_it_streamed() {
    // Streamed output beyond the reservation raises what is charged; the
    // estimate's error must still compare the answer with the estimate, or
    // every stream reads as estimated exactly.
    let gov = gov(json!({}));
    let route = gov.route(&["tenants/a"]).unwrap();
    for _ in 0..20 {
        let request = Request::new(route).input_tokens(100).max_output_tokens(1000).expected_output_tokens(100);
        let mut permit = gov.try_acquire(&request).unwrap();
        gov.add_output(&mut permit, 500).unwrap();
        assert_eq!((permit.charged_expected_output(), permit.expected_output()), (500, 100));
        gov.settle(&mut permit, Usage::new(100, 500)).unwrap();
    }
    let output = gov.estimate_accuracy(route, llmgov::tokens::Side::Output).unwrap();
    assert!((output.p50 - 4.0).abs() < 0.05, "500 streamed against 100 expected is 400% over: {output:?}");
}

#[test]
fn tenants_routes_to_one_provider_share_what_is_learned() {
    let config = json!({"scopes": {
        "provider": {"provider": true, "limits": [{"dimension": "output_tokens", "amount": 1_000_000, "window": "1m"}]},
        "tenants/*": {"limits": [{"dimension": "output_tokens", "amount": 1_000_000, "window": "1m", "reserve_output": "expected"}]},
    }});
    let gov = Governor::with_clock(&Config::from_value(config).unwrap(), Arc::new(ManualClock::new(0))).unwrap();
    let (a, b) = (gov.route(&["tenants/a", "provider"]).unwrap(), gov.route(&["tenants/b", "provider"]).unwrap());
    assert_eq!(gov.ledger().provider_route(a), gov.ledger().provider_route(b));
    settle_many(&gov, Request::new(a).max_output_tokens(4000), 30, 200);
    let learned = gov.expected_output(b, llmgov::ClassId::default(), Some(4000));
    assert!((200..=210).contains(&learned), "tenant b reserves what tenant a's answers taught: {learned}");
}
