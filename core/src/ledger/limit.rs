//! One compiled limit of a scope and the lock-free state behind it.

use std::sync::atomic::{AtomicU64, Ordering};

use super::gcra::{GcraParams, RetryAt};
use super::ring::{Added, Ring};
use crate::{Dimension, Usage};

/// How a limit enforces its amount.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Rule {
    /// Continuous refill with a burst.
    TokenBucket(GcraParams),
    /// Never more than `amount` in any trailing window of `slots * slot_ns`.
    SlidingWindow { amount: u64, slot_ns: u64, slots: u32 },
    /// Never more than `max` permits in flight.
    Concurrency { max: u64 },
}

/// A limit as the ledger enforces it: amounts already scaled by the safety margin.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Limit {
    pub dimension: Dimension,
    pub rule: Rule,
    pub count_cached_input: bool,
    /// The amount as configured, before the safety margin.
    pub configured_amount: u64,
    /// The amount enforced, after the safety margin.
    pub amount: u64,
    /// Window length; `None` for concurrency.
    pub window_ns: Option<u64>,
}

/// Lock-free state of one limit on one scope.
#[derive(Debug)]
pub(crate) enum Bucket {
    Tat(AtomicU64),
    Window(Ring<AtomicU64>),
    Concurrency(Box<InFlight>),
}

/// In-flight permits, in slots of the permit-TTL ring, and how many of them
/// expired unsettled.
#[derive(Debug)]
pub(crate) struct InFlight {
    pub ring: Ring<AtomicU64>,
    pub expired: AtomicU64,
}

/// Slot layout shared by every concurrency ring and the permit ring.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TtlSlots {
    /// Width of one slot: TTL / 16, rounded up.
    pub slot_ns: u64,
}

/// Slots a TTL is divided into: a permit expires between TTL and TTL × 17/16.
pub(crate) const TTL_SLOTS: u64 = 16;

impl TtlSlots {
    pub fn new(ttl_ns: u64) -> Self {
        TtlSlots { slot_ns: ttl_ns.div_ceil(TTL_SLOTS).max(1) }
    }
    #[inline]
    pub fn index(&self, now: u64) -> u64 {
        now / self.slot_ns
    }
    pub fn ring<A: super::atomic::AtomicWord>() -> Ring<A> {
        Ring::new(TTL_SLOTS as usize + 1)
    }
    /// When a permit acquired at `acquired_at` expires.
    pub fn expires_at(&self, acquired_at: u64) -> u64 {
        (self.index(acquired_at) + TTL_SLOTS + 1).saturating_mul(self.slot_ns)
    }
}

impl Limit {
    /// A fresh bucket for this limit.
    pub fn new_bucket(&self) -> Bucket {
        match &self.rule {
            Rule::TokenBucket(_) => Bucket::Tat(GcraParams::new_state()),
            Rule::SlidingWindow { slots, .. } => Bucket::Window(Ring::new(*slots as usize + 1)),
            Rule::Concurrency { .. } => {
                Bucket::Concurrency(Box::new(InFlight { ring: TtlSlots::ring(), expired: AtomicU64::new(0) }))
            }
        }
    }

    /// What `usage` costs on this limit.
    #[inline]
    pub fn cost(&self, usage: &Usage) -> u64 {
        usage.cost(self.dimension, self.count_cached_input)
    }

    /// The most this limit can hold at once: a cost above it never fits.
    pub fn burst(&self) -> u64 {
        match &self.rule {
            Rule::TokenBucket(p) => p.burst(),
            Rule::SlidingWindow { amount, .. } => *amount,
            Rule::Concurrency { max } => *max,
        }
    }

    /// Reserves `cost` at `now`. A refusal carries the absolute time at which
    /// this limit would pass, or `None` when that depends on releases.
    #[inline]
    pub fn try_reserve(&self, bucket: &Bucket, cost: u64, now: u64, ttl: TtlSlots) -> Result<(), Option<u64>> {
        match (&self.rule, bucket) {
            (Rule::TokenBucket(p), Bucket::Tat(tat)) => p.try_reserve(tat, cost, now).map_err(|RetryAt(at)| Some(at)),
            (Rule::SlidingWindow { amount, slot_ns, .. }, Bucket::Window(ring)) => {
                if cost == 0 {
                    return Ok(());
                }
                let index = now / slot_ns;
                ring.try_reserve(index, cost, *amount, |_| {})
                    .map_err(|()| Some(ring.index_when_at_most(index, amount - cost) * slot_ns))
            }
            (Rule::Concurrency { max }, Bucket::Concurrency(in_flight)) => {
                // An entry reset by the add held permits that expired unsettled.
                let count_expired = |evicted| {
                    in_flight.expired.fetch_add(evicted, Ordering::Relaxed);
                };
                in_flight.ring.try_reserve(ttl.index(now), 1, *max, count_expired).map_err(|()| None)
            }
            _ => unreachable!("a bucket is always built from its own limit"),
        }
    }

