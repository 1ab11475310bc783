//! The manual clock: time that moves only when told to, for tests and
//! simulations. A governor built with one reads it instead of the
//! monotonic clock.

use std::sync::Arc;
use std::time::Duration;

use llmgov_core::{Clock, ManualClock};

use crate::args::{self, Out};
use crate::errors::{guard, guard_infallible, llmgov_result};

/// A clock that moves only when advanced. Share one between governors to
/// move them together. Any thread may use it.
#[allow(non_camel_case_types)]
pub struct llmgov_manual_clock {
    pub(crate) clock: Arc<ManualClock>,
}

/// A manual clock reading `start_ns` nanoseconds.
///
/// # Ownership
/// The caller owns the clock and frees it with `llmgov_manual_clock_free`.
/// Governors built on it keep their own reference: the clock may be freed
/// before them (they then stay at the time it last had).
#[no_mangle]
pub extern "C" fn llmgov_manual_clock_new(start_ns: u64) -> *mut llmgov_manual_clock {
    let clock = llmgov_manual_clock { clock: Arc::new(ManualClock::new(start_ns)) };
    Box::into_raw(Box::new(clock))
}

/// Moves the clock forward by `ns` nanoseconds, stopping at `UINT64_MAX`.
///
/// # Safety
/// `clock` must be NULL (an error) or a live clock from
/// `llmgov_manual_clock_new`.
#[no_mangle]
pub unsafe extern "C" fn llmgov_manual_clock_advance(clock: *const llmgov_manual_clock, ns: u64) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let clock = unsafe { args::reference(clock, "clock") }?;
        clock.clock.advance(Duration::from_nanos(ns));
        Ok(())
    })
}

/// Sets the clock to `ns` if that is later than its reading; a manual clock
/// never goes backwards (an earlier `ns` does nothing).
///
/// # Safety
/// As `llmgov_manual_clock_advance`.
#[no_mangle]
pub unsafe extern "C" fn llmgov_manual_clock_set(clock: *const llmgov_manual_clock, ns: u64) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let clock = unsafe { args::reference(clock, "clock") }?;
        clock.clock.set(ns);
        Ok(())
    })
}

/// Writes the clock's reading, in nanoseconds, to `*out_ns`.
///
/// # Safety
/// `clock` as `llmgov_manual_clock_advance`; `out_ns` NULL (an error) or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn llmgov_manual_clock_now(clock: *const llmgov_manual_clock, out_ns: *mut u64) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let (clock, out) = unsafe { (args::reference(clock, "clock")?, Out::new(out_ns, "out_ns")?) };
        out.write(clock.clock.now());
        Ok(())
    })
}

/// Frees the caller's clock. NULL does nothing.
///
/// # Safety
/// `clock` must be NULL or a clock from `llmgov_manual_clock_new` not freed
/// yet; it must not be used after (freeing twice is undefined behaviour).
#[no_mangle]
pub unsafe extern "C" fn llmgov_manual_clock_free(clock: *mut llmgov_manual_clock) {
    guard_infallible(|| {
        if !clock.is_null() {
            // SAFETY: made by Box::into_raw in `llmgov_manual_clock_new`.
            drop(unsafe { Box::from_raw(clock) });
        }
    })
}
