//! Token bucket as GCRA: the whole state is one theoretical arrival time
//! (TAT) in nanoseconds, updated by a single compare-and-swap.
//!
//! A bucket of `burst` units refilling `amount` per `window` is full when
//! `tat <= now` and holds `(now + tau - max(tat, now)) / T` units, where
//! `T = window / amount` is the time one unit takes to refill and
//! `tau = burst * T`. Reserving `c` units moves the TAT forward by `c * T`
//! if that keeps it within `now + tau`. Debt moves it further.
//!
//! A refund gives capacity back now: it moves the TAT back, never before
//! `now`, so the bucket never holds more than its burst. That is how a
//! provider that reconciles reservations refunds (Anthropic charges
//! `max_tokens` at the start and returns the unused part at the end, up to
//! the bucket's size), so a ledger mirroring it admits what the provider
//! admits. Over any interval, admissions minus the refunds made in it stay
//! within the burst plus the refill (the property tests check this).
//!
//! Time is kept in whole nanoseconds and `T` in 32.32 fixed point, rounded
//! up, so every charge is at least its exact value: a bucket can admit at
//! most 1 ns of refill beyond the exact rational bound. Charges round up
//! one by one, so a burst taken in `k` pieces may need up to `k` ns more
//! refill than taken whole.

use super::atomic::{update, AtomicWord};

/// Debt beyond this (146 years) poisons a bucket: it refuses until then and
/// refunds no longer apply, since a saturated TAT no longer says how much
/// of it is whose. Only absurd usage reports get here; the config keeps
/// every burst far below it.
pub const MAX_DEBT_NS: u64 = 1 << 62;

/// Fractional bits of the fixed-point unit interval.
const FRACTION_BITS: u32 = 32;
const FRACTION_MASK: u128 = (1 << FRACTION_BITS) - 1;

/// The immutable shape of a token bucket.
#[derive(Debug, Clone, PartialEq)]
pub struct GcraParams {
    /// Nanoseconds one unit takes to refill, in 32.32 fixed point, rounded up.
    unit_ns_fixed: u128,
    /// Beyond this many units, the refill time would not fit in a `u64`
    /// (nor, far beyond, `units × unit_ns_fixed` in a `u128`): such a
    /// charge saturates (checked once here rather than on every multiply).
    max_exact_units: u64,
    /// The most the bucket holds.
    burst: u64,
    /// `burst` expressed as time: how far the TAT may run ahead of now.
    tau_ns: u64,
    /// The refill time of one unit (`units_to_ns(1)`): what a request
    /// costs on a requests limit, worked out once.
    one_ns: u64,
}

/// Why a reservation was refused: the absolute time at which it would pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryAt(pub u64);

/// The two numbers of a [`GcraParams`] that charging one unit takes,
/// copied out so that a route charging only requests holds them beside
/// each bucket (one dependent load fewer than through the limit).
#[derive(Debug, Clone, Copy)]
pub struct OneUnit {
    one_ns: u64,
    tau_ns: u64,
}

impl OneUnit {
    /// [`GcraParams::try_reserve`] of one unit, on the params this was taken from.
    #[inline]
    pub fn try_reserve<A: AtomicWord>(&self, tat: &A, now: u64) -> Result<(), RetryAt> {
        reserve_ns(tat, self.one_ns, self.tau_ns, now)
    }
}

/// Moves the TAT `increment` on at `now`, unless that puts it more than
/// `tau_ns` ahead of `now`.
#[inline]
fn reserve_ns<A: AtomicWord>(tat: &A, increment: u64, tau_ns: u64, now: u64) -> Result<(), RetryAt> {
    update(tat, |current| {
        // Past the end of the timeline nothing fits (saturated, every
        // request would look within the burst).
        let next = current.max(now).checked_add(increment).ok_or(RetryAt(u64::MAX))?;
        if next - now > tau_ns {
            Err(RetryAt(next - tau_ns))
        } else {
            Ok(next)
        }
    })
    .map(drop)
}

impl GcraParams {
    /// A bucket refilling `amount` units per `window_ns`, holding at most `burst`.
    /// All three must be non-zero (the config validates this).
    pub fn new(amount: u64, window_ns: u64, burst: u64) -> Self {
        debug_assert!(amount > 0 && window_ns > 0 && burst > 0);
        let unit_ns_fixed = ((window_ns as u128) << FRACTION_BITS).div_ceil(amount as u128);
        // The most units whose rounded-up refill time, `(units × unit +
        // mask) >> 32`, is at most u64::MAX.
        let max_exact_units = (((u64::MAX as u128) << FRACTION_BITS) / unit_ns_fixed).min(u64::MAX as u128) as u64;
        let mut params = GcraParams { unit_ns_fixed, max_exact_units, burst, tau_ns: 0, one_ns: 0 };
        // The same rounding as every charge, so a request of exactly `burst` fits.
        params.tau_ns = params.units_to_ns(burst);
        params.one_ns = params.units_to_ns(1);
        params
    }

