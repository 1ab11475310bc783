//! llmgov as a client uses it today: the core's sans-IO ledger driven with
//! virtual time, a scope that mirrors the provider's limits and charges each
//! request as the provider counts it, and a plain first-come line in front
//! (waiting and fair queues come in a later issue).
//!
//! With `reserve = "learned"`, an [`OutputModel`] learns each class's output
//! lengths from finished requests, and limits on which the provider charges
//! actual usage reserve its p95 (capped at `max_tokens`) instead of
//! `max_tokens`. Limits of providers that charge `max_tokens` at admission
//! keep reserving it: reserving less there would admit what they refuse.

use std::collections::BTreeMap;

use llmgov::config::{AdaptiveConfig, Algorithm, LimitConfig, OutputReservation, ScopeConfig};
use llmgov::tokens::{OutputConfig, OutputModel};
use llmgov::{classify_response, Config, Dimension, Error, Ledger, Permit, ProviderHint, Request, Route, Usage};

use super::{retryable, Gate, Gated, Line};
use crate::error::{duration_ns, CliError};
use crate::provider::{Charging, Enforcement, ProviderConfig, ProviderDimension, ProviderUsage, Rejected};
use crate::sim::engine::{Client, Cx, Timer};
use crate::sim::scenario::OutputReserve;
use crate::sim::workload::Job;

/// The one scope: the provider's pool.
pub(super) const SCOPE: &str = "provider";

/// Without a refusal's own advice, wait this long before sending again.
pub(super) const DEFAULT_RETRY_NS: u64 = 1_000_000_000;

/// How late a timer fires. The ledger's `retry_after` is exact to the
/// nanosecond (up to 1 ns early, as documented); waking exactly on the
/// boundary of a provider that mirrors it would leave the outcome to the
/// provider's rounding. Real timers fire late anyway: sleep 1 ms past it.
pub(super) const TIMER_SLACK_NS: u64 = 1_000_000;

/// The core dimension that charges what the provider charges on `dimension`,
/// given how [`reservation`] fills the request.
fn core_dimension(charging: Charging, dimension: ProviderDimension) -> Dimension {
    match (charging, dimension) {
        (_, ProviderDimension::Requests) => Dimension::Requests,
        (_, ProviderDimension::Tokens) => Dimension::Tokens,
        (_, ProviderDimension::InputTokens) => Dimension::InputTokens,
        // OpenAI charges max_tokens on output; the reservation puts the
        // larger of max_tokens and the prompt estimate in the input, so the
        // total covers it (over-charging, never under).
        (Charging::Openai, ProviderDimension::OutputTokens) => Dimension::Tokens,
        (_, ProviderDimension::OutputTokens) => Dimension::OutputTokens,
    }
}

/// `(input, output)` to reserve so that each limit is charged as the
/// provider will charge it. OpenAI charges the larger of `max_tokens` and
/// the prompt's characters ÷ 4, for good; the others charge the prompt plus
/// `max_tokens`, then settle on actual usage.
pub(super) fn reservation(charging: Charging, job: &Job) -> (u64, u64) {
    match charging {
        Charging::Openai => (job.max_tokens.max(job.prompt_estimate()), 0),
        Charging::Anthropic | Charging::Actual => (job.input_tokens, job.max_tokens),
    }
}

/// Slots of a mirrored sliding window: about 100 ms each, 60 to 600 of
/// them. A window may refuse up to one slot early, so the core's default of
/// 60 (a second per minute) would cost a minute-window client 1/60 of its
/// throughput.
fn slots(window_ns: u64) -> u32 {
    const SLOT_NS: u64 = 100_000_000;
    (window_ns / SLOT_NS).clamp(60, 600).min(window_ns / 1_000_000).max(1) as u32
}

