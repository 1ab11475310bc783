//! Learning from settled usage on the input side, and measuring how good
//! every estimate was.
//!
//! - [`InputCoefficients`]: other providers' tokenizers (Anthropic, Gemini,
//!   DeepSeek, …) are not public. We count their prompts with o200k and
//!   multiply by a per-route coefficient, learned as an exponentially
//!   weighted moving average of `actual ÷ o200k count` from each settled
//!   request's reported input.
//! - [`Accuracy`]: estimated vs actual tokens, input and output, per route,
//!   as histograms of the ratio, so the relative error's quantiles can be
//!   read (and alarmed on) at any time.

use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::output::Histogram;
use crate::{Error, Result, Route};

/// How an [`InputCoefficients`] learns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CoefficientConfig {
    /// The coefficient of a route with no history. Default 1.0: o200k as is,
    /// a fair proxy for modern tokenizers until usage says otherwise.
    pub initial: f64,
    /// Weight of each new sample, in (0, 1]. Default 0.1: about the last 10
    /// requests dominate, so the coefficient settles within a few dozen
    /// requests and one odd prompt moves it by a tenth at most.
    pub alpha: f64,
    /// The smallest coefficient. Default 0.5.
    pub min: f64,
    /// The largest coefficient. Default 3.0. Known tokenizers fall well
    /// within 0.5..=3.0 of o200k (Claude's runs about 1.1 to 1.4 on English,
    /// more on code); outside it, a misreported usage or a wrong route is
    /// likelier than a tokenizer, so samples are clamped to the range before
    /// they are averaged and one outlier cannot drag the estimate.
    pub max: f64,
}

impl Default for CoefficientConfig {
    fn default() -> Self {
        CoefficientConfig { initial: 1.0, alpha: 0.1, min: 0.5, max: 3.0 }
    }
}

impl CoefficientConfig {
    /// Checks `0 < min <= initial <= max` (all finite) and `alpha` in (0, 1].
    pub fn validate(&self) -> Result<()> {
        let CoefficientConfig { initial, alpha, min, max } = *self;
        if !(min.is_finite() && min > 0.0) {
            return Err(Error::config("coefficient.min", min, "must be a positive number"));
        }
        if !(max.is_finite() && max >= min) {
            return Err(Error::config("coefficient.max", max, "must be a number at least `min`"));
        }
        if !(initial >= min && initial <= max) {
            return Err(Error::config("coefficient.initial", initial, "must be within `min..=max`"));
        }
        if !(alpha > 0.0 && alpha <= 1.0) {
            return Err(Error::config("coefficient.alpha", alpha, "must be in (0, 1]"));
        }
        Ok(())
    }
}

/// Per-route input coefficients: `estimate = ceil(o200k count × coefficient)`.
///
/// Each coefficient is an `f64` kept as bits in an `AtomicU64` and updated
/// by compare-and-swap, so concurrent settles all land (the EWMA of racing
/// samples applies them in some order) and reads take one load.
///
/// ```
/// use llmgov::tokens::{CoefficientConfig, InputCoefficients};
///
/// let coefficients: InputCoefficients<u32> = InputCoefficients::new(CoefficientConfig::default())?;
/// assert_eq!(coefficients.estimate(1, 1000), 1000, "no history: 1.0");
/// for _ in 0..100 {
///     coefficients.record(1, 1000, 1200);
/// }
/// assert!((coefficients.coefficient(1) - 1.2).abs() < 0.01);
/// assert_eq!(coefficients.estimate(2, 1000), 1000, "routes learn apart");
/// # Ok::<(), llmgov::Error>(())
/// ```
pub struct InputCoefficients<R = Route> {
    config: CoefficientConfig,
    routes: super::LearningMap<R, Arc<AtomicU64>>,
}

impl<R: Eq + Hash> std::fmt::Debug for InputCoefficients<R> {
    // By hand: papaya's map is `Debug` only for hashable keys.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InputCoefficients").field("config", &self.config).field("routes", &self.routes.len()).finish()
    }
}

