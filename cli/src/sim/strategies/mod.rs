//! The client strategies compared: naive retries (fixed sleep, exponential
//! backoff with full jitter), the seed article's client-side RPM+TPM limiter,
//! and llmgov. Each is a state machine the engine drives.

mod fair;
mod llmgov;
mod retry;
mod seed_limiter;

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::engine::{Client, Cx, Timer};
use super::scenario::{Checked, Strategy};
use super::workload::Job;
use crate::error::CliError;
use crate::provider::{ProviderConfig, ProviderDimension, RejectionKind};

/// Whether waiting and sending again can help.
fn retryable(kind: RejectionKind) -> bool {
    match kind {
        RejectionKind::RateLimited(_)
        | RejectionKind::Concurrency
        | RejectionKind::Overloaded
        | RejectionKind::ServerError => true,
        RejectionKind::QuotaExhausted | RejectionKind::TooLarge(_) | RejectionKind::BadRequest => false,
    }
}

/// A client that keeps its requests in a [`Line`] and lets them through
/// with its own gate: new arrivals and retries join the line, and the
/// gate's timer reopens it.
trait Gated {
    fn line(&mut self) -> &mut Line;
    /// Lets through what the gate allows now.
    fn pump(&mut self, now: u64, cx: &mut Cx) -> Result<(), CliError>;

    fn arrive_gated(&mut self, now: u64, job: usize, cx: &mut Cx) -> Result<(), CliError> {
        if self.line().push(&cx.jobs[job]) {
            self.pump(now, cx)?;
        }
        Ok(())
    }

    fn wake_gated(&mut self, now: u64, timer: Timer, cx: &mut Cx) -> Result<(), CliError> {
        match timer {
            Timer::Retry(job) => self.arrive_gated(now, job, cx),
            Timer::Gate => {
                self.line().timer_fired(now);
                self.pump(now, cx)
            }
        }
    }
}

/// The strategy's name in the table.
pub(crate) fn label(strategy: &Strategy) -> String {
    let s = |ns: u64| humantime::format_duration(std::time::Duration::from_nanos(ns)).to_string();
    let limits = |knows: bool, factor: f64| {
        if !knows {
            " (limits unknown)".to_owned()
        } else if factor == 1.0 {
            String::new()
        } else {
            format!(" (limits x{factor})")
        }
    };
    let retries = |max: Option<u32>| max.map(|m| format!(", {m} retries")).unwrap_or_default();
    match strategy {
        Strategy::FixedSleep { sleep_ns, max_retries } => {
            format!("fixed sleep {}{}", s(*sleep_ns), retries(*max_retries))
        }
        Strategy::Backoff { base_ns, cap_ns, max_retries } => {
            format!("backoff+jitter {}..{}{}", s(*base_ns), s(*cap_ns), retries(*max_retries))
        }
        Strategy::SeedLimiter { knows_limits, factor, .. } => {
            format!("seed RPM+TPM limiter{}", limits(*knows_limits, *factor))
        }
        Strategy::Llmgov { knows_limits, factor, reserve, .. } => {
            format!("llmgov{}{}", limits(*knows_limits, *factor), llmgov::label(*reserve))
        }
        Strategy::LlmgovFair => "llmgov fair queues".to_owned(),
    }
}

