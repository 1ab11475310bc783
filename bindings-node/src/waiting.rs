//! `acquire`: waiting for capacity, as a Promise, honouring an AbortSignal.
//!
//! The core's `Governor::acquire` future is polled once at the call: a
//! request admitted without waiting gets its handle back at once. Otherwise
//! the future (woken by settles, cancels, reports and the governor's timer)
//! runs on napi's tokio runtime. Each call has a
//! ticket, a number the JavaScript layer chose: aborting the signal calls
//! [`acquire_abort`] with it, which drops the waiting future (the core then
//! takes the request out of its queue, and gives back a permit granted in
//! the meantime). The promise always resolves, to the permit's handle, or to
//! -1 when the request was refused or aborted; the JavaScript layer then
//! calls [`acquire_error`], which throws the refusal through `errors.rs`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use llmgov::{Governor, Request};
use napi::bindgen_prelude::{Either, PromiseRaw};
use napi::{Env, Result};
use napi_derive::napi;
use tokio::sync::oneshot;

use crate::errors::{invalid, throw, OrThrow};
use crate::governor::{route_of, with};
use crate::numbers::{count, millis};

/// Why a waiting acquire ended without a permit.
enum Failure {
    Refused(llmgov::Error),
    Aborted,
}

thread_local! {
    /// Abort switches of the acquires in flight, by ticket.
    static ABORTS: RefCell<HashMap<u32, oneshot::Sender<()>>> = RefCell::new(HashMap::new());
    /// Why each failed acquire failed, by ticket, until JavaScript asks.
    static FAILURES: RefCell<HashMap<u32, Failure>> = RefCell::new(HashMap::new());
}

/// The request an acquire waits for, with what waiting adds to it.
#[napi(object)]
pub struct AcquireArgs {
    /// The governor's id.
    pub governor: u32,
    /// The JavaScript layer's number for this call (for abort and its error).
    pub ticket: u32,
    /// Route number.
    pub route: u32,
    /// Estimated prompt tokens.
    pub input_tokens: f64,
    /// Part of them expected from the prompt cache.
    pub cached_input_tokens: f64,
    /// The request's `max_tokens`.
    pub max_output_tokens: f64,
    /// The output expected, if known.
    pub expected_output_tokens: Option<f64>,
    /// Class number (0 is the default class).
    pub class_number: u32,
    /// Order among the tenant's waiting requests of the class: higher first.
    pub priority: i32,
    /// The longest to wait, in ms (capped by the class's maximum wait).
    pub deadline_ms: Option<f64>,
}

fn request(args: &AcquireArgs) -> llmgov::Result<(Governor, Request)> {
    with(args.governor, |s| {
        let mut request = Request::new(route_of(s, args.route)?)
            .input_tokens(count("input_tokens", args.input_tokens)?)
            .cached_input_tokens(count("cached_input_tokens", args.cached_input_tokens)?)
            .max_output_tokens(count("max_output_tokens", args.max_output_tokens)?)
            .priority(args.priority);
        if let Some(expected) = args.expected_output_tokens {
            request.expected_output_tokens = Some(count("expected_output_tokens", expected)?);
        }
        request.class = s.class(args.class_number)?;
        if let Some(ms) = args.deadline_ms {
            request = request.deadline(millis("deadline_ms", ms)?);
        }
        Ok((s.gov.clone(), request))
    })
}

/// Waits for capacity: a permit handle at once when the request is admitted
/// without waiting (the common case costs no trip through the runtime), or
/// a Promise of one, or of -1 (see the module docs).
#[napi(catch_unwind, ts_return_type = "number | Promise<number>")]
pub fn acquire_start(env: &Env, args: AcquireArgs) -> Result<Either<f64, PromiseRaw<'_, f64>>> {
    let (gov, request) = request(&args).or_throw(env)?;
    let mut waiting = gov.acquire(&request);
    // The scheduler decides at the call whether the request passes now
    // (fairly: not ahead of anyone queued); one poll reads that decision.
    let mut context = Context::from_waker(Waker::noop());
    if let Poll::Ready(result) = Pin::new(&mut waiting).poll(&mut context) {
        let permit = result.or_throw(env)?;
        let now = permit.acquired_at();
        return with(args.governor, |s| Ok(s.permits.insert(permit, now))).map(Either::A).or_throw(env);
    }
    let (abort, aborted) = oneshot::channel::<()>();
    let ticket = args.ticket;
    ABORTS.with(|a| a.borrow_mut().insert(ticket, abort));
    let future = async move {
        tokio::select! {
            permit = waiting => Ok(permit.map_err(Failure::Refused)),
            _ = aborted => Ok(Err(Failure::Aborted)),
        }
    };
    let governor = args.governor;
    let promise = env.spawn_future_with_callback(future, move |_env, outcome| {
        ABORTS.with(|a| a.borrow_mut().remove(&ticket));
        let failure = match outcome {
            Ok(permit) => {
                let now = permit.acquired_at();
                let mut granted = Some(permit);
                match with(governor, |s| Ok(s.permits.insert(granted.take().expect("inserted once"), now))) {
                    Ok(handle) => return Ok(handle),
                    Err(error) => {
                        // The governor is gone: give the permit back now
                        // rather than hold its slots until it expires.
                        if let Some(mut permit) = granted {
                            let _ = gov.cancel(&mut permit);
                        }
                        Failure::Refused(error)
                    }
                }
            }
            Err(failure) => failure,
        };
        FAILURES.with(|f| f.borrow_mut().insert(ticket, failure));
        Ok(-1.0)
    })?;
    Ok(Either::B(promise))
}

/// Aborts the waiting acquire with this ticket (its signal fired). Nothing
/// happens if it has already finished.
#[napi(catch_unwind)]
pub fn acquire_abort(ticket: u32) {
    if let Some(abort) = ABORTS.with(|a| a.borrow_mut().remove(&ticket)) {
        let _ = abort.send(());
    }
}

/// For an acquire that resolved to -1: throws its refusal (`RateLimitedError`,
/// `DeadlineExceededError`, …), or returns `true` if it was aborted (the
/// JavaScript layer then throws the signal's reason).
#[napi(catch_unwind)]
pub fn acquire_error(env: Env, ticket: u32) -> Result<bool> {
    match FAILURES.with(|f| f.borrow_mut().remove(&ticket)) {
        Some(Failure::Aborted) => Ok(true),
        Some(Failure::Refused(error)) => Err(throw(&env, error)),
        None => Err(throw(&env, invalid("ticket", ticket, "no failed acquire has this ticket"))),
    }
}
