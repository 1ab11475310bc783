//! The estimate of a whole request body, as it goes on the wire: OpenAI's
//! Chat Completions and Responses, Anthropic's Messages, or anything else.
//! Every binding's governed HTTP client reserves what this says, so a
//! request costs the same in every language.
//!
//! It never refuses a body: a message or block of a shape it does not know
//! counts the text it carries, since an estimate that fails would stop a
//! request the provider would have served.
//!
//! Images are counted by OpenAI's tile rule; their pixel size is not in the
//! request (decoding is not ours to do), so every image that does not say
//! `detail: "low"` is taken as 1024 × 1024 (765 tokens on gpt-4o), the
//! common upload size. Anthropic prompts are counted with the OpenAI
//! encoding of the model name (o200k for Claude), a proxy the governor's
//! learned input coefficients correct over time.

use serde_json::{json, Value};

use super::{ChatMessage, ImageDetail, InputCounting, Part};
use crate::MAX_TOKENS;

/// The size assumed for an image whose size the request does not give.
const ASSUMED_IMAGE_SIDE: u32 = 1024;
/// The model assumed when none is named: the encoding of every current OpenAI model.
pub const DEFAULT_MODEL: &str = "gpt-4o";

/// The API a request body is written for, which says where its prompt is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    /// OpenAI Chat Completions (and compatible APIs): `messages`.
    ChatCompletions,
    /// OpenAI Responses: `instructions` and `input` (a string, or items).
    Responses,
    /// Anthropic Messages: `system` and `messages`.
    Anthropic,
    /// Anything else (embeddings, completions): its `input`, or its text.
    Other,
}

/// What a request body asks to reserve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestEstimate {
    /// Prompt tokens: system prompt, messages or input items, and tools.
    pub input_tokens: u64,
    /// The body's `max_completion_tokens`, `max_tokens` or
    /// `max_output_tokens`, times its `n` choices, at most [`MAX_TOKENS`];
    /// `None` when it sets none.
    pub max_output_tokens: Option<u64>,
    /// The body's `model`, if it names one.
    pub model: Option<String>,
}

/// Estimates a request body (parsed JSON) for `api`, counting with `counting`.
pub fn estimate_request(body: &Value, api: Api, counting: InputCounting) -> RequestEstimate {
    let model = body.get("model").and_then(Value::as_str);
    let counted_as = model.unwrap_or(DEFAULT_MODEL);
    let tools = tool_list(body.get("tools").unwrap_or(&Value::Null));
    let input_tokens = match (api, body.get("messages"), body.get("input")) {
        (Api::Responses, _, Some(input)) => {
            let mut messages: Vec<ChatMessage> = body.get("instructions").map(system).into_iter().collect();
            messages.extend(input_items(input));
            counting.count_chat(counted_as, &messages, &tools)
        }
        (_, Some(Value::Array(list)), _) => {
            let system = if api == Api::Anthropic { body.get("system").map(system) } else { None };
            let messages: Vec<ChatMessage> = system.into_iter().chain(chat_messages(list)).collect();
            counting.count_chat(counted_as, &messages, &tools)
        }
        (_, _, Some(input)) => counting.count_text(counted_as, &texts(input).join("\n")),
        _ => counting.count_text(counted_as, &body.to_string()),
    };
    let max_output = ["max_completion_tokens", "max_tokens", "max_output_tokens"]
        .iter()
        .find_map(|key| body.get(*key).and_then(Value::as_u64))
        .map(|max| max.saturating_mul(body.get("n").and_then(Value::as_u64).unwrap_or(1).max(1)).min(MAX_TOKENS));
    RequestEstimate { input_tokens, max_output_tokens: max_output, model: model.map(str::to_owned) }
}

/// Chat messages in OpenAI's or Anthropic's shape, from JSON; one without a
/// `role` counts the text it carries as a user message.
pub fn chat_messages(list: &[Value]) -> Vec<ChatMessage> {
    list.iter().map(chat_message).collect()
}

