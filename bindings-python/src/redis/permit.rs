//! `llmgov.redis.RedisPermit`: a reservation on local and shared scopes,
//! reconciled once.

use llmgov::Usage;
use llmgov_redis::SharedPermit;
use pyo3::prelude::*;

use super::PyRedisGovernor;
use crate::args::count;
use crate::convert::to_python;
use crate::errors::{invalid, IntoPyResult};
use crate::usage;

/// A granted reservation of a `RedisGovernor`. Settle it with the actual
/// usage (what was over-reserved goes back to Redis, what was under is
/// charged), or cancel it if the request was never sent.
#[pyclass(name = "RedisPermit", module = "llmgov._llmgov")]
pub struct PyRedisPermit {
    permit: SharedPermit,
    gov: Py<PyRedisGovernor>,
    /// The estimate until reconciled, then what was settled (zero if cancelled).
    charged: Usage,
    state: &'static str,
}

impl PyRedisPermit {
    pub fn new(permit: SharedPermit, estimate: Usage, gov: Py<PyRedisGovernor>) -> Self {
        PyRedisPermit { permit, gov, charged: estimate, state: "pending" }
    }

    fn settle_usage(&mut self, py: Python<'_>, actual: Usage) -> PyResult<()> {
        let gov = self.gov.bind(py).get();
        let permit = &mut self.permit;
        py.detach(|| gov.gov.settle(permit, actual)).py_err()?;
        self.charged = actual;
        self.state = "settled";
        Ok(())
    }

    fn cancel_now(&mut self, py: Python<'_>) -> PyResult<()> {
        let gov = self.gov.bind(py).get();
        let permit = &mut self.permit;
        py.detach(|| gov.gov.cancel(permit)).py_err()?;
        self.charged = Usage::default();
        self.state = "cancelled";
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
    #[pyo3(signature = (input_tokens = None, output_tokens = None, *, cached_input_tokens = None, usage = None))]
    fn settle(
        &mut self,
        py: Python<'_>,
        input_tokens: Option<&Bound<'_, PyAny>>,
        output_tokens: Option<&Bound<'_, PyAny>>,
        cached_input_tokens: Option<&Bound<'_, PyAny>>,
        usage: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let (input_tokens, usage) = usage::first_is_usage(input_tokens, usage);
        let actual = match usage.filter(|u| !u.is_none()) {
            Some(given) => {
                if input_tokens.is_some() || output_tokens.is_some() || cached_input_tokens.is_some() {
                    return Err(invalid("usage", given, "give either a usage object or token counts, not both"));
                }
                usage::from_python(given)?
            }
            None => {
                let estimate = self.charged;
                let input = count("input_tokens", input_tokens)?.unwrap_or(estimate.input_tokens);
                Usage {
                    input_tokens: input,
                    output_tokens: count("output_tokens", output_tokens)?.unwrap_or(estimate.output_tokens),
                    cached_input_tokens: count("cached_input_tokens", cached_input_tokens)?
                        .unwrap_or(estimate.cached_input_tokens.min(input)),
                }
            }
        };
        self.settle_usage(py, actual)
    }

    /// Gives the whole reservation back: the request was never sent.
    fn cancel(&mut self, py: Python<'_>) -> PyResult<()> {
        self.cancel_now(py)
    }

    /// `pending`, `settled` or `cancelled`.
    #[getter]
    fn state(&self) -> &'static str {
        self.state
    }

    /// What is charged: the estimate until settled, then the actual usage
    /// (`input_tokens`, `cached_input_tokens`, `output_tokens`).
    #[getter]
    fn charged<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_python(py, &self.charged)
    }

    /// Whether the shared scopes were served from the safe local share
    /// because Redis was unreachable.
    #[getter]
    #[allow(clippy::wrong_self_convention)] // a property, named as `SharedPermit::from_fallback`
    fn from_fallback(&self) -> bool {
        self.permit.from_fallback()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Leaving a `with` block: an exception cancels a pending permit;
    /// otherwise a pending permit is settled as estimated.
    fn __exit__(
        &mut self,
        py: Python<'_>,
        exc_type: &Bound<'_, PyAny>,
        _exc: &Bound<'_, PyAny>,
        _tb: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        if self.state == "pending" {
            if exc_type.is_none() {
                self.settle_usage(py, self.charged)?;
            } else {
                self.cancel_now(py)?;
            }
        }
        Ok(false)
    }

    fn __repr__(&self) -> String {
        let c = self.charged;
        format!(
            "RedisPermit(state={:?}, input_tokens={}, output_tokens={}, from_fallback={})",
            self.state,
            c.input_tokens,
            c.output_tokens,
            self.permit.from_fallback()
        )
    }
}
