//! `llmgov.Governor`: construction, routes, admission and inspection.

use std::sync::Arc;
use std::time::Duration;

use llmgov::{Config, Governor, ManualClock, MonotonicClock, Request, Route, MAX_TOKENS};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};
use pyo3::{PyTraverseError, PyVisit};

use crate::args::{self, count, no_unknown, type_name};
use crate::convert::to_python;
use crate::errors::{self, invalid, IntoPyResult};
use crate::events::Hook;
use crate::permit::PyPermit;
use crate::routing::{self, PyProfile};
use crate::tokens;
use crate::waiting::{self, Reservation};

/// A route: the scopes a request is charged on, resolved once. Pass it as
/// `paths` to skip resolving again.
#[pyclass(name = "Route", module = "llmgov._llmgov", frozen)]
pub struct PyRoute {
    pub(crate) route: Route,
    paths: Vec<String>,
}

#[pymethods]
impl PyRoute {
    /// The route's number in its governor.
    #[getter]
    fn index(&self) -> u32 {
        self.route.index()
    }

    /// The paths it was resolved from.
    #[getter]
    fn paths(&self) -> Vec<String> {
        self.paths.clone()
    }

    fn __repr__(&self) -> String {
        format!("Route({:?})", self.paths)
    }
}

/// A rate-limit governor: reserve before a request leaves, reconcile after.
#[pyclass(name = "Governor", module = "llmgov._llmgov", frozen)]
pub struct PyGovernor {
    pub(crate) gov: Governor,
    manual: Option<Arc<ManualClock>>,
    /// Routes by the `paths` object that named them (a str or a tuple of
    /// str): the hot path looks a route up in a dict and passes numbers.
    routes: Py<PyDict>,
    /// Resolved profiles by `(name, paths)`.
    pub(crate) profiles: Py<PyDict>,
    /// The Python event hook, if one was set.
    hook: Arc<Hook>,
}

/// What a request asks for, from `try_acquire`'s keyword arguments.
pub struct RequestArgs<'a, 'py> {
    pub input_tokens: Option<&'a Bound<'py, PyAny>>,
    pub text: Option<&'a Bound<'py, PyAny>>,
    pub messages: Option<&'a Bound<'py, PyAny>>,
    pub model: Option<&'a Bound<'py, PyAny>>,
    pub tools: Option<&'a Bound<'py, PyAny>>,
    pub cached_input_tokens: Option<&'a Bound<'py, PyAny>>,
    pub max_output_tokens: Option<&'a Bound<'py, PyAny>>,
    pub expected_output_tokens: Option<&'a Bound<'py, PyAny>>,
    pub klass: Option<&'a Bound<'py, PyAny>>,
}

impl RequestArgs<'_, '_> {
    /// Whether only `input_tokens` and `max_output_tokens` may be given.
    fn only_token_counts(&self) -> bool {
        let absent = |v: Option<&Bound<'_, PyAny>>| v.is_none_or(|v| v.is_none());
        [
            self.text,
            self.messages,
            self.model,
            self.tools,
            self.cached_input_tokens,
            self.expected_output_tokens,
            self.klass,
        ]
        .into_iter()
        .all(absent)
    }
}

impl PyGovernor {
    fn build(py: Python<'_>, config: Config, clock: &str) -> PyResult<Self> {
        let (gov, manual) = match clock {
            "manual" => {
                let manual = Arc::new(ManualClock::new(0));
                (Governor::with_clock(&config, manual.clone()).py_err()?, Some(manual))
            }
            "monotonic" => (Governor::with_clock(&config, Arc::new(MonotonicClock::new())).py_err()?, None),
            other => {
                return Err(errors::config(py, "clock", other, "must be \"monotonic\" or \"manual\"".to_owned()));
            }
        };
        let (routes, profiles) = (PyDict::new(py).unbind(), PyDict::new(py).unbind());
        Ok(PyGovernor { gov, manual, routes, profiles, hook: Arc::default() })
    }