/// Tools in OpenAI's function shape; Anthropic's `input_schema` becomes `parameters`.
pub fn tool_list(tools: &Value) -> Vec<Value> {
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

fn system(content: &Value) -> ChatMessage {
    ChatMessage { role: "system".into(), content: parts(content), name: None }
}

/// One message; tool calls count as their name and arguments.
fn chat_message(message: &Value) -> ChatMessage {
    let Some(role) = message.get("role").and_then(Value::as_str) else {
        return ChatMessage {
            role: "user".into(),
            content: texts(message).into_iter().map(Part::Text).collect(),
            name: None,
        };
    };
    let mut content = message.get("content").map(parts).unwrap_or_default();
    for call in message.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
        content.extend(call.get("function").map(|f| Part::Text(function_text(f))));
    }
    if let Some(call) = message.get("function_call") {
        content.push(Part::Text(function_text(call)));
    }
    let name = message.get("name").and_then(Value::as_str).map(str::to_owned);
    ChatMessage { role: role.to_owned(), content, name }
}

/// The Responses API's `input`: a string is the user's message; items are
/// messages (with a `role`), function calls and their outputs, reasoning.
fn input_items(input: &Value) -> Vec<ChatMessage> {
    let Value::Array(items) = input else {
        return vec![ChatMessage { role: "user".into(), content: parts(input), name: None }];
    };
    items
        .iter()
        .map(|item| match item.get("type").and_then(Value::as_str) {
            Some("function_call") => ChatMessage::text("assistant", function_text(item)),
            Some("function_call_output") => ChatMessage {
                role: "tool".into(),
                content: item.get("output").map(parts).unwrap_or_default(),
                name: None,
            },
            _ => chat_message(item),
        })
        .collect()
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
        // A plain-text document's text is in its source.
        "document" => {
            texts(block.pointer("/source/data").unwrap_or(&Value::Null)).into_iter().map(Part::Text).collect()
        }
        _ => texts(block).into_iter().map(Part::Text).collect(),
    }
}

/// Every text in a value: a string, strings in an array, an object's
/// `text` (or, failing that, its `content` or `summary`).
fn texts(value: &Value) -> Vec<String> {
    match value {
        Value::String(s) => vec![s.clone()],
        Value::Array(items) => items.iter().flat_map(texts).collect(),
        Value::Object(_) => match value.get("text") {
            Some(Value::String(text)) => vec![text.clone()],
            _ => ["content", "summary"].iter().filter_map(|k| value.get(*k)).flat_map(texts).collect(),
        },
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exact(body: Value, api: Api) -> RequestEstimate {
        estimate_request(&body, api, InputCounting::Exact)
    }

    #[test]
    fn tool_calls_and_results_count_what_they_carry() {
        let arguments = "word ".repeat(500);
        let with = |args: &str| {
            let call = json!({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": args}}]});
            exact(json!({"messages": [call]}), Api::ChatCompletions).input_tokens
        };
        assert!(with(&arguments) >= with("{}") + 500, "the arguments count");
        let result = |content: Value| {
            let block = json!({"type": "tool_result", "tool_use_id": "t", "content": content});
            exact(json!({"messages": [{"role": "user", "content": [block]}]}), Api::Anthropic).input_tokens
        };
        assert!(result(json!([{"type": "text", "text": arguments}])) >= result(json!("")) + 500);
    }

    #[test]
    fn responses_items_of_every_kind_count_and_none_is_refused() {
        let payload = "word ".repeat(300);
        let items = |extra: Value| {
            let input = json!([{"role": "user", "content": "weather?"}, extra]);
            exact(json!({"model": "gpt-4o", "input": input, "max_output_tokens": 50}), Api::Responses)
        };
        let call = items(json!({"type": "function_call", "name": "weather", "arguments": payload, "call_id": "c"}));
        let output = items(json!({"type": "function_call_output", "call_id": "c", "output": payload}));
        let reasoning = items(json!({"type": "reasoning", "summary": [{"type": "summary_text", "text": payload}]}));
        let bare = items(json!({"type": "item_reference", "id": "r"})).input_tokens;
        for counted in [call.input_tokens, output.input_tokens, reasoning.input_tokens] {
            assert!(counted >= bare + 300, "{counted} against {bare}");
        }
        assert_eq!(call.max_output_tokens, Some(50));
    }

    #[test]
    fn the_output_cap_is_max_tokens_times_n_choices_at_most_max_tokens() {
        let body = json!({"messages": [], "max_tokens": 100, "n": 3});
        assert_eq!(exact(body, Api::ChatCompletions).max_output_tokens, Some(300));
        let huge = json!({"messages": [], "max_tokens": u64::MAX, "n": 2});
        assert_eq!(exact(huge, Api::ChatCompletions).max_output_tokens, Some(MAX_TOKENS));
        assert_eq!(exact(json!({"messages": []}), Api::ChatCompletions).max_output_tokens, None);
    }
}
