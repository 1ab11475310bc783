//! How provider scopes adapt to what the provider answers: AIMD on 429s,
//! slow start for new or reopened deployments, and the circuit breaker.

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Adaptation of provider scopes (`provider = true`) to the provider's
/// answers. Every field has a default; `[adaptive]` may be left out.
///
/// ```toml
/// [adaptive]
/// decrease = 0.7        # a 429 multiplies the scope's effective rate by this
/// increase = 0.1        # each window with successes adds back this fraction of the limit
/// min_rate = 0.05       # the effective rate never falls below this fraction
/// ramp = { start = 0.25, step = 0.25 }   # new or reopened: start at 25%, +25% a minute at most
/// breaker = { failures = 5, pauses = ["30s", "2m", "10m"] }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdaptiveConfig {
    /// The multiplicative decrease (AIMD's β), in (0, 1). Default 0.7.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decrease: Option<f64>,
    /// The additive increase: the fraction of the limit given back per
    /// window in which requests succeed, in (0, 1]. Default 0.1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub increase: Option<f64>,
    /// The floor of the effective rate, as a fraction of the limit, in
    /// (0, 1]. Default 0.05.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_rate: Option<f64>,
    /// Slow start. Without it a deployment starts at its full limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ramp: Option<RampConfig>,
    /// The circuit breaker of each provider scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breaker: Option<BreakerConfig>,
}

/// Slow start for a new or reopened deployment, so that a migration does
/// not meet the provider's acceleration limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RampConfig {
    /// The fraction of its limit a deployment starts at, in (0, 1].
    pub start: f64,
    /// The most its rate grows per minute, as a fraction of the limit, in
    /// (0, 1]. Growth also needs successes, as AIMD's increase does.
    pub step: f64,
}

/// When a provider scope's breaker opens, and for how long.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BreakerConfig {
    /// Consecutive failures (429s, 5xx, 529) that open it. Default 5.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failures: Option<u32>,
    /// How long it stays open the first, second, … time in a row; the last
    /// repeats. Default `["30s", "2m", "10m"]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pauses: Option<Vec<String>>,
}

/// The validated form the ledger reads.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Adaptive {
    pub decrease: f64,
    pub increase: f64,
    pub min_rate: f64,
    /// `(start, step per minute)`.
    pub ramp: Option<(f64, f64)>,
    pub failures: u32,
    pub pauses_ns: Vec<u64>,
}

const DEFAULT_PAUSES: [&str; 3] = ["30s", "2m", "10m"];

impl AdaptiveConfig {
    pub(crate) fn compile(&self) -> Result<Adaptive> {
        let fraction = |field: &str, value: Option<f64>, default: f64, open_top: bool| -> Result<f64> {
            let v = value.unwrap_or(default);
            let ok = v > 0.0 && if open_top { v < 1.0 } else { v <= 1.0 };
            if !ok {
                let range = if open_top { "(0, 1)" } else { "(0, 1]" };
                return Err(Error::config(format!("adaptive.{field}"), v, format!("must be in {range}")));
            }
            Ok(v)
        };
        let ramp = match &self.ramp {
            None => None,
            Some(r) => Some((
                fraction("ramp.start", Some(r.start), 1.0, false)?,
                fraction("ramp.step", Some(r.step), 1.0, false)?,
            )),
        };
        let breaker = self.breaker.clone().unwrap_or(BreakerConfig { failures: None, pauses: None });
        let failures = breaker.failures.unwrap_or(5);
        if failures == 0 {
            return Err(Error::config("adaptive.breaker.failures", 0, "must be at least 1"));
        }
        let pauses: Vec<String> =
            breaker.pauses.unwrap_or_else(|| DEFAULT_PAUSES.iter().map(|s| (*s).to_owned()).collect());
        if pauses.is_empty() {
            return Err(Error::config("adaptive.breaker.pauses", "[]", "needs at least one pause"));
        }
        let pauses_ns = pauses
            .iter()
            .enumerate()
            .map(|(i, p)| super::compile::parse_duration(&format!("adaptive.breaker.pauses[{i}]"), p))
            .collect::<Result<_>>()?;
        Ok(Adaptive {
            decrease: fraction("decrease", self.decrease, 0.7, true)?,
            increase: fraction("increase", self.increase, 0.1, false)?,
            min_rate: fraction("min_rate", self.min_rate, 0.05, false)?,
            ramp,
            failures,
            pauses_ns,
        })
    }
}
