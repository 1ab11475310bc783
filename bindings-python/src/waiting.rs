//! Waiting for admission: `await gov.acquire(...)` (an asyncio future the
//! event loop resolves itself, see `wake.rs`), `gov.acquire_blocking(...)`
//! (the GIL released while the thread is parked), and `gov.reserve(...)`, a
//! context manager for `with` and `async with` that settles or cancels on
//! exit.

use std::time::Duration;

use llmgov::Request;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::args::{self, no_unknown};
use crate::errors::{self, invalid, IntoPyResult};
use crate::governor::PyGovernor;
use crate::permit::{PyPermit, Ready};
use crate::request::RequestArgs;

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

/// Parks the thread, the GIL released, until the permit or a refusal.
pub fn acquire_blocking(
    gov: &Bound<'_, PyGovernor>,
    request: Request,
    timeout: Option<Duration>,
) -> PyResult<PyPermit> {
    let core = gov.get().gov.clone();
    let permit = gov.py().detach(move || core.acquire_blocking(&request, timeout)).py_err()?;
    Ok(PyPermit::new(permit, gov.clone().unbind()))
}

/// `gov.reserve(...)`: waits for a permit on entering the block, cancels it
/// if the block raises, and settles it as estimated if the block left it
/// pending.
#[pyclass(name = "Reservation", module = "llmgov._llmgov")]
pub struct Reservation {
    gov: Py<PyGovernor>,
    request: Request,
    timeout: Option<Duration>,
    permit: Option<Py<PyPermit>>,
}

impl Reservation {
    pub fn new(gov: Py<PyGovernor>, request: Request, timeout: Option<Duration>) -> Self {
        Reservation { gov, request, timeout, permit: None }
    }

    fn leave(&mut self, py: Python<'_>, exc_type: &Bound<'_, PyAny>) -> PyResult<bool> {
        if let Some(permit) = self.permit.take() {
            permit.bind(py).borrow_mut().leave(py, exc_type)?;
        }
        Ok(false)
    }

    /// Refuses a second entry while the first one's permit is held: its
    /// permit would be forgotten, pending until its TTL.
    fn not_entered(&self, py: Python<'_>) -> PyResult<()> {
        if self.permit.is_none() {
            return Ok(());
        }
        let reason = "is already entered and holds a permit; leave the block before entering it again";
        Err(errors::invalid_text(py, "reservation", "entered", reason.to_owned()))
    }
}

#[pymethods]
impl Reservation {
    fn __enter__(&mut self, py: Python<'_>) -> PyResult<Py<PyPermit>> {
        self.not_entered(py)?;
        let permit = Py::new(py, acquire_blocking(self.gov.bind(py), self.request, self.timeout)?)?;
        self.permit = Some(permit.clone_ref(py));
        Ok(permit)
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

    fn __aenter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let (gov, request) = {
            let this = slf.borrow();
            this.not_entered(py)?;
            (this.gov.clone_ref(py), this.request)
        };
        let waiting = acquire_async(gov.bind(py), request)?;
        py.import("llmgov._reserve")?.call_method1("enter", (slf, waiting))
    }

    /// Records the permit `async with` entered with (called by `llmgov._reserve.enter`).
    fn _entered(&mut self, permit: Py<PyPermit>) {
        self.permit = Some(permit);
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
