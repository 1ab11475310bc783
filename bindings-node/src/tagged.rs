//! Route and profile numbers that say whose they are.
//!
//! Each governor's routes and profiles are indexes into its own tables, so a
//! bare index from another governor would name this one's entry of the same
//! index and charge the wrong scopes. The number JavaScript holds is
//! therefore `tag × 2^32 + index`, where the tag is the governor's serial on
//! its thread (never 0, so a bare small number is refused too): one that
//! does not carry this governor's tag is refused, as Python refuses another
//! governor's `Route`. The numbers stay below 2^53, exact in a JavaScript
//! number; checking one costs a shift and a compare on the hot path.

use std::cell::Cell;

use llmgov::Error;

use crate::errors::invalid;
use crate::numbers::count;

/// Tags fit in the 21 bits left above the 32-bit index below 2^53.
const TAG_BITS: u32 = 21;

thread_local! {
    /// The last tag given to a governor made on this thread.
    static LAST_TAG: Cell<u64> = const { Cell::new(0) };
}

/// The next governor's tag: its serial on this thread, from 1, wrapping
/// after 2^21 − 1 governors (only a number kept across two million
/// governors could then be taken for another's).
pub fn next_tag() -> u64 {
    LAST_TAG.with(|last| {
        let tag = last.get() % ((1 << TAG_BITS) - 1) + 1;
        last.set(tag);
        tag
    })
}

/// The number JavaScript holds for entry `index` of the governor tagged `tag`.
#[inline]
pub fn number(tag: u64, index: usize) -> f64 {
    ((tag << 32) | index as u64) as f64
}

/// The index in the governor tagged `tag` that `value` names; an
/// `invalid_request` on `field` if it is not a whole number below 2^53, or
/// carries another governor's tag.
#[inline]
pub fn index(field: &'static str, tag: u64, value: f64) -> Result<usize, Error> {
    let n = count(field, value)?;
    if n >> 32 != tag {
        return Err(foreign(field, n));
    }
    Ok((n & 0xffff_ffff) as usize)
}

#[cold]
fn foreign(field: &'static str, n: u64) -> Error {
    invalid(
        field,
        n,
        format!("this {field} belongs to another governor (or is not one: it was not made by gov.{field}(...))"),
    )
}
