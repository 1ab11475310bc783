//! The theoretical lower bound on the makespan, from the provider's limits
//! and the workload alone: no client, however clever, finishes sooner.
//!
//! For each limit, `C` is the total the workload is charged on it as the
//! provider counts (after any reconciliation), `s_min` the shortest service
//! time and `d` the one-way network delay (an answer takes `d` to come back):
//!
//! - token bucket holding `B`, refilling `r` per ns: the last admission comes
//!   no sooner than `(C - B) / r`, so the makespan is at least
//!   `(C - B) / r + s_min + d` (when `C > B`);
//! - sliding window of `A` per `W`: each window `[kW, (k+1)W)` admits at most
//!   `A`, so at least `(ceil(C / A) - 1) × W + s_min + d`;
//! - a pool that starts exhausted (`chaos.start_exhausted`) has no burst: a
//!   bucket holds `B = 0`, and a window's first `W` admits nothing, so
//!   `ceil(C / A) × W + s_min + d`;
//! - concurrency `c`: at least the sum of service times ÷ `c`;
//! - arrivals: no request ends before its arrival plus `2d` plus its service
//!   time.
//!
//! The bound is the largest. Service times leave out random latency spikes
//! (they only lengthen), and limits are taken before any chaos tightening.
//! A provider charging actual usage (`charging = "actual"`) lands its token
//! charges at completion, so up to `c` requests in flight at the last
//! admission may still be uncharged: their largest charges are left out of
//! `C` (all of them without a concurrency limit: then tokens give no bound).

use std::time::Duration;

use serde::Serialize;

use super::workload::Job;
use crate::error::CliError;
use crate::provider::{Charging, CompiledLimit, Enforcement, LatencyConfig, ProviderConfig, ProviderDimension};

/// One limit's bound.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BoundTerm {
    /// The limit, e.g. `tokens/1m`, `concurrency`, `arrivals`.
    pub limit: String,
    /// The makespan it allows at best, in seconds.
    pub seconds: f64,
    /// How it was worked out.
    pub detail: String,
}

/// The lower bound and every limit's term.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Bound {
    /// The bound, in seconds: the largest term.
    pub seconds: f64,
    /// The term that sets it.
    pub binding: String,
    /// Every term, in the provider's limit order, then concurrency and arrivals.
    pub terms: Vec<BoundTerm>,
}

/// The token limit goodput is measured against.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TokenLimit {
    /// The limit, e.g. `tokens/1m`.
    pub limit: String,
    /// What it counts.
    #[serde(skip)]
    pub dimension: ProviderDimension,
    /// Its amount per minute.
    pub per_minute: f64,
}

/// How long the provider takes to serve `job`, without spikes.
pub(crate) fn service_ns(latency: &LatencyConfig, job: &Job) -> f64 {
    let after_first = job.output_tokens().saturating_sub(1) as f64;
    (latency.ttft_ms + latency.ms_per_output_token * after_first) * 1e6
}

/// What `job` finally costs on a `dimension` limit, as the provider counts.
pub(crate) fn charge(charging: Charging, dimension: ProviderDimension, job: &Job) -> f64 {
    let cost = match (charging, dimension) {
        (_, ProviderDimension::Requests) => 1,
        (Charging::Openai, ProviderDimension::Tokens) => job.max_tokens.max(job.prompt_estimate()),
        (Charging::Openai, ProviderDimension::InputTokens) => job.prompt_estimate(),
        (Charging::Openai, ProviderDimension::OutputTokens) => job.max_tokens,
        (_, ProviderDimension::Tokens) => job.input_tokens.saturating_add(job.output_tokens()),
        (_, ProviderDimension::InputTokens) => job.input_tokens,
        (_, ProviderDimension::OutputTokens) => job.output_tokens(),
    };
    cost as f64
}

/// The earliest the last admission can come on `limit` for a total charge
/// of `total`, and how that was worked out. A pool that starts exhausted has
/// no burst to spend: its bucket holds `B = 0`, and its first window admits
/// nothing, so every one of `ceil(C / A)` windows comes after it.
fn last_admission(limit: &CompiledLimit, total: f64, exhausted: bool) -> (f64, String) {
    let window = humantime::format_duration(Duration::from_nanos(limit.window_ns));
    match limit.algorithm {
        Enforcement::TokenBucket => {
            let per_ns = limit.amount / limit.window_ns as f64;
            let burst = if exhausted { 0.0 } else { limit.amount };
            let how = format!("(C - B) / r + s_min + d: C = {total:.0}, B = {burst}, r = {}/{window}", limit.amount);
            ((total - burst).max(0.0) / per_ns, how)
        }
        Enforcement::SlidingWindow if exhausted => {
            let windows = if total > 0.0 { (total / limit.amount).ceil() } else { 0.0 };
            let how = format!(
                "ceil(C / A) W + s_min + d (the first window used up): C = {total:.0}, A = {}, W = {window}",
                limit.amount
            );
            (windows * limit.window_ns as f64, how)
        }
        Enforcement::SlidingWindow => {
            let windows = ((total / limit.amount).ceil() - 1.0).max(0.0);
            let how = format!("(ceil(C / A) - 1) W + s_min + d: C = {total:.0}, A = {}, W = {window}", limit.amount);
            (windows * limit.window_ns as f64, how)
        }
    }
}

