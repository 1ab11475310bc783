//! One acquire + settle, round trip included, against a local redis-server:
//! llmgov exact mode (two scripts), a LiteLLM-style per-request fixed window
//! (one script + one INCRBY, the same two round trips), llmgov leased mode
//! (local fast path) and the local core alone, in the same run; then Redis
//! calls per acquire in leased mode.
//! Run: `make bench-redis` (starts the server; `LLMGOV_REDIS_URL` names it).

use std::hint::black_box;
use std::time::{SystemTime, UNIX_EPOCH};

use criterion::Criterion;
use llmgov::{Governor, Request, Usage};
use llmgov_redis::RedisGovernor;
use redis::Script;

/// Limits so large nothing is refused: the bench measures reserving, not waiting.
const SCOPE: &str = r#"
[scopes."openai/org/gpt-4o"]
limits = [
  { dimension = "requests", amount = 1000000000000, window = "1m" },
  { dimension = "tokens", amount = 1000000000000000, window = "1m" },
]
"#;

fn shared(url: &str, mode: &str, name: &str) -> RedisGovernor {
    let prefix = format!("bench-{name}-{}", std::process::id());
    RedisGovernor::from_toml(&format!(
        "{SCOPE}\n[redis]\nurl = \"{url}\"\nprefix = \"{prefix}\"\nexpected_processes = 8\n\
         [redis.scopes.\"openai/org/gpt-4o\"]\nmode = \"{mode}\"\n"
    ))
    .unwrap()
}

/// The LiteLLM-style peer: one fixed-window script for requests and tokens
/// per request, then INCRBY of the actual tokens after the response.
struct FixedWindow {
    connection: redis::Connection,
    script: Script,
    keys: [&'static str; 4],
}

impl FixedWindow {
    const REQUEST_LIMIT: i64 = 1_000_000_000_000;
    const TOKEN_LIMIT: i64 = 1_000_000_000_000_000;

    fn new(url: &str) -> Self {
        FixedWindow {
            connection: redis::Client::open(url).unwrap().get_connection().unwrap(),
            script: Script::new(include_str!("../lua/fixed_window.lua")),
            keys: ["{bench:fw}:w:requests", "{bench:fw}:c:requests", "{bench:fw}:w:tokens", "{bench:fw}:c:tokens"],
        }
    }

