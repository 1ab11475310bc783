//! Routing across a profile's deployments on the manual clock: the most
//! normalized headroom first, shared organisation pools respected, open
//! breakers skipped, failover on refusal, and fallback only where the
//! request's class allows it.

use std::sync::Arc;

use llmgov::{Config, Error, Governor, ManualClock, Request};
use serde_json::json;

fn build() -> Governor {
    let limits = |rpm: u64, tpm: u64| json!([{"dimension": "requests", "amount": rpm, "window": "1m"}, {"dimension": "tokens", "amount": tpm, "window": "1m"}]);
    let config = json!({
        "adaptive": {"breaker": {"failures": 1, "pauses": ["30s"]}},
        "scopes": {
            // Two keys of one OpenAI organisation share its pool.
            "openai/org": {"provider": true, "limits": limits(100, 10000)},
            "openai/org/key-1": {"provider": true, "limits": limits(100, 10000)},
            "openai/org/key-2": {"provider": true, "limits": limits(100, 10000)},
            "azure/eastus": {"provider": true, "limits": limits(100, 8000)},
            "mini/org": {"provider": true, "limits": limits(100, 100000)},
            "tenants/*": {"limits": [{"dimension": "tokens", "amount": 1000000, "window": "1m"}]},
        },
        "profiles": {
            "gpt-4o": {
                "deployments": ["openai/org/key-1", "openai/org/key-2", "azure/eastus"],
                "fallback": "mini",
                "fallback_allowed": {"eval": false},
            },
            "mini": {"deployments": ["mini/org"]},
        },
    });
    Governor::with_clock(&Config::from_value(config).unwrap(), Arc::new(ManualClock::new(0))).unwrap()
}

#[test]
fn the_roomiest_deployment_is_chosen_and_keys_share_their_org_pool() {
    let gov = build();
    let profile = gov.profile("gpt-4o", &["tenants/acme"]).unwrap();
    let ask = |tokens: u64| gov.try_acquire_profile(&profile, &Request::new(profile.primary()).input_tokens(tokens));
    let first = ask(6000).unwrap();
    assert_eq!(&*first.deployment, "openai/org/key-1", "all idle: the first in order");
    assert!(!first.fell_back);
    // The org pool is 40% full, so key-2 (in the same org) has 40% less
    // room too; Azure, untouched, has the most.
    let second = ask(1000).unwrap();
    assert_eq!(&*second.deployment, "azure/eastus");
    let third = ask(1000).unwrap();
    assert_eq!(&*third.deployment, "azure/eastus", "azure 87.5% free beats the org's 40%");
    assert_eq!(&*third.profile, "gpt-4o");
}

#[test]
fn a_refused_deployment_fails_over_and_an_open_breaker_is_skipped() {
    let gov = build();
    let profile = gov.profile("gpt-4o", &["tenants/acme"]).unwrap();
    let request = Request::new(profile.primary()).input_tokens(7000);
    let on_openai = gov.try_acquire_profile(&profile, &request).unwrap();
    assert_eq!(&*on_openai.deployment, "openai/org/key-1");
    let on_azure = gov.try_acquire_profile(&profile, &request).unwrap();
    assert_eq!(&*on_azure.deployment, "azure/eastus", "the org pool cannot take 7000 more");
    assert_eq!(gov.snapshot().rate_limited, 0, "a failover is no refusal");

    let fresh = build();
    let profile = fresh.profile("gpt-4o", &["tenants/acme"]).unwrap();
    let probe = fresh.try_acquire_profile(&profile, &Request::new(profile.primary())).unwrap();
    assert_eq!(&*probe.deployment, "openai/org/key-1");
    fresh.report(&probe.permit, 503, &[] as &[(&str, &str)], b"").unwrap();
    let next = fresh.try_acquire_profile(&profile, &Request::new(profile.primary())).unwrap();
    assert_eq!(&*next.deployment, "azure/eastus", "key-1's breaker (and the org's) is open");
}

#[test]
fn fallback_follows_the_chain_only_where_the_class_allows() {
    let gov = build();
    let profile = gov.profile("gpt-4o", &["tenants/acme"]).unwrap();
    let big = Request::new(profile.primary()).input_tokens(9000);
    assert_eq!(&*gov.try_acquire_profile(&profile, &big).unwrap().deployment, "openai/org/key-1");
    let eval = big.class(gov.class("eval"));
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    gov.set_event_hook(Arc::new(move |event: &llmgov::events::Event| log.lock().unwrap().push(event.clone()))).unwrap();
    match gov.try_acquire_profile(&profile, &eval) {
        Err(Error::RateLimited { scope, .. }) => assert_eq!(&*scope, "openai/org", "refused with the reason"),
        other => panic!("eval may not fall back: {other:?}"),
    }
    // Three deployments refused it, and it is one refusal.
    assert_eq!(gov.snapshot().rate_limited, 1);
    assert_eq!(seen.lock().unwrap().len(), 1, "{:?}", seen.lock().unwrap());
    let batch = big.class(gov.class("batch"));
    let routed = gov.try_acquire_profile(&profile, &batch).unwrap();
    assert!(routed.fell_back);
    assert_eq!((&*routed.profile, &*routed.deployment), ("mini", "mini/org"));
}

