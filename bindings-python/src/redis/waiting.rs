//! Waiting on a `RedisGovernor`: `acquire_blocking` sleeps between tries
//! with the GIL released, `await acquire` sleeps on the event loop
//! (`llmgov._redis_wait`). Both pace their tries with the backend's `Wait`.

use std::time::Duration;

use llmgov::Usage;
use llmgov_redis::Wait;
use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;

use super::{PyRedisGovernor, PyRedisPermit, PyRedisRoute};
use crate::errors::IntoPyResult;
use crate::request::RequestArgs;
use crate::waiting::{deadline, timeout, SIGNAL_CHECK};

/// The sooner of `deadline_ms` and `timeout` (seconds); `None` if neither.
pub fn time_limit(
    deadline_ms: Option<&Bound<'_, PyAny>>,
    timeout_s: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<Duration>> {
    Ok(match (deadline(deadline_ms)?, timeout(timeout_s)?) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    })
}

/// One waiting acquire: its route, its estimate and the pacing of its tries.
#[pyclass(name = "_RedisAttempt", module = "llmgov._llmgov")]
pub struct RedisAttempt {
    gov: Py<PyRedisGovernor>,
    route: Py<PyRedisRoute>,
    estimate: Usage,
    wait: Wait,
}

/// What one try gives.
enum Step {
    Admitted(Box<PyRedisPermit>),
    Pause(Duration),
}

impl RedisAttempt {
    /// An attempt at `paths` starting now on the governor's clock.
    pub fn new(
        gov: &Bound<'_, PyRedisGovernor>,
        paths: &Bound<'_, PyAny>,
        asked: RequestArgs<'_, '_>,
        limit: Option<Duration>,
    ) -> PyResult<Self> {
        let this = gov.get();
        let (route, estimate) = this.estimate(gov.py(), paths, asked)?;
        let wait = Wait::new(this.gov.local().clock().now(), limit);
        Ok(RedisAttempt { gov: gov.clone().unbind(), route: route.unbind(), estimate, wait })
    }

    /// Tries once, the GIL released: the permit, or how long to sleep.
    fn step(&mut self, py: Python<'_>) -> PyResult<Step> {
        let gov = self.gov.bind(py).get();
        let route = &self.route.bind(py).get().route;
        let estimate = self.estimate;
        match py.detach(|| gov.gov.try_acquire(route, estimate)) {
            Ok(permit) => Ok(Step::Admitted(Box::new(PyRedisPermit::new(permit, estimate, self.gov.clone_ref(py))))),
            Err(refusal) => self.wait.after(refusal, gov.gov.local().clock().now()).map(Step::Pause).py_err(),
        }
    }

    /// Tries until admitted or refused for good, sleeping in between.
    pub fn block(mut self, py: Python<'_>) -> PyResult<PyRedisPermit> {
        loop {
            match self.step(py)? {
                Step::Admitted(permit) => return Ok(*permit),
                Step::Pause(pause) => sleep(py, pause)?,
            }
        }
    }
}

/// Sleeps with the GIL released, raising a pending signal's exception
/// (KeyboardInterrupt) between naps; nothing is held while it sleeps.
fn sleep(py: Python<'_>, pause: Duration) -> PyResult<()> {
    let mut left = pause;
    while !left.is_zero() {
        let nap = left.min(SIGNAL_CHECK);
        py.detach(|| std::thread::sleep(nap));
        py.check_signals()?;
        left -= nap;
    }
    Ok(())
}

#[pymethods]
impl RedisAttempt {
    /// Tries once: the `RedisPermit`, or the seconds to sleep before trying
    /// again. Raises the refusal that ends the wait (`DeadlineExceeded`,
    /// `NeverFits`, ...).
    #[pyo3(name = "step")]
    fn try_once(&mut self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match self.step(py)? {
            Step::Admitted(permit) => (*permit).into_py_any(py),
            Step::Pause(pause) => pause.as_secs_f64().into_py_any(py),
        }
    }
}