fn limit(dimension: Dimension, amount: Option<u64>, window: Option<(&str, u64)>, algorithm: Algorithm) -> LimitConfig {
    let sliding = algorithm == Algorithm::SlidingWindow;
    LimitConfig {
        dimension,
        amount,
        budget: None,
        window: window.map(|(text, _)| text.to_owned()),
        algorithm: window.map(|_| algorithm),
        burst: None,
        slots: window.filter(|_| sliding).map(|(_, ns)| slots(ns)),
        count_cached_input: None,
        reserve_output: None,
    }
}

/// The strategy's label suffix for its output reservation.
pub(crate) fn label(reserve: OutputReserve) -> &'static str {
    match reserve {
        OutputReserve::MaxTokens => "",
        OutputReserve::Learned => " (learned output)",
    }
}

/// What a mirrored limit on `dimension` reserves for the output. Only where
/// the provider charges actual usage may it be the expected output: OpenAI
/// and Anthropic charge `max_tokens` at admission, so a mirror that reserved
/// less would admit requests they refuse.
fn reserve_output(reserve: OutputReserve, charging: Charging, dimension: Dimension) -> Option<OutputReservation> {
    let counts_output = matches!(dimension, Dimension::Tokens | Dimension::OutputTokens);
    (reserve == OutputReserve::Learned && charging == Charging::Actual && counts_output)
        .then_some(OutputReservation::Expected)
}

fn scaled(amount: f64, factor: f64) -> u64 {
    ((amount * factor).floor() as u64).max(1)
}

/// The ledger's config: the provider's limits (× `factor`), with any
/// sub-window guard and concurrency; or, when the amounts are unknown, the
/// provider's token-bucket limits with their amounts left to discovery from
/// its `limit` headers (a client knows what its provider limits, if not how
/// much).
pub(super) fn ledger_config(
    provider: &ProviderConfig,
    knows_limits: bool,
    factor: f64,
    reserve: OutputReserve,
    adaptive: Option<AdaptiveConfig>,
) -> Result<Config, CliError> {
    let charging = provider.charging();
    let mut limits = Vec::new();
    for (i, l) in provider.limits.iter().enumerate() {
        let dimension = core_dimension(charging, l.dimension);
        let algorithm = match l.algorithm {
            Enforcement::TokenBucket => Algorithm::TokenBucket,
            Enforcement::SlidingWindow => Algorithm::SlidingWindow,
        };
        let window_ns = duration_ns(&format!("provider.limits[{i}].window"), &l.window)?;
        if !knows_limits {
            let algorithm = Algorithm::TokenBucket;
            limits.push(limit(dimension, None, Some((&l.window, window_ns)), algorithm));
            continue;
        }
        limits.push(limit(dimension, Some(scaled(l.amount as f64, factor)), Some((&l.window, window_ns)), algorithm));
        if let Some(every) = &l.enforce_every {
            // The provider also holds amount × every ÷ window per `every`.
            let every_ns = duration_ns(&format!("provider.limits[{i}].enforce_every"), every)?;
            let amount = (l.amount as f64 * every_ns as f64 / window_ns as f64).max(1.0);
            limits.push(limit(dimension, Some(scaled(amount, factor)), Some((every, every_ns)), algorithm));
        }
    }
    if let Some(c) = provider.concurrency.filter(|_| knows_limits) {
        limits.push(limit(Dimension::Concurrency, Some(scaled(c as f64, factor)), None, Algorithm::TokenBucket));
    }
    for limit in &mut limits {
        limit.reserve_output = reserve_output(reserve, charging, limit.dimension);
    }
    if limits.is_empty() {
        // A provider with only a concurrency limit, unknown: nothing to discover.
        limits.push(limit(Dimension::Requests, Some(1 << 40), Some(("1m", 60_000_000_000)), Algorithm::TokenBucket));
    }
    let scope = ScopeConfig { safety_margin: None, limits, provider: Some(true), pricing: None };
    Ok(Config { scopes: BTreeMap::from([(SCOPE.to_owned(), scope)]), adaptive, ..Config::default() })
}

