//! JavaScript numbers in, core integers out: every count crosses N-API as an
//! `f64` (the cheapest conversion there is) and is checked here, so that a
//! negative, fractional, NaN or unsafe number is an `invalid_request` naming
//! the field and the value, never a wrapped or truncated count.

use llmgov::Error;

use crate::errors::invalid;

/// The largest integer a JavaScript number holds exactly (2^53 − 1).
pub const MAX_SAFE: f64 = 9_007_199_254_740_991.0;

/// A non-negative integer count below 2^53.
#[inline]
pub fn count(field: &'static str, value: f64) -> Result<u64, Error> {
    // NaN is in no range.
    if (0.0..=MAX_SAFE).contains(&value) && value.fract() == 0.0 {
        Ok(value as u64)
    } else {
        Err(bad_count(field, value))
    }
}

/// A duration in milliseconds, non-negative and finite (fractions allowed).
pub fn millis(field: &'static str, value: f64) -> Result<std::time::Duration, Error> {
    if (0.0..=MAX_SAFE).contains(&value) {
        Ok(std::time::Duration::from_secs_f64(value / 1000.0))
    } else {
        Err(invalid(field, js(value), "must be a non-negative number of milliseconds below 2^53"))
    }
}

/// How far a manual clock may go: 2^63 ns (about 292 years), as in Python,
/// so that deadlines and windows added to its reading stay far from
/// overflowing (a clock at `u64::MAX` refuses everything "for 0 ms").
pub const MANUAL_CLOCK_END_NS: u64 = 1 << 63;

/// A manual clock's step of `ms` milliseconds (as [`millis`]) from `now_ns`,
/// refused if it would take the clock past [`MANUAL_CLOCK_END_NS`].
pub fn clock_step(field: &'static str, ms: f64, now_ns: u64) -> Result<std::time::Duration, Error> {
    let by = millis(field, ms)?;
    let left = MANUAL_CLOCK_END_NS - now_ns.min(MANUAL_CLOCK_END_NS);
    if by.as_nanos() > u128::from(left) {
        let reason = format!("would move the clock (now {} ms) past 2^63 ns, about 292 years", now_ns / 1_000_000);
        return Err(invalid(field, js(ms), reason));
    }
    Ok(by)
}

#[cold]
fn bad_count(field: &'static str, value: f64) -> Error {
    let reason = if value.is_nan() {
        "must be a number, not NaN"
    } else if value < 0.0 {
        "must not be negative"
    } else if value.is_infinite() || value > MAX_SAFE {
        "must be below 2^53 (Number.MAX_SAFE_INTEGER)"
    } else {
        "must be a whole number"
    };
    invalid(field, js(value), reason)
}

/// The value as JavaScript prints it (`NaN`, `-1`, `1.5`, `Infinity`).
pub fn js(value: f64) -> String {
    if value.is_nan() {
        "NaN".into()
    } else if value.is_infinite() {
        if value > 0.0 { "Infinity" } else { "-Infinity" }.into()
    } else {
        format!("{value}")
    }
}
