//! `llmgov.redis.RedisGovernor`: limits shared by many processes through
//! Redis (the `llmgov-redis` crate), with the local `Governor`'s argument
//! names. Every call that may reach Redis releases the GIL.

mod permit;
mod waiting;

use std::sync::Arc;

use llmgov::{Clock, ManualClock, Usage};
use llmgov_redis::{Health, RedisGovernor, SharedRoute};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::args::no_unknown;
use crate::config_source::{self, ChosenClock};
use crate::convert::to_python;
use crate::errors::{invalid, IntoPyResult};
use crate::request::{self, RequestArgs};

pub use permit::PyRedisPermit;
pub use waiting::RedisAttempt;

/// A request's scopes split into local and shared parts, resolved once.
#[pyclass(name = "RedisRoute", module = "llmgov._llmgov", frozen)]
pub struct PyRedisRoute {
    route: SharedRoute,
    paths: Vec<String>,
}

#[pymethods]
impl PyRedisRoute {
    /// The paths it was resolved from.
    #[getter]
    fn paths(&self) -> Vec<String> {
        self.paths.clone()
    }

    fn __repr__(&self) -> String {
        format!("RedisRoute({:?})", self.paths)
    }
}

/// A governor whose `[redis.scopes]` are enforced across processes through
/// Redis; every other scope stays local to the process.
#[pyclass(name = "RedisGovernor", module = "llmgov._llmgov", frozen)]
pub struct PyRedisGovernor {
    pub(crate) gov: RedisGovernor,
    manual: Option<Arc<ManualClock>>,
    /// Routes by the `paths` object (a str or a tuple of str) that named them.
    routes: Py<PyDict>,
}

impl PyRedisGovernor {
    fn build(
        py: Python<'_>,
        clock: Option<&Bound<'_, PyAny>>,
        make: impl FnOnce(Arc<dyn Clock>) -> llmgov_redis::Result<RedisGovernor> + Send,
    ) -> PyResult<Self> {
        let ChosenClock { clock, manual } = config_source::clock(py, clock)?;
        // Building opens no connection, but parsing a large config may take a while.
        let gov = py.detach(|| make(clock)).py_err()?;
        Ok(PyRedisGovernor { gov, manual, routes: PyDict::new(py).unbind() })
    }

    fn resolve<'py>(&self, py: Python<'py>, paths: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyRedisRoute>> {
        request::cached_route(self.routes.bind(py), paths, |paths| {
            Bound::new(py, PyRedisRoute { route: self.gov.route(&paths).py_err()?, paths })
        })
    }

    /// The route of `paths` and what a request on it reserves.
    fn estimate<'py>(
        &self,
        py: Python<'py>,
        paths: &Bound<'py, PyAny>,
        asked: RequestArgs<'_, 'py>,
    ) -> PyResult<(Bound<'py, PyRedisRoute>, Usage)> {
        let route = self.resolve(py, paths)?;
        Ok((route, asked.estimate(py)?))
    }
}

/// A request's arguments as the local `Governor` names them; shared scopes
/// reserve `max_output_tokens` and have no traffic classes.
fn asked<'a, 'py>(
    input_tokens: Option<&'a Bound<'py, PyAny>>,
    max_output_tokens: Option<&'a Bound<'py, PyAny>>,
    text: Option<&'a Bound<'py, PyAny>>,
    messages: Option<&'a Bound<'py, PyAny>>,
    model: Option<&'a Bound<'py, PyAny>>,
    tools: Option<&'a Bound<'py, PyAny>>,
    cached_input_tokens: Option<&'a Bound<'py, PyAny>>,
) -> RequestArgs<'a, 'py> {
    RequestArgs {
        input_tokens,
        text,
        messages,
        model,
        tools,
        cached_input_tokens,
        max_output_tokens,
        expected_output_tokens: None,
        klass: None,
    }
}

/// Options of the local `Governor`'s acquires that a `RedisGovernor`
/// cannot honour, and why.
const KLASS: (&str, &str) = ("klass", "shared scopes have no traffic classes");
const EXPECTED: (&str, &str) = ("expected_output_tokens", "a RedisGovernor reserves max_output_tokens");
const PRIORITY: (&str, &str) = ("priority", "a RedisGovernor does not queue its waiters");

/// Refuses unknown keywords, but takes None for `local`: options the local
/// `Governor` takes that this one cannot honour. Code written for either
/// passes them unset (the httpx transports pass `klass=None`,
/// `priority=None`); a value is refused by name rather than ignored.
fn local_options_unset(function: &str, extra: Option<&Bound<'_, PyDict>>, local: &[(&str, &str)]) -> PyResult<()> {
    let Some(extra) = extra else { return Ok(()) };
    for (key, value) in extra.iter() {
        let known = local.iter().find(|(name, _)| key.eq(name).unwrap_or(false));
        match known {
            Some(_) if value.is_none() => continue,
            Some((name, why)) => return Err(invalid(name, &value, format!("{why}: {function}() takes only None"))),
            None => {
                let field = key.str().map(|k| k.to_string()).unwrap_or_default();
                return Err(invalid(&field, &value, format!("{function}() has no argument `{field}`")));
            }
        }
    }
    Ok(())
}