    /// The most the bucket holds.
    pub fn burst(&self) -> u64 {
        self.burst
    }

    /// Refill time of `units`, rounded up to the nanosecond, saturating.
    #[inline]
    pub fn units_to_ns(&self, units: u64) -> u64 {
        if units > self.max_exact_units {
            return u64::MAX;
        }
        // In range by `max_exact_units`: no clamp on the hot path.
        ((units as u128 * self.unit_ns_fixed + FRACTION_MASK) >> FRACTION_BITS) as u64
    }

    /// `burst` expressed as time: how far the TAT may run ahead of now.
    pub fn tau_ns(&self) -> u64 {
        self.tau_ns
    }

    /// A fresh, full bucket.
    pub fn new_state<A: AtomicWord>() -> A {
        A::new(0)
    }

    /// Time one unit takes to refill, in nanoseconds.
    pub fn unit_ns(&self) -> f64 {
        self.unit_ns_fixed as f64 / (1u64 << FRACTION_BITS) as f64
    }

    /// Reserves `units` at `now`, or returns when the reservation would pass.
    /// `units` must not exceed the burst (checked by the caller as never-fits).
    #[inline]
    pub fn try_reserve<A: AtomicWord>(&self, tat: &A, units: u64, now: u64) -> Result<(), RetryAt> {
        if units == 0 {
            return Ok(());
        }
        self.try_reserve_ns(tat, self.units_to_ns(units), now)
    }

    /// Reserves a charge already expressed as refill time (at most `tau`).
    #[inline]
    pub fn try_reserve_ns<A: AtomicWord>(&self, tat: &A, increment: u64, now: u64) -> Result<(), RetryAt> {
        reserve_ns(tat, increment, self.tau_ns, now)
    }

    /// What one unit costs here, for a caller that charges only ones.
    pub fn one_unit(&self) -> OneUnit {
        OneUnit { one_ns: self.one_ns, tau_ns: self.tau_ns }
    }

    /// Undoes a reservation of `units` made by [`Self::try_reserve`].
    #[inline]
    pub fn rollback<A: AtomicWord>(&self, tat: &A, units: u64) {
        if units == 0 {
            return;
        }
        self.rollback_ns(tat, self.units_to_ns(units));
    }

    /// Undoes a reservation of `increment` made by [`Self::try_reserve_ns`].
    #[inline]
    pub fn rollback_ns<A: AtomicWord>(&self, tat: &A, increment: u64) {
        let _ = update::<A, ()>(tat, |current| Ok(current.saturating_sub(increment)));
    }

    /// Moves a charge of `charged` units to `actual` units at `now`: refunds
    /// the difference (never past a full bucket) or debits the overage, even
    /// into debt.
    #[inline]
    pub fn adjust<A: AtomicWord>(&self, tat: &A, charged: u64, actual: u64, now: u64) {
        if charged == actual {
            return;
        }
        self.adjust_ns(tat, self.units_to_ns(charged), self.units_to_ns(actual), now);
    }

    /// [`Self::adjust`] with both charges expressed as refill time.
    #[inline]
    pub fn adjust_ns<A: AtomicWord>(&self, tat: &A, was: u64, is: u64, now: u64) {
        let _ = update::<A, ()>(tat, |current| {
            if is > was {
                Ok(current.max(now).saturating_add(is - was))
            } else if current.saturating_sub(now) > MAX_DEBT_NS {
                Err(())
            } else {
                Ok(current.saturating_sub(was - is).max(now))
            }
        });
    }

    /// Gives back `ns` of refill time at `now`, as [`Self::adjust_ns`]
    /// does, but never takes the TAT below `floor` (a refund never raises it).
    pub fn refund_ns_above<A: AtomicWord>(&self, tat: &A, ns: u64, now: u64, floor: u64) {
        let _ = update::<A, ()>(tat, |current| {
            if current.saturating_sub(now) > MAX_DEBT_NS {
                Err(())
            } else {
                Ok(current.saturating_sub(ns).max(now).max(floor.min(current)))
            }
        });
    }

    /// Takes the bucket down to at most `remaining` units at `now`: the
    /// provider reports less capacity than the bucket believes it has.
    pub fn lower_to<A: AtomicWord>(&self, tat: &A, remaining: u64, now: u64) {
        self.lower_to_ns(tat, self.units_to_ns(remaining), now);
    }

