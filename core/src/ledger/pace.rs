//! The effective pace of a provider scope's token bucket: what AIMD, slow
//! start and the provider's `limit` headers make of the configured rate.
//!
//! A bucket's shape (its burst as time, `tau`) stays as configured; the pace
//! changes what a unit costs in time. At rate factor `r` and base amount `L`
//! per window, a unit costs `window / (L · r)`: the refill slows by `r`, and
//! the burst in units shrinks with it. A charge never costs more than the
//! whole burst, so a request that fits the configured limit always fits
//! eventually, whatever the pace.
//!
//! Everything here is atomics: `try_acquire` reads one word, and only
//! feedback (`observe`) writes.

use std::sync::atomic::{AtomicU64, Ordering};

use super::gcra::GcraParams;
use crate::config::adaptive::Adaptive;

/// A pace's `changed_at` before anything dated it: its ramp starts with the
/// first answer (a scope made from a template, at a time unknown here).
pub(crate) const UNSTARTED: u64 = u64::MAX;

/// The rate factor 1, in the word's fixed point.
pub(crate) const FULL_RATE: u64 = 1 << 16;
/// The word: `rate << RATE_SHIFT | base amount`, the amount 0 meaning "as configured".
const RATE_SHIFT: u32 = 47;
const AMOUNT_MASK: u64 = (1 << RATE_SHIFT) - 1;
const NOMINAL: u64 = FULL_RATE << RATE_SHIFT;

/// Without a permit to date it, a 429 within this long of the last decrease
/// is taken as part of the same overload.
const DECREASE_GAP_NS: u64 = 1_000_000_000;
const MINUTE_NS: f64 = 60e9;

/// The pace of one token-bucket limit of a provider scope.
#[derive(Debug)]
pub(crate) struct Pace {
    word: AtomicU64,
    /// When the rate last fell (0: never): 429s for requests sent before
    /// it are old news.
    decreased_at: AtomicU64,
    /// When the rate last changed: it grows at most one step per window.
    changed_at: AtomicU64,
    /// Until when a provider's 429 holds the bucket empty (0: never held).
    held_until: AtomicU64,
    /// When a discovered amount last fell (0: never), and the largest
    /// amount in effect in the permit lifetime before that: a request
    /// acquired before the fall paid at most that much a unit.
    lowered_at: AtomicU64,
    amount_before: AtomicU64,
}

/// A limit's shape, as the pace needs it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape<'a> {
    pub params: &'a GcraParams,
    pub window_ns: u64,
    /// Whether the amount is the provider's to tell (left unset in the config).
    pub discovered: bool,
    /// The amount enforced before any feedback (after the safety margin).
    pub amount: u64,
    /// Amount enforced ÷ amount configured: applied to discovered amounts too.
    pub margin: f64,
}

fn pack(rate: u64, amount: u64) -> u64 {
    (rate << RATE_SHIFT) | amount.min(AMOUNT_MASK)
}

fn unpack(word: u64) -> (u64, u64) {
    (word >> RATE_SHIFT, word & AMOUNT_MASK)
}

impl Pace {
    /// A pace at `rate` (a fraction of [`FULL_RATE`]) of the configured amount.
    pub fn new(rate: u64, now: u64) -> Self {
        Pace {
            word: AtomicU64::new(pack(rate.clamp(1, FULL_RATE), 0)),
            decreased_at: AtomicU64::new(0),
            changed_at: AtomicU64::new(now),
            held_until: AtomicU64::new(0),
            lowered_at: AtomicU64::new(0),
            amount_before: AtomicU64::new(0),
        }
    }

    /// Time one unit costs at this pace, or `None` at the configured pace.
    #[inline]
    fn unit_ns(&self, shape: Shape) -> Option<f64> {
        let word = self.word.load(Ordering::Relaxed);
        if word == NOMINAL && !shape.discovered {
            return None;
        }
        let (rate, amount) = unpack(word);
        let base = if amount == 0 { shape.params.unit_ns() } else { shape.window_ns as f64 / amount as f64 };
        Some(base * FULL_RATE as f64 / rate as f64)
    }

    /// What `units` cost in time now: at least their configured cost (a
    /// configured limit is never exceeded), at most the whole burst.
    #[inline]
    pub fn charge_ns(&self, shape: Shape, units: u64) -> u64 {
        let exact = if shape.discovered { 0 } else { shape.params.units_to_ns(units) };
        match self.unit_ns(shape) {
            None => exact,
            Some(unit) => exact.max(((units as f64 * unit).ceil() as u64).min(shape.params.tau_ns())),
        }
    }

