//! Leased mode across processes: 8 processes never admit more than the limit
//! and give back what they leased and did not use; a process killed with
//! SIGKILL holding a lease over-admits at most that lease, and its share
//! returns within one lease TTL.

mod common;

use std::time::Duration;

use common::{fresh_prefix, read_value, redis_url, spawn_worker, TIMEOUT, URL_VAR, WORKER_VAR};
use llmgov::Usage;
use llmgov_redis::{Error, RedisGovernor, SharedRoute};

const PROCESSES: u64 = 8;
const LIMIT: u64 = 400;
const ATTEMPTS_PER_PROCESS: usize = 150;

fn config(url: &str, prefix: &str, limit: u64, processes: u64, lease_ttl: &str) -> String {
    format!(
        r#"
        [scopes."openai/org/gpt-4o"]
        limits = [
          {{ dimension = "requests", amount = {limit}, window = "1d" }},
          {{ dimension = "tokens", amount = 100000000, window = "1d" }},
        ]
        [redis]
        url = "{url}"
        prefix = "{prefix}"
        expected_processes = {processes}
        lease_ttl = "{lease_ttl}"
        timeout = "{TIMEOUT}"
        [redis.scopes."openai/org/gpt-4o"]
        mode = "leased"
        "#
    )
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap()
}

/// Acquires and settles until refused, at most `attempts` times.
fn drain(gov: &RedisGovernor, route: &SharedRoute, attempts: usize) -> u64 {
    let mut admitted = 0;
    for _ in 0..attempts {
        match gov.try_acquire(route, Usage::new(100, 50)) {
            Ok(mut permit) => {
                admitted += 1;
                gov.settle(&mut permit, Usage::new(100, 20)).unwrap();
            }
            Err(Error::RateLimited { .. }) => {}
            Err(other) => panic!("unexpected {other}"),
        }
    }
    admitted
}

