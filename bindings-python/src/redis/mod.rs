//! `llmgov.redis.RedisGovernor`: limits shared by many processes through
//! Redis (the `llmgov-redis` crate), with the local `Governor`'s argument
//! names. Every call that may reach Redis releases the GIL.

mod permit;

use std::sync::Arc;
use std::time::Duration;

use llmgov::{Clock, ManualClock, MonotonicClock, Usage, MAX_TOKENS};
use llmgov_redis::{Health, RedisGovernor, SharedRoute};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};

use crate::args::{self, count, no_unknown, type_name};
use crate::convert::to_python;
use crate::errors::{self, invalid, IntoPyResult};
use crate::tokens;

pub use permit::PyRedisPermit;

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
        clock: &str,
        make: impl FnOnce(Arc<dyn Clock>) -> llmgov_redis::Result<RedisGovernor> + Send,
    ) -> PyResult<Self> {
        let manual = match clock {
            "manual" => Some(Arc::new(ManualClock::new(0))),
            "monotonic" => None,
            other => return Err(errors::config(py, "clock", other, "must be \"monotonic\" or \"manual\"".to_owned())),
        };
        let chosen: Arc<dyn Clock> = match &manual {
            Some(manual) => manual.clone(),
            None => Arc::new(MonotonicClock::new()),
        };
        // Building opens no connection, but parsing a large config may take a while.
        let gov = py.detach(|| make(chosen)).py_err()?;
        Ok(PyRedisGovernor { gov, manual, routes: PyDict::new(py).unbind() })
    }

    fn resolve(&self, py: Python<'_>, paths: &Bound<'_, PyAny>) -> PyResult<Py<PyRedisRoute>> {
        if let Ok(route) = paths.cast::<PyRedisRoute>() {
            return Ok(route.clone().unbind());
        }
        let routes = self.routes.bind(py);
        let key = if paths.is_instance_of::<PyList>() {
            PyTuple::new(py, paths.cast::<PyList>()?.iter())?.into_any()
        } else {
            paths.clone()
        };
        if let Ok(Some(found)) = routes.get_item(&key) {
            return Ok(found.cast::<PyRedisRoute>()?.clone().unbind());
        }
        let names = path_list(paths)?;
        let route = self.gov.route(&names).py_err()?;
        let route = Py::new(py, PyRedisRoute { route, paths: names })?;
        routes.set_item(key, &route)?;
        Ok(route)
    }
}

/// The path strings of a `paths` argument.
fn path_list(paths: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    if let Ok(path) = paths.cast::<PyString>() {
        return Ok(vec![path.to_cow()?.into_owned()]);
    }
    if !(paths.is_instance_of::<PyList>() || paths.is_instance_of::<PyTuple>()) {
        let reason = format!("must be a path, a list of paths or a RedisRoute, not {}", type_name(paths));
        return Err(invalid("paths", paths, reason));
    }
    paths
        .try_iter()?
        .map(|item| {
            let item = item?;
            let path = item.cast::<PyString>().map_err(|_| {
                invalid("paths", paths, format!("every path must be a string, not {}", type_name(&item)))
            })?;
            Ok(path.to_cow()?.into_owned())
        })
        .collect()
}

/// TOML text, or the contents of the file a `pathlib.Path` or a path string
/// names (text with a newline or an `=` is taken as the config itself).
fn toml_text(py: Python<'_>, source: &Bound<'_, PyAny>) -> PyResult<String> {
    let os = py.import("os")?;
    let path = if source.is_instance(&os.getattr("PathLike")?)? {
        os.call_method1("fspath", (source,))?.extract::<String>()?
    } else {
        match source.extract::<String>() {
            Ok(text) if text.contains('\n') || text.contains('=') || text.trim().is_empty() => return Ok(text),
            Ok(path) => path,
            Err(_) => {
                let reason = format!("must be TOML text or a path, not {}", type_name(source));
                return Err(errors::config(py, "source", &type_name(source), reason));
            }
        }
    };
    std::fs::read_to_string(&path).map_err(|e| errors::config(py, "path", &path, format!("cannot be read: {e}")))
}

