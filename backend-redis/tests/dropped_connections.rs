//! A connection Redis closed while it sat in the pool (a Redis restart, the
//! server's idle `timeout`, a proxy or load balancer) is not an outage: the
//! call runs again on a new connection, where that is safe, instead of
//! sending the process to its safe share for a whole `retry_interval`.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{fresh_prefix, Listen, PrivateRedis, ReplyDroppingProxy, TIMEOUT};
use llmgov::{ManualClock, Usage};
use llmgov_redis::{Error, RedisGovernor, SharedRoute};

const LIMIT: u64 = 1000;

/// Exact scopes also hold concurrency slots (heart-beaten); leased ones cannot.
fn config(url: &str, prefix: &str, mode: &str) -> String {
    let slots = if mode == "exact" { r#"{ dimension = "concurrency", amount = 100 },"# } else { "" };
    format!(
        r#"
        [scopes."openai/org"]
        limits = [{slots} {{ dimension = "requests", amount = {LIMIT}, window = "1d" }}]
        [redis]
        url = "{url}"
        prefix = "{prefix}"
        expected_processes = 2
        lease_ttl = "20s"
        timeout = "{TIMEOUT}"
        [redis.scopes."openai/org"]
        mode = "{mode}"
        "#
    )
}

fn governor(url: &str, prefix: &str, mode: &str) -> (RedisGovernor, SharedRoute, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(0));
    let gov = RedisGovernor::from_toml_with_clock(&config(url, prefix, mode), clock.clone()).unwrap();
    let route = gov.route(&["openai/org"]).unwrap();
    (gov, route, clock)
}

/// Acquires and settles up to `most` requests; how many passed.
fn admit(gov: &RedisGovernor, route: &SharedRoute, most: u64) -> u64 {
    let mut admitted = 0;
    while admitted < most {
        match gov.try_acquire(route, Usage::new(1, 0)) {
            Ok(mut permit) => {
                assert!(!permit.from_fallback(), "admitted from the safe share: {:?}", gov.health());
                gov.settle(&mut permit, Usage::new(1, 0)).unwrap();
                admitted += 1;
            }
            Err(Error::RateLimited { .. }) => break,
            Err(other) => panic!("unexpected {other}"),
        }
    }
    admitted
}

/// Closes every client connection of the server but the admin's own.
fn kill_clients(admin: &mut redis::Connection) -> u64 {
    redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("normal").arg("SKIPME").arg("yes").query(admin).unwrap()
}

fn no_outage(gov: &RedisGovernor) {
    let health = gov.health();
    assert!(!health.degraded && health.redis_errors == 0 && health.fallback_admissions == 0, "{health:?}");
}

#[test]
fn exact_mode_carries_on_after_redis_closed_its_idle_connections() {
    let Some(redis) = PrivateRedis::start("exact_closed_idle", Listen::Plain, &[]) else { return };
    let (gov, route, _) = governor(&redis.url(), &fresh_prefix("closed-exact"), "exact");
    // Several connections pooled: permits held at once, then settled.
    let mut permits: Vec<_> = (0..4).map(|_| gov.try_acquire(&route, Usage::new(1, 0)).unwrap()).collect();
    for permit in &mut permits {
        gov.settle(permit, Usage::new(1, 0)).unwrap();
    }
    let mut admin = redis::Client::open(redis.url()).unwrap().get_connection().unwrap();
    assert!(kill_clients(&mut admin) >= 1);
    assert_eq!(admit(&gov, &route, 10), 10);
    gov.heartbeat();
    no_outage(&gov);
}

#[test]
fn a_redis_restart_between_two_calls_is_no_outage() {
    let Some(mut redis) = PrivateRedis::start("restart_between_calls", Listen::Plain, &[]) else { return };
    let (gov, route, _) = governor(&redis.url(), &fresh_prefix("restart-idle"), "exact");
    assert_eq!(admit(&gov, &route, 5), 5);
    redis.restart(); // empty: the state is lost
    assert_eq!(admit(&gov, &route, LIMIT), LIMIT / 2, "restarted at the safe share, from Redis");
    no_outage(&gov);
    assert_eq!(gov.health().state_resets, 1);
}

#[test]
fn leased_mode_carries_on_after_redis_closed_its_idle_connections() {
    let Some(redis) = PrivateRedis::start("leased_closed_idle", Listen::Plain, &[]) else { return };
    let prefix = fresh_prefix("closed-leased");
    let (gov, route, _) = governor(&redis.url(), &prefix, "leased");
    assert_eq!(admit(&gov, &route, 32), 32);
    let mut admin = redis::Client::open(redis.url()).unwrap().get_connection().unwrap();
    assert!(kill_clients(&mut admin) >= 1);
    gov.return_leases();
    no_outage(&gov);
    let (other, other_route, _) = governor(&redis.url(), &prefix, "leased");
    assert_eq!(admit(&other, &other_route, 2 * LIMIT) + 32, LIMIT, "the unused lease went back");
}

