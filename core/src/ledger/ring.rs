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
//! Epochs wrap after 2^32 slots; an entry older than that may read as live,
//! which can only over-count, so the ring stays on the safe side.

use super::atomic::{update, AtomicWord};

const COUNT_BITS: u32 = 32;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;

/// The largest count one slot holds; adds saturate there.
pub const MAX_SLOT_COUNT: u64 = COUNT_MASK;

#[inline]
fn pack(epoch: u32, count: u64) -> u64 {
    ((epoch as u64) << COUNT_BITS) | count.min(COUNT_MASK)
}

#[inline]
fn unpack(word: u64) -> (u32, u64) {
    ((word >> COUNT_BITS) as u32, word & COUNT_MASK)
}

/// How far slot `index` lies behind the entry's epoch, as a signed distance:
/// positive for older entries, negative for entries from a later slot.
#[inline]
fn age(index: u64, epoch: u32) -> i32 {
    (index as u32).wrapping_sub(epoch) as i32
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
    /// The slot already belongs to a later turn of the ring: this caller's
    /// clock is a whole ring behind another's. Nothing was added.
    Behind,
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
}

impl<A: AtomicWord> Ring<A> {
    /// An empty ring whose slots stay live for `span` slots after their own
    /// (`1 <= span < 2^30`).
    pub fn new(span: u32) -> Self {
        debug_assert!((1..1 << 30).contains(&span));
        let len = (span as usize + 1).next_power_of_two();
        Ring { slots: (0..len).map(|_| A::new(0)).collect(), span }
    }

    /// Live span, in slots: a slot stays live for this many slots after its own.
    #[inline]
    pub fn span(&self) -> u64 {
        self.span as u64
    }

    #[inline]
    fn slot(&self, index: u64) -> &A {
        &self.slots[(index & (self.slots.len() as u64 - 1)) as usize]
    }

    /// Adds `count` to slot `index`, resetting the entry first if it is stale.
    #[inline]
    pub fn add(&self, index: u64, count: u64) -> Added {
        let mut evicted = 0;
        let result = update(self.slot(index), |word| {
            let (epoch, held) = unpack(word);
            match age(index, epoch) {
                0 => {
                    evicted = 0;
                    Ok(pack(epoch, held.saturating_add(count)))
                }
                a if a < 0 => Err(()),
                _ => {
                    evicted = held;
                    Ok(pack(index as u32, count))
                }
            }
        });
        match result {
            Ok(_) => Added::Landed { evicted },
            Err(()) => Added::Behind,
        }
    }

    /// Takes `count` back from slot `index` if the slot still holds that
    /// index; returns whether it did. A slot already reset has aged out, and
    /// with it the charge.
    #[inline]
    pub fn sub(&self, index: u64, count: u64) -> bool {
        update(self.slot(index), |word| {
            let (epoch, held) = unpack(word);
            if epoch == index as u32 {
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
        match self.add(index, cost) {
            Added::Landed { evicted } if evicted > 0 => on_evict(evicted),
            Added::Landed { .. } => {}
            Added::Behind => return Err(Full),
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
        let span = self.span as i32;
        self.slots
            .iter()
            .map(|s| unpack(s.load()))
            .filter(|&(epoch, _)| age(index, epoch) <= span)
            .map(|(_, count)| count)
            .fold(0u64, u64::saturating_add)
    }

    /// Counts held by entries no longer live at slot `index` that no add has
    /// reset yet.
    pub fn stale_sum(&self, index: u64) -> u64 {
        let span = self.span as i32;
        self.slots
            .iter()
            .map(|s| unpack(s.load()))
            .filter(|&(epoch, _)| age(index, epoch) > span)
            .map(|(_, count)| count)
            .sum()
    }

    /// The first slot index at or after `index` at which the live sum drops to
    /// `target` or below, assuming no further adds.
    pub fn index_when_at_most(&self, index: u64, target: u64) -> u64 {
        let span = self.span as i32;
        let mut live: Vec<(i32, u64)> = self
            .slots
            .iter()
            .map(|s| unpack(s.load()))
            .filter(|&(epoch, count)| count > 0 && age(index, epoch) <= span)
            .map(|(epoch, count)| (age(index, epoch), count))
            .collect();
        // Oldest first: they leave the window first.
        live.sort_unstable_by_key(|&(age, _)| std::cmp::Reverse(age));
        let mut sum: u64 = live.iter().map(|&(_, c)| c).sum();
        for (slot_age, count) in live {
            if sum <= target {
                break;
            }
            sum -= count;
            if sum <= target {
                // A slot of age `a` leaves the window `span - a + 1` slots from now.
                return index + (span - slot_age + 1).max(0) as u64;
            }
        }
        index
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
