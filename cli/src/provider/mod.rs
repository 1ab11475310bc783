//! The provider model: limits enforced the way providers enforce them,
//! tokens counted the way each provider counts them, answers in their own
//! shapes. Sans-IO like the core: every call takes `now` in nanoseconds, so
//! the simulator drives it in virtual time and the mock server in real time.

mod config;
mod limiter;
mod wire;

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub use config::{
    ApiShape, ChaosConfig, Charging, Enforcement, LatencyConfig, Pool, ProviderConfig, ProviderDimension,
    ProviderLimitConfig,
};
pub use wire::{error_body, go_duration, limit_headers, retry_headers, LimitState, RejectionKind};

use crate::error::{duration_ns, CliError};
pub(crate) use config::CompiledLimit;
use limiter::Meter;

/// A request as the provider sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderRequest {
    /// The API key it came with (pools are per key or shared).
    pub key: String,
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Prompt characters (OpenAI's limiter estimates from these).
    pub prompt_chars: u64,
    /// The request's `max_tokens`.
    pub max_tokens: u64,
    /// How long the answer would be if `max_tokens` allowed it.
    pub desired_output_tokens: u64,
}

/// A request the provider took on.
#[derive(Debug, Clone, PartialEq)]
pub struct Admitted {
    /// Identifies it until it finishes.
    pub id: u64,
    /// Prompt tokens used.
    pub input_tokens: u64,
    /// Completion tokens it will produce (never more than `max_tokens`).
    pub output_tokens: u64,
    /// Time to the first token.
    pub ttft_ns: u64,
    /// Time to the last token.
    pub duration_ns: u64,
    /// Rate-limit headers of the response.
    pub headers: Vec<(String, String)>,
    pool: String,
    admitted_at: u64,
    max_tokens: u64,
}

/// A request the provider refused.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejected {
    /// HTTP status.
    pub status: u16,
    /// Why.
    pub kind: RejectionKind,
    /// What the provider says to wait, if anything.
    pub retry_after_ns: Option<u64>,
    /// Rate-limit and retry headers.
    pub headers: Vec<(String, String)>,
    /// The error body, in the provider's shape.
    pub body: String,
}

/// A request that costs more on a limit than the limit ever holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooLarge {
    /// What the limit counts.
    pub dimension: ProviderDimension,
    /// What it holds.
    pub limit: u64,
    /// Its window.
    pub window_ns: u64,
    /// What the request costs on it at admission.
    pub requested: u64,
}

/// OpenAI's words for it, which clients (and llmgov's classifier) read as
/// "never retry".
impl std::fmt::Display for TooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let window = humantime::format_duration(Duration::from_nanos(self.window_ns));
        write!(
            f,
            "Request too large for {} per {window}: Limit {}, Requested {}. \
             The input or output tokens must be reduced in order to run successfully.",
            self.dimension.as_str(),
            self.limit,
            self.requested
        )
    }
}

/// What a finished request used, as the provider reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProviderUsage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
}

/// One pool's meters (in the order of the compiled limits) and requests in flight.
#[derive(Debug)]
struct PoolState {
    meters: Vec<Meter>,
    in_flight: u64,
}

/// A provider: its pools, its randomness, its clock origin.
#[derive(Debug)]
pub struct Provider {
    config: ProviderConfig,
    limits: Vec<CompiledLimit>,
    pools: HashMap<String, PoolState>,
    rng: ChaCha8Rng,
    wall_origin: SystemTime,
    tighten_at: Option<u64>,
    /// Applied to every pool, including those made later.
    scale: f64,
    next_id: u64,
}

