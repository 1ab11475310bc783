//! Admission on a Redis governor (`llmgov_redis_governor_try_acquire`, and
//! `_acquire`, which waits) and the permit it gives (settle, cancel,
//! report, free).

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use llmgov_core::{Usage, MAX_TOKENS};
use llmgov_redis::{SharedPermit, Wait};

use super::llmgov_redis_governor;
use crate::args::{self, Out};
use crate::cancel::{llmgov_cancel_token, Registration};
use crate::classify::{llmgov_classification, llmgov_header, report_answer};
use crate::errors::{guard, guard_infallible, llmgov_result, Failure, Outcome};
use crate::permit::{llmgov_usage, LLMGOV_NO_TIMEOUT};

/// A reservation granted by a Redis governor. Settle it with the actual
/// usage, or cancel it if the request was never sent; then free it. One
/// thread at a time.
#[allow(non_camel_case_types)]
pub struct llmgov_redis_permit {
    /// Keeps the governor alive for as long as the permit is.
    governor: Arc<llmgov_redis_governor>,
    permit: SharedPermit,
}

/// What an acquire reserves: the prompt (cached part included) and
/// `max_tokens` as output (shared scopes reserve `max_tokens`). The backend
/// checks the counts as a usage, which would name `max_output_tokens`
/// `output_tokens`: that one is checked here, under its own name.
fn estimate(input_tokens: u64, cached_input_tokens: u64, max_output_tokens: u64) -> Outcome<Usage> {
    if max_output_tokens > MAX_TOKENS {
        return Err(Failure::Core(llmgov_core::Error::InvalidRequest {
            field: "max_output_tokens",
            value: max_output_tokens.to_string(),
            reason: format!("more than {MAX_TOKENS} tokens; no request is that large"),
        }));
    }
    Ok(Usage::new(input_tokens, max_output_tokens).with_cached_input(cached_input_tokens))
}

/// A permit handle for the caller, holding a reference to its governor.
///
/// # Safety
/// `governor` must be live and come from `Arc::into_raw`.
unsafe fn hand_out(governor: *const llmgov_redis_governor, permit: SharedPermit) -> *mut llmgov_redis_permit {
    // SAFETY: the caller's contract; the permit takes a reference of its own.
    let governor = unsafe {
        Arc::increment_strong_count(governor);
        Arc::from_raw(governor)
    };
    Box::into_raw(Box::new(llmgov_redis_permit { governor, permit }))
}

/// Reserves `input_tokens` (of which `cached_input_tokens` from the prompt
/// cache) and `max_output_tokens` on every scope of the route now, shared
/// and local, or nothing. A refusal is `LLMGOV_RESULT_RATE_LIMITED`
/// (`llmgov_last_error` gives the scope, the dimension and when it could
/// pass, as Redis's GCRA says; none for a concurrency slot) or
/// `LLMGOV_RESULT_NEVER_FITS`; a token count above 2^40, or more cached
/// input than input, is `LLMGOV_RESULT_INVALID_REQUEST` naming the field.
/// Each shared scope in exact mode costs one Redis call; while Redis is
/// away, the safe local share answers.
///
/// # Ownership
/// On success `*out_permit` is the caller's: settle or cancel it, then free
/// it with `llmgov_redis_permit_free`. It holds a reference to the governor.
///
/// # Safety
/// `governor` NULL or live; `out_permit` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn llmgov_redis_governor_try_acquire(
    governor: *const llmgov_redis_governor,
    route: u64,
    input_tokens: u64,
    cached_input_tokens: u64,
    max_output_tokens: u64,
    out_permit: *mut *mut llmgov_redis_permit,
) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let (gov, out) = unsafe { (args::reference(governor, "governor")?, Out::new(out_permit, "out_permit")?) };
        let estimate = estimate(input_tokens, cached_input_tokens, max_output_tokens)?;
        let permit = gov.governor.try_acquire(gov.route(route)?, estimate)?;
        // SAFETY: `governor` is live, from Arc::into_raw.
        out.write(unsafe { hand_out(governor, permit) });
        Ok(())
    })
}