    fn acquire_settle(&mut self, actual: Usage) {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
        let counts: Vec<redis::Value> =
            self.script.key(&self.keys[..]).arg(now).arg(60).invoke(&mut self.connection).unwrap();
        let requests: i64 = redis::from_redis_value_ref(&counts[1]).unwrap();
        let tokens: i64 = redis::from_redis_value_ref(&counts[3]).unwrap();
        assert!(requests <= Self::REQUEST_LIMIT && tokens <= Self::TOKEN_LIMIT);
        let used = (actual.input_tokens + actual.output_tokens) as i64;
        let _: i64 = redis::cmd("INCRBY").arg(self.keys[3]).arg(used).query(&mut self.connection).unwrap();
    }
}

/// Exact mode against the fixed window in alternating rounds of `batch`
/// each, so both see the same machine load; prints the median round ratio.
fn paired_exact_vs_fixed_window(url: &str, rounds: usize, batch: usize) {
    let exact = shared(url, "exact", "exact-paired");
    let route = exact.route(&["openai/org/gpt-4o"]).unwrap();
    let mut peer = FixedWindow::new(url);
    let (estimate, actual) = (Usage::new(1200, 300), Usage::new(1200, 120));
    let mut ratios = Vec::with_capacity(rounds);
    let (mut exact_total, mut peer_total) = (0.0, 0.0);
    for _ in 0..rounds {
        let start = std::time::Instant::now();
        for _ in 0..batch {
            let mut permit = exact.try_acquire(&route, estimate).unwrap();
            exact.settle(&mut permit, actual).unwrap();
        }
        let exact_s = start.elapsed().as_secs_f64();
        let start = std::time::Instant::now();
        for _ in 0..batch {
            peer.acquire_settle(actual);
        }
        let peer_s = start.elapsed().as_secs_f64();
        ratios.push(exact_s / peer_s);
        exact_total += exact_s;
        peer_total += peer_s;
    }
    ratios.sort_by(f64::total_cmp);
    let per_op = |total: f64| total / (rounds * batch) as f64 * 1e6;
    println!(
        "paired, {rounds} rounds of {batch}: exact {:.1} µs, fixed window {:.1} µs per acquire+settle; median round ratio exact/fixed window = {:.2}",
        per_op(exact_total),
        per_op(peer_total),
        ratios[rounds / 2]
    );
}

fn bench_round_trips(c: &mut Criterion, url: &str) {
    let mut group = c.benchmark_group("redis acquire+settle");
    let (estimate, actual) = (Usage::new(1200, 300), Usage::new(1200, 120));

    let exact = shared(url, "exact", "exact");
    let route = exact.route(&["openai/org/gpt-4o"]).unwrap();
    group.bench_function("llmgov exact (2 scripts)", |b| {
        b.iter(|| {
            let mut permit = exact.try_acquire(&route, estimate).unwrap();
            exact.settle(&mut permit, actual).unwrap();
        })
    });

    let mut peer = FixedWindow::new(url);
    group.bench_function("LiteLLM-style fixed window (script + INCRBY)", |b| b.iter(|| peer.acquire_settle(actual)));

    let leased = shared(url, "leased", "leased");
    let leased_route = leased.route(&["openai/org/gpt-4o"]).unwrap();
    group.bench_function("llmgov leased (local fast path)", |b| {
        b.iter(|| {
            let mut permit = leased.try_acquire(&leased_route, estimate).unwrap();
            leased.settle(&mut permit, actual).unwrap();
        })
    });

    let local = Governor::from_toml(SCOPE).unwrap();
    let local_route = local.route(&["openai/org/gpt-4o"]).unwrap();
    let request = Request::new(local_route).input_tokens(1200).max_output_tokens(300);
    group.bench_function("llmgov local core (no Redis)", |b| {
        b.iter(|| {
            let mut permit = local.try_acquire(black_box(&request)).unwrap();
            local.settle(&mut permit, actual).unwrap();
        })
    });
    group.finish();
}

/// Redis calls per acquire in leased mode over a fixed number of acquires
/// (plentiful capacity: leases grow with demand up to limit ÷ processes).
fn leased_calls_per_acquire(url: &str, acquires: u64) {
    let gov = shared(url, "leased", "leased-ops");
    let route = gov.route(&["openai/org/gpt-4o"]).unwrap();
    let before = gov.health().redis_calls;
    for _ in 0..acquires {
        let mut permit = gov.try_acquire(&route, Usage::new(1200, 300)).unwrap();
        gov.settle(&mut permit, Usage::new(1200, 120)).unwrap();
    }
    let calls = gov.health().redis_calls - before;
    println!(
        "leased mode: {calls} Redis calls for {acquires} acquires = {:.5} per acquire",
        calls as f64 / acquires as f64
    );
}

/// Redis calls per acquire in leased mode at a steady `rate` per second for
/// `seconds` (real time: leases lapse and the keeper gives them back).
fn leased_calls_paced(url: &str, rate: u64, seconds: u64) {
    let gov = shared(url, "leased", "leased-paced");
    let route = gov.route(&["openai/org/gpt-4o"]).unwrap();
    let before = gov.health().redis_calls;
    let start = std::time::Instant::now();
    let acquires = rate * seconds;
    for i in 0..acquires {
        let due = start + std::time::Duration::from_secs_f64(i as f64 / rate as f64);
        std::thread::sleep(due.saturating_duration_since(std::time::Instant::now()));
        let mut permit = gov.try_acquire(&route, Usage::new(1200, 300)).unwrap();
        gov.settle(&mut permit, Usage::new(1200, 120)).unwrap();
    }
    let calls = gov.health().redis_calls - before;
    println!(
        "leased mode at {rate}/s for {seconds} s: {calls} Redis calls for {acquires} acquires = {:.5} per acquire",
        calls as f64 / acquires as f64
    );
}

fn main() {
    let Ok(url) = std::env::var("LLMGOV_REDIS_URL") else {
        println!("SKIPPED the Redis benchmark: LLMGOV_REDIS_URL is not set (make bench-redis starts a server)");
        return;
    };
    let mut criterion = Criterion::default().configure_from_args();
    bench_round_trips(&mut criterion, &url);
    criterion.final_summary();
    // `cargo bench` passes --bench; `cargo test` runs each bench once, quickly.
    let quick = !std::env::args().any(|a| a == "--bench");
    paired_exact_vs_fixed_window(&url, if quick { 3 } else { 41 }, if quick { 10 } else { 500 });
    leased_calls_per_acquire(&url, if quick { 1_000 } else { 200_000 });
    if !quick {
        leased_calls_paced(&url, 200, 10);
        leased_calls_paced(&url, 2_000, 10);
    }
}
