//! Waiting for admission: `await gov.acquire(...)` (an asyncio future the
//! event loop resolves itself, see `wake.rs`), `gov.acquire_blocking(...)`
//! (the GIL released while the thread is parked, taken back now and then to
//! let Ctrl-C in), and `gov.reserve(...)`, a context manager for `with` and
//! `async with` that settles or cancels on exit.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;
use std::time::{Duration, Instant};

use llmgov::Request;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::args::{self, no_unknown};
use crate::errors::{self, invalid, IntoPyResult};
use crate::governor::PyGovernor;
use crate::permit::{PyPermit, Ready};
use crate::request::RequestArgs;
use crate::wake::Acquiring;

/// What waiting adds to a request: its priority among its tenant's
/// waiting requests, and how long it may wait (`deadline_ms`).
pub fn with_waiting(
    mut request: Request,
    priority: Option<&Bound<'_, PyAny>>,
    deadline_ms: Option<&Bound<'_, PyAny>>,
) -> PyResult<Request> {
    if let Some(p) = priority.filter(|p| !p.is_none()) {
        request.priority = p
            .extract::<i32>()
            .ok()
            .filter(|_| !p.is_instance_of::<pyo3::types::PyBool>())
            .ok_or_else(|| invalid("priority", p, "must be an integer from -2^31 to 2^31 - 1"))?;
    }
    if let Some(deadline) = deadline(deadline_ms)? {
        request.deadline = Some(deadline);
    }
    Ok(request)
}

