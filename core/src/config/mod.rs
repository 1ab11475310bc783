//! Configuration: what users write (TOML or JSON), and its validation into
//! the compiled limits the ledger enforces. A config that loads is valid;
//! the hot path never parses or checks it again.

pub mod adaptive;
pub mod classes;
mod compile;
mod presets;
pub mod profiles;
mod toml_text;
mod unique;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{Dimension, Error, Result};

pub use crate::pricing::PriceConfig;
pub use adaptive::{AdaptiveConfig, BreakerConfig, RampConfig};
pub(crate) use compile::compile;
pub use presets::PRESETS;
pub use profiles::{BudgetThresholds, ProfileConfig};
pub use toml_text::toml_to_value;
use unique::unique_keys;

/// A governor's configuration.
///
/// ```toml
/// safety_margin = 0.9
/// permit_ttl = "10m"
///
/// [scopes."openai/gpt-4o"]
/// limits = [
///   { dimension = "requests", amount = 500, window = "1m" },
///   { dimension = "tokens", amount = 30000, window = "1m" },
/// ]
///
/// [scopes."tenants/*"]
/// limits = [{ dimension = "tokens", amount = 10000, window = "1m", algorithm = "sliding_window" }]
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Fraction of every limit the governor uses, in (0, 1]; a scope's own
    /// margin overrides it. Default 1. Cost budgets are used in full: only
    /// their scope's own margin scales them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub safety_margin: Option<f64>,
    /// How long a permit may stay unsettled before it expires, charged as
    /// estimated, e.g. `"10m"` (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permit_ttl: Option<String>,
    /// Scopes by path. A path with `*` segments is a template: each concrete
    /// path it matches becomes a scope of its own on first use.
    #[serde(default, deserialize_with = "unique_keys")]
    pub scopes: BTreeMap<String, ScopeConfig>,
    /// Prices per model, by name, in one currency of your choice (budgets
    /// are in the same); a scope names its model's with `pricing`
    /// (see [`PriceConfig`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty", deserialize_with = "unique_keys")]
    pub pricing: BTreeMap<String, PriceConfig>,
    /// How a [`crate::Governor`] learns output lengths for limits with
    /// `reserve_output = "expected"` (default: p95, 20 samples first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<crate::tokens::OutputConfig>,
    /// How provider scopes adapt to the provider's answers: AIMD, slow
    /// start and the circuit breaker (see [`AdaptiveConfig`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<AdaptiveConfig>,
    /// Model profiles by name: deployments to route among, and fallbacks
    /// (see [`ProfileConfig`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty", deserialize_with = "unique_keys")]
    pub profiles: BTreeMap<String, ProfileConfig>,
    /// Traffic classes' queues by name (priority, queue bound, maximum
    /// wait, DRR quantum); see [`classes`]. Built-in classes need no entry.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty", deserialize_with = "unique_keys")]
    pub classes: BTreeMap<String, classes::ClassConfig>,
    /// Fair-share weights, guarantees and ceilings by scope path or
    /// template; see [`classes`].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty", deserialize_with = "unique_keys")]
    pub shares: BTreeMap<String, classes::ShareConfig>,
}

/// The limits of one scope (or of every scope a template makes).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScopeConfig {
    /// This scope's safety margin, overriding the global one (and the only
    /// one that scales its cost budgets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub safety_margin: Option<f64>,
    /// The limits; every one applies. None only with a `pricing`: the
    /// scope then only prices its routes.
    #[serde(default)]
    pub limits: Vec<LimitConfig>,
    /// Whether this scope is a provider's pool (an organisation, a key, a
    /// deployment): what the provider answers (429s, rate-limit headers) is
    /// fed back into its limits. Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<bool>,
    /// The pricing table (a key of [`Config::pricing`]) of the model this
    /// scope serves, typically a deployment: requests on a route through it
    /// are priced at it, which the route's `cost` limits charge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pricing: Option<String>,
}

/// How a windowed limit counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Algorithm {
    /// Continuous refill of `amount` per `window`, holding up to `burst`.
    /// After idling it admits a burst and then the refill: up to
    /// `burst + amount` in the first window. OpenAI enforces this way.
    TokenBucket,
    /// Never more than `amount` in any trailing `window`.
    SlidingWindow,
}

