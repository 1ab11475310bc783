//! `llmgov.redis.RedisPermit`: a reservation on local and shared scopes,
//! reconciled once.

use llmgov::Usage;
use llmgov_redis::SharedPermit;
use parking_lot::{Mutex, MutexGuard};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::PyRedisGovernor;
use crate::answer::Answer;
use crate::args::{count, count_of, no_unknown};
use crate::convert::to_python;
use crate::errors::{invalid, IntoPyResult};
use crate::usage;

/// A granted reservation of a `RedisGovernor`. Settle it with the actual
/// usage (what was over-reserved goes back to Redis, what was under is
/// charged), or cancel it if the request was never sent.
///
/// Frozen, its state behind a lock, so that threads sharing it take turns
/// rather than meet PyO3's "Already borrowed".
#[pyclass(name = "RedisPermit", module = "llmgov._llmgov", frozen)]
pub struct PyRedisPermit {
    inner: Mutex<Inner>,
    gov: Py<PyRedisGovernor>,
}

struct Inner {
    permit: SharedPermit,
    /// The estimate (its output raised to what streamed) until reconciled,
    /// then what was settled (zero if cancelled).
    charged: Usage,
    /// Output reported by `add_output`.
    streamed: u64,
    state: &'static str,
}

impl PyRedisPermit {
    pub fn new(permit: SharedPermit, estimate: Usage, gov: Py<PyRedisGovernor>) -> Self {
        PyRedisPermit { inner: Mutex::new(Inner { permit, charged: estimate, streamed: 0, state: "pending" }), gov }
    }

    /// The state, locked. A thread finding it locked waits with the GIL
    /// released: the holder may be waiting for the GIL to come back from
    /// Redis, and would otherwise wait for this thread forever.
    fn lock(&self, py: Python<'_>) -> MutexGuard<'_, Inner> {
        loop {
            if let Some(inner) = self.inner.try_lock() {
                return inner;
            }
            // A guard cannot leave the detached closure (it is not Send).
            py.detach(|| drop(self.inner.lock()));
        }
    }

    /// Settles (`Some`) or cancels (`None`). The lock is kept while Redis is
    /// called with the GIL released: reconciling takes the permit itself
    /// (`&mut`), and a second call must find it reconciled, not race it.
    /// That holds no one up on the GIL: waiters for the lock release it.
    fn finish(&self, py: Python<'_>, actual: Option<Usage>) -> PyResult<()> {
        let gov = self.gov.bind(py).get();
        let mut inner = self.lock(py);
        let permit = &mut inner.permit;
        match actual {
            Some(actual) => py.detach(|| gov.gov.settle(permit, actual)),
            None => py.detach(|| gov.gov.cancel(permit)),
        }
        .py_err()?;
        inner.charged = actual.unwrap_or_default();
        inner.state = if actual.is_some() { "settled" } else { "cancelled" };
        Ok(())
    }
}

#[pymethods]
impl PyRedisPermit {
    /// Reconciles with actual usage: token counts (`settle(1180, 212)` or by
    /// keyword), or an SDK usage object or dict (`settle(usage)`, as the
    /// first argument or `usage=`), as the local `Permit.settle` takes them.
    /// A count not given keeps what was reserved for it, so `settle()`
    /// settles as estimated.
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
        no_unknown("RedisPermit.settle", extra)?;
        let (input_tokens, usage) = usage::first_is_usage(input_tokens, usage);
        // Everything is read from Python (a usage object's attributes may
        // run Python code) before the lock is taken.
        let actual = match usage.filter(|u| !u.is_none()) {
            Some(given) => {
                if input_tokens.is_some() || output_tokens.is_some() || cached_input_tokens.is_some() {
                    return Err(invalid("usage", given, "give either a usage object or token counts, not both"));
                }
                Some(usage::from_python(given)?)
            }
            None => None,
        };
        let actual = match actual {
            Some(actual) => actual,
            None => {
                let input = count("input_tokens", input_tokens)?;
                let output = count("output_tokens", output_tokens)?;
                let cached = count("cached_input_tokens", cached_input_tokens)?;
                // The estimate, read now: once reconciled, the settle below
                // refuses whatever these counts say.
                let estimate = self.lock(py).charged;
                let input = input.unwrap_or(estimate.input_tokens);
                Usage {
                    input_tokens: input,
                    output_tokens: output.unwrap_or(estimate.output_tokens),
                    cached_input_tokens: cached.unwrap_or(estimate.cached_input_tokens.min(input)),
                }
            }
        };
        self.finish(py, Some(actual))
    }