/// `llmgov_redis_governor_try_acquire`, waiting while a limit refuses: the
/// calling thread sleeps until the refusing limit could admit the request
/// (Redis's GCRA says when; a concurrency slot, or a lease another thread
/// took first, is polled every 2 to 50 ms) and tries again. Redis keeps no queue: whoever
/// tries first after capacity returns takes it.
///
/// Returns `LLMGOV_RESULT_DEADLINE_EXCEEDED` when `timeout_ns`
/// (`LLMGOV_NO_TIMEOUT`: none) passes on the governor's clock, and at once
/// when the predicted wait is already longer (`llmgov_last_error` gives the
/// prediction as `retry_after` and how long it waited as `waited_ns`);
/// `LLMGOV_RESULT_NEVER_FITS` at once; and `LLMGOV_RESULT_CANCELLED`
/// promptly once another thread cancels `cancel` (NULL: no token), holding
/// nothing. On a manual clock the timeout moves only as the clock does; the
/// sleeps are real time.
///
/// # Ownership
/// As `llmgov_redis_governor_try_acquire`. The token stays the caller's.
///
/// # Safety
/// As `llmgov_redis_governor_try_acquire`; `cancel` NULL or a token live
/// for the whole call.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn llmgov_redis_governor_acquire(
    governor: *const llmgov_redis_governor,
    route: u64,
    input_tokens: u64,
    cached_input_tokens: u64,
    max_output_tokens: u64,
    timeout_ns: u64,
    cancel: *const llmgov_cancel_token,
    out_permit: *mut *mut llmgov_redis_permit,
) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let (gov, out) = unsafe { (args::reference(governor, "governor")?, Out::new(out_permit, "out_permit")?) };
        // SAFETY: the caller's contract: NULL or live for the call.
        let token = unsafe { cancel.as_ref() };
        let estimate = estimate(input_tokens, cached_input_tokens, max_output_tokens)?;
        let timeout = (timeout_ns != LLMGOV_NO_TIMEOUT).then(|| Duration::from_nanos(timeout_ns));
        let permit = wait_for_admission(gov, route, estimate, timeout, token)?;
        // SAFETY: `governor` is live, from Arc::into_raw.
        out.write(unsafe { hand_out(governor, permit) });
        Ok(())
    })
}

/// Tries until admitted or refused for good, paced by the backend's
/// `Wait` (as `RedisGovernor::acquire_blocking`), sleeping so that a cancel
/// of `token` wakes the thread at once.
fn wait_for_admission(
    gov: &llmgov_redis_governor,
    route: u64,
    estimate: Usage,
    timeout: Option<Duration>,
    token: Option<&llmgov_cancel_token>,
) -> Outcome<SharedPermit> {
    let route = gov.route(route)?;
    let registration = token.map(Registration::new);
    let clock = gov.governor.local().clock();
    let mut wait = Wait::new(clock.now(), timeout);
    loop {
        if let Some(token) = token {
            token.check()?;
        }
        match gov.governor.try_acquire(route, estimate) {
            Ok(permit) => return Ok(permit),
            Err(refusal) => {
                let pause = wait.after(refusal, clock.now())?;
                match &registration {
                    Some(registration) => registration.sleep(pause)?,
                    None => thread::sleep(pause),
                }
            }
        }
    }
}

/// Runs `body` on a permit argument.
///
/// # Safety
/// `permit` NULL or a live permit no other thread is using.
unsafe fn with_permit(
    permit: *mut llmgov_redis_permit,
    body: impl FnOnce(&llmgov_redis_governor, &mut SharedPermit) -> Outcome,
) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let handle = unsafe { args::exclusive(permit, "permit") }?;
        body(&handle.governor, &mut handle.permit)
    })
}

/// Reconciles the permit with the request's actual usage: refunds what was
/// over-reserved and charges any overage, in Redis and locally, and frees
/// its concurrency slots. A permit reconciles once: again is
/// `LLMGOV_RESULT_PERMIT_FINISHED`; after the permit TTL,
/// `LLMGOV_RESULT_PERMIT_EXPIRED` (charged as estimated). A usage out of
/// range is `LLMGOV_RESULT_INVALID_REQUEST` naming the field and changes
/// nothing: the permit stays pending. If Redis fails meanwhile, the refund
/// is lost (capacity stays charged; a slot comes back after its TTL).
///
/// # Ownership
/// The permit stays the caller's (free it after).
///
/// # Safety
/// `permit` NULL or a live permit that no other thread is using.
#[no_mangle]
pub unsafe extern "C" fn llmgov_redis_permit_settle(
    permit: *mut llmgov_redis_permit,
    usage: llmgov_usage,
) -> llmgov_result {
    // SAFETY: the caller's contract.
    unsafe { with_permit(permit, |gov, permit| Ok(gov.governor.settle(permit, usage.into())?)) }
}

