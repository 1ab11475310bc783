//! Token counting: `countTokens`, `countChatTokens`, and the estimate of a
//! whole OpenAI or Anthropic request body that `governedFetch` reserves.
//!
//! Messages arrive as JSON text: `governedFetch` has the request body as
//! text already, and one string crosses N-API far faster than a walk of a
//! nested object.
//!
//! Images are counted by OpenAI's tile rule; their pixel size is not in the
//! request (decoding is not ours to do), so every image that does not say
//! `detail: "low"` is taken as 1024 × 1024 (765 tokens on gpt-4o), the
//! common upload size. Anthropic prompts are counted with the OpenAI
//! encoding of the model name (o200k for Claude), a proxy the governor's
//! learned input coefficients correct over time.

use llmgov::tokens::{self, ChatMessage, ImageDetail, InputCounting, Part};
use napi::{Env, Result};
use napi_derive::napi;
use serde_json::{json, Value};

use crate::errors::{invalid, OrThrow};

/// The size assumed for an image whose size the request does not give.
const ASSUMED_IMAGE_SIDE: u32 = 1024;
/// The model assumed when none is named: the encoding of every current OpenAI model.
const DEFAULT_MODEL: &str = "gpt-4o";

/// Exact tokens of `text` in the encoding of `model` (gpt-4o's o200k by default).
#[napi(catch_unwind)]
pub fn count_tokens(text: String, model: Option<String>) -> f64 {
    let encoding = tokens::encoding_for_model(model.as_deref().unwrap_or(DEFAULT_MODEL));
    tokens::count(encoding, &text) as f64
}

/// The fast character-class estimate of `text` (no BPE; about 6.5% median error).
#[napi(catch_unwind)]
pub fn estimate_tokens(text: String) -> f64 {
    tokens::estimate(&text) as f64
}

/// Prompt tokens of a chat request: `messagesJson` is the JSON of an OpenAI
/// or Anthropic `messages` array, `toolsJson` of its `tools` (optional).
#[napi(js_name = "nativeCountChatTokens", catch_unwind)]
pub fn count_chat_tokens(env: Env, messages_json: String, model: String, tools_json: Option<String>) -> Result<f64> {
    let parsed = (|| {
        let messages = parse_json("messages", &messages_json)?;
        let tools = match tools_json {
            Some(text) => parse_json("tools", &text)?,
            None => Value::Null,
        };
        let Value::Array(messages) = messages else {
            return Err(invalid("messages", truncate(&messages_json), "must be an array of messages"));
        };
        Ok((chat_messages(&messages), tool_list(&tools)))
    })();
    let (messages, tools) = parsed.or_throw(&env)?;
    Ok(tokens::count_chat(&model, &messages, &tools) as f64)
}

/// What a request body asks to reserve.
#[napi(object)]
pub struct RequestEstimate {
    /// Prompt tokens: messages, system prompt and tools.
    pub input_tokens: f64,
    /// The body's `max_completion_tokens` or `max_tokens` (times `n` choices);
    /// absent when the body sets none.
    pub max_output_tokens: Option<f64>,
    /// The body's `model`, if any.
    pub model: Option<String>,
}

/// Estimates an OpenAI (`api` = `openai`) or Anthropic (`anthropic`) request
/// body; `counting` is `exact` (BPE) or `fast` (the estimate). A body of
/// another shape (embeddings, responses) is counted from its `input` or, for
/// want of anything better, its whole text.
#[napi(js_name = "nativeEstimateRequest", catch_unwind)]
pub fn estimate_request(env: Env, body: String, api: String, counting: String) -> Result<RequestEstimate> {
    let parsed = (|| {
        let counting = match counting.as_str() {
            "exact" => InputCounting::Exact,
            "fast" => InputCounting::Fast,
            other => return Err(invalid("counting", other, "must be `exact` or `fast`")),
        };
        Ok((parse_json("body", &body)?, counting))
    })();
    let (value, counting) = parsed.or_throw(&env)?;
    let model = value.get("model").and_then(Value::as_str).unwrap_or(DEFAULT_MODEL);
    let mut messages = Vec::new();
    if api == "anthropic" {
        if let Some(system) = value.get("system") {
            messages.push(ChatMessage { role: "system".into(), content: parts(system), name: None });
        }
    }
    let input_tokens = match value.get("messages") {
        Some(Value::Array(list)) => {
            messages.extend(chat_messages(list));
            let tools = tool_list(value.get("tools").unwrap_or(&Value::Null));
            counting.count_chat(model, &messages, &tools)
        }
        _ => match value.get("input") {
            Some(input) => counting.count_text(model, &texts(input).join("\n")),
            None => counting.count_text(model, &body),
        },
    };
    let max_output = ["max_completion_tokens", "max_tokens", "max_output_tokens"]
        .iter()
        .find_map(|k| value.get(*k).and_then(Value::as_u64))
        .map(|max| max.saturating_mul(value.get("n").and_then(Value::as_u64).unwrap_or(1).max(1)));
    Ok(RequestEstimate {
        input_tokens: input_tokens as f64,
        max_output_tokens: max_output.map(|n| n.min(llmgov::MAX_TOKENS) as f64),
        model: value.get("model").and_then(Value::as_str).map(str::to_owned),
    })
}