/// The lease call that a lost connection interrupted ran in Redis; run
/// again, it must not refund the old lease a second time.
#[test]
fn a_lease_renewal_run_twice_refunds_once() {
    let Some(redis) = PrivateRedis::start("lease_run_twice", Listen::Plain, &[]) else { return };
    let proxy = ReplyDroppingProxy::start(redis.port);
    let prefix = fresh_prefix("lease-twice");
    let (gov, route, clock) = governor(&proxy.url(), &prefix, "leased");
    // Leases of 1, 2, 4, 8, 16, then 32 of which one is used: 31 unused.
    assert_eq!(admit(&gov, &route, 32), 32);
    // The lease runs late here (its 90% of 20 s; the pooled connection,
    // idle 19 s, is still reused), so the next acquire renews it, giving
    // the 31 back; Redis runs that, and the connection drops before its
    // reply arrives.
    clock.advance(Duration::from_secs(19));
    proxy.cut_next_reply();
    let after = admit(&gov, &route, 2 * LIMIT);
    no_outage(&gov);
    gov.return_leases();
    let (other, other_route, _) = governor(&redis.url(), &prefix, "leased");
    let by_other = admit(&other, &other_route, 2 * LIMIT);
    let total = 32 + after + by_other;
    assert!(total <= LIMIT, "the 31 were refunded twice: {total} admitted of {LIMIT}");
}

/// Scripts flushed (as by a restart or `SCRIPT FLUSH`) are loaded again at
/// the NOSCRIPT reply; keys flushed under a live connection restart the
/// scope at the safe share. Neither is an outage.
#[test]
fn flushed_scripts_and_keys_are_no_outage() {
    let Some(redis) = PrivateRedis::start("flushed_scripts_and_keys", Listen::Plain, &[]) else { return };
    let (gov, route, _) = governor(&redis.url(), &fresh_prefix("flushed"), "exact");
    assert_eq!(admit(&gov, &route, 5), 5);
    let mut admin = redis::Client::open(redis.url()).unwrap().get_connection().unwrap();
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut admin).unwrap();
    assert_eq!(admit(&gov, &route, 5), 5);
    let _: () = redis::cmd("FLUSHALL").query(&mut admin).unwrap();
    assert_eq!(admit(&gov, &route, LIMIT), LIMIT / 2, "restarted at the safe share, not full");
    no_outage(&gov);
    assert_eq!(gov.health().state_resets, 1);
}

/// A settle whose connection Redis closed is run again without its refunds
/// (run twice, they could be given twice): the slot is freed at once and
/// the process does not degrade. Before, it degraded, and the slot stayed
/// taken until its TTL.
#[test]
fn a_settle_on_a_closed_connection_frees_its_slot_without_an_outage() {
    let Some(redis) = PrivateRedis::start("settle_closed", Listen::Plain, &[]) else { return };
    let prefix = fresh_prefix("settle-closed");
    let (gov, route, _) = governor(&redis.url(), &prefix, "exact");
    let mut permit = gov.try_acquire(&route, Usage::new(1, 0)).unwrap();
    let mut admin = redis::Client::open(redis.url()).unwrap().get_connection().unwrap();
    let slots = format!("{{llmgov:{prefix}:openai/org}}:slots");
    let taken = |admin: &mut redis::Connection| -> u64 {
        redis::cmd("ZCOUNT").arg(&slots).arg("-inf").arg("(+inf").query(admin).unwrap()
        // slots, not the key's keeper
    };
    assert_eq!(taken(&mut admin), 1);
    assert!(kill_clients(&mut admin) >= 1);
    gov.settle(&mut permit, Usage::new(1, 0)).unwrap();
    assert_eq!(taken(&mut admin), 0, "the slot is freed at once");
    no_outage(&gov);
}

/// A connection idle past 30 s is not reused: servers and proxies close
/// idle connections, and a settle sent on one would lose its refund.
#[test]
fn a_connection_idle_past_the_limit_is_replaced_before_a_settle_uses_it() {
    let Some(redis) = PrivateRedis::start("idle_limit", Listen::Plain, &[]) else { return };
    let text = format!(
        r#"
        [scopes."openai/org"]
        limits = [{{ dimension = "tokens", amount = 1000, window = "1d" }}]
        [redis]
        url = "{}"
        prefix = "{}"
        expected_processes = 2
        timeout = "{TIMEOUT}"
        [redis.scopes."openai/org"]
        mode = "exact"
        "#,
        redis.url(),
        fresh_prefix("idle-limit")
    );
    let clock = Arc::new(ManualClock::new(0));
    let gov = RedisGovernor::from_toml_with_clock(&text, clock.clone()).unwrap();
    let route = gov.route(&["openai/org"]).unwrap();
    let mut permit = gov.try_acquire(&route, Usage::new(100, 400)).unwrap(); // 500 of 1000
                                                                             // A long request: its connection sits idle, and the server closes it.
    clock.advance(Duration::from_secs(31));
    let mut admin = redis::Client::open(redis.url()).unwrap().get_connection().unwrap();
    assert!(kill_clients(&mut admin) >= 1);
    gov.settle(&mut permit, Usage::new(100, 0)).unwrap(); // 400 back
    assert_eq!(admit(&gov, &route, LIMIT), 900, "the refund reached Redis");
    no_outage(&gov);
}
