//! Arguments from Python, checked: a wrong type, a negative number or an
//! unknown keyword is an `InvalidRequest` naming the field and the value,
//! never a bare `TypeError` or `OverflowError`.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyString};

use crate::errors::invalid;

/// A non-negative integer argument, or `None` when it is absent or `None`.
#[inline]
pub fn count(field: &str, value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<u64>> {
    match value {
        None => Ok(None),
        Some(v) if v.is_none() => Ok(None),
        Some(v) => count_of(field, v).map(Some),
    }
}

/// A non-negative integer.
#[inline]
pub fn count_of(field: &str, value: &Bound<'_, PyAny>) -> PyResult<u64> {
    if value.is_instance_of::<PyInt>() && !value.is_instance_of::<PyBool>() {
        if let Ok(n) = value.extract::<u64>() {
            return Ok(n);
        }
        let negative = value.lt(0).unwrap_or(false);
        let reason = if negative { "must not be negative" } else { "is too large (more than 2^64 - 1)" };
        return Err(invalid(field, value, reason));
    }
    Err(invalid(field, value, format!("must be a non-negative integer, not {}", type_name(value))))
}

/// An int or a float (not a bool, which Python counts as an int), as f64.
pub fn number(value: &Bound<'_, PyAny>) -> Option<f64> {
    if value.is_instance_of::<PyBool>() {
        return None;
    }
    if value.is_instance_of::<PyFloat>() {
        return value.extract::<f64>().ok();
    }
    if !value.is_instance_of::<PyInt>() {
        return None;
    }
    // An int past a float's range (10**400) is a number, infinitely large:
    // refused as too large, not as "not a number".
    value.extract::<f64>().ok().or_else(|| {
        let negative = value.lt(0).unwrap_or(false);
        Some(if negative { f64::NEG_INFINITY } else { f64::INFINITY })
    })
}

/// A non-negative number of milliseconds (int or float).
pub fn millis(field: &str, value: &Bound<'_, PyAny>) -> PyResult<f64> {
    match number(value) {
        Some(ms) if ms.is_finite() && ms >= 0.0 => Ok(ms),
        Some(_) => Err(invalid(field, value, "must be a finite, non-negative number of milliseconds")),
        None => Err(invalid(field, value, format!("must be a number of milliseconds, not {}", type_name(value)))),
    }
}

/// An optional string argument.
pub fn string(field: &str, value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<String>> {
    match value {
        None => Ok(None),
        Some(v) if v.is_none() => Ok(None),
        Some(v) => text(v).map(Some).map_err(|reason| invalid(field, v, reason)),
    }
}

/// A `str` as UTF-8 text, or why it is not one (another type, or a lone
/// surrogate, which UTF-8 cannot hold), for the caller to name the field.
pub fn text(value: &Bound<'_, PyAny>) -> Result<String, String> {
    let Ok(string) = value.cast::<PyString>() else {
        return Err(format!("must be a string, not {}", type_name(value)));
    };
    string.to_cow().map(|text| text.into_owned()).map_err(|_| LONE_SURROGATE.to_owned())
}

/// Why a `str` holding a lone surrogate (`"\udcff"`) is refused.
pub const LONE_SURROGATE: &str = "is not valid Unicode (lone surrogates)";

/// A flag: `True` or `False` (not 1, not "yes"); `default` when absent or None.
pub fn flag(field: &str, value: Option<&Bound<'_, PyAny>>, default: bool) -> PyResult<bool> {
    match value.filter(|v| !v.is_none()) {
        None => Ok(default),
        Some(v) => match v.cast::<PyBool>() {
            Ok(b) => Ok(b.is_true()),
            Err(_) => Err(invalid(field, v, format!("must be True or False, not {}", type_name(v)))),
        },
    }
}

/// Refuses keyword arguments the function does not know, naming the first.
pub fn no_unknown(function: &str, extra: Option<&Bound<'_, PyDict>>) -> PyResult<()> {
    if let Some((key, value)) = extra.and_then(|extra| extra.iter().next()) {
        let field = key.str().map(|k| k.to_string()).unwrap_or_default();
        return Err(invalid(&field, &value, format!("{function}() has no argument `{field}`")));
    }
    Ok(())
}

/// The value's Python type name, for messages.
pub fn type_name(value: &Bound<'_, PyAny>) -> String {
    value.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".to_owned())
}