    /// Feeds the provider's answer back into the local scopes of the route
    /// (a 429's `retry-after` holds them; AIMD and the breaker learn) and
    /// returns its classification; a 429, or a circuit breaker the answer
    /// opens, also holds the route's shared provider scopes in Redis, for
    /// every process.
    /// Takes what `Permit.report` takes: `(status, headers, body)`, an
    /// `httpx.Response`, or an SDK `APIStatusError`.
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
        let Answer { status, headers, body } = Answer::of(py, "RedisPermit.report", status, headers, body, extra)?;
        let target = self.lock(py).permit.feedback_target();
        // Not locked: the local governor's event hook is Python code.
        let gov = &self.gov.bind(py).get().gov;
        let classification = gov.report_local(&target, status, &headers, &body).py_err()?;
        py.detach(|| gov.hold_providers(&target, &classification));
        to_python(py, &classification)
    }

    /// Charges `tokens` more streamed output as it arrives, on the route's
    /// local scopes (beyond their reservation only); the shared scopes
    /// reserved `max_output_tokens`, and are charged any more at settle.
    /// No Redis call.
    #[pyo3(signature = (tokens, **extra), text_signature = "($self, tokens)")]
    fn add_output(&self, py: Python<'_>, tokens: &Bound<'_, PyAny>, extra: Option<&Bound<'_, PyDict>>) -> PyResult<()> {
        no_unknown("RedisPermit.add_output", extra)?;
        let tokens = count_of("tokens", tokens)?;
        let gov = &self.gov.bind(py).get().gov;
        let mut inner = self.lock(py);
        gov.add_output(&mut inner.permit, tokens).py_err()?;
        inner.streamed += tokens;
        inner.charged.output_tokens = inner.charged.output_tokens.max(inner.streamed);
        Ok(())
    }

    /// Gives the whole reservation back: the request was never sent.
    fn cancel(&self, py: Python<'_>) -> PyResult<()> {
        self.finish(py, None)
    }

    /// `pending`, `settled` or `cancelled`.
    #[getter]
    fn state(&self, py: Python<'_>) -> &'static str {
        self.lock(py).state
    }

    /// What is charged: the estimate until settled, then the actual usage
    /// (`input_tokens`, `cached_input_tokens`, `output_tokens`).
    #[getter]
    fn charged<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let charged = self.lock(py).charged;
        to_python(py, &charged)
    }

    /// Whether the shared scopes were served from the safe local share
    /// because Redis was unreachable.
    #[getter]
    #[allow(clippy::wrong_self_convention)] // a property, named as `SharedPermit::from_fallback`
    fn from_fallback(&self, py: Python<'_>) -> bool {
        self.lock(py).permit.from_fallback()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Leaving a `with` block: an exception cancels a pending permit;
    /// otherwise a pending permit is settled as estimated.
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: &Bound<'_, PyAny>,
        _exc: &Bound<'_, PyAny>,
        _tb: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let (state, estimate) = {
            let inner = self.lock(py);
            (inner.state, inner.charged)
        };
        if state == "pending" {
            // Another thread may reconcile it in between: then this one
            // raises AlreadyReconciled, as a second settle does.
            self.finish(py, exc_type.is_none().then_some(estimate))?;
        }
        Ok(false)
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let inner = self.lock(py);
        let c = inner.charged;
        format!(
            "RedisPermit(state={:?}, input_tokens={}, output_tokens={}, from_fallback={})",
            inner.state,
            c.input_tokens,
            c.output_tokens,
            inner.permit.from_fallback()
        )
    }
}
