//! Admission and the permit it gives: `llmgov_governor_try_acquire`, then
//! settle, cancel, add_output and report on the permit.

use std::sync::Arc;
use std::time::Duration;

use llmgov_core::{Permit, PermitState, Request, Route, Usage};

use crate::args::{self, Out};
use crate::classify::{llmgov_classification, llmgov_header, report_answer};
use crate::errors::{guard, guard_infallible, llmgov_result, Outcome};
use crate::governor::llmgov_governor;

/// What a request asks to reserve. A zeroed struct with its `route` set is
/// a valid request in the default class reserving one request (and a
/// concurrency slot); set the token counts you know.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct llmgov_request {
    /// A number from this governor's `llmgov_governor_route` (0 is none;
    /// another governor's is refused). Not read by the acquires by profile,
    /// which use each deployment's.
    pub route: u64,
    /// A number from this governor's `llmgov_governor_class`; 0 is the
    /// default class (another governor's is refused).
    pub class_id: u64,
    /// Estimated prompt tokens, cached ones included.
    pub input_tokens: u64,
    /// Part of `input_tokens` expected from the prompt cache.
    pub cached_input_tokens: u64,
    /// The request's `max_tokens`: reserved on limits that reserve
    /// `max_tokens`, and a cap on every output charge.
    pub max_output_tokens: u64,
    /// The output expected, reserved (capped at `max_output_tokens`) on
    /// limits with `reserve_output = "expected"`; read only when
    /// `has_expected_output_tokens` is true. Otherwise those limits reserve
    /// what the governor has learned for the route and class.
    pub expected_output_tokens: u64,
    /// Whether `expected_output_tokens` is set.
    pub has_expected_output_tokens: bool,
    /// Order among the waiting requests of one tenant in one class: higher
    /// first, then first come. Only `llmgov_governor_acquire` uses it.
    pub priority: i32,
    /// The longest `llmgov_governor_acquire` may wait for this request,
    /// from the call, in nanoseconds (the class's maximum wait caps it);
    /// read only when `has_deadline` is true.
    pub deadline_ns: u64,
    /// Whether `deadline_ns` is set; otherwise the class's maximum wait.
    pub has_deadline: bool,
}

/// `llmgov_governor_acquire`'s timeout for "no timeout of its own" (the
/// request's deadline and its class's maximum wait still bound the wait).
pub const LLMGOV_NO_TIMEOUT: u64 = u64::MAX;

/// Token counts: a request's actual usage, at settle.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct llmgov_usage {
    /// All prompt tokens, cached ones included.
    pub input_tokens: u64,
    /// The part of `input_tokens` read from the provider's prompt cache.
    pub cached_input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
}

impl From<llmgov_usage> for Usage {
    fn from(u: llmgov_usage) -> Self {
        Usage::new(u.input_tokens, u.output_tokens).with_cached_input(u.cached_input_tokens)
    }
}

impl From<Usage> for llmgov_usage {
    fn from(u: Usage) -> Self {
        llmgov_usage {
            input_tokens: u.input_tokens,
            cached_input_tokens: u.cached_input_tokens,
            output_tokens: u.output_tokens,
        }
    }
}

/// Where a permit stands.
#[allow(non_camel_case_types)]
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum llmgov_permit_state {
    /// Reserved; the request may be in flight.
    Pending = 0,
    /// Reconciled with actual usage.
    Settled = 1,
    /// Refunded in full.
    Cancelled = 2,
    /// Outlived its TTL unsettled: charged as estimated.
    Expired = 3,
}

/// A granted reservation. Settle it with the actual usage, or cancel it if
/// the request was never sent; then free it. One thread at a time.
#[allow(non_camel_case_types)]
pub struct llmgov_permit {
    /// Keeps the governor alive for as long as the permit is.
    governor: Arc<llmgov_governor>,
    permit: Permit,
}

impl llmgov_governor {
    pub(crate) fn request(&self, r: &llmgov_request) -> Outcome<Request> {
        self.request_on(self.route(r.route, "route")?, r)
    }

    /// The request `r` describes, on `route` rather than its own.
    pub(crate) fn request_on(&self, route: Route, r: &llmgov_request) -> Outcome<Request> {
        let mut request = Request::new(route)
            .class(self.class(r.class_id)?)
            .input_tokens(r.input_tokens)
            .cached_input_tokens(r.cached_input_tokens)
            .max_output_tokens(r.max_output_tokens);
        request.expected_output_tokens = r.has_expected_output_tokens.then_some(r.expected_output_tokens);
        request.priority = r.priority;
        request.deadline = r.has_deadline.then(|| Duration::from_nanos(r.deadline_ns));
        Ok(request)
    }
}

