//! Provider answers: `classify_response`, headers in any form, and the
//! core's retry advice (`RetryPolicy`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use llmgov::feedback::{classify_response as classify, BudgetConfig, Outcome, ProviderHint, RetryConfig, RetryPolicy};
use llmgov::{Classification, Clock, MonotonicClock};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};

use crate::args::{self, no_unknown, type_name};
use crate::convert::to_python;
use crate::errors::{invalid, IntoPyResult};

/// Header names and values as bytes, in order, repeats kept.
pub type HeaderPairs = Vec<(Vec<u8>, Vec<u8>)>;

/// Header pairs from a dict, an `httpx.Headers`, or a list of pairs; names
/// and values may be `str` or `bytes`.
pub fn headers(value: Option<&Bound<'_, PyAny>>) -> PyResult<HeaderPairs> {
    let Some(value) = value.filter(|v| !v.is_none()) else { return Ok(Vec::new()) };
    // httpx.Headers keeps the raw pairs, repeated headers included.
    let pairs = if let Some(raw) = value.getattr_opt("raw")?.filter(|_| !value.is_instance_of::<PyDict>()) {
        raw
    } else if let Some(items) = value.getattr_opt("items")? {
        items.call0()?
    } else {
        value.clone()
    };
    let iter = pairs
        .try_iter()
        .map_err(|_| invalid("headers", value, format!("must be a mapping or pairs, not {}", type_name(value))))?;
    let mut out = Vec::new();
    for pair in iter {
        let pair = pair?;
        let (name, val): (Bound<'_, PyAny>, Bound<'_, PyAny>) =
            pair.extract().map_err(|_| invalid("headers", &pair, "every header must be a (name, value) pair"))?;
        out.push((bytes_of("headers", &name)?, bytes_of("headers", &val)?));
    }
    Ok(out)
}

/// A body or header given as `bytes`, `bytearray` or `str`.
pub fn bytes_of(field: &str, value: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if let Ok(b) = value.cast::<PyBytes>() {
        return Ok(b.as_bytes().to_vec());
    }
    if let Ok(s) = value.cast::<PyString>() {
        let text = s.to_cow().map_err(|_| invalid(field, value, args::LONE_SURROGATE))?;
        return Ok(text.as_bytes().to_vec());
    }
    if let Ok(v) = value.extract::<Vec<u8>>() {
        return Ok(v);
    }
    Err(invalid(field, value, format!("must be bytes or str, not {}", type_name(value))))
}

/// An HTTP status: an int from 100 to 999.
pub fn status_of(value: &Bound<'_, PyAny>) -> PyResult<u16> {
    match args::count_of("status", value)? {
        n @ 100..=999 => Ok(n as u16),
        _ => Err(invalid("status", value, "must be an HTTP status from 100 to 999")),
    }
}

/// The wall clock in Unix milliseconds, for resets given as dates.
pub fn wall_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// The `provider` argument (`"auto"` when not given) as the core's hint.
fn hint(py: Python<'_>, provider: Option<&Bound<'_, PyAny>>) -> PyResult<ProviderHint> {
    const KNOWN: &str = "must be auto, openai, azure, groq, anthropic, gemini, bedrock, mistral, openrouter, \
                         deepseek, together or cohere";
    let Some(given) = provider.filter(|p| !p.is_none()) else { return Ok(ProviderHint::default()) };
    let name = args::text(given).map_err(|reason| invalid("provider", given, format!("{reason}; it {KNOWN}")))?;
    serde_json::from_value(serde_json::Value::String(name.clone()))
        .map_err(|_| crate::errors::invalid_text(py, "provider", &name, KNOWN.to_owned()))
}

