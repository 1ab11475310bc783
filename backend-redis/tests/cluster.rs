//! A Redis Cluster of three private masters (`cluster = true`): shared
//! scopes whose hash slots live on different nodes are each charged on
//! their own node, exactly, in both modes; and a slot moved to another node
//! while the governor runs is followed through every step of its migration
//! (served, `ASK`, `MOVED`), with its state; a scope's keys split between
//! the nodes (`TRYAGAIN`) are waited out within `timeout`, and only a split
//! that outlasts it puts the process on its safe share.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::cluster::{cluster_config, requests_an_hour, PrivateCluster};
use common::{fresh_prefix, Listen};
use llmgov::{ManualClock, Usage};
use llmgov_redis::{Error, RedisGovernor, SharedPermit, SharedRoute};
use redis::Commands;

fn start(test: &str) -> Option<PrivateCluster> {
    PrivateCluster::start(test, Listen::Plain, &[], |port| {
        redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap()
    })
}

/// Two governors (two processes) take turns on a route over three shared
/// scopes, one on each node, until 20 tries; returns how many were admitted.
fn share_three_nodes(test: &str, mode: &str) -> Option<usize> {
    let cluster = start(test)?;
    let prefix = fresh_prefix(test);
    let paths = cluster.one_scope_per_node(&prefix);
    let text = cluster_config(&cluster.nodes[0].url(), &prefix, mode, &paths, &requests_an_hour(5), "");
    let governors = [RedisGovernor::from_toml(&text).unwrap(), RedisGovernor::from_toml(&text).unwrap()];
    let routes: Vec<_> = governors.iter().map(|g| g.route(&paths).unwrap()).collect();
    let mut admitted = 0;
    for i in 0..20 {
        match governors[i % 2].try_acquire(&routes[i % 2], Usage::new(1, 1)) {
            Ok(_permit) => admitted += 1,
            Err(Error::RateLimited { .. }) => {}
            Err(other) => panic!("{other}"),
        }
    }
    for governor in &governors {
        let health = governor.health();
        assert!(!health.degraded && health.redis_errors == 0, "{health:?}");
    }
    // Each scope's state lives on the node serving its slot, and only there.
    for (owner, path) in paths.iter().enumerate() {
        let key = format!("{{llmgov:{prefix}:{path}}}:state");
        let exists: bool = cluster.connect(owner).exists(&key).unwrap();
        assert!(exists, "{key} is not on node {owner}");
    }
    Some(admitted)
}

#[test]
fn exact_mode_charges_scopes_on_three_nodes_exactly() {
    let Some(admitted) = share_three_nodes("cluster-exact", "exact") else { return };
    assert_eq!(admitted, 5, "5 requests an hour on each scope, across both governors");
}

#[test]
fn leased_mode_charges_scopes_on_three_nodes_within_the_limit() {
    let Some(admitted) = share_three_nodes("cluster-leased", "leased") else { return };
    assert!((1..=5).contains(&admitted), "leased mode admits within the limit: {admitted}");
}

/// A slot's move from node `from` to node `to`, in the steps
/// `redis-cli --cluster reshard` takes.
struct SlotMove<'a> {
    cluster: &'a PrivateCluster,
    slot: u16,
    from: usize,
    to: usize,
}

impl SlotMove<'_> {
    fn id(&self, i: usize) -> String {
        redis::cmd("CLUSTER").arg("MYID").query(&mut self.cluster.connect(i)).unwrap()
    }

    fn set_slot(&self, node: usize, state: &str, id: &str) {
        let mut set = redis::cmd("CLUSTER");
        set.arg("SETSLOT").arg(self.slot).arg(state).arg(id);
        let () = set.query(&mut self.cluster.connect(node)).unwrap();
    }

    /// Marks the slot importing on `to` and migrating on `from`: its keys
    /// are still on `from`.
    fn open(&self) {
        self.set_slot(self.to, "IMPORTING", &self.id(self.from));
        self.set_slot(self.from, "MIGRATING", &self.id(self.to));
    }

    /// Moves the slot's keys to `to` (MIGRATE): `from` answers ASK for
    /// them now, `to` serves them to a client that says ASKING.
    fn move_keys(&self) {
        let mut keys = redis::cmd("CLUSTER");
        keys.arg("GETKEYSINSLOT").arg(self.slot).arg(100);
        let keys: Vec<String> = keys.query(&mut self.cluster.connect(self.from)).unwrap();
        assert!(!keys.is_empty(), "the scope's state is on node {}", self.from);
        self.migrate(&keys);
    }

    /// Moves `keys` only, as a reshard moving a slot's keys in batches
    /// may, between two batches.
    fn migrate(&self, keys: &[String]) {
        let mut migrate = redis::cmd("MIGRATE");
        migrate.arg("127.0.0.1").arg(self.cluster.nodes[self.to].port).arg("").arg(0).arg(5000).arg("KEYS").arg(keys);
        let () = migrate.query(&mut self.cluster.connect(self.from)).unwrap();
    }

    /// Waits until `from` has answered a call `TRYAGAIN` (its error
    /// counts, in `INFO errorstats`): it runs on its own clock, not the test's.
    fn await_tryagain(&self) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let stats: String =
                redis::cmd("INFO").arg("errorstats").query(&mut self.cluster.connect(self.from)).unwrap();
            if stats.contains("errorstat_TRYAGAIN") {
                return;
            }
            assert!(std::time::Instant::now() < deadline, "node {} answered no TRYAGAIN", self.from);
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Gives the slot to `to` on every node: `from` answers MOVED.
    fn assign(&self) {
        let target = self.id(self.to);
        for i in 0..self.cluster.nodes.len() {
            self.set_slot(i, "NODE", &target);
        }
    }
}

