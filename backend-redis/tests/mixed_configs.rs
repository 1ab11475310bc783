//! Processes whose configs differ share one budget all the same: a rolling
//! deploy that reorders a shared scope's limits (or adds one in front) must
//! not make one process charge another's requests to its tokens bucket.
//! Each limit's Redis state is named by dimension and window, not position.

mod common;

use std::sync::Arc;

use common::{admit, fresh_prefix, redis_url, TIMEOUT};
use llmgov::ManualClock;
use llmgov_redis::{Error, RedisGovernor, SharedRoute};

const REQUESTS: &str = r#"{ dimension = "requests", amount = 10, window = "1d" }"#;
const TOKENS: &str = r#"{ dimension = "tokens", amount = 1000000, window = "1d" }"#;

fn config(url: &str, prefix: &str, limits: &[&str], mode: &str) -> String {
    let limits = limits.join(", ");
    format!(
        r#"
        [scopes."openai/org"]
        limits = [{limits}]
        [redis]
        url = "{url}"
        prefix = "{prefix}"
        expected_processes = 2
        timeout = "{TIMEOUT}"
        [redis.scopes."openai/org"]
        mode = "{mode}"
        "#
    )
}

fn governor(text: &str) -> (RedisGovernor, SharedRoute) {
    let gov = RedisGovernor::from_toml_with_clock(text, Arc::new(ManualClock::new(0))).unwrap();
    let route = gov.route(&["openai/org"]).unwrap();
    (gov, route)
}

#[test]
fn exact_processes_listing_the_limits_in_another_order_share_each_bucket() {
    let Some(url) = redis_url("exact_processes_listing_the_limits_in_another_order") else { return };
    let prefix = fresh_prefix("order-exact");
    let (a, route_a) = governor(&config(&url, &prefix, &[REQUESTS, TOKENS], "exact"));
    let (b, route_b) = governor(&config(&url, &prefix, &[TOKENS, REQUESTS], "exact"));
    assert_eq!(admit(&a, &route_a, 5), 5);
    assert_eq!(admit(&b, &route_b, 100), 5, "the 5 requests A left, not a bucket of B's own");
    assert_eq!(admit(&a, &route_a, 100), 0);
}

#[test]
fn a_limit_added_in_front_leaves_the_others_state_where_it_was() {
    let Some(url) = redis_url("a_limit_added_in_front") else { return };
    let prefix = fresh_prefix("order-added");
    let (old, route_old) = governor(&config(&url, &prefix, &[REQUESTS], "exact"));
    assert_eq!(admit(&old, &route_old, 7), 7);
    let (new, route_new) = governor(&config(&url, &prefix, &[TOKENS, REQUESTS], "exact"));
    assert_eq!(admit(&new, &route_new, 100), 3);
}

#[test]
fn leased_processes_listing_the_limits_in_another_order_share_each_bucket() {
    let Some(url) = redis_url("leased_processes_listing_the_limits_in_another_order") else { return };
    let prefix = fresh_prefix("order-leased");
    let (a, route_a) = governor(&config(&url, &prefix, &[REQUESTS, TOKENS], "leased"));
    let (b, route_b) = governor(&config(&url, &prefix, &[TOKENS, REQUESTS], "leased"));
    let by_a = admit(&a, &route_a, 4);
    let by_b = admit(&b, &route_b, 100);
    assert_eq!(by_a, 4);
    assert!(by_a + by_b <= 10, "never past the limit: {by_a} + {by_b}");
    // Both give back what they leased and did not use: a third process gets exactly the rest.
    a.return_leases();
    b.return_leases();
    let (c, route_c) = governor(&config(&url, &prefix, &[REQUESTS, TOKENS], "exact"));
    let rest = admit(&c, &route_c, 100);
    assert_eq!(by_a + by_b + rest, 10, "{by_a} + {by_b} + {rest}");
}

#[test]
fn two_limits_of_one_dimension_and_window_on_a_shared_scope_are_refused() {
    let text = config(
        "redis://127.0.0.1:1",
        "p",
        &[REQUESTS, TOKENS, r#"{ dimension = "requests", amount = 5, window = "24h" }"#],
        "exact",
    );
    match RedisGovernor::from_toml(&text) {
        Err(Error::InvalidConfig { field, value, .. }) => {
            assert_eq!((field.as_str(), value.as_str()), ("scopes.openai/org.limits[2].window", "24h"));
        }
        other => panic!("expected InvalidConfig, got {:?}", other.err()),
    }
}
