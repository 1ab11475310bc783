//! Whether Redis answers, and what the governor did while it did not.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

/// A reading of the governor's link to Redis, for metrics and alerts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Health {
    /// Redis failed and the governor admits from its safe local share.
    pub degraded: bool,
    /// Requests admitted from the safe local share.
    pub fallback_admissions: u64,
    /// Redis calls that failed (connect, I/O, timeout, script error).
    pub redis_errors: u64,
    /// Times Redis answered again after an outage.
    pub recoveries: u64,
    /// Times a shared scope's state was found lost (a Redis restart without
    /// persistence) and restarted at the safe share instead of full.
    pub state_resets: u64,
    /// Redis calls made (one script each): in leased mode, divide by the
    /// acquires to get operations per acquire.
    pub redis_calls: u64,
    /// The last Redis error, for the log.
    pub last_error: Option<String>,
}

/// The live counters behind [`Health`].
#[derive(Debug, Default)]
pub(crate) struct HealthState {
    degraded: AtomicBool,
    next_retry_ns: AtomicU64,
    fallback_admissions: AtomicU64,
    redis_errors: AtomicU64,
    recoveries: AtomicU64,
    state_resets: AtomicU64,
    last_error: Mutex<Option<String>>,
}

impl HealthState {
    /// Whether to call Redis at `now`: always when healthy; while degraded,
    /// one caller per `retry_interval` probes it.
    pub fn redis_usable(&self, now: u64, retry_interval: Duration) -> bool {
        if !self.degraded.load(Ordering::Acquire) {
            return true;
        }
        let due = self.next_retry_ns.load(Ordering::Acquire);
        let next = now.saturating_add(retry_interval.as_nanos() as u64);
        now >= due && self.next_retry_ns.compare_exchange(due, next, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// Whether the last call to Redis failed (and none has succeeded since).
    pub fn degraded(&self) -> bool {
        self.degraded.load(Ordering::Acquire)
    }

    pub fn on_error(&self, error: &redis::RedisError, now: u64, retry_interval: Duration) {
        self.redis_errors.fetch_add(1, Ordering::Relaxed);
        *self.last_error.lock() = Some(error.to_string());
        if !self.degraded.swap(true, Ordering::AcqRel) {
            self.next_retry_ns.store(now.saturating_add(retry_interval.as_nanos() as u64), Ordering::Release);
        }
    }

    pub fn on_success(&self) {
        if self.degraded.load(Ordering::Acquire) && self.degraded.swap(false, Ordering::AcqRel) {
            self.recoveries.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn on_fallback_admission(&self) {
        self.fallback_admissions.fetch_add(1, Ordering::Relaxed);
    }

    pub fn on_state_reset(&self) {
        self.state_resets.fetch_add(1, Ordering::Relaxed);
    }

    pub fn read(&self) -> Health {
        Health {
            degraded: self.degraded.load(Ordering::Acquire),
            fallback_admissions: self.fallback_admissions.load(Ordering::Relaxed),
            redis_errors: self.redis_errors.load(Ordering::Relaxed),
            recoveries: self.recoveries.load(Ordering::Relaxed),
            state_resets: self.state_resets.load(Ordering::Relaxed),
            redis_calls: 0,
            last_error: self.last_error.lock().clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io_error() -> redis::RedisError {
        redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused))
    }

    #[test]
    fn degraded_process_probes_once_per_interval_then_recovers() {
        let health = HealthState::default();
        let second = Duration::from_secs(1);
        assert!(health.redis_usable(0, second));
        health.on_error(&io_error(), 0, second);
        assert!(health.read().degraded);
        assert!(!health.redis_usable(500_000_000, second), "no probe before the interval");
        assert!(health.redis_usable(1_000_000_000, second), "one probe when due");
        assert!(!health.redis_usable(1_000_000_001, second), "and only one");
        health.on_success();
        let read = health.read();
        assert!(!read.degraded);
        assert_eq!((read.redis_errors, read.recoveries), (1, 1));
        assert!(health.redis_usable(1_000_000_002, second));
    }
}
