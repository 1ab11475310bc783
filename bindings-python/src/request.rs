//! What a Python call asks for, checked: the paths it names (resolved once
//! and cached by the object that named them) and the tokens it estimates.
//! `Governor` and `RedisGovernor` read their arguments the same way here.

use llmgov::{Governor, Request, Route, Usage, MAX_TOKENS};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};
use pyo3::PyClass;

use crate::args::{self, count, type_name};
use crate::errors::invalid;
use crate::tokens;

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
    /// The core request on `route`, classed by `gov`'s traffic classes.
    pub fn request(&self, py: Python<'_>, gov: &Governor, route: Route) -> PyResult<Request> {
        let mut request = Request::new(route);
        if self.only_token_counts() {
            // The hot path, `try_acquire(route, 1000, 200)`: two counts.
            request.max_output_tokens = max_output_tokens(self.max_output_tokens)?;
            request.input_tokens = count("input_tokens", self.input_tokens)?.unwrap_or(0);
            return Ok(request);
        }
        let estimate = self.estimate(py)?;
        request.input_tokens = estimate.input_tokens;
        request.cached_input_tokens = estimate.cached_input_tokens;
        request.max_output_tokens = estimate.output_tokens;
        request.expected_output_tokens = count("expected_output_tokens", self.expected_output_tokens)?;
        if let Some(klass) = args::string("klass", self.klass)? {
            request.class = gov.class(&klass);
        }
        Ok(request)
    }

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

    /// The tokens the request may take: its prompt's, cached ones among
    /// them, and `max_output_tokens`.
    pub fn estimate(&self, py: Python<'_>) -> PyResult<Usage> {
        let output = max_output_tokens(self.max_output_tokens)?;
        let input = self.input_tokens(py)?;
        let cached = count("cached_input_tokens", self.cached_input_tokens)?.unwrap_or(0);
        Ok(Usage::new(input, output).with_cached_input(cached))
    }

    /// The prompt's tokens: given, or counted from `text` or `messages`
    /// (one of the three).
    fn input_tokens(&self, py: Python<'_>) -> PyResult<u64> {
        let given = |v: Option<&Bound<'_, PyAny>>| v.is_some_and(|v| !v.is_none());
        let named = [("input_tokens", self.input_tokens), ("text", self.text), ("messages", self.messages)];
        let mut present = named.iter().filter(|(_, v)| given(*v));
        if let (Some(first), Some(second)) = (present.next(), present.next()) {
            let reason = format!("give only one of input_tokens, text and messages (also got `{}`)", second.0);
            return Err(invalid(first.0, first.1.expect("present"), reason));
        }
        if let Some(tools) = self.tools.filter(|t| !t.is_none() && !given(self.messages)) {
            return Err(invalid("tools", tools, TOOLS_WITHOUT_MESSAGES));
        }
        let model = args::string("model", self.model)?.unwrap_or_default();
        if let Some(text) = self.text.filter(|t| !t.is_none()) {
            return Ok(tokens::count_text(py, &model, &tokens::text_of("text", text)?));
        }
        if let Some(messages) = self.messages.filter(|m| !m.is_none()) {
            let messages = tokens::chat_messages(messages)?;
            return Ok(tokens::count_chat(py, &model, &messages, &tokens::tool_values(self.tools)?));
        }
        Ok(count("input_tokens", self.input_tokens)?.unwrap_or(0))
    }
}

/// Why `tools` without `messages` is refused: the count of the prompt it
/// belongs to is the caller's (`input_tokens`) or a text's, which it would
/// silently not be added to.
const TOOLS_WITHOUT_MESSAGES: &str = "count only with messages: give messages, or count the tools into input_tokens";

/// The `max_output_tokens` argument: 0 when absent, at most [`MAX_TOKENS`].
pub fn max_output_tokens(value: Option<&Bound<'_, PyAny>>) -> PyResult<u64> {
    match count("max_output_tokens", value)? {
        Some(n) if n > MAX_TOKENS => {
            Err(invalid("max_output_tokens", value.expect("given"), format!("more than {MAX_TOKENS} tokens")))
        }
        n => Ok(n.unwrap_or(0)),
    }
}

/// The route object `paths` names: `paths` itself if it is one, the one
/// cached under the same paths (a str, or a list or tuple of str), or one
/// `resolve` makes from the path strings, then cached.
pub fn cached_route<'py, R: PyClass>(
    routes: &Bound<'py, PyDict>,
    paths: &Bound<'py, PyAny>,
    resolve: impl FnOnce(Vec<String>) -> PyResult<Bound<'py, R>>,
) -> PyResult<Bound<'py, R>> {
    if let Ok(route) = paths.cast::<R>() {
        return Ok(route.clone());
    }
    let py = routes.py();
    // A list cannot be a dict key; the same paths as a tuple can.
    let key = if paths.is_instance_of::<PyList>() {
        PyTuple::new(py, paths.cast::<PyList>()?.iter())?.into_any()
    } else {
        paths.clone()
    };
    // An unhashable `paths` (a dict, say) is no key: `path_list` names it.
    if let Ok(Some(found)) = routes.get_item(&key) {
        return Ok(found.cast_into::<R>()?);
    }
    let expected = format!("a path, a list of paths or a {}", R::NAME);
    let route = resolve(path_list(paths, &expected)?)?;
    routes.set_item(key, &route)?;
    Ok(route)
}

/// The path strings of a `paths` argument: a path, or a list or tuple of
/// paths; anything else is refused as not the `expected` kind, and a path
/// that is not UTF-8 (a lone surrogate) as such.
pub fn path_list(paths: &Bound<'_, PyAny>, expected: &str) -> PyResult<Vec<String>> {
    let path = |item: &Bound<'_, PyAny>| {
        args::text(item).map_err(|reason| match item.is_instance_of::<PyString>() {
            true => invalid("paths", paths, format!("a path {reason}")),
            false => invalid("paths", paths, format!("every path must be a string, not {}", type_name(item))),
        })
    };
    if paths.is_instance_of::<PyString>() {
        return Ok(vec![path(paths)?]);
    }
    if !(paths.is_instance_of::<PyList>() || paths.is_instance_of::<PyTuple>()) {
        let reason = format!("must be {expected}, not {}", type_name(paths));
        return Err(invalid("paths", paths, reason));
    }
    paths.try_iter()?.map(|item| path(&item?)).collect()
}
