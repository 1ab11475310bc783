//! Request bodies of both APIs, read as leniently as the providers read
//! them (unknown fields are ignored) but refusing what they refuse.

use axum::http::HeaderMap;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::error::Category;

use crate::provider::ApiShape;

/// A chat request, reduced to what the provider model needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ChatRequest {
    /// The model asked for, echoed back.
    pub model: String,
    /// The API key, or `anonymous`.
    pub key: String,
    /// `ceil(prompt_chars / 4)`.
    pub input_tokens: u64,
    /// Characters of all the prompt's text.
    pub prompt_chars: u64,
    /// The cap on the answer.
    pub max_tokens: u64,
    /// Answer as server-sent events.
    pub stream: bool,
    /// OpenAI: end the stream with a usage chunk.
    pub include_usage: bool,
}

/// A message's content: a string, or an array of parts of which only the
/// text parts count.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Debug, Deserialize)]
struct Part {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    text: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Message {
    role: String,
    // OpenAI allows a null content (an assistant turn with tool calls only).
    #[serde(default)]
    content: Option<Content>,
}

#[derive(Debug, Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

#[derive(Debug, Deserialize)]
struct OpenaiBody {
    model: String,
    messages: Vec<Message>,
    #[serde(default)]
    max_tokens: Option<u64>,
    #[serde(default)]
    max_completion_tokens: Option<u64>,
    // OpenAI's spec allows `"stream": null`, meaning false.
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
}

#[derive(Debug, Deserialize)]
struct AnthropicBody {
    model: String,
    // Optional here so that its absence gets Anthropic's own message.
    #[serde(default)]
    max_tokens: Option<u64>,
    messages: Vec<Message>,
    #[serde(default)]
    system: Option<Content>,
    #[serde(default)]
    stream: Option<bool>,
}

const OPENAI_ROLES: [&str; 6] = ["system", "developer", "user", "assistant", "tool", "function"];
const ANTHROPIC_ROLES: [&str; 2] = ["user", "assistant"];

/// Reads a request of `shape`; the error is the message of a 400.
pub(crate) fn parse(
    shape: ApiShape,
    headers: &HeaderMap,
    body: &[u8],
    default_max_tokens: u64,
) -> Result<ChatRequest, String> {
    let key = api_key(shape, headers);
    match shape {
        ApiShape::Openai => {
            let body: OpenaiBody = decode(body)?;
            let prompt_chars = messages_chars(&body.messages, &OPENAI_ROLES)?;
            let (field, max_tokens) = match (body.max_completion_tokens, body.max_tokens) {
                (Some(n), _) => ("max_completion_tokens", n),
                (None, Some(n)) => ("max_tokens", n),
                (None, None) => ("max_tokens", default_max_tokens),
            };
            if max_tokens == 0 {
                return Err(format!("{field}: must be at least 1"));
            }
            at_most_max_tokens(field, max_tokens)?;
            let include_usage = body.stream_options.is_some_and(|o| o.include_usage);
            Ok(request(body.model, key, prompt_chars, max_tokens, body.stream.unwrap_or(false), include_usage))
        }
        ApiShape::Anthropic => {
            let body: AnthropicBody = decode(body)?;
            let max_tokens = body.max_tokens.ok_or("max_tokens: Field required")?;
            if max_tokens == 0 {
                return Err("max_tokens: Input should be greater than or equal to 1".to_owned());
            }
            at_most_max_tokens("max_tokens", max_tokens)?;
            let system = body.system.as_ref().map_or(0, content_chars);
            let prompt_chars = system + messages_chars(&body.messages, &ANTHROPIC_ROLES)?;
            Ok(request(body.model, key, prompt_chars, max_tokens, body.stream.unwrap_or(false), false))
        }
    }
}

/// Refuses a cap no request could need: the provider model adds it to the
/// prompt on its limits, and the core takes no count above `MAX_TOKENS`.
fn at_most_max_tokens(field: &str, max_tokens: u64) -> Result<(), String> {
    if max_tokens > llmgov::MAX_TOKENS {
        return Err(format!("{field}: `{max_tokens}` is more than {} tokens", llmgov::MAX_TOKENS));
    }
    Ok(())
}

fn request(model: String, key: String, prompt_chars: u64, max_tokens: u64, stream: bool, usage: bool) -> ChatRequest {
    ChatRequest {
        model,
        key,
        input_tokens: input_tokens(prompt_chars),
        prompt_chars,
        max_tokens,
        stream,
        include_usage: usage,
    }
}

/// The token estimate of a prompt: a token per four characters, rounded up
/// (OpenAI's rule of thumb, and what its limiter counts).
pub(crate) fn input_tokens(prompt_chars: u64) -> u64 {
    prompt_chars.div_ceil(4)
}

/// JSON into `T`; the error names the field at fault, as the providers'
/// validation messages do.
fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    // serde would read an array as the struct's fields in order, and name
    // "[0]" as the field at fault.
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    if first.is_some_and(|&b| b != b'{') {
        return Err("the request body must be a JSON object".to_owned());
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        // serde's message for an untagged enum names the Rust type, not
        // what the API takes.
        let inner = e.inner().to_string().replace(
            "data did not match any variant of untagged enum Content",
            "must be a string or an array of content parts ({\"type\": \"text\", \"text\": \"...\"}, ...)",
        );
        match e.inner().classify() {
            Category::Data if path != "." => format!("{path}: {inner}"),
            Category::Data => inner,
            Category::Syntax | Category::Eof | Category::Io => format!("invalid JSON body: {}", e.inner()),
        }
    })?;
    de.end().map_err(|e| format!("invalid JSON body: {e}"))?;
    Ok(value)
}

