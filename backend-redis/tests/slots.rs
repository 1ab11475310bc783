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
        slot_ttl = "{SLOT_TTL_S}s"
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