/// The `Health` reading as a dict.
fn health_dict<'py>(py: Python<'py>, health: &Health) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("degraded", health.degraded)?;
    dict.set_item("fallback_admissions", health.fallback_admissions)?;
    dict.set_item("redis_errors", health.redis_errors)?;
    dict.set_item("recoveries", health.recoveries)?;
    dict.set_item("state_resets", health.state_resets)?;
    dict.set_item("redis_calls", health.redis_calls)?;
    dict.set_item("last_error", health.last_error.as_deref())?;
    Ok(dict)
}

#[pymethods]
impl PyRedisGovernor {
    /// A governor from TOML text or a TOML file: the core's sections plus
    /// `[redis]` (a missing `redis.url` is read from `LLMGOV_REDIS_URL`).
    #[staticmethod]
    #[pyo3(signature = (source, clock = None, **extra), text_signature = "(source, clock='monotonic')")]
    fn from_toml(
        py: Python<'_>,
        source: &Bound<'_, PyAny>,
        clock: Option<&Bound<'_, PyAny>>,
        extra: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        no_unknown("RedisGovernor.from_toml", extra)?;
        let text = config_source::toml_text(py, source)?;
        Self::build(py, clock, |chosen| RedisGovernor::from_toml_with_clock(&text, chosen))
    }

    /// A governor from a config dict: the JSON form of the TOML config,
    /// with the `[redis]` section under the key `"redis"`.
    #[staticmethod]
    #[pyo3(signature = (config, clock = None, **extra), text_signature = "(config, clock='monotonic')")]
    fn from_dict(
        py: Python<'_>,
        config: &Bound<'_, PyAny>,
        clock: Option<&Bound<'_, PyAny>>,
        extra: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        no_unknown("RedisGovernor.from_dict", extra)?;
        let value = config_source::dict_value(py, config)?;
        Self::build(py, clock, |chosen| RedisGovernor::from_value_with_clock(value, chosen))
    }

    /// Moves a manual clock forward by `ms` milliseconds (local limits,
    /// permit and lease expiry, reconnection pacing; Redis keeps its own time).
    #[pyo3(signature = (ms, **extra), text_signature = "($self, ms)")]
    fn advance(&self, py: Python<'_>, ms: &Bound<'_, PyAny>, extra: Option<&Bound<'_, PyDict>>) -> PyResult<()> {
        no_unknown("RedisGovernor.advance", extra)?;
        config_source::advance(py, self.manual.as_deref(), ms)
    }

    /// The local clock's reading, in milliseconds.
    #[getter]
    fn now_ms(&self) -> f64 {
        self.gov.local().clock().now() as f64 / 1e6
    }

    /// Resolves paths once into a `RedisRoute` (cached by the paths).
    #[pyo3(signature = (paths, **extra), text_signature = "($self, paths)")]
    fn route<'py>(
        &self,
        py: Python<'py>,
        paths: &Bound<'py, PyAny>,
        extra: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyRedisRoute>> {
        no_unknown("RedisGovernor.route", extra)?;
        self.resolve(py, paths)
    }

