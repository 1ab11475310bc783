//! A ring of atomic `(epoch, count)` slots: the state of sliding windows and
//! of concurrency limits (whose slots age out at the permit TTL).
//!
//! Slot `i` of the timeline covers `[i * slot_ns, (i + 1) * slot_ns)` and lives
//! at position `i % len`. A slot is *live* at slot `k` while `k - i <= span`;
//! `len` is the power of two above `span`, so the position is a mask rather
//! than a division. Each entry packs the low 32 bits of its slot index with
//! a 32-bit count into one `u64`, so adding to a slot, and resetting a stale
//! one, is a single compare-and-swap.
//!
//! Admission is add-then-check: add to the current slot, then sum the live
//! slots, and take the add back if the sum is over the limit. With
//! sequentially consistent operations, of two racing reservers at least one
//! sees the other's add, so the ring never admits past its limit; a racer may
//! be refused spuriously while the other's rollback is in flight.
//!
//! Epochs are the low 32 bits of the slot index. Read against slot `k`, an
//! entry is current, live (at most `span` slots old), from a later turn (at
//! most one ring ahead: another caller's clock runs ahead of this one's), or
//! else stale, whatever its age, so a ring idle for years, or first used at
//! a large `now`, reads as empty. Only an entry left untouched for almost
//! exactly a multiple of 2^32 slots can be misread, as live or later, and
//! then only for one ring's worth of slots: it over-counts, the safe side.
//! A caller further behind than one ring, whose slot's entry would read as
//! stale, is told by the ring's latest slot instead, and refused.
//!
//! A slot whose count saturated (absurd usage reports) is poisoned: refunds
//! skip it, since it no longer says how much of it is whose, and it refuses
//! until it ages out.

use super::atomic::{update, AtomicWord};

const COUNT_BITS: u32 = 32;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;

/// The largest count one slot holds; adds saturate there.
pub const MAX_SLOT_COUNT: u64 = COUNT_MASK;

/// The largest amount a ring admits up to: a slot holding more would be
/// saturated (poisoned: see the module doc).
pub const MAX_WINDOW_AMOUNT: u64 = MAX_SLOT_COUNT - 1;

#[inline]
fn pack(epoch: u32, count: u64) -> u64 {
    ((epoch as u64) << COUNT_BITS) | count.min(COUNT_MASK)
}

#[inline]
fn unpack(word: u64) -> (u32, u64) {
    ((word >> COUNT_BITS) as u32, word & COUNT_MASK)
}

/// How an entry reads at some slot; see the module doc.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reading {
    /// This very slot.
    Current,
    /// An older slot still in the window, `age` slots back.
    Live { age: u32 },
    /// A slot from the ring's next turn.
    Later,
    /// Out of the window.
    Stale,
}

/// How the entry of epoch `epoch` reads at slot `index`, in a ring of `len`
/// positions whose entries stay live for `span` slots.
#[inline]
pub(crate) fn read(index: u64, epoch: u32, span: u32, len: usize) -> Reading {
    match (index as u32).wrapping_sub(epoch) {
        0 => Reading::Current,
        age if age <= span => Reading::Live { age },
        age if age.wrapping_neg() <= len as u32 => Reading::Later,
        _ => Reading::Stale,
    }
}

/// What an add found in the slot it wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Added {
    /// The add landed; `evicted` is what a stale entry held when it was reset
    /// (for concurrency, permits that expired unsettled).
    Landed {
        /// Count the reset entry held.
        evicted: u64,
    },
    /// The slot already belongs to a later turn of the ring, or the ring
    /// has been added to a whole ring's slots after this caller's: its
    /// clock is that far behind another's. Nothing was added.
    Behind,
    /// The slot would have held more than asked: nothing was added.
    Full,
}

/// A reservation the ring refused: it would have taken the live sum past
/// the amount (or the caller's clock is a whole ring behind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;

/// The ring's slots. Its slot width is supplied by the owner.
#[derive(Debug)]
pub struct Ring<A> {
    slots: Box<[A]>,
    span: u32,
    /// The latest slot index added at. Epochs alone cannot tell a caller
    /// more than a ring behind from one whose slot is stale: it would reset
    /// live entries of later slots, and lose what they count.
    latest: A,
}

impl<A: AtomicWord> Ring<A> {
    /// An empty ring whose slots stay live for `span` slots after their own
    /// (`1 <= span < 2^30`).
    pub fn new(span: u32) -> Self {
        debug_assert!((1..1 << 30).contains(&span));
        let len = (span as usize + 1).next_power_of_two();
        Ring { slots: (0..len).map(|_| A::new(0)).collect(), span, latest: A::new(0) }
    }

