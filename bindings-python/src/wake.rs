//! `await gov.acquire(...)` and `await gov.acquire_profile(...)` on asyncio
//! with no foreign thread ever taking the GIL.
//!
//! The core's waiting future needs no runtime: its waker is called by the
//! governor's timer thread or by whoever settles or cancels. Here the waker
//! only notes which task woke and writes a byte to a socket; the event
//! loop watches the other end (`loop.add_reader`) and polls the woken
//! futures on its own thread, where it resolves their asyncio futures. So
//! the interpreter can finalize at any moment: no thread outside Python
//! holds, or waits for, the GIL. A request by profile finishes where it is
//! polled, on the loop's thread: its budget thresholds are checked again
//! once its deployment admits it (see `routing::ProfileAcquire`).
//!
//! The caller awaits an [`Acquiring`], not the asyncio future itself: a
//! task cancelled after the loop resolved its future but before the task
//! resumed never receives the permit, and only the awaitable sees that.

use std::collections::HashMap;
use std::future::Future;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Wake, Waker};

use llmgov::{Acquire, Permit, Routed};
use pyo3::exceptions::{PyRuntimeError, PyStopIteration};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyTuple;
use pyo3::{intern, PyTraverseError, PyVisit};

use crate::errors::to_py;
use crate::governor::PyGovernor;
use crate::permit::PyPermit;
use crate::routing::ProfileAcquire;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the wakers share with the loop: the tasks woken since the loop last
/// looked, and the socket that tells it to look.
struct Bell {
    woken: Mutex<Vec<u64>>,
    ringer: UnixStream,
}

impl Bell {
    /// Notes that task `id` woke; the first since the loop last looked
    /// writes the byte that wakes the loop. (A full socket already holds
    /// a byte the loop has yet to read, so a failed write loses nothing.)
    fn ring(&self, id: u64) {
        let mut woken = lock(&self.woken);
        let first = woken.is_empty();
        woken.push(id);
        drop(woken);
        if first {
            let _ = (&self.ringer).write(&[1]);
        }
    }
}

/// The waker of one task.
struct TaskWaker {
    id: u64,
    bell: Arc<Bell>,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.bell.ring(self.id);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.bell.ring(self.id);
    }
}

/// What a task waits for.
pub enum Waiting {
    /// A permit on a route (`acquire`).
    Route(Acquire),
    /// A permit through a profile (`acquire_profile`), which says where it went.
    Profile(ProfileAcquire),
}

/// What a task was granted.
enum Granted {
    Route(Permit),
    Profile(Routed),
}

impl Granted {
    fn permit(&mut self) -> &mut Permit {
        match self {
            Granted::Route(permit) => permit,
            Granted::Profile(routed) => &mut routed.permit,
        }
    }

    fn into_py(self, gov: Py<PyGovernor>) -> PyPermit {
        match self {
            Granted::Route(permit) => PyPermit::new(permit, gov),
            Granted::Profile(routed) => PyPermit::routed(routed, gov),
        }
    }
}

impl Waiting {
    /// Whether it is still queued, unanswered (else polling it is ready).
    fn is_waiting(&self) -> bool {
        match self {
            Waiting::Route(acquire) => acquire.is_waiting(),
            Waiting::Profile(acquire) => acquire.is_waiting(),
        }
    }

    fn poll(&mut self, context: &mut Context<'_>) -> Poll<llmgov::Result<Granted>> {
        match self {
            Waiting::Route(acquire) => Pin::new(acquire).poll(context).map(|r| r.map(Granted::Route)),
            Waiting::Profile(acquire) => Pin::new(acquire).poll(context).map(|r| r.map(Granted::Profile)),
        }
    }
}

/// A waiting acquire and the asyncio future it resolves.
struct Task {
    waiting: Waiting,
    waker: Waker,
    future: Py<PyAny>,
    gov: Py<PyGovernor>,
}

/// One event loop's waiting acquires (`llmgov._wake.driver(loop)` makes one
/// per loop and registers `drain` as the reader of `fileno()`).
#[pyclass(name = "_Driver", module = "llmgov._llmgov", frozen)]
pub struct Driver {
    bell: Arc<Bell>,
    listener: UnixStream,
    tasks: Mutex<HashMap<u64, Task>>,
    next: Mutex<u64>,
}

