//! Retry advice: [`RetryPolicy::advise`] says "retry after D" or "give up",
//! and why.
//!
//! Sans-IO like the rest of `feedback`: time is a `now: u64` in monotonic
//! nanoseconds, and the randomness of the jitter is a `random: u64` draw, both
//! passed in. Nothing here sleeps, reads a clock or owns a random generator,
//! so the simulator, the tests and every binding get the same answers from
//! the same inputs.
//!
//! The rules, in the order they are applied:
//!
//! 1. Only what waiting can fix is retried: 429 rate limits, 408, 409, 5xx,
//!    529 and connection errors (see [`Outcome`]). 400, 401, 403 and 404, a
//!    quota ([`LimitKind::QuotaExhausted`]) and a request too large
//!    ([`LimitKind::TooLarge`]) are never retried, whatever `x-should-retry`
//!    says; otherwise the classifier's `retryable` (which honours
//!    `x-should-retry`) decides.
//! 2. At most [`RetryConfig::max_retries`] retries per request.
//! 3. The delay is `D = max(retry-after, backoff)`, with full-jitter
//!    exponential backoff `backoff = random × min(cap, base × 2^attempt)`.
//! 4. Nothing is retried past the deadline: if `now + D > deadline`, give up.
//! 5. A retry budget shared by every caller of the policy (at most 10% of the
//!    requests of the last minute, and at least 10 retries a minute) keeps a
//!    fleet from storming a provider that is already struggling. A retry
//!    takes a token only when every other rule has said yes.
//!
//! ```
//! use std::time::Duration;
//! use llmgov::feedback::{classify_response, Advice, Outcome, ProviderHint, RetryPolicy};
//!
//! let policy = RetryPolicy::default();
//! let now = 1_000_000_000;
//! policy.record_request(now);
//! let c = classify_response(429, &[("retry-after", "2")], b"", ProviderHint::OpenAi, 0);
//! // First retry (attempt 0), a mid-range draw, no deadline.
//! match policy.advise(Outcome::response(429, &c), 0, None, now, u64::MAX / 2) {
//!     Advice::RetryAfter { delay, .. } => assert_eq!(delay, Duration::from_secs(2)),
//!     other => panic!("expected a retry, got {other}"),
//! }
//! ```

use std::fmt;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Classification, LimitDimension, LimitKind};
use crate::ledger::ring::Ring;
use crate::time::{ceil_ms, duration_ns};
use crate::{Error, Result};

/// Default retries per request: 2, as the OpenAI and Anthropic SDKs. Callers
/// switching the SDKs' own retries off (one layer retries: ours) keep the
/// same load on the provider.
pub const DEFAULT_MAX_RETRIES: u32 = 2;
/// Default base of the exponential backoff: 0.5 s, as the OpenAI SDKs.
pub const DEFAULT_BASE_DELAY: Duration = Duration::from_millis(500);
/// Default cap of the exponential backoff: 8 s, as the OpenAI SDKs.
pub const DEFAULT_MAX_DELAY: Duration = Duration::from_secs(8);
/// Default sliding window of the retry budget: 60 s, the window most
/// provider limits count over.
pub const DEFAULT_BUDGET_WINDOW: Duration = Duration::from_secs(60);
/// Default share of requests that may be retried within the window: 10%.
pub const DEFAULT_BUDGET_RATIO: f64 = 0.1;
/// Default retries allowed per window whatever the traffic, so that a quiet
/// client can still retry: 10.
pub const DEFAULT_BUDGET_MIN_RETRIES: u32 = 10;

/// Slots per budget window: the window slides in steps of 1/60 of itself
/// (1 s for the default minute).
const BUDGET_SLOTS: u64 = 60;
/// Parts per million: the ratio is held as an integer so the hot path does
/// no float arithmetic.
const PPM: u64 = 1_000_000;
/// Statuses never retried, whatever the headers say: the request or its
/// credentials are wrong, and waiting changes neither.
const NEVER_RETRIED: [u16; 4] = [400, 401, 403, 404];

