//! The manual clock: time that moves only when told to, for tests and
//! simulations. A governor built with one reads it instead of the
//! monotonic clock.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use llmgov_core::{Clock, ManualClock};

use crate::args::{self, Out};
use crate::errors::{guard, guard_infallible, llmgov_result, Failure, Outcome};

/// How far a manual clock may go: 2^63 ns (about 292 years), so that
/// deadlines and windows added to its reading stay far from overflowing,
/// as the Python binding's manual clock.
const MANUAL_CLOCK_END_NS: u64 = 1 << 63;

/// A clock that moves only when advanced. Share one between governors to
/// move them together. Any thread may use it.
#[allow(non_camel_case_types)]
pub struct llmgov_manual_clock {
    pub(crate) clock: Arc<ManualClock>,
    /// Held while a step is checked against the end and taken, so that two
    /// steps at once cannot together pass it (governors only read).
    step: Mutex<()>,
}

impl llmgov_manual_clock {
    /// Moves the clock to `to(now)` (its reading now), or refuses, naming
    /// `ns` = `value`, when that is past [`MANUAL_CLOCK_END_NS`].
    fn step(&self, value: u64, to: impl FnOnce(u64) -> Option<u64>, take: impl FnOnce(&ManualClock)) -> Outcome {
        let _step = self.step.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let now = self.clock.now();
        if to(now).is_none_or(|target| target > MANUAL_CLOCK_END_NS) {
            let reason = format!("would move the clock (now {} ms) past 2^63 ns, about 292 years", now / 1_000_000);
            return Err(Failure::argument("ns", value, reason));
        }
        take(&self.clock);
        Ok(())
    }
}

/// A manual clock reading `start_ns` nanoseconds. A clock goes no further
/// than 2^63 ns (about 292 years, so that deadlines added to its reading
/// stay far from overflowing): a later `start_ns` starts it there.
///
/// # Ownership
/// The caller owns the clock and frees it with `llmgov_manual_clock_free`.
/// Governors built on it keep their own reference: the clock may be freed
/// before them (they then stay at the time it last had).
#[no_mangle]
pub extern "C" fn llmgov_manual_clock_new(start_ns: u64) -> *mut llmgov_manual_clock {
    let start_ns = start_ns.min(MANUAL_CLOCK_END_NS);
    let clock = llmgov_manual_clock { clock: Arc::new(ManualClock::new(start_ns)), step: Mutex::new(()) };
    Box::into_raw(Box::new(clock))
}

/// Moves the clock forward by `ns` nanoseconds. A step past 2^63 ns is
/// refused: `LLMGOV_RESULT_INVALID_ARGUMENT` naming `ns` (the message says
/// where the clock is), and the clock does not move.
///
/// # Safety
/// `clock` must be NULL (an error) or a live clock from
/// `llmgov_manual_clock_new`.
#[no_mangle]
pub unsafe extern "C" fn llmgov_manual_clock_advance(clock: *const llmgov_manual_clock, ns: u64) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let clock = unsafe { args::reference(clock, "clock") }?;
        clock.step(ns, |now| now.checked_add(ns), |c| c.advance(Duration::from_nanos(ns)))
    })
}

/// Sets the clock to `ns` if that is later than its reading; a manual clock
/// never goes backwards (an earlier `ns` does nothing). An `ns` past 2^63
/// is refused as by `llmgov_manual_clock_advance`.
///
/// # Safety
/// As `llmgov_manual_clock_advance`.
#[no_mangle]
pub unsafe extern "C" fn llmgov_manual_clock_set(clock: *const llmgov_manual_clock, ns: u64) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let clock = unsafe { args::reference(clock, "clock") }?;
        clock.step(ns, |now| Some(now.max(ns)), |c| c.set(ns))
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
