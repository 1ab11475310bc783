//! Property tests over random sequences of acquire, settle, cancel,
//! add_output and clock advances, on the manual clock. Each checks the
//! ledger against what its algorithm allows, from the outside: the log of
//! what was charged and refunded, and when.

use std::sync::Arc;
use std::time::Duration;

use llmgov::{Clock, Dimension, Error, Governor, ManualClock, Permit, PermitState, Request, Usage};
use proptest::prelude::*;
use serde_json::json;

#[derive(Debug, Clone)]
enum Op {
    Acquire {
        input: u64,
        output: u64,
    },
    Settle {
        which: usize,
        input: u64,
        output: u64,
    },
    Cancel {
        which: usize,
    },
    AddOutput {
        which: usize,
        tokens: u64,
    },
    Advance {
        ms: u64,
    },
    /// A provider's answer to permit `which` (or to the route, without permits).
    Answer {
        which: usize,
        status: u16,
        limit: Option<u64>,
        remaining: Option<u64>,
        retry_ms: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..60u64, 0..60u64).prop_map(|(input, output)| Op::Acquire { input, output }),
        2 => (any::<usize>(), 0..60u64, 0..90u64).prop_map(|(which, input, output)| Op::Settle { which, input, output }),
        1 => any::<usize>().prop_map(|which| Op::Cancel { which }),
        1 => (any::<usize>(), 0..40u64).prop_map(|(which, tokens)| Op::AddOutput { which, tokens }),
        3 => (0..4000u64).prop_map(|ms| Op::Advance { ms }),
    ]
}

/// Random ops with provider answers among them: 429s, 5xx, successes,
/// `limit` headers above and below the configured amount, `remaining` counts.
fn op_with_answers() -> impl Strategy<Value = Op> {
    let answer = (
        any::<usize>(),
        prop_oneof![Just(200u16), Just(429), Just(500)],
        proptest::option::of(1..1000u64),
        proptest::option::of(0..1000u64),
        0..5000u64,
    )
        .prop_map(|(which, status, limit, remaining, retry_ms)| Op::Answer {
            which,
            status,
            limit,
            remaining,
            retry_ms,
        });
    prop_oneof![8 => op(), 3 => answer]
}

/// One signed change to a limit's count: `+` at admission and overage,
/// `-` at refund. `at` is when it happened; `slot_at` is the time the ledger
/// books it at (a sliding window books refunds and overage in the
/// admission's slot).
#[derive(Debug, Clone, Copy)]
struct Charge {
    at: u64,
    slot_at: u64,
    amount: i128,
    admission: bool,
}

/// Replays `ops` on a one-scope governor with a `tokens` limit described by
/// `limit`, logging every charge on it. `check` runs after every step.
fn replay(limit: serde_json::Value, ops: &[Op], check: impl FnMut(&Governor, &[Charge], &[Permit])) {
    replay_on(json!({ "limits": [limit] }), ops, check)
}