/// What the last attempt ended in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome<'a> {
    /// The provider answered; `classification` is what
    /// [`classify_response`](super::classify_response) made of the answer
    /// with this `status`.
    Response {
        /// The HTTP status of the answer.
        status: u16,
        /// The classified answer.
        classification: &'a Classification,
    },
    /// No answer at all: the connection failed, was reset, or timed out
    /// before a status arrived. Always retryable: nothing says otherwise.
    ConnectionError,
}

impl<'a> Outcome<'a> {
    /// A provider answer with `status`, classified as `classification`.
    pub fn response(status: u16, classification: &'a Classification) -> Self {
        Outcome::Response { status, classification }
    }
}

/// Why a retry can succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "code", rename_all = "snake_case")]
pub enum RetryReason {
    /// A rate limit refused: its window will refill.
    RateLimited {
        /// The limit that refused, as far as the provider said.
        dimension: LimitDimension,
    },
    /// The provider is overloaded (529, 503): backing off helps, and so may
    /// another deployment.
    Overloaded,
    /// A transient failure: 408, 409, another 5xx, or an answer that
    /// `x-should-retry: true` marked retryable.
    Transient {
        /// The HTTP status.
        status: u16,
    },
    /// No answer arrived (see [`Outcome::ConnectionError`]).
    ConnectionError,
}

/// Why a request should not be retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "code", rename_all = "snake_case")]
pub enum GiveUpReason {
    /// Waiting cannot fix this answer (a 400, 401, 403 or 404, a quota, a
    /// request too large, a success, or `x-should-retry: false`).
    NotRetryable {
        /// The HTTP status.
        status: u16,
        /// The classifier's reading of it.
        kind: LimitKind,
    },
    /// The request was already retried [`RetryConfig::max_retries`] times.
    AttemptsExhausted {
        /// Retries already made.
        retries: u32,
    },
    /// The retry could not start before the deadline.
    DeadlineExceeded,
    /// The retry budget has no token left in the current window.
    BudgetExhausted,
}

/// The advice for one failed attempt.
///
/// In JSON: `{"advice":"retry_after","delay_ms":500,"reason":{"code":"connection_error"}}`
/// or `{"advice":"give_up","reason":{"code":"budget_exhausted"}}`. The delay
/// is written in whole milliseconds rounded up, so waiting that long always
/// suffices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "advice", rename_all = "snake_case")]
pub enum Advice {
    /// Retry once `delay` has passed (and the retry is admitted again: a
    /// retry goes back through admission).
    RetryAfter {
        /// How long to wait first, from the `now` given to `advise`.
        #[serde(rename = "delay_ms", with = "delay_ms")]
        delay: Duration,
        /// Why a retry can succeed.
        reason: RetryReason,
    },
    /// Do not retry; report the failure.
    GiveUp {
        /// Why not.
        reason: GiveUpReason,
    },
}

impl Advice {
    /// The delay, when the advice is to retry.
    pub fn delay(&self) -> Option<Duration> {
        match self {
            Advice::RetryAfter { delay, .. } => Some(*delay),
            Advice::GiveUp { .. } => None,
        }
    }

    /// Why to give up, when the advice is to give up.
    pub fn give_up_reason(&self) -> Option<GiveUpReason> {
        match self {
            Advice::RetryAfter { .. } => None,
            Advice::GiveUp { reason } => Some(*reason),
        }
    }
}

/// `Duration` as whole milliseconds, rounded up (bindings and logs read
/// milliseconds; serde's default `{secs, nanos}` is awkward outside Rust).
mod delay_ms {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(delay: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(crate::time::ceil_ms(*delay))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

/// The serde name of `kind`, for messages.
fn kind_str(kind: LimitKind) -> &'static str {
    match kind {
        LimitKind::RateLimited => "rate_limited",
        LimitKind::QuotaExhausted => "quota_exhausted",
        LimitKind::Overloaded => "overloaded",
        LimitKind::TooLarge => "too_large",
        LimitKind::None => "none",
    }
}

impl fmt::Display for RetryReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RetryReason::RateLimited { dimension } => write!(f, "rate limited on {dimension}"),
            RetryReason::Overloaded => f.write_str("provider overloaded"),
            RetryReason::Transient { status } => write!(f, "transient failure (status {status})"),
            RetryReason::ConnectionError => f.write_str("connection error"),
        }
    }
}