fn parse_json(field: &'static str, text: &str) -> llmgov::Result<Value> {
    serde_json::from_str(text).map_err(|e| invalid(field, truncate(text), format!("is not JSON: {e}")))
}

/// At most 80 characters of a value, for messages.
fn truncate(text: &str) -> String {
    match text.char_indices().nth(80) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

fn chat_messages(list: &[Value]) -> Vec<ChatMessage> {
    list.iter().filter_map(chat_message).collect()
}

/// One OpenAI or Anthropic message; tool calls count as their name and arguments.
fn chat_message(message: &Value) -> Option<ChatMessage> {
    let role = message.get("role")?.as_str()?.to_owned();
    let mut content = message.get("content").map(parts).unwrap_or_default();
    for call in message.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
        content.extend(call.get("function").map(|f| Part::Text(function_text(f))));
    }
    if let Some(call) = message.get("function_call") {
        content.push(Part::Text(function_text(call)));
    }
    let name = message.get("name").and_then(Value::as_str).map(str::to_owned);
    Some(ChatMessage { role, content, name })
}

fn function_text(function: &Value) -> String {
    let name = function.get("name").and_then(Value::as_str).unwrap_or("");
    let arguments = function.get("arguments").and_then(Value::as_str).unwrap_or("");
    format!("{name}{arguments}")
}

/// Content as parts: a string, or an array of text, image, tool-use and
/// tool-result blocks (OpenAI's and Anthropic's shapes).
fn parts(content: &Value) -> Vec<Part> {
    match content {
        Value::String(text) => vec![Part::Text(text.clone())],
        Value::Array(blocks) => blocks.iter().flat_map(block_parts).collect(),
        _ => Vec::new(),
    }
}

fn block_parts(block: &Value) -> Vec<Part> {
    match block.get("type").and_then(Value::as_str).unwrap_or("") {
        "image_url" | "image" | "input_image" => {
            let detail = block.pointer("/image_url/detail").or_else(|| block.get("detail")).and_then(Value::as_str);
            let detail = if detail == Some("low") { ImageDetail::Low } else { ImageDetail::Auto };
            vec![Part::Image { width: ASSUMED_IMAGE_SIDE, height: ASSUMED_IMAGE_SIDE, detail }]
        }
        "tool_use" => {
            let input = block.get("input").map(Value::to_string).unwrap_or_default();
            vec![Part::Text(format!("{}{input}", block.get("name").and_then(Value::as_str).unwrap_or("")))]
        }
        "tool_result" => block.get("content").map(parts).unwrap_or_default(),
        _ => texts(block).into_iter().map(Part::Text).collect(),
    }
}

/// Every text in a value: a string, strings in an array, a block's `text`.
fn texts(value: &Value) -> Vec<String> {
    match value {
        Value::String(s) => vec![s.clone()],
        Value::Array(items) => items.iter().flat_map(texts).collect(),
        Value::Object(_) => value.get("text").and_then(Value::as_str).map(|s| vec![s.to_owned()]).unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// Tools in OpenAI's function shape; Anthropic's `input_schema` becomes `parameters`.
fn tool_list(tools: &Value) -> Vec<Value> {
    let Value::Array(list) = tools else { return Vec::new() };
    list.iter()
        .map(|tool| match tool.get("input_schema") {
            Some(schema) => json!({
                "name": tool.get("name").cloned().unwrap_or(Value::Null),
                "description": tool.get("description").cloned().unwrap_or(Value::Null),
                "parameters": schema,
            }),
            None => tool.clone(),
        })
        .collect()
}
