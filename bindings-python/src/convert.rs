//! JSON values across the boundary: core results (snapshots,
//! classifications, advice) become Python dicts, and Python data (tool
//! schemas, config dicts) becomes JSON.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::{Map, Number, Value};

/// Converts a serializable core value into plain Python objects.
pub fn to_python<'py, T: serde::Serialize>(py: Python<'py>, value: &T) -> PyResult<Bound<'py, PyAny>> {
    let json = serde_json::to_value(value).map_err(|e| PyValueError::new_err(e.to_string()))?;
    value_to_python(py, &json)
}

/// A JSON value as plain Python objects (dict, list, str, int, float, bool, None).
pub fn value_to_python<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => u.into_pyobject(py)?.into_any(),
            (None, Some(i)) => i.into_pyobject(py)?.into_any(),
            _ => PyFloat::new(py, n.as_f64().unwrap_or(f64::NAN)).into_any(),
        },
        Value::String(s) => PyString::new(py, s).into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(value_to_python(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(map) => {
            let dict = PyDict::new(py);
            for (key, item) in map {
                dict.set_item(key, value_to_python(py, item)?)?;
            }
            dict.into_any()
        }
    })
}

/// How deep Python data may nest before it is refused (guards recursion on
/// self-referencing containers).
const MAX_DEPTH: usize = 64;

/// Plain Python data as JSON; `Err` says what could not be converted.
pub fn python_to_value(value: &Bound<'_, PyAny>) -> Result<Value, String> {
    to_value(value, 0)
}

fn to_value(value: &Bound<'_, PyAny>, depth: usize) -> Result<Value, String> {
    if depth > MAX_DEPTH {
        return Err(format!("nested deeper than {MAX_DEPTH} levels"));
    }
    if value.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(b) = value.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if value.is_instance_of::<PyInt>() {
        if let Ok(u) = value.extract::<u64>() {
            return Ok(Value::Number(u.into()));
        }
        return value.extract::<i64>().map(|i| Value::Number(i.into())).map_err(|_| "an integer out of range".into());
    }
    if let Ok(f) = value.cast::<PyFloat>() {
        return Number::from_f64(f.value()).map(Value::Number).ok_or_else(|| "a non-finite float".into());
    }
    if let Ok(s) = value.cast::<PyString>() {
        let text = s.to_cow().map_err(|_| format!("a string that {}", crate::args::LONE_SURROGATE))?;
        return Ok(Value::String(text.into_owned()));
    }
    if let Ok(dict) = value.cast::<PyDict>() {
        let mut map = Map::new();
        for (key, item) in dict.iter() {
            let key = match key.cast::<PyString>() {
                Ok(key) => key.to_cow().map_err(|_| format!("a dict key that {}", crate::args::LONE_SURROGATE))?,
                Err(_) => return Err("a dict key that is not a string".to_owned()),
            };
            let key = key.into_owned();
            map.insert(key, to_value(&item, depth + 1)?);
        }
        return Ok(Value::Object(map));
    }
    if value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>() {
        let items = value.try_iter().map_err(|e| e.to_string())?;
        return items
            .map(|item| item.map_err(|e| e.to_string()).and_then(|i| to_value(&i, depth + 1)))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array);
    }
    let type_name = crate::args::type_name(value);
    Err(format!("a value of type {type_name}, which is not JSON data"))
}
