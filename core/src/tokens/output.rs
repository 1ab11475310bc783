//! Output reservations learned from settled usage: a lock-free log-linear
//! [`Histogram`] of observed output lengths per (route, class), and an
//! [`OutputModel`] that reserves `min(max_tokens, pN)` of them.
//!
//! # The histogram
//!
//! HdrHistogram-style log-linear buckets of `AtomicU64` weights: values
//! below 32 get a bucket each, and every power of two above is split into 32
//! equal buckets, so a bucket spans at most 1/32 (3.1%) of its lowest value.
//! 1153 buckets cover `0..=2^40` tokens; larger values count as 2^40.
//! Recording is one `fetch_add` on a bucket and one on a counter: no lock,
//! no allocation, and no count is ever lost to a race.
//!
//! # Following a changing workload: exponential decay by halving
//!
//! A histogram built with a `half_life` of `h` records halves every bucket
//! each time its `h`-th, `2h`-th, … record lands, so a record's weight halves
//! every `h` records (count-based, so it needs no clock and stays sans-IO).
//! We chose this over a sliding pair of histograms because it needs no
//! rotation: each halving is one compare-and-swap per non-empty bucket, and
//! an increment racing it is halved or not, but never lost. Records weigh
//! 2^16 rather than 1 so that halving never rounds a sparse tail bucket away
//! (a single record survives 16 halvings). The halving runs from the lowest
//! bucket up, so a quantile read mid-way sees weight shifted upwards: a
//! transient over-estimate, the safe side for a reservation.
//!
//! The asymmetry is deliberate and safe: when outputs grow, the high
//! quantile follows as soon as the new records are 5% of the weight; when
//! they shrink, the old tail must decay below 5% first, about 4.3
//! half-lives.

use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::{Error, Result, Route, MAX_TOKENS};

/// Values at or below this get buckets of their own, one each.
const SUB_BITS: u32 = 5;
const SUB: u64 = 1 << SUB_BITS;
/// Buckets covering `0..=MAX_VALUE`: 32 exact ones, then 32 per octave.
const BUCKETS: usize = ((40 - SUB_BITS as usize) + 1) * SUB as usize + 1;
/// The weight of one record, so that halving rounds off at most 2^-16 of
/// one record per bucket.
const UNIT: u64 = 1 << 16;
/// Marks "no quantile cached yet".
const NONE: u64 = u64::MAX;

/// Bucket of `value`, saturated at [`Histogram::MAX_VALUE`].
fn bucket(value: u64) -> usize {
    let value = value.min(Histogram::MAX_VALUE);
    if value < SUB {
        return value as usize;
    }
    let exponent = 63 - value.leading_zeros();
    let shift = exponent - SUB_BITS;
    ((shift as u64 + 1) * SUB + ((value >> shift) - SUB)) as usize
}

/// The lowest and highest value of bucket `index`.
fn bounds(index: usize) -> (u64, u64) {
    let index = index as u64;
    if index < SUB {
        return (index, index);
    }
    let shift = index / SUB - 1;
    let lowest = (index % SUB + SUB) << shift;
    (lowest, (lowest + (1 << shift) - 1).min(Histogram::MAX_VALUE))
}

/// A lock-free histogram of token counts with ~3% relative precision and
/// optional exponential decay (see the module doc).
///
/// ```
/// use llmgov::tokens::Histogram;
///
/// let h = Histogram::new(0);
/// for v in 1..=1000 {
///     h.record(v);
/// }
/// let p95 = h.quantile(0.95).unwrap();
/// assert!((950..=980).contains(&p95), "{p95}");
/// ```
#[derive(Debug)]
pub struct Histogram {
    /// Weights in units of [`UNIT`] per record.
    buckets: Box<[AtomicU64]>,
    /// Records ever made (not decayed): drives decay and the cache refresh.
    recorded: AtomicU64,
    /// Halve every this many records; 0 never decays.
    half_life: u64,
    /// The quantile kept in `tracked`, if any.
    tracked_q: Option<f64>,
    /// The tracked quantile as last computed, or [`NONE`].
    tracked: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new(0)
    }
}

