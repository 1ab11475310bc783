//! One compiled limit of a scope and the lock-free state behind it.

use std::sync::atomic::{AtomicU64, Ordering};

use strength_reduce::StrengthReducedU64;

use super::gcra::{GcraParams, RetryAt};
use super::pace::{Pace, Shape};
use super::ring::{Added, Ring};
use crate::dimension::{CostKind, Costs};
use crate::Dimension;

/// How a limit enforces its amount.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Rule {
    /// Continuous refill with a burst.
    TokenBucket(GcraParams),
    /// Never more than `amount` in any trailing window of `slots` slots.
    SlidingWindow { amount: u64, slot: SlotWidth, slots: u32 },
    /// Never more than `max` permits in flight.
    Concurrency { max: u64 },
}

/// A limit as the ledger enforces it: amounts already scaled by the safety margin.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Limit {
    pub dimension: Dimension,
    pub rule: Rule,
    /// Which of a request's quantities this limit charges.
    pub cost_kind: CostKind,
    /// The amount as configured, before the safety margin.
    pub configured_amount: u64,
    /// The amount enforced, after the safety margin.
    pub amount: u64,
    /// The most the limit holds at once: a cost above it never fits.
    pub burst: u64,
    /// Window length; `None` for concurrency.
    pub window_ns: Option<u64>,
    /// Whether the config left the amount to the provider's `limit` headers
    /// (a provider scope's token bucket); until they come, it admits one
    /// request per window.
    pub discovered: bool,
    /// The safety margin applied to the amount (and to a discovered one).
    pub margin: f64,
}

/// Charges made on provider scopes' paced buckets during one acquire, in
/// order, so that a rollback takes back exactly what was taken even if the
/// pace changes meanwhile.
pub(crate) type PacedCharges = smallvec::SmallVec<[u64; 8]>;

/// Lock-free state of one limit on one scope. The rings are boxed so that
/// a bucket takes 16 bytes: a million template scopes of two token buckets
/// each took 310 B a scope with the ring inline (40 B a bucket) and take
/// 262 B so (`cargo bench -p llmgov --bench scopes`; target 300 B). A
/// sliding window pays one more pointer to follow.
#[derive(Debug)]
pub(crate) enum Bucket {
    Tat(AtomicU64),
    Window(Box<Ring<AtomicU64>>),
    Concurrency(Box<InFlight>),
}

const _: () = assert!(std::mem::size_of::<Bucket>() == 16);

impl Bucket {
    /// Whether this is the token bucket whose word is `tat`.
    pub fn is_tat(&self, tat: &AtomicU64) -> bool {
        matches!(self, Bucket::Tat(word) if std::ptr::eq(word, tat))
    }
}

/// In-flight permits, in slots of the permit-TTL ring, and how many of them
/// expired unsettled.
#[derive(Debug)]
pub(crate) struct InFlight {
    pub ring: Ring<AtomicU64>,
    pub expired: AtomicU64,
}

/// The width of a ring's slots, with the division by it precomputed: slot
/// indices are taken on every reservation, and a hardware divide costs as
/// much as the rest of a bucket's arithmetic.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SlotWidth {
    ns: u64,
    divisor: StrengthReducedU64,
}

impl SlotWidth {
    pub fn new(ns: u64) -> Self {
        SlotWidth { ns, divisor: StrengthReducedU64::new(ns) }
    }
    /// The slot `now` falls in.
    #[inline]
    pub fn index(&self, now: u64) -> u64 {
        now / self.divisor
    }
    /// When slot `index` starts.
    pub fn start(&self, index: u64) -> u64 {
        index.saturating_mul(self.ns)
    }
}

impl PartialEq for SlotWidth {
    fn eq(&self, other: &Self) -> bool {
        self.ns == other.ns
    }
}

/// What a provider said about one limit, for [`Limit::feed_back`].
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ProviderWord {
    /// The limit's size per window.
    pub limit: Option<u64>,
    /// What is left of it.
    pub remaining: Option<u64>,
    /// Hold the bucket empty until then.
    pub cool_until: Option<u64>,
}

/// Slot layout shared by every concurrency ring and the pending-permit books.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TtlSlots {
    /// One slot: TTL / 16, rounded up.
    slot: SlotWidth,
}

/// Slots a TTL is divided into: a permit expires between TTL and TTL × 17/16.
pub(crate) const TTL_SLOTS: u64 = 16;

