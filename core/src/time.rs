//! Conversions between the core's nanosecond timestamps and durations.

use std::time::Duration;

/// Nanoseconds in one millisecond.
pub const NS_PER_MS: u64 = 1_000_000;

/// Whole milliseconds, rounded up, so that waiting that long always suffices.
pub fn ceil_ms(d: Duration) -> u64 {
    let ns = d.as_nanos();
    ns.div_ceil(NS_PER_MS as u128).min(u64::MAX as u128) as u64
}

/// A duration as nanoseconds, saturating at `u64::MAX` (584 years).
pub fn duration_ns(d: Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
}