/// Each limit's term, the binding token limit, then concurrency and arrivals.
pub(crate) fn lower_bound(
    provider: &ProviderConfig,
    network_ns: u64,
    jobs: &[Job],
) -> Result<(Bound, Option<TokenLimit>), CliError> {
    let d = network_ns as f64;
    let limits = provider.compile("provider")?;
    let charging = provider.charging();
    let services: Vec<f64> = jobs.iter().map(|j| service_ns(&provider.latency, j)).collect();
    let min_service = services.iter().copied().fold(f64::INFINITY, f64::min).max(0.0);
    let mut terms = Vec::new();
    let mut token_limit: Option<(f64, TokenLimit)> = None;
    for limit in &limits {
        let mut charges: Vec<f64> = jobs.iter().map(|j| charge(charging, limit.dimension, j)).collect();
        if charging == Charging::Actual && limit.dimension != ProviderDimension::Requests {
            // Charged at completion: the largest `c` may land after the last admission.
            charges.sort_by(|a, b| b.total_cmp(a));
            let in_flight = provider.concurrency.map_or(charges.len(), |c| (c as usize).min(charges.len()));
            charges.drain(..in_flight);
        }
        // `+ 0.0`: an empty float sum is -0.0, which would print as "-0".
        let total: f64 = charges.iter().sum::<f64>() + 0.0;
        let window = humantime::format_duration(Duration::from_nanos(limit.window_ns));
        let (last_admission, detail) = last_admission(limit, total, provider.chaos.start_exhausted);
        let name = format!("{}/{window}", limit.dimension.as_str());
        let seconds = (last_admission + min_service + d) / 1e9;
        if limit.dimension != ProviderDimension::Requests
            && token_limit.as_ref().is_none_or(|(best, _)| seconds > *best)
        {
            let per_minute = limit.amount * 60e9 / limit.window_ns as f64;
            token_limit = Some((seconds, TokenLimit { limit: name.clone(), dimension: limit.dimension, per_minute }));
        }
        terms.push(BoundTerm { limit: name, seconds, detail });
    }
    if let Some(c) = provider.concurrency {
        let seconds = services.iter().sum::<f64>() / c as f64 / 1e9;
        terms.push(BoundTerm { limit: "concurrency".into(), seconds, detail: format!("sum of service times / {c}") });
    }
    let last_end = jobs.iter().zip(&services).map(|(j, s)| j.arrival as f64 + 2.0 * d + s).fold(0.0, f64::max);
    let detail = "max of arrival + 2d + service time".to_owned();
    terms.push(BoundTerm { limit: "arrivals".into(), seconds: last_end / 1e9, detail });
    let binding = terms.iter().max_by(|a, b| a.seconds.total_cmp(&b.seconds)).expect("arrivals is always a term");
    let (seconds, binding) = (binding.seconds, binding.limit.clone());
    Ok((Bound { seconds, binding, terms }, token_limit.map(|(_, t)| t)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jobs(n: usize) -> Vec<Job> {
        let job = |id| Job {
            id,
            arrival: 0,
            class: 0,
            tenant: 0,
            input_tokens: 1000,
            prompt_chars: 4000,
            max_tokens: 100,
            desired_output: 51,
        };
        (0..n).map(job).collect()
    }

    fn provider(algorithm: &str) -> ProviderConfig {
        crate::error::parse_toml(&format!(
            "shape = \"openai\"\nlatency = {{ ttft_ms = 100, ms_per_output_token = 10 }}\n\
             limits = [{{ dimension = \"tokens\", amount = 1000, window = \"1m\", algorithm = \"{algorithm}\" }}]"
        ))
        .unwrap()
    }

    #[test]
    fn a_token_bucket_bounds_by_what_exceeds_its_burst() {
        // 10 requests charged max(100, 4000 / 4) = 1000 each; 1000 at once,
        // then 1000 a minute: the last admission at 9 min, then 0.6 s of
        // service and 10 ms of network.
        let (bound, token_limit) = lower_bound(&provider("token_bucket"), 10_000_000, &jobs(10)).unwrap();
        assert_eq!(bound.binding, "tokens/1m");
        assert!((bound.seconds - (540.0 + 0.6 + 0.01)).abs() < 1e-9, "{bound:?}");
        assert_eq!(token_limit.unwrap().per_minute, 1000.0);
    }

    #[test]
    fn a_sliding_window_bounds_by_whole_windows_and_arrivals_by_service() {
        let (bound, _) = lower_bound(&provider("sliding_window"), 10_000_000, &jobs(10)).unwrap();
        assert!((bound.seconds - (540.0 + 0.61)).abs() < 1e-9, "{bound:?}");
        let (bound, _) = lower_bound(&provider("sliding_window"), 10_000_000, &jobs(1)).unwrap();
        assert_eq!(bound.binding, "arrivals");
        assert!((bound.seconds - 0.62).abs() < 1e-9, "{bound:?}");
    }

    #[test]
    fn a_pool_that_starts_exhausted_has_no_burst_to_spend() {
        for algorithm in ["token_bucket", "sliding_window"] {
            let mut exhausted = provider(algorithm);
            exhausted.chaos.start_exhausted = true;
            // 10 × 1000 tokens from an empty pool: 10 whole minutes of refill.
            let (bound, _) = lower_bound(&exhausted, 10_000_000, &jobs(10)).unwrap();
            assert!((bound.seconds - (600.0 + 0.61)).abs() < 1e-9, "{algorithm}: {bound:?}");
        }
    }
}