/// How long a request may wait, from `deadline_ms`.
pub fn deadline(deadline_ms: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Duration>> {
    match deadline_ms.filter(|d| !d.is_none()) {
        Some(d) => Ok(Some(Duration::from_nanos((args::millis("deadline_ms", d)? * 1e6).round() as u64))),
        None => Ok(None),
    }
}

/// The blocking timeout, from seconds.
pub fn timeout(value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Duration>> {
    match value.filter(|v| !v.is_none()) {
        Some(v) => {
            let seconds = args::millis("timeout", v)
                .map_err(|_| invalid("timeout", v, "must be a non-negative number of seconds"))?;
            // Finite and non-negative, but it may still overflow a Duration (1e20 s).
            let timeout = Duration::try_from_secs_f64(seconds).map_err(|_| {
                invalid("timeout", v, "is too long (more than 2^64 seconds); pass None to wait without one")
            })?;
            Ok(Some(timeout))
        }
        None => Ok(None),
    }
}

pub use crate::wake::acquire_async;

/// The longest a blocking wait keeps the GIL released before it takes it
/// back to run pending signal handlers, so that Ctrl-C stops a wait of any
/// length within this (here and on a `RedisGovernor`).
pub const SIGNAL_CHECK: Duration = Duration::from_millis(100);

/// `request`, waiting at most `timeout` too: the scheduler takes the sooner
/// of a blocking timeout and the request's own deadline, so it is one.
pub fn within(mut request: Request, timeout: Option<Duration>) -> Request {
    if let Some(timeout) = timeout {
        request.deadline = Some(request.deadline.map_or(timeout, |own| own.min(timeout)));
    }
    request
}

/// Parks the thread, the GIL released, until the permit or a refusal.
pub fn acquire_blocking(
    gov: &Bound<'_, PyGovernor>,
    request: Request,
    timeout: Option<Duration>,
) -> PyResult<PyPermit> {
    let waiting = gov.get().gov.acquire(&within(request, timeout));
    let permit = block_on(gov.py(), waiting)?.py_err()?;
    Ok(PyPermit::new(permit, gov.clone().unbind()))
}

/// Wakes the thread parked in [`block_on`].
struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Waits for `waiting`, a request already queued by the core (its
/// `Acquire`, or a request by profile), parking the thread with the GIL
/// released. On the main thread, which alone runs Python's signal
/// handlers, the GIL is taken back every [`SIGNAL_CHECK`] to run them: a
/// handler's exception (Ctrl-C's `KeyboardInterrupt`) is raised, and
/// `waiting` dropped, which takes the request out of its queue and cancels
/// a permit granted to it meanwhile. Between looks the request keeps its
/// place in the queue: it waits on its own future throughout, never
/// leaving and entering again.
pub fn block_on<W>(py: Python<'_>, mut waiting: W) -> PyResult<W::Output>
where
    W: Future + Unpin + Send,
    W::Output: Send,
{
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    // Most are admitted (or refused) at the call: no need to let the GIL go.
    if let Poll::Ready(outcome) = Pin::new(&mut waiting).poll(&mut Context::from_waker(&waker)) {
        return Ok(outcome);
    }
    let slice = runs_signal_handlers(py)?.then_some(SIGNAL_CHECK);
    loop {
        if let Some(outcome) = py.detach(|| park_until_answered(&mut waiting, &waker, slice)) {
            return Ok(outcome);
        }
        py.check_signals()?;
    }
}

/// Polls `waiting` each time `waker` unparks the thread: its outcome, or
/// None once `slice` (if any) has passed without one.
fn park_until_answered<W: Future + Unpin>(
    waiting: &mut W,
    waker: &Waker,
    slice: Option<Duration>,
) -> Option<W::Output> {
    let mut context = Context::from_waker(waker);
    let until = slice.map(|slice| Instant::now() + slice);
    loop {
        if let Poll::Ready(outcome) = Pin::new(&mut *waiting).poll(&mut context) {
            return Some(outcome);
        }
        match until {
            None => std::thread::park(),
            Some(until) => {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return None;
                }
                std::thread::park_timeout(left);
            }
        }
    }
}

/// Whether this is the thread Python runs signal handlers on (the main
/// thread): on any other, looking for them would wake it for nothing.
fn runs_signal_handlers(py: Python<'_>) -> PyResult<bool> {
    let threading = py.import(intern!(py, "threading"))?;
    Ok(threading.call_method0(intern!(py, "current_thread"))?.is(&threading.call_method0(intern!(py, "main_thread"))?))
}

/// Where a `Reservation` stands.
enum Entry {
    /// Not in a block: it may be entered.
    Free,
    /// A `with` or `async with` is waiting for its permit.
    Entering,
    /// In a block, holding its permit.
    Entered(Py<PyPermit>),
}

/// `gov.reserve(...)`: waits for a permit on entering the block, cancels it
/// if the block raises, and settles it as estimated if the block left it
/// pending. One reservation serves one block at a time.
#[pyclass(name = "Reservation", module = "llmgov._llmgov")]
pub struct Reservation {
    gov: Py<PyGovernor>,
    request: Request,
    timeout: Option<Duration>,
    entry: Entry,
}

impl Reservation {
    pub fn new(gov: Py<PyGovernor>, request: Request, timeout: Option<Duration>) -> Self {
        Reservation { gov, request, timeout, entry: Entry::Free }
    }

    fn leave(&mut self, py: Python<'_>, exc_type: &Bound<'_, PyAny>) -> PyResult<bool> {
        // A block still waiting to enter (in another task) keeps its mark.
        if let Entry::Entered(_) = self.entry {
            if let Entry::Entered(permit) = std::mem::replace(&mut self.entry, Entry::Free) {
                permit.bind(py).get().leave(py, exc_type)?;
            }
        }
        Ok(false)
    }

    /// Marks it entering, before the wait, or refuses a second entry while
    /// the first one waits for its permit or holds it: both would enter,
    /// and the first permit would be forgotten, pending until its TTL.
    fn start_entering(&mut self, py: Python<'_>) -> PyResult<()> {
        if let Entry::Free = self.entry {
            self.entry = Entry::Entering;
            return Ok(());
        }
        let reason = "is already entered, or waiting to enter, by another block; \
                      leave that block before entering it again, or make one reservation per block";
        Err(errors::invalid_text(py, "reservation", "entered", reason.to_owned()))
    }

    /// The wait ended: entered with `permit`, or free again if it failed.
    fn finish_entering(&mut self, permit: Option<Py<PyPermit>>) {
        self.entry = match permit {
            Some(permit) => Entry::Entered(permit),
            None => Entry::Free,
        };
    }
}

#[pymethods]
impl Reservation {
    fn __enter__(slf: &Bound<'_, Self>) -> PyResult<Py<PyPermit>> {
        let py = slf.py();
        // Not borrowed while waiting: another thread entering meanwhile
        // must find it entering, not borrowed.
        let (gov, request, timeout) = {
            let mut this = slf.borrow_mut();
            this.start_entering(py)?;
            (this.gov.clone_ref(py), this.request, this.timeout)
        };
        let permit = acquire_blocking(gov.bind(py), request, timeout).and_then(|permit| Py::new(py, permit));
        slf.borrow_mut().finish_entering(permit.as_ref().ok().map(|permit| permit.clone_ref(py)));
        permit
    }

    fn __exit__(
        &mut self,
        py: Python<'_>,
        exc_type: &Bound<'_, PyAny>,
        _exc: &Bound<'_, PyAny>,
        _tb: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        self.leave(py, exc_type)
    }

    /// The entry as a coroutine (`llmgov._reserve.enter`) that marks the
    /// reservation entering only once it runs: one created and never
    /// awaited leaves it free, and queues nothing.
    fn __aenter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        slf.py().import("llmgov._reserve")?.call_method1("enter", (slf,))
    }

    /// Marks it entering and starts the wait (called by
    /// `llmgov._reserve.enter` when it runs).
    fn _begin<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, Acquiring>> {
        let py = slf.py();
        let (gov, request) = {
            let mut this = slf.borrow_mut();
            this.start_entering(py)?;
            (this.gov.clone_ref(py), this.request)
        };
        let waiting = acquire_async(gov.bind(py), request);
        if waiting.is_err() {
            slf.borrow_mut().finish_entering(None);
        }
        waiting
    }

    /// Records the permit `async with` entered with, or None if its wait
    /// failed (called by `llmgov._reserve.enter`).
    fn _entered(&mut self, permit: Option<Py<PyPermit>>) {
        self.finish_entering(permit);
    }

    fn __aexit__(
        &mut self,
        py: Python<'_>,
        exc_type: &Bound<'_, PyAny>,
        _exc: &Bound<'_, PyAny>,
        _tb: &Bound<'_, PyAny>,
    ) -> PyResult<Ready> {
        let suppress = self.leave(py, exc_type)?;
        Ok(Ready::of(suppress.into_pyobject(py)?.to_owned().into_any().unbind()))
    }
}

/// The keyword arguments every waiting call takes, checked.
#[allow(clippy::too_many_arguments)]
pub fn request_of(
    gov: &Bound<'_, PyGovernor>,
    paths: &Bound<'_, PyAny>,
    args: &RequestArgs<'_, '_>,
    priority: Option<&Bound<'_, PyAny>>,
    deadline_ms: Option<&Bound<'_, PyAny>>,
    function: &str,
    extra: Option<&Bound<'_, PyDict>>,
) -> PyResult<Request> {
    no_unknown(function, extra)?;
    let py = gov.py();
    let this = gov.get();
    let route = this.resolve(py, paths)?;
    with_waiting(args.request(py, &this.gov, route)?, priority, deadline_ms)
}
