//! The one place where llmgov's errors become Python exceptions.
//!
//! Every exception derives from `llmgov.Error` and carries `code`, the core's
//! stable `Error::code()`. Denials carry what a caller needs to act:
//! `RateLimited` has `retry_after` (seconds, or `None` when it waits on a
//! release), `retry_after_ms`, `scope`, `dimension` and `gateway_decision`;
//! `NeverFits` has `scope`, `dimension`, `cost` and `burst`. Bad input names
//! the field and the value (`field`, `value`), whether the core or this
//! binding found it. The Redis backend's errors (`llmgov_redis::Error`) map
//! onto the same classes, plus `AlreadyReconciled`.

use llmgov::feedback::{ErrorContext, ErrorObject};
use std::time::Duration;

use llmgov::Error as CoreError;
use llmgov_redis::Error as RedisError;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyType;
use pyo3::{create_exception, PyTypeInfo};

create_exception!(llmgov, Error, PyException, "Base of every llmgov error; `code` is the stable error code.");
create_exception!(llmgov, RateLimited, Error, "The request fits in principle but not now; nothing was reserved.");
create_exception!(llmgov, NeverFits, Error, "The request costs more than a limit can ever hold: waiting never helps.");
create_exception!(llmgov, ConfigError, Error, "A configuration field is wrong; nothing was built.");
create_exception!(llmgov, InvalidPath, Error, "A scope path is malformed.");
create_exception!(llmgov, UnknownScope, Error, "No configured scope or template covers the path.");
create_exception!(llmgov, UnknownPreset, Error, "No preset has this name.");
create_exception!(llmgov, InvalidRequest, Error, "A request argument is of the wrong type or out of range.");
create_exception!(llmgov, PermitFinished, Error, "The permit was already settled or cancelled.");
create_exception!(llmgov, PermitExpired, Error, "The permit outlived its TTL and was charged as estimated.");
create_exception!(llmgov, DeadlineExceeded, Error, "A waiting request was not admitted within its deadline.");
create_exception!(llmgov, QueueFull, Error, "The request's traffic class has as many waiters as its queue allows.");
create_exception!(llmgov, CircuitOpen, Error, "A provider scope's circuit breaker is open after consecutive failures.");
create_exception!(llmgov, AlreadyReconciled, Error, "A RedisGovernor permit was already settled or cancelled.");

/// Each exception class with the code its instances carry, registered in
/// the module and given a class-level `code`.
fn classes(py: Python<'_>) -> [(Bound<'_, PyType>, &'static str); 14] {
    [
        (Error::type_object(py), "error"),
        (RateLimited::type_object(py), "rate_limited"),
        (NeverFits::type_object(py), "never_fits"),
        (ConfigError::type_object(py), "invalid_config"),
        (InvalidPath::type_object(py), "invalid_path"),
        (UnknownScope::type_object(py), "unknown_scope"),
        (UnknownPreset::type_object(py), "unknown_preset"),
        (InvalidRequest::type_object(py), "invalid_request"),
        (PermitFinished::type_object(py), "permit_finished"),
        (PermitExpired::type_object(py), "permit_expired"),
        (DeadlineExceeded::type_object(py), "deadline_exceeded"),
        (QueueFull::type_object(py), "queue_full"),
        (CircuitOpen::type_object(py), "circuit_open"),
        (AlreadyReconciled::type_object(py), "already_reconciled"),
    ]
}

/// Adds the exception tree to the module.
pub fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = module.py();
    for (class, code) in classes(py) {
        class.setattr("code", code)?;
        module.add(class.name()?, class)?;
    }
    Ok(())
}

/// The Python exception for a core error, with its fields as attributes.
pub fn to_py(error: CoreError) -> PyErr {
    Python::attach(|py| build(py, &error).unwrap_or_else(|e| e))
}

fn build(py: Python<'_>, error: &CoreError) -> PyResult<PyErr> {
    let message = error.to_string();
    let err = match refusal(py, error, &message)? {
        Some(err) => err,
        None => not_a_refusal(py, error, message)?,
    };
    if !matches!(error, CoreError::RateLimited { .. } | CoreError::NeverFits { .. }) {
        err.value(py).setattr("code", error.code())?;
    }
    Ok(err)
}