impl<R: Copy + Eq + Hash> InputCoefficients<R> {
    /// Coefficients with no history, after checking `config`.
    pub fn new(config: CoefficientConfig) -> Result<Self> {
        config.validate()?;
        Ok(InputCoefficients { config, routes: papaya::HashMap::with_hasher(Default::default()) })
    }

    /// Its configuration.
    pub fn config(&self) -> &CoefficientConfig {
        &self.config
    }

    /// The route's coefficient: [`CoefficientConfig::initial`] until it has history.
    pub fn coefficient(&self, route: R) -> f64 {
        self.routes.pin().get(&route).map_or(self.config.initial, |bits| f64::from_bits(bits.load(Relaxed)))
    }

    /// The route's input estimate from an o200k count, rounded up, saturating.
    pub fn estimate(&self, route: R, o200k_tokens: u64) -> u64 {
        // f64 → u64 casts saturate, and the coefficient is positive and finite.
        (o200k_tokens as f64 * self.coefficient(route)).ceil() as u64
    }

    /// Learns from a settled request: `o200k_tokens` is the raw o200k count
    /// (before the coefficient), `actual_input` the provider's reported
    /// prompt tokens. A zero count carries no ratio and is ignored.
    pub fn record(&self, route: R, o200k_tokens: u64, actual_input: u64) {
        if o200k_tokens == 0 {
            return;
        }
        let CoefficientConfig { initial, alpha, min, max } = self.config;
        let sample = (actual_input as f64 / o200k_tokens as f64).clamp(min, max);
        let map = self.routes.pin();
        let cell = map.get_or_insert_with(route, || Arc::new(AtomicU64::new(initial.to_bits())));
        let _ = cell.fetch_update(Relaxed, Relaxed, |bits| {
            let current = f64::from_bits(bits);
            Some((current + alpha * (sample - current)).clamp(min, max).to_bits())
        });
    }
}

/// Which estimate an accuracy figure is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    /// Prompt tokens: the count (or estimate) vs the provider's report.
    Input,
    /// Output tokens: the reservation vs the answer's length.
    Output,
}

/// The ratio `actual ÷ estimated` is recorded in fixed point with this as
/// 1.0. It is the midpoint of its histogram bucket (`2^20 + 2^14` in the
/// bucket `[2^20, 2^20 + 2^15)`), so an exact estimate reads back as an
/// error of exactly 0 rather than a bucket edge's 0 or 3%.
const RATIO_ONE: u64 = (1 << 20) + (1 << 14);

/// `actual ÷ estimated` in fixed point ([`RATIO_ONE`] is 1), at most the
/// histogram's largest value.
#[inline]
fn ratio(estimated: u64, actual: u64) -> u64 {
    match (estimated, actual) {
        (0, 0) => RATIO_ONE,
        (0, _) => Histogram::MAX_VALUE,
        // Counts the ledger accepts stay below 2^40, so u64 holds the product.
        (e, a) if a < 1 << 43 => (a * RATIO_ONE / e).min(Histogram::MAX_VALUE),
        (e, a) => (a as u128 * RATIO_ONE as u128 / e as u128).min(Histogram::MAX_VALUE as u128) as u64,
    }
}

/// A route's accuracy: one ratio histogram per side.
#[derive(Debug)]
struct RouteAccuracy {
    input: Histogram,
    output: Histogram,
}

/// Quantiles of one route's relative error on one side: `actual ÷
/// estimated − 1`, so −0.1 is 10% over-estimated and 0.25 is 25%
/// under-estimated. Each is exact to about ±1.6% of the ratio.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ErrorSummary {
    /// Samples ever recorded.
    pub samples: u64,
    /// The 5th percentile.
    pub p05: f64,
    /// The median: the estimate's bias.
    pub p50: f64,
    /// The 95th percentile.
    pub p95: f64,
}

