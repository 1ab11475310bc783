//! What the safe local share admitted while Redis was away, owed to Redis:
//! charged to the shared buckets once Redis answers again, so the admissions
//! of an outage count against the limit instead of coming on top of it.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::shared::{Charge, Kind, SharedScope};

/// Units owed per shared scope and rate limit.
#[derive(Debug)]
pub(crate) struct OutageDebt {
    owed: Vec<Box<[AtomicU64]>>,
}

impl OutageDebt {
    pub fn new(scopes: &[SharedScope]) -> Self {
        OutageDebt { owed: scopes.iter().map(|s| s.limits.iter().map(|_| AtomicU64::new(0)).collect()).collect() }
    }

    /// Adds what `charge` costs on each rate limit of scope `i`.
    pub fn charge(&self, scope: &SharedScope, i: usize, charge: &Charge) {
        for (owed, limit) in self.owed[i].iter().zip(&scope.limits) {
            if matches!(limit.kind, Kind::Rate { .. }) {
                owed.fetch_add(limit.cost(charge), Ordering::AcqRel);
            }
        }
    }

    /// Applies a settle's difference between `actual` and `estimate`
    /// (`None`: a cancel gives the whole estimate back), never below zero.
    pub fn reconcile(&self, scope: &SharedScope, i: usize, estimate: &Charge, actual: Option<&Charge>) {
        for (owed, limit) in self.owed[i].iter().zip(&scope.limits) {
            if !matches!(limit.kind, Kind::Rate { .. }) {
                continue;
            }
            let spent = actual.map_or(0, |charge| limit.cost(charge));
            let reserved = limit.cost(estimate);
            if spent >= reserved {
                owed.fetch_add(spent - reserved, Ordering::AcqRel);
            } else {
                let back = reserved - spent;
                let _ = owed.fetch_update(Ordering::AcqRel, Ordering::Acquire, |o| Some(o.saturating_sub(back)));
            }
        }
    }

    /// Takes what scope `i` owes, as `(limit index, units)` deltas; empty if nothing.
    pub fn take(&self, i: usize) -> Vec<(usize, i64)> {
        if self.owed[i].iter().all(|o| o.load(Ordering::Acquire) == 0) {
            return Vec::new();
        }
        self.owed[i]
            .iter()
            .enumerate()
            .map(|(j, o)| (j, o.swap(0, Ordering::AcqRel) as i64))
            .filter(|&(_, units)| units > 0)
            .collect()
    }

    /// Puts back what [`OutageDebt::take`] took when Redis could not take it.
    pub fn restore(&self, i: usize, deltas: &[(usize, i64)]) {
        for &(j, units) in deltas {
            self.owed[i][j].fetch_add(units as u64, Ordering::AcqRel);
        }
    }
}