impl Histogram {
    /// The largest value told apart; larger values are recorded as this.
    pub const MAX_VALUE: u64 = 1 << 40;

    /// An empty histogram whose weights halve every `half_life` records
    /// (0: never; every record then weighs the same forever).
    pub fn new(half_life: u64) -> Self {
        Histogram {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            recorded: AtomicU64::new(0),
            half_life,
            tracked_q: None,
            tracked: AtomicU64::new(NONE),
        }
    }

    /// Like [`Self::new`], also keeping quantile `q` ready for
    /// [`Self::tracked`], so that a hot path reads one atomic instead of
    /// scanning 1153 buckets. It is recomputed on each of the first 64
    /// records, then on every 16th and after every halving: at most 15
    /// records stale.
    pub fn tracking(half_life: u64, q: f64) -> Self {
        Histogram { tracked_q: Some(q), ..Self::new(half_life) }
    }

    /// The lowest and highest value recorded in the same bucket as `value`:
    /// what a quantile can tell apart.
    pub fn bucket_range(value: u64) -> (u64, u64) {
        bounds(bucket(value))
    }

    /// Records one observed value.
    pub fn record(&self, value: u64) {
        self.buckets[bucket(value)].fetch_add(UNIT, Relaxed);
        let n = self.recorded.fetch_add(1, Relaxed).wrapping_add(1);
        let decayed = self.half_life > 0 && n % self.half_life == 0;
        if decayed {
            self.halve();
        }
        if self.tracked_q.is_some() && (n <= 64 || n % 16 == 0 || decayed) {
            self.refresh();
        }
    }

    /// Halves every bucket, lowest first (see the module doc for why that
    /// order). Each halving is one CAS, so concurrent increments survive.
    fn halve(&self) {
        for cell in self.buckets.iter() {
            if cell.load(Relaxed) != 0 {
                let _ = cell.fetch_update(Relaxed, Relaxed, |w| Some(w - w / 2));
            }
        }
    }

    /// Recomputes the tracked quantile. Racing refreshes may store an older
    /// figure last; the next refresh corrects it.
    fn refresh(&self) {
        if let Some(value) = self.tracked_q.and_then(|q| self.quantile(q)) {
            self.tracked.store(value, Relaxed);
        }
    }

    /// Records ever made, decay aside.
    pub fn recorded(&self) -> u64 {
        self.recorded.load(Relaxed)
    }

    /// The decayed number of records: equal to [`Self::recorded`] without
    /// decay, otherwise a weighted count (each record halved per half-life).
    pub fn weight(&self) -> f64 {
        let total = self.buckets.iter().map(|b| b.load(Relaxed)).fold(0u64, u64::saturating_add);
        total as f64 / UNIT as f64
    }

    /// The tracked quantile as last refreshed (see [`Self::tracking`]);
    /// `None` before the first record or if the histogram tracks none.
    pub fn tracked(&self) -> Option<u64> {
        Some(self.tracked.load(Relaxed)).filter(|&v| v != NONE)
    }

    /// The `q` quantile (0 = smallest, 1 = largest) of the recorded values,
    /// by nearest rank over the weights, as the highest value of its bucket:
    /// never below the exact quantile, and at most 1/32 above it. `None` if
    /// nothing is recorded or `q` is NaN; `q` outside `[0, 1]` is clamped.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if q.is_nan() {
            return None;
        }
        // One snapshot, so the total and the walk agree.
        let mut weights = [0u64; BUCKETS];
        for (w, b) in weights.iter_mut().zip(self.buckets.iter()) {
            *w = b.load(Relaxed);
        }
        let total = weights.iter().fold(0u64, |a, &w| a.saturating_add(w));
        if total == 0 {
            return None;
        }
        // The rank in weight units, at least the first unit of weight.
        let target = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).clamp(1, total);
        let mut cumulative = 0u64;
        for (index, &w) in weights.iter().enumerate() {
            cumulative = cumulative.saturating_add(w);
            if cumulative >= target {
                return Some(bounds(index).1);
            }
        }
        None
    }
}