/// Reserves every limit of every scope on the request's route now, or
/// nothing. A refusal is `LLMGOV_RESULT_RATE_LIMITED` (`llmgov_last_error`
/// gives the scope, dimension and `retry_after`) or
/// `LLMGOV_RESULT_NEVER_FITS` (never retry); a token count above 2^40 is
/// `LLMGOV_RESULT_INVALID_REQUEST`.
///
/// # Ownership
/// The request is only read. On success `*out_permit` is the caller's:
/// settle or cancel it, then free it with `llmgov_permit_free`. It holds a
/// reference to the governor.
///
/// # Safety
/// `governor` NULL or a live governor; `request` NULL or a readable
/// `llmgov_request`; `out_permit` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn llmgov_governor_try_acquire(
    governor: *const llmgov_governor,
    request: *const llmgov_request,
    out_permit: *mut *mut llmgov_permit,
) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let (gov, request, out) = unsafe {
            (
                args::reference(governor, "governor")?,
                args::reference(request, "request")?,
                Out::new(out_permit, "out_permit")?,
            )
        };
        let permit = gov.governor.try_acquire(&gov.request(request)?)?;
        // SAFETY: `governor` is live, from Arc::into_raw.
        out.write(unsafe { hand_out(governor, permit) });
        Ok(())
    })
}

/// Waits fairly for admission, parking the calling thread: returns once
/// the request is admitted, or with `LLMGOV_RESULT_DEADLINE_EXCEEDED` when
/// `timeout_ns` (`LLMGOV_NO_TIMEOUT` for none of its own), the request's
/// deadline or its class's maximum wait passes first (at once when its
/// predicted wait is already longer; `llmgov_last_error` gives the
/// predicted wait), `LLMGOV_RESULT_QUEUE_FULL` when its class's queue is
/// full, or `LLMGOV_RESULT_NEVER_FITS`. A refused or timed-out wait holds
/// nothing: it frees only what it took. Waiters are served by class
/// priority, guarantee, then fair share across tenants.
///
/// On a manual clock, time moves only when told: after advancing it, call
/// `llmgov_governor_wake_waiters` so waiters see the new time.
///
/// # Ownership
/// As `llmgov_governor_try_acquire`.
///
/// # Safety
/// As `llmgov_governor_try_acquire`.
#[no_mangle]
pub unsafe extern "C" fn llmgov_governor_acquire(
    governor: *const llmgov_governor,
    request: *const llmgov_request,
    timeout_ns: u64,
    out_permit: *mut *mut llmgov_permit,
) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let (gov, request, out) = unsafe {
            (
                args::reference(governor, "governor")?,
                args::reference(request, "request")?,
                Out::new(out_permit, "out_permit")?,
            )
        };
        let timeout = (timeout_ns != LLMGOV_NO_TIMEOUT).then(|| Duration::from_nanos(timeout_ns));
        let permit = gov.governor.acquire_blocking(&gov.request(request)?, timeout)?;
        // SAFETY: `governor` is live, from Arc::into_raw.
        out.write(unsafe { hand_out(governor, permit) });
        Ok(())
    })
}

/// A permit handle for the caller, holding a reference to its governor.
///
/// # Safety
/// `governor` must be live and come from `Arc::into_raw`.
pub(crate) unsafe fn hand_out(governor: *const llmgov_governor, permit: Permit) -> *mut llmgov_permit {
    // SAFETY: the caller's contract; the permit takes a reference of its own.
    let governor = unsafe {
        Arc::increment_strong_count(governor);
        Arc::from_raw(governor)
    };
    Box::into_raw(Box::new(llmgov_permit { governor, permit }))
}

/// Runs `body` on a permit argument.
///
/// # Safety
/// `permit` NULL or a live permit no other thread is using.
unsafe fn with_permit(
    permit: *mut llmgov_permit,
    body: impl FnOnce(&llmgov_governor, &mut Permit) -> Outcome,
) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let handle = unsafe { args::exclusive(permit, "permit") }?;
        body(&handle.governor, &mut handle.permit)
    })
}

/// Reconciles the permit with the request's actual usage: refunds what was
/// over-reserved, charges any overage (into debt if need be). A permit
/// reconciles once: again is `LLMGOV_RESULT_PERMIT_FINISHED`; after its TTL,
/// `LLMGOV_RESULT_PERMIT_EXPIRED`.
///
/// # Ownership
/// The permit stays the caller's (free it after).
///
/// # Safety
/// `permit` NULL or a live permit that no other thread is using.
#[no_mangle]
pub unsafe extern "C" fn llmgov_permit_settle(permit: *mut llmgov_permit, usage: llmgov_usage) -> llmgov_result {
    // SAFETY: the caller's contract.
    unsafe { with_permit(permit, |gov, permit| Ok(gov.governor.settle(permit, usage.into())?)) }
}