    /// Reserves the estimate on every scope of the route, local and shared,
    /// or nothing: a `RedisPermit`, or `RateLimited` / `NeverFits`. While
    /// Redis is unreachable the shared scopes admit from the safe local share.
    #[pyo3(signature = (paths, input_tokens = None, max_output_tokens = None, *, text = None, messages = None,
        model = None, tools = None, cached_input_tokens = None, **extra))]
    #[allow(clippy::too_many_arguments)]
    fn try_acquire(
        slf: &Bound<'_, Self>,
        paths: &Bound<'_, PyAny>,
        input_tokens: Option<&Bound<'_, PyAny>>,
        max_output_tokens: Option<&Bound<'_, PyAny>>,
        text: Option<&Bound<'_, PyAny>>,
        messages: Option<&Bound<'_, PyAny>>,
        model: Option<&Bound<'_, PyAny>>,
        tools: Option<&Bound<'_, PyAny>>,
        cached_input_tokens: Option<&Bound<'_, PyAny>>,
        extra: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyRedisPermit> {
        local_options_unset("RedisGovernor.try_acquire", extra, &[KLASS, EXPECTED])?;
        let asked = asked(input_tokens, max_output_tokens, text, messages, model, tools, cached_input_tokens);
        let (py, this) = (slf.py(), slf.get());
        let (route, estimate) = this.estimate(py, paths, asked)?;
        let shared = &route.get().route;
        let permit = py.detach(|| this.gov.try_acquire(shared, estimate)).py_err()?;
        Ok(PyRedisPermit::new(permit, estimate, slf.clone().unbind()))
    }

    /// `try_acquire`, waiting while a limit refuses: the thread sleeps (the
    /// GIL released) until the refusing limit could admit the request and
    /// tries again, for at most `timeout` seconds and `deadline_ms`
    /// (`None`: until admitted). Raises `DeadlineExceeded` at once when the
    /// predicted wait is already longer, and `NeverFits` at once.
    #[pyo3(signature = (paths, input_tokens = None, max_output_tokens = None, *, text = None, messages = None,
        model = None, tools = None, cached_input_tokens = None, deadline_ms = None, timeout = None, **extra))]
    #[allow(clippy::too_many_arguments)]
    fn acquire_blocking(
        slf: &Bound<'_, Self>,
        paths: &Bound<'_, PyAny>,
        input_tokens: Option<&Bound<'_, PyAny>>,
        max_output_tokens: Option<&Bound<'_, PyAny>>,
        text: Option<&Bound<'_, PyAny>>,
        messages: Option<&Bound<'_, PyAny>>,
        model: Option<&Bound<'_, PyAny>>,
        tools: Option<&Bound<'_, PyAny>>,
        cached_input_tokens: Option<&Bound<'_, PyAny>>,
        deadline_ms: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        extra: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyRedisPermit> {
        local_options_unset("RedisGovernor.acquire_blocking", extra, &[KLASS, EXPECTED, PRIORITY])?;
        let asked = asked(input_tokens, max_output_tokens, text, messages, model, tools, cached_input_tokens);
        let limit = waiting::time_limit(deadline_ms, timeout)?;
        RedisAttempt::new(slf, paths, asked, limit)?.block(slf.py())
    }

    /// `try_acquire`, waiting while a limit refuses, as an awaitable: it
    /// sleeps on the event loop between tries, for at most `deadline_ms`
    /// (`None`: until admitted). Each try is one call to Redis, made with
    /// the GIL released but on the loop's thread, as `try_acquire` is.
    /// Cancelling it while it sleeps leaves nothing reserved.
    #[pyo3(signature = (paths, input_tokens = None, max_output_tokens = None, *, text = None, messages = None,
        model = None, tools = None, cached_input_tokens = None, deadline_ms = None, **extra))]
    #[allow(clippy::too_many_arguments)]
    fn acquire<'py>(
        slf: &Bound<'py, Self>,
        paths: &Bound<'py, PyAny>,
        input_tokens: Option<&Bound<'py, PyAny>>,
        max_output_tokens: Option<&Bound<'py, PyAny>>,
        text: Option<&Bound<'py, PyAny>>,
        messages: Option<&Bound<'py, PyAny>>,
        model: Option<&Bound<'py, PyAny>>,
        tools: Option<&Bound<'py, PyAny>>,
        cached_input_tokens: Option<&Bound<'py, PyAny>>,
        deadline_ms: Option<&Bound<'py, PyAny>>,
        extra: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        local_options_unset("RedisGovernor.acquire", extra, &[KLASS, EXPECTED, PRIORITY])?;
        let asked = asked(input_tokens, max_output_tokens, text, messages, model, tools, cached_input_tokens);
        let limit = waiting::time_limit(deadline_ms, None)?;
        let attempt = RedisAttempt::new(slf, paths, asked, limit)?;
        slf.py().import("llmgov._redis_wait")?.call_method1("acquire", (attempt,))
    }

    /// The link to Redis: `degraded`, `fallback_admissions`, `redis_errors`,
    /// `recoveries`, `state_resets`, `redis_calls`, `last_error`.
    fn health<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        health_dict(py, &self.gov.health())
    }

    /// Refreshes every concurrency slot this process holds now (a
    /// background thread also does, every third of `slot_ttl`).
    fn heartbeat(&self, py: Python<'_>) {
        py.detach(|| self.gov.heartbeat());
    }

    /// Gives every lease's unused part back to Redis now (also done when
    /// the governor is garbage-collected): call it before a process exits.
    fn return_leases(&self, py: Python<'_>) {
        py.detach(|| self.gov.return_leases());
    }

    /// The local scopes (those not shared) and their counters, as a dict.
    fn snapshot<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_python(py, &self.gov.local().snapshot())
    }

    /// The local engine's metrics, as `Governor.metrics()`: the scopes not
    /// shared (as `snapshot()`), their queues, refusals and estimate errors.
    /// Refusals by shared scopes are Redis's and are not counted here.
    fn metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_python(py, &self.gov.local().metrics())
    }

    fn __repr__(&self) -> String {
        let settings = self.gov.settings();
        let clock = if self.manual.is_some() { "manual" } else { "monotonic" };
        format!(
            "RedisGovernor(prefix={:?}, expected_processes={}, shared_scopes={}, clock={clock:?})",
            settings.prefix,
            settings.expected_processes,
            settings.scopes.len()
        )
    }
}