#[test]
fn profile_config_errors_name_the_field() {
    let bad = |profiles: serde_json::Value, field: &str| {
        let config = json!({"scopes": {"p": {"limits": [{"dimension": "requests", "amount": 1, "window": "1m"}]}}, "profiles": profiles});
        match Config::from_value(config).unwrap().validate() {
            Err(Error::InvalidConfig { field: f, .. }) => assert_eq!(f, field),
            other => panic!("expected a config error at {field}, got {other:?}"),
        }
    };
    bad(json!({"a": {"deployments": []}}), "profiles.a.deployments");
    bad(json!({"a": {"deployments": ["p"], "fallback": "zz"}}), "profiles.a.fallback");
    bad(
        json!({"a": {"deployments": ["p"], "fallback": "b"}, "b": {"deployments": ["p"], "fallback": "a"}}),
        "profiles.a.fallback",
    );
    bad(
        json!({
            "a": {"deployments": ["p"], "fallback": "b"},
            "b": {"deployments": ["p"], "budget": {"degrade_at": 0.5, "degrade_to": "c"}},
            "c": {"deployments": ["p"], "fallback": "b"},
        }),
        "profiles.a.fallback",
    );
    let gov = Governor::from_json(
        r#"{"scopes": {"p": {"limits": [{"dimension": "requests", "amount": 1, "window": "1m"}]}}}"#,
    )
    .unwrap();
    assert!(matches!(gov.profile("nope", &[] as &[&str]), Err(Error::InvalidRequest { field: "profile", .. })));
}

#[test]
fn a_deployment_must_be_a_configured_scope_or_a_templates_match() {
    let load = |deployment: &str| {
        let requests = json!([{"dimension": "requests", "amount": 10, "window": "1m"}]);
        let config = json!({
            "scopes": {"openai/org": {"limits": requests}, "openai/org/gpt-4o": {"limits": requests},
                       "azure/*": {"limits": requests}},
            "profiles": {"main": {"deployments": ["openai/org/gpt-4o", deployment]}},
        });
        Config::from_value(config).unwrap().validate()
    };
    // A typo in the model's segment passed, routed with only the org's limits.
    match load("openai/org/gpt-4o-typo") {
        Err(Error::InvalidConfig { field, value, reason }) => {
            assert_eq!((field.as_str(), value.as_str()), ("profiles.main.deployments[1]", "openai/org/gpt-4o-typo"));
            assert!(reason.contains("`openai/org`"), "{reason}");
        }
        other => panic!("expected a config error, got {other:?}"),
    }
    // One no scope covers at all failed only at `Governor::profile`.
    assert!(matches!(load("opneai/org/gpt-4o"), Err(Error::InvalidConfig { .. })));
    assert!(load("azure/eastus").is_ok(), "a template's match is a scope");
    assert!(matches!(load("azure/eastus/gpt-4o"), Err(Error::InvalidConfig { .. })), "deeper than the template");
}

/// A chain where each profile falls back to the next and degrades to the
/// one after has Fibonacci(n) paths: checking it for cycles walks each
/// profile once, not each path (60 profiles took centuries before).
#[test]
fn long_fallback_chains_are_checked_in_linear_walks() {
    let chain = |n: usize, last_back_to_first: bool| {
        let profiles: serde_json::Map<_, _> = (0..n)
            .map(|i| {
                let mut profile = json!({"deployments": ["p"]});
                if i + 1 < n {
                    profile["fallback"] = json!(format!("m{}", i + 1));
                } else if last_back_to_first {
                    profile["fallback"] = json!("m0");
                }
                if i + 2 < n {
                    profile["budget"] = json!({"degrade_at": 0.5, "degrade_to": format!("m{}", i + 2)});
                }
                (format!("m{i}"), profile)
            })
            .collect();
        let scopes = json!({"p": {"limits": [{"dimension": "requests", "amount": 1, "window": "1m"}]}});
        Config::from_value(json!({"scopes": scopes, "profiles": profiles})).unwrap().validate()
    };
    assert!(chain(60, false).is_ok());
    match chain(60, true) {
        Err(Error::InvalidConfig { reason, .. }) => {
            assert!(reason.starts_with("leads back in a cycle: m0 → m1"), "{reason}")
        }
        other => panic!("expected the cycle, got {other:?}"),
    }
}