/// Classifies an answer; the shared part of `classify_response` and `RetryPolicy.advise`.
fn classified(
    py: Python<'_>,
    status: &Bound<'_, PyAny>,
    headers_value: Option<&Bound<'_, PyAny>>,
    body: Option<&Bound<'_, PyAny>>,
    provider: Option<&Bound<'_, PyAny>>,
) -> PyResult<(u16, Classification)> {
    let status = status_of(status)?;
    let headers = headers(headers_value)?;
    let body = match body.filter(|b| !b.is_none()) {
        Some(b) => bytes_of("body", b)?,
        None => Vec::new(),
    };
    Ok((status, classify(status, &headers, &body, hint(py, provider)?, wall_ms())))
}

/// What a provider's answer says about its limits, as a dict: `limited`,
/// `kind`, `dimension`, `retry_after_ms`, `remaining`, `limit`, `reset_ms`,
/// `retryable`, `provider`, `status` (the HTTP status it was read as).
#[pyfunction]
#[pyo3(signature = (status, headers = None, body = None, provider = None, **extra),
    text_signature = "(status, headers=None, body=None, provider='auto')")]
pub fn classify_response<'py>(
    py: Python<'py>,
    status: &Bound<'py, PyAny>,
    headers: Option<&Bound<'py, PyAny>>,
    body: Option<&Bound<'py, PyAny>>,
    provider: Option<&Bound<'py, PyAny>>,
    extra: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    no_unknown("classify_response", extra)?;
    let (_, classification) = classified(py, status, headers, body, provider)?;
    to_python(py, &classification)
}

/// Whether and when to retry a failed attempt: full-jitter backoff, the
/// provider's retry-after, a retry budget shared by every caller of this
/// policy, and a deadline.
#[pyclass(name = "RetryPolicy", module = "llmgov._llmgov", frozen)]
pub struct PyRetryPolicy {
    policy: RetryPolicy,
    clock: MonotonicClock,
    random: fastrand_cell::Cell,
}

/// A thread-safe source of jitter.
mod fastrand_cell {
    use std::sync::Mutex;

    /// A seeded generator behind a lock (advice is off the hot path).
    pub struct Cell(Mutex<fastrand::Rng>);

    impl Cell {
        pub fn new() -> Self {
            Cell(Mutex::new(fastrand::Rng::new()))
        }

        pub fn next(&self) -> u64 {
            self.0.lock().map(|mut rng| rng.u64(..)).unwrap_or(u64::MAX / 2)
        }
    }
}

fn millis_duration(field: &str, value: Option<&Bound<'_, PyAny>>, default: Duration) -> PyResult<Duration> {
    match value.filter(|v| !v.is_none()) {
        Some(v) => Ok(Duration::from_nanos((args::millis(field, v)? * 1e6).round() as u64)),
        None => Ok(default),
    }
}