/// The requests in flight, their permits, and what the provider's answers
/// do to them: shared by the `llmgov` and `llmgov_fair` strategies.
pub(super) struct InFlight {
    permits: Vec<Option<Permit>>,
    charging: Charging,
}

impl InFlight {
    pub fn new(jobs: usize, charging: Charging) -> Self {
        InFlight { permits: (0..jobs).map(|_| None).collect(), charging }
    }

    /// How the provider charges.
    pub fn charging(&self) -> Charging {
        self.charging
    }

    /// `job` is sent with `permit`.
    pub fn hold(&mut self, job: usize, permit: Permit) {
        self.permits[job] = Some(permit);
    }

    fn take(&mut self, job: usize) -> Permit {
        self.permits[job].take().expect("a request in flight holds a permit")
    }

    /// Classifies the provider's answer to `job` and reports it to the ledger.
    fn report(
        &self,
        ledger: &Ledger,
        now: u64,
        job: usize,
        status: u16,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Result<(), CliError> {
        // The simulated provider's wall clock starts at the epoch.
        let feedback = classify_response(status, headers, body, ProviderHint::Auto, now / 1_000_000);
        let permit = self.permits[job].as_ref().expect("a request in flight holds a permit");
        ledger.report(permit, &feedback, now)?;
        Ok(())
    }

    /// The provider refused what the ledger let through: its limits are
    /// wrong or unknown. Its answer is reported to the ledger (a 429 holds
    /// the bucket it names empty until the retry-after and slows its pace;
    /// `limit` and `remaining` headers correct the others), and the attempt
    /// keeps its local charge (settled as estimated rather than cancelled),
    /// so that retries are paced rather than handed the same capacity
    /// straight back. A retryable refusal is retried after the provider's
    /// wait; another fails the job.
    pub fn refused(
        &mut self,
        ledger: &Ledger,
        now: u64,
        job: usize,
        rejected: &Rejected,
        cx: &mut Cx,
    ) -> Result<(), CliError> {
        self.report(ledger, now, job, rejected.status, &rejected.headers, rejected.body.as_bytes())?;
        let mut permit = self.take(job);
        let charged = permit.charged();
        ledger.settle(&mut permit, charged, now)?;
        if retryable(rejected.kind) {
            cx.at(now.saturating_add(rejected.retry_after_ns.unwrap_or(DEFAULT_RETRY_NS).max(1)), Timer::Retry(job));
        } else {
            cx.fail(job);
        }
        Ok(())
    }

    /// A success: its headers keep the ledger honest (and discover limits
    /// left unset), then the permit settles on what the provider charged.
    pub fn succeeded(
        &mut self,
        ledger: &Ledger,
        now: u64,
        job: usize,
        usage: &ProviderUsage,
        headers: &[(String, String)],
    ) -> Result<(), CliError> {
        self.report(ledger, now, job, 200, headers, b"")?;
        let mut permit = self.take(job);
        let actual = match self.charging {
            // OpenAI gives nothing back: settle on what it charged.
            Charging::Openai => permit.charged(),
            Charging::Anthropic | Charging::Actual => Usage::new(usage.input_tokens, usage.output_tokens),
        };
        ledger.settle(&mut permit, actual, now)?;
        Ok(())
    }
}

/// The ledger, the requests in flight, and the line.
pub(crate) struct Llmgov {
    ledger: Ledger,
    route: Route,
    in_flight: InFlight,
    line: Line,
    /// Whether settling can refund tokens or free a concurrency slot.
    settling_frees: bool,
    /// Output lengths learned per class, with `reserve = "learned"`.
    outputs: Option<OutputModel>,
    /// Class keys for the model, by class index (made on first use).
    classes: Vec<Box<str>>,
}

/// The model's key for class `class`: its index, as text.
fn class_key(classes: &mut Vec<Box<str>>, class: usize) -> &str {
    while classes.len() <= class {
        classes.push(classes.len().to_string().into());
    }
    &classes[class]
}

impl Llmgov {
    pub fn new(
        provider: &ProviderConfig,
        knows_limits: bool,
        factor: f64,
        reserve: OutputReserve,
        adaptive: Option<AdaptiveConfig>,
        jobs: usize,
    ) -> Result<Self, CliError> {
        let ledger = Ledger::new(&ledger_config(provider, knows_limits, factor, reserve, adaptive)?)?;
        let route = ledger.route(&[SCOPE])?;
        let charging = provider.charging();
        let settling_frees = charging != Charging::Openai || (knows_limits && provider.concurrency.is_some());
        let outputs = match reserve {
            OutputReserve::MaxTokens => None,
            OutputReserve::Learned => Some(OutputModel::new(OutputConfig::default())?),
        };
        let line = Line::default();
        let in_flight = InFlight::new(jobs, charging);
        Ok(Llmgov { ledger, route, in_flight, line, settling_frees, outputs, classes: Vec::new() })
    }
}

impl Gated for Llmgov {
    fn line(&mut self) -> &mut Line {
        &mut self.line
    }