    /// What `units` beyond a request's reservation cost in time now: as
    /// [`Self::charge_ns`], but nothing on a limit still waiting to learn
    /// its amount. There a request costs the window's one admission,
    /// whatever its size, and already paid it; a window more per streamed
    /// chunk would be debt no refund at the learned amount could repay.
    #[inline]
    pub fn overage_ns(&self, shape: Shape, units: u64) -> u64 {
        let (_, amount) = unpack(self.word.load(Ordering::Relaxed));
        if shape.discovered && amount == 0 {
            return 0;
        }
        self.charge_ns(shape, units)
    }

    /// What `units` of a request acquired at `acquired_at` are worth in
    /// time when given back: their configured cost, which never exceeds
    /// what any pace charged for them (so refunds never lift a configured
    /// limit); on a discovered limit, their cost at the provider's amount,
    /// or at the amount before a fall since the request paid (it paid less
    /// a unit then, and a refund gives back no more than was paid).
    pub fn refund_ns(&self, shape: Shape, units: u64, acquired_at: u64) -> u64 {
        let (_, amount) = unpack(self.word.load(Ordering::Acquire));
        match (shape.discovered, amount) {
            (false, _) => shape.params.units_to_ns(units),
            (true, 0) => 0,
            (true, mut amount) => {
                if acquired_at <= self.lowered_at.load(Ordering::Relaxed) {
                    amount = amount.max(self.amount_before.load(Ordering::Relaxed));
                }
                ((units as f64 * shape.window_ns as f64 / amount as f64) as u64).min(shape.params.tau_ns())
            }
        }
    }

    /// What the `units` of a request never sent are worth in time when
    /// given back: as [`Self::refund_ns`], except on a limit still waiting
    /// to learn its amount. There the request took the window's one
    /// admission, whatever its size (see [`Self::overage_ns`]), and gives
    /// it back whole: no answer will teach the limit for it.
    pub fn cancel_refund_ns(&self, shape: Shape, units: u64, acquired_at: u64) -> u64 {
        let (_, amount) = unpack(self.word.load(Ordering::Relaxed));
        match (shape.discovered, amount) {
            (true, 0) => self.charge_ns(shape, units),
            _ => self.refund_ns(shape, units, acquired_at),
        }
    }

    /// Notes that a 429 holds the bucket empty until `until`, so that
    /// refunds made meanwhile cannot reopen it (see [`Self::refund_floor`]).
    pub fn hold_empty_until(&self, until: u64) {
        self.held_until.fetch_max(until, Ordering::Relaxed);
    }

    /// The earliest theoretical arrival time a refund at `now` may leave on
    /// a bucket of burst `tau_ns`: empty until the 429's hold ends. The
    /// transports report a refusal and then cancel its permit; that refund
    /// (or an in-flight request's) must not undo the provider's retry-after.
    pub fn refund_floor(&self, now: u64, tau_ns: u64) -> u64 {
        match self.held_until.load(Ordering::Relaxed) {
            until if now < until => until.saturating_add(tau_ns),
            _ => 0,
        }
    }

    /// Units that `ns` of room holds at this pace.
    pub fn units_in(&self, shape: Shape, ns: i128) -> i64 {
        match self.unit_ns(shape) {
            None => shape.params.units_in(ns),
            // The epsilon absorbs the float error of `tau / unit` (20999.99…
            // for 21000), which the ceiling in `charge_ns` absorbs too.
            Some(unit) => (ns as f64 / unit + 1e-6).floor().clamp(i64::MIN as f64, i64::MAX as f64) as i64,
        }
    }

    /// The amount per window enforced now: base amount × rate factor.
    pub fn effective_amount(&self, shape: Shape) -> u64 {
        let (rate, amount) = unpack(self.word.load(Ordering::Relaxed));
        let base = match (amount, shape.discovered) {
            (0, true) => return 0,
            (0, false) => shape.amount,
            (a, _) => a,
        };
        // Rounded to nearest: the rate's fixed point holds 0.7 as 0.69999….
        ((base as u128 * rate as u128 + FULL_RATE as u128 / 2) / FULL_RATE as u128) as u64
    }