/// Gives the whole reservation back (the request was never sent). Errors
/// as `llmgov_redis_permit_settle`.
///
/// # Ownership
/// As `llmgov_redis_permit_settle`.
///
/// # Safety
/// As `llmgov_redis_permit_settle`.
#[no_mangle]
pub unsafe extern "C" fn llmgov_redis_permit_cancel(permit: *mut llmgov_redis_permit) -> llmgov_result {
    // SAFETY: the caller's contract.
    unsafe { with_permit(permit, |gov, permit| Ok(gov.governor.cancel(permit)?)) }
}

/// Reports `tokens` more streamed output (added to a running total): output
/// beyond the reservation of the route's local scopes is charged there at
/// once, with no Redis call; the shared scopes reserved `max_output_tokens`
/// and are charged any more at settle, from the usage. Errors as
/// `llmgov_redis_permit_settle` (a total above 2^40 is
/// `LLMGOV_RESULT_INVALID_REQUEST` naming `tokens`).
///
/// # Ownership
/// As `llmgov_redis_permit_settle`.
///
/// # Safety
/// As `llmgov_redis_permit_settle`.
#[no_mangle]
pub unsafe extern "C" fn llmgov_redis_permit_add_output(
    permit: *mut llmgov_redis_permit,
    tokens: u64,
) -> llmgov_result {
    // SAFETY: the caller's contract.
    unsafe { with_permit(permit, |gov, permit| Ok(gov.governor.add_output(permit, tokens)?)) }
}

/// Feeds the provider's answer to this permit's request (HTTP status,
/// headers, body) back into the local scopes of its route, as
/// `llmgov_permit_report` does, and writes how it was read to `*out`: a 429
/// holds the local scope it names empty until the retry-after, AIMD and the
/// breaker learn, `remaining` headers lower buckets. A 429 also holds the
/// route's shared provider scopes (`provider = true`) empty in Redis, for
/// every process, until its retry-after (one Redis call per such scope),
/// and so does a circuit breaker the answer opens there, for its pause;
/// other shared scopes learn nothing from it. Call it for successes too, any time before or
/// after settling or cancelling. Reads the wall clock (for resets given as
/// dates). A `status` outside 100 to 999 is `LLMGOV_RESULT_INVALID_REQUEST`
/// naming `status`; nothing is fed back.
///
/// # Ownership
/// Headers and body are only read, during the call.
///
/// # Safety
/// As `llmgov_permit_report`, with a live Redis permit for `permit`.
#[no_mangle]
pub unsafe extern "C" fn llmgov_redis_permit_report(
    permit: *const llmgov_redis_permit,
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

/// Writes whether the permit's shared part came from the safe local share
/// (Redis was away when it was granted) to `*out_from_fallback`.
///
/// # Safety
/// `permit` NULL or live; `out_from_fallback` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn llmgov_redis_permit_from_fallback(
    permit: *const llmgov_redis_permit,
    out_from_fallback: *mut bool,
) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let (handle, out) =
            unsafe { (args::reference(permit, "permit")?, Out::new(out_from_fallback, "out_from_fallback")?) };
        out.write(handle.permit.from_fallback());
        Ok(())
    })
}

/// Frees a permit. NULL does nothing. A permit freed while still pending is
/// not refunded: it stays charged, and its concurrency slot stays taken
/// until the permit TTL, then the slot TTL, pass. Cancel a request you
/// abandon.
///
/// # Safety
/// `permit` must be NULL or a permit from `llmgov_redis_governor_try_acquire`
/// or `_acquire` not freed yet, and not used after.
#[no_mangle]
pub unsafe extern "C" fn llmgov_redis_permit_free(permit: *mut llmgov_redis_permit) {
    guard_infallible(|| {
        if !permit.is_null() {
            // SAFETY: made by Box::into_raw in `hand_out`.
            crate::events::free_handle(unsafe { Box::from_raw(permit) });
        }
    })
}
