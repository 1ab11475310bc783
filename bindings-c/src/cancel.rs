//! A blocking acquire another thread can cancel: the calling thread drives
//! the core's runtime-free `Acquire` future, parked between wake-ups, and a
//! cancel token unparks it; dropping the future leaves the queue (a permit
//! granted at that very moment is given back), so nothing stays reserved.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use llmgov_core::Request;

use crate::args::{self, Out};
use crate::errors::{guard, guard_infallible, llmgov_result, Failure, Outcome};
use crate::governor::llmgov_governor;
use crate::permit::{hand_out, llmgov_permit, llmgov_request, LLMGOV_NO_TIMEOUT};

/// A cancel signal for `llmgov_governor_acquire_cancellable`,
/// `llmgov_governor_acquire_profile` and `llmgov_redis_governor_acquire`, set once by
/// `llmgov_cancel_token_cancel` from any thread. One token may serve
/// several waits (all of them are cancelled); it cannot be reset.
#[allow(non_camel_case_types)]
pub struct llmgov_cancel_token {
    cancelled: AtomicBool,
    /// The waits to wake when it is cancelled, by a number of their own.
    waiting: Mutex<Waiters>,
}

#[derive(Default)]
struct Waiters {
    next: u64,
    wakers: HashMap<u64, Waker>,
}

impl llmgov_cancel_token {
    fn waiters(&self) -> std::sync::MutexGuard<'_, Waiters> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
        for (_, waker) in self.waiters().wakers.drain() {
            waker.wake();
        }
    }

    fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }

    /// A token not cancelled yet.
    pub(crate) fn uncancelled() -> Self {
        Self { cancelled: AtomicBool::new(false), waiting: Mutex::new(Waiters::default()) }
    }

    /// Fails with `LLMGOV_RESULT_CANCELLED` if it was cancelled already.
    pub(crate) fn check(&self) -> Outcome {
        if self.is_cancelled() {
            return Err(cancelled());
        }
        Ok(())
    }
}

/// Wakes a parked thread.
struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// This thread, registered with a token so that cancelling it unparks the
/// thread; unregistered when dropped.
pub(crate) struct Registration<'a> {
    token: &'a llmgov_cancel_token,
    id: u64,
    waker: Waker,
}

impl<'a> Registration<'a> {
    pub(crate) fn new(token: &'a llmgov_cancel_token) -> Self {
        let waker = Waker::from(Arc::new(Unpark(thread::current())));
        let mut waiters = token.waiters();
        let id = waiters.next;
        waiters.next += 1;
        waiters.wakers.insert(id, waker.clone());
        drop(waiters);
        Registration { token, id, waker }
    }

    /// Sleeps for `pause`, or returns `LLMGOV_RESULT_CANCELLED` as soon as
    /// the token is cancelled (before or during the sleep).
    pub(crate) fn sleep(&self, pause: Duration) -> Outcome {
        let end = Instant::now().checked_add(pause);
        loop {
            // `cancel` stores before it wakes: checked before each park, a
            // cancel is never missed, and park returns at once after an unpark.
            self.token.check()?;
            let left = end.map_or(pause, |end| end.saturating_duration_since(Instant::now()));
            if left.is_zero() {
                return Ok(());
            }
            thread::park_timeout(left);
        }
    }
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.token.waiters().wakers.remove(&self.id);
    }
}

/// Drives `wait` on this thread until it is answered, or `token` is
/// cancelled (then the future is dropped: it leaves the queue).
pub(crate) fn block_on<T>(
    wait: impl Future<Output = llmgov_core::Result<T>>,
    token: &llmgov_cancel_token,
) -> Outcome<T> {
    let registration = Registration::new(token);
    let mut cx = Context::from_waker(&registration.waker);
    let mut wait = std::pin::pin!(wait);
    // Checked before each poll, and `cancel` stores before it wakes: a
    // cancel is never missed, and park returns at once after an unpark.
    loop {
        token.check()?;
        match wait.as_mut().poll(&mut cx) {
            Poll::Ready(result) => return result.map_err(Failure::from),
            Poll::Pending => thread::park(),
        }
    }
}