/// A request refused, with what the caller needs to act on it; `None` for
/// any other error.
fn refusal(py: Python<'_>, error: &CoreError, message: &str) -> PyResult<Option<PyErr>> {
    let message = message.to_owned();
    Ok(Some(match error {
        CoreError::RateLimited { scope, dimension, retry_after, .. } => {
            let err = RateLimited::new_err(message);
            let value = err.value(py);
            value.setattr("scope", &**scope)?;
            value.setattr("dimension", dimension.as_str())?;
            value.setattr("retry_after", retry_after.map(|d| d.as_secs_f64()))?;
            value.setattr("retry_after_ms", retry_after.map(llmgov::ceil_ms))?;
            set_gateway_decision(py, &err, error)?;
            err
        }
        CoreError::NeverFits { scope, dimension, cost, burst, .. } => {
            let err = NeverFits::new_err(message);
            let value = err.value(py);
            value.setattr("scope", &**scope)?;
            value.setattr("dimension", dimension.as_str())?;
            value.setattr("cost", *cost)?;
            value.setattr("burst", *burst)?;
            set_gateway_decision(py, &err, error)?;
            err
        }
        CoreError::DeadlineExceeded { waited, retry_after, .. } => {
            deadline_exceeded(py, message, *waited, *retry_after)?
        }
        CoreError::CircuitOpen { scope, retry_after, .. } => {
            let err = CircuitOpen::new_err(message);
            let value = err.value(py);
            value.setattr("scope", &**scope)?;
            value.setattr("retry_after", retry_after.as_secs_f64())?;
            value.setattr("retry_after_ms", llmgov::ceil_ms(*retry_after))?;
            err
        }
        CoreError::QueueFull { class, bound, retry_after, .. } => {
            let err = QueueFull::new_err(message);
            let value = err.value(py);
            value.setattr("klass", &**class)?;
            value.setattr("bound", *bound)?;
            value.setattr("retry_after", retry_after.map(|d| d.as_secs_f64()))?;
            value.setattr("retry_after_ms", retry_after.map(llmgov::ceil_ms))?;
            err
        }
        _ => return Ok(None),
    }))
}

/// Bad input, or a permit in the wrong state.
fn not_a_refusal(py: Python<'_>, error: &CoreError, message: String) -> PyResult<PyErr> {
    Ok(match error {
        CoreError::InvalidConfig { field, value, reason } => {
            with_field(py, ConfigError::new_err(message), field, value, reason)?
        }
        CoreError::InvalidRequest { field, value, reason } => {
            with_field(py, InvalidRequest::new_err(message), field, value, reason)?
        }
        CoreError::InvalidPath { path, reason } => {
            let err = InvalidPath::new_err(message);
            err.value(py).setattr("path", path)?;
            err.value(py).setattr("reason", reason)?;
            err
        }
        CoreError::UnknownScope { path } => {
            let err = UnknownScope::new_err(message);
            err.value(py).setattr("path", path)?;
            err
        }
        CoreError::UnknownPreset { name, known } => {
            let err = UnknownPreset::new_err(message);
            err.value(py).setattr("name", name)?;
            let known: Vec<&str> = known.split(',').map(str::trim).collect();
            err.value(py).setattr("known", known)?;
            err
        }
        CoreError::PermitFinished { state } => {
            let err = PermitFinished::new_err(message);
            err.value(py).setattr("state", state.to_string())?;
            err
        }
        CoreError::PermitExpired => PermitExpired::new_err(message),
        // The core's enum is non-exhaustive: a variant this binding does not
        // know yet still reaches Python as an llmgov.Error with its code.
        _ => Error::new_err(message),
    })
}

fn with_field(py: Python<'_>, err: PyErr, field: &str, value: &str, reason: &str) -> PyResult<PyErr> {
    let instance = err.value(py);
    instance.setattr("field", field)?;
    instance.setattr("value", value)?;
    instance.setattr("reason", reason)?;
    Ok(err)
}

fn set_gateway_decision(py: Python<'_>, err: &PyErr, error: &CoreError) -> PyResult<()> {
    let decision = ErrorObject::from_local_denial(error, &ErrorContext::new()).map(|o| o.gateway_decision);
    let name = match decision {
        Some(llmgov::feedback::GatewayDecision::AdmittedThenProviderRejected) => "admitted_then_provider_rejected",
        _ => "rejected_locally",
    };
    err.value(py).setattr("gateway_decision", name)
}