impl fmt::Display for GiveUpReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GiveUpReason::NotRetryable { status, kind: LimitKind::None } => {
                write!(f, "not retryable (status {status})")
            }
            GiveUpReason::NotRetryable { status, kind } => {
                write!(f, "not retryable: {} (status {status})", kind_str(*kind))
            }
            GiveUpReason::AttemptsExhausted { retries } => write!(f, "attempts exhausted after {retries} retries"),
            GiveUpReason::DeadlineExceeded => f.write_str("deadline exceeded: the retry would start after it"),
            GiveUpReason::BudgetExhausted => f.write_str("retry budget exhausted"),
        }
    }
}

impl fmt::Display for Advice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Advice::RetryAfter { delay, reason } => {
                write!(f, "retry after {} ms: {reason}", crate::time::ceil_ms(*delay))
            }
            Advice::GiveUp { reason } => write!(f, "give up: {reason}"),
        }
    }
}

/// How the retry budget counts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BudgetConfig {
    /// The sliding window retries and requests are counted over (at least
    /// 1 ms; default [`DEFAULT_BUDGET_WINDOW`]). It slides in steps of 1/60
    /// of itself.
    pub window: Duration,
    /// The share of the window's requests that may be retried, in `[0, 1]`
    /// (default [`DEFAULT_BUDGET_RATIO`]).
    pub ratio: f64,
    /// Retries allowed per window however few requests it saw (default
    /// [`DEFAULT_BUDGET_MIN_RETRIES`]).
    pub min_retries: u32,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        BudgetConfig {
            window: DEFAULT_BUDGET_WINDOW,
            ratio: DEFAULT_BUDGET_RATIO,
            min_retries: DEFAULT_BUDGET_MIN_RETRIES,
        }
    }
}

/// How a [`RetryPolicy`] advises.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryConfig {
    /// Retries per request at most (default [`DEFAULT_MAX_RETRIES`]).
    pub max_retries: u32,
    /// Base of the exponential backoff (default [`DEFAULT_BASE_DELAY`]).
    pub base_delay: Duration,
    /// Cap of the exponential backoff (default [`DEFAULT_MAX_DELAY`]). It
    /// caps the backoff only: a longer `retry-after` is still honoured.
    pub max_delay: Duration,
    /// The retry budget.
    pub budget: BudgetConfig,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            max_retries: DEFAULT_MAX_RETRIES,
            base_delay: DEFAULT_BASE_DELAY,
            max_delay: DEFAULT_MAX_DELAY,
            budget: BudgetConfig::default(),
        }
    }
}

/// A lock-free retry budget over a sliding window: retries may reach
/// `max(min_retries, ratio × requests)` of the window.
///
/// Two rings of atomic slots (the ledger's sliding-window ring) count the
/// requests and the retries; taking a token is add-then-check, so racing
/// callers never overspend it (one may be refused spuriously while another's
/// rollback is in flight).
#[derive(Debug)]
pub struct RetryBudget {
    requests: Ring<AtomicU64>,
    retries: Ring<AtomicU64>,
    slot_ns: u64,
    ratio_ppm: u64,
    min_retries: u64,
}

impl RetryBudget {
    /// A budget counting as `config` says; [`Error::InvalidConfig`] if the
    /// window is under 1 ms or the ratio is not in `[0, 1]`.
    pub fn new(config: &BudgetConfig) -> Result<Self> {
        if config.window < Duration::from_millis(1) {
            return Err(Error::config("retry.budget.window", format!("{:?}", config.window), "must be at least 1 ms"));
        }
        if !(0.0..=1.0).contains(&config.ratio) {
            return Err(Error::config("retry.budget.ratio", config.ratio, "must be a number in [0, 1]"));
        }
        Ok(Self::build(config))
    }