impl Provider {
    /// A provider from its config, with its randomness seeded by `seed`.
    /// `wall_origin` is the wall-clock time of `now = 0`, for RFC 3339 resets.
    pub fn new(config: ProviderConfig, seed: u64, wall_origin: SystemTime) -> Result<Self, CliError> {
        let limits = config.compile("provider")?;
        let tighten_at =
            config.chaos.tighten_at.as_deref().map(|t| duration_ns("provider.chaos.tighten_at", t)).transpose()?;
        Ok(Provider {
            config,
            limits,
            pools: HashMap::new(),
            rng: ChaCha8Rng::seed_from_u64(seed),
            wall_origin,
            tighten_at,
            scale: 1.0,
            next_id: 0,
        })
    }

    /// Its configuration.
    pub fn config(&self) -> &ProviderConfig {
        &self.config
    }

    fn pool_name(&self, key: &str) -> String {
        match self.config.pool {
            Pool::Shared => "org".to_owned(),
            Pool::PerKey => key.to_owned(),
        }
    }

    /// `name`'s pool, made at `now` if it is new.
    fn pool(&mut self, now: u64, name: &str) -> &mut PoolState {
        let (limits, scale, exhausted) = (&self.limits, self.scale, self.config.chaos.start_exhausted);
        self.pools.entry(name.to_owned()).or_insert_with(|| {
            let mut meters: Vec<Meter> = limits.iter().map(Meter::new).collect();
            meters.iter_mut().for_each(|m| m.scale(now, scale));
            if exhausted {
                // Drained as of its first use: charged at 0, a pool first
                // used a window later would have refilled already.
                meters.iter_mut().for_each(|m| m.charge(now, m.limit()));
            }
            PoolState { meters, in_flight: 0 }
        })
    }

    /// Tightens every limit once `now` passes the configured moment.
    fn maybe_tighten(&mut self, now: u64) {
        if self.tighten_at.is_some_and(|at| now >= at) {
            self.tighten_at = None;
            let factor = self.config.chaos.tighten_factor.unwrap_or(0.5);
            self.scale *= factor;
            for pool in self.pools.values_mut() {
                pool.meters.iter_mut().for_each(|m| m.scale(now, factor));
            }
        }
    }

    /// What the request costs on each limit at admission.
    fn admission_cost(&self, limit: &CompiledLimit, req: &ProviderRequest) -> f64 {
        let estimate = req.prompt_chars.div_ceil(4);
        let cost = match (self.config.charging(), limit.dimension) {
            (_, ProviderDimension::Requests) => 1,
            (Charging::Openai, ProviderDimension::Tokens) => req.max_tokens.max(estimate),
            (Charging::Openai, ProviderDimension::InputTokens) => estimate,
            (Charging::Openai | Charging::Anthropic, ProviderDimension::OutputTokens) => req.max_tokens,
            // Saturating: a cap near u64::MAX must stay too large, not wrap to free.
            (Charging::Anthropic, ProviderDimension::Tokens) => req.input_tokens.saturating_add(req.max_tokens),
            (Charging::Anthropic, ProviderDimension::InputTokens) => req.input_tokens,
            (Charging::Actual, _) => 0,
        };
        cost as f64
    }

    /// The first limit on which `req` costs more at admission than the
    /// limit ever holds (as tightened so far), if any: such a request can
    /// never be admitted, however long it waits.
    pub fn too_large(&self, req: &ProviderRequest) -> Option<TooLarge> {
        self.limits.iter().find_map(|limit| {
            let (cost, holds) = (self.admission_cost(limit, req), limit.amount * self.scale);
            (cost > holds).then(|| TooLarge {
                dimension: limit.dimension,
                limit: holds.floor() as u64,
                window_ns: limit.window_ns,
                requested: cost as u64,
            })
        })
    }

