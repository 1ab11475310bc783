//! A Redis Cluster of three private masters (`cluster = true`): shared
//! scopes whose hash slots live on different nodes are each charged on
//! their own node, exactly, in both modes; and a slot moved to another node
//! while the governor runs is followed (`MOVED`), with its state.

mod common;

use common::cluster::{cluster_config, PrivateCluster};
use common::{fresh_prefix, Listen};
use llmgov::Usage;
use llmgov_redis::{Error, RedisGovernor};
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
    let text = cluster_config(&cluster.nodes[0].url(), &prefix, mode, &paths, 5, "");
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

/// Moves `slot` from node `from` to node `to` with its keys, as
/// `redis-cli --cluster reshard` does.
fn move_slot(cluster: &PrivateCluster, slot: u16, from: usize, to: usize) {
    let id = |i: usize| -> String { redis::cmd("CLUSTER").arg("MYID").query(&mut cluster.connect(i)).unwrap() };
    let (source_id, target_id) = (id(from), id(to));
    let (mut source, mut target) = (cluster.connect(from), cluster.connect(to));
    let setslot = |c: &mut redis::Connection, state: &str, node: &str| {
        let () = redis::cmd("CLUSTER").arg("SETSLOT").arg(slot).arg(state).arg(node).query(c).unwrap();
    };
    setslot(&mut target, "IMPORTING", &source_id);
    setslot(&mut source, "MIGRATING", &target_id);
    let keys: Vec<String> = redis::cmd("CLUSTER").arg("GETKEYSINSLOT").arg(slot).arg(100).query(&mut source).unwrap();
    assert!(!keys.is_empty(), "the scope's state is on node {from}");
    let mut migrate = redis::cmd("MIGRATE");
    migrate.arg("127.0.0.1").arg(cluster.nodes[to].port).arg("").arg(0).arg(5000).arg("KEYS").arg(&keys);
    let () = migrate.query(&mut source).unwrap();
    for i in 0..cluster.nodes.len() {
        setslot(&mut cluster.connect(i), "NODE", &target_id);
    }
}

#[test]
fn a_slot_moved_to_another_node_is_followed_with_its_state() {
    let test = "cluster-moved";
    let Some(cluster) = start(test) else { return };
    let prefix = fresh_prefix(test);
    let path = "team-moved".to_owned();
    let slot = cluster.slot_of(&prefix, &path);
    let text = cluster_config(&cluster.nodes[0].url(), &prefix, "exact", std::slice::from_ref(&path), 3, "");
    let governor = RedisGovernor::from_toml(&text).unwrap();
    let route = governor.route(&[&path]).unwrap();
    let held: Vec<_> = (0..2).map(|_| governor.try_acquire(&route, Usage::new(1, 1)).unwrap()).collect();

    let from = cluster.first_owner(slot);
    move_slot(&cluster, slot, from, (from + 1) % 3);

    // The governor's connections still send the slot to `from`, which
    // answers MOVED: the call goes again to the new owner, on the state
    // moved there (two of three taken), not a fresh one.
    let third = governor.try_acquire(&route, Usage::new(1, 1));
    assert!(third.is_ok(), "{:?}", third.err());
    match governor.try_acquire(&route, Usage::new(1, 1)) {
        Err(Error::RateLimited { ref scope, .. }) => assert_eq!(&**scope, path),
        other => panic!("the fourth of three an hour: {other:?}"),
    }
    let health = governor.health();
    assert!(!health.degraded, "{health:?}");
    assert_eq!((health.redis_errors, health.state_resets), (0, 0), "{health:?}");
    drop(held);
}