    /// Live span, in slots: a slot stays live for this many slots after its own.
    #[inline]
    pub fn span(&self) -> u64 {
        self.span as u64
    }

    /// The latest slot index added at.
    pub fn latest(&self) -> u64 {
        self.latest.load()
    }

    #[inline]
    fn slot(&self, index: u64) -> &A {
        &self.slots[(index & (self.slots.len() as u64 - 1)) as usize]
    }

    #[inline]
    fn read(&self, index: u64, epoch: u32) -> Reading {
        read(index, epoch, self.span, self.slots.len())
    }

    /// Every entry as `(reading, count)` at slot `index`.
    fn readings(&self, index: u64) -> impl Iterator<Item = (Reading, u64)> + '_ {
        self.slots.iter().map(move |s| {
            let (epoch, count) = unpack(s.load());
            (self.read(index, epoch), count)
        })
    }

    /// Adds `count` to slot `index`, resetting the entry first if it is stale.
    #[inline]
    pub fn add(&self, index: u64, count: u64) -> Added {
        self.add_up_to(index, count, u64::MAX)
    }

    /// [`Self::add`], but nothing if the slot would then hold more than
    /// `most` ([`Added::Full`]).
    #[inline]
    fn add_up_to(&self, index: u64, count: u64, most: u64) -> Added {
        // Raised before the add, so that a caller that reads it after the
        // add sees this one ahead of it. Written once per slot at most.
        let latest = self.latest.load();
        if index > latest {
            let _ = update(&self.latest, |seen| if index > seen { Ok(index) } else { Err(()) });
        } else if latest - index >= self.slots.len() as u64 {
            return Added::Behind;
        }
        let mut evicted = 0;
        let result = update(self.slot(index), |word| {
            let (epoch, held) = unpack(word);
            match self.read(index, epoch) {
                Reading::Current if held.saturating_add(count) > most => Err(Added::Full),
                Reading::Current => {
                    evicted = 0;
                    Ok(pack(epoch, held.saturating_add(count)))
                }
                Reading::Later => Err(Added::Behind),
                // A live entry of another index never shares a position with
                // this one (positions repeat every `len > span` slots).
                Reading::Live { .. } | Reading::Stale => {
                    evicted = held;
                    Ok(pack(index as u32, count))
                }
            }
        });
        result.map_or_else(|refused| refused, |_| Added::Landed { evicted })
    }

    /// Takes `count` back from slot `index` if the slot still holds that
    /// index; returns whether it did. A slot already reset has aged out, and
    /// with it the charge; a saturated slot is poisoned (see the module doc).
    #[inline]
    pub fn sub(&self, index: u64, count: u64) -> bool {
        update(self.slot(index), |word| {
            let (epoch, held) = unpack(word);
            if epoch == index as u32 && held < COUNT_MASK {
                Ok(pack(epoch, held.saturating_sub(count)))
            } else {
                Err(())
            }
        })
        .is_ok()
    }

    /// Add-then-check: adds `cost` at `index` and keeps it if the live sum
    /// stays within `amount`, otherwise takes it back. `on_evict` hears what
    /// a stale entry held when the add reset it.
    #[inline]
    pub fn try_reserve(&self, index: u64, cost: u64, amount: u64, on_evict: impl FnOnce(u64)) -> Result<(), Full> {
        // An add that would saturate the slot is refused before it lands:
        // landed, it would poison the slot, and its rollback could not undo it.
        match self.add_up_to(index, cost, MAX_WINDOW_AMOUNT) {
            Added::Landed { evicted } if evicted > 0 => on_evict(evicted),
            Added::Landed { .. } => {}
            Added::Behind | Added::Full => return Err(Full),
        }
        if self.live_sum(index) > amount {
            self.sub(index, cost);
            return Err(Full);
        }
        Ok(())
    }

    /// Sum of the slots live at slot `index`, entries from later slots included.
    #[inline]
    pub fn live_sum(&self, index: u64) -> u64 {
        self.readings(index)
            .filter(|&(reading, _)| reading != Reading::Stale)
            .map(|(_, count)| count)
            .fold(0u64, u64::saturating_add)
    }

    /// Counts held by entries no longer live at slot `index` that no add has
    /// reset yet.
    pub fn stale_sum(&self, index: u64) -> u64 {
        self.readings(index)
            .filter(|&(reading, _)| reading == Reading::Stale)
            .map(|(_, count)| count)
            .fold(0u64, u64::saturating_add)
    }

    /// The first slot index at or after `index` at which the live sum drops to
    /// `target` or below, assuming no further adds.
    pub fn index_when_at_most(&self, index: u64, target: u64) -> u64 {
        // Ages of the counts, oldest first (they leave the window first);
        // entries from a later turn never leave before this one's span.
        let mut live: Vec<(u32, u64)> = self
            .readings(index)
            .filter_map(|(reading, count)| match reading {
                Reading::Current => Some((0, count)),
                Reading::Live { age } => Some((age, count)),
                Reading::Later | Reading::Stale => None,
            })
            .collect();
        live.sort_unstable_by_key(|&(age, _)| std::cmp::Reverse(age));
        let later: u64 = self.readings(index).filter(|r| r.0 == Reading::Later).map(|r| r.1).sum();
        let mut sum = live.iter().map(|&(_, c)| c).fold(later, u64::saturating_add);
        for (age, count) in live {
            if sum <= target {
                break;
            }
            sum -= count;
            if sum <= target {
                // A slot `age` old leaves the window `span - age + 1` slots from now.
                return index.saturating_add(u64::from(self.span - age) + 1);
            }
        }
        // Still over: the later turn's counts leave after a whole window.
        if sum > target {
            index.saturating_add(u64::from(self.span) + 1)
        } else {
            index
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn slots_age_out_after_span() {
        let ring: Ring<AtomicU64> = Ring::new(3);
        assert_eq!(ring.add(10, 5), Added::Landed { evicted: 0 });
        ring.add(11, 2);
        assert_eq!(ring.live_sum(11), 7);
        assert_eq!(ring.live_sum(13), 7);
        assert_eq!(ring.live_sum(14), 2, "slot 10 is no longer live at 14");
        assert_eq!(ring.stale_sum(14), 5);
        assert_eq!(ring.add(14, 1), Added::Landed { evicted: 5 });
    }

    #[test]
    fn sub_misses_a_reset_slot() {
        let ring: Ring<AtomicU64> = Ring::new(2);
        ring.add(0, 4);
        assert!(ring.sub(0, 1));
        ring.add(4, 1);
        assert!(!ring.sub(0, 1));
        assert_eq!(ring.live_sum(4), 1);
    }

    #[test]
    fn caller_a_whole_ring_behind_is_refused() {
        let ring: Ring<AtomicU64> = Ring::new(2);
        ring.add(7, 1);
        assert_eq!(ring.add(3, 1), Added::Behind);
        assert_eq!(ring.live_sum(3), 1, "entries from later slots count as live");
    }

    #[test]
    fn caller_many_rings_behind_is_refused_and_evicts_nothing() {
        // 60 slots live, 64 positions: slot 72 shares slot 200's position,
        // whose entry it would read as stale and reset.
        let ring: Ring<AtomicU64> = Ring::new(60);
        assert_eq!(ring.try_reserve(200, 10, 10, |_| {}), Ok(()));
        assert_eq!(ring.add(72, 1), Added::Behind);
        assert_eq!(ring.try_reserve(72, 1, 10, |_| panic!("evicted a live entry")), Err(Full));
        assert_eq!(ring.live_sum(200), 10);
        assert_eq!(ring.try_reserve(200, 1, 10, |_| {}), Err(Full), "still full at 200");
        assert_eq!(ring.try_reserve(261, 10, 10, |_| {}), Ok(()), "slot 200 has aged out at 261");
    }

    #[test]
    fn a_ring_first_used_at_a_large_index_reads_empty() {
        let ring: Ring<AtomicU64> = Ring::new(4);
        let far = (1u64 << 31) + 5;
        assert_eq!(ring.live_sum(far), 0);
        assert_eq!(ring.add(far, 1), Added::Landed { evicted: 0 });
        // Idle for 2^31 slots: stale, not "later".
        let later = far + (1u64 << 31) + 3;
        assert_eq!(ring.live_sum(later), 0);
        assert!(matches!(ring.add(later, 1), Added::Landed { .. }));
    }

    #[test]
    fn a_saturated_slot_is_poisoned() {
        let ring: Ring<AtomicU64> = Ring::new(4);
        ring.add(0, 990);
        ring.add(0, 1 << 32);
        assert!(!ring.sub(0, 1 << 32), "no refund from a saturated slot");
        assert_eq!(ring.live_sum(0), MAX_SLOT_COUNT);
    }

    #[test]
    fn index_when_at_most_walks_oldest_first() {
        let ring: Ring<AtomicU64> = Ring::new(4);
        ring.add(0, 3);
        ring.add(2, 4);
        ring.add(4, 1);
        assert_eq!(ring.index_when_at_most(4, 8), 4);
        assert_eq!(ring.index_when_at_most(4, 5), 5);
        assert_eq!(ring.index_when_at_most(4, 1), 7);
        assert_eq!(ring.index_when_at_most(4, 0), 9);
    }
}
