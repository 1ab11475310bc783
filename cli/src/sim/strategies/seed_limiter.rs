//! The seed article's `TokenAwareRateLimiter`, as written: a deque of
//! `(timestamp, estimated tokens)` over the last 60 s, where the estimate is
//! the prompt's tokens plus `max_output_tokens`; `allow()` passes if fewer
//! than RPM requests and no more than TPM tokens would be in the window.
//! Nothing is reconciled with actual usage. Requests wait in arrival order
//! and the head calls `allow()` every `poll` until it passes, as a dispatch
//! loop `while not limiter.allow(...): sleep(poll)` does.

use std::collections::VecDeque;

use super::{per_minute, retryable, Gate, Gated, Line};
use crate::error::CliError;
use crate::provider::{ProviderConfig, ProviderDimension, ProviderUsage, Rejected};
use crate::sim::engine::{Client, Cx, Timer};
use crate::sim::workload::Job;

/// The article's window.
const WINDOW_NS: u64 = 60_000_000_000;

/// The TPM a user of the article's class would configure: the provider's
/// tokens limit, or else its input and output limits together.
pub(crate) fn provider_tpm(provider: &ProviderConfig, factor: f64) -> Option<u64> {
    per_minute(provider, &[ProviderDimension::Tokens], factor)
        .or_else(|| per_minute(provider, &[ProviderDimension::InputTokens, ProviderDimension::OutputTokens], factor))
}

/// The limiter and its dispatch line.
pub(crate) struct SeedLimiter {
    rpm: Option<u64>,
    tpm: Option<u64>,
    poll_ns: u64,
    history: VecDeque<(u64, u64)>,
    total: u64,
    line: Line,
}

impl SeedLimiter {
    /// `None` limits nothing (the limits are unknown).
    pub fn new(rpm: Option<u64>, tpm: Option<u64>, poll_ns: u64) -> Self {
        SeedLimiter { rpm, tpm, poll_ns, history: VecDeque::new(), total: 0, line: Line::default() }
    }

    fn passes(&self, len: usize, total: u64, estimate: u64) -> bool {
        self.rpm.is_none_or(|rpm| (len as u64) < rpm) && self.tpm.is_none_or(|tpm| total + estimate <= tpm)
    }

    /// The article's `_cleanup`: entries older than 60 s leave the window.
    fn cleanup(&mut self, now: u64) {
        while self.history.front().is_some_and(|&(t, _)| now - t > WINDOW_NS) {
            let (_, tokens) = self.history.pop_front().expect("checked non-empty");
            self.total -= tokens;
        }
    }

    /// `allow()` for the head; when it refuses, the first poll at which it
    /// can pass unless others are admitted first. Skipping the polls before
    /// that changes nothing, since the window only empties with time.
    fn check(&mut self, now: u64, job: &Job) -> Gate {
        let estimate = job.input_tokens + job.max_tokens;
        if self.tpm.is_some_and(|tpm| estimate > tpm) {
            // The article's loop would wait forever: count it as given up.
            return Gate::Never;
        }
        self.cleanup(now);
        if self.passes(self.history.len(), self.total, estimate) {
            self.history.push_back((now, estimate));
            self.total += estimate;
            return Gate::Go;
        }
        let (mut len, mut total) = (self.history.len(), self.total);
        let mut passes_at = now;
        for &(t, tokens) in &self.history {
            (len, total) = (len - 1, total - tokens);
            if self.passes(len, total, estimate) {
                // `now - t > 60 s` first holds 1 ns after the window.
                passes_at = t + WINDOW_NS + 1;
                break;
            }
        }
        let polls = (passes_at - now).div_ceil(self.poll_ns).max(1);
        Gate::Until(now.saturating_add(polls.saturating_mul(self.poll_ns)))
    }
}

impl Gated for SeedLimiter {
    fn line(&mut self) -> &mut Line {
        &mut self.line
    }

    fn pump(&mut self, now: u64, cx: &mut Cx) -> Result<(), CliError> {
        let mut line = std::mem::take(&mut self.line);
        let result = line.pump(now, cx, |job| Ok(self.check(now, job)));
        self.line = line;
        result
    }
}

impl Client for SeedLimiter {
    fn arrive(&mut self, now: u64, job: usize, cx: &mut Cx) -> Result<(), CliError> {
        self.arrive_gated(now, job, cx)
    }

    fn wake(&mut self, now: u64, timer: Timer, cx: &mut Cx) -> Result<(), CliError> {
        self.wake_gated(now, timer, cx)
    }

    /// The article's limiter has no retry of its own: a refused request
    /// sleeps one poll and goes through `allow()` again (its first estimate
    /// stays in the window: nothing is reconciled).
    fn rejected(&mut self, now: u64, job: usize, rejected: &Rejected, cx: &mut Cx) -> Result<(), CliError> {
        if retryable(rejected.kind) {
            cx.at(now.saturating_add(self.poll_ns), Timer::Retry(job));
        } else {
            cx.fail(job);
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000_000;

    fn job(input_tokens: u64, max_tokens: u64) -> Job {
        Job { id: 0, arrival: 0, class: 0, tenant: 0, input_tokens, prompt_chars: 0, max_tokens, desired_output: 1 }
    }

    #[test]
    fn it_counts_prompt_plus_max_tokens_for_60_seconds_and_polls() {
        let mut limiter = SeedLimiter::new(Some(2), Some(1000), SECOND);
        assert!(matches!(limiter.check(0, &job(500, 100)), Gate::Go));
        // 600 + 600 > 1000 until the first entry leaves, 1 ns after 60 s:
        // the next poll on the 1 s grid is at 61 s.
        assert!(matches!(limiter.check(0, &job(500, 100)), Gate::Until(at) if at == 61 * SECOND));
        assert!(matches!(limiter.check(SECOND / 2, &job(300, 100)), Gate::Go));
        // Two in the window: the RPM refuses even a tiny one.
        assert!(matches!(limiter.check(SECOND, &job(1, 1)), Gate::Until(at) if at == 61 * SECOND));
        assert!(matches!(limiter.check(61 * SECOND, &job(1, 1)), Gate::Go));
        assert!(matches!(limiter.check(61 * SECOND, &job(1000, 1)), Gate::Never));
    }
}