    /// [`Self::lower_to`] with the remaining capacity as refill time.
    pub fn lower_to_ns<A: AtomicWord>(&self, tat: &A, remaining_ns: u64, now: u64) {
        let floor = now.saturating_add(self.tau_ns.saturating_sub(remaining_ns));
        let _ = update::<A, ()>(tat, |current| if current >= floor { Err(()) } else { Ok(floor) });
    }

    /// Sets the bucket to hold exactly `remaining_ns` of room at `now`, up or
    /// down: the provider has just said what its pool holds, at a pace the
    /// bucket's old timeline did not know.
    pub fn set_room_ns<A: AtomicWord>(&self, tat: &A, remaining_ns: u64, now: u64) {
        let next = now.saturating_add(self.tau_ns.saturating_sub(remaining_ns));
        let _ = update::<A, ()>(tat, |current| if current == next { Err(()) } else { Ok(next) });
    }

    /// Empties the bucket and holds it empty until `until`, from which it
    /// refills: the provider refused, and said when to come back.
    pub fn cool_down<A: AtomicWord>(&self, tat: &A, until: u64) {
        let floor = until.saturating_add(self.tau_ns);
        let _ = update::<A, ()>(tat, |current| if current >= floor { Err(()) } else { Ok(floor) });
    }

    /// Units available at `now`: the most one request could take, by the
    /// same rounding as [`Self::try_reserve`]; negative while in debt.
    pub fn available<A: AtomicWord>(&self, tat: &A, now: u64) -> i64 {
        self.units_in(self.room(tat, now))
    }

    /// Refill time the bucket has room for at `now`; negative while in debt.
    pub fn room<A: AtomicWord>(&self, tat: &A, now: u64) -> i128 {
        self.tau_ns as i128 - tat.load().saturating_sub(now) as i128
    }

