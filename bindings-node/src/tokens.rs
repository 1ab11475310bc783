//! Token counting: `countTokens`, `countChatTokens`, and the estimate of a
//! whole OpenAI or Anthropic request body that `governedFetch` reserves
//! (the core's `llmgov::tokens::request`, which every binding shares).
//!
//! Messages arrive as JSON text: `governedFetch` has the request body as
//! text already, and one string crosses N-API far faster than a walk of a
//! nested object.

use llmgov::tokens::request::{chat_messages, tool_list, DEFAULT_MODEL};
use llmgov::tokens::{self, Api, InputCounting};
use napi::{Env, Result};
use napi_derive::napi;
use serde_json::Value;

use crate::errors::{invalid, OrThrow};

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

/// Estimates a request body for `api` (`openai`, `responses`, `anthropic`,
/// or anything else); `counting` is `exact` (BPE) or `fast` (the estimate).
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
    let api = match api.as_str() {
        "openai" => Api::ChatCompletions,
        "responses" => Api::Responses,
        "anthropic" => Api::Anthropic,
        _ => Api::Other,
    };
    let estimate = tokens::estimate_request(&value, api, counting);
    Ok(RequestEstimate {
        input_tokens: estimate.input_tokens as f64,
        max_output_tokens: estimate.max_output_tokens.map(|n| n as f64),
        model: estimate.model,
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
