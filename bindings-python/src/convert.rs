//! JSON values across the boundary: core results (snapshots,
//! classifications, advice) become Python dicts, and Python data (tool
//! schemas, config dicts) becomes JSON.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{
    PyBool, PyByteArray, PyBytes, PyDict, PyFloat, PyInt, PyList, PyMapping, PySequence, PyString, PyTuple,
};
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

/// A value of Python data that has no JSON form: where it sits (`path`,
/// as the core names config fields: `scopes.a.limits[0].amount`, empty at
/// the top), what it is, and why.
pub struct Unconvertible {
    pub path: String,
    pub value: String,
    pub reason: String,
}

/// Plain Python data as JSON; `Err` says what could not be converted, and where.
pub fn python_to_value(value: &Bound<'_, PyAny>) -> Result<Value, Unconvertible> {
    let mut path = String::new();
    to_value(value, &mut path, 0).map_err(|(shown, reason)| Unconvertible { path, value: shown, reason })
}

/// [`python_to_value`] at `path`, which is left where the failure is.
fn to_value(value: &Bound<'_, PyAny>, path: &mut String, depth: usize) -> Result<Value, (String, String)> {
    let fail = |reason: String| (value.str().map(|s| s.to_string()).unwrap_or_default(), reason);
    if depth > MAX_DEPTH {
        return Err(("…".into(), format!("nested deeper than {MAX_DEPTH} levels")));
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
        return value
            .extract::<i64>()
            .map(|i| Value::Number(i.into()))
            .map_err(|_| fail("is an integer out of range".into()));
    }
    if let Ok(f) = value.cast::<PyFloat>() {
        return Number::from_f64(f.value()).map(Value::Number).ok_or_else(|| fail("must be a finite number".into()));
    }
    if let Ok(s) = value.cast::<PyString>() {
        let text =
            s.to_cow().map_err(|_| (String::new(), format!("is a string that {}", crate::args::LONE_SURROGATE)))?;
        return Ok(Value::String(text.into_owned()));
    }
    if let Ok(dict) = value.cast::<PyDict>() {
        return object(dict.iter().map(Ok), path, depth);
    }
    // Bytes are a Sequence of ints to Python, not JSON data.
    if value.is_instance_of::<PyBytes>() || value.is_instance_of::<PyByteArray>() {
        let type_name = crate::args::type_name(value);
        return Err(fail(format!("is a value of type {type_name}, which is not JSON data")));
    }
    if value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>() {
        return array(value, path, depth);
    }
    // The stubs take any Mapping and Sequence (a MappingProxyType, a
    // UserList), as plain data.
    if let Ok(mapping) = value.cast::<PyMapping>() {
        let items = mapping.items().map_err(|e| fail(e.to_string()))?;
        return object(items.iter().map(|pair| pair.extract::<(Bound<'_, PyAny>, Bound<'_, PyAny>)>()), path, depth);
    }
    if value.cast::<PySequence>().is_ok() {
        return array(value, path, depth);
    }
    let type_name = crate::args::type_name(value);
    Err(fail(format!("is a value of type {type_name}, which is not JSON data")))
}

/// The `(key, item)` pairs of a dict or other mapping, as a JSON object.
fn object<'py>(
    pairs: impl Iterator<Item = PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)>>,
    path: &mut String,
    depth: usize,
) -> Result<Value, (String, String)> {
    let mut map = Map::new();
    for pair in pairs {
        let (key, item) = pair.map_err(|e| (String::new(), e.to_string()))?;
        let key = match key.cast::<PyString>() {
            Ok(key) => key
                .to_cow()
                .map_err(|_| (String::new(), format!("has a dict key that {}", crate::args::LONE_SURROGATE)))?,
            Err(_) => {
                return Err((
                    key.repr().map(|r| r.to_string()).unwrap_or_default(),
                    "is a dict key that is not a string".to_owned(),
                ))
            }
        };
        let len = path.len();
        if len > 0 {
            path.push('.');
        }
        path.push_str(&key);
        let item = to_value(&item, path, depth + 1)?;
        path.truncate(len);
        map.insert(key.into_owned(), item);
    }
    Ok(Value::Object(map))
}

/// The items of a list, tuple or other sequence, as a JSON array.
fn array(value: &Bound<'_, PyAny>, path: &mut String, depth: usize) -> Result<Value, (String, String)> {
    let fail = |e: PyErr| (value.str().map(|s| s.to_string()).unwrap_or_default(), e.to_string());
    let mut array = Vec::new();
    for (index, item) in value.try_iter().map_err(fail)?.enumerate() {
        let item = item.map_err(fail)?;
        let len = path.len();
        path.push_str(&format!("[{index}]"));
        array.push(to_value(&item, path, depth + 1)?);
        path.truncate(len);
    }
    Ok(Value::Array(array))
}
