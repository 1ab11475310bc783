//! Token counting from Python: exact BPE counts and chat overheads from the
//! core's `llmgov::tokens`. Long texts are counted with the GIL released.

use std::borrow::Cow;

use llmgov::tokens::{self, request, ChatMessage, InputCounting, Part};
use pyo3::exceptions::PyKeyError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyMapping, PySequence, PyString};
use serde_json::Value;

use crate::args::{no_unknown, type_name};
use crate::convert::python_to_value;
use crate::errors::{invalid, invalid_text};

/// Texts at least this long (bytes) are counted with the GIL released:
/// below it, releasing and retaking the GIL costs more than it frees.
const DETACH_BYTES: usize = 4096;

/// Exact tokens of `text` in the encoding of `model` (o200k when absent).
#[pyfunction]
#[pyo3(signature = (text, model = None, **extra), text_signature = "(text, model=None)")]
pub fn count_tokens(
    py: Python<'_>,
    text: &Bound<'_, PyAny>,
    model: Option<&Bound<'_, PyAny>>,
    extra: Option<&Bound<'_, PyDict>>,
) -> PyResult<u64> {
    no_unknown("count_tokens", extra)?;
    let model = crate::args::string("model", model)?;
    let text = text_of("text", text)?;
    Ok(count_text(py, model.as_deref().unwrap_or(""), &text))
}

/// Counts a text, releasing the GIL for long ones.
pub fn count_text(py: Python<'_>, model: &str, text: &str) -> u64 {
    let encoding = tokens::encoding_for_model(model);
    if text.len() >= DETACH_BYTES {
        py.detach(|| tokens::count(encoding, text))
    } else {
        tokens::count(encoding, text)
    }
}

/// The fast estimate (no BPE) of `text`'s o200k tokens.
#[pyfunction]
#[pyo3(signature = (text, **extra), text_signature = "(text)")]
pub fn estimate_tokens(text: &Bound<'_, PyAny>, extra: Option<&Bound<'_, PyDict>>) -> PyResult<u64> {
    no_unknown("estimate_tokens", extra)?;
    Ok(tokens::estimate(&text_of("text", text)?))
}

/// Prompt tokens of a chat request: messages, names, tools, images. Exact
/// BPE counts, or with `fast=True` the character-class estimate (no BPE).
#[pyfunction]
#[pyo3(signature = (messages, model = None, tools = None, *, fast = None, **extra),
    text_signature = "(messages, model=None, tools=None, *, fast=False)")]
pub fn count_chat_tokens(
    py: Python<'_>,
    messages: &Bound<'_, PyAny>,
    model: Option<&Bound<'_, PyAny>>,
    tools: Option<&Bound<'_, PyAny>>,
    fast: Option<&Bound<'_, PyAny>>,
    extra: Option<&Bound<'_, PyDict>>,
) -> PyResult<u64> {
    no_unknown("count_chat_tokens", extra)?;
    let fast = crate::args::flag("fast", fast, false)?;
    let model = crate::args::string("model", model)?.unwrap_or_default();
    let messages = chat_messages(messages)?;
    let tools = tool_values(tools)?;
    if fast {
        return Ok(InputCounting::Fast.count_chat(&model, &messages, &tools));
    }
    Ok(count_chat(py, &model, &messages, &tools))
}

/// A request body's estimate as it goes on the wire, for the transports:
/// `(input_tokens, max_output_tokens or None, model or None)`. The core's
/// `llmgov::tokens::estimate_request`, which every binding's HTTP client
/// shares, so a request reserves the same in every language; it never
/// refuses a body of a shape it does not know (a Responses API tool call,
/// a reasoning item), counting the text it carries instead.
#[pyfunction(name = "_estimate_request")]
pub fn estimate_request(
    py: Python<'_>,
    body: &str,
    api: &str,
    fast: bool,
) -> PyResult<(u64, Option<u64>, Option<String>)> {
    let value: Value = serde_json::from_str(body).map_err(|e| {
        invalid_text(py, "body", &body.chars().take(80).collect::<String>(), format!("is not JSON: {e}"))
    })?;
    let api = match api {
        "openai" => tokens::Api::ChatCompletions,
        "responses" => tokens::Api::Responses,
        "anthropic" => tokens::Api::Anthropic,
        _ => tokens::Api::Other,
    };
    let counting = if fast { InputCounting::Fast } else { InputCounting::Exact };
    let estimate = if body.len() >= DETACH_BYTES {
        py.detach(|| tokens::estimate_request(&value, api, counting))
    } else {
        tokens::estimate_request(&value, api, counting)
    };
    Ok((estimate.input_tokens, estimate.max_output_tokens, estimate.model))
}

