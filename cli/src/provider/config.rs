//! A provider's configuration: its limits, how it counts a request's
//! tokens, how fast it answers, and how it misbehaves.

use serde::{Deserialize, Serialize};

use crate::error::{duration_ns, number, CliError};

/// Which API a provider speaks: header names, error bodies, endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApiShape {
    /// `x-ratelimit-*` headers with Go-style resets, `rate_limit_exceeded` errors.
    Openai,
    /// `anthropic-ratelimit-*` headers with RFC 3339 resets, `rate_limit_error`.
    Anthropic,
}

/// Whose capacity a request draws on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pool {
    /// Every key of the organisation shares one pool (OpenAI).
    Shared,
    /// Each API key has its own (Volcengine).
    PerKey,
}

/// How a provider counts a request's tokens against its limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Charging {
    /// At admission, the larger of `max_tokens` and the prompt's characters
    /// ÷ 4; nothing is given back (OpenAI).
    Openai,
    /// At admission, the prompt plus `max_tokens`; at the end, the output is
    /// adjusted to what was produced (Anthropic).
    Anthropic,
    /// Only the actual usage, at the end; admission needs capacity left.
    Actual,
}

/// What a limit counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderDimension {
    /// Requests started.
    Requests,
    /// Prompt plus completion tokens.
    Tokens,
    /// Prompt tokens.
    InputTokens,
    /// Completion tokens.
    OutputTokens,
}

impl ProviderDimension {
    /// The name used in configs, headers and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderDimension::Requests => "requests",
            ProviderDimension::Tokens => "tokens",
            ProviderDimension::InputTokens => "input_tokens",
            ProviderDimension::OutputTokens => "output_tokens",
        }
    }
}

/// How a provider limit enforces its amount.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Enforcement {
    /// Continuous refill, holding at most the amount (OpenAI).
    #[default]
    TokenBucket,
    /// At most the amount in any trailing window.
    SlidingWindow,
}

/// One provider limit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderLimitConfig {
    /// What it counts.
    pub dimension: ProviderDimension,
    /// How much per window.
    pub amount: u64,
    /// The window, e.g. `"1m"`.
    pub window: String,
    /// Default `token_bucket`.
    #[serde(default)]
    pub algorithm: Enforcement,
    /// Also enforce the limit pro rata over this shorter window (OpenAI may
    /// hold a per-minute limit over seconds): `amount × every ÷ window` per
    /// `every`, at least 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforce_every: Option<String>,
}

/// Time to answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatencyConfig {
    /// Time to the first token.
    #[serde(default = "default_ttft_ms")]
    pub ttft_ms: f64,
    /// Time per output token after the first.
    #[serde(default = "default_ms_per_token")]
    pub ms_per_output_token: f64,
    /// Chance that a request is slowed by `spike_ms`.
    #[serde(default)]
    pub spike_probability: f64,
    /// The extra time of a spike.
    #[serde(default)]
    pub spike_ms: f64,
}

fn default_ttft_ms() -> f64 {
    400.0
}

fn default_ms_per_token() -> f64 {
    15.0
}

/// The longest time to first token or spike a config may give: a day, so
/// that a request's service time stays far inside the nanosecond clock.
const MAX_LATENCY_MS: f64 = 86_400_000.0;

/// The longest time per output token: a minute.
const MAX_MS_PER_TOKEN: f64 = 60_000.0;

impl LatencyConfig {
    /// Refuses a negative, NaN, infinite or absurdly long time: a negative
    /// one would answer before the request came, an infinite one never.
    fn check(&self, field: &str) -> Result<(), CliError> {
        for (name, ms, max) in [
            ("ttft_ms", self.ttft_ms, MAX_LATENCY_MS),
            ("ms_per_output_token", self.ms_per_output_token, MAX_MS_PER_TOKEN),
            ("spike_ms", self.spike_ms, MAX_LATENCY_MS),
        ] {
            if !(ms.is_finite() && (0.0..=max).contains(&ms)) {
                return Err(CliError::field(
                    format!("{field}.{name}"),
                    number(ms),
                    format!("must be a number of ms in [0, {max}]"),
                ));
            }
        }
        Ok(())
    }
}

impl Default for LatencyConfig {
    fn default() -> Self {
        LatencyConfig {
            ttft_ms: default_ttft_ms(),
            ms_per_output_token: default_ms_per_token(),
            spike_probability: 0.0,
            spike_ms: 0.0,
        }
    }
}

