//! `llmgov top`: a governor's live state in the terminal. It reads what an
//! application exposes — the JSON of `Governor::metrics()` (every binding
//! has it), or of a bare `snapshot()` — from a file or an HTTP endpoint, and
//! draws per scope and limit a utilisation bar (█ used by settled requests,
//! ▒ reserved by pending ones), with the counters, refusals by dimension,
//! retry amplification and the queue depths.

use std::fmt::Write as _;
use std::path::Path;

use serde::Deserialize;

use crate::CliError;

/// What `top` reads of a snapshot: only what it draws.
#[derive(Debug, Deserialize)]
struct Snapshot {
    now_ms: u64,
    admitted: u64,
    rate_limited: u64,
    #[serde(default)]
    never_fits: u64,
    #[serde(default)]
    circuit_open: u64,
    admitted_then_provider_rejected: u64,
    expired_permits: u64,
    scopes: Vec<Scope>,
}

#[derive(Debug, Deserialize)]
struct Scope {
    path: String,
    limits: Vec<Limit>,
    #[serde(default)]
    breaker: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Limit {
    dimension: String,
    /// Enforced, after the safety margin.
    amount: u64,
    /// As configured (absent from snapshots of older versions).
    #[serde(default)]
    configured_amount: Option<u64>,
    /// Enforced now on a provider scope; 0 while still to be discovered.
    #[serde(default)]
    effective_amount: Option<u64>,
    window_ms: Option<u64>,
    in_use: u64,
    /// Held by pending permits (absent from snapshots of older versions).
    #[serde(default)]
    reserved: u64,
}

#[derive(Debug, Deserialize)]
struct Refusal {
    dimension: String,
    gateway_decision: String,
    count: u64,
}

#[derive(Debug, Deserialize)]
struct Queues {
    classes: Vec<Class>,
}

#[derive(Debug, Deserialize)]
struct Class {
    class: String,
    depth: u64,
    oldest_wait_ms: u64,
}

/// `metrics()`; `{"snapshot", "queues"}` alone is read too.
#[derive(Debug, Deserialize)]
struct Metrics {
    snapshot: Snapshot,
    queues: Queues,
    #[serde(default)]
    refusals: Vec<Refusal>,
    #[serde(default)]
    retry_amplification: Option<f64>,
}

/// Either shape an application may expose.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Exposed {
    Metrics(Metrics),
    Plain(Snapshot),
}

const BAR: usize = 24;

/// Reads the state from `source`: an `http://` URL or a file.
pub fn fetch(source: &str) -> Result<String, CliError> {
    if source.starts_with("http://") {
        let response = reqwest::blocking::get(source)
            .and_then(|r| r.error_for_status())
            .map_err(|e| CliError::field("source", source, format!("could not fetch it: {}", with_causes(&e))))?;
        return response
            .text()
            .map_err(|e| CliError::field("source", source, format!("could not read it: {}", with_causes(&e))));
    }
    if let Some((scheme, _)) = source.split_once("://").filter(|(scheme, _)| !scheme.contains('/')) {
        // The command is built without TLS: metrics are read from the
        // application's own machine.
        let reason = format!("`{scheme}://` is not read; give an http:// URL (no TLS) or a file path");
        return Err(CliError::field("source", source, reason));
    }
    std::fs::read_to_string(Path::new(source))
        .map_err(|e| CliError::field("source", source, format!("could not read it: {e}")))
}

/// An error and what caused it: reqwest's own message ("error sending
/// request for url") leaves out why ("Connection refused").
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        let more = e.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        cause = e.source();
    }
    text
}

/// Draws the state in `json` as text: the counters, the refusals, a row per
/// scope and limit, and the queues.
pub fn render(json: &str) -> Result<String, CliError> {
    let exposed: Exposed = serde_json::from_str(json).map_err(|e| {
        let reason = format!("not a governor snapshot: {}", why_not(json).unwrap_or_else(|| e.to_string()));
        CliError::field("snapshot", truncate(json.trim()), reason)
    })?;
    let (snapshot, queues, refusals, amplification) = match exposed {
        Exposed::Metrics(Metrics { snapshot, queues, refusals, retry_amplification }) => {
            (snapshot, Some(queues), refusals, retry_amplification)
        }
        Exposed::Plain(snapshot) => (snapshot, None, Vec::new(), None),
    };
    let s = &snapshot;
    let mut out = format!(
        "llmgov top  t={:.1}s  admitted {}  rate limited {}  never fit {}  breaker refusals {}  provider 429s {}  expired {}\n",
        s.now_ms as f64 / 1000.0,
        s.admitted,
        s.rate_limited,
        s.never_fits,
        s.circuit_open,
        s.admitted_then_provider_rejected,
        s.expired_permits
    );
    if !refusals.is_empty() || amplification.is_some() {
        out += &refusals_line(&refusals, amplification.unwrap_or(1.0));
    }
    out += &scope_rows(&s.scopes);
    if let Some(queues) = queues {
        out += &queues_line(&queues);
    }
    Ok(out)
}

/// Why JSON that is not either shape is not: serde's untagged enums say
/// only "did not match any variant", so the shape it looks like (metrics if
/// it has a `snapshot` key, else a bare snapshot) is read again for its
/// error, with the path of the field at fault.
fn why_not(json: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(json).ok()?;
    let error = if value.get("snapshot").is_some() {
        serde_path_to_error::deserialize::<_, Metrics>(value).err()?
    } else {
        serde_path_to_error::deserialize::<_, Snapshot>(value).err()?
    };
    let why = match error.path().to_string().as_str() {
        "." => error.inner().to_string(),
        path => format!("{path}: {}", error.inner()),
    };
    // Node's `snapshot()` and `metrics()` objects are camelCase.
    let camel = json.contains("\"nowMs\"") || json.contains("\"inUse\"");
    Some(if camel { format!("{why} (camelCase keys: from Node, write `gov.metricsJson()`)") } else { why })
}

