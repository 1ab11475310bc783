//! `llmgov.Permit`: a granted reservation, reconciled once.

use std::sync::Arc;

use llmgov::{Permit, PermitState, Route, Routed, Usage};
use parking_lot::{Mutex, MutexGuard};
use pyo3::exceptions::PyStopIteration;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::answer::Answer;
use crate::args::{count, count_of, no_unknown};
use crate::convert::to_python;
use crate::errors::{invalid, IntoPyResult};
use crate::governor::PyGovernor;
use crate::usage;

/// A granted reservation. Settle it with actual usage, cancel it if the
/// request was never sent; left alone it expires after the permit TTL,
/// charged as estimated.
///
/// Frozen, the core permit behind a lock: threads sharing it take turns
/// rather than meet PyO3's "Already borrowed". The lock is never held while
/// Python code runs (arguments are converted first, and `report`, whose
/// event hook is Python, needs only the copies of route and grant time).
#[pyclass(name = "Permit", module = "llmgov._llmgov", frozen)]
pub struct PyPermit {
    held: Mutex<Held>,
    route: Route,
    acquired_at: u64,
    gov: Py<PyGovernor>,
    /// Where a request admitted through a profile went.
    choice: Option<Box<Choice>>,
}

/// The core permit, and what it was reconciled with.
struct Held {
    permit: Permit,
    /// The usage it was settled with (zero if cancelled): what `charged`
    /// shows once it is finished. The core permit keeps its estimate.
    settled: Option<Usage>,
}

impl Held {
    /// Settles it with `actual` and keeps that as what it was charged.
    fn settle(&mut self, gov: &llmgov::Governor, actual: Usage) -> llmgov::Result<()> {
        gov.settle(&mut self.permit, actual)?;
        self.settled = Some(actual);
        Ok(())
    }

    /// Cancels it: nothing is charged any more.
    fn cancel(&mut self, gov: &llmgov::Governor) -> llmgov::Result<()> {
        gov.cancel(&mut self.permit)?;
        self.settled = Some(Usage::default());
        Ok(())
    }

    /// What is charged: the settled usage once settled or cancelled, else
    /// the estimate raised by streamed output (pending, or expired and so
    /// charged as estimated).
    fn charged(&self) -> Usage {
        self.settled.unwrap_or_else(|| self.permit.charged())
    }
}

/// The profile and deployment a routed request was admitted on.
struct Choice {
    profile: Arc<str>,
    deployment: Arc<str>,
    fell_back: bool,
    degraded: bool,
}

impl PyPermit {
    pub fn new(permit: Permit, gov: Py<PyGovernor>) -> Self {
        Self::with_choice(permit, gov, None)
    }

    fn with_choice(permit: Permit, gov: Py<PyGovernor>, choice: Option<Box<Choice>>) -> Self {
        let (route, acquired_at) = (permit.route(), permit.acquired_at());
        PyPermit { held: Mutex::new(Held { permit, settled: None }), route, acquired_at, gov, choice }
    }