/// Counts a chat, releasing the GIL when its texts are long.
pub fn count_chat(py: Python<'_>, model: &str, messages: &[ChatMessage], tools: &[Value]) -> u64 {
    let bytes: usize =
        messages.iter().flat_map(|m| &m.content).map(|p| if let Part::Text(t) = p { t.len() } else { 0 }).sum();
    if bytes >= DETACH_BYTES {
        py.detach(|| tokens::count_chat(model, messages, tools))
    } else {
        tokens::count_chat(model, messages, tools)
    }
}

/// A `str` argument, as UTF-8.
pub fn text_of<'a>(field: &str, value: &'a Bound<'_, PyAny>) -> PyResult<Cow<'a, str>> {
    let string = value
        .cast::<PyString>()
        .map_err(|_| invalid(field, value, format!("must be a string, not {}", type_name(value))))?;
    string.to_cow().map_err(|_| invalid(field, value, crate::args::LONE_SURROGATE))
}

/// Tool definitions as JSON, in OpenAI's function shape (Anthropic's
/// `input_schema` read as `parameters`), as the core reads a body's.
pub fn tool_values(tools: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<Value>> {
    let Some(tools) = tools.filter(|t| !t.is_none()) else { return Ok(Vec::new()) };
    match python_to_value(tools) {
        Ok(list @ Value::Array(_)) => Ok(request::tool_list(&list)),
        Ok(_) => Err(invalid("tools", tools, "must be a list of tool definitions")),
        Err(e) => {
            let at = if e.path.is_empty() { String::new() } else { format!(" at {}", e.path) };
            Err(invalid("tools", tools, format!("has `{}`{at}, which {}", e.value, e.reason)))
        }
    }
}

/// Chat messages from a sequence of dicts (or other mappings) in OpenAI's
/// or Anthropic's shape, read by the core's rules
/// (`llmgov::tokens::request::chat_messages`), as Node's `countChatTokens`
/// and every binding's HTTP client read them: a message's text, names, tool
/// calls and their arguments, tool results and images (1024 × 1024 when
/// the size is not given). A message must be a mapping and its `content`
/// text, `None` or a list of parts; any other value must be plain data.
pub fn chat_messages(messages: &Bound<'_, PyAny>) -> PyResult<Vec<ChatMessage>> {
    let sequence = messages
        .cast::<PySequence>()
        .ok()
        .filter(|_| !(messages.is_instance_of::<PyString>() || messages.is_instance_of::<PyBytes>()))
        .ok_or_else(|| invalid("messages", messages, "must be a list of message dicts"))?;
    for (index, message) in sequence.try_iter()?.enumerate() {
        check_message(index, &message?)?;
    }
    match python_to_value(messages) {
        Ok(Value::Array(list)) => Ok(request::chat_messages(&list)),
        Ok(_) => Err(invalid("messages", messages, "must be a list of message dicts")),
        Err(e) => Err(invalid_text(messages.py(), &format!("messages{}", e.path), &e.value, e.reason)),
    }
}

/// A message is a mapping; its content, if any, a string, `None` or a list of parts.
fn check_message(index: usize, message: &Bound<'_, PyAny>) -> PyResult<()> {
    let field = format!("messages[{index}]");
    let mapping = message
        .cast::<PyMapping>()
        .map_err(|_| invalid(&field, message, format!("must be a dict, not {}", type_name(message))))?;
    let content = match mapping.get_item("content") {
        Ok(content) => content,
        Err(e) if e.is_instance_of::<PyKeyError>(message.py()) => return Ok(()),
        Err(e) => return Err(e),
    };
    if !(content.is_none() || content.is_instance_of::<PyString>() || content.is_instance_of::<PyList>()) {
        return Err(invalid(&format!("{field}.content"), &content, "must be a string, None or a list of parts"));
    }
    Ok(())
}