#[pymethods]
impl PyRetryPolicy {
    /// A policy; every argument defaults to the core's default (2 retries,
    /// 500 ms base, 8 s cap, 10% budget over 60 s with at least 10 retries).
    #[new]
    #[pyo3(signature = (*, max_retries = None, base_delay_ms = None, max_delay_ms = None,
        budget_ratio = None, budget_min_retries = None, budget_window_ms = None, **extra),
        text_signature = "(*, max_retries=None, base_delay_ms=None, max_delay_ms=None, budget_ratio=None, \
                          budget_min_retries=None, budget_window_ms=None)")]
    fn new(
        max_retries: Option<&Bound<'_, PyAny>>,
        base_delay_ms: Option<&Bound<'_, PyAny>>,
        max_delay_ms: Option<&Bound<'_, PyAny>>,
        budget_ratio: Option<&Bound<'_, PyAny>>,
        budget_min_retries: Option<&Bound<'_, PyAny>>,
        budget_window_ms: Option<&Bound<'_, PyAny>>,
        extra: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        no_unknown("RetryPolicy", extra)?;
        let defaults = RetryConfig::default();
        let small = |field: &str, v: Option<&Bound<'_, PyAny>>, default: u32| -> PyResult<u32> {
            match args::count(field, v)? {
                Some(n) => u32::try_from(n).map_err(|_| invalid(field, v.expect("given"), "is too large")),
                None => Ok(default),
            }
        };
        let ratio = match budget_ratio.filter(|v| !v.is_none()) {
            Some(v) => args::number(v).ok_or_else(|| invalid("budget_ratio", v, "must be a number in [0, 1]"))?,
            None => defaults.budget.ratio,
        };
        let config = RetryConfig {
            max_retries: small("max_retries", max_retries, defaults.max_retries)?,
            base_delay: millis_duration("base_delay_ms", base_delay_ms, defaults.base_delay)?,
            max_delay: millis_duration("max_delay_ms", max_delay_ms, defaults.max_delay)?,
            budget: BudgetConfig {
                window: millis_duration("budget_window_ms", budget_window_ms, defaults.budget.window)?,
                ratio,
                min_retries: small("budget_min_retries", budget_min_retries, defaults.budget.min_retries)?,
            },
        };
        Ok(PyRetryPolicy {
            policy: RetryPolicy::new(config).py_err()?,
            clock: MonotonicClock::new(),
            random: fastrand_cell::Cell::new(),
        })
    }

    /// Counts one request (a first attempt) in the retry budget.
    fn record_request(&self) {
        self.policy.record_request(self.clock.now());
    }

    /// Advice on an answer that failed: `{"advice": "retry_after",
    /// "delay_ms": ..., "reason": {...}}` or `{"advice": "give_up",
    /// "reason": {...}}`. `attempt` counts the retries already made;
    /// `deadline_ms` is how long from now the retry may still start.
    #[pyo3(signature = (status, headers = None, body = None, *, attempt, deadline_ms = None, provider = None, **extra),
        text_signature = "($self, status, headers=None, body=None, *, attempt, deadline_ms=None, provider='auto')")]
    #[allow(clippy::too_many_arguments)]
    fn advise<'py>(
        &self,
        py: Python<'py>,
        status: &Bound<'py, PyAny>,
        headers: Option<&Bound<'py, PyAny>>,
        body: Option<&Bound<'py, PyAny>>,
        attempt: &Bound<'py, PyAny>,
        deadline_ms: Option<&Bound<'py, PyAny>>,
        provider: Option<&Bound<'py, PyAny>>,
        extra: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        no_unknown("RetryPolicy.advise", extra)?;
        let (status, classification) = classified(py, status, headers, body, provider)?;
        self.advice(py, Outcome::response(status, &classification), attempt, deadline_ms)
    }

    /// Advice after a connection failure (no answer arrived).
    #[pyo3(signature = (*, attempt, deadline_ms = None, **extra),
        text_signature = "($self, *, attempt, deadline_ms=None)")]
    fn advise_connection_error<'py>(
        &self,
        py: Python<'py>,
        attempt: &Bound<'py, PyAny>,
        deadline_ms: Option<&Bound<'py, PyAny>>,
        extra: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        no_unknown("RetryPolicy.advise_connection_error", extra)?;
        self.advice(py, Outcome::ConnectionError, attempt, deadline_ms)
    }

    /// Retries still allowed by the budget in the current window.
    fn budget_available(&self) -> u64 {
        self.policy.budget().available(self.clock.now())
    }
}

impl PyRetryPolicy {
    fn advice<'py>(
        &self,
        py: Python<'py>,
        outcome: Outcome<'_>,
        attempt: &Bound<'py, PyAny>,
        deadline_ms: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let attempt = u32::try_from(args::count_of("attempt", attempt)?)
            .map_err(|_| invalid("attempt", attempt, "is too large"))?;
        let now = self.clock.now();
        let deadline = match deadline_ms.filter(|v| !v.is_none()) {
            Some(v) => Some(now.saturating_add((args::millis("deadline_ms", v)? * 1e6).round() as u64)),
            None => None,
        };
        let advice = self.policy.advise(outcome, attempt, deadline, now, self.random.next());
        to_python(py, &advice)
    }
}