impl Driver {
    /// Polls one task; true when it is finished (resolved or dropped).
    fn poll(py: Python<'_>, task: &mut Task) -> bool {
        let mut context = Context::from_waker(&task.waker);
        let Poll::Ready(outcome) = task.waiting.poll(&mut context) else {
            return false;
        };
        resolve(py, task.future.bind(py), &task.gov, outcome);
        true
    }
}

/// Hands the outcome to the asyncio future, on the loop's thread. A permit
/// granted after the caller gave up (its future cancelled) is cancelled
/// here; one granted just before, while the caller's task had yet to
/// resume, is cancelled by the caller's [`Acquiring`]. So nothing leaks.
fn resolve(py: Python<'_>, future: &Bound<'_, PyAny>, gov: &Py<PyGovernor>, outcome: llmgov::Result<Granted>) {
    let pending = future.call_method0("done").and_then(|d| d.is_truthy()).map(|done| !done).unwrap_or(false);
    let delivered = match outcome {
        Ok(mut granted) if !pending => {
            let _ = gov.bind(py).get().gov.cancel(granted.permit());
            Ok(())
        }
        Ok(granted) => Py::new(py, granted.into_py(gov.clone_ref(py)))
            .and_then(|permit| future.call_method1("set_result", (permit,)).map(drop)),
        Err(_) if !pending => Ok(()),
        Err(error) => future.call_method1("set_exception", (to_py(error).value(py),)).map(drop),
    };
    if let Err(error) = delivered {
        error.write_unraisable(py, Some(future));
    }
}

#[pymethods]
impl Driver {
    #[new]
    fn new() -> PyResult<Self> {
        let (ringer, listener) = UnixStream::pair()?;
        ringer.set_nonblocking(true)?;
        listener.set_nonblocking(true)?;
        let bell = Arc::new(Bell { woken: Mutex::new(Vec::new()), ringer });
        Ok(Driver { bell, listener, tasks: Mutex::new(HashMap::new()), next: Mutex::new(0) })
    }

    /// The futures and governors its tasks hold, for the garbage collector
    /// (a task's future holds the callback that holds this driver).
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        for task in lock(&self.tasks).values() {
            visit.call(&task.future)?;
            visit.call(&task.gov)?;
        }
        Ok(())
    }

    fn __clear__(&self) {
        let tasks = std::mem::take(&mut *lock(&self.tasks));
        drop(tasks);
    }

    /// The socket the loop watches.
    fn fileno(&self) -> i32 {
        self.listener.as_raw_fd()
    }

    /// Reads the bell and polls the tasks it woke (the loop's reader callback).
    fn drain(&self, py: Python<'_>) {
        let mut bytes = [0u8; 64];
        while let Ok(n) = (&self.listener).read(&mut bytes) {
            if n == 0 {
                break;
            }
        }
        let woken = std::mem::take(&mut *lock(&self.bell.woken));
        for id in woken {
            let Some(mut task) = lock(&self.tasks).remove(&id) else { continue };
            // Polled without the lock: resolving runs Python callbacks.
            if !Self::poll(py, &mut task) {
                lock(&self.tasks).insert(id, task);
            }
        }
    }
}

impl Driver {
    /// Starts `waiting` for `future`, resolved on the loop's thread when
    /// woken. Returns the task's id (for [`Driver::forget`]).
    pub fn start(&self, waiting: Waiting, future: Py<PyAny>, gov: Py<PyGovernor>) -> u64 {
        let id = {
            let mut next = lock(&self.next);
            *next += 1;
            *next
        };
        let waker = Waker::from(Arc::new(TaskWaker { id, bell: self.bell.clone() }));
        lock(&self.tasks).insert(id, Task { waiting, waker, future, gov });
        // First polled by the loop, which gives the queue the task's waker.
        self.bell.ring(id);
        id
    }

