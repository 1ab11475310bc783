//! `llmgov top` draws a governor's snapshot, read from a file or an HTTP
//! endpoint, as an application would expose it.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::Command;
use std::sync::Arc;

use llmgov::{Config, Governor, ManualClock, Request};
use serde_json::json;

/// A governor with a provider scope at half its tokens, AIMD applied, and
/// a tenant; its metrics as an application would serve them.
fn exposed() -> String {
    let config = json!({"adaptive": {"decrease": 0.5}, "scopes": {
        "openai/org": {"provider": true, "limits": [{"dimension": "tokens", "amount": 10000, "window": "1m"}]},
        "tenants/*": {"limits": [{"dimension": "concurrency", "amount": 4}]},
    }});
    let gov = Governor::with_clock(&Config::from_value(config).unwrap(), Arc::new(ManualClock::new(0))).unwrap();
    let route = gov.route(&["tenants/acme", "openai/org"]).unwrap();
    let permit = gov.try_acquire(&Request::new(route).input_tokens(2500)).unwrap();
    let body = br#"{"error":{"type":"tokens","code":"rate_limit_exceeded"}}"#;
    let feedback = llmgov::classify_response(429, &[("retry-after", "0")], body, llmgov::ProviderHint::OpenAi, 0);
    gov.report_classified(&permit, &feedback).unwrap();
    serde_json::to_string(&gov.metrics()).unwrap()
}

fn top(source: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_llmgov")).args(["top", source, "--once"]).output().unwrap()
}

#[test]
fn draws_each_limit_with_its_effective_amount_and_the_counters() {
    let path = std::env::temp_dir().join(format!("llmgov-top-{}.json", std::process::id()));
    std::fs::write(&path, exposed()).unwrap();
    let output = top(path.to_str().unwrap());
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let text = String::from_utf8(output.stdout).unwrap();
    println!("{text}");
    assert!(text.contains("admitted 1") && text.contains("provider 429s 1"), "{text}");
    // No request has succeeded yet: amplification is 1.0 until one does.
    assert!(text.contains("refused here: none  by the provider: tokens 1  retry amplification 1.00"), "{text}");
    let tokens = text.lines().find(|l| l.starts_with("openai/org")).unwrap();
    assert!(
        tokens.contains("5000 / 5000") && tokens.contains("100%") && tokens.contains("(configured 10000)"),
        "{tokens}"
    );
    // Half of it is the pending permit's reservation, half the cooldown's.
    assert!(tokens.contains(&format!("2500  {}{} ", "█".repeat(12), "▒".repeat(12))), "{tokens}");
    let slots = text.lines().find(|l| l.starts_with("tenants/acme")).unwrap();
    assert!(slots.contains("1 / 4") && slots.contains(" 25%") && slots.contains("  1  ▒▒▒▒▒▒░"), "{slots}");
    assert!(text.contains("queues: none"), "{text}");
}

#[test]
fn reads_a_bare_snapshot_too() {
    let path = std::env::temp_dir().join(format!("llmgov-top-bare-{}.json", std::process::id()));
    let metrics: serde_json::Value = serde_json::from_str(&exposed()).unwrap();
    std::fs::write(&path, metrics["snapshot"].to_string()).unwrap();
    let output = top(path.to_str().unwrap());
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(
        text.contains("openai/org") && !text.contains("queues:") && !text.contains("retry amplification"),
        "{text}"
    );
}

#[test]
fn reads_an_http_endpoint() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/snapshot", listener.local_addr().unwrap());
    let body = exposed();
    let server = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut request = [0u8; 1024];
        let _ = stream.read(&mut request).unwrap();
        let head =
            format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n", body.len());
        stream.write_all(head.as_bytes()).unwrap();
        stream.write_all(body.as_bytes()).unwrap();
    });
    let output = top(&url);
    // Checked before joining: a `top` that never connected would leave the
    // server in `accept` for ever.
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    server.join().unwrap();
    assert!(String::from_utf8(output.stdout).unwrap().contains("openai/org"));
}

#[test]
fn a_source_that_is_not_a_snapshot_is_a_clear_error() {
    let path = std::env::temp_dir().join(format!("llmgov-top-bad-{}.json", std::process::id()));
    std::fs::write(&path, r#"{"hello": 1}"#).unwrap();
    let output = top(path.to_str().unwrap());
    assert!(!output.status.success());
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("`snapshot`") && stderr.contains("not a governor snapshot"), "{stderr}");
    let missing = top("/nonexistent/llmgov.json");
    assert!(String::from_utf8(missing.stderr).unwrap().contains("could not read it"));
}