/// A client for `strategy`; `index` picks its own random stream, so that
/// adding a strategy does not change the draws of the others. `checked`
/// gives the scheduler its tenants and classes.
pub(crate) fn build(
    strategy: &Strategy,
    checked: &Checked,
    provider: &ProviderConfig,
    seed: u64,
    index: usize,
    jobs: usize,
) -> Result<Box<dyn Client>, CliError> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(index as u64 + 1);
    Ok(match *strategy {
        Strategy::FixedSleep { sleep_ns, max_retries } => {
            Box::new(retry::Retry::new(retry::Policy::Fixed(sleep_ns), max_retries, rng, jobs))
        }
        Strategy::Backoff { base_ns, cap_ns, max_retries } => {
            Box::new(retry::Retry::new(retry::Policy::FullJitter { base_ns, cap_ns }, max_retries, rng, jobs))
        }
        Strategy::SeedLimiter { poll_ns, rpm, tpm, knows_limits, factor } => {
            let (rpm, tpm) = match knows_limits {
                true => (
                    rpm.or_else(|| per_minute(provider, &[ProviderDimension::Requests], factor)),
                    tpm.or_else(|| seed_limiter::provider_tpm(provider, factor)),
                ),
                false => (rpm, tpm),
            };
            Box::new(seed_limiter::SeedLimiter::new(rpm, tpm, poll_ns))
        }
        Strategy::Llmgov { knows_limits, factor, reserve, ref adaptive } => {
            Box::new(llmgov::Llmgov::new(provider, knows_limits, factor, reserve, adaptive.clone(), jobs)?)
        }
        Strategy::LlmgovFair => Box::new(fair::Fair::new(provider, &checked.tenants, &checked.classes, jobs)?),
    })
}

/// The provider's tightest limit on `dimensions` (summed over them), per
/// minute and scaled by `factor`; `None` if it has none.
fn per_minute(provider: &ProviderConfig, dimensions: &[ProviderDimension], factor: f64) -> Option<u64> {
    let limits = provider.compile("provider").ok()?;
    let tightest = |d: ProviderDimension| {
        (limits.iter().filter(|l| l.dimension == d))
            .map(|l| l.amount * 60e9 / l.window_ns as f64)
            .min_by(f64::total_cmp)
    };
    let rates: Vec<f64> = dimensions.iter().filter_map(|&d| tightest(d)).collect();
    (!rates.is_empty()).then(|| ((rates.iter().sum::<f64>() * factor).floor() as u64).max(1))
}

/// What the head of a waiting line may do now.
pub(crate) enum Gate {
    /// Send it.
    Go,
    /// Not before this time.
    Until(u64),
    /// Not before a request in flight finishes.
    Release,
    /// Never: give it up.
    Never,
}

/// Requests waiting their turn, oldest arrival first (there is no fair
/// queue yet: that is a later issue). Only the head is ever tried, and only
/// when something may have changed: a timer at the time it could pass, a
/// release, or its own arrival in an empty line. Nothing polls.
#[derive(Debug, Default)]
pub(crate) struct Line {
    queue: BinaryHeap<Reverse<(u64, usize)>>,
    /// Gate timers set and not yet fired, so that no second timer is set
    /// for a time an earlier one already covers.
    timers: BTreeSet<u64>,
}

impl Line {
    /// Queues a job; true if the line was empty, so no one is waiting on
    /// its behalf and the caller should pump.
    pub fn push(&mut self, job: &Job) -> bool {
        let was_empty = self.queue.is_empty();
        self.queue.push(Reverse((job.arrival, job.id)));
        was_empty
    }

    /// Whether no one waits.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// A gate timer fired at `now`.
    pub fn timer_fired(&mut self, now: u64) {
        self.timers.remove(&now);
    }

    /// Lets through every head `check` passes, until one must wait.
    pub fn pump(
        &mut self,
        now: u64,
        cx: &mut Cx,
        mut check: impl FnMut(&Job) -> Result<Gate, CliError>,
    ) -> Result<(), CliError> {
        let jobs = cx.jobs;
        while let Some(&Reverse((_, id))) = self.queue.peek() {
            match check(&jobs[id])? {
                Gate::Go => cx.send(id),
                Gate::Never => cx.fail(id),
                Gate::Until(at) => {
                    let at = at.max(now + 1);
                    if self.timers.range(..=at).next().is_none() {
                        self.timers.insert(at);
                        cx.at(at, Timer::Gate);
                    }
                    return Ok(());
                }
                // Whoever finishes pumps the line.
                Gate::Release => return Ok(()),
            }
            self.queue.pop();
        }
        Ok(())
    }
}
