//! Waiting for capacity, as a Promise, honouring an AbortSignal: `acquire`
//! here, `acquireProfile` in `routing.rs`, both through [`start_wait`].
//!
//! The core's waiting future is polled once at the call: a request admitted
//! without waiting gets its grant back at once. Otherwise the future (woken
//! by settles, cancels, reports and the governor's timer) runs on napi's
//! tokio runtime. Each call has a
//! ticket, a number the JavaScript layer chose: aborting the signal calls
//! [`acquire_abort`] with it, which drops the waiting future (the core then
//! takes the request out of its queue, and gives back a permit granted in
//! the meantime). The promise always resolves, to the grant, or to `null`
//! when the request was refused or aborted; the JavaScript layer then
//! calls [`acquire_error`], which throws the refusal through `errors.rs`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use llmgov::{Governor, Permit, Request};
use napi::bindgen_prelude::{Either, PromiseRaw, ToNapiValue};
use napi::{Env, Result};
use napi_derive::napi;
use tokio::sync::oneshot;

use crate::errors::{invalid, throw, OrThrow};
use crate::governor::{route_of, with, Counts, State};
use crate::numbers::millis;

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

/// What a wait grants, and what JavaScript receives for it: a plain permit
/// (its handle), or a permit routed through a profile (`routing.rs`).
pub trait Grant: Send + 'static {
    /// What the promise resolves to.
    type Js: ToNapiValue + 'static;
    /// The permit, to give back if the governor is gone when it arrives.
    fn permit(&mut self) -> &mut Permit;
    /// Files the permit in the governor's table; what JavaScript gets.
    fn deliver(self, s: &mut State) -> Self::Js;
}

impl Grant for Permit {
    type Js = f64;

    fn permit(&mut self) -> &mut Permit {
        self
    }

    fn deliver(self, s: &mut State) -> f64 {
        let now = self.acquired_at();
        s.permits.insert(self, now)
    }
}

/// What a waiting call returns: the grant at once, or a Promise of it (or
/// of `null`, see the module docs).
pub type Started<'env, J> = Either<J, PromiseRaw<'env, Option<J>>>;

/// How a call waits, whatever it waits for.
#[napi(object)]
pub struct WaitArgs {
    /// The governor's id.
    pub governor: u32,
    /// The JavaScript layer's number for this call (for abort and its error).
    pub ticket: u32,
    /// Order among the tenant's waiting requests of the class: higher first.
    pub priority: i32,
    /// The longest to wait, in ms (capped by the class's maximum wait).
    pub deadline_ms: Option<f64>,
}

/// The request an acquire waits for, with what waiting adds to it.
#[napi(object)]
pub struct AcquireArgs {
    /// The governor's id.
    pub governor: u32,
    /// The JavaScript layer's number for this call (for abort and its error).
    pub ticket: u32,
    /// Route number (`tagged.rs`).
    pub route: f64,
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

/// `request` with what waiting adds: its priority and deadline.
pub fn waiting(request: Request, priority: i32, deadline_ms: Option<f64>) -> llmgov::Result<Request> {
    let request = request.priority(priority);
    match deadline_ms {
        Some(ms) => Ok(request.deadline(millis("deadline_ms", ms)?)),
        None => Ok(request),
    }
}

fn request(args: &AcquireArgs) -> llmgov::Result<(Governor, Request)> {
    with(args.governor, |s| {
        let counts = Counts {
            input: args.input_tokens,
            cached_input: args.cached_input_tokens,
            max_output: args.max_output_tokens,
            expected_output: args.expected_output_tokens,
            class_number: args.class_number,
        };
        let request = s.request(route_of(s, args.route)?, counts)?;
        Ok((s.gov.clone(), waiting(request, args.priority, args.deadline_ms)?))
    })
}

/// Waits for capacity: a permit handle at once when the request is admitted
/// without waiting (the common case costs no trip through the runtime), or
/// a Promise of one, or of `null` (see the module docs).
#[napi(catch_unwind, ts_return_type = "number | Promise<number | null>")]
pub fn acquire_start(env: &Env, args: AcquireArgs) -> Result<Started<'_, f64>> {
    let (gov, request) = request(&args).or_throw(env)?;
    let waiting = gov.acquire(&request);
    start_wait(env, args.governor, args.ticket, gov, waiting)
}

/// Polls `waiting` once and delivers its grant if it is ready; otherwise
/// runs it on napi's runtime, abortable by `ticket` (see the module docs).
/// `gov` gives the grant back if governor `governor` is gone by then.
pub fn start_wait<G: Grant>(
    env: &Env,
    governor: u32,
    ticket: u32,
    gov: Governor,
    mut waiting: impl Future<Output = llmgov::Result<G>> + Unpin + Send + 'static,
) -> Result<Started<'_, G::Js>> {
    // The scheduler decides at the call whether the request passes now
    // (fairly: not ahead of anyone queued); one poll reads that decision.
    let mut context = Context::from_waker(Waker::noop());
    if let Poll::Ready(result) = Pin::new(&mut waiting).poll(&mut context) {
        let granted = result.or_throw(env)?;
        return with(governor, |s| Ok(granted.deliver(s))).map(Either::A).or_throw(env);
    }
    let (abort, aborted) = oneshot::channel::<()>();
    ABORTS.with(|a| a.borrow_mut().insert(ticket, abort));
    let future = async move {
        tokio::select! {
            granted = waiting => Ok(granted.map_err(Failure::Refused)),
            _ = aborted => Ok(Err(Failure::Aborted)),
        }
    };
    let promise = env.spawn_future_with_callback(future, move |_env, outcome| {
        ABORTS.with(|a| a.borrow_mut().remove(&ticket));
        let failure = match outcome {
            Ok(granted) => {
                let mut granted = Some(granted);
                match with(governor, |s| Ok(granted.take().expect("delivered once").deliver(s))) {
                    Ok(delivered) => return Ok(Some(delivered)),
                    Err(error) => {
                        // The governor is gone: give the permit back now
                        // rather than hold its slots until it expires.
                        if let Some(mut granted) = granted {
                            let _ = gov.cancel(granted.permit());
                        }
                        Failure::Refused(error)
                    }
                }
            }
            Err(failure) => failure,
        };
        FAILURES.with(|f| f.borrow_mut().insert(ticket, failure));
        Ok(None)
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

/// For an acquire that resolved to `null`: throws its refusal (`RateLimitedError`,
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
