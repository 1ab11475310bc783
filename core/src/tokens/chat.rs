//! Chat-request prompt tokens: messages, names, tools and images.
//!
//! # Messages
//!
//! OpenAI cookbook, "How to count tokens with tiktoken"
//! (`num_tokens_from_messages`): each message costs 3 tokens of framing plus
//! the tokens of its role and content; a `name` costs its tokens plus 1; and
//! every reply is primed with `<|start|>assistant<|message|>`, 3 more. The
//! cookbook checks this against the API's `usage.prompt_tokens` for
//! gpt-3.5-turbo, gpt-4, gpt-4o and gpt-4o-mini (129 and 124 tokens on its
//! example conversation). `gpt-3.5-turbo-0301` used 4 per message and -1 for a
//! name (the name replaced the role); that rule is kept for completeness.
//!
//! Content given as several parts costs the sum of its text parts plus its
//! images ([`image_tokens`]).
//!
//! # Tools (an approximation)
//!
//! OpenAI does not publish how tool definitions are rendered. We use the
//! cookbook's `num_tokens_for_tools`, which matched the API on its example
//! (105 tokens for gpt-3.5-turbo and gpt-4, 101 for gpt-4o and gpt-4o-mini):
//! per function 7 tokens (10 for cl100k models) plus the tokens of
//! `name:description` (a final `.` dropped); if it has properties, 3 more,
//! then per property 3 plus the tokens of `key:type:description`, and for an
//! `enum` -3 plus, per item, 3 and the item's tokens; 12 once at the end.
//! Beyond the cookbook we also count nested object properties the same way
//! (the cookbook ignores them, which would under-reserve).

use serde_json::Value;

use super::{count, encoding_for_model, image::image_tokens, Encoding};

/// How much detail the model looks at in an image.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ImageDetail {
    /// 512 x 512 low-resolution view: the base tokens only.
    Low,
    /// Tiled high-resolution view.
    High,
    /// The API chooses; charged as [`ImageDetail::High`].
    #[default]
    Auto,
}

/// One part of a message's content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part {
    /// Text.
    Text(String),
    /// An image, by its pixel size (decoding it is the caller's business).
    Image {
        /// Width in pixels.
        width: u32,
        /// Height in pixels.
        height: u32,
        /// Requested detail.
        detail: ImageDetail,
    },
}

/// A chat message as counted for the prompt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatMessage {
    /// `system`, `developer`, `user`, `assistant` or `tool`.
    pub role: String,
    /// The content, in parts.
    pub content: Vec<Part>,
    /// The optional participant name.
    pub name: Option<String>,
}

impl ChatMessage {
    /// A message with one text part and no name.
    pub fn text(role: impl Into<String>, content: impl Into<String>) -> Self {
        ChatMessage { role: role.into(), content: vec![Part::Text(content.into())], name: None }
    }

    /// Sets the participant name.
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }
}

/// Per-message framing for a model, from the cookbook.
struct Framing {
    per_message: i64,
    per_name: i64,
    per_function: i64,
}

fn framing(model: &str, encoding: Encoding) -> Framing {
    let legacy = model.rsplit('/').next().is_some_and(|name| name.eq_ignore_ascii_case("gpt-3.5-turbo-0301"));
    let per_function = if encoding == Encoding::Cl100k { 10 } else { 7 };
    if legacy {
        Framing { per_message: 4, per_name: -1, per_function }
    } else {
        Framing { per_message: 3, per_name: 1, per_function }
    }
}

/// Tokens of the reply priming `<|start|>assistant<|message|>`.
const REPLY_PRIMING: i64 = 3;

/// Exact prompt tokens of a chat request to `model` (see the module docs).
///
/// `tools` are OpenAI tool definitions, either `{"type": "function",
/// "function": {...}}` or the bare function object; other values are skipped.
pub fn count_chat(model: &str, messages: &[ChatMessage], tools: &[Value]) -> u64 {
    let encoding = encoding_for_model(model);
    count_chat_with(model, messages, tools, |text| count(encoding, text))
}

