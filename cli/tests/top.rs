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

/// `--every 0s` was taken, and `top` read its source in a busy loop.
#[test]
fn a_redraw_period_of_zero_is_refused_naming_the_flag() {
    let path = std::env::temp_dir().join(format!("llmgov-top-every-{}.json", std::process::id()));
    std::fs::write(&path, exposed()).unwrap();
    let output =
        Command::new(env!("CARGO_BIN_EXE_llmgov")).args(["top", path.to_str().unwrap(), "--every", "0s"]).output();
    let _ = std::fs::remove_file(&path);
    let output = output.unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("'0s'") && stderr.contains("--every") && stderr.contains("longer than zero"), "{stderr}");
}

/// JSON of neither shape said only "data did not match any variant of
/// untagged enum Exposed".
#[test]
fn json_that_is_not_a_snapshot_says_which_field_is_wrong() {
    let err = llmgov_cli::top::render("{}\n").unwrap_err().to_string();
    assert_eq!(err, "`snapshot` = `{}`: not a governor snapshot: missing field `now_ms`");
    let mut metrics: serde_json::Value = serde_json::from_str(&exposed()).unwrap();
    metrics["snapshot"]["scopes"][0]["limits"][0]["in_use"] = json!("lots");
    let err = llmgov_cli::top::render(&metrics.to_string()).unwrap_err().to_string();
    assert!(err.contains("snapshot.scopes[0].limits[0].in_use: invalid type: string \"lots\""), "{err}");
    // What `JSON.stringify(gov.snapshot())` writes in Node.
    let err = llmgov_cli::top::render(r#"{"nowMs": 5, "admitted": 0, "scopes": []}"#).unwrap_err().to_string();
    assert!(err.contains("missing field `now_ms` (camelCase keys: from Node, write `gov.metricsJson()`)"), "{err}");
}

/// A live `top` ended at the first failed read: an application restarting,
/// or a file caught half-written, closed the view.
#[test]
fn a_live_view_outlives_a_failed_read_and_recovers() {
    let path = std::env::temp_dir().join(format!("llmgov-top-live-{}.json", std::process::id()));
    let source = path.to_str().unwrap().to_owned();
    let good = exposed();
    std::fs::write(&path, &good).unwrap();
    let mut frames = Vec::new();
    let mut waits = 0;
    let result = llmgov_cli::top::watch(
        &source,
        |frame| {
            frames.push(frame.to_owned());
            Ok(frames.len() < 3)
        },
        || {
            waits += 1;
            let next = if waits == 1 { "{\"half\": " } else { good.as_str() };
            std::fs::write(&path, next).unwrap();
        },
    );
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(frames.len(), 3);
    assert!(frames[0].starts_with("llmgov top  t="), "{}", frames[0]);
    assert!(frames[1].starts_with("llmgov top: `snapshot` = `{\"half\":`: not a governor snapshot"), "{}", frames[1]);
    assert!(frames[1].ends_with(&frames[0]), "the last good state is drawn under the error");
    assert_eq!(frames[2], frames[0]);
    // A source that never worked is still an error at once.
    std::fs::write(&path, "garbage").unwrap();
    let never = llmgov_cli::top::watch(&source, |_| Ok(true), || {});
    assert!(never.unwrap_err().to_string().contains("not a governor snapshot"));
    std::fs::remove_file(&path).unwrap();
}

/// A server that is down was reported as "error sending request for url
/// (...)", without the cause; an https:// URL, which this build (no TLS)
/// cannot read, failed the same way though `--help` offered it.
#[test]
fn a_source_that_is_down_or_https_says_why() {
    // A port that was just free: nothing listens there.
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let down = top(&format!("http://127.0.0.1:{port}/metrics.json"));
    assert_eq!(down.status.code(), Some(1));
    let stderr = String::from_utf8(down.stderr).unwrap();
    assert!(stderr.contains("could not fetch it") && stderr.contains("Connection refused"), "{stderr}");

    let https = top("https://127.0.0.1:9/metrics.json");
    assert_eq!(https.status.code(), Some(1));
    let stderr = String::from_utf8(https.stderr).unwrap();
    assert!(stderr.contains("`https://` is not read; give an http:// URL (no TLS) or a file path"), "{stderr}");
}

/// The note named the enforced amount (after the safety margin) as the
/// configured one; a limit still to be discovered (effective 0) was drawn
/// 100% full; never-fits refusals and refusals of no dimension (an open
/// breaker) were left out or printed as "none".
#[test]
fn draws_margins_undiscovered_limits_and_every_refusal() {
    let config = json!({"safety_margin": 0.9, "adaptive": {"decrease": 0.5}, "scopes": {
        "openai/org": {"provider": true, "limits": [{"dimension": "tokens", "amount": 10000, "window": "1m"}]},
        "anthropic/örg": {"provider": true, "limits": [{"dimension": "requests", "window": "1m"}]},
    }});
    let gov = Governor::with_clock(&Config::from_value(config).unwrap(), Arc::new(ManualClock::new(0))).unwrap();
    let openai = gov.route(&["openai/org"]).unwrap();
    let permit = gov.try_acquire(&Request::new(openai).input_tokens(100)).unwrap();
    let body = br#"{"error":{"type":"tokens","code":"rate_limit_exceeded"}}"#;
    let feedback = llmgov::classify_response(429, &[("retry-after", "0")], body, llmgov::ProviderHint::OpenAi, 0);
    gov.report_classified(&permit, &feedback).unwrap();
    assert!(gov.try_acquire(&Request::new(openai).input_tokens(20_000)).is_err(), "never fits");
    let mut metrics: serde_json::Value = serde_json::to_value(gov.metrics()).unwrap();
    metrics["refusals"]
        .as_array_mut()
        .unwrap()
        .push(json!({"dimension": "none", "gateway_decision": "rejected_locally", "count": 2}));
    let text = llmgov_cli::top::render(&metrics.to_string()).unwrap();
    println!("{text}");
    assert!(text.contains("never fit 1"), "{text}");
    assert!(text.contains("other 2") && !text.contains("none 2"), "{text}");
    let tokens = text.lines().find(|l| l.starts_with("openai/org")).unwrap();
    assert!(tokens.contains("/ 4500") && tokens.contains("(configured 10000)"), "{tokens}");
    let unknown = text.lines().find(|l| l.starts_with("anthropic/örg")).unwrap();
    assert!(unknown.contains("0 / ?") && unknown.contains("(limit not yet discovered)"), "{unknown}");
    assert!(!unknown.contains('█') && !unknown.contains('%'), "{unknown}");
    // Paths are padded by characters: every row's dimension column lines up.
    let header = text.lines().find(|l| l.starts_with("scope")).unwrap();
    let at = header.find("dimension").unwrap();
    for (row, dimension) in [(tokens, "tokens"), (unknown, "requests")] {
        let chars_before = row.char_indices().position(|(i, _)| row[i..].starts_with(dimension));
        assert_eq!(chars_before, Some(at), "{row}");
    }
    // A bad `refusals` names its field.
    metrics["refusals"] = json!([{"dimension": 3}]);
    let err = llmgov_cli::top::render(&metrics.to_string()).unwrap_err().to_string();
    assert!(err.contains("refusals[0].dimension: invalid type: integer"), "{err}");
}