/// Estimate accuracy per route, input and output.
///
/// ```
/// use llmgov::tokens::{Accuracy, Side};
///
/// let accuracy: Accuracy<u32> = Accuracy::new(0);
/// for _ in 0..10 {
///     accuracy.record(1, Side::Input, 1000, 1100);
/// }
/// let summary = accuracy.summary(1, Side::Input).unwrap();
/// assert_eq!(summary.samples, 10);
/// assert!((summary.p50 - 0.10).abs() < 0.02, "{summary:?}");
/// ```
pub struct Accuracy<R = Route> {
    half_life: u64,
    routes: super::LearningMap<R, Arc<RouteAccuracy>>,
}

impl<R: Eq + Hash> std::fmt::Debug for Accuracy<R> {
    // By hand: papaya's map is `Debug` only for hashable keys.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Accuracy").field("half_life", &self.half_life).field("routes", &self.routes.len()).finish()
    }
}

impl<R: Copy + Eq + Hash> Accuracy<R> {
    /// Empty accuracy figures whose samples' weight halves every
    /// `half_life` samples per route and side (0: never), as in [`Histogram`].
    pub fn new(half_life: u64) -> Self {
        Accuracy { half_life, routes: papaya::HashMap::with_hasher(Default::default()) }
    }

    /// Records one estimate and what it turned out to be. An estimate of 0
    /// with a non-zero actual counts as the largest error the histogram holds.
    pub fn record(&self, route: R, side: Side, estimated: u64, actual: u64) {
        self.with_entry(route, |entry| match side {
            Side::Input => entry.input.record(ratio(estimated, actual)),
            Side::Output => entry.output.record(ratio(estimated, actual)),
        })
    }

    /// Records both sides of one settled request, `(estimated, actual)`
    /// each, with one lookup of the route.
    pub fn record_request(&self, route: R, input: (u64, u64), output: (u64, u64)) {
        self.with_entry(route, |entry| {
            entry.input.record(ratio(input.0, input.1));
            entry.output.record(ratio(output.0, output.1));
        })
    }

    fn with_entry(&self, route: R, f: impl FnOnce(&RouteAccuracy)) {
        let map = self.routes.pin();
        let fresh = || {
            Arc::new(RouteAccuracy { input: Histogram::new(self.half_life), output: Histogram::new(self.half_life) })
        };
        f(map.get_or_insert_with(route, fresh))
    }

    /// The `q` quantile of the relative error (`actual ÷ estimated − 1`),
    /// read at its bucket's midpoint; `None` without samples.
    pub fn relative_error(&self, route: R, side: Side, q: f64) -> Option<f64> {
        let map = self.routes.pin();
        let entry = map.get(&route)?;
        let histogram = match side {
            Side::Input => &entry.input,
            Side::Output => &entry.output,
        };
        let (low, high) = Histogram::bucket_range(histogram.quantile(q)?);
        // Bucket bounds stay below 2^41: the sum cannot overflow.
        let midpoint = (low + high).div_ceil(2);
        Some(midpoint as f64 / RATIO_ONE as f64 - 1.0)
    }

    /// Samples recorded for the route on `side`.
    pub fn samples(&self, route: R, side: Side) -> u64 {
        let map = self.routes.pin();
        map.get(&route).map_or(0, |entry| match side {
            Side::Input => entry.input.recorded(),
            Side::Output => entry.output.recorded(),
        })
    }

    /// The 5th, 50th and 95th percentiles of the relative error; `None`
    /// without samples.
    pub fn summary(&self, route: R, side: Side) -> Option<ErrorSummary> {
        Some(ErrorSummary {
            samples: self.samples(route, side),
            p05: self.relative_error(route, side, 0.05)?,
            p50: self.relative_error(route, side, 0.50)?,
            p95: self.relative_error(route, side, 0.95)?,
        })
    }

    /// Every route with samples.
    pub fn routes(&self) -> Vec<R> {
        self.routes.pin().keys().copied().collect()
    }
}
