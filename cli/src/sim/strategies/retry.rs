//! Naive clients: every request is sent as soon as it arrives, and a
//! refused one sleeps and is sent again. This is what most code does.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::retryable;
use crate::error::CliError;
use crate::provider::{ProviderUsage, Rejected};
use crate::sim::engine::{Client, Cx, Timer};

/// How long to sleep after the `n`th refusal (from 0).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Policy {
    /// Always the same.
    Fixed(u64),
    /// Uniform in `[0, min(cap, base × 2^n))`: AWS's "full jitter".
    FullJitter { base_ns: u64, cap_ns: u64 },
}

/// Sends at once and retries after a sleep, up to `max_retries`.
pub(crate) struct Retry {
    policy: Policy,
    max_retries: Option<u32>,
    rng: ChaCha8Rng,
    retries: Vec<u32>,
}

impl Retry {
    pub fn new(policy: Policy, max_retries: Option<u32>, rng: ChaCha8Rng, jobs: usize) -> Self {
        Retry { policy, max_retries, rng, retries: vec![0; jobs] }
    }

    fn sleep(&mut self, n: u32) -> u64 {
        match self.policy {
            Policy::Fixed(ns) => ns,
            Policy::FullJitter { base_ns, cap_ns } => {
                let ceiling = base_ns.saturating_mul(1u64 << n.min(40)).min(cap_ns);
                self.rng.random_range(0..ceiling.max(1))
            }
        }
    }
}

impl Client for Retry {
    fn arrive(&mut self, _now: u64, job: usize, cx: &mut Cx) -> Result<(), CliError> {
        cx.send(job);
        Ok(())
    }

    fn wake(&mut self, _now: u64, timer: Timer, cx: &mut Cx) -> Result<(), CliError> {
        if let Timer::Retry(job) = timer {
            cx.send(job);
        }
        Ok(())
    }

    fn rejected(&mut self, now: u64, job: usize, rejected: &Rejected, cx: &mut Cx) -> Result<(), CliError> {
        let n = self.retries[job];
        if !retryable(rejected.kind) || self.max_retries.is_some_and(|max| n >= max) {
            cx.fail(job);
            return Ok(());
        }
        self.retries[job] = n + 1;
        // A zero draw would resend within the same instant: wait at least 1 ns.
        let sleep = self.sleep(n).max(1);
        cx.at(now.saturating_add(sleep), Timer::Retry(job));
        Ok(())
    }

    fn finished(
        &mut self,
        _now: u64,
        _job: usize,
        _usage: ProviderUsage,
        _headers: &[(String, String)],
        _cx: &mut Cx,
    ) -> Result<(), CliError> {
        Ok(())
    }
}