    /// The core permit, locked. A thread finding it locked waits with the
    /// GIL released: the holder may need the GIL to finish (to return to
    /// Python), and would otherwise wait for this thread forever. The
    /// uncontended path is one compare-and-swap.
    #[inline]
    fn lock(&self, py: Python<'_>) -> MutexGuard<'_, Held> {
        loop {
            if let Some(held) = self.held.try_lock() {
                return held;
            }
            // A guard cannot leave the detached closure (it is not Send):
            // wait for the lock there, then take it again holding the GIL.
            py.detach(|| drop(self.held.lock()));
        }
    }

    /// A permit admitted through a profile, with where it went.
    pub fn routed(routed: Routed, gov: Py<PyGovernor>) -> Self {
        let Routed { permit, profile, deployment, fell_back, degraded, .. } = routed;
        let choice = Choice { profile, deployment, fell_back, degraded };
        Self::with_choice(permit, gov, Some(Box::new(choice)))
    }

    fn settle_usage(&self, py: Python<'_>, held: &mut Held, usage: Usage) -> PyResult<()> {
        held.settle(&self.gov.bind(py).get().gov, usage).py_err()
    }

    /// Cancels it if it is still pending: a permit granted to a caller that
    /// never received it (see `wake::Acquiring`). Nothing to give back if it
    /// is finished or expired.
    pub fn give_back(&self, py: Python<'_>) {
        let _ = self.lock(py).cancel(&self.gov.bind(py).get().gov);
    }

    /// What leaving a `with` block does: an exception (`exc_type` not
    /// None) cancels a pending permit; otherwise a pending permit is
    /// settled as estimated. A permit found past its TTL is left expired:
    /// it was charged as estimated, as a settle would have, and raising
    /// PermitExpired here would replace the block's own exception.
    pub fn leave(&self, py: Python<'_>, exc_type: &Bound<'_, PyAny>) -> PyResult<()> {
        let mut held = self.lock(py);
        if held.permit.state() != PermitState::Pending {
            return Ok(());
        }
        let gov = &self.gov.bind(py).get().gov;
        let left = if exc_type.is_none() {
            let charged = held.permit.charged();
            held.settle(gov, charged)
        } else {
            held.cancel(gov)
        };
        match left {
            Err(llmgov::Error::PermitExpired) => Ok(()),
            other => other.py_err(),
        }
    }
}

#[pymethods]
impl PyPermit {
    /// Reconciles with actual usage: token counts (`settle(1180, 212)` or by
    /// keyword), or an SDK usage object or dict (`settle(usage)`, as the
    /// first argument or `usage=`). A count not given keeps what was
    /// reserved for it, so `settle(output_tokens=n)` keeps the input
    /// estimate and `settle()` settles as estimated.
    #[pyo3(signature = (input_tokens = None, output_tokens = None, *, cached_input_tokens = None, usage = None, **extra),
        text_signature = "($self, input_tokens=None, output_tokens=None, *, cached_input_tokens=None, usage=None)")]
    fn settle(
        &self,
        py: Python<'_>,
        input_tokens: Option<&Bound<'_, PyAny>>,
        output_tokens: Option<&Bound<'_, PyAny>>,
        cached_input_tokens: Option<&Bound<'_, PyAny>>,
        usage: Option<&Bound<'_, PyAny>>,
        extra: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        no_unknown("Permit.settle", extra)?;
        let (input_tokens, usage) = usage::first_is_usage(input_tokens, usage);
        // A usage object is read (its attributes may run Python code)
        // before the permit is locked; so are the counts.
        if let Some(given) = usage.filter(|u| !u.is_none()) {
            if input_tokens.is_some() || output_tokens.is_some() || cached_input_tokens.is_some() {
                let reason = "give either a usage object or token counts, not both";
                return Err(invalid("usage", given, reason));
            }
            let actual = usage::from_python(given)?;
            return self.settle_usage(py, &mut self.lock(py), actual);
        }
        let input = count("input_tokens", input_tokens)?;
        let output = count("output_tokens", output_tokens)?;
        let cached = count("cached_input_tokens", cached_input_tokens)?;
        let mut held = self.lock(py);
        let charged = held.permit.charged();
        let input = input.unwrap_or(charged.input_tokens);
        let actual = Usage {
            input_tokens: input,
            output_tokens: output.unwrap_or(charged.output_tokens),
            cached_input_tokens: cached.unwrap_or(charged.cached_input_tokens.min(input)),
        };
        self.settle_usage(py, &mut held, actual)
    }

    /// Refunds everything: the request was never sent.
    fn cancel(&self, py: Python<'_>) -> PyResult<()> {
        self.lock(py).cancel(&self.gov.bind(py).get().gov).py_err()
    }

    /// Charges `tokens` more streamed output (beyond the reservation only).
    #[pyo3(signature = (tokens, **extra), text_signature = "($self, tokens)")]
    fn add_output(&self, py: Python<'_>, tokens: &Bound<'_, PyAny>, extra: Option<&Bound<'_, PyDict>>) -> PyResult<()> {
        no_unknown("Permit.add_output", extra)?;
        let tokens = count_of("tokens", tokens)?;
        self.gov.bind(py).get().gov.add_output(&mut self.lock(py).permit, tokens).py_err()
    }

    /// Feeds the provider's answer back into the route's provider scopes
    /// and returns its classification. Takes `(status, headers, body)`, an
    /// `httpx.Response`, or an SDK `APIStatusError` (its `.response`), as
    /// `status` (by position or keyword).
    #[pyo3(signature = (status = None, headers = None, body = None, **extra),
        text_signature = "($self, status, headers=None, body=None)")]
    fn report<'py>(
        &self,
        py: Python<'py>,
        status: Option<&Bound<'py, PyAny>>,
        headers: Option<&Bound<'py, PyAny>>,
        body: Option<&Bound<'py, PyAny>>,
        extra: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let Answer { status, headers, body } = Answer::of(py, "Permit.report", status, headers, body, extra)?;
        // Not locked: the event hook this may call is Python code.
        let gov = &self.gov.bind(py).get().gov;
        let classification = gov.report_sent(self.route, self.acquired_at, status, &headers, &body).py_err()?;
        to_python(py, &classification)
    }

    /// `pending`, `settled`, `cancelled` or `expired`: expired from the
    /// moment the governor's clock reaches `expires_at_ms` unreconciled,
    /// when settling it would raise PermitExpired.
    #[getter]
    fn state(&self, py: Python<'_>) -> &'static str {
        let held = self.lock(py);
        match held.permit.state() {
            // As the core decides at settle: expired once `now >= expires_at`.
            PermitState::Pending if self.gov.bind(py).get().gov.clock().now() >= held.permit.expires_at() => "expired",
            PermitState::Pending => "pending",
            PermitState::Settled => "settled",
            PermitState::Cancelled => "cancelled",
            PermitState::Expired => "expired",
        }
    }

    /// What is charged so far: `input_tokens`, `cached_input_tokens`,
    /// `output_tokens`. The estimate (raised by streamed output) while
    /// pending or once expired; the settled usage once settled; zero once
    /// cancelled.
    #[getter]
    fn charged<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let charged = self.lock(py).charged();
        to_python(py, &charged)
    }

    /// The profile that admitted it (a fallback's or a cheaper one's, if
    /// it left the one asked for); None unless acquired by profile.
    #[getter]
    fn profile(&self) -> Option<&str> {
        self.choice.as_ref().map(|c| &*c.profile)
    }

    /// The deployment's scope path chosen by `try_acquire_profile`; None
    /// unless acquired by profile.
    #[getter]
    fn deployment(&self) -> Option<&str> {
        self.choice.as_ref().map(|c| &*c.deployment)
    }

    /// Whether a profile acquire left the profile asked for along its
    /// fallback chain.
    #[getter]
    fn fell_back(&self) -> bool {
        self.choice.as_ref().is_some_and(|c| c.fell_back)
    }

    /// Whether a profile acquire went to a cheaper profile because a cost
    /// budget passed the profile's `degrade_at` threshold.
    #[getter]
    fn degraded(&self) -> bool {
        self.choice.as_ref().is_some_and(|c| c.degraded)
    }

    /// When it expires unreconciled, on the governor's clock (ms).
    #[getter]
    fn expires_at_ms(&self, py: Python<'_>) -> f64 {
        self.lock(py).permit.expires_at() as f64 / 1e6
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Leaving the block: an exception cancels a pending permit (the
    /// request is taken as never sent); otherwise a permit still pending is
    /// settled as estimated, freeing its concurrency slot now rather than
    /// at expiry.
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: &Bound<'_, PyAny>,
        _exc: &Bound<'_, PyAny>,
        _tb: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        self.leave(py, exc_type)?;
        Ok(false)
    }

    fn __aenter__(slf: Py<Self>) -> Ready {
        Ready::of(slf.into_any())
    }

    fn __aexit__(
        &self,
        py: Python<'_>,
        exc_type: &Bound<'_, PyAny>,
        _exc: &Bound<'_, PyAny>,
        _tb: &Bound<'_, PyAny>,
    ) -> PyResult<Ready> {
        self.leave(py, exc_type)?;
        Ok(Ready::of(false.into_pyobject(py)?.to_owned().into_any().unbind()))
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let c = self.lock(py).charged();
        format!(
            "Permit(state={:?}, input_tokens={}, output_tokens={})",
            self.state(py),
            c.input_tokens,
            c.output_tokens
        )
    }
}

/// An awaitable that is already done: what `async with permit` awaits.
#[pyclass(module = "llmgov._llmgov")]
pub struct Ready(Option<Py<PyAny>>);

impl Ready {
    /// Resolves to `value`.
    pub fn of(value: Py<PyAny>) -> Self {
        Ready(Some(value))
    }
}

#[pymethods]
impl Ready {
    fn __await__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let value = self.0.take().unwrap_or_else(|| py.None());
        Err(PyStopIteration::new_err((value,)))
    }
}