/// What a limit that counts output reserves for it at admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputReservation {
    /// The request's `max_tokens`: for providers that charge it at admission
    /// (OpenAI's limiter, Anthropic's output estimate). The default.
    MaxTokens,
    /// The request's expected output (e.g. a quantile of past outputs), for
    /// providers that charge actual usage and for llmgov's own budgets. A
    /// tighter `max_tokens` raises throughput on `max_tokens` limits; this
    /// one raises it without touching requests.
    Expected,
}

impl Algorithm {
    /// The name used in configs.
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::TokenBucket => "token_bucket",
            Algorithm::SlidingWindow => "sliding_window",
        }
    }
}

/// One limit: dimension × amount × window × algorithm.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitConfig {
    /// What is counted.
    pub dimension: Dimension,
    /// How much per window (or, for concurrency, at once); at least one.
    /// Left out on a provider scope's token bucket, it is discovered:
    /// taken from the provider's `limit` headers (a window of `"1m"` for
    /// per-minute headers, `"1d"` for daily ones), admitting one request per
    /// window until the first answer says it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amount: Option<u64>,
    /// `cost` limits only, instead of `amount`: the budget per window in
    /// the config's currency, e.g. `12.5`. A budget is a sliding window
    /// unless it says otherwise: never more than it in any trailing window
    /// (`"1d"`, `"30d"`, `"1month"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<f64>,
    /// Window length, e.g. `"1s"`, `"1m"`, `"1d"`, `"1h 30m"`. Required for
    /// every dimension but concurrency, which has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
    /// Default `token_bucket`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub algorithm: Option<Algorithm>,
    /// Token bucket only: the most it holds. Default `amount`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u64>,
    /// Sliding window only: slots the window is divided into (default 60).
    /// The window never admits more than `amount` in any trailing window; it
    /// may refuse up to one slot early.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slots: Option<u32>,
    /// Input and token dimensions: whether cached input tokens count.
    /// Default true; Anthropic's input limits do not count cache reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count_cached_input: Option<bool>,
    /// Output and token dimensions: what to reserve for the output.
    /// Default `max_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserve_output: Option<OutputReservation>,
}

impl Config {
    /// Parses a TOML config. The error names the field and value at fault.
    pub fn from_toml(text: &str) -> Result<Self> {
        Self::from_value(toml_to_value(text)?)
    }

    /// Parses a JSON config. The error names the field and value at fault.
    pub fn from_json(text: &str) -> Result<Self> {
        if !text.trim_start().starts_with('{') {
            let shown: String = text.trim_start().chars().take(40).collect();
            return Err(not_an_object("<json>", shown));
        }
        let mut de = serde_json::Deserializer::from_str(text);
        let config = serde_path_to_error::deserialize(&mut de).map_err(path_error)?;
        de.end().map_err(|e| Error::config("<json>", "", e.to_string()))?;
        Ok(config)
    }

    /// Builds a config from an already-parsed JSON value (as the scenario
    /// files and the bindings hold it).
    pub fn from_value(value: serde_json::Value) -> Result<Self> {
        if !value.is_object() {
            let shown: String = value.to_string().chars().take(40).collect();
            return Err(not_an_object("<config>", shown));
        }
        serde_path_to_error::deserialize(value).map_err(path_error)
    }

    /// A shipped preset by name; see [`PRESETS`].
    pub fn preset(name: &str) -> Result<Self> {
        presets::load(name)
    }

    /// Checks every rule without building a governor.
    pub fn validate(&self) -> Result<()> {
        classes::compile(&self.classes, &self.shares)?;
        compile(self).map(drop)
    }
}

/// A config is a table of sections. Serde would also fill the struct from
/// an array, by position (`[null, null, {…}]` set `scopes`).
fn not_an_object(field: &str, shown: String) -> Error {
    Error::config(field, shown, "a config is an object of sections, such as {\"scopes\": {…}}")
}

/// Turns a serde error at a path into an error naming the field and the value.
fn path_error<E: std::fmt::Display>(e: serde_path_to_error::Error<E>) -> Error {
    let mut field = e.path().to_string();
    let reason = e.inner().to_string();
    let quoted = |quote: char| reason.split(quote).nth(1).map(str::to_owned);
    let value = if let Some(missing) = reason.strip_prefix("missing field `") {
        // The field is absent: name it, with no value.
        field = format!("{field}.{}", missing.trim_end_matches('`'));
        String::new()
    } else if reason.starts_with("invalid type: string") {
        // `invalid type: string "5000", expected u64`
        quoted('"').unwrap_or_default()
    } else {
        // serde quotes values in backticks: "unknown variant `foo`".
        quoted('`').unwrap_or_default()
    };
    Error::InvalidConfig { field, value, reason }
}
