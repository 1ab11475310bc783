//! Time sources. The ledger never reads a clock; the [`crate::Governor`]
//! facade asks its `Clock` and passes `now` down.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A monotonic source of nanoseconds since an arbitrary origin.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Nanoseconds since this clock's origin; never decreases. The governor
    /// may call it while holding its waiting queue's lock, so it must not
    /// call into a governor (that would deadlock).
    fn now(&self) -> u64;
}

/// The real monotonic clock, counting from its creation.
#[derive(Debug)]
pub struct MonotonicClock {
    origin: Instant,
}

impl MonotonicClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        MonotonicClock { origin: Instant::now() }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    fn now(&self) -> u64 {
        // u64 nanoseconds cover 584 years of uptime.
        self.origin.elapsed().as_nanos() as u64
    }
}

/// A clock that moves only when told to: for tests, scenarios and simulation.
#[derive(Debug, Default)]
pub struct ManualClock {
    now: AtomicU64,
}

impl ManualClock {
    /// A manual clock at `start` nanoseconds.
    pub fn new(start: u64) -> Self {
        ManualClock { now: AtomicU64::new(start) }
    }

    /// Moves the clock forward by `by`, stopping at `u64::MAX` (584 years).
    pub fn advance(&self, by: Duration) {
        let by = crate::time::duration_ns(by);
        let _ = self.now.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |now| Some(now.saturating_add(by)));
    }

    /// Sets the clock to `ns` if that is later than the current time; a
    /// manual clock never goes backwards.
    pub fn set(&self, ns: u64) {
        self.now.fetch_max(ns, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }
}
