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

    let client = redis::Client::open(url).unwrap();
    let mut connection = client.get_connection().unwrap();
    let fixed_window = Script::new(include_str!("../lua/fixed_window.lua"));
    let keys = ["{bench:fw}:w:requests", "{bench:fw}:c:requests", "{bench:fw}:w:tokens", "{bench:fw}:c:tokens"];
    let (request_limit, token_limit) = (1_000_000_000_000_i64, 1_000_000_000_000_000_i64);
    group.bench_function("LiteLLM-style fixed window (script + INCRBY)", |b| {
        b.iter(|| {
            let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
            let counts: Vec<redis::Value> =
                fixed_window.key(&keys[..]).arg(now).arg(60).invoke(&mut connection).unwrap();
            let requests: i64 = redis::from_redis_value_ref(&counts[1]).unwrap();
            let tokens: i64 = redis::from_redis_value_ref(&counts[3]).unwrap();
            assert!(requests <= request_limit && tokens <= token_limit);
            let used = (actual.input_tokens + actual.output_tokens) as i64;
            let _: i64 = redis::cmd("INCRBY").arg(keys[3]).arg(used).query(&mut connection).unwrap();
        })
    });

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
    leased_calls_per_acquire(&url, if quick { 1_000 } else { 200_000 });
    if !quick {
        leased_calls_paced(&url, 200, 10);
        leased_calls_paced(&url, 2_000, 10);
    }
}
