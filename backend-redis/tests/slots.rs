//! Concurrency slots across processes: held while their process lives (the
//! heartbeat outlasts the TTL), freed at settle, and back within the TTL
//! after the holder is killed with SIGKILL.

mod common;

use std::time::Duration;

use common::{fresh_prefix, read_value, redis_url, spawn_worker, TIMEOUT, URL_VAR, WORKER_VAR};
use llmgov::{Dimension, Usage};
use llmgov_redis::{Error, RedisGovernor, SharedRoute};

const SLOTS: usize = 4;
/// Long enough that a holder whose heartbeat (every third of it) is delayed
/// by a loaded machine still keeps its slots.
const SLOT_TTL_S: u64 = 2;

fn config(url: &str, prefix: &str) -> String {
    config_with_ttl(url, prefix, SLOT_TTL_S)
}

fn config_with_ttl(url: &str, prefix: &str, slot_ttl_s: u64) -> String {
    format!(
        r#"
        [scopes."openai/org/gpt-4o"]
        limits = [
          {{ dimension = "concurrency", amount = {SLOTS} }},
          {{ dimension = "requests", amount = 100000, window = "1m" }},
        ]
        [redis]
        url = "{url}"
        prefix = "{prefix}"
        expected_processes = 2
        slot_ttl = "{slot_ttl_s}s"
        timeout = "{TIMEOUT}"
        [redis.scopes."openai/org/gpt-4o"]
        mode = "exact"
        "#
    )
}

fn refused_on_concurrency(gov: &RedisGovernor, route: &SharedRoute) -> bool {
    match gov.try_acquire(route, Usage::new(10, 10)) {
        Err(Error::RateLimited { dimension: Dimension::Concurrency, retry_after: None, .. }) => true,
        Ok(mut permit) => {
            gov.cancel(&mut permit).unwrap();
            false
        }
        Err(other) => panic!("unexpected {other}"),
    }
}

