//! The hot path: `tryAcquire`, `settle`, `cancel`, `addOutput`.
//!
//! napi-rs charges about 40 ns for each argument it converts, about 180 ns
//! for handing a function its `Env`, and several hundred for unwrapping a
//! class instance: more than the reservation itself (about 100 ns). So these
//! functions take no arguments and no `Env`, and return a number:
//!
//! - the JavaScript layer writes their numbers into one shared
//!   `Float64Array` (registered once per thread with [`register_args`]);
//!   they read them from there, and reach the governor by its id. Every
//!   number is still validated here (`numbers.rs`), exactly as if it had
//!   come as an argument;
//! - a failure returns -1 and keeps the error; the JavaScript layer then
//!   calls [`throw_last_error`], which throws it through `errors.rs` like
//!   any other.

use std::cell::{Cell, RefCell};
use std::mem::ManuallyDrop;

use llmgov::Usage;
use napi::bindgen_prelude::Float64Array;
use napi::{Env, Result};
use napi_derive::napi;

use crate::errors::{invalid, throw};
use crate::governor::{route_of, with, Counts, State};
use crate::numbers::count;

/// Slots of the argument buffer; the JavaScript layer allocates exactly this many.
pub const ARGS: usize = 8;

thread_local! {
    /// The registered buffer's data, kept alive by the leaked reference below.
    static BUFFER: Cell<*const f64> = const { Cell::new(std::ptr::null()) };
    /// The error of the last hot-path call that returned -1.
    static LAST_ERROR: RefCell<Option<llmgov::Error>> = const { RefCell::new(None) };
}

/// What a failed hot-path call returns.
const FAILED: f64 = -1.0;

/// The number to return: `ok(value)`, or [`FAILED`] with the error kept.
#[inline]
fn deliver<T>(result: llmgov::Result<T>, ok: impl FnOnce(T) -> f64) -> f64 {
    match result {
        Ok(value) => ok(value),
        Err(error) => {
            LAST_ERROR.with(|last| *last.borrow_mut() = Some(error));
            FAILED
        }
    }
}

/// Throws the error of the last hot-path call that returned -1.
#[napi(catch_unwind)]
pub fn throw_last_error(env: Env) -> Result<()> {
    let error = LAST_ERROR.with(|last| last.borrow_mut().take());
    let error = error.unwrap_or_else(|| invalid("last_error", "none", "no hot-path call failed"));
    Err(throw(&env, error))
}

/// Registers the `Float64Array(8)` the hot-path functions read their
/// arguments from. Called once per thread by the package's entry point.
/// It must own a non-resizable `ArrayBuffer` (whose data never moves).
#[napi(catch_unwind)]
pub fn register_args(env: Env, buffer: Float64Array) -> Result<()> {
    if buffer.len() < ARGS {
        return Err(throw(&env, invalid("buffer", buffer.len(), "must hold 8 numbers")));
    }
    let pointer = buffer.as_ptr();
    // The reference `buffer` holds keeps the array alive for the life of the
    // thread; it is never released (one per thread).
    let _ = ManuallyDrop::new(buffer);
    BUFFER.with(|b| b.set(pointer));
    Ok(())
}

/// The arguments the JavaScript layer wrote.
#[inline]
fn args<const N: usize>() -> llmgov::Result<[f64; N]> {
    const { assert!(N <= ARGS) };
    let pointer = BUFFER.with(Cell::get);
    if pointer.is_null() {
        return Err(invalid("args", "unregistered", "the argument buffer was not registered"));
    }
    let mut out = [0.0; N];
    // SAFETY: the buffer holds ARGS f64s, is kept alive forever, its data
    // never moves, and only this (the JavaScript) thread touches it.
    unsafe { std::ptr::copy_nonoverlapping(pointer, out.as_mut_ptr(), N) };
    Ok(out)
}

/// A small index (governor, class) the JavaScript layer wrote.
#[inline]
fn index(field: &'static str, value: f64) -> llmgov::Result<u32> {
    let n = count(field, value)?;
    u32::try_from(n).map_err(|_| invalid(field, n, "out of range"))
}

/// `[governor, route, input, cached input, max output, has expected,
/// expected output, class]` → a permit handle, or -1 (a refusal kept).
#[napi(catch_unwind)]
pub fn hot_try_acquire() -> f64 {
    deliver(try_acquire(), |handle| handle)
}

fn try_acquire() -> llmgov::Result<f64> {
    let [gov, route, input, cached, max_output, has_expected, expected, class] = args::<8>()?;
    with(index("governor", gov)?, |s: &mut State| {
        let counts = Counts {
            input,
            cached_input: cached,
            max_output,
            expected_output: (has_expected != 0.0).then_some(expected),
            class_number: index("klass", class)?,
        };
        let request = s.request(route_of(s, route)?, counts)?;
        let permit = s.gov.try_acquire(&request)?;
        let now = permit.acquired_at();
        Ok(s.permits.insert(permit, now))
    })
}

/// `[governor, permit, input, cached input, output]`: reconciles with
/// usage; 0, or -1 (the error kept).
#[napi(catch_unwind)]
pub fn hot_settle() -> f64 {
    deliver(settle(), |()| 0.0)
}

fn settle() -> llmgov::Result<()> {
    let [gov, handle, input, cached, output] = args::<5>()?;
    let usage = Usage::new(count("input_tokens", input)?, count("output_tokens", output)?)
        .with_cached_input(count("cached_input_tokens", cached)?);
    with(index("governor", gov)?, |s| finish(s, handle, |gov, permit| gov.settle(permit, usage)))
}

/// `[governor, permit]`: refunds a permit whose request was never sent; 0
/// or -1.
#[napi(catch_unwind)]
pub fn hot_cancel() -> f64 {
    deliver(cancel(), |()| 0.0)
}

fn cancel() -> llmgov::Result<()> {
    let [gov, handle] = args::<2>()?;
    with(index("governor", gov)?, |s| finish(s, handle, |gov, permit| gov.cancel(permit)))
}

/// `[governor, permit, tokens]`: charges streamed output as it arrives; 0
/// or -1.
#[napi(catch_unwind)]
pub fn hot_add_output() -> f64 {
    deliver(add_output(), |()| 0.0)
}

fn add_output() -> llmgov::Result<()> {
    let [gov, handle, tokens] = args::<3>()?;
    let tokens = count("tokens", tokens)?;
    with(index("governor", gov)?, |s| {
        let permit = s.permits.get(handle).ok_or(llmgov::Error::PermitExpired)?;
        let result = s.gov.add_output(permit, tokens);
        if matches!(result, Err(llmgov::Error::PermitExpired)) {
            s.permits.remove(handle);
        }
        result
    })
}

/// Settles or cancels the permit behind `handle`, and frees its slot once it
/// is no longer pending. A handle with no permit behind it: the JavaScript
/// `Permit` calls only while it believes the permit pending, so its slot can
/// only have been swept after the permit expired.
fn finish(
    s: &mut State,
    handle: f64,
    op: impl FnOnce(&llmgov::Governor, &mut llmgov::Permit) -> llmgov::Result<()>,
) -> llmgov::Result<()> {
    let permit = s.permits.get(handle).ok_or(llmgov::Error::PermitExpired)?;
    let result = op(&s.gov, permit);
    if permit.state() != llmgov::PermitState::Pending {
        s.permits.remove(handle);
    }
    result
}