    /// Units that `room` nanoseconds hold, by the rounding of every charge.
    pub fn units_in(&self, room: i128) -> i64 {
        let units = (room << FRACTION_BITS).div_euclid(self.unit_ns_fixed as i128);
        if room <= 0 {
            return units.max(i64::MIN as i128) as i64;
        }
        // The floor can be one over: each charge rounds up on its own.
        let mut units = units as u64;
        while units > 0 && self.units_to_ns(units) > room as u64 {
            units -= 1;
        }
        units as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    const MINUTE: u64 = 60_000_000_000;

    #[test]
    fn full_bucket_admits_burst_then_refills_continuously() {
        let p = GcraParams::new(30_000, MINUTE, 30_000);
        let tat: AtomicU64 = GcraParams::new_state();
        assert_eq!(p.available(&tat, 0), 30_000);
        assert!(p.try_reserve(&tat, 30_000, 0).is_ok());
        assert_eq!(p.available(&tat, 0), 0);
        let RetryAt(at) = p.try_reserve(&tat, 500, 0).unwrap_err();
        assert_eq!(at, 1_000_000_000, "500 tokens at 500/s refill in one second");
        assert!(p.try_reserve(&tat, 500, at - 1).is_err());
        assert!(p.try_reserve(&tat, 500, at).is_ok());
    }

    #[test]
    fn one_unit_charges_as_a_reservation_of_one() {
        // 7 per second, burst 3: an inexact unit time, a burst below the amount.
        let p = GcraParams::new(7, 1_000_000_000, 3);
        let (by_params, by_unit): (AtomicU64, AtomicU64) = (GcraParams::new_state(), GcraParams::new_state());
        let unit = p.one_unit();
        for now in [0, 0, 0, 0, 1, 142_857_143, 142_857_144, 500_000_000, 500_000_000, 500_000_000] {
            assert_eq!(unit.try_reserve(&by_unit, now), p.try_reserve(&by_params, 1, now), "at {now}");
            assert_eq!(by_unit.load(Ordering::SeqCst), by_params.load(Ordering::SeqCst), "at {now}");
        }
        assert!(unit.try_reserve(&by_unit, 0).is_err(), "the burst is spent");
    }

    #[test]
    fn exact_burst_fits_with_inexact_unit_time() {
        // 7 per 1 s: T = 142857142.857… ns, not a whole number.
        let p = GcraParams::new(7, 1_000_000_000, 7);
        let tat: AtomicU64 = GcraParams::new_state();
        assert!(p.try_reserve(&tat, 7, 5).is_ok());
        assert_eq!(p.available(&tat, 5), 0);
        // T rounds up, so the last unit needs one more nanosecond.
        assert_eq!(p.available(&tat, 5 + 1_000_000_000), 6);
        assert_eq!(p.available(&tat, 5 + 1_000_000_001), 7);
        assert!(p.try_reserve(&tat, 7, 5 + 1_000_000_001).is_ok());
    }

    #[test]
    fn refund_never_exceeds_burst_and_debt_goes_negative() {
        let p = GcraParams::new(100, MINUTE, 100);
        let tat: AtomicU64 = GcraParams::new_state();
        p.try_reserve(&tat, 60, 0).unwrap();
        p.adjust(&tat, 60, 10, 0);
        assert_eq!(p.available(&tat, 0), 90);
        // Long after the charge has refilled, a refund creates nothing.
        p.adjust(&tat, 10, 0, 10 * MINUTE);
        assert_eq!(p.available(&tat, 10 * MINUTE), 100);
        p.adjust(&tat, 0, 250, 10 * MINUTE);
        assert_eq!(p.available(&tat, 10 * MINUTE), -150);
        let RetryAt(at) = p.try_reserve(&tat, 1, 10 * MINUTE).unwrap_err();
        assert!(at > 11 * MINUTE, "debt delays later admissions");
    }

    #[test]
    fn refund_returns_capacity_now_up_to_the_burst() {
        let p = GcraParams::new(100, MINUTE, 100);
        let tat: AtomicU64 = GcraParams::new_state();
        p.try_reserve(&tat, 100, 0).unwrap();
        // The first charge has refilled; a second takes the whole bucket.
        p.try_reserve(&tat, 100, MINUTE).unwrap();
        // The first request ends unused: as a reconciling provider does, the
        // bucket gets its 100 back, and holds no more than its burst.
        p.adjust(&tat, 100, 0, MINUTE);
        assert_eq!(p.available(&tat, MINUTE), 100);
        p.adjust(&tat, 100, 0, MINUTE);
        assert_eq!(p.available(&tat, MINUTE), 100, "never past a full bucket");
    }

    #[test]
    fn poisoned_bucket_takes_no_refund() {
        let p = GcraParams::new(100, MINUTE, 100);
        let tat: AtomicU64 = GcraParams::new_state();
        p.try_reserve(&tat, 30, 0).unwrap();
        p.try_reserve(&tat, 10, 0).unwrap();
        p.adjust(&tat, 10, u64::MAX, 0);
        p.adjust(&tat, u64::MAX, 10, 0);
        assert!(p.try_reserve(&tat, 1, MINUTE).is_err(), "a saturated timeline stays closed");
    }

    #[test]
    fn available_agrees_with_admission_under_rounding() {
        let p = GcraParams::new(7, 1_000_000_000, 7);
        let tat: AtomicU64 = GcraParams::new_state();
        p.try_reserve(&tat, 1, 0).unwrap();
        let shown = p.available(&tat, 0) as u64;
        assert!(p.try_reserve(&tat, shown, 0).is_ok(), "the snapshot promised {shown}");
    }

    #[test]
    fn provider_feedback_lowers_and_cools_the_bucket() {
        let p = GcraParams::new(600, MINUTE, 600);
        let tat: AtomicU64 = GcraParams::new_state();
        p.lower_to(&tat, 200, 0);
        assert_eq!(p.available(&tat, 0), 200);
        p.lower_to(&tat, 500, 0);
        assert_eq!(p.available(&tat, 0), 200, "never raised");
        p.cool_down(&tat, 5_000_000_000);
        assert!(p.try_reserve(&tat, 1, 5_000_000_000 - 1).is_err());
        assert_eq!(p.available(&tat, 5_000_000_000), 0, "empty at the end of the cooldown");
        assert_eq!(p.available(&tat, 6_000_000_000), 10, "then refilling");
    }

    #[test]
    fn rollback_restores_capacity() {
        let p = GcraParams::new(10, MINUTE, 10);
        let tat: AtomicU64 = GcraParams::new_state();
        p.try_reserve(&tat, 4, 0).unwrap();
        p.try_reserve(&tat, 6, 0).unwrap();
        p.rollback(&tat, 6);
        assert_eq!(p.available(&tat, 0), 6);
    }

    #[test]
    fn daily_window_does_not_overflow() {
        let day = 86_400 * 1_000_000_000u64;
        let p = GcraParams::new(1, day, 1);
        let tat: AtomicU64 = GcraParams::new_state();
        p.try_reserve(&tat, 1, 0).unwrap();
        assert_eq!(p.try_reserve(&tat, 1, 1).unwrap_err(), RetryAt(day));
    }
}