    /// The route `paths` names: a `Route`, a path, or a list or tuple of paths.
    pub fn resolve(&self, py: Python<'_>, paths: &Bound<'_, PyAny>) -> PyResult<Route> {
        if let Ok(route) = paths.cast::<PyRoute>() {
            return Ok(route.get().route);
        }
        let routes = self.routes.bind(py);
        let key = if paths.is_instance_of::<PyList>() {
            PyTuple::new(py, paths.cast::<PyList>()?.iter())?.into_any()
        } else {
            paths.clone()
        };
        if let Ok(Some(found)) = routes.get_item(&key) {
            return Ok(found.cast::<PyRoute>()?.get().route);
        }
        let names = path_list(paths)?;
        let route = self.gov.route(&names).py_err()?;
        routes.set_item(key, PyRoute { route, paths: names })?;
        Ok(route)
    }

    /// Builds the core request from the arguments.
    pub fn request(&self, py: Python<'_>, route: Route, a: &RequestArgs<'_, '_>) -> PyResult<Request> {
        if a.only_token_counts() {
            // The hot path, `try_acquire(route, 1000, 200)`: two counts.
            return self.plain_request(route, a.input_tokens, a.max_output_tokens);
        }
        let mut request = self.plain_request(route, None, a.max_output_tokens)?;
        request.input_tokens = self.input_tokens(py, a)?;
        if let Some(n) = count("cached_input_tokens", a.cached_input_tokens)? {
            request.cached_input_tokens = n;
        }
        request.expected_output_tokens = count("expected_output_tokens", a.expected_output_tokens)?;
        if let Some(klass) = args::string("klass", a.klass)? {
            request.class = self.gov.class(&klass);
        }
        Ok(request)
    }

    /// A request of `input_tokens` and `max_output_tokens` alone.
    fn plain_request(
        &self,
        route: Route,
        input_tokens: Option<&Bound<'_, PyAny>>,
        max_output_tokens: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Request> {
        let mut request = Request::new(route);
        request.input_tokens = count("input_tokens", input_tokens)?.unwrap_or(0);
        if let Some(n) = count("max_output_tokens", max_output_tokens)? {
            if n > MAX_TOKENS {
                let value = max_output_tokens.expect("given");
                return Err(invalid("max_output_tokens", value, format!("more than {MAX_TOKENS} tokens")));
            }
            request.max_output_tokens = n;
        }
        Ok(request)
    }

    /// The prompt's tokens: given, or counted from `text` or `messages`.
    fn input_tokens(&self, py: Python<'_>, a: &RequestArgs<'_, '_>) -> PyResult<u64> {
        let given = |v: Option<&Bound<'_, PyAny>>| v.is_some_and(|v| !v.is_none());
        let named = [("input_tokens", a.input_tokens), ("text", a.text), ("messages", a.messages)];
        let mut present = named.iter().filter(|(_, v)| given(*v));
        if let (Some(first), Some(second)) = (present.next(), present.next()) {
            let reason = format!("give only one of input_tokens, text and messages (also got `{}`)", second.0);
            return Err(invalid(first.0, first.1.expect("present"), reason));
        }
        let model = args::string("model", a.model)?.unwrap_or_default();
        if let Some(text) = a.text.filter(|t| !t.is_none()) {
            return Ok(tokens::count_text(py, &model, &tokens::text_of("text", text)?));
        }
        if let Some(messages) = a.messages.filter(|m| !m.is_none()) {
            let messages = tokens::chat_messages(messages)?;
            let tools = tokens::tool_values(a.tools)?;
            return Ok(tokens::count_chat(py, &model, &messages, &tools));
        }
        Ok(count("input_tokens", a.input_tokens)?.unwrap_or(0))
    }
}

/// The path strings of a `paths` argument.
pub(crate) fn path_list(paths: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    if let Ok(path) = paths.cast::<PyString>() {
        return Ok(vec![path.to_cow()?.into_owned()]);
    }
    if !(paths.is_instance_of::<PyList>() || paths.is_instance_of::<PyTuple>()) {
        let reason = format!("must be a path, a list of paths or a Route, not {}", type_name(paths));
        return Err(invalid("paths", paths, reason));
    }
    let mut names = Vec::new();
    for item in paths.try_iter()? {
        let item = item?;
        let path = item
            .cast::<PyString>()
            .map_err(|_| invalid("paths", paths, format!("every path must be a string, not {}", type_name(&item))))?;
        names.push(path.to_cow()?.into_owned());
    }
    Ok(names)
}

/// Reads a TOML argument: a `pathlib.Path` or a path string names a file;
/// text with a newline or an `=` is the config itself.
fn toml_text(py: Python<'_>, source: &Bound<'_, PyAny>) -> PyResult<String> {
    let os = py.import("os")?;
    let is_path_like = source.is_instance(&os.getattr("PathLike")?)?;
    let text: Option<String> = source.extract().ok();
    let path = match (&text, is_path_like) {
        (_, true) => os.call_method1("fspath", (source,))?.extract::<String>()?,
        (Some(t), false) if t.contains('\n') || t.contains('=') || t.trim().is_empty() => return Ok(t.clone()),
        (Some(t), false) => t.clone(),
        (None, false) => {
            let reason = format!("must be TOML text or a path, not {}", type_name(source));
            return Err(errors::config(py, "source", &type_name(source), reason));
        }
    };
    std::fs::read_to_string(&path).map_err(|e| errors::config(py, "path", &path, format!("cannot be read: {e}")))
}

#[pymethods]
impl PyGovernor {
    /// A governor from TOML text or a TOML file.
    #[staticmethod]
    #[pyo3(signature = (source, clock = "monotonic"))]
    fn from_toml(py: Python<'_>, source: &Bound<'_, PyAny>, clock: &str) -> PyResult<Self> {
        let text = toml_text(py, source)?;
        Self::build(py, Config::from_toml(&text).py_err()?, clock)
    }

