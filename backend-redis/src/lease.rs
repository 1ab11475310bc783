//! Leased mode's local side: a lease per shared scope, served lock-free,
//! renewed (returning what is unused) when it runs out or runs late.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use parking_lot::Mutex;

/// The slice of one leased scope's rate limits this process holds.
#[derive(Debug)]
pub(crate) struct LocalLease {
    /// Units left per limit.
    remaining: Box<[AtomicU64]>,
    /// Units taken per limit since the lease was granted: the demand that
    /// sizes the next one.
    used: Box<[AtomicU64]>,
    /// Demand over the last lease given back unasked (by the keeper, before
    /// it lapsed): remembered so the next lease starts at the demand's size.
    recent: Box<[AtomicU64]>,
    /// Units charged at settle beyond what the lease held, owed to Redis.
    debt: Box<[AtomicU64]>,
    /// Local time (ns) after which the lease is not used: before Redis's
    /// expiry, since it is counted from before the request was sent.
    deadline_ns: AtomicU64,
    /// Bumped at each renewal; refunds go only to the lease they came from.
    generation: AtomicI64,
    /// The state epoch the lease was granted under.
    pub(crate) epoch: Mutex<Option<String>>,
    /// The random token Redis records the lease under.
    pub(crate) token: Mutex<Option<String>>,
    /// One renewal at a time.
    pub(crate) renewing: Mutex<()>,
}

/// What a renewal gives back, per limit.
pub(crate) struct Returned {
    pub give_back: Vec<i64>,
    pub used: Vec<u64>,
}

impl LocalLease {
    pub fn new(limits: usize) -> Self {
        let zeros = || (0..limits).map(|_| AtomicU64::new(0)).collect();
        LocalLease {
            remaining: zeros(),
            used: zeros(),
            recent: zeros(),
            debt: zeros(),
            deadline_ns: AtomicU64::new(0),
            generation: AtomicI64::new(0),
            epoch: Mutex::new(None),
            token: Mutex::new(None),
            renewing: Mutex::new(()),
        }
    }

    /// Takes `costs` from the lease, all or nothing, without a lock; the
    /// lease generation on success.
    pub fn try_take(&self, costs: &[u64], now: u64) -> Option<i64> {
        if now >= self.deadline_ns.load(Ordering::Acquire) {
            return None;
        }
        let generation = self.generation.load(Ordering::Acquire);
        for (i, &cost) in costs.iter().enumerate() {
            let taken = self.remaining[i].fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| r.checked_sub(cost));
            if taken.is_err() {
                for (j, &back) in costs[..i].iter().enumerate() {
                    self.remaining[j].fetch_add(back, Ordering::AcqRel);
                }
                return None;
            }
        }
        for (used, &cost) in self.used.iter().zip(costs) {
            used.fetch_add(cost, Ordering::Relaxed);
        }
        Some(generation)
    }

    /// Applies a settle's per-limit difference (actual − reserved): a refund
    /// goes back to the lease it came from while that lease lasts (else it
    /// is dropped: never more capacity than was granted); a charge comes out
    /// of the lease, and what the lease lacks is owed to Redis.
    pub fn reconcile(&self, generation: i64, deltas: &[(usize, i64)], now: u64) {
        let live =
            generation == self.generation.load(Ordering::Acquire) && now < self.deadline_ns.load(Ordering::Acquire);
        for &(i, delta) in deltas {
            if delta < 0 {
                if live {
                    self.remaining[i].fetch_add(delta.unsigned_abs(), Ordering::AcqRel);
                }
                continue;
            }
            let want = delta as u64;
            let mut short = want;
            let _ = self.remaining[i].fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| {
                short = want.saturating_sub(r);
                Some(r.saturating_sub(want))
            });
            if short > 0 {
                self.debt[i].fetch_add(short, Ordering::AcqRel);
            }
        }
    }

    /// Ends the lease now: the provider refused, and Redis holds the
    /// scope's limits; spending what the lease held would only draw 429s.
    /// Refunds of its permits are dropped, and the next request renews it
    /// (what it held goes back to Redis, under the hold: see `hold.lua`).
    pub fn end_now(&self) {
        self.deadline_ns.store(0, Ordering::Release);
    }

    /// Empties the lease for a renewal (call holding `renewing`).
    pub fn take_all(&self) -> Returned {
        self.deadline_ns.store(0, Ordering::Release);
        self.generation.fetch_add(1, Ordering::AcqRel);
        let give_back = self
            .remaining
            .iter()
            .zip(self.debt.iter())
            .map(|(r, d)| r.swap(0, Ordering::AcqRel) as i64 - d.swap(0, Ordering::AcqRel) as i64)
            .collect();
        let used = self.used.iter().map(|u| u.swap(0, Ordering::AcqRel)).collect();
        Returned { give_back, used }
    }

    /// In a forked child: the lease is the parent's, who serves and returns
    /// it; this process starts with none.
    pub fn leave_to_parent(&self) {
        self.take_all();
        for recent in self.recent.iter() {
            recent.store(0, Ordering::Relaxed);
        }
        *self.token.lock() = None;
    }

    /// Keeps the demand of a lease given back unasked, for the next one.
    pub fn remember_demand(&self, used: &[u64]) {
        for (recent, &u) in self.recent.iter().zip(used) {
            recent.store(u, Ordering::Relaxed);
        }
    }

    /// The demand that sizes the next lease: what the last one served, or
    /// what the one before it served if the last was given back unasked.
    pub fn demand(&self, used: &[u64]) -> Vec<u64> {
        used.iter().zip(self.recent.iter()).map(|(&u, r)| u.max(r.swap(0, Ordering::Relaxed))).collect()
    }

    /// After a renewal that failed on this side: Redis may have run it all
    /// the same (a timeout, a reply lost), and then the unused units went
    /// back to the bucket. So only the charges owed and the demand are put
    /// back; the unused units are dropped (a refund is lost, never capacity
    /// served twice), and the empty lease is renewed at its next use.
    pub fn restore_after_failure(&self, returned: &Returned) {
        for (i, &give) in returned.give_back.iter().enumerate() {
            if give < 0 {
                self.debt[i].fetch_add(give.unsigned_abs(), Ordering::AcqRel);
            }
            self.used[i].fetch_add(returned.used[i], Ordering::Relaxed);
        }
    }

    /// Installs a new grant, usable until `deadline_ns` (local time).
    pub fn install(&self, grants: &[u64], deadline_ns: u64) {
        for (remaining, &grant) in self.remaining.iter().zip(grants) {
            remaining.store(grant, Ordering::Release);
        }
        self.deadline_ns.store(deadline_ns, Ordering::Release);
    }

    /// The first limit whose remaining units fall short of `costs`.
    pub fn short_limit(&self, costs: &[u64]) -> Option<usize> {
        costs.iter().zip(self.remaining.iter()).position(|(&cost, r)| r.load(Ordering::Acquire) < cost)
    }

    pub fn deadline(&self) -> u64 {
        self.deadline_ns.load(Ordering::Acquire)
    }

    /// Whether anything is held or owed.
    pub fn holds_anything(&self) -> bool {
        self.remaining.iter().chain(self.debt.iter()).any(|a| a.load(Ordering::Acquire) > 0)
    }

    /// Whether Redis may hold a record of the lease, even used up. Left to
    /// expire there, a record is reaped as a dead process's: its whole
    /// grant back, what this process used of it included.
    pub fn has_record(&self) -> bool {
        self.token.lock().is_some()
    }
}