    /// Builds from a config already validated (or the default).
    fn build(config: &BudgetConfig) -> Self {
        // Slot k is live while fewer than BUDGET_SLOTS slots have begun since
        // it, so the window reaches back at most `window`.
        let span = (BUDGET_SLOTS - 1) as u32;
        let ratio = config.ratio.clamp(0.0, 1.0);
        RetryBudget {
            requests: Ring::new(span),
            retries: Ring::new(span),
            slot_ns: (duration_ns(config.window) / BUDGET_SLOTS).max(1),
            ratio_ppm: (ratio * PPM as f64).round() as u64,
            min_retries: u64::from(config.min_retries),
        }
    }

    fn slot(&self, now: u64) -> u64 {
        now / self.slot_ns
    }

    /// Counts one request sent at `now`. Record first attempts only: a retry
    /// counted as a request would raise its own allowance.
    pub fn record_request(&self, now: u64) {
        // A caller whose clock is a whole ring behind is not counted: the
        // budget then allows fewer retries, the safe side.
        let _ = self.requests.add(self.slot(now), 1);
    }

    /// Retries the window at `now` allows in all, spent or not.
    pub fn allowance(&self, now: u64) -> u64 {
        let requests = self.requests.live_sum(self.slot(now));
        let share = u128::from(requests) * u128::from(self.ratio_ppm) / u128::from(PPM);
        u64::try_from(share).unwrap_or(u64::MAX).max(self.min_retries)
    }

    /// Retries still available in the window at `now`.
    pub fn available(&self, now: u64) -> u64 {
        self.allowance(now).saturating_sub(self.retries.live_sum(self.slot(now)))
    }

    /// Takes one retry token at `now`; `false` (and nothing taken) when the
    /// window's allowance is spent.
    pub fn try_take(&self, now: u64) -> bool {
        let allowance = self.allowance(now);
        self.retries.try_reserve(self.slot(now), 1, allowance, |_| {}).is_ok()
    }
}

impl Default for RetryBudget {
    fn default() -> Self {
        Self::build(&BudgetConfig::default())
    }
}

/// Decides whether and when to retry; shared by every caller (`&self`
/// only, lock-free), so its budget spans them all.
#[derive(Debug, Default)]
pub struct RetryPolicy {
    config: RetryConfig,
    budget: RetryBudget,
}

impl RetryPolicy {
    /// A policy advising as `config` says; [`Error::InvalidConfig`] for a
    /// bad budget (see [`RetryBudget::new`]).
    pub fn new(config: RetryConfig) -> Result<Self> {
        Ok(RetryPolicy { budget: RetryBudget::new(&config.budget)?, config })
    }

    /// The configuration.
    pub fn config(&self) -> &RetryConfig {
        &self.config
    }

    /// The retry budget.
    pub fn budget(&self) -> &RetryBudget {
        &self.budget
    }

    /// Counts one request (first attempts only) in the budget; see
    /// [`RetryBudget::record_request`].
    pub fn record_request(&self, now: u64) {
        self.budget.record_request(now);
    }

    /// The full-jitter backoff before retry number `attempt + 1`:
    /// `random / u64::MAX × min(max_delay, base_delay × 2^attempt)`.
    ///
    /// `random` is a uniform draw over all of `u64`; it maps to the fraction
    /// `random / u64::MAX` in `[0, 1]`, so a draw of 0 gives no wait and
    /// `u64::MAX` the whole ceiling.
    pub fn backoff(&self, attempt: u32, random: u64) -> Duration {
        let cap = duration_ns(self.config.max_delay);
        let ceiling = 1u64
            .checked_shl(attempt)
            .and_then(|factor| duration_ns(self.config.base_delay).checked_mul(factor))
            .map_or(cap, |exp| exp.min(cap));
        let jittered = u128::from(ceiling) * u128::from(random) / u128::from(u64::MAX);
        // jittered <= ceiling, which fits in u64.
        Duration::from_nanos(u64::try_from(jittered).unwrap_or(ceiling))
    }