/// [`replay`] on a scope configured as `scope` (e.g. a provider scope).
fn replay_on(scope: serde_json::Value, ops: &[Op], mut check: impl FnMut(&Governor, &[Charge], &[Permit])) {
    let config = json!({ "permit_ttl": "16s", "scopes": { "p": scope } });
    let clock = Arc::new(ManualClock::new(0));
    let gov = Governor::with_clock(&llmgov::Config::from_value(config).unwrap(), clock.clone()).unwrap();
    let route = gov.route(&["p"]).unwrap();
    let mut permits: Vec<Permit> = Vec::new();
    let mut log: Vec<Charge> = Vec::new();
    for op in ops {
        let now = clock_now(&clock);
        match *op {
            Op::Acquire { input, output } => {
                let req = Request::new(route).input_tokens(input).max_output_tokens(output);
                match gov.try_acquire(&req) {
                    Ok(p) => {
                        // A zero-cost admission takes nothing from this limit, so it
                        // is not held to the limit's bound (debt may exceed it).
                        let amount = (input + output) as i128;
                        log.push(Charge { at: now, slot_at: now, amount, admission: amount > 0 });
                        permits.push(p);
                    }
                    Err(Error::RateLimited { .. } | Error::NeverFits { .. } | Error::CircuitOpen { .. }) => {}
                    Err(e) => panic!("unexpected error {e}"),
                }
            }
            Op::Settle { which, input, output } if !permits.is_empty() => {
                let n = permits.len();
                let p = &mut permits[which % n];
                let before = p.charged();
                if gov.settle(p, Usage::new(input, output)).is_ok() {
                    let delta = (input + output) as i128 - (before.input_tokens + before.output_tokens) as i128;
                    let slot_at = p.acquired_at();
                    log.push(Charge { at: now, slot_at, amount: delta, admission: false });
                }
            }
            Op::Cancel { which } if !permits.is_empty() => {
                let n = permits.len();
                let p = &mut permits[which % n];
                let before = p.charged();
                if gov.cancel(p).is_ok() {
                    let amount = -((before.input_tokens + before.output_tokens) as i128);
                    log.push(Charge { at: now, slot_at: p.acquired_at(), amount, admission: false });
                }
            }
            Op::AddOutput { which, tokens } if !permits.is_empty() => {
                let n = permits.len();
                let p = &mut permits[which % n];
                let before = p.charged().output_tokens;
                if gov.add_output(p, tokens).is_ok() {
                    let amount = (p.charged().output_tokens - before) as i128;
                    log.push(Charge { at: now, slot_at: p.acquired_at(), amount, admission: false });
                }
            }
            Op::Advance { ms } => clock.advance(Duration::from_millis(ms)),
            Op::Answer { which, status, limit, remaining, retry_ms } => {
                let feedback = answer(status, limit, remaining, retry_ms);
                match permits.len() {
                    0 => gov.observe(route, &feedback).map(drop).unwrap(),
                    n => gov.report_classified(&permits[which % n], &feedback).map(drop).unwrap(),
                }
            }
            _ => {}
        }
        check(&gov, &log, &permits);
    }
}

