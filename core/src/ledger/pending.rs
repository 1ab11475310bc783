//! Which permits are still unsettled, per permit-TTL slot, so that those
//! left past their TTL are counted as expired.
//!
//! Every permit passes through here twice, so the books are kept per thread:
//! a thread only ever writes its own ring, with plain loads and stores
//! rather than locked read-modify-writes (which cost as much as the whole
//! reservation on one bucket: see BENCHMARKS.md). A permit settled on
//! another thread than the one that acquired it leaves +1 in one ring and
//! -1 in the other; sums across threads are exact. Readers (snapshots) may
//! see an eviction half done and be off by the permits it moves.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

use thread_local::ThreadLocal;

use super::limit::TTL_SLOTS;
use super::ring::{read, Reading};

/// A power of two above the live span, so a position is a mask.
const LEN: usize = (TTL_SLOTS as usize + 1).next_power_of_two();

/// One thread's books.
#[derive(Debug, Default)]
struct ThreadBooks {
    /// `(slot index as u32) << 32 | (signed count as u32)`.
    slots: [AtomicU64; LEN],
    /// Counts folded out of slots that aged out while unsettled.
    expired: AtomicI64,
    admitted: AtomicU64,
}

#[inline]
fn unpack(word: u64) -> (u32, i32) {
    ((word >> 32) as u32, word as u32 as i32)
}

#[inline]
fn pack(epoch: u32, count: i32) -> u64 {
    ((epoch as u64) << 32) | count as u32 as u64
}

/// Unsettled permits and admissions, kept per thread.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    threads: ThreadLocal<ThreadBooks>,
}

impl Pending {
    /// Books a permit admitted in TTL slot `index`.
    #[inline]
    pub fn admitted(&self, index: u64) {
        let books = self.threads.get_or_default();
        books.admitted.store(books.admitted.load(Relaxed) + 1, Relaxed);
        Self::add(books, index, 1);
    }

    /// Books the settlement of a permit admitted in TTL slot `index`.
    #[inline]
    pub fn finished(&self, index: u64) {
        Self::add(self.threads.get_or_default(), index, -1);
    }

    #[inline]
    fn add(books: &ThreadBooks, index: u64, delta: i32) {
        let slot = &books.slots[(index & (LEN as u64 - 1)) as usize];
        let (epoch, count) = unpack(slot.load(Relaxed));
        match read(index, epoch, TTL_SLOTS as u32, LEN) {
            Reading::Current => slot.store(pack(epoch, count + delta), Relaxed),
            // This thread already wrote a later turn of the ring: its clock
            // ran ahead of this call's. Dropping the -1 counts the permit as
            // expired, the safe side of the books.
            Reading::Later => {}
            Reading::Live { .. } | Reading::Stale => {
                books.expired.store(books.expired.load(Relaxed) + count as i64, Relaxed);
                slot.store(pack(index as u32, delta), Relaxed);
            }
        }
    }

    /// Permits admitted so far.
    pub fn admitted_count(&self) -> u64 {
        self.threads.iter().map(|b| b.admitted.load(Relaxed)).sum()
    }

    /// Permits that outlived their TTL unsettled, as of TTL slot `index`.
    pub fn expired_count(&self, index: u64) -> u64 {
        let mut total = 0i64;
        for books in self.threads.iter() {
            total += books.expired.load(Relaxed);
            for slot in &books.slots {
                let (epoch, count) = unpack(slot.load(Relaxed));
                if read(index, epoch, TTL_SLOTS as u32, LEN) == Reading::Stale {
                    total += count as i64;
                }
            }
        }
        total.max(0) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settled_permits_never_expire_and_unsettled_ones_do() {
        let pending = Pending::default();
        pending.admitted(3);
        pending.admitted(3);
        pending.finished(3);
        assert_eq!(pending.expired_count(3 + TTL_SLOTS), 0, "still live");
        assert_eq!(pending.expired_count(4 + TTL_SLOTS), 1);
        // Reusing the slot folds the stale count in rather than losing it.
        pending.admitted(3 + LEN as u64);
        assert_eq!(pending.expired_count(3 + LEN as u64), 1);
        assert_eq!(pending.expired_count(3 + 2 * LEN as u64), 2);
        assert_eq!(pending.admitted_count(), 3);
    }

    #[test]
    fn a_permit_settled_on_another_thread_balances() {
        let pending = Pending::default();
        pending.admitted(0);
        std::thread::scope(|s| {
            s.spawn(|| pending.finished(0));
        });
        assert_eq!(pending.expired_count(100), 0);
    }
}