/// Characters of all the messages' text, checking roles on the way.
fn messages_chars(messages: &[Message], roles: &[&str]) -> Result<u64, String> {
    if messages.is_empty() {
        return Err("messages: at least one message is required".to_owned());
    }
    let mut chars = 0;
    for (i, message) in messages.iter().enumerate() {
        if !roles.contains(&message.role.as_str()) {
            return Err(format!("messages[{i}].role: `{}` is not one of {}", message.role, roles.join(", ")));
        }
        if let Some(Content::Parts(parts)) = &message.content {
            if let Some(j) = parts.iter().position(|p| p.kind == "text" && p.text.is_none()) {
                return Err(format!("messages[{i}].content[{j}].text: Field required"));
            }
        }
        chars += message.content.as_ref().map_or(0, content_chars);
    }
    Ok(chars)
}

/// Characters (Unicode scalar values) of a content's text; images and
/// other parts weigh nothing.
fn content_chars(content: &Content) -> u64 {
    let count = |s: &str| s.chars().count() as u64;
    match content {
        Content::Text(text) => count(text),
        Content::Parts(parts) => {
            parts.iter().filter(|p| p.kind == "text").filter_map(|p| p.text.as_deref()).map(count).sum()
        }
    }
}

/// The key the request came with: the bearer token for OpenAI, `x-api-key`
/// for Anthropic (or a bearer token, as its OAuth clients send). Missing
/// keys share the `anonymous` pool: the mock checks no credentials.
fn api_key(shape: ApiShape, headers: &HeaderMap) -> String {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim).filter(|v| !v.is_empty());
    let bearer = header("authorization").and_then(|v| v.strip_prefix("Bearer ")).map(str::trim);
    let key = match shape {
        ApiShape::Openai => bearer,
        ApiShape::Anthropic => header("x-api-key").or(bearer),
    };
    key.filter(|k| !k.is_empty()).unwrap_or("anonymous").to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_openai(body: &str) -> Result<ChatRequest, String> {
        parse(ApiShape::Openai, &HeaderMap::new(), body.as_bytes(), 1024)
    }

    fn parse_anthropic(body: &str) -> Result<ChatRequest, String> {
        parse(ApiShape::Anthropic, &HeaderMap::new(), body.as_bytes(), 1024)
    }

    /// It said "data did not match any variant of untagged enum Content".
    #[test]
    fn a_content_of_the_wrong_type_says_what_is_taken() {
        let err = parse_openai(r#"{"model":"m","messages":[{"role":"user","content":5}]}"#).unwrap_err();
        assert!(err.starts_with("messages[0].content: must be a string or an array of content parts"), "{err}");
        let err = parse_anthropic(r#"{"model":"m","max_tokens":5,"system":5,"messages":[]}"#).unwrap_err();
        assert!(err.starts_with("system: must be a string or an array of content parts"), "{err}");
    }

    #[test]
    fn input_tokens_are_characters_over_four_rounded_up() {
        assert_eq!(input_tokens(0), 0);
        assert_eq!(input_tokens(1), 1);
        assert_eq!(input_tokens(8), 2);
        assert_eq!(input_tokens(9), 3);
        // "héllo" and "wörld": characters, not bytes.
        let req = parse_openai(r#"{"model":"m","messages":[{"role":"user","content":"héllo wörld"}]}"#).unwrap();
        assert_eq!((req.prompt_chars, req.input_tokens), (11, 3));
    }

    #[test]
    fn openai_counts_text_parts_and_defaults_max_tokens() {
        let body = r#"{"model":"gpt-4o","messages":[
            {"role":"system","content":"abcd"},
            {"role":"user","content":[{"type":"text","text":"efgh"},{"type":"image_url","image_url":{"url":"x"}}]},
            {"role":"assistant","content":null}],
            "stream":true,"stream_options":{"include_usage":true},"temperature":0.2}"#;
        let req = parse_openai(body).unwrap();
        assert_eq!(req.prompt_chars, 8);
        assert_eq!(req.max_tokens, 1024);
        assert!(req.stream && req.include_usage);
        assert_eq!(req.key, "anonymous");
    }

    #[test]
    fn openai_prefers_max_completion_tokens() {
        let body =
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":50,"max_completion_tokens":70}"#;
        assert_eq!(parse_openai(body).unwrap().max_tokens, 70);
    }

    #[test]
    fn anthropic_requires_max_tokens() {
        let err = parse_anthropic(r#"{"model":"claude","messages":[{"role":"user","content":"hi"}]}"#).unwrap_err();
        assert_eq!(err, "max_tokens: Field required");
    }

    #[test]
    fn anthropic_counts_the_system_prompt_and_reads_x_api_key() {
        let mut headers = HeaderMap::new();
        headers.insert("x-api-key", "sk-ant-1".parse().unwrap());
        let body = r#"{"model":"claude","max_tokens":300,"system":[{"type":"text","text":"12345678"}],
            "messages":[{"role":"user","content":"abcd"}]}"#;
        let req = parse(ApiShape::Anthropic, &headers, body.as_bytes(), 1024).unwrap();
        assert_eq!((req.prompt_chars, req.input_tokens, req.max_tokens), (12, 3, 300));
        assert_eq!(req.key, "sk-ant-1");
    }

    #[test]
    fn malformed_bodies_name_what_is_wrong() {
        assert!(parse_openai("{not json").unwrap_err().starts_with("invalid JSON body"));
        assert!(parse_openai(r#"{"model":"m"}"#).unwrap_err().contains("messages"));
        assert!(parse_openai(r#"{"model":"m","messages":[]}"#).unwrap_err().contains("at least one"));
        let err =
            parse_openai(r#"{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":-1}"#).unwrap_err();
        assert!(err.starts_with("max_tokens"), "{err}");
        let err = parse_anthropic(r#"{"model":"c","max_tokens":5,"messages":[{"role":"system","content":"x"}]}"#);
        assert!(err.unwrap_err().starts_with("messages[0].role"));
        let err =
            parse_anthropic(r#"{"model":"c","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text"}]}]}"#);
        assert_eq!(err.unwrap_err(), "messages[0].content[0].text: Field required");
        assert!(parse_openai(r#"{"model":"m","messages":[{"role":"user","content":"x"}]} trailing"#).is_err());
    }

    #[test]
    fn a_max_tokens_no_request_could_need_is_refused_naming_it() {
        let too_many = llmgov::MAX_TOKENS + 1;
        let content = r#""messages":[{"role":"user","content":"x"}]"#;
        let err = parse_openai(&format!(r#"{{"model":"m",{content},"max_tokens":{too_many}}}"#)).unwrap_err();
        assert!(err.starts_with("max_tokens") && err.contains(&too_many.to_string()), "{err}");
        let err = parse_anthropic(&format!(r#"{{"model":"c",{content},"max_tokens":{}}}"#, u64::MAX)).unwrap_err();
        assert!(err.starts_with("max_tokens") && err.contains(&u64::MAX.to_string()), "{err}");
        let body = format!(r#"{{"model":"m",{content},"max_completion_tokens":{too_many}}}"#);
        assert!(parse_openai(&body).unwrap_err().starts_with("max_completion_tokens"));
        let at_most = format!(r#"{{"model":"m",{content},"max_tokens":{}}}"#, llmgov::MAX_TOKENS);
        assert_eq!(parse_openai(&at_most).unwrap().max_tokens, llmgov::MAX_TOKENS);
    }

    #[test]
    fn a_null_stream_is_no_stream_in_both_shapes() {
        let content = r#""messages":[{"role":"user","content":"x"}]"#;
        let openai = parse_openai(&format!(r#"{{"model":"m",{content},"stream":null}}"#)).unwrap();
        assert!(!openai.stream);
        let anthropic = parse_anthropic(&format!(r#"{{"model":"c","max_tokens":5,{content},"stream":null}}"#)).unwrap();
        assert!(!anthropic.stream);
    }

    #[test]
    fn bearer_tokens_are_keys() {
        let mut headers = HeaderMap::new();
        headers.insert("authorization", "Bearer sk-123".parse().unwrap());
        let body = br#"{"model":"m","messages":[{"role":"user","content":"x"}]}"#;
        assert_eq!(parse(ApiShape::Openai, &headers, body, 1).unwrap().key, "sk-123");
    }
}