    /// Drops task `id` if it still waits (its future was cancelled): the
    /// request leaves the queue. One admitted before the loop polled it is
    /// polled now, so that its permit is cancelled rather than left to
    /// expire.
    pub fn forget(&self, py: Python<'_>, id: u64) {
        let Some(mut task) = lock(&self.tasks).remove(&id) else { return };
        if !task.waiting.is_waiting() {
            Self::poll(py, &mut task);
        }
    }
}

/// The loop's driver, made and registered on first use (`llmgov._wake`).
pub fn driver<'py>(py: Python<'py>, event_loop: &Bound<'py, PyAny>) -> PyResult<Bound<'py, Driver>> {
    static DRIVER: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    Ok(DRIVER.import(py, "llmgov._wake", "driver")?.call1((event_loop,))?.cast_into::<Driver>()?)
}

/// Forgets a task when its asyncio future is done (a `done_callback`).
#[pyclass(name = "_Forget", module = "llmgov._llmgov", frozen)]
pub struct Forget {
    driver: Py<Driver>,
    id: u64,
}

#[pymethods]
impl Forget {
    fn __call__(&self, py: Python<'_>, _future: &Bound<'_, PyAny>) {
        self.driver.bind(py).get().forget(py, self.id);
    }
}

/// `await gov.acquire(...)`: an awaitable of the running loop, resolved to
/// a `Permit` or the mapped refusal.
pub fn acquire_async<'py>(gov: &Bound<'py, PyGovernor>, request: llmgov::Request) -> PyResult<Bound<'py, Acquiring>> {
    wait_async(gov, |core| Waiting::Route(core.acquire(&request)))
}

/// An awaitable of the running loop (an [`Acquiring`] over an asyncio
/// future), resolved to a `Permit` or the mapped refusal by what `start`
/// begins waiting for; cancelling the awaiting task leaves the queue.
/// `start` runs once the future exists, so that nothing admitted is
/// dropped when there is no running loop.
pub fn wait_async<'py>(
    gov: &Bound<'py, PyGovernor>,
    start: impl FnOnce(&llmgov::Governor) -> Waiting,
) -> PyResult<Bound<'py, Acquiring>> {
    let py = gov.py();
    // Looked up once: an import on each call was a fifth of an acquire.
    static GET_RUNNING_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let event_loop = GET_RUNNING_LOOP.import(py, "asyncio", "get_running_loop")?.call0()?;
    let future = event_loop.call_method0(intern!(py, "create_future"))?;
    let mut waiting = start(&gov.get().gov);
    if !waiting.is_waiting() {
        // Answered at once: resolved here, and the `await` returns without
        // yielding, as an `asyncio.Semaphore` with room does. Through the
        // loop's driver, its socket round trip took 9 of the 11 µs.
        if let Poll::Ready(outcome) = waiting.poll(&mut Context::from_waker(Waker::noop())) {
            resolve(py, &future, &gov.clone().unbind(), outcome);
            return Bound::new(py, Acquiring::new(future.unbind()));
        }
    }
    let driver = driver(py, &event_loop)?;
    let id = driver.get().start(waiting, future.clone().unbind(), gov.clone().unbind());
    let forget = Forget { driver: driver.unbind(), id };
    future.call_method1("add_done_callback", (forget,))?;
    Bound::new(py, Acquiring::new(future.unbind()))
}

/// What `gov.acquire(...)`, `gov.acquire_profile(...)` and `async with
/// gov.reserve(...)` await: the driver's asyncio future, awaited as asyncio
/// awaits a future, handing its permit to the caller.
///
/// A task cancelled after the loop resolved the future but before the task
/// resumed (`asyncio.wait_for`, `asyncio.timeout` or a `TaskGroup` firing
/// in the loop iteration that granted the permit) never receives the
/// permit: `Task.cancel()` cannot cancel a done future (the driver, and
/// the future's `Forget`, are through with it), so the task is resumed
/// with the `CancelledError` thrown in here instead. So whatever is thrown in, or a `close()`, gives back what
/// the caller will never see: a permit the future holds is cancelled (as
/// `asyncio.Lock.acquire` releases a lock granted to a waiter cancelled
/// meanwhile), a future still pending is cancelled (the request leaves the
/// queue). One dropped before its outcome was taken gives it back the same
/// way.
#[pyclass(name = "_Acquiring", module = "llmgov._llmgov")]
pub struct Acquiring {
    /// The driver's future (None only once the garbage collector cleared it).
    future: Option<Py<PyAny>>,
    /// Whether its outcome went to the caller, or was given back.
    finished: bool,
}