/// A cluster and a governor on it, on the manual clock, with one shared
/// scope (exact mode) whose slot a test moves.
struct OneScope {
    cluster: PrivateCluster,
    prefix: String,
    path: String,
    slot: u16,
    clock: Arc<ManualClock>,
    governor: RedisGovernor,
    route: SharedRoute,
}

impl OneScope {
    fn start(test: &str, limits: &str) -> Option<Self> {
        let cluster = start(test)?;
        let prefix = fresh_prefix(test);
        let path = format!("team-{test}");
        let slot = cluster.slot_of(&prefix, &path);
        let paths = std::slice::from_ref(&path);
        let text = cluster_config(&cluster.nodes[0].url(), &prefix, "exact", paths, limits, "");
        let clock = Arc::new(ManualClock::new(0));
        let governor = RedisGovernor::from_toml_with_clock(&text, clock.clone()).unwrap();
        let route = governor.route(paths).unwrap();
        Some(OneScope { cluster, prefix, path, slot, clock, governor, route })
    }

    fn acquire(&self) -> llmgov_redis::Result<SharedPermit> {
        self.governor.try_acquire(&self.route, Usage::new(1, 1))
    }

    /// The move of the scope's slot from its first node to the next.
    fn slot_move(&self) -> SlotMove<'_> {
        let from = self.cluster.first_owner(self.slot);
        SlotMove { cluster: &self.cluster, slot: self.slot, from, to: (from + 1) % 3 }
    }

    fn state_key(&self) -> String {
        format!("{{llmgov:{}:{}}}:state", self.prefix, self.path)
    }

    fn assert_healthy(&self) {
        let health = self.governor.health();
        assert!(!health.degraded, "{health:?}");
        assert_eq!((health.redis_errors, health.state_resets), (0, 0), "{health:?}");
    }
}

#[test]
fn a_slot_moved_to_another_node_is_followed_with_its_state() {
    let Some(one) = OneScope::start("moved", &requests_an_hour(3)) else { return };
    let held: Vec<_> = (0..2).map(|_| one.acquire().unwrap()).collect();
    let slot_move = one.slot_move();
    slot_move.open();
    slot_move.move_keys();
    slot_move.assign();

    // The governor's connections still send the slot to `from`, which
    // answers MOVED: the call goes again to the new owner, on the state
    // moved there (two of three taken), not a fresh one.
    let third = one.acquire();
    assert!(third.is_ok(), "{:?}", third.err());
    match one.acquire() {
        Err(Error::RateLimited { ref scope, .. }) => assert_eq!(&**scope, one.path),
        other => panic!("the fourth of three an hour: {other:?}"),
    }
    one.assert_healthy();
    drop(held);
}

/// Every step of a slot's migration, with a governor acquiring between
/// them: while the old node holds the scope's state it serves it; once the
/// state has moved it answers ASK and the call goes to the new node (after
/// ASKING); once the slot is the new node's it answers MOVED. The state
/// moves with the slot, and the process never leaves Redis.
#[test]
fn a_scope_is_served_through_every_step_of_its_slots_migration() {
    let Some(one) = OneScope::start("migrating", &requests_an_hour(8)) else { return };
    let mut held = Vec::new();
    let mut take_two = |step: &str| {
        for _ in 0..2 {
            let permit = one.acquire().unwrap();
            assert!(!permit.from_fallback(), "{step}: {:?}", one.governor.health());
            held.push(permit);
        }
    };
    take_two("before");
    let slot_move = one.slot_move();
    slot_move.open();
    take_two("migrating, the state still on the old node");
    slot_move.move_keys();
    take_two("migrating, the state on the new node (ASK)");
    slot_move.assign();
    take_two("moved (MOVED)");
    assert!(one.acquire().is_err(), "the ninth of 8 an hour");
    one.assert_healthy();
}

