//! What `report` takes, on a local and a Redis permit alike: a status with
//! headers and body, an `httpx.Response`, or an SDK `APIStatusError`.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyInt};

use crate::args::no_unknown;
use crate::errors::invalid;
use crate::feedback;

/// A provider's answer, as the core classifies it.
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The response headers, in order.
    pub headers: feedback::HeaderPairs,
    /// The body, empty when not given or never read.
    pub body: Vec<u8>,
}

impl Answer {
    /// The answer given to `method`: `(status, headers, body)`, or a
    /// response (or an error carrying one) as `status`, by position or
    /// keyword. `status` was once named `status_or_response`: that keyword
    /// is still taken (out of `extra`), unadvertised.
    pub fn of<'py>(
        py: Python<'py>,
        method: &str,
        status: Option<&Bound<'py, PyAny>>,
        headers: Option<&Bound<'py, PyAny>>,
        body: Option<&Bound<'py, PyAny>>,
        extra: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Self> {
        let (field, given) = status_given(py, method, status, extra)?;
        if !given.is_instance_of::<PyInt>() {
            return response_parts(field, &given);
        }
        let body = match body.filter(|b| !b.is_none()) {
            Some(b) => feedback::bytes_of("body", b)?,
            None => Vec::new(),
        };
        Ok(Answer { status: feedback::status_of(&given)?, headers: feedback::headers(headers)?, body })
    }
}

/// `report`'s first argument and the name it came under: `status`, or the
/// old keyword `status_or_response`; any other keyword is refused.
fn status_given<'py>(
    py: Python<'py>,
    method: &str,
    status: Option<&Bound<'py, PyAny>>,
    extra: Option<&Bound<'py, PyDict>>,
) -> PyResult<(&'static str, Bound<'py, PyAny>)> {
    const OLD: &str = "status_or_response";
    let old = match extra {
        Some(extra) => {
            let old = extra.get_item(OLD)?;
            if old.is_some() {
                extra.del_item(OLD)?;
            }
            no_unknown(method, Some(extra))?;
            old
        }
        None => None,
    };
    match (status, old) {
        (Some(status), Some(_)) => Err(invalid("status", status, "give `status` or `status_or_response`, not both")),
        (Some(status), None) => Ok(("status", status.clone())),
        (None, Some(old)) => Ok((OLD, old)),
        (None, None) => Err(crate::errors::invalid_text(py, "status", "None", "is required".to_owned())),
    }
}

/// Status, headers and body of an `httpx.Response`, or of an SDK error
/// carrying one in `.response`.
fn response_parts(field: &str, value: &Bound<'_, PyAny>) -> PyResult<Answer> {
    let response = match value.getattr_opt("response")? {
        Some(inner) if inner.hasattr("status_code")? => inner,
        _ => value.clone(),
    };
    let Some(status) = response.getattr_opt("status_code")? else {
        let reason = "must be an HTTP status, an httpx.Response or an SDK APIStatusError";
        return Err(invalid(field, value, reason));
    };
    let headers = feedback::headers(response.getattr_opt("headers")?.as_ref())?;
    // A response whose body was never read reports its headers only.
    let body = match response.getattr("content") {
        Ok(content) => feedback::bytes_of("body", &content).unwrap_or_default(),
        Err(_) => Vec::new(),
    };
    Ok(Answer { status: feedback::status_of(&status)?, headers, body })
}
