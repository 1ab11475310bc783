//! A permit past its TTL unsettled is charged as estimated, as the core's
//! are: settling it then is `PermitExpired` and refunds nothing, whether its
//! route has a local scope or only shared ones (a shared-only permit used
//! to settle and refund after its TTL, one with a local scope did not).

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{fresh_prefix, redis_url, TIMEOUT};
use llmgov::{ManualClock, Usage};
use llmgov_redis::{Error, RedisGovernor};

fn config(url: &str, prefix: &str) -> String {
    format!(
        r#"
        permit_ttl = "10m"
        [scopes."openai/org"]
        limits = [{{ dimension = "tokens", amount = 2000, window = "1d" }}]
        [scopes."tenants/*"]
        limits = [{{ dimension = "tokens", amount = 100000, window = "1d" }}]
        [redis]
        url = "{url}"
        prefix = "{prefix}"
        expected_processes = 1
        timeout = "{TIMEOUT}"
        [redis.scopes."openai/org"]
        mode = "exact"
        "#
    )
}

#[test]
fn a_permit_settled_after_its_ttl_is_expired_and_refunds_nothing() {
    let Some(url) = redis_url("expiry") else { return };
    for paths in [&["openai/org"][..], &["tenants/acme", "openai/org"]] {
        let clock = Arc::new(ManualClock::new(0));
        let gov = RedisGovernor::from_toml_with_clock(&config(&url, &fresh_prefix("expiry")), clock.clone()).unwrap();
        let route = gov.route(paths).unwrap();
        let mut permit = gov.try_acquire(&route, Usage::new(1500, 0)).unwrap();
        clock.advance(Duration::from_secs(11 * 60));
        match gov.settle(&mut permit, Usage::new(100, 0)) {
            Err(Error::Core(llmgov::Error::PermitExpired)) => {}
            other => panic!("{paths:?}: expected PermitExpired, got {other:?}"),
        }
        assert!(matches!(gov.cancel(&mut permit), Err(Error::AlreadyReconciled)), "{paths:?}");
        // Redis keeps its own time, so the day's 2000 still hold the 1500.
        let refused = gov.try_acquire(&route, Usage::new(1500, 0));
        assert!(matches!(refused, Err(Error::RateLimited { .. })), "{paths:?}: refunded after expiry: {refused:?}");
    }
}