const WITH_CONCURRENCY: &str = r#"[{ dimension = "requests", amount = 8, window = "1h", algorithm = "token_bucket" },
                                      { dimension = "concurrency", amount = 4 }]"#;

/// Takes `count` through Redis, each settled at once: no slot stays held.
fn take_and_settle(one: &OneScope, count: usize, step: &str) {
    for _ in 0..count {
        let mut permit = one.acquire().unwrap();
        assert!(!permit.from_fallback(), "{step}: {:?}", one.governor.health());
        one.governor.settle(&mut permit, Usage::new(1, 1)).unwrap();
    }
}

/// A scope with concurrency and no slot held through every step of its
/// slot's migration. Its slots key stays when its last slot goes (a member
/// never counted keeps it), so a node holds both of the scope's keys or
/// neither, and serves it or answers ASK. Before, the key vanished with the
/// last slot, and both nodes answered TRYAGAIN (some keys there, some not)
/// for the whole migration: the process was on its safe share.
#[test]
fn a_scope_with_concurrency_and_no_slot_held_is_served_through_its_slots_migration() {
    let Some(one) = OneScope::start("no-slot-held", WITH_CONCURRENCY) else { return };
    take_and_settle(&one, 2, "before");
    let slot_move = one.slot_move();
    slot_move.open();
    take_and_settle(&one, 2, "migrating, the keys still on the old node");
    slot_move.move_keys();
    take_and_settle(&one, 2, "migrating, the keys on the new node (ASK)");
    slot_move.assign();
    take_and_settle(&one, 2, "moved (MOVED)");
    assert!(one.acquire().is_err(), "the ninth of 8 an hour");
    one.assert_healthy();
}

/// A reshard that moves a slot's keys in batches may move a scope's state
/// and leave its slots key, until the next batch: the nodes answer
/// TRYAGAIN. Split past the pauses the call waits (`timeout`), the process
/// is on its safe share until `retry_interval` after the slot has landed,
/// and the admissions of that outage are charged to the moved state.
#[test]
fn a_scope_whose_keys_are_split_by_its_slots_migration_is_the_safe_share_meanwhile() {
    let Some(one) = OneScope::start("tryagain", WITH_CONCURRENCY) else { return };
    take_and_settle(&one, 2, "before");

    let slot_move = one.slot_move();
    slot_move.open();
    slot_move.migrate(&[one.state_key()]);
    let mut during = one.acquire().unwrap();
    assert!(during.from_fallback(), "admitted from the safe share");
    let health = one.governor.health();
    let error = health.last_error.clone().unwrap_or_default();
    assert!(health.degraded && error.starts_with("TryAgain"), "{health:?}");
    one.governor.settle(&mut during, Usage::new(1, 1)).unwrap();

    slot_move.move_keys();
    slot_move.assign();
    one.clock.advance(Duration::from_secs(1));
    // 2 + the outage's 1 of 8 taken: 5 more, through Redis on node `to`.
    let mut through_redis = 0;
    while let Ok(mut permit) = one.acquire() {
        assert!(!permit.from_fallback(), "{:?}", one.governor.health());
        one.governor.settle(&mut permit, Usage::new(1, 1)).unwrap();
        through_redis += 1;
    }
    assert_eq!(through_redis, 5);
    let health = one.governor.health();
    assert!(!health.degraded && health.state_resets == 0, "{health:?}");
}

/// The reshard's next batch lands while the call pauses on TRYAGAIN: the
/// call, run again, finds both keys moved (ASK) and is served on Redis.
/// Before, the first TRYAGAIN sent the process to its safe share.
#[test]
fn a_split_that_ends_within_the_timeout_is_waited_out_on_redis() {
    let Some(one) = OneScope::start("tryagain-waited", WITH_CONCURRENCY) else { return };
    take_and_settle(&one, 2, "before");
    let slot_move = one.slot_move();
    slot_move.open();
    slot_move.migrate(&[one.state_key()]);
    std::thread::scope(|s| {
        s.spawn(|| {
            slot_move.await_tryagain();
            slot_move.move_keys();
        });
        take_and_settle(&one, 1, "the keys split, then moved together");
    });
    slot_move.assign();
    take_and_settle(&one, 5, "moved (MOVED)");
    assert!(one.acquire().is_err(), "the ninth of 8 an hour");
    one.assert_healthy();
}