    /// Tries the heads of the line against the ledger.
    fn pump(&mut self, now: u64, cx: &mut Cx) -> Result<(), CliError> {
        let Llmgov { ledger, route, in_flight, line, outputs, classes, .. } = self;
        line.pump(now, cx, |job| {
            let (input, output) = reservation(in_flight.charging(), job);
            let mut request = Request::new(*route).input_tokens(input).max_output_tokens(output);
            if let Some(model) = outputs {
                let key = class_key(classes, job.class);
                request = request.expected_output_tokens(model.reservation(*route, key, Some(job.max_tokens)));
            }
            match ledger.try_acquire(&request, now) {
                Ok(permit) => {
                    in_flight.hold(job.id, permit);
                    Ok(Gate::Go)
                }
                Err(
                    Error::RateLimited { retry_after: Some(wait), .. } | Error::CircuitOpen { retry_after: wait, .. },
                ) => {
                    let wait = u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX);
                    Ok(Gate::Until(now.saturating_add(wait).saturating_add(TIMER_SLACK_NS)))
                }
                Err(Error::RateLimited { retry_after: None, .. }) => Ok(Gate::Release),
                Err(Error::NeverFits { .. }) => Ok(Gate::Never),
                Err(e) => Err(e.into()),
            }
        })
    }
}

impl Client for Llmgov {
    fn arrive(&mut self, now: u64, job: usize, cx: &mut Cx) -> Result<(), CliError> {
        self.arrive_gated(now, job, cx)
    }

    fn wake(&mut self, now: u64, timer: Timer, cx: &mut Cx) -> Result<(), CliError> {
        self.wake_gated(now, timer, cx)
    }

    /// See [`InFlight::refused`].
    fn rejected(&mut self, now: u64, job: usize, rejected: &Rejected, cx: &mut Cx) -> Result<(), CliError> {
        self.in_flight.refused(&self.ledger, now, job, rejected, cx)?;
        self.pump(now, cx)
    }

    /// See [`InFlight::succeeded`]; where outputs are learned, this one's is.
    fn finished(
        &mut self,
        now: u64,
        job: usize,
        usage: ProviderUsage,
        headers: &[(String, String)],
        cx: &mut Cx,
    ) -> Result<(), CliError> {
        self.in_flight.succeeded(&self.ledger, now, job, &usage, headers)?;
        if let Some(model) = &self.outputs {
            model.record(self.route, class_key(&mut self.classes, cx.jobs[job].class), usage.output_tokens);
        }
        // A refund or a freed slot may let the head through; otherwise its
        // timer stands.
        if self.settling_frees && !self.line.is_empty() {
            self.pump(now, cx)?;
        }
        Ok(())
    }
}