/// How an [`OutputModel`] turns history into a reservation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutputConfig {
    /// The quantile of observed outputs to reserve, in (0, 1]. Default 0.95:
    /// one request in twenty runs past its reservation and is charged the
    /// rest at settle (as debt, if need be).
    pub quantile: f64,
    /// What a request without `max_tokens` reserves while its (route, class)
    /// has too little history. Default 1024: a bounded guess, never the
    /// model's whole context (a 128k reservation would stall a 30k TPM
    /// limit), nor a tiny one that every answer overruns.
    pub default_max_tokens: u64,
    /// Records a (route, class) needs before its quantile is trusted.
    /// Default 20: a p95 of fewer outputs is little more than their maximum.
    /// Until then a request reserves its `max_tokens` (or
    /// `default_max_tokens`): the conservative default.
    pub min_samples: u64,
    /// Records after which an output's weight halves (see the module doc).
    /// Default 1000; 0 never forgets.
    pub half_life: u64,
}

impl Default for OutputConfig {
    fn default() -> Self {
        OutputConfig { quantile: 0.95, default_max_tokens: 1024, min_samples: 20, half_life: 1000 }
    }
}

impl OutputConfig {
    /// Checks every field: a quantile in (0, 1] and a default in
    /// `1..=`[`MAX_TOKENS`].
    pub fn validate(&self) -> Result<()> {
        if !(self.quantile > 0.0 && self.quantile <= 1.0) {
            return Err(Error::config("output.quantile", self.quantile, "must be in (0, 1]"));
        }
        if self.default_max_tokens == 0 {
            return Err(Error::config("output.default_max_tokens", 0, "must be at least 1"));
        }
        // The default becomes a request's expected output, which admission
        // refuses above MAX_TOKENS: a larger one would refuse every request
        // without max_tokens, naming a field the caller never set.
        if self.default_max_tokens > MAX_TOKENS {
            return Err(Error::config(
                "output.default_max_tokens",
                self.default_max_tokens,
                "must be at most 2^40 tokens",
            ));
        }
        Ok(())
    }
}

/// A histogram's key: a route and a class of requests on it.
#[derive(Debug, PartialEq, Eq, Hash)]
struct ClassKey<R> {
    route: R,
    class: Box<str>,
}

/// The borrowed form of [`ClassKey`], for lookups that allocate nothing.
/// Its derived hash equals the owned key's (`Box<str>` hashes as `str`).
#[derive(Hash)]
struct ClassRef<'a, R> {
    route: R,
    class: &'a str,
}

impl<R: Eq> papaya::Equivalent<ClassKey<R>> for ClassRef<'_, R> {
    fn equivalent(&self, key: &ClassKey<R>) -> bool {
        self.route == key.route && self.class == &*key.class
    }
}