    /// Takes the request on, or refuses it as the provider would.
    pub fn admit(&mut self, now: u64, req: &ProviderRequest) -> Result<Admitted, Rejected> {
        self.maybe_tighten(now);
        if let Some(kind) = self.chaos_refusal() {
            return Err(self.reject(now, &req.key, kind, None));
        }
        let pool_name = self.pool_name(&req.key);
        if let Some(too_large) = self.too_large(req) {
            let kind = RejectionKind::TooLarge(too_large.dimension);
            return Err(self.reject_with(now, &req.key, kind, None, &too_large.to_string()));
        }
        let costs: Vec<f64> = self.limits.iter().map(|l| self.admission_cost(l, req)).collect();
        let (concurrency, limits) = (self.config.concurrency, self.limits.clone());
        let pool = self.pool(now, &pool_name);
        let refusal = if concurrency.is_some_and(|c| pool.in_flight >= c) {
            Some((RejectionKind::Concurrency, 1_000_000_000))
        } else {
            // Charging actual usage only, a provider admits while anything is left.
            let needed = |cost: f64| if cost > 0.0 { cost } else { f64::MIN_POSITIVE };
            // The longest wait of every short limit, not the first: retry-after
            // promises the request fits then, and a shorter one is refused again.
            let short = limits.iter().zip(pool.meters.iter_mut()).zip(&costs).filter_map(|((limit, meter), &cost)| {
                (meter.available(now) < needed(cost)).then(|| (limit.dimension, meter.wait_for(now, needed(cost))))
            });
            short
                .fold(None, |longest: Option<(ProviderDimension, u64)>, (d, wait)| match longest {
                    Some((_, w)) if w >= wait => longest,
                    _ => Some((d, wait)),
                })
                .map(|(d, wait)| (RejectionKind::RateLimited(Some(d)), wait))
        };
        if let Some((kind, wait)) = refusal {
            return Err(self.reject(now, &req.key, kind, Some(wait)));
        }
        let pool = self.pool(now, &pool_name);
        for (meter, &cost) in pool.meters.iter_mut().zip(&costs) {
            if cost > 0.0 {
                meter.charge(now, cost);
            }
        }
        pool.in_flight += 1;
        Ok(self.start(now, req, pool_name))
    }

    /// A random failure, if chaos calls for one.
    fn chaos_refusal(&mut self) -> Option<RejectionKind> {
        let chaos = &self.config.chaos;
        if chaos.quota_exhausted {
            return Some(RejectionKind::QuotaExhausted);
        }
        let draw: f64 = self.rng.random();
        let thresholds = [
            (chaos.error_429, RejectionKind::RateLimited(None)),
            (chaos.error_500, RejectionKind::ServerError),
            (chaos.error_529, RejectionKind::Overloaded),
        ];
        let mut edge = 0.0;
        for (p, kind) in thresholds {
            edge += p;
            if draw < edge {
                return Some(kind);
            }
        }
        None
    }

    /// Draws the answer's length and timing.
    fn start(&mut self, now: u64, req: &ProviderRequest, pool: String) -> Admitted {
        let output_tokens = req.desired_output_tokens.min(req.max_tokens);
        let latency = &self.config.latency;
        let spike = if latency.spike_probability > 0.0 && self.rng.random::<f64>() < latency.spike_probability {
            latency.spike_ms
        } else {
            0.0
        };
        let ttft_ms = latency.ttft_ms + spike;
        let total_ms = ttft_ms + latency.ms_per_output_token * output_tokens.saturating_sub(1) as f64;
        self.next_id += 1;
        Admitted {
            id: self.next_id,
            input_tokens: req.input_tokens,
            output_tokens,
            ttft_ns: (ttft_ms * 1e6) as u64,
            duration_ns: (total_ms * 1e6) as u64,
            headers: self.headers(now, &req.key),
            pool,
            admitted_at: now,
            max_tokens: req.max_tokens,
        }
    }