/// Misbehaviour on purpose.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChaosConfig {
    /// Fraction of requests answered 429 whatever the limits say.
    #[serde(default)]
    pub error_429: f64,
    /// Fraction answered 500.
    #[serde(default)]
    pub error_500: f64,
    /// Fraction answered 529 (overloaded; 503 in the OpenAI shape).
    #[serde(default)]
    pub error_529: f64,
    /// When the provider tightens every limit, e.g. `"10m"` into the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tighten_at: Option<String>,
    /// What the limits are multiplied by then (default 0.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tighten_factor: Option<f64>,
    /// Every request is refused for billing: 429 `insufficient_quota`.
    #[serde(default)]
    pub quota_exhausted: bool,
    /// Every limit starts used up, as if other traffic had just drained
    /// the pool: the first requests meet an exhausted limit.
    #[serde(default)]
    pub start_exhausted: bool,
}

/// A provider as the simulator and the mock server model it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// The API it speaks.
    pub shape: ApiShape,
    /// Shared organisation pool, or one per key.
    #[serde(default = "default_pool")]
    pub pool: Pool,
    /// How it counts tokens; defaults to the shape's own way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub charging: Option<Charging>,
    /// Requests in flight at once, if limited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u64>,
    /// Its rate limits.
    #[serde(default)]
    pub limits: Vec<ProviderLimitConfig>,
    /// How fast it answers.
    #[serde(default)]
    pub latency: LatencyConfig,
    /// How it misbehaves.
    #[serde(default)]
    pub chaos: ChaosConfig,
}

fn default_pool() -> Pool {
    Pool::Shared
}

/// A limit ready to enforce: durations parsed, sub-window split out.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CompiledLimit {
    pub dimension: ProviderDimension,
    pub amount: f64,
    pub window_ns: u64,
    pub algorithm: Enforcement,
}

impl ProviderConfig {
    /// The shape's own way of counting unless the config says otherwise.
    pub fn charging(&self) -> Charging {
        self.charging.unwrap_or(match self.shape {
            ApiShape::Openai => Charging::Openai,
            ApiShape::Anthropic => Charging::Anthropic,
        })
    }

    /// Checks the config and expands it into the limits to enforce.
    pub(crate) fn compile(&self, field: &str) -> Result<Vec<CompiledLimit>, CliError> {
        let mut limits = Vec::new();
        for (i, limit) in self.limits.iter().enumerate() {
            let at = |name: &str| format!("{field}.limits[{i}].{name}");
            if limit.amount == 0 {
                return Err(CliError::field(at("amount"), "0", "must be at least 1"));
            }
            let window_ns = duration_ns(&at("window"), &limit.window)?;
            let base = CompiledLimit {
                dimension: limit.dimension,
                amount: limit.amount as f64,
                window_ns,
                algorithm: limit.algorithm,
            };
            if let Some(every) = &limit.enforce_every {
                let every_ns = duration_ns(&at("enforce_every"), every)?;
                if every_ns >= window_ns {
                    return Err(CliError::field(at("enforce_every"), every, "must be shorter than the window"));
                }
                let amount = (limit.amount as f64 * every_ns as f64 / window_ns as f64).max(1.0);
                limits.push(CompiledLimit { amount, window_ns: every_ns, ..base.clone() });
            }
            limits.push(base);
        }
        if self.concurrency == Some(0) {
            return Err(CliError::field(format!("{field}.concurrency"), "0", "must be at least 1"));
        }
        for (name, p) in [
            ("chaos.error_429", self.chaos.error_429),
            ("chaos.error_500", self.chaos.error_500),
            ("chaos.error_529", self.chaos.error_529),
            ("latency.spike_probability", self.latency.spike_probability),
        ] {
            if !(0.0..=1.0).contains(&p) {
                return Err(CliError::field(format!("{field}.{name}"), number(p), "must be a probability in [0, 1]"));
            }
        }
        let chaos = self.chaos.error_429 + self.chaos.error_500 + self.chaos.error_529;
        if chaos > 1.0 {
            let reason =
                "error_429, error_500 and error_529 are fractions of the same requests: they add up to at most 1";
            return Err(CliError::field(format!("{field}.chaos"), chaos, reason));
        }
        self.latency.check(&format!("{field}.latency"))?;
        if let Some(f) = self.chaos.tighten_factor {
            if !(f > 0.0 && f <= 1.0) {
                return Err(CliError::field(format!("{field}.chaos.tighten_factor"), number(f), "must be in (0, 1]"));
            }
        }
        Ok(limits)
    }
}