/// An `InvalidRequest` found by this binding (wrong type, negative number,
/// unknown key): it names the field and shows the value as Python writes it.
pub fn invalid(field: &str, value: &Bound<'_, PyAny>, reason: impl Into<String>) -> PyErr {
    let shown = value.repr().map(|r| r.to_string()).unwrap_or_else(|_| "<unprintable>".to_owned());
    invalid_text(value.py(), field, &shown, reason.into())
}

/// [`invalid`] for a value already shown as text.
pub fn invalid_text(py: Python<'_>, field: &str, value: &str, reason: String) -> PyErr {
    let message = format!("invalid request: `{field}` = `{value}`: {reason}");
    tagged(py, InvalidRequest::new_err(message), "invalid_request", field, value, &reason)
}

/// A `ConfigError` found by this binding (e.g. a config dict that is not
/// JSON-serializable, or an unknown clock).
pub fn config(py: Python<'_>, field: &str, value: &str, reason: String) -> PyErr {
    let message = format!("invalid config: `{field}` = `{value}`: {reason}");
    tagged(py, ConfigError::new_err(message), "invalid_config", field, value, &reason)
}

fn tagged(py: Python<'_>, err: PyErr, code: &str, field: &str, value: &str, reason: &str) -> PyErr {
    match with_field(py, err, field, value, reason) {
        Ok(err) => match err.value(py).setattr("code", code) {
            Ok(()) => err,
            Err(e) => e,
        },
        Err(e) => e,
    }
}

/// `DeadlineExceeded`, from the local queue or a Redis waiter alike.
fn deadline_exceeded(
    py: Python<'_>,
    message: String,
    waited: Duration,
    retry_after: Option<Duration>,
) -> PyResult<PyErr> {
    let err = DeadlineExceeded::new_err(message);
    let value = err.value(py);
    value.setattr("waited_ms", llmgov::ceil_ms(waited))?;
    value.setattr("retry_after", retry_after.map(|d| d.as_secs_f64()))?;
    value.setattr("retry_after_ms", retry_after.map(llmgov::ceil_ms))?;
    Ok(err)
}

/// The Python exception for an error of the Redis backend: its denials and
/// config errors as the core's classes (same attributes), the core's own
/// errors as [`to_py`] maps them.
pub fn redis_to_py(error: RedisError) -> PyErr {
    Python::attach(|py| build_redis(py, error).unwrap_or_else(|e| e))
}

fn build_redis(py: Python<'_>, error: RedisError) -> PyResult<PyErr> {
    let message = error.to_string();
    let err = match error {
        RedisError::RateLimited { scope, dimension, retry_after } => {
            let err = RateLimited::new_err(message);
            let value = err.value(py);
            value.setattr("scope", &*scope)?;
            value.setattr("dimension", dimension.as_str())?;
            value.setattr("retry_after", retry_after.map(|d| d.as_secs_f64()))?;
            value.setattr("retry_after_ms", retry_after.map(llmgov::ceil_ms))?;
            // Refused before the request left, like every local denial.
            value.setattr("gateway_decision", "rejected_locally")?;
            err
        }
        RedisError::NeverFits { scope, dimension, cost, burst } => {
            let err = NeverFits::new_err(message);
            let value = err.value(py);
            value.setattr("scope", &*scope)?;
            value.setattr("dimension", dimension.as_str())?;
            value.setattr("cost", cost)?;
            value.setattr("burst", burst)?;
            value.setattr("gateway_decision", "rejected_locally")?;
            err
        }
        RedisError::InvalidConfig { field, value, reason } => {
            tagged(py, ConfigError::new_err(message), "invalid_config", &field, &value, &reason)
        }
        RedisError::DeadlineExceeded { waited, retry_after } => deadline_exceeded(py, message, waited, retry_after)?,
        RedisError::AlreadyReconciled => AlreadyReconciled::new_err(message),
        RedisError::Core(core) => build(py, &core)?,
    };
    Ok(err)
}

impl<T> IntoPyResult<T> for Result<T, RedisError> {
    #[inline]
    fn py_err(self) -> PyResult<T> {
        self.map_err(redis_to_py)
    }
}

/// Maps core results to Python ones.
pub trait IntoPyResult<T> {
    /// The value, or the mapped exception.
    fn py_err(self) -> PyResult<T>;
}

impl<T> IntoPyResult<T> for Result<T, CoreError> {
    #[inline]
    fn py_err(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}
