//! One provider budget shared through Redis: an exact scope, a leased one,
//! a local tenant scope, a wait refused at once, a provider's 429 holding
//! the shared scope for every process, and the health reading.
//! Run: `LLMGOV_REDIS_URL=redis://127.0.0.1:6379 cargo run -p llmgov-redis --example shared_budget`

use std::time::Duration;

use llmgov::Usage;
use llmgov_redis::{Error, RedisGovernor};

fn main() -> Result<(), Error> {
    if std::env::var("LLMGOV_REDIS_URL").is_err() {
        eprintln!("set LLMGOV_REDIS_URL (e.g. redis://127.0.0.1:6379) to run this example");
        return Ok(());
    }
    let prefix = format!("example-{}", std::process::id());
    let gov = RedisGovernor::from_toml(&format!(
        r#"
        [scopes."openai/org-main/gpt-4o"]
        provider = true         # its 429s hold it, in Redis, for every process
        limits = [
          {{ dimension = "requests", amount = 500, window = "1m" }},
          {{ dimension = "tokens", amount = 30000, window = "1m" }},
          {{ dimension = "concurrency", amount = 20 }},
        ]
        [scopes."openai/org-main/gpt-4o-mini"]
        limits = [{{ dimension = "tokens", amount = 200000, window = "1m" }}]
        [scopes."tenants/*"]
        limits = [{{ dimension = "tokens", amount = 5000, window = "1m" }}]

        [redis]                 # url comes from LLMGOV_REDIS_URL
        prefix = "{prefix}"
        expected_processes = 4
        [redis.scopes."openai/org-main/gpt-4o"]
        mode = "exact"          # one script per acquire and per settle
        [redis.scopes."openai/org-main/gpt-4o-mini"]
        mode = "leased"         # local fast path from leases
        "#
    ))?;

    let route = gov.route(&["tenants/acme", "openai/org-main/gpt-4o"])?;
    let mut permit = gov.try_acquire(&route, Usage::new(1200, 800))?;
    // … call the provider …
    gov.settle(&mut permit, Usage::new(1200, 310))?;

    // The provider answers 429: the shared scope is held for its
    // retry-after, for every process sharing it, not only this one.
    let mut refused = gov.try_acquire(&route, Usage::new(1200, 800))?;
    gov.report(&refused, 429, &[("retry-after", "20")], b"")?;
    gov.cancel(&mut refused)?;
    match gov.try_acquire(&route, Usage::new(1200, 800)) {
        Err(Error::RateLimited { scope, retry_after: Some(wait), .. }) => {
            println!("after a 429: {scope} is held for another {wait:?}");
        }
        Ok(_) => unreachable!("a 429 holds the scope, in Redis or, while it is away, in the safe share"),
        Err(other) => return Err(other),
    }
    let mini = gov.route(&["tenants/acme", "openai/org-main/gpt-4o-mini"])?;
    let mut served = 0;
    loop {
        match gov.try_acquire(&mini, Usage::new(100, 100)) {
            Ok(mut permit) => {
                gov.settle(&mut permit, Usage::new(100, 40))?;
                served += 1;
            }
            Err(Error::RateLimited { scope, dimension, .. }) => {
                println!("after {served} mini requests: {scope} is out of {dimension}");
                break;
            }
            Err(other) => return Err(other),
        }
    }
    // Waiting: the refusing limit says when it could admit; a wait that
    // long would outlast this timeout, so it is refused at once.
    match gov.acquire_blocking(&mini, Usage::new(100, 100), Some(Duration::from_millis(100))) {
        Err(Error::DeadlineExceeded { retry_after: Some(wait), .. }) => {
            println!("a 100 ms wait is too short: the next mini request passes in {wait:?}");
        }
        Ok(mut permit) => gov.settle(&mut permit, Usage::new(100, 40))?,
        Err(other) => return Err(other),
    }
    let health = gov.health();
    println!(
        "degraded: {}, Redis calls: {}, fallback admissions: {}",
        health.degraded, health.redis_calls, health.fallback_admissions
    );
    Ok(())
}
