//! `llmgov.Governor`: construction, routes, admission and inspection.

use std::sync::Arc;

use llmgov::{Config, Governor, ManualClock, Route};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3::{PyTraverseError, PyVisit};

use crate::args::no_unknown;
use crate::config_source::{self, ChosenClock};
use crate::convert::to_python;
use crate::errors::IntoPyResult;
use crate::events::Hook;
use crate::permit::PyPermit;
use crate::request::{self, RequestArgs};
use crate::routing::{self, PyProfile};
use crate::waiting::{self, Reservation};
use crate::wake::Acquiring;

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

impl PyGovernor {
    fn build(py: Python<'_>, config: Config, clock: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let ChosenClock { clock, manual } = config_source::clock(py, clock)?;
        let gov = Governor::with_clock(&config, clock).py_err()?;
        let (routes, profiles) = (PyDict::new(py).unbind(), PyDict::new(py).unbind());
        Ok(PyGovernor { gov, manual, routes, profiles, hook: Arc::default() })
    }

    /// The route `paths` names: a `Route`, a path, or a list or tuple of paths.
    pub fn resolve(&self, py: Python<'_>, paths: &Bound<'_, PyAny>) -> PyResult<Route> {
        Ok(self.cached_route(py, paths)?.get().route)
    }

    fn cached_route<'py>(&self, py: Python<'py>, paths: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyRoute>> {
        request::cached_route(self.routes.bind(py), paths, |paths| {
            Bound::new(py, PyRoute { route: self.gov.route(&paths).py_err()?, paths })
        })
    }
}

#[pymethods]
impl PyGovernor {
    // Each `clock` is taken as any object (`None` when not given, the
    // monotonic clock), so that a wrong one is a `ConfigError` naming it,
    // not a bare `TypeError`; the text signature keeps its documented default.

    /// A governor from TOML text or a TOML file.
    #[staticmethod]
    #[pyo3(signature = (source, clock = None, **extra), text_signature = "(source, clock='monotonic')")]
    fn from_toml(
        py: Python<'_>,
        source: &Bound<'_, PyAny>,
        clock: Option<&Bound<'_, PyAny>>,
        extra: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        no_unknown("Governor.from_toml", extra)?;
        let text = config_source::toml_text(py, source)?;
        Self::build(py, Config::from_toml(&text).py_err()?, clock)
    }

    /// A governor from JSON text.
    #[staticmethod]
    #[pyo3(signature = (text, clock = None, **extra), text_signature = "(text, clock='monotonic')")]
    fn from_json(
        py: Python<'_>,
        text: &Bound<'_, PyAny>,
        clock: Option<&Bound<'_, PyAny>>,
        extra: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        no_unknown("Governor.from_json", extra)?;
        let text = config_source::text(py, "text", text)?;
        Self::build(py, Config::from_json(&text).py_err()?, clock)
    }

    /// A governor from a config dict (the JSON form of the TOML config).
    #[staticmethod]
    #[pyo3(signature = (config, clock = None, **extra), text_signature = "(config, clock='monotonic')")]
    fn from_dict(
        py: Python<'_>,
        config: &Bound<'_, PyAny>,
        clock: Option<&Bound<'_, PyAny>>,
        extra: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        no_unknown("Governor.from_dict", extra)?;
        let value = config_source::dict_value(py, config)?;
        Self::build(py, Config::from_value(value).py_err()?, clock)
    }

    /// A governor from a shipped preset, e.g. `openai-gpt-4o-tier1`.
    #[staticmethod]
    #[pyo3(signature = (name, clock = None, **extra), text_signature = "(name, clock='monotonic')")]
    fn from_preset(
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
        clock: Option<&Bound<'_, PyAny>>,
        extra: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        no_unknown("Governor.from_preset", extra)?;
        let name = config_source::text(py, "name", name)?;
        Self::build(py, llmgov::config::Config::preset(&name).py_err()?, clock)
    }

    /// Moves a manual clock forward by `ms` milliseconds.
    #[pyo3(signature = (ms, **extra), text_signature = "($self, ms)")]
    fn advance(&self, py: Python<'_>, ms: &Bound<'_, PyAny>, extra: Option<&Bound<'_, PyDict>>) -> PyResult<()> {
        no_unknown("Governor.advance", extra)?;
        config_source::advance(py, self.manual.as_deref(), ms)?;
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
    #[pyo3(signature = (paths, **extra), text_signature = "($self, paths)")]
    fn route<'py>(
        &self,
        py: Python<'py>,
        paths: &Bound<'py, PyAny>,
        extra: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyRoute>> {
        no_unknown("Governor.route", extra)?;
        self.cached_route(py, paths)
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
        let request = request_args.request(py, &this.gov, route)?;
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
    ) -> PyResult<Bound<'py, Acquiring>> {
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
    #[pyo3(signature = (name, paths = None, **extra), text_signature = "($self, name, paths=None)")]
    fn profile(
        slf: &Bound<'_, Self>,
        name: &Bound<'_, PyAny>,
        paths: Option<&Bound<'_, PyAny>>,
        extra: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyProfile>> {
        no_unknown("Governor.profile", extra)?;
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
    ) -> PyResult<Bound<'py, Acquiring>> {
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
    #[pyo3(signature = (hook, **extra), text_signature = "($self, hook)")]
    fn set_event_hook(&self, hook: &Bound<'_, PyAny>, extra: Option<&Bound<'_, PyDict>>) -> PyResult<()> {
        no_unknown("Governor.set_event_hook", extra)?;
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

    /// Everything observable now, in one dict: `snapshot` (as `snapshot()`),
    /// `queues` (as `queue_metrics()`), `refusals` (per dimension and
    /// `gateway_decision`), `estimate_errors` (per provider route and side)
    /// and `retry_amplification`. `prometheus()` is drawn from the same
    /// value, and `json.dumps` of it is what `llmgov top FILE` reads.
    fn metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_python(py, &self.gov.metrics())
    }

    fn __repr__(&self) -> String {
        let clock = if self.manual.is_some() { "manual" } else { "monotonic" };
        format!("Governor(clock={clock:?}, scopes={})", self.gov.snapshot().scopes.len())
    }
}
