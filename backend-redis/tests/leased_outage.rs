//! Leased mode when a renewal fails on the client's side (a timeout) but
//! Redis runs it anyway: the unused part the process gave back is Redis's
//! again, so the process must not keep serving from it.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{admit, fresh_prefix, Listen, PrivateRedis, ReplyDroppingProxy};
use llmgov::ManualClock;
use llmgov_redis::RedisGovernor;

const LIMIT: u64 = 1000;

fn config(url: &str, prefix: &str) -> String {
    format!(
        r#"
        [scopes."openai/org"]
        limits = [{{ dimension = "requests", amount = {LIMIT}, window = "1d" }}]
        [redis]
        url = "{url}"
        prefix = "{prefix}"
        expected_processes = 2
        lease_ttl = "60s"
        timeout = "500ms"
        retry_interval = "1s"
        [redis.scopes."openai/org"]
        mode = "leased"
        "#
    )
}

#[test]
fn a_renewal_that_timed_out_but_ran_leaves_no_lease_to_serve_twice() {
    let Some(redis) = PrivateRedis::start("renewal_timed_out", Listen::Plain, &[]) else { return };
    let proxy = ReplyDroppingProxy::start(redis.port);
    let prefix = fresh_prefix("lease-timeout");
    let clock = Arc::new(ManualClock::new(0));
    let gov = RedisGovernor::from_toml_with_clock(&config(&proxy.url(), &prefix), clock.clone()).unwrap();
    let route = gov.route(&["openai/org"]).unwrap();
    // Leases of 1, 2, 4, 8, 16, then 32 of which one is used: 31 held unused.
    assert_eq!(admit(&gov, &route, 32), 32);
    assert!(!gov.health().degraded);

    // The return of the 31 reaches Redis, which runs it; its reply is lost
    // and the call times out here.
    let mut admin = redis::Client::open(redis.url()).unwrap().get_connection().unwrap();
    let leases = format!("{{llmgov:{prefix}:openai/org}}:leases");
    let held = |admin: &mut redis::Connection| -> u64 { redis::cmd("HLEN").arg(&leases).query(admin).unwrap() };
    assert_eq!(held(&mut admin), 1);
    proxy.drop_replies(true);
    gov.return_leases();
    assert!(gov.health().degraded, "the return timed out: {:?}", gov.health());
    assert_eq!(held(&mut admin), 0, "Redis ran the return: the lease is no longer on record");
    proxy.drop_replies(false);

    clock.advance(Duration::from_secs(1)); // the retry interval: Redis is tried again
    let after = admit(&gov, &route, 2 * LIMIT);
    let other = RedisGovernor::from_toml_with_clock(&config(&proxy.url(), &prefix), clock).unwrap();
    let by_other = admit(&other, &other.route(&["openai/org"]).unwrap(), 2 * LIMIT);
    let total = 32 + after + by_other;
    assert!(total <= LIMIT, "the 31 given back were served again: {total} admitted of {LIMIT}");
    assert!(!gov.health().degraded);
}

/// While Redis is away, a probe that the process's lease serves never
/// reached Redis: it is no recovery, and the process stays degraded until
/// a call reaches Redis again (here, the keeper's return of the lease).
#[test]
fn a_probe_served_from_the_lease_is_no_recovery() {
    let Some(mut redis) = PrivateRedis::start("probe_from_lease", Listen::Plain, &[]) else { return };
    let clock = Arc::new(ManualClock::new(0));
    let config = config(&redis.url(), &fresh_prefix("lease-probe")).replace("openai/org", "openai/a")
        + r#"
        [scopes."openai/b"]
        limits = [{ dimension = "requests", amount = 1000, window = "1d" }]
        [redis.scopes."openai/b"]
        mode = "leased"
        "#;
    let gov = RedisGovernor::from_toml_with_clock(&config, clock.clone()).unwrap();
    let (leased, other) = (gov.route(&["openai/a"]).unwrap(), gov.route(&["openai/b"]).unwrap());
    assert_eq!(admit(&gov, &leased, 32), 32, "a lease of 32, one used");
    redis.stop();
    assert_eq!(admit(&gov, &other, 1), 1, "from the safe share: its lease could not be taken");
    assert!(gov.health().degraded);

    clock.advance(Duration::from_secs(1)); // the retry interval: a probe is due
    assert_eq!(admit(&gov, &leased, 1), 1, "served from the lease");
    let health = gov.health();
    assert!(health.degraded, "Redis is still away: {health:?}");
    assert_eq!(health.recoveries, 0);

    // Back: the keeper's return of the lease reaches it, and that is the recovery.
    redis.restart();
    gov.return_leases();
    let health = gov.health();
    assert!(!health.degraded, "Redis answered the return: {health:?}");
    assert_eq!(health.recoveries, 1);
}