/// Worker bodies: "share" tries its attempts and exits (returning its lease
/// on drop); "crash" admits 20 and waits to be killed holding its lease.
#[test]
fn worker_entry() {
    let role = std::env::var(WORKER_VAR).unwrap_or_default();
    let (limit, processes, ttl) = match role.as_str() {
        "share" => (LIMIT, PROCESSES, "2s"),
        "crash" => (CRASH_LIMIT, CRASH_PROCESSES, CRASH_TTL),
        _ => return,
    };
    let gov = RedisGovernor::from_toml(&config(&env(URL_VAR), &env("PREFIX"), limit, processes, ttl)).unwrap();
    let route = gov.route(&["openai/org/gpt-4o"]).unwrap();
    if role == "share" {
        let admitted = drain(&gov, &route, ATTEMPTS_PER_PROCESS);
        assert!(!gov.health().degraded);
        println!("admitted={admitted} calls={}", gov.health().redis_calls);
        return;
    }
    for _ in 0..CRASH_USED {
        let mut permit = gov.try_acquire(&route, Usage::new(100, 50)).unwrap();
        gov.settle(&mut permit, Usage::new(100, 20)).unwrap();
    }
    println!("admitted={CRASH_USED}");
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn eight_processes_stay_within_the_limit_and_give_back_unused_leases() {
    let Some(url) = redis_url("eight_processes_stay_within_the_limit") else { return };
    let prefix = fresh_prefix("leased8");
    let mut workers: Vec<_> = (0..PROCESSES)
        .map(|_| spawn_worker("worker_entry", "share", &[(URL_VAR, url.clone()), ("PREFIX", prefix.clone())]))
        .collect();
    let mut admitted = 0;
    for worker in &mut workers {
        let line = read_value(worker, "admitted");
        admitted += line.split_whitespace().next().unwrap().parse::<u64>().unwrap();
    }
    for mut worker in workers {
        assert!(worker.wait().unwrap().success());
    }
    assert!(admitted <= LIMIT, "no crash: leased mode admits at most the limit, admitted {admitted}");
    assert!(admitted >= LIMIT / 2, "leases serve most of the limit, admitted {admitted}");
    // Every worker returned its unused lease on exit: a newcomer gets exactly the rest.
    let gov = RedisGovernor::from_toml(&config(&url, &prefix, LIMIT, PROCESSES, "2s")).unwrap();
    let route = gov.route(&["openai/org/gpt-4o"]).unwrap();
    let rest = drain(&gov, &route, 2 * LIMIT as usize);
    eprintln!("leased, 8 processes: {admitted} admitted by the workers, {rest} left for a newcomer");
    assert_eq!(admitted + rest, LIMIT, "nothing lost in leases: {admitted} + {rest}");
}

const CRASH_LIMIT: u64 = 100;
const CRASH_PROCESSES: u64 = 4;
/// Long enough that the doomed worker still holds its lease when a loaded
/// machine runs the test late: its keeper gives an idle lease back once it
/// is within a keeper period (a third of the TTL) of lapsing, about 0.57 TTL
/// (3.4 s) after it was granted.
const CRASH_TTL: &str = "6s";
const CRASH_USED: u64 = 20;
/// The most one lease holds: the limit ÷ expected processes.
const LEASE_CAP: u64 = CRASH_LIMIT / CRASH_PROCESSES;

#[test]
fn a_killed_process_over_admits_at_most_its_lease_and_its_share_returns_within_the_ttl() {
    let Some(url) = redis_url("a_killed_process_over_admits_at_most_its_lease") else { return };
    let prefix = fresh_prefix("leased-kill");
    let mut worker = spawn_worker("worker_entry", "crash", &[(URL_VAR, url.clone()), ("PREFIX", prefix.clone())]);
    assert_eq!(read_value(&mut worker, "admitted"), CRASH_USED.to_string());
    worker.kill().unwrap(); // SIGKILL with a lease outstanding
    worker.wait().unwrap();

    let gov = RedisGovernor::from_toml(&config(&url, &prefix, CRASH_LIMIT, CRASH_PROCESSES, CRASH_TTL)).unwrap();
    let route = gov.route(&["openai/org/gpt-4o"]).unwrap();
    let before_ttl = drain(&gov, &route, 2 * CRASH_LIMIT as usize);
    assert!(before_ttl < CRASH_LIMIT - CRASH_USED, "the dead process's lease is still out: {before_ttl}");
    // Polled every 200 ms for at most 3 TTLs: the lease expires and goes back.
    let mut after_ttl = 0;
    for _ in 0..90 {
        std::thread::sleep(Duration::from_millis(200));
        after_ttl += drain(&gov, &route, CRASH_LIMIT as usize);
        if before_ttl + after_ttl >= CRASH_LIMIT - CRASH_USED {
            break;
        }
    }
    let total = CRASH_USED + before_ttl + after_ttl;
    eprintln!("leased, killed holder: {CRASH_USED} by it, {before_ttl} before its lease expired, {after_ttl} after");
    assert!(after_ttl > 0, "the killed process's share came back");
    assert!(total >= CRASH_LIMIT, "all of it: {total}");
    assert!(total <= CRASH_LIMIT + LEASE_CAP, "the stated bound: limit + the dead process's lease; {total}");
}

/// A scope of 4 requests a day, leases of at most 1 (4 expected processes).
fn used_up_config(url: &str, prefix: &str) -> String {
    format!(
        r#"
        [scopes."p/shared"]
        limits = [{{ dimension = "requests", amount = 4, window = "1d" }}]
        [redis]
        url = "{url}"
        prefix = "{prefix}"
        expected_processes = 4
        lease_ttl = "1s"
        timeout = "{TIMEOUT}"
        [redis.scopes."p/shared"]
        mode = "leased"
        "#
    )
}

/// A live process's lease, used up, is still given back before it expires
/// in Redis: left there, another process's renewal would reap it as a dead
/// process's and refund the whole grant, what was used of it included.
#[test]
fn a_used_up_lease_of_a_live_process_is_returned_not_reaped() {
    let Some(url) = redis_url("a_used_up_lease_of_a_live_process_is_returned_not_reaped") else { return };
    let prefix = fresh_prefix("leased-used-up");
    let (first, second) = (
        RedisGovernor::from_toml(&used_up_config(&url, &prefix)).unwrap(),
        RedisGovernor::from_toml(&used_up_config(&url, &prefix)).unwrap(),
    );
    let routes = (first.route(&["p/shared"]).unwrap(), second.route(&["p/shared"]).unwrap());
    // Lease after lease of 1, the whole day's amount; no attempt after the
    // last (a refused renewal would take the used-up lease's record away).
    assert_eq!(drain(&first, &routes.0, 4), 4);
    // Past the lease TTL: the first's used-up lease would have expired in Redis.
    std::thread::sleep(Duration::from_millis(1500));
    let later = drain(&second, &routes.1, 10) + drain(&first, &routes.0, 10);
    assert_eq!(later, 0, "nothing came back: every unit was used");
}