/// Refunds everything the permit reserved, the request itself included:
/// for a request that was never sent. Errors as `llmgov_permit_settle`.
///
/// # Ownership
/// As `llmgov_permit_settle`.
///
/// # Safety
/// As `llmgov_permit_settle`.
#[no_mangle]
pub unsafe extern "C" fn llmgov_permit_cancel(permit: *mut llmgov_permit) -> llmgov_result {
    // SAFETY: the caller's contract.
    unsafe { with_permit(permit, |gov, permit| Ok(gov.governor.cancel(permit)?)) }
}

/// Reports `tokens` more streamed output (added to a running total).
/// Output beyond the reservation is charged at once. Errors as
/// `llmgov_permit_settle`.
///
/// # Ownership
/// As `llmgov_permit_settle`.
///
/// # Safety
/// As `llmgov_permit_settle`.
#[no_mangle]
pub unsafe extern "C" fn llmgov_permit_add_output(permit: *mut llmgov_permit, tokens: u64) -> llmgov_result {
    // SAFETY: the caller's contract.
    unsafe { with_permit(permit, |gov, permit| Ok(gov.governor.add_output(permit, tokens)?)) }
}

/// Feeds the provider's answer to this permit's request (HTTP status,
/// headers, body) back into the route's provider scopes, and writes how it
/// was read to `*out`. A 429 holds the bucket it names empty until the
/// retry-after; `remaining` headers lower buckets. Call it for successes
/// too, then settle or cancel the permit as usual. Reads the wall clock
/// (for resets given as dates). A `status` outside 100 to 999 is
/// `LLMGOV_RESULT_INVALID_REQUEST` naming `status`; nothing is fed back.
///
/// # Ownership
/// Headers and body are only read, during the call.
///
/// # Safety
/// `permit` NULL or a live permit; `headers` NULL (only with
/// `headers_len` 0) or `headers_len` readable headers whose names and
/// values are NULL (only with length 0) or readable for their lengths;
/// `body` likewise for `body_len` bytes; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn llmgov_permit_report(
    permit: *const llmgov_permit,
    status: u16,
    headers_ptr: *const llmgov_header,
    headers_len: usize,
    body: *const u8,
    body_len: usize,
    out: *mut llmgov_classification,
) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let handle = unsafe { args::reference(permit, "permit") }?;
        // SAFETY: the caller's contract.
        unsafe {
            report_answer(status, headers_ptr, headers_len, body, body_len, out, |status, headers, body| {
                handle.governor.governor.report(&handle.permit, status, headers, body)
            })
        }
    })
}

/// Writes where the permit stands to `*out_state`.
///
/// # Safety
/// `permit` NULL or live; `out_state` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn llmgov_permit_get_state(
    permit: *const llmgov_permit,
    out_state: *mut llmgov_permit_state,
) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let (handle, out) = unsafe { (args::reference(permit, "permit")?, Out::new(out_state, "out_state")?) };
        out.write(match handle.permit.state() {
            PermitState::Pending => llmgov_permit_state::Pending,
            PermitState::Settled => llmgov_permit_state::Settled,
            PermitState::Cancelled => llmgov_permit_state::Cancelled,
            PermitState::Expired => llmgov_permit_state::Expired,
        });
        Ok(())
    })
}

/// Writes what is charged so far on the permit's behalf (the estimate,
/// raised by streamed output beyond it) to `*out_usage`.
///
/// # Safety
/// `permit` NULL or live; `out_usage` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn llmgov_permit_get_charged(
    permit: *const llmgov_permit,
    out_usage: *mut llmgov_usage,
) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let (handle, out) = unsafe { (args::reference(permit, "permit")?, Out::new(out_usage, "out_usage")?) };
        out.write(handle.permit.charged().into());
        Ok(())
    })
}

/// Frees a permit. NULL does nothing. A permit freed while still pending is
/// not refunded: it stays charged and expires after the permit TTL (its
/// concurrency slot stays taken until then), as in Rust. Cancel a request
/// you abandon.
///
/// # Safety
/// `permit` must be NULL or a permit from `llmgov_governor_try_acquire` not
/// freed yet, and not used after. Using a freed permit, or freeing it
/// twice, is undefined behaviour.
#[no_mangle]
pub unsafe extern "C" fn llmgov_permit_free(permit: *mut llmgov_permit) {
    guard_infallible(|| {
        if !permit.is_null() {
            // SAFETY: made by Box::into_raw in `llmgov_governor_try_acquire`.
            crate::events::free_handle(unsafe { Box::from_raw(permit) });
        }
    })
}
