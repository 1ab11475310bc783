//! Token counting from Python: exact BPE counts and chat overheads from the
//! core's `llmgov::tokens`. Long texts are counted with the GIL released.

use std::borrow::Cow;

use llmgov::tokens::{self, ChatMessage, ImageDetail, InputCounting, Part};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};
use serde_json::Value;

use crate::args::{no_unknown, type_name};
use crate::convert::python_to_value;
use crate::errors::{invalid, invalid_text};

/// Texts at least this long (bytes) are counted with the GIL released:
/// below it, releasing and retaking the GIL costs more than it frees.
const DETACH_BYTES: usize = 4096;

/// An image part without its size is charged as this many pixels a side:
/// the largest a high-detail image is scaled to, so the reservation never
/// falls short.
const UNKNOWN_IMAGE_SIDE: u32 = 2048;

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

/// Tool definitions as JSON.
pub fn tool_values(tools: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<Value>> {
    let Some(tools) = tools.filter(|t| !t.is_none()) else { return Ok(Vec::new()) };
    match python_to_value(tools) {
        Ok(Value::Array(items)) => Ok(items),
        Ok(_) => Err(invalid("tools", tools, "must be a list of tool definitions")),
        Err(e) => {
            let at = if e.path.is_empty() { String::new() } else { format!(" at {}", e.path) };
            Err(invalid("tools", tools, format!("has `{}`{at}, which {}", e.value, e.reason)))
        }
    }
}

/// Chat messages from a list of dicts in OpenAI's or Anthropic's shape:
/// `role`, `content` (a string, None, or a list of parts) and `name`.
pub fn chat_messages(messages: &Bound<'_, PyAny>) -> PyResult<Vec<ChatMessage>> {
    if !(messages.is_instance_of::<PyList>() || messages.is_instance_of::<PyTuple>()) {
        return Err(invalid("messages", messages, "must be a list of message dicts"));
    }
    let mut out = Vec::new();
    for (index, message) in messages.try_iter()?.enumerate() {
        out.push(chat_message(index, &message?)?);
    }
    Ok(out)
}

fn chat_message(index: usize, message: &Bound<'_, PyAny>) -> PyResult<ChatMessage> {
    let field = format!("messages[{index}]");
    let dict = message
        .cast::<PyDict>()
        .map_err(|_| invalid(&field, message, format!("must be a dict, not {}", type_name(message))))?;
    let role = match dict.get_item("role")? {
        Some(role) => text_of(&format!("{field}.role"), &role)?.into_owned(),
        None => return Err(invalid(&field, message, "has no `role`")),
    };
    let content = match dict.get_item("content")? {
        None => Vec::new(),
        Some(content) => parts(&format!("{field}.content"), &content)?,
    };
    let name = match dict.get_item("name")? {
        Some(name) if !name.is_none() => Some(text_of(&format!("{field}.name"), &name)?.into_owned()),
        _ => None,
    };
    Ok(ChatMessage { role, content, name })
}

fn parts(field: &str, content: &Bound<'_, PyAny>) -> PyResult<Vec<Part>> {
    if content.is_none() {
        return Ok(Vec::new());
    }
    if content.is_instance_of::<PyString>() {
        return Ok(vec![Part::Text(text_of(field, content)?.into_owned())]);
    }
    if !content.is_instance_of::<PyList>() {
        return Err(invalid(field, content, "must be a string, None or a list of parts"));
    }
    let mut out = Vec::new();
    for (index, part) in content.try_iter()?.enumerate() {
        if let Some(part) = one_part(&format!("{field}[{index}]"), &part?)? {
            out.push(part);
        }
    }
    Ok(out)
}

/// A content part: text (`text`, `input_text`, Anthropic `text` blocks), an
/// image (`image_url`, `input_image`, Anthropic `image`), or anything else,
/// which counts its `text` if it has one and nothing otherwise.
fn one_part(field: &str, part: &Bound<'_, PyAny>) -> PyResult<Option<Part>> {
    if part.is_instance_of::<PyString>() {
        return Ok(Some(Part::Text(text_of(field, part)?.into_owned())));
    }
    let dict = part.cast::<PyDict>().map_err(|_| invalid(field, part, "must be a dict or a string"))?;
    let kind = dict.get_item("type")?.and_then(|t| t.extract::<String>().ok()).unwrap_or_default();
    if matches!(kind.as_str(), "image_url" | "input_image" | "image") {
        return Ok(Some(image(dict)?));
    }
    match dict.get_item("text")? {
        Some(text) if !text.is_none() => Ok(Some(Part::Text(text_of(&format!("{field}.text"), &text)?.into_owned()))),
        _ => Ok(None),
    }
}

fn image(dict: &Bound<'_, PyDict>) -> PyResult<Part> {
    let nested = dict.get_item("image_url")?.and_then(|n| n.cast_into::<PyDict>().ok());
    let lookup = |key: &str| -> PyResult<Option<Bound<'_, PyAny>>> {
        if let Some(v) = dict.get_item(key)? {
            return Ok(Some(v));
        }
        Ok(match &nested {
            Some(n) => n.get_item(key)?,
            None => None,
        })
    };
    let detail = match lookup("detail")?.and_then(|d| d.extract::<String>().ok()).as_deref() {
        Some("low") => ImageDetail::Low,
        Some("high") => ImageDetail::High,
        _ => ImageDetail::Auto,
    };
    let side = |key: &str| -> PyResult<u32> {
        Ok(lookup(key)?.and_then(|v| v.extract::<u32>().ok()).unwrap_or(UNKNOWN_IMAGE_SIDE))
    };
    Ok(Part::Image { width: side("width")?, height: side("height")?, detail })
}
