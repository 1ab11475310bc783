//! Redis behind Sentinel (`redis.sentinels`): a master, its replica and a
//! Sentinel, all private redis-servers. The governor finds the master
//! through the Sentinel, and after a failover the promoted replica, with
//! the state the master had replicated to it.

mod common;

use common::sentinel::{sentinel_config, PrivateSentinel, MASTER};
use llmgov::Usage;
use llmgov_redis::{RedisGovernor, SharedPermit, SharedRoute};

/// A governor on `sentinel`'s master, with one shared scope of `n`
/// requests an hour, exact mode; the first Sentinel listed refuses
/// connections (nothing listens on port 1).
fn governor(sentinel: &PrivateSentinel, test: &str, n: u64) -> (RedisGovernor, SharedRoute) {
    let sentinels = ["redis://127.0.0.1:1".to_owned(), sentinel.url()];
    let governor = RedisGovernor::from_toml(&sentinel_config(&format!("redis://{MASTER}"), &sentinels, "", test, n));
    let governor = governor.unwrap();
    let route = governor.route(&["team"]).unwrap();
    (governor, route)
}

fn acquire(governor: &RedisGovernor, route: &SharedRoute) -> llmgov_redis::Result<SharedPermit> {
    governor.try_acquire(route, Usage::new(1, 1))
}

/// The first Sentinel listed refuses connections (nothing listens on port
/// 1); the second names the master, where the scope's state is kept.
#[test]
fn the_master_a_sentinel_names_admits_exactly_the_limit() {
    let Some(sentinel) = PrivateSentinel::start("sentinel-master") else { return };
    let (governor, route) = governor(&sentinel, "sentinel-master", 5);
    for _ in 0..5 {
        let permit = acquire(&governor, &route).unwrap();
        assert!(!permit.from_fallback(), "{:?}", governor.health());
    }
    let refused = acquire(&governor, &route).unwrap_err();
    assert!(matches!(refused, llmgov_redis::Error::RateLimited { .. }), "{refused:?}");
    let health = governor.health();
    assert!(!health.degraded && health.redis_errors == 0, "{health:?}");
    assert!(sentinel.keys_on(&sentinel.master) > 0, "the state is on the master");
}

/// After the Sentinel promotes the replica and demotes the master (closing
/// their clients' connections), the next call finds the new master on a
/// new connection: the 3 of 8 taken before were replicated, so 5 more are
/// admitted, each through Redis, and the process never left it.
#[test]
fn a_failover_is_followed_to_the_promoted_replica() {
    let Some(sentinel) = PrivateSentinel::start("sentinel-failover") else { return };
    let (governor, route) = governor(&sentinel, "sentinel-failover", 8);
    for _ in 0..3 {
        assert!(!acquire(&governor, &route).unwrap().from_fallback());
    }
    sentinel.fail_over();
    let mut through_redis = 0;
    while let Ok(permit) = acquire(&governor, &route) {
        assert!(!permit.from_fallback(), "{:?}", governor.health());
        through_redis += 1;
    }
    assert_eq!(through_redis, 5);
    let health = governor.health();
    assert!(!health.degraded && health.redis_errors == 0 && health.state_resets == 0, "{health:?}");
    assert!(sentinel.is_master(&sentinel.replica), "the promoted replica serves");
}
