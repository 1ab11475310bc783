//! The core engine end to end, on a manual clock so it runs in an instant:
//! a tenant budget and a provider limit charged together, a refusal with its
//! reason and wait, reconciliation with actual usage, and the snapshot.
//!
//! Run: `cargo run -p llmgov --example quickstart`

use std::sync::Arc;
use std::time::Duration;

use llmgov::{Config, Error, Governor, ManualClock, Request, Usage};

const CONFIG: &str = r#"
# OpenAI gpt-4o at tier 1, for the whole organisation.
[scopes."openai/org-main/gpt-4o"]
limits = [
  { dimension = "requests", amount = 500, window = "1m" },
  { dimension = "tokens", amount = 30000, window = "1m" },
]

# Every tenant gets its own 12,000 tokens a minute, made on first use.
[scopes."tenants/*"]
limits = [{ dimension = "tokens", amount = 12000, window = "1m", algorithm = "sliding_window" }]
"#;

fn main() -> Result<(), Error> {
    let clock = Arc::new(ManualClock::new(0));
    let gov = Governor::with_clock(&Config::from_toml(CONFIG)?, clock.clone())?;
    let acme = gov.route(&["tenants/acme", "openai/org-main/gpt-4o"])?;
    let globex = gov.route(&["tenants/globex", "openai/org-main/gpt-4o"])?;

    // 3,000 prompt tokens and max_tokens = 1,000: 4,000 reserved on every scope.
    let request = Request::new(acme).input_tokens(3_000).max_output_tokens(1_000);
    let mut permits = Vec::new();
    loop {
        match gov.try_acquire(&request) {
            Ok(permit) => permits.push(permit),
            Err(Error::RateLimited { scope, dimension, retry_after, .. }) => {
                println!(
                    "acme's request {} refused by {scope} on {dimension}; retry in {} ms",
                    permits.len() + 1,
                    retry_after.map_or(0, llmgov::ceil_ms)
                );
                break;
            }
            Err(other) => return Err(other),
        }
    }
    println!("acme holds {} permits: its 12,000-token tenant budget binds first", permits.len());

    // Globex is another tenant: its budget is its own, the provider's is shared.
    let mut globex_permit = gov.try_acquire(&Request::new(globex).input_tokens(3_000).max_output_tokens(1_000))?;

    // The replies were shorter than max_tokens: settling refunds the difference.
    for permit in &mut permits {
        gov.settle(permit, Usage::new(3_000, 250))?;
    }
    gov.settle(&mut globex_permit, Usage::new(2_900, 400))?;

    // A request larger than the provider's whole bucket is refused for good.
    match gov.try_acquire(&Request::new(globex).input_tokens(40_000)) {
        Err(e @ Error::NeverFits { .. }) => println!("never fits: {e}"),
        other => println!("unexpected: {other:?}"),
    }

    clock.advance(Duration::from_secs(10));
    let snapshot = gov.snapshot();
    for scope in &snapshot.scopes {
        for limit in &scope.limits {
            println!(
                "{:<24} {:<8} {:>6} available of {:>6} ({} in use)",
                scope.path, limit.dimension, limit.available, limit.amount, limit.in_use
            );
        }
    }
    println!(
        "admitted {}, rate limited {}, never fits {}",
        snapshot.admitted, snapshot.rate_limited, snapshot.never_fits
    );
    Ok(())
}