/// The next lease's size for one limit: twice the demand seen over the
/// last lease (so a busy process doubles its way up and an idle one shrinks),
/// at least the request at hand, at most `cap` (or the request, if larger).
pub(crate) fn lease_size(used: u64, cost: u64, cap: u64) -> u64 {
    used.saturating_mul(2).max(cost).min(cap.max(cost))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_all_or_nothing_and_refunds_only_to_its_own_live_lease() {
        let lease = LocalLease::new(2);
        lease.install(&[10, 100], 1_000);
        let generation = lease.try_take(&[4, 50], 0).unwrap();
        assert_eq!(lease.try_take(&[7, 10], 0), None, "7 of the 6 left: nothing taken");
        assert_eq!(lease.try_take(&[6, 50], 0), Some(generation));
        assert_eq!(lease.try_take(&[0, 1], 0), None);
        lease.reconcile(generation, &[(1, -30)], 10);
        assert!(lease.try_take(&[0, 30], 10).is_some());
        assert_eq!(lease.try_take(&[0, 0], 1_000), None, "past the deadline");

        let returned = lease.take_all();
        assert_eq!(returned.give_back, vec![0, 0]);
        assert_eq!(returned.used, vec![10, 130]);
        lease.install(&[5, 5], 2_000);
        lease.reconcile(generation, &[(0, -5)], 10);
        assert_eq!(lease.try_take(&[6, 0], 10), None, "a refund from an old lease is dropped");
        lease.reconcile(lease.generation.load(Ordering::Acquire), &[(1, 8)], 10);
        let returned = lease.take_all();
        assert_eq!(returned.give_back, vec![5, -3], "5 unused; 3 charged beyond the lease");
    }

    #[test]
    fn lease_size_follows_demand_within_the_cap() {
        assert_eq!(lease_size(0, 1, 40), 1);
        assert_eq!(lease_size(8, 1, 40), 16);
        assert_eq!(lease_size(30, 1, 40), 40);
        assert_eq!(lease_size(0, 90, 40), 90, "a request larger than the cap still gets its own size");
    }
}