    /// A governor from JSON text.
    #[staticmethod]
    #[pyo3(signature = (text, clock = "monotonic"))]
    fn from_json(py: Python<'_>, text: &str, clock: &str) -> PyResult<Self> {
        Self::build(py, Config::from_json(text).py_err()?, clock)
    }

    /// A governor from a config dict (the JSON form of the TOML config).
    #[staticmethod]
    #[pyo3(signature = (config, clock = "monotonic"))]
    fn from_dict(py: Python<'_>, config: &Bound<'_, PyAny>, clock: &str) -> PyResult<Self> {
        if !config.is_instance_of::<PyDict>() {
            let reason = format!("must be a dict, not {}", type_name(config));
            return Err(errors::config(py, "config", &type_name(config), reason));
        }
        let json = crate::convert::python_to_value(config)
            .map_err(|reason| errors::config(py, "config", "<dict>", format!("contains {reason}")))?;
        Self::build(py, Config::from_json(&json.to_string()).py_err()?, clock)
    }

    /// A governor from a shipped preset, e.g. `openai-gpt-4o-tier1`.
    #[staticmethod]
    #[pyo3(signature = (name, clock = "monotonic"))]
    fn from_preset(py: Python<'_>, name: &str, clock: &str) -> PyResult<Self> {
        Self::build(py, llmgov::config::Config::preset(name).py_err()?, clock)
    }

    /// Moves a manual clock forward by `ms` milliseconds.
    fn advance(&self, py: Python<'_>, ms: &Bound<'_, PyAny>) -> PyResult<()> {
        let ms = args::millis("ms", ms)?;
        let Some(clock) = &self.manual else {
            let reason = "advance() needs a governor built with clock=\"manual\"".to_owned();
            return Err(errors::invalid_text(py, "clock", "monotonic", reason));
        };
        clock.advance(Duration::from_nanos((ms * 1e6).round() as u64));
        // Waiters wake on the clock's time; a manual clock moves only here.
        self.gov.wake_waiters();
        Ok(())
    }

    /// The governor clock's reading, in milliseconds.
    #[getter]
    fn now_ms(&self) -> f64 {
        self.gov.clock().now() as f64 / 1e6
    }

    /// Resolves paths once into a `Route` (cached; passing the paths again
    /// finds the same route).
    fn route(&self, py: Python<'_>, paths: &Bound<'_, PyAny>) -> PyResult<PyRoute> {
        let route = self.resolve(py, paths)?;
        let paths = match paths.cast::<PyRoute>() {
            Ok(given) => given.get().paths.clone(),
            Err(_) => path_list(paths)?,
        };
        Ok(PyRoute { route, paths })
    }