/// [`count_chat`] with any text counter (exact or estimated).
pub(crate) fn count_chat_with(
    model: &str,
    messages: &[ChatMessage],
    tools: &[Value],
    text: impl Fn(&str) -> u64,
) -> u64 {
    let framing = framing(model, encoding_for_model(model));
    let tokens = |s: &str| i64::try_from(text(s)).unwrap_or(i64::MAX);
    let mut total: i64 = REPLY_PRIMING;
    for message in messages {
        total = total.saturating_add(framing.per_message).saturating_add(tokens(&message.role));
        for part in &message.content {
            let cost = match part {
                Part::Text(s) => tokens(s),
                Part::Image { width, height, detail } => {
                    i64::try_from(image_tokens(model, *width, *height, *detail)).unwrap_or(i64::MAX)
                }
            };
            total = total.saturating_add(cost);
        }
        if let Some(name) = &message.name {
            total = total.saturating_add(tokens(name)).saturating_add(framing.per_name);
        }
    }
    total = total.saturating_add(tools_tokens(tools, framing.per_function, &tokens));
    u64::try_from(total).unwrap_or(0)
}

/// Tokens of the tool definitions, by the cookbook's formula.
fn tools_tokens(tools: &[Value], per_function: i64, tokens: &impl Fn(&str) -> i64) -> i64 {
    let mut total: i64 = 0;
    let mut any = false;
    for tool in tools {
        let function = tool.get("function").unwrap_or(tool);
        let Some(name) = function.get("name").and_then(Value::as_str) else { continue };
        any = true;
        let description = str_field(function, "description");
        let line = format!("{name}:{}", description.strip_suffix('.').unwrap_or(description));
        total = total.saturating_add(per_function).saturating_add(tokens(&line));
        if let Some(properties) = function.get("parameters").and_then(|p| p.get("properties")) {
            total = total.saturating_add(properties_tokens(properties, tokens, 0));
        }
    }
    if any {
        total = total.saturating_add(FUNCTIONS_END);
    }
    total
}

const PROPERTIES_INIT: i64 = 3;
const PROPERTY_KEY: i64 = 3;
const ENUM_INIT: i64 = -3;
const ENUM_ITEM: i64 = 3;
const FUNCTIONS_END: i64 = 12;
/// Nesting deeper than this is not counted: it bounds the recursion on
/// hostile schemas, and real tool schemas stay far shallower.
const MAX_DEPTH: usize = 16;

fn properties_tokens(properties: &Value, tokens: &impl Fn(&str) -> i64, depth: usize) -> i64 {
    let Some(map) = properties.as_object().filter(|m| !m.is_empty()) else { return 0 };
    if depth > MAX_DEPTH {
        return 0;
    }
    let mut total = PROPERTIES_INIT;
    for (key, schema) in map {
        total = total.saturating_add(PROPERTY_KEY);
        if let Some(items) = schema.get("enum").and_then(Value::as_array) {
            total = total.saturating_add(ENUM_INIT);
            for item in items {
                let text = item.as_str().map_or_else(|| item.to_string(), str::to_owned);
                total = total.saturating_add(ENUM_ITEM).saturating_add(tokens(&text));
            }
        }
        let description = str_field(schema, "description");
        let kind = str_field(schema, "type");
        let line = format!("{key}:{kind}:{}", description.strip_suffix('.').unwrap_or(description));
        total = total.saturating_add(tokens(&line));
        if let Some(nested) = schema.get("properties") {
            total = total.saturating_add(properties_tokens(nested, tokens, depth + 1));
        }
    }
    total
}

fn str_field<'a>(value: &'a Value, field: &str) -> &'a str {
    value.get(field).and_then(Value::as_str).unwrap_or("")
}