/// Learned output reservations per (route, class): record each settled
/// request's actual output, and reserve `min(max_tokens, pN)` for the next.
///
/// Sans-IO and lock-free: lookups take no lock and allocate nothing; a new
/// (route, class) allocates its histogram (about 9 KB) once. Classes are
/// whatever the caller names (e.g. "chat", "summarise"); keep their number
/// bounded, since each one seen is kept.
///
/// The reservation, by case:
///
/// | `max_tokens` | ≥ `min_samples` outputs seen | reserves |
/// |---|---|---|
/// | `Some(m)` | yes | `min(m, pN)` |
/// | `Some(m)` | no  | `m` (the conservative default) |
/// | `None` | yes | `pN`: only the model bounds the answer, so nothing caps it |
/// | `None` | no  | [`OutputConfig::default_max_tokens`] |
///
/// ```
/// use llmgov::tokens::{OutputConfig, OutputModel};
///
/// let model: OutputModel<u32> = OutputModel::new(OutputConfig::default())?;
/// assert_eq!(model.reservation(7, "chat", Some(4096)), 4096, "no history: max_tokens");
/// assert_eq!(model.reservation(7, "chat", None), 1024, "no history, no max_tokens: the default");
/// for n in 0..100 {
///     model.record(7, "chat", 200 + n);
/// }
/// let reserved = model.reservation(7, "chat", Some(4096));
/// assert!((295..=305).contains(&reserved), "{reserved}");
/// # Ok::<(), llmgov::Error>(())
/// ```
pub struct OutputModel<R = Route> {
    config: OutputConfig,
    histograms: super::LearningMap<ClassKey<R>, Arc<Histogram>>,
}

impl<R: Eq + Hash> std::fmt::Debug for OutputModel<R> {
    // By hand: papaya's map is `Debug` only for hashable keys.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputModel").field("config", &self.config).field("classes", &self.histograms.len()).finish()
    }
}

impl<R: Copy + Eq + Hash> OutputModel<R> {
    /// A model with no history, after checking `config`.
    pub fn new(config: OutputConfig) -> Result<Self> {
        config.validate()?;
        Ok(OutputModel { config, histograms: papaya::HashMap::with_hasher(Default::default()) })
    }

    /// Its configuration.
    pub fn config(&self) -> &OutputConfig {
        &self.config
    }

    /// Records a settled request's actual output tokens.
    pub fn record(&self, route: R, class: &str, actual_output: u64) {
        let map = self.histograms.pin();
        match map.get(&ClassRef { route, class }) {
            Some(histogram) => histogram.record(actual_output),
            None => {
                let key = ClassKey { route, class: class.into() };
                let fresh = || Arc::new(Histogram::tracking(self.config.half_life, self.config.quantile));
                map.get_or_insert_with(key, fresh).record(actual_output);
            }
        }
    }

    /// The learned pN of (route, class), once it has `min_samples` records.
    pub fn learned(&self, route: R, class: &str) -> Option<u64> {
        let map = self.histograms.pin();
        let histogram = map.get(&ClassRef { route, class })?;
        if histogram.recorded() < self.config.min_samples {
            return None;
        }
        histogram.tracked()
    }

    /// The output tokens to reserve for a request with this `max_tokens`
    /// (see the table in the type's doc). Reads one atomic: cheap enough for
    /// every admission.
    pub fn reservation(&self, route: R, class: &str, max_tokens: Option<u64>) -> u64 {
        match (max_tokens, self.learned(route, class)) {
            (Some(max), Some(learned)) => max.min(learned),
            (Some(max), None) => max,
            (None, Some(learned)) => learned,
            (None, None) => self.config.default_max_tokens,
        }
    }

    /// The histogram of (route, class), for metrics and exact quantiles.
    pub fn histogram(&self, route: R, class: &str) -> Option<Arc<Histogram>> {
        self.histograms.pin().get(&ClassRef { route, class }).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_cover_the_range() {
        let mut expected_low = 0;
        for index in 0..BUCKETS {
            let (low, high) = bounds(index);
            assert_eq!(low, expected_low, "bucket {index}");
            assert_eq!(bucket(low), index);
            assert_eq!(bucket(high), index);
            assert!(high - low <= low / SUB, "bucket {index} is wider than 1/32");
            expected_low = high + 1;
        }
        assert_eq!(bounds(BUCKETS - 1), (Histogram::MAX_VALUE, Histogram::MAX_VALUE));
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn halving_keeps_single_records() {
        let h = Histogram::new(2);
        h.record(10_000);
        h.record(10);
        assert!((h.weight() - 1.0).abs() < 1e-9, "{}", h.weight());
        assert_eq!(h.quantile(1.0), Some(bounds(bucket(10_000)).1));
    }
}