    /// Takes the provider's own limit (per window) as the base amount:
    /// where the config left it unset, or where it is lower than configured.
    /// Returns whether the base changed. A reported limit of 0 is no limit
    /// a provider enforces (it would refuse everything): it is ignored.
    /// `permit_life_ns` is how long a permit acquired now can be settled.
    pub fn discover(&self, shape: Shape, reported: u64, now: u64, permit_life_ns: u64) -> bool {
        if reported == 0 {
            return false;
        }
        let amount = ((reported as f64 * shape.margin).floor() as u64).clamp(1, AMOUNT_MASK);
        let target = if !shape.discovered && amount >= shape.amount { 0 } else { amount };
        let mut word = self.word.load(Ordering::Relaxed);
        loop {
            let (rate, base) = unpack(word);
            if base == target {
                return false;
            }
            if shape.discovered && target < base {
                // Noted before the new amount is published (the exchange
                // releases it), so a refund that reads the new amount also
                // reads what was paid before it.
                self.note_fall(base, now, permit_life_ns);
            }
            match self.word.compare_exchange_weak(word, pack(rate, target), Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(actual) => word = actual,
            }
        }
    }

    /// Records that the discovered amount falls from `before` at `now`.
    fn note_fall(&self, before: u64, now: u64, permit_life_ns: u64) {
        let last = self.lowered_at.load(Ordering::Relaxed);
        if last == 0 || now.saturating_sub(last) > permit_life_ns {
            // No permit acquired before the last fall is still open.
            self.amount_before.store(before, Ordering::Relaxed);
        } else {
            self.amount_before.fetch_max(before, Ordering::Relaxed);
        }
        self.lowered_at.fetch_max(now.max(1), Ordering::Release);
    }

    /// AIMD's decrease on a 429 for a request sent at `sent_at` (`None`:
    /// unknown). A 429 for a request sent before the last decrease is part
    /// of the overload that decrease answered, and changes nothing.
    pub fn decrease(&self, adaptive: &Adaptive, sent_at: Option<u64>, now: u64) -> bool {
        let last = self.decreased_at.load(Ordering::Relaxed);
        let news = match sent_at {
            Some(sent) => sent >= last,
            // 0: no decrease yet (one stores at least 1), so no gap to keep.
            None => last == 0 || now >= last.saturating_add(DECREASE_GAP_NS),
        };
        if !news || self.decreased_at.compare_exchange(last, now.max(1), Ordering::AcqRel, Ordering::Relaxed).is_err() {
            return false;
        }
        self.changed_at.store(now, Ordering::Relaxed);
        let floor = (adaptive.min_rate * FULL_RATE as f64).ceil() as u64;
        self.update(|rate, base| {
            let lower = ((rate as f64 * adaptive.decrease).round() as u64).max(floor).min(rate);
            (lower != rate).then_some((lower, base))
        })
    }

    /// AIMD's increase after a success: one step per window at most (capped
    /// by the ramp's step per minute), up to the full rate.
    pub fn increase(&self, adaptive: &Adaptive, window_ns: u64, now: u64) -> bool {
        let last = self.changed_at.load(Ordering::Relaxed);
        if last == UNSTARTED {
            // The first answer starts the clock: no step a moment after creation.
            let _ = self.changed_at.compare_exchange(UNSTARTED, now, Ordering::AcqRel, Ordering::Relaxed);
            return false;
        }
        if now < last.saturating_add(window_ns) {
            return false;
        }
        let (rate, _) = unpack(self.word.load(Ordering::Relaxed));
        if rate >= FULL_RATE
            || self.changed_at.compare_exchange(last, now, Ordering::AcqRel, Ordering::Relaxed).is_err()
        {
            return false;
        }
        let mut step = adaptive.increase;
        if let Some((_, per_minute)) = adaptive.ramp {
            step = step.min(per_minute * window_ns as f64 / MINUTE_NS);
        }
        let step = ((step * FULL_RATE as f64).round() as u64).max(1);
        self.update(|rate, base| (rate < FULL_RATE).then_some(((rate + step).min(FULL_RATE), base)))
    }

    /// Starts over at the ramp's start (a reopened deployment), or at the full rate.
    pub fn restart(&self, adaptive: &Adaptive, now: u64) {
        let start = start_rate(adaptive);
        self.changed_at.store(now, Ordering::Relaxed);
        self.update(|_, base| Some((start, base)));
    }

    fn update(&self, f: impl Fn(u64, u64) -> Option<(u64, u64)>) -> bool {
        self.word
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |word| {
                let (rate, base) = unpack(word);
                f(rate, base).map(|(rate, base)| pack(rate, base))
            })
            .is_ok()
    }
}

/// The starting rate of a provider scope's limits under `adaptive`.
pub(crate) fn start_rate(adaptive: &Adaptive) -> u64 {
    adaptive.ramp.map_or(FULL_RATE, |(start, _)| (start * FULL_RATE as f64).round() as u64).max(1)
}
