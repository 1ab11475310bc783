//! Instantiates one million template scopes and reports the time and the
//! resident memory per scope. Run: `cargo bench -p llmgov --bench scopes`.

use std::time::Instant;

use llmgov::{Config, Ledger};
use serde_json::json;

const SCOPES: usize = 1_000_000;

/// Resident set size of this process, from /proc (Linux only).
fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs it as a smoke test.
    let quick = std::env::args().all(|a| a != "--bench");
    let count = if quick { 10_000 } else { SCOPES };
    let config = json!({"scopes": {"tenants/*": {"limits": [
        {"dimension": "requests", "amount": 60, "window": "1m"},
        {"dimension": "tokens", "amount": 100_000, "window": "1m"},
    ]}}});
    let ledger = Ledger::new(&Config::from_value(config).unwrap()).unwrap();
    let paths: Vec<String> = (0..count).map(|i| format!("tenants/t{i:07}")).collect();
    let before = rss_bytes();
    let start = Instant::now();
    for path in &paths {
        ledger.scope_id(path).unwrap();
    }
    let elapsed = start.elapsed();
    let after = rss_bytes();
    assert_eq!(ledger.scope_count(), count);
    println!(
        "scopes/instantiate: {count} template scopes in {:.3} s ({:.0} ns each)",
        elapsed.as_secs_f64(),
        elapsed.as_nanos() as f64 / count as f64
    );
    if let (Some(before), Some(after)) = (before, after) {
        println!(
            "scopes/memory: {:.0} B resident per scope (RSS {} MiB -> {} MiB)",
            (after - before) as f64 / count as f64,
            before >> 20,
            after >> 20
        );
    }
}