/// A provider's answer, as the classifier reads OpenAI's headers.
fn answer(status: u16, limit: Option<u64>, remaining: Option<u64>, retry_ms: u64) -> llmgov::Classification {
    let mut headers = vec![("retry-after-ms".to_owned(), retry_ms.to_string())];
    headers.extend(limit.map(|l| ("x-ratelimit-limit-tokens".to_owned(), l.to_string())));
    headers.extend(remaining.map(|r| ("x-ratelimit-remaining-tokens".to_owned(), r.to_string())));
    let body: &[u8] =
        if status == 429 { br#"{"error":{"type":"tokens","code":"rate_limit_exceeded"}}"# } else { b"{}" };
    llmgov::classify_response(status, &headers, body, llmgov::ProviderHint::OpenAi, 0)
}

fn clock_now(clock: &ManualClock) -> u64 {
    clock.now()
}

fn tokens_limit(gov: &Governor) -> llmgov::LimitSnapshot {
    let id = gov.scope_id("p").unwrap();
    gov.scope_snapshot(id).unwrap().limit(Dimension::Tokens).unwrap().clone()
}

/// Over any interval ending at the last step, if it was an admission, the
/// bucket took in at most its burst plus the refill over the interval: net
/// of every refund made in it (a refund gives capacity back now, up to the
/// burst; see gcra.rs), in exact integers (taken·W ≤ burst·W + amount·(u−s)),
/// plus 1 ns of rounding per event.
fn assert_within_burst_plus_refill(log: &[Charge], burst: u64, amount: u64, window_ns: u64) {
    let Some(last) = log.last().filter(|c| c.admission) else { return };
    let u = last.at;
    for (i, start) in log.iter().enumerate() {
        let s = start.at;
        let events = &log[i..];
        let taken: i128 = events.iter().map(|c| c.amount).sum();
        let slack = (events.len() as i128 + 2) * amount as i128;
        let bound = burst as i128 * window_ns as i128 + amount as i128 * (u - s) as i128 + slack;
        assert!(
            taken * window_ns as i128 <= bound,
            "took {taken} over [{s}, {u}] with burst {burst}, {amount}/{window_ns}ns"
        );
    }
}

const WINDOWS_MS: [u64; 3] = [1_000, 10_000, 60_000];

/// The routes `requests_only_routes_match_the_general_path` acquires on:
/// a child and its parent, two scopes of one template (t/a made first, so
/// that it is reserved first), and both kinds together.
const ROUTES: [&[&str]; 5] = [&["p/c"], &["t/a"], &["t/b"], &["t/a", "t/b"], &["p/c", "t/b"]];

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Over any interval ending at an admission, a token bucket takes in at
    /// most its burst plus the refill over the interval (net of refunds,
    /// with overage counted against it), and never holds more than its burst.
    #[test]
    fn token_bucket_never_exceeds_burst_plus_refill(
        amount in 20..500u64, window in 0..3usize, burst_pct in 50..200u64,
        ops in proptest::collection::vec(op(), 1..150),
    ) {
        let window_ns = WINDOWS_MS[window] * 1_000_000;
        let burst = (amount * burst_pct / 100).max(1);
        let limit = json!({"dimension": "tokens", "amount": amount, "window": format!("{}ms", WINDOWS_MS[window]), "burst": burst});
        replay(limit, &ops, |gov, log, _| {
            let snap = tokens_limit(gov);
            assert!(snap.available <= burst as i64, "refund created capacity: {snap:?}");
            assert_within_burst_plus_refill(log, burst, amount, window_ns);
        });
    }

    /// On a provider scope, whatever the provider answers (429s and their
    /// cooldowns, AIMD decreases and increases, `limit` headers above or
    /// below the config, `remaining` counts, an open breaker), the bucket
    /// still never admits beyond its configured burst plus refill: feedback
    /// only ever slows it.
    #[test]
    fn provider_feedback_never_lifts_a_configured_bucket(
        amount in 20..500u64, window in 0..3usize, burst_pct in 50..200u64,
        ops in proptest::collection::vec(op_with_answers(), 1..150),
    ) {
        let window_ns = WINDOWS_MS[window] * 1_000_000;
        let burst = (amount * burst_pct / 100).max(1);
        let limit = json!({"dimension": "tokens", "amount": amount, "window": format!("{}ms", WINDOWS_MS[window]), "burst": burst});
        replay_on(json!({"provider": true, "limits": [limit]}), &ops, |gov, log, _| {
            let snap = tokens_limit(gov);
            assert!(snap.available <= burst as i64, "feedback created capacity: {snap:?}");
            assert!(snap.effective_amount.unwrap() <= amount, "above the configured amount: {snap:?}");
            assert_within_burst_plus_refill(log, burst, amount, window_ns);
        });
    }

    /// At every admission, what is attributed to any trailing window (net of
    /// refunds to their admission slots) stays within the amount, and the
    /// window's count equals the net charges.
    #[test]
    fn sliding_window_never_exceeds_amount_in_any_trailing_window(
        amount in 20..500u64, slots in 1..60u32,
        ops in proptest::collection::vec(op(), 1..150),
    ) {
        let window_ns = 60_000_000_000u64;
        let limit = json!({"dimension": "tokens", "amount": amount, "window": "1m", "algorithm": "sliding_window", "slots": slots});
        replay(limit, &ops, |gov, log, _| {
            let snap = tokens_limit(gov);
            assert!(snap.available <= amount as i64);
            // Nothing has aged out of a window longer than the whole run.
            if gov.clock().now() < window_ns {
                let net: i128 = log.iter().map(|c| c.amount).sum();
                assert_eq!(snap.in_use as i128, net, "the window holds exactly the net charges");
            }
            let Some(last) = log.last().filter(|c| c.admission) else { return };
            let u = last.at;
            let in_window: i128 = log.iter().filter(|c| c.slot_at + window_ns > u).map(|c| c.amount).sum();
            assert!(in_window <= amount as i128, "{in_window} in the window ending {u}, amount {amount}");
        });
    }

    /// What a limit reports as reserved is exactly what its pending,
    /// unexpired permits hold (their estimates, raised by streamed output),
    /// and the rest of what is in use is `used`.
    #[test]
    fn reserved_is_what_pending_permits_hold(ops in proptest::collection::vec(op(), 1..200)) {
        let limit = json!({"dimension": "tokens", "amount": 400, "window": "1h", "algorithm": "sliding_window", "slots": 60});
        replay(limit, &ops, |gov, _, permits| {
            let now = gov.clock().now();
            let live = permits.iter().filter(|p| p.state() == PermitState::Pending && now < p.expires_at());
            let held: u64 = live.map(|p| p.charged().input_tokens + p.charged().output_tokens).sum();
            let snap = tokens_limit(gov);
            assert_eq!(snap.reserved, held, "reserved is what the live permits hold");
            assert_eq!(snap.used, snap.in_use - held, "the rest of in_use is used");
        });
    }

    /// In-flight permits never exceed the concurrency limit, and every slot
    /// comes back: by settle or cancel, or at expiry.
    #[test]
    fn concurrency_never_leaks(max in 1..8u64, ops in proptest::collection::vec(op(), 1..200)) {
        let limit = json!({"dimension": "concurrency", "amount": max});
        let config = json!({ "permit_ttl": "16s", "scopes": { "p": { "limits": [limit, {"dimension": "tokens", "amount": 1000, "window": "1m"}] } } });
        let clock = Arc::new(ManualClock::new(0));
        let gov = Governor::with_clock(&llmgov::Config::from_value(config).unwrap(), clock.clone()).unwrap();
        let route = gov.route(&["p"]).unwrap();
        let id = gov.scope_id("p").unwrap();
        let mut permits: Vec<Permit> = Vec::new();
        for op in &ops {
            match *op {
                Op::Acquire { input, output } => {
                    if let Ok(p) = gov.try_acquire(&Request::new(route).input_tokens(input).max_output_tokens(output)) {
                        permits.push(p);
                    }
                }
                Op::Settle { which, input, output } if !permits.is_empty() => {
                    let n = permits.len();
                    let _ = gov.settle(&mut permits[which % n], Usage::new(input, output));
                }
                Op::Cancel { which } if !permits.is_empty() => {
                    let n = permits.len();
                    let _ = gov.cancel(&mut permits[which % n]);
                }
                Op::Advance { ms } => clock.advance(Duration::from_millis(ms)),
                _ => {}
            }
            let now = clock_now(&clock);
            let live = permits.iter().filter(|p| p.state() == PermitState::Pending && now < p.expires_at()).count() as u64;
            let snap = gov.scope_snapshot(id).unwrap();
            let in_flight = snap.limit(Dimension::Concurrency).unwrap().in_use;
            prop_assert!(live <= max);
            prop_assert_eq!(in_flight, live, "the ledger's in-flight count matches the live permits");
            prop_assert_eq!(snap.limit(Dimension::Concurrency).unwrap().reserved, live);
        }
        clock.advance(Duration::from_secs(17));
        let snap = gov.scope_snapshot(id).unwrap();
        prop_assert_eq!(snap.limit(Dimension::Concurrency).unwrap().in_use, 0);
        let unsettled = permits.iter().filter(|p| p.state() == PermitState::Pending).count() as u64;
        prop_assert_eq!(gov.snapshot().expired_permits, unsettled + permits.iter().filter(|p| p.state() == PermitState::Expired).count() as u64);
    }

    /// A refused request takes nothing anywhere: every scope reads as before.
    #[test]
    fn refusal_takes_nothing(
        caps in proptest::collection::vec(5..60u64, 4),
        requests in proptest::collection::vec((proptest::sample::subsequence(vec![0usize, 1, 2, 3], 1..=4), 0..40u64), 1..60),
    ) {
        let scopes: serde_json::Map<String, serde_json::Value> = caps.iter().enumerate().map(|(i, cap)| {
            let limits = json!([{"dimension": "tokens", "amount": cap, "window": "1h"}, {"dimension": "concurrency", "amount": 3 + i}]);
            (format!("s{i}"), json!({"limits": limits}))
        }).collect();
        let config = llmgov::Config::from_value(json!({"scopes": scopes})).unwrap();
        let gov = Governor::with_clock(&config, Arc::new(ManualClock::new(0))).unwrap();
        let mut held = Vec::new();
        for (paths, tokens) in requests {
            let names: Vec<String> = paths.iter().map(|i| format!("s{i}")).collect();
            let route = gov.route(&names).unwrap();
            let before = gov.snapshot();
            match gov.try_acquire(&Request::new(route).input_tokens(tokens)) {
                Ok(p) => held.push(p),
                Err(_) => prop_assert_eq!(gov.snapshot().scopes, before.scopes),
            }
        }
    }

    /// A route whose limits all count requests takes the ledger's short
    /// path (no token counts, only the count booked, a settle changing no
    /// bucket); it must admit, refuse, reserve and expire exactly as the
    /// same scopes do on a route that also charges tokens (the general
    /// path), whatever the tokens. Among
    /// the routes are two scopes of one template, which share their limits.
    #[test]
    fn requests_only_routes_match_the_general_path(
        caps in (1..6u64, 1..6u64, 1..6u64),
        ops in proptest::collection::vec((op(), 0..ROUTES.len()), 1..80),
    ) {
        let config = json!({"permit_ttl": "16s", "scopes": {
            "p": {"limits": [{"dimension": "requests", "amount": caps.0, "window": "1m"}]},
            "p/c": {"limits": [{"dimension": "requests", "amount": caps.1, "window": "10s"}]},
            "t/*": {"limits": [{"dimension": "requests", "amount": caps.2, "window": "20s"}]},
            "x": {"limits": [{"dimension": "tokens", "amount": 1u64 << 40, "window": "1m"}]},
        }});
        let config = llmgov::Config::from_value(config).unwrap();
        let clock = Arc::new(ManualClock::new(0));
        let (short, general) = (
            Governor::with_clock(&config, clock.clone()).unwrap(),
            Governor::with_clock(&config, clock.clone()).unwrap(),
        );
        let routes: Vec<_> = ROUTES
            .iter()
            .map(|paths| (short.route(paths).unwrap(), general.route(&[paths, &["x"][..]].concat()).unwrap()))
            .collect();
        let mut held: Vec<(Permit, Permit)> = Vec::new();
        let snapshot = |gov: &Governor| {
            let s = gov.snapshot();
            let scopes: Vec<_> = s.scopes.into_iter().filter(|scope| scope.path != "x").collect();
            (scopes, s.admitted, s.rate_limited, s.expired_permits)
        };
        for (op, r) in &ops {
            match *op {
                Op::Acquire { input, output } => {
                    let request = |route| Request::new(route).input_tokens(input).max_output_tokens(output);
                    match (short.try_acquire(&request(routes[*r].0)), general.try_acquire(&request(routes[*r].1))) {
                        (Ok(a), Ok(b)) => held.push((a, b)),
                        (Err(a), Err(b)) => prop_assert_eq!(a.to_string(), b.to_string()),
                        (a, b) => prop_assert!(false, "short path {:?}, general path {:?}", a.map(drop), b.map(drop)),
                    }
                }
                Op::Settle { which, input, output } if !held.is_empty() => {
                    let n = held.len();
                    let (a, b) = &mut held[which % n];
                    let usage = Usage::new(input, output);
                    prop_assert_eq!(short.settle(a, usage).is_ok(), general.settle(b, usage).is_ok());
                }
                Op::Cancel { which } if !held.is_empty() => {
                    let n = held.len();
                    let (a, b) = &mut held[which % n];
                    prop_assert_eq!(short.cancel(a).is_ok(), general.cancel(b).is_ok());
                }
                Op::AddOutput { which, tokens } if !held.is_empty() => {
                    let n = held.len();
                    let (a, b) = &mut held[which % n];
                    prop_assert_eq!(short.add_output(a, tokens).is_ok(), general.add_output(b, tokens).is_ok());
                }
                Op::Advance { ms } => clock.advance(Duration::from_millis(ms)),
                _ => {}
            }
            prop_assert_eq!(snapshot(&short), snapshot(&general));
        }
    }
}