/// The worker body: takes every slot, says so, and holds them until killed
/// (a bounded minute, so a lost worker ends by itself).
#[test]
fn worker_entry() {
    if std::env::var(WORKER_VAR).as_deref() != Ok("hold") {
        return;
    }
    let gov =
        RedisGovernor::from_toml(&config(&std::env::var(URL_VAR).unwrap(), &std::env::var("PREFIX").unwrap())).unwrap();
    let route = gov.route(&["openai/org/gpt-4o"]).unwrap();
    let permits: Vec<_> = (0..SLOTS).map(|_| gov.try_acquire(&route, Usage::new(10, 10)).unwrap()).collect();
    println!("held={}", permits.len());
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn a_killed_workers_slots_come_back_within_the_ttl_and_a_live_ones_do_not() {
    let Some(url) = redis_url("a_killed_workers_slots_come_back_within_the_ttl") else { return };
    let prefix = fresh_prefix("slots");
    let mut worker = spawn_worker("worker_entry", "hold", &[(URL_VAR, url.clone()), ("PREFIX", prefix.clone())]);
    assert_eq!(read_value(&mut worker, "held"), SLOTS.to_string());

    let gov = RedisGovernor::from_toml(&config(&url, &prefix)).unwrap();
    let route = gov.route(&["openai/org/gpt-4o"]).unwrap();
    assert!(refused_on_concurrency(&gov, &route), "the worker holds every slot");
    // One and a half TTLs later the live worker's heartbeat still holds them
    // (without it they would have lapsed a TTL after they were taken).
    std::thread::sleep(Duration::from_millis(SLOT_TTL_S * 1500));
    assert!(refused_on_concurrency(&gov, &route), "a live worker keeps its slots past the TTL");

    worker.kill().unwrap(); // SIGKILL: no settle, no goodbye
    worker.wait().unwrap();
    // Polled every 100 ms for at most three TTLs: the slots come back.
    let polls = (1..=30 * SLOT_TTL_S)
        .find(|_| {
            std::thread::sleep(Duration::from_millis(100));
            !refused_on_concurrency(&gov, &route)
        })
        .expect("the killed worker's slots came back");
    assert!(polls <= 15 * SLOT_TTL_S, "back within the {SLOT_TTL_S} s TTL plus slack, took {polls} polls");
    let permits: Vec<_> = (0..SLOTS).map(|_| gov.try_acquire(&route, Usage::new(10, 10)).unwrap()).collect();
    assert!(refused_on_concurrency(&gov, &route), "all {SLOTS} slots, and no more");
    drop(permits);
}

#[test]
fn settle_and_cancel_free_a_slot_at_once() {
    let Some(url) = redis_url("settle_and_cancel_free_a_slot_at_once") else { return };
    let gov = RedisGovernor::from_toml(&config(&url, &fresh_prefix("slot-settle"))).unwrap();
    let route = gov.route(&["openai/org/gpt-4o"]).unwrap();
    let mut permits: Vec<_> = (0..SLOTS).map(|_| gov.try_acquire(&route, Usage::new(10, 10)).unwrap()).collect();
    assert!(refused_on_concurrency(&gov, &route));
    gov.settle(&mut permits[0], Usage::new(10, 3)).unwrap();
    let mut next = gov.try_acquire(&route, Usage::new(10, 10)).unwrap();
    assert!(refused_on_concurrency(&gov, &route));
    gov.cancel(&mut permits[1]).unwrap();
    assert!(!refused_on_concurrency(&gov, &route));
    gov.settle(&mut next, Usage::new(10, 10)).unwrap();
}

/// A Redis that loses its keys (a restart without persistence) while slots
/// are in flight does not come back with every slot free: as the rate
/// limits, the concurrency limit restarts at the safe share, and the live
/// processes' slots are counted again at their next heartbeat.
#[test]
fn slots_in_flight_when_redis_loses_its_keys_still_count() {
    let Some(url) = redis_url("slots_in_flight_when_redis_loses_its_keys_still_count") else { return };
    let prefix = fresh_prefix("slots-lost");
    // A TTL the test outlasts on a loaded machine: the slots held back at
    // the restart stay held to the end.
    let config = config_with_ttl(&url, &prefix, 60);
    let (holder, other) = (RedisGovernor::from_toml(&config).unwrap(), RedisGovernor::from_toml(&config).unwrap());
    let (holder_route, route) =
        (holder.route(&["openai/org/gpt-4o"]).unwrap(), other.route(&["openai/org/gpt-4o"]).unwrap());
    let take = |gov: &RedisGovernor, route: &SharedRoute| gov.try_acquire(route, Usage::new(10, 10));
    let mut in_flight: Vec<_> = (0..3).map(|_| take(&holder, &holder_route).unwrap()).collect();
    // The other process has seen the state too: it knows a missing one as lost, not new.
    other.cancel(&mut take(&other, &route).unwrap()).unwrap();
    let mut admin = redis::Client::open(url.as_str()).unwrap().get_connection().unwrap();
    let keys = ["state", "slots"].map(|key| format!("{{llmgov:{prefix}:openai/org/gpt-4o}}:{key}"));
    let _: () = redis::cmd("DEL").arg(&keys).query(&mut admin).unwrap();

    let mut after: Vec<_> = (0..SLOTS).map_while(|_| take(&other, &route).ok()).collect();
    assert!(after.len() <= SLOTS / 2, "the safe share of {SLOTS} slots, not every one: {}", after.len());
    holder.heartbeat();
    for permit in &mut after {
        other.settle(permit, Usage::new(10, 3)).unwrap();
    }
    assert!(refused_on_concurrency(&other, &route), "the 3 in flight since before the loss count again");
    for permit in &mut in_flight {
        holder.settle(permit, Usage::new(10, 3)).unwrap();
    }
    // Nothing in flight now, and the slots held back at the restart stay
    // held until their TTL: the safe share is free, no more.
    let free: Vec<_> = (0..SLOTS).map_while(|_| take(&other, &route).ok()).collect();
    assert_eq!(free.len(), SLOTS / 2);
}