    /// Ends a request: reconciles its charges as the provider does, frees
    /// its slot, and reports its usage with fresh headers.
    pub fn finish(&mut self, now: u64, admitted: &Admitted) -> (ProviderUsage, Vec<(String, String)>) {
        let charging = self.config.charging();
        let limits = self.limits.clone();
        let pool = self.pool(now, &admitted.pool);
        pool.in_flight = pool.in_flight.saturating_sub(1);
        for (meter, limit) in pool.meters.iter_mut().zip(&limits) {
            let output = admitted.output_tokens as f64;
            match (charging, limit.dimension) {
                (Charging::Anthropic, ProviderDimension::OutputTokens | ProviderDimension::Tokens) => {
                    meter.refund(now, admitted.admitted_at, admitted.max_tokens as f64 - output)
                }
                (Charging::Actual, ProviderDimension::Tokens) => {
                    meter.charge(now, admitted.input_tokens as f64 + output)
                }
                (Charging::Actual, ProviderDimension::InputTokens) => meter.charge(now, admitted.input_tokens as f64),
                (Charging::Actual, ProviderDimension::OutputTokens) => meter.charge(now, output),
                _ => {}
            }
        }
        let usage = ProviderUsage { input_tokens: admitted.input_tokens, output_tokens: admitted.output_tokens };
        (usage, self.headers(now, &admitted.pool))
    }

    /// The refusal the provider sends.
    fn reject(&mut self, now: u64, key: &str, kind: RejectionKind, retry_after_ns: Option<u64>) -> Rejected {
        let message = match kind {
            RejectionKind::RateLimited(Some(d)) => format!("Rate limit reached for {}", d.as_str()),
            RejectionKind::RateLimited(None) => "Too many requests".to_owned(),
            // "concurrent" is the cue clients (llmgov's classifier too) read
            // as a cap on requests in flight, not on requests per minute.
            RejectionKind::Concurrency => format!(
                "Too many concurrent requests: at most {} in flight",
                self.config.concurrency.unwrap_or_default()
            ),
            RejectionKind::QuotaExhausted => {
                "You exceeded your current quota, please check your plan and billing details.".to_owned()
            }
            RejectionKind::Overloaded => "Overloaded".to_owned(),
            RejectionKind::ServerError => "The server had an error while processing your request.".to_owned(),
            RejectionKind::BadRequest => "Bad request".to_owned(),
            RejectionKind::TooLarge(d) => format!("Request too large for {}", d.as_str()),
        };
        self.reject_with(now, key, kind, retry_after_ns, &message)
    }

    /// The refusal the provider sends, with its message.
    fn reject_with(
        &mut self,
        now: u64,
        key: &str,
        kind: RejectionKind,
        retry_after_ns: Option<u64>,
        message: &str,
    ) -> Rejected {
        let shape = self.config.shape;
        let mut headers = self.headers(now, key);
        if let Some(wait) = retry_after_ns {
            headers.extend(retry_headers(wait));
        }
        Rejected { status: kind.status(shape), kind, retry_after_ns, headers, body: error_body(shape, kind, message) }
    }

    /// The limits' state for `key`'s pool, as rate-limit headers.
    pub fn headers(&mut self, now: u64, key: &str) -> Vec<(String, String)> {
        let states = self.limit_states(now, key);
        limit_headers(self.config.shape, &states, self.wall_origin + Duration::from_nanos(now))
    }

    /// Each dimension's longest-window limit, as a provider would report it.
    pub fn limit_states(&mut self, now: u64, key: &str) -> Vec<LimitState> {
        let name = self.pool_name(key);
        let limits = self.limits.clone();
        let pool = self.pool(now, &name);
        let mut states: Vec<(u64, LimitState)> = Vec::new();
        for (meter, limit) in pool.meters.iter_mut().zip(&limits) {
            let state = LimitState {
                dimension: limit.dimension,
                limit: meter.limit().round() as u64,
                remaining: meter.available(now).max(0.0).floor() as u64,
                reset_ns: meter.until_full(now),
            };
            match states.iter_mut().find(|(_, s)| s.dimension == limit.dimension) {
                Some((window, s)) if limit.window_ns > *window => (*window, *s) = (limit.window_ns, state),
                Some(_) => {}
                None => states.push((limit.window_ns, state)),
            }
        }
        states.into_iter().map(|(_, s)| s).collect()
    }
}

#[cfg(test)]
mod tests;
