//! Actual usage from what the SDKs return: OpenAI's chat `usage`
//! (`prompt_tokens`, `completion_tokens`, `prompt_tokens_details.cached_tokens`),
//! OpenAI's Responses `usage` (`input_tokens`, `output_tokens`,
//! `input_tokens_details.cached_tokens`), Anthropic's `usage` (`input_tokens`
//! without cache reads and writes, `cache_read_input_tokens`,
//! `cache_creation_input_tokens`, `output_tokens`), or llmgov's own
//! (`input_tokens`, `output_tokens`, `cached_input_tokens`). Each may be a
//! dict or an object with those attributes (the SDKs' pydantic models).

use llmgov::Usage;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFloat, PyInt};

use crate::args::count_of;
use crate::errors::invalid;

/// A field of a dict or an attribute of an object; `None` when absent or None.
fn field<'py>(value: &Bound<'py, PyAny>, name: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
    let found = match value.cast::<PyDict>() {
        Ok(dict) => dict.get_item(name)?,
        Err(_) => value.getattr_opt(name)?,
    };
    Ok(found.filter(|v| !v.is_none()))
}

fn tokens(value: &Bound<'_, PyAny>, name: &str) -> PyResult<Option<u64>> {
    match field(value, name)? {
        Some(v) => count_of(&format!("usage.{name}"), &v).map(Some),
        None => Ok(None),
    }
}

fn nested(value: &Bound<'_, PyAny>, outer: &str, inner: &str) -> PyResult<Option<u64>> {
    match field(value, outer)? {
        Some(details) => match field(&details, inner)? {
            Some(v) => count_of(&format!("usage.{outer}.{inner}"), &v).map(Some),
            None => Ok(None),
        },
        None => Ok(None),
    }
}

/// A settle's `(input_tokens, usage)` arguments: for `settle(usage)`, a
/// first positional argument that is not a count is the usage. An int is a
/// count, and so is a float (`settle(1.5, 0)`): refused as `input_tokens`,
/// not taken for a usage object.
#[inline]
pub fn first_is_usage<'a, 'py>(
    input_tokens: Option<&'a Bound<'py, PyAny>>,
    usage: Option<&'a Bound<'py, PyAny>>,
) -> (Option<&'a Bound<'py, PyAny>>, Option<&'a Bound<'py, PyAny>>) {
    match (input_tokens, usage) {
        (Some(first), None)
            if !first.is_none() && !first.is_instance_of::<PyInt>() && !first.is_instance_of::<PyFloat>() =>
        {
            (None, Some(first))
        }
        pair => pair,
    }
}

/// The usage an SDK usage object or dict reports.
pub fn from_python(usage: &Bound<'_, PyAny>) -> PyResult<Usage> {
    if let Some(prompt) = tokens(usage, "prompt_tokens")? {
        let output = output_tokens(usage, "prompt_tokens", "completion_tokens")?;
        let cached = nested(usage, "prompt_tokens_details", "cached_tokens")?.unwrap_or(0);
        return Ok(Usage::new(prompt, output).with_cached_input(cached.min(prompt)));
    }
    let Some(input) = tokens(usage, "input_tokens")? else {
        let reason = "is not a usage: it has neither `prompt_tokens` (OpenAI) nor `input_tokens` (Anthropic, llmgov)";
        return Err(invalid("usage", usage, reason));
    };
    let output = output_tokens(usage, "input_tokens", "output_tokens")?;
    let cache_read = tokens(usage, "cache_read_input_tokens")?;
    let cache_write = tokens(usage, "cache_creation_input_tokens")?;
    if cache_read.is_some() || cache_write.is_some() {
        // Anthropic's input_tokens leaves out cache reads and writes; llmgov
        // counts every prompt token and the cached part separately.
        let (read, write) = (cache_read.unwrap_or(0), cache_write.unwrap_or(0));
        return Ok(Usage::new(input.saturating_add(read).saturating_add(write), output).with_cached_input(read));
    }
    let cached = match tokens(usage, "cached_input_tokens")? {
        Some(cached) => cached,
        None => nested(usage, "input_tokens_details", "cached_tokens")?.unwrap_or(0).min(input),
    };
    Ok(Usage::new(input, output).with_cached_input(cached))
}

/// The output count of a usage whose input is `input_key`, read from
/// `output_key`; 0 if absent, unless a dict names its output under another
/// key (`outputTokens`, `completion_tokens` beside `input_tokens`, …),
/// which would otherwise settle as no output and refund what was used.
fn output_tokens(usage: &Bound<'_, PyAny>, input_key: &str, output_key: &str) -> PyResult<u64> {
    if let Some(output) = tokens(usage, output_key)? {
        return Ok(output);
    }
    let Ok(dict) = usage.cast::<PyDict>() else { return Ok(0) };
    for (key, value) in dict.iter() {
        let Ok(key) = key.extract::<String>() else { continue };
        if key == output_key {
            continue; // given as None
        }
        let squashed = key.to_lowercase().replace('_', "");
        if matches!(squashed.strip_suffix('s').unwrap_or(&squashed), "outputtoken" | "completiontoken") {
            let reason = format!("is not read: a usage with `{input_key}` gives its output as `{output_key}`");
            return Err(invalid(&format!("usage.{key}"), &value, reason));
        }
    }
    Ok(0)
}