/// The prompt's tokens: given, or counted from `text` or `messages` (one of the three).
fn input_tokens(
    py: Python<'_>,
    given: Option<&Bound<'_, PyAny>>,
    text: Option<&Bound<'_, PyAny>>,
    messages: Option<&Bound<'_, PyAny>>,
    model: Option<&Bound<'_, PyAny>>,
    tools: Option<&Bound<'_, PyAny>>,
) -> PyResult<u64> {
    let present = |v: Option<&Bound<'_, PyAny>>| v.filter(|v| !v.is_none()).is_some();
    let named = [("input_tokens", given), ("text", text), ("messages", messages)];
    let mut found = named.iter().filter(|(_, v)| present(*v));
    if let (Some(first), Some(second)) = (found.next(), found.next()) {
        let reason = format!("give only one of input_tokens, text and messages (also got `{}`)", second.0);
        return Err(invalid(first.0, first.1.expect("present"), reason));
    }
    let model = args::string("model", model)?.unwrap_or_default();
    if let Some(text) = text.filter(|t| !t.is_none()) {
        return Ok(tokens::count_text(py, &model, &tokens::text_of("text", text)?));
    }
    if let Some(messages) = messages.filter(|m| !m.is_none()) {
        let messages = tokens::chat_messages(messages)?;
        return Ok(tokens::count_chat(py, &model, &messages, &tokens::tool_values(tools)?));
    }
    Ok(count("input_tokens", given)?.unwrap_or(0))
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
    #[pyo3(signature = (source, clock = "monotonic"))]
    fn from_toml(py: Python<'_>, source: &Bound<'_, PyAny>, clock: &str) -> PyResult<Self> {
        let text = toml_text(py, source)?;
        Self::build(py, clock, |chosen| RedisGovernor::from_toml_with_clock(&text, chosen))
    }

    /// A governor from a config dict: the JSON form of the TOML config,
    /// with the `[redis]` section under the key `"redis"`.
    #[staticmethod]
    #[pyo3(signature = (config, clock = "monotonic"))]
    fn from_dict(py: Python<'_>, config: &Bound<'_, PyAny>, clock: &str) -> PyResult<Self> {
        if !config.is_instance_of::<PyDict>() {
            let reason = format!("must be a dict, not {}", type_name(config));
            return Err(errors::config(py, "config", &type_name(config), reason));
        }
        let value = crate::convert::python_to_value(config)
            .map_err(|reason| errors::config(py, "config", "<dict>", format!("contains {reason}")))?;
        Self::build(py, clock, |chosen| RedisGovernor::from_value_with_clock(value, chosen))
    }

    /// Moves a manual clock forward by `ms` milliseconds (local limits,
    /// permit and lease expiry, reconnection pacing; Redis keeps its own time).
    fn advance(&self, py: Python<'_>, ms: &Bound<'_, PyAny>) -> PyResult<()> {
        let ms = args::millis("ms", ms)?;
        let Some(clock) = &self.manual else {
            let reason = "advance() needs a governor built with clock=\"manual\"".to_owned();
            return Err(errors::invalid_text(py, "clock", "monotonic", reason));
        };
        clock.advance(Duration::from_nanos((ms * 1e6).round() as u64));
        Ok(())
    }

    /// The local clock's reading, in milliseconds.
    #[getter]
    fn now_ms(&self) -> f64 {
        self.gov.local().clock().now() as f64 / 1e6
    }

    /// Resolves paths once into a `RedisRoute` (cached by the paths).
    fn route(&self, py: Python<'_>, paths: &Bound<'_, PyAny>) -> PyResult<Py<PyRedisRoute>> {
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
        no_unknown("RedisGovernor.try_acquire", extra)?;
        let py = slf.py();
        let this = slf.get();
        let route = this.resolve(py, paths)?;
        let input = self::input_tokens(py, input_tokens, text, messages, model, tools)?;
        let output = count("max_output_tokens", max_output_tokens)?.unwrap_or(0);
        if output > MAX_TOKENS {
            let value = max_output_tokens.expect("given");
            return Err(invalid("max_output_tokens", value, format!("more than {MAX_TOKENS} tokens")));
        }
        let cached = count("cached_input_tokens", cached_input_tokens)?.unwrap_or(0);
        let estimate = Usage::new(input, output).with_cached_input(cached);
        let shared = &route.get().route;
        let permit = py.detach(|| this.gov.try_acquire(shared, estimate)).py_err()?;
        Ok(PyRedisPermit::new(permit, estimate, slf.clone().unbind()))
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