impl TtlSlots {
    pub fn new(ttl_ns: u64) -> Self {
        TtlSlots { slot: SlotWidth::new(ttl_ns.div_ceil(TTL_SLOTS).max(1)) }
    }
    #[inline]
    pub fn index(&self, now: u64) -> u64 {
        self.slot.index(now)
    }
    pub fn ring<A: super::atomic::AtomicWord>() -> Ring<A> {
        Ring::new(TTL_SLOTS as u32)
    }
    /// When a permit acquired in slot `index` expires.
    #[inline]
    pub fn expires_at(&self, index: u64) -> u64 {
        self.slot.start(index + TTL_SLOTS + 1)
    }
    /// The longest a permit stays open: from its slot's start to its expiry.
    pub fn permit_life_ns(&self) -> u64 {
        self.slot.start(TTL_SLOTS + 1)
    }
}

impl Limit {
    /// A fresh bucket for this limit.
    pub fn new_bucket(&self) -> Bucket {
        match &self.rule {
            Rule::TokenBucket(_) => Bucket::Tat(GcraParams::new_state()),
            Rule::SlidingWindow { slots, .. } => Bucket::Window(Box::new(Ring::new(*slots))),
            Rule::Concurrency { .. } => {
                Bucket::Concurrency(Box::new(InFlight { ring: TtlSlots::ring(), expired: AtomicU64::new(0) }))
            }
        }
    }