impl Acquiring {
    fn new(future: Py<PyAny>) -> Self {
        Acquiring { future: Some(future), finished: false }
    }

    /// Gives back what the caller stopped waiting for (see [`Acquiring`]).
    /// What fails here has no caller left to reach: it goes to
    /// `sys.unraisablehook`.
    fn give_back(&mut self, py: Python<'_>) {
        let Some(future) = self.future.as_ref().filter(|_| !self.finished) else { return };
        self.finished = true;
        let future = future.bind(py);
        let given_back = (|| -> PyResult<()> {
            if !future.call_method0(intern!(py, "done"))?.is_truthy()? {
                future.call_method0(intern!(py, "cancel"))?;
                return Ok(());
            }
            if future.call_method0(intern!(py, "cancelled"))?.is_truthy()?
                || !future.call_method0(intern!(py, "exception"))?.is_none()
            {
                return Ok(());
            }
            let permit = future.call_method0(intern!(py, "result"))?;
            permit.cast::<PyPermit>()?.get().give_back(py);
            Ok(())
        })();
        if let Err(error) = given_back {
            error.write_unraisable(py, Some(future));
        }
    }

    fn future<'py>(&self, py: Python<'py>) -> PyResult<&Bound<'py, PyAny>> {
        match &self.future {
            Some(future) => Ok(future.bind(py)),
            None => Err(PyRuntimeError::new_err("the acquire was cleared by the garbage collector")),
        }
    }
}

#[pymethods]
impl Acquiring {
    fn __await__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// Yields the future to the task until it is done (as asyncio's own
    /// future iterator does), then returns its permit or raises its
    /// refusal.
    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        if self.finished {
            return Err(PyRuntimeError::new_err("cannot reuse an acquire already awaited"));
        }
        let future = self.future(py)?.clone();
        if !future.call_method0(intern!(py, "done"))?.is_truthy()? {
            future.setattr(intern!(py, "_asyncio_future_blocking"), true)?;
            return Ok(future);
        }
        self.finished = true;
        let permit = future.call_method0(intern!(py, "result"))?;
        Err(PyStopIteration::new_err((permit.unbind(),)))
    }

    fn send<'py>(&mut self, py: Python<'py>, _value: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.__next__(py)
    }

    /// The task stopped waiting (a `CancelledError` thrown in): gives back
    /// what the future holds, then raises what was thrown, in whichever of
    /// `throw`'s forms it came (asyncio's own future iterator raises it).
    #[pyo3(signature = (*thrown))]
    fn throw<'py>(&mut self, py: Python<'py>, thrown: &Bound<'py, PyTuple>) -> PyResult<Bound<'py, PyAny>> {
        self.give_back(py);
        let raiser = self.future(py)?.call_method0(intern!(py, "__await__"))?;
        raiser.call_method1(intern!(py, "throw"), thrown)
    }

    fn close(&mut self, py: Python<'_>) {
        self.give_back(py);
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        if let Some(future) = &self.future {
            visit.call(future)?;
        }
        Ok(())
    }

    fn __clear__(&mut self) {
        self.future = None;
    }
}

impl Drop for Acquiring {
    /// Never awaited to the end (dropped unawaited, say): the permit its
    /// future holds, or will hold, is given back. It may be dropped while an
    /// exception propagates (a frame that held it unwinding): that exception
    /// is set aside meanwhile, or the calls here would swallow it and the
    /// frame would return NULL with no exception set (a segfault in asyncio's
    /// task step).
    fn drop(&mut self) {
        if self.future.is_some() && !self.finished {
            Python::attach(|py| {
                let propagating = PyErr::take(py);
                self.give_back(py);
                if let Some(error) = propagating {
                    error.restore(py);
                }
            });
        }
    }
}