    /// Advises on a failed attempt.
    ///
    /// - `outcome`: how the attempt ended.
    /// - `attempt`: retries already made for this request (0 after the
    ///   first attempt failed).
    /// - `deadline`: when the request must be done by, in the same
    ///   monotonic nanoseconds as `now`; `None` for no deadline.
    /// - `now`: the time of the failure, monotonic nanoseconds.
    /// - `random`: a uniform `u64` draw for the jitter (see
    ///   [`RetryPolicy::backoff`]).
    ///
    /// The delay advised is in whole milliseconds (the exact delay rounded
    /// up), and `now` plus it is at most `deadline`. Takes a budget token
    /// only when the advice is to retry. Never panics.
    pub fn advise(&self, outcome: Outcome<'_>, attempt: u32, deadline: Option<u64>, now: u64, random: u64) -> Advice {
        let (reason, retry_after) = match retry_reason(outcome) {
            Ok(found) => found,
            Err(reason) => return Advice::GiveUp { reason },
        };
        if attempt >= self.config.max_retries {
            return Advice::GiveUp { reason: GiveUpReason::AttemptsExhausted { retries: attempt } };
        }
        // Whole milliseconds, rounded up, before the deadline check: the
        // advice is written (and waited) in milliseconds, and a check on the
        // exact delay let the rounded-up one end after the deadline.
        let delay = Duration::from_millis(ceil_ms(retry_after.max(self.backoff(attempt, random))));
        if deadline.is_some_and(|deadline| now.saturating_add(duration_ns(delay)) > deadline) {
            return Advice::GiveUp { reason: GiveUpReason::DeadlineExceeded };
        }
        // Last, so that a retry refused for any other reason spends nothing.
        if !self.budget.try_take(now) {
            return Advice::GiveUp { reason: GiveUpReason::BudgetExhausted };
        }
        Advice::RetryAfter { delay, reason }
    }
}

/// Why `outcome` can be retried and the wait the provider asked for, or why
/// it cannot.
fn retry_reason(outcome: Outcome<'_>) -> Result<(RetryReason, Duration), GiveUpReason> {
    let (status, c) = match outcome {
        Outcome::ConnectionError => return Ok((RetryReason::ConnectionError, Duration::ZERO)),
        Outcome::Response { status, classification } => (status, classification),
    };
    let hopeless = matches!(c.kind, LimitKind::QuotaExhausted | LimitKind::TooLarge);
    if hopeless || NEVER_RETRIED.contains(&status) || !c.retryable {
        return Err(GiveUpReason::NotRetryable { status, kind: c.kind });
    }
    let reason = match c.kind {
        LimitKind::RateLimited => RetryReason::RateLimited { dimension: c.dimension },
        LimitKind::Overloaded => RetryReason::Overloaded,
        LimitKind::QuotaExhausted | LimitKind::TooLarge | LimitKind::None => RetryReason::Transient { status },
    };
    Ok((reason, Duration::from_millis(c.retry_after_ms.unwrap_or(0))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_ceiling_saturates_instead_of_overflowing() {
        let policy = RetryPolicy::default();
        assert_eq!(policy.backoff(0, u64::MAX), DEFAULT_BASE_DELAY);
        assert_eq!(policy.backoff(63, u64::MAX), DEFAULT_MAX_DELAY);
        assert_eq!(policy.backoff(u32::MAX, u64::MAX), DEFAULT_MAX_DELAY);
        assert_eq!(policy.backoff(u32::MAX, 0), Duration::ZERO);
    }

    #[test]
    fn budget_rejects_bad_configs() {
        let bad_ratio = BudgetConfig { ratio: f64::NAN, ..BudgetConfig::default() };
        assert!(matches!(RetryBudget::new(&bad_ratio), Err(Error::InvalidConfig { .. })));
        let too_big = BudgetConfig { ratio: 1.5, ..BudgetConfig::default() };
        assert!(RetryBudget::new(&too_big).is_err());
        let tiny = BudgetConfig { window: Duration::from_micros(10), ..BudgetConfig::default() };
        assert!(RetryBudget::new(&tiny).is_err());
    }
}