/// Draws `source` through `draw` until `draw` says nobody reads any more,
/// calling `wait` between frames. The first read must succeed (a source
/// that never worked is a mistake to report); after that a failed read (the
/// application restarting, a half-written file) is drawn as an error line
/// above the last good frame, and reading goes on.
pub fn watch(
    source: &str,
    mut draw: impl FnMut(&str) -> Result<bool, CliError>,
    mut wait: impl FnMut(),
) -> Result<(), CliError> {
    let read = || fetch(source).and_then(|json| render(&json));
    let mut last_good = read()?;
    let mut frame = last_good.clone();
    while draw(&frame)? {
        wait();
        frame = match read() {
            Ok(fresh) => {
                last_good = fresh;
                last_good.clone()
            }
            Err(e) => format!("llmgov top: {e}; showing the last state read\n{last_good}"),
        };
    }
    Ok(())
}

/// Refusals by dimension on each side of the gateway, and retry amplification.
fn refusals_line(refusals: &[Refusal], amplification: f64) -> String {
    let by = |decision: &str| {
        let named: Vec<String> = refusals
            .iter()
            .filter(|r| r.gateway_decision == decision && r.count > 0)
            // Local refusals that name no dimension: an open breaker, a
            // full queue, a deadline.
            .map(|r| format!("{} {}", if r.dimension == "none" { "other" } else { &r.dimension }, r.count))
            .collect();
        if named.is_empty() {
            "none".to_owned()
        } else {
            named.join(", ")
        }
    };
    format!(
        "refused here: {}  by the provider: {}  retry amplification {amplification:.2}\n",
        by("rejected_locally"),
        by("admitted_then_provider_rejected")
    )
}

/// A header, then a row per scope and limit with its utilisation bar, and a
/// line for each breaker that is not closed.
fn scope_rows(scopes: &[Scope]) -> String {
    // Formatting pads by characters, so paths are measured in them too.
    let name_width = scopes.iter().map(|sc| sc.path.chars().count()).max().unwrap_or(5).max(5);
    let mut out = format!(
        "{:name_width$}  {:<13} {:>7}  {:>21}  {:>9}  utilisation (█ used ▒ reserved)\n",
        "scope", "dimension", "window", "in use / limit", "reserved"
    );
    for scope in scopes {
        for limit in &scope.limits {
            let window = limit.window_ms.map_or_else(|| "-".to_owned(), format_window);
            let (in_use, bar) = limit_cells(limit);
            let _ = writeln!(
                out,
                "{:name_width$}  {:<13} {:>7}  {:>21}  {:>9}  {bar}",
                scope.path, limit.dimension, window, in_use, limit.reserved
            );
        }
        if let Some(state) = scope.breaker.as_deref().filter(|s| *s != "closed") {
            let _ = writeln!(out, "{:name_width$}  breaker {state}", "");
        }
    }
    out
}

/// A limit's "in use / limit" cell and its bar, share and note. A limit
/// left to discovery that no answer has named yet (effective amount 0) has
/// no share to draw.
fn limit_cells(limit: &Limit) -> (String, String) {
    let effective = limit.effective_amount.unwrap_or(limit.amount);
    if effective == 0 {
        let bar = "░".repeat(BAR) + "     (limit not yet discovered)";
        return (format!("{} / ?", limit.in_use), bar);
    }
    let share_of = |n: u64| n as f64 / effective as f64;
    let cells = |share: f64| ((share.clamp(0.0, 1.0) * BAR as f64).round() as usize).min(BAR);
    let share = share_of(limit.in_use);
    let (filled, used) = (cells(share), cells(share_of(limit.in_use.saturating_sub(limit.reserved))));
    let note = match limit.effective_amount {
        Some(e) if e != limit.amount => format!("  (configured {})", limit.configured_amount.unwrap_or(limit.amount)),
        _ => String::new(),
    };
    let bar = "█".repeat(used) + &"▒".repeat(filled - used) + &"░".repeat(BAR - filled);
    (format!("{} / {effective}", limit.in_use), format!("{bar} {:>4.0}%{note}", share * 100.0))
}

/// Each class's queue depth and oldest waiter.
fn queues_line(queues: &Queues) -> String {
    let classes: Vec<String> = queues
        .classes
        .iter()
        .map(|c| {
            let name = if c.class.is_empty() { "default" } else { &c.class };
            format!("{name} {} waiting (oldest {:.1}s)", c.depth, c.oldest_wait_ms as f64 / 1000.0)
        })
        .collect();
    format!("queues: {}\n", if classes.is_empty() { "none".to_owned() } else { classes.join(" | ") })
}

fn format_window(ms: u64) -> String {
    match ms {
        ms if ms % 86_400_000 == 0 => format!("{}d", ms / 86_400_000),
        ms if ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
        ms if ms % 60_000 == 0 => format!("{}m", ms / 60_000),
        ms if ms % 1000 == 0 => format!("{}s", ms / 1000),
        ms => format!("{ms}ms"),
    }
}

fn truncate(text: &str) -> String {
    text.chars().take(60).collect()
}