    /// For limits that count output, what they reserve for it.
    pub fn reserves_output(&self) -> Option<&'static str> {
        match self.cost_kind {
            CostKind::ExpectedOutput
            | CostKind::ExpectedTokens
            | CostKind::UncachedExpectedTokens
            | CostKind::ExpectedCost => Some("expected"),
            kind if kind.counts_output() => Some("max_tokens"),
            _ => None,
        }
    }

    /// What a request of these costs costs on this limit.
    #[inline]
    pub fn cost(&self, costs: &Costs) -> u64 {
        costs.get(self.cost_kind)
    }

    /// Reserves `cost` at `now`. A refusal carries the absolute time at which
    /// this limit would pass, or `None` when that depends on releases.
    // Always inlined: a route of six scopes makes two dozen of these calls
    // per acquire, and left to the compiler they became calls, which made an
    // acquire + settle on 6 scopes × 4 limits take a fifth more instructions
    // (callgrind: 4500 against 3700).
    #[inline(always)]
    pub fn try_reserve(&self, bucket: &Bucket, cost: u64, now: u64, ttl: TtlSlots) -> Result<(), Option<u64>> {
        match (&self.rule, bucket) {
            (Rule::TokenBucket(p), Bucket::Tat(tat)) => p.try_reserve(tat, cost, now).map_err(|RetryAt(at)| Some(at)),
            (Rule::SlidingWindow { amount, slot, .. }, Bucket::Window(ring)) => {
                if cost == 0 {
                    return Ok(());
                }
                let index = slot.index(now);
                ring.try_reserve(index, cost, *amount, |_| {})
                    .map_err(|_| Some(slot.start(ring.index_when_at_most(index, amount - cost))))
            }
            (Rule::Concurrency { max }, Bucket::Concurrency(in_flight)) => {
                // An entry reset by the add held permits that expired unsettled.
                let count_expired = |evicted| {
                    in_flight.expired.fetch_add(evicted, Ordering::Relaxed);
                };
                in_flight.ring.try_reserve(ttl.index(now), 1, *max, count_expired).map_err(|_| None)
            }
            _ => unreachable!("a bucket is always built from its own limit"),
        }
    }

    /// [`Self::try_reserve`] on a provider scope: `pace` sets what a
    /// token-bucket charge costs, and the charge is pushed on `paced`.
    #[inline]
    pub fn try_reserve_paced(
        &self,
        bucket: &Bucket,
        cost: u64,
        now: u64,
        ttl: TtlSlots,
        pace: &Pace,
        paced: &mut PacedCharges,
    ) -> Result<(), Option<u64>> {
        match (&self.rule, bucket) {
            (Rule::TokenBucket(_), _) if cost == 0 => Ok(()),
            (Rule::TokenBucket(p), Bucket::Tat(tat)) => {
                let charge = pace.charge_ns(self.shape(p), cost);
                p.try_reserve_ns(tat, charge, now).map_err(|RetryAt(at)| Some(at))?;
                paced.push(charge);
                Ok(())
            }
            _ => self.try_reserve(bucket, cost, now, ttl),
        }
    }

    /// Undoes a successful [`Self::try_reserve`] made at `now`.
    #[inline]
    pub fn rollback(&self, bucket: &Bucket, cost: u64, now: u64, ttl: TtlSlots) {
        match (&self.rule, bucket) {
            (Rule::TokenBucket(p), Bucket::Tat(tat)) => p.rollback(tat, cost),
            (Rule::SlidingWindow { slot, .. }, Bucket::Window(ring)) => {
                ring.sub(slot.index(now), cost);
            }
            (Rule::Concurrency { .. }, Bucket::Concurrency(in_flight)) => {
                in_flight.ring.sub(ttl.index(now), 1);
            }
            _ => unreachable!("a bucket is always built from its own limit"),
        }
    }

    /// Undoes a successful [`Self::try_reserve_paced`], popping the charge
    /// it pushed: exactly what was taken, whatever the pace is now.
    pub fn rollback_paced(&self, bucket: &Bucket, cost: u64, now: u64, ttl: TtlSlots, paced: &mut PacedCharges) {
        match (&self.rule, bucket) {
            (Rule::TokenBucket(_), _) if cost == 0 => {}
            (Rule::TokenBucket(p), Bucket::Tat(tat)) => {
                p.rollback_ns(tat, paced.pop().expect("a paced reservation pushed its charge"))
            }
            _ => self.rollback(bucket, cost, now, ttl),
        }
    }

    /// Moves a windowed charge made at `acquired_at` from `charged` to `actual`
    /// at `now`: refunds the difference or debits the overage, as debt if
    /// need be. A sliding window books both in the admission's slot while it
    /// is in the window; overage after that goes to the current slot.
    // Inlined, with the rarer kinds out of line, for the reason given at
    // `try_reserve` (here, inlining those too costs more than it saves).
    #[inline(always)]
    pub fn adjust(&self, bucket: &Bucket, charged: u64, actual: u64, acquired_at: u64, now: u64) {
        match (&self.rule, bucket) {
            (Rule::TokenBucket(p), Bucket::Tat(tat)) => p.adjust(tat, charged, actual, now),
            _ => self.adjust_counted(bucket, charged, actual, acquired_at, now),
        }
    }

    /// [`Self::adjust`] on a sliding window or a concurrency limit.
    #[inline(never)]
    fn adjust_counted(&self, bucket: &Bucket, charged: u64, actual: u64, acquired_at: u64, now: u64) {
        match (&self.rule, bucket) {
            (Rule::SlidingWindow { slot, .. }, Bucket::Window(ring)) => {
                adjust_window(ring, *slot, charged, actual, acquired_at, now)
            }
            (Rule::Concurrency { .. }, Bucket::Concurrency(_)) => {}
            _ => unreachable!("a bucket is always built from its own limit"),
        }
    }

    /// [`Self::adjust`] on a provider scope: an overage costs the current
    /// pace (nothing before the limit's amount is learned), and a refund gives back at the configured cost (never more than
    /// any pace charged).
    pub fn adjust_paced(&self, bucket: &Bucket, charged: u64, actual: u64, acquired_at: u64, now: u64, pace: &Pace) {
        match (&self.rule, bucket) {
            (Rule::TokenBucket(p), Bucket::Tat(tat)) if actual > charged => {
                p.adjust_ns(tat, 0, pace.overage_ns(self.shape(p), actual - charged), now)
            }
            (Rule::TokenBucket(p), Bucket::Tat(tat)) => {
                let floor = pace.refund_floor(now, p.tau_ns());
                p.refund_ns_above(tat, pace.refund_ns(self.shape(p), charged - actual, acquired_at), now, floor)
            }
            _ => self.adjust(bucket, charged, actual, acquired_at, now),
        }
    }

    /// [`Self::adjust_paced`] for a request never sent, which reserved
    /// `charged`: given back as [`Pace::cancel_refund_ns`] says.
    pub fn cancel_paced(&self, bucket: &Bucket, charged: u64, acquired_at: u64, now: u64, pace: &Pace) {
        match (&self.rule, bucket) {
            (Rule::TokenBucket(p), Bucket::Tat(tat)) => {
                let floor = pace.refund_floor(now, p.tau_ns());
                p.refund_ns_above(tat, pace.cancel_refund_ns(self.shape(p), charged, acquired_at), now, floor)
            }
            _ => self.adjust(bucket, charged, 0, acquired_at, now),
        }
    }

    /// The shape a pace needs, for this limit's token-bucket parameters.
    #[inline]
    pub fn shape<'a>(&self, params: &'a GcraParams) -> Shape<'a> {
        Shape {
            params,
            window_ns: self.window_ns.unwrap_or(1),
            discovered: self.discovered,
            amount: self.amount,
            margin: self.margin,
        }
    }

    /// Applies a provider's word to a token bucket of a provider scope:
    /// its own `limit` (discovery), at most `remaining` left now, and
    /// nothing until `cool_until`. Other rules have no timeline to move and
    /// are left as they are. Returns whether anything applied.
    pub fn feed_back(&self, bucket: &Bucket, pace: &Pace, word: ProviderWord, now: u64, ttl: TtlSlots) -> bool {
        let (Rule::TokenBucket(p), Bucket::Tat(tat)) = (&self.rule, bucket) else { return false };
        let shape = self.shape(p);
        let discovered = word.limit.is_some_and(|limit| pace.discover(shape, limit, now, ttl.permit_life_ns()));
        if let Some(remaining) = word.remaining {
            let room = pace.charge_ns(shape, remaining);
            if discovered && self.discovered {
                // The old timeline counted at a guessed pace: take the
                // provider's count. (A configured limit is only ever lowered.)
                p.set_room_ns(tat, room, now);
            } else {
                p.lower_to_ns(tat, room, now);
            }
        }
        if let Some(until) = word.cool_until {
            p.cool_down(tat, until);
            pace.hold_empty_until(until);
        }
        discovered || word.remaining.is_some() || word.cool_until.is_some()
    }

    /// Frees the concurrency slot taken in permit-TTL slot `ttl_slot`.
    #[inline]
    pub fn release(&self, bucket: &Bucket, ttl_slot: u64) {
        if let Bucket::Concurrency(in_flight) = bucket {
            in_flight.ring.sub(ttl_slot, 1);
        }
    }

    /// What the bucket holds at `now`: `(available, in use)`; on a provider
    /// scope, at its pace, out of its effective burst.
    pub fn usage_at(&self, bucket: &Bucket, now: u64, ttl: TtlSlots, pace: Option<&Pace>) -> (i64, u64) {
        match (&self.rule, bucket) {
            (Rule::TokenBucket(p), Bucket::Tat(tat)) => {
                let (available, burst) = match pace {
                    None => (p.available(tat, now), p.burst() as i128),
                    Some(pace) => {
                        let shape = self.shape(p);
                        (pace.units_in(shape, p.room(tat, now)), pace.units_in(shape, p.tau_ns() as i128) as i128)
                    }
                };
                (available, (burst - available as i128).clamp(0, u64::MAX as i128) as u64)
            }
            (Rule::SlidingWindow { amount, slot, .. }, Bucket::Window(ring)) => {
                let used = ring.live_sum(slot.index(now));
                (*amount as i64 - used as i64, used)
            }
            (Rule::Concurrency { max }, Bucket::Concurrency(in_flight)) => {
                let used = in_flight.ring.live_sum(ttl.index(now));
                (*max as i64 - used as i64, used)
            }
            _ => unreachable!("a bucket is always built from its own limit"),
        }
    }

    /// When what is in use on this limit will have fallen to `level` or
    /// below, if nothing more is charged: `now` if it already has. A
    /// concurrency limit's use falls with releases, not time: `now`.
    pub fn spent_at_most_at(&self, bucket: &Bucket, level: u64, now: u64) -> u64 {
        match (&self.rule, bucket) {
            (Rule::TokenBucket(p), Bucket::Tat(tat)) => {
                let needed = p.units_to_ns(p.burst().saturating_sub(level)) as i128;
                let wait = (needed - p.room(tat, now)).clamp(0, u64::MAX as i128) as u64;
                now.saturating_add(wait)
            }
            (Rule::SlidingWindow { slot, .. }, Bucket::Window(ring)) => {
                let index = slot.index(now);
                match ring.index_when_at_most(index, level) {
                    at if at == index => now,
                    at => slot.start(at),
                }
            }
            _ => now,
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

/// The sliding-window half of [`Limit::adjust`], out of line so that the
/// token-bucket half inlines into the settle loop.
fn adjust_window(ring: &Ring<AtomicU64>, slot: SlotWidth, charged: u64, actual: u64, acquired_at: u64, now: u64) {
    // Every change goes to the admission's slot while it is live, so a
    // later refund finds what streaming or overage added.
    let (admitted, current) = (slot.index(acquired_at), slot.index(now));
    let in_window = current.saturating_sub(admitted) <= ring.span();
    if actual < charged {
        // Once out of the window the charge is gone, and the slot's epoch
        // may have come round again.
        if in_window {
            ring.sub(admitted, charged - actual);
        }
    } else if actual > charged {
        // Overage is charged even past the amount: it is debt that later
        // admissions wait out.
        let extra = actual - charged;
        let landed = |index| ring.add(index, extra) != Added::Behind;
        if !((in_window && landed(admitted)) || landed(current)) {
            // This caller is a ring behind the latest add: charged there.
            ring.add(ring.latest(), extra);
        }
    }
}