#[cold]
fn cancelled() -> Failure {
    Failure::Binding {
        result: llmgov_result::Cancelled,
        field: "cancel".to_owned(),
        value: None,
        reason: "was cancelled: the request left its queue and holds nothing".to_owned(),
    }
}

/// A new cancel token, not cancelled.
///
/// # Ownership
/// The caller's: free it with `llmgov_cancel_token_free` once no wait uses
/// it and no thread will cancel it.
#[no_mangle]
pub extern "C" fn llmgov_cancel_token_new() -> *mut llmgov_cancel_token {
    Box::into_raw(Box::new(llmgov_cancel_token::uncancelled()))
}

/// Cancels every `llmgov_governor_acquire_cancellable`,
/// `llmgov_governor_acquire_profile` and `llmgov_redis_governor_acquire`
/// waiting on `token`, now and later: each returns
/// `LLMGOV_RESULT_CANCELLED` promptly, holding nothing. Callable from any
/// thread, any number of times.
///
/// # Safety
/// `token` NULL (an error) or a live token.
#[no_mangle]
pub unsafe extern "C" fn llmgov_cancel_token_cancel(token: *const llmgov_cancel_token) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        unsafe { args::reference(token, "token") }?.cancel();
        Ok(())
    })
}

/// Frees a cancel token. NULL does nothing.
///
/// # Safety
/// `token` must be NULL or a token from `llmgov_cancel_token_new` not freed
/// yet, that no wait is using and no thread will cancel.
#[no_mangle]
pub unsafe extern "C" fn llmgov_cancel_token_free(token: *mut llmgov_cancel_token) {
    guard_infallible(|| {
        if !token.is_null() {
            // SAFETY: made by Box::into_raw in `llmgov_cancel_token_new`.
            drop(unsafe { Box::from_raw(token) });
        }
    })
}

/// Waits fairly for admission as `llmgov_governor_acquire` does (the same
/// timeout, deadline and class rules, the same errors), and also returns
/// `LLMGOV_RESULT_CANCELLED` as soon as another thread cancels `cancel`:
/// the request then leaves its queue at once, and a permit granted at that
/// very moment is given back, so nothing stays reserved. If admission wins
/// the race, the permit is returned as usual.
///
/// Its refusals reach the event hook, at once or after a wait.
///
/// # Ownership
/// As `llmgov_governor_try_acquire`. The token stays the caller's.
///
/// # Safety
/// As `llmgov_governor_try_acquire`; `cancel` NULL (an error) or a token
/// live for the whole call.
#[no_mangle]
pub unsafe extern "C" fn llmgov_governor_acquire_cancellable(
    governor: *const llmgov_governor,
    request: *const llmgov_request,
    timeout_ns: u64,
    cancel: *const llmgov_cancel_token,
    out_permit: *mut *mut llmgov_permit,
) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let (gov, request, token, out) = unsafe {
            (
                args::reference(governor, "governor")?,
                args::reference(request, "request")?,
                args::reference(cancel, "cancel")?,
                Out::new(out_permit, "out_permit")?,
            )
        };
        token.check()?;
        let request = with_timeout(gov.request(request)?, timeout_ns);
        let permit = block_on(gov.governor.acquire(&request), token)?;
        // SAFETY: `governor` is live, from Arc::into_raw.
        out.write(unsafe { hand_out(governor, permit) });
        Ok(())
    })
}

/// The request with its deadline shortened to the timeout: the scheduler
/// bounds a wait by the least of the two, counted from the call, either way.
pub(crate) fn with_timeout(mut request: Request, timeout_ns: u64) -> Request {
    if timeout_ns != LLMGOV_NO_TIMEOUT {
        let timeout = Duration::from_nanos(timeout_ns);
        request.deadline = Some(request.deadline.map_or(timeout, |own| own.min(timeout)));
    }
    request
}