    /// Reserves every limit on the route now, or nothing: a `Permit`, or
    /// `RateLimited` / `NeverFits`.
    #[pyo3(signature = (paths, input_tokens = None, max_output_tokens = None, *, text = None, messages = None, model = None,
        tools = None, cached_input_tokens = None, expected_output_tokens = None, klass = None, **extra))]
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
        expected_output_tokens: Option<&Bound<'_, PyAny>>,
        klass: Option<&Bound<'_, PyAny>>,
        extra: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyPermit> {
        no_unknown("try_acquire", extra)?;
        let py = slf.py();
        let this = slf.get();
        let route = this.resolve(py, paths)?;
        let request_args = RequestArgs {
            input_tokens,
            text,
            messages,
            model,
            tools,
            cached_input_tokens,
            max_output_tokens,
            expected_output_tokens,
            klass,
        };
        let request = this.request(py, route, &request_args)?;
        let permit = this.gov.try_acquire(&request).py_err()?;
        Ok(PyPermit::new(permit, slf.clone().unbind()))
    }

    /// Waits fairly for admission (an awaitable): a `Permit`, or
    /// `DeadlineExceeded`, `QueueFull` or `NeverFits`. Cancelling the task
    /// leaves the queue. `deadline_ms` caps the wait (the class's maximum
    /// wait caps it too); `priority` orders a tenant's waiting requests.
    #[pyo3(signature = (paths, input_tokens = None, max_output_tokens = None, *, text = None, messages = None, model = None,
        tools = None, cached_input_tokens = None, expected_output_tokens = None, klass = None, priority = None, deadline_ms = None, **extra))]
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
        expected_output_tokens: Option<&Bound<'py, PyAny>>,
        klass: Option<&Bound<'py, PyAny>>,
        priority: Option<&Bound<'py, PyAny>>,
        deadline_ms: Option<&Bound<'py, PyAny>>,
        extra: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let request_args = RequestArgs {
            input_tokens,
            text,
            messages,
            model,
            tools,
            cached_input_tokens,
            max_output_tokens,
            expected_output_tokens,
            klass,
        };
        let request = waiting::request_of(slf, paths, &request_args, priority, deadline_ms, "acquire", extra)?;
        waiting::acquire_async(slf, request)
    }

    /// Waits as `acquire` does, blocking the calling thread (the GIL
    /// released) for at most `timeout` seconds.
    #[pyo3(signature = (paths, input_tokens = None, max_output_tokens = None, *, text = None, messages = None, model = None,
        tools = None, cached_input_tokens = None, expected_output_tokens = None, klass = None, priority = None, deadline_ms = None, timeout = None, **extra))]
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
        expected_output_tokens: Option<&Bound<'_, PyAny>>,
        klass: Option<&Bound<'_, PyAny>>,
        priority: Option<&Bound<'_, PyAny>>,
        deadline_ms: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        extra: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyPermit> {
        let request_args = RequestArgs {
            input_tokens,
            text,
            messages,
            model,
            tools,
            cached_input_tokens,
            max_output_tokens,
            expected_output_tokens,
            klass,
        };
        let request = waiting::request_of(slf, paths, &request_args, priority, deadline_ms, "acquire_blocking", extra)?;
        waiting::acquire_blocking(slf, request, waiting::timeout(timeout)?)
    }

    /// A context manager that waits for a permit on entry (`with` blocks
    /// the thread for at most `timeout` seconds; `async with` awaits),
    /// cancels it if the block raises, and settles it as estimated if the
    /// block left it pending.
    #[pyo3(signature = (paths, input_tokens = None, max_output_tokens = None, *, text = None, messages = None, model = None,
        tools = None, cached_input_tokens = None, expected_output_tokens = None, klass = None, priority = None, deadline_ms = None, timeout = None, **extra))]
    #[allow(clippy::too_many_arguments)]
    fn reserve(
        slf: &Bound<'_, Self>,
        paths: &Bound<'_, PyAny>,
        input_tokens: Option<&Bound<'_, PyAny>>,
        max_output_tokens: Option<&Bound<'_, PyAny>>,
        text: Option<&Bound<'_, PyAny>>,
        messages: Option<&Bound<'_, PyAny>>,
        model: Option<&Bound<'_, PyAny>>,
        tools: Option<&Bound<'_, PyAny>>,
        cached_input_tokens: Option<&Bound<'_, PyAny>>,
        expected_output_tokens: Option<&Bound<'_, PyAny>>,
        klass: Option<&Bound<'_, PyAny>>,
        priority: Option<&Bound<'_, PyAny>>,
        deadline_ms: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        extra: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Reservation> {
        let request_args = RequestArgs {
            input_tokens,
            text,
            messages,
            model,
            tools,
            cached_input_tokens,
            max_output_tokens,
            expected_output_tokens,
            klass,
        };
        let request = waiting::request_of(slf, paths, &request_args, priority, deadline_ms, "reserve", extra)?;
        Ok(Reservation::new(slf.clone().unbind(), request, waiting::timeout(timeout)?))
    }

    /// Resolves model profile `name` and its fallback chain for a
    /// consumer's `paths` (e.g. `"tenants/acme"`; none by default) into a
    /// `Profile` (cached; passing the name again finds the same one).
    #[pyo3(signature = (name, paths = None))]
    fn profile(
        slf: &Bound<'_, Self>,
        name: &Bound<'_, PyAny>,
        paths: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyProfile>> {
        routing::resolve(slf, name, paths)
    }

    /// Reserves on the deployment of `profile` (a name or a `Profile`) with
    /// the most normalized headroom, skipping open breakers, failing over
    /// when one refuses and falling back along the chain where the class
    /// (`klass`) may. The `Permit` says where it went (`profile`,
    /// `deployment`, `fell_back`, `degraded`); a refusal is the mapped
    /// exception of the first profile's roomiest deployment.
    #[pyo3(signature = (profile, input_tokens = None, max_output_tokens = None, *, paths = None, text = None,
        messages = None, model = None, tools = None, cached_input_tokens = None, expected_output_tokens = None,
        klass = None, **extra))]
    #[allow(clippy::too_many_arguments)]
    fn try_acquire_profile(
        slf: &Bound<'_, Self>,
        profile: &Bound<'_, PyAny>,
        input_tokens: Option<&Bound<'_, PyAny>>,
        max_output_tokens: Option<&Bound<'_, PyAny>>,
        paths: Option<&Bound<'_, PyAny>>,
        text: Option<&Bound<'_, PyAny>>,
        messages: Option<&Bound<'_, PyAny>>,
        model: Option<&Bound<'_, PyAny>>,
        tools: Option<&Bound<'_, PyAny>>,
        cached_input_tokens: Option<&Bound<'_, PyAny>>,
        expected_output_tokens: Option<&Bound<'_, PyAny>>,
        klass: Option<&Bound<'_, PyAny>>,
        extra: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyPermit> {
        no_unknown("try_acquire_profile", extra)?;
        let profile = routing::resolve(slf, profile, paths)?;
        let request_args = RequestArgs {
            input_tokens,
            text,
            messages,
            model,
            tools,
            cached_input_tokens,
            max_output_tokens,
            expected_output_tokens,
            klass,
        };
        routing::try_acquire(slf, profile.get(), &request_args)
    }

    /// Waits fairly for admission through `profile` (an awaitable): at once
    /// on the roomiest deployment that admits it, as `try_acquire_profile`;
    /// otherwise in the queue of the deployment that should pass first
    /// among those the class may use (an open breaker or a budget threshold
    /// is not waited for). A routed `Permit`, or `DeadlineExceeded`,
    /// `QueueFull`, `NeverFits`, or a budget threshold's `RateLimited` when
    /// the spend crossed it meanwhile (then nothing is held). `priority` and
    /// `deadline_ms` as for `acquire`; cancelling the task leaves the queue.
    #[pyo3(signature = (profile, input_tokens = None, max_output_tokens = None, *, paths = None, text = None,
        messages = None, model = None, tools = None, cached_input_tokens = None, expected_output_tokens = None,
        klass = None, priority = None, deadline_ms = None, **extra))]
    #[allow(clippy::too_many_arguments)]
    fn acquire_profile<'py>(
        slf: &Bound<'py, Self>,
        profile: &Bound<'py, PyAny>,
        input_tokens: Option<&Bound<'py, PyAny>>,
        max_output_tokens: Option<&Bound<'py, PyAny>>,
        paths: Option<&Bound<'py, PyAny>>,
        text: Option<&Bound<'py, PyAny>>,
        messages: Option<&Bound<'py, PyAny>>,
        model: Option<&Bound<'py, PyAny>>,
        tools: Option<&Bound<'py, PyAny>>,
        cached_input_tokens: Option<&Bound<'py, PyAny>>,
        expected_output_tokens: Option<&Bound<'py, PyAny>>,
        klass: Option<&Bound<'py, PyAny>>,
        priority: Option<&Bound<'py, PyAny>>,
        deadline_ms: Option<&Bound<'py, PyAny>>,
        extra: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        no_unknown("acquire_profile", extra)?;
        let profile = routing::resolve(slf, profile, paths)?;
        let request_args = RequestArgs {
            input_tokens,
            text,
            messages,
            model,
            tools,
            cached_input_tokens,
            max_output_tokens,
            expected_output_tokens,
            klass,
        };
        let wait = routing::WaitArgs { priority, deadline_ms };
        routing::acquire_async(slf, profile.get(), &request_args, &wait)
    }

    /// Waits as `acquire_profile` does, blocking the calling thread (the
    /// GIL released) for at most `timeout` seconds.
    #[pyo3(signature = (profile, input_tokens = None, max_output_tokens = None, *, paths = None, text = None,
        messages = None, model = None, tools = None, cached_input_tokens = None, expected_output_tokens = None,
        klass = None, priority = None, deadline_ms = None, timeout = None, **extra))]
    #[allow(clippy::too_many_arguments)]
    fn acquire_profile_blocking(
        slf: &Bound<'_, Self>,
        profile: &Bound<'_, PyAny>,
        input_tokens: Option<&Bound<'_, PyAny>>,
        max_output_tokens: Option<&Bound<'_, PyAny>>,
        paths: Option<&Bound<'_, PyAny>>,
        text: Option<&Bound<'_, PyAny>>,
        messages: Option<&Bound<'_, PyAny>>,
        model: Option<&Bound<'_, PyAny>>,
        tools: Option<&Bound<'_, PyAny>>,
        cached_input_tokens: Option<&Bound<'_, PyAny>>,
        expected_output_tokens: Option<&Bound<'_, PyAny>>,
        klass: Option<&Bound<'_, PyAny>>,
        priority: Option<&Bound<'_, PyAny>>,
        deadline_ms: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        extra: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyPermit> {
        no_unknown("acquire_profile_blocking", extra)?;
        let profile = routing::resolve(slf, profile, paths)?;
        let request_args = RequestArgs {
            input_tokens,
            text,
            messages,
            model,
            tools,
            cached_input_tokens,
            max_output_tokens,
            expected_output_tokens,
            klass,
        };
        let wait = routing::WaitArgs { priority, deadline_ms };
        routing::acquire_blocking(slf, profile.get(), &request_args, &wait, waiting::timeout(timeout)?)
    }

    /// Sets the callable told of every event, as a dict with an `event` key:
    /// `denied` (`code`, `scope`, `dimension`, `retry_after_ms`, `class`),
    /// `provider_rejected` (`scopes`, `kind`, `dimension`,
    /// `retry_after_ms`) and `breaker_changed` (`scope`, `state`). It may be
    /// called from any thread; what it raises goes to
    /// `sys.unraisablehook`, never to the governor's caller. Setting another
    /// replaces it; None removes it.
    fn set_event_hook(&self, hook: &Bound<'_, PyAny>) -> PyResult<()> {
        self.hook.set(&self.gov, hook)
    }

    /// Every limit, counter, breaker and queue now, in the Prometheus text
    /// exposition format, for an application's `/metrics` endpoint.
    fn prometheus(&self) -> String {
        self.gov.prometheus()
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.routes)?;
        visit.call(&self.profiles)?;
        self.hook.traverse(&visit)
    }

    fn __clear__(&self) {
        self.hook.clear();
    }

    /// The waiting queues: per class, depth, oldest wait, admitted, expired
    /// and refused counts, as a dict.
    fn queue_metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_python(py, &self.gov.queue_metrics())
    }

    /// Every scope and counter now, as a dict.
    fn snapshot<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_python(py, &self.gov.snapshot())
    }

    fn __repr__(&self) -> String {
        let clock = if self.manual.is_some() { "manual" } else { "monotonic" };
        format!("Governor(clock={clock:?}, scopes={})", self.gov.snapshot().scopes.len())
    }
}