    /// Undoes a successful [`Self::try_reserve`] made at `now`.
    #[inline]
    pub fn rollback(&self, bucket: &Bucket, cost: u64, now: u64, ttl: TtlSlots) {
        match (&self.rule, bucket) {
            (Rule::TokenBucket(p), Bucket::Tat(tat)) => p.rollback(tat, cost),
            (Rule::SlidingWindow { slot_ns, .. }, Bucket::Window(ring)) => {
                ring.sub(now / slot_ns, cost);
            }
            (Rule::Concurrency { .. }, Bucket::Concurrency(in_flight)) => {
                in_flight.ring.sub(ttl.index(now), 1);
            }
            _ => unreachable!("a bucket is always built from its own limit"),
        }
    }

    /// Moves a windowed charge made at `acquired_at` from `charged` to `actual`
    /// at `now`: refunds the difference or debits the overage, as debt if
    /// need be. A sliding window books both in the admission's slot while it
    /// is in the window; overage after that goes to the current slot.
    #[inline]
    pub fn adjust(&self, bucket: &Bucket, charged: u64, actual: u64, acquired_at: u64, now: u64) {
        match (&self.rule, bucket) {
            (Rule::TokenBucket(p), Bucket::Tat(tat)) => p.adjust(tat, charged, actual, now),
            (Rule::SlidingWindow { slot_ns, .. }, Bucket::Window(ring)) => {
                // Every change goes to the admission's slot while it is live,
                // so a later refund finds what streaming or overage added.
                let (admitted, current) = (acquired_at / slot_ns, now / slot_ns);
                if actual < charged {
                    ring.sub(admitted, charged - actual);
                } else if actual > charged {
                    // Overage is charged even past the amount: it is debt that
                    // later admissions wait out.
                    let extra = actual - charged;
                    if current - admitted > ring.span() || ring.add(admitted, extra) == Added::Behind {
                        let _ = ring.add(current, extra);
                    }
                }
            }
            (Rule::Concurrency { .. }, Bucket::Concurrency(_)) => {}
            _ => unreachable!("a bucket is always built from its own limit"),
        }
    }

    /// Frees the concurrency slot taken at `acquired_at`.
    #[inline]
    pub fn release(&self, bucket: &Bucket, acquired_at: u64, ttl: TtlSlots) {
        if let Bucket::Concurrency(in_flight) = bucket {
            in_flight.ring.sub(ttl.index(acquired_at), 1);
        }
    }

    /// What the bucket holds at `now`: `(available, in use)`.
    pub fn usage_at(&self, bucket: &Bucket, now: u64, ttl: TtlSlots) -> (i64, u64) {
        match (&self.rule, bucket) {
            (Rule::TokenBucket(p), Bucket::Tat(tat)) => {
                let available = p.available(tat, now);
                (available, (p.burst() as i64 - available).max(0) as u64)
            }
            (Rule::SlidingWindow { amount, slot_ns, .. }, Bucket::Window(ring)) => {
                let used = ring.live_sum(now / slot_ns);
                (*amount as i64 - used as i64, used)
            }
            (Rule::Concurrency { max }, Bucket::Concurrency(in_flight)) => {
                let used = in_flight.ring.live_sum(ttl.index(now));
                (*max as i64 - used as i64, used)
            }
            _ => unreachable!("a bucket is always built from its own limit"),
        }
    }

    /// Permits that expired holding a slot of this concurrency limit, as of `now`.
    pub fn expired_at(&self, bucket: &Bucket, now: u64, ttl: TtlSlots) -> Option<u64> {
        match bucket {
            Bucket::Concurrency(in_flight) => {
                Some(in_flight.expired.load(Ordering::Relaxed) + in_flight.ring.stale_sum(ttl.index(now)))
            }
            _ => None,
        }
    }
}
