//! The facts an error body carries, in every provider's shape:
//!
//! - OpenAI, Groq, Azure, Together, DeepSeek: `{"error": {"message", "type", "code"}}`;
//! - Anthropic: `{"type": "error", "error": {"type", "message"}}`;
//! - Gemini / Vertex: `{"error": {"code", "message", "status", "details": [...]}}`
//!   with `google.rpc.RetryInfo` and `google.rpc.QuotaFailure` details;
//! - OpenRouter: `{"error": {"code", "message", "metadata": {"headers": {...}}}}`;
//! - Mistral: `{"object": "error", "message", "type", "code"}` or `{"message"}`;
//! - Bedrock, Cohere: `{"message"}`.
//!
//! A body that is not JSON is read as the message itself.

use serde_json::Value;

use super::durations::{parse_go_duration, parse_seconds};

/// The most of a non-JSON body read as a message: error pages are short,
/// and a huge body must not make classification slow.
const MAX_TEXT: usize = 8 * 1024;

/// What the body says, every string field lowercased for matching.
#[derive(Debug, Default)]
pub(crate) struct BodyFacts {
    /// `error.type`, or the top-level `type` when it is not the envelope's `"error"`.
    pub error_type: String,
    /// `error.code` or the top-level `code`, as text (numbers too).
    pub code: String,
    /// `error.status` (Gemini's `RESOURCE_EXHAUSTED`).
    pub status: String,
    /// `error.message`, or the top-level `message`, or the whole text body.
    pub message: String,
    /// `google.rpc.RetryInfo.retryDelay`, in milliseconds.
    pub retry_delay_ms: Option<u64>,
    /// `google.rpc.QuotaFailure.violations[].quotaId`, lowercased.
    pub quota_ids: Vec<String>,
    /// Whether a violation says `quotaValue: "0"`.
    pub zero_quota: bool,
    /// `error.metadata.headers` (OpenRouter), as name/value pairs.
    pub embedded_headers: Vec<(String, String)>,
    /// `error.metadata.provider_name` is present (OpenRouter).
    pub openrouter_metadata: bool,
    /// A Google error envelope (`error.status`, e.g. `RESOURCE_EXHAUSTED`).
    pub google_envelope: bool,
    /// An `x_groq` field at the top level.
    pub groq_field: bool,
}

impl BodyFacts {
    pub fn parse(body: &[u8]) -> Self {
        match serde_json::from_slice::<Value>(body) {
            Ok(value) => Self::from_json(&value),
            Err(_) => {
                let head = body.get(..MAX_TEXT).unwrap_or(body);
                BodyFacts { message: String::from_utf8_lossy(head).to_lowercase(), ..Self::default() }
            }
        }
    }

    fn from_json(value: &Value) -> Self {
        // Some proxies wrap the body in a one-element array (Gemini via gRPC gateways).
        let value = match value.as_array().and_then(|a| a.first()) {
            Some(first) => first,
            None => value,
        };
        let error = value.get("error");
        let mut facts = BodyFacts {
            error_type: text_of(error.and_then(|e| e.get("type"))),
            code: text_of(error.and_then(|e| e.get("code"))),
            status: text_of(error.and_then(|e| e.get("status"))),
            message: text_of(error.and_then(|e| e.get("message"))),
            groq_field: value.get("x_groq").is_some(),
            ..Self::default()
        };
        // `error.status` holds a google.rpc code name; no other provider sends it.
        facts.google_envelope = !facts.status.is_empty();
        // `error` may itself be a plain string ({"error": "Rate limit exceeded"}).
        if facts.message.is_empty() {
            facts.message = text_of(error.filter(|e| e.is_string()).or_else(|| value.get("message")));
        }
        let top_type = text_of(value.get("type"));
        if facts.error_type.is_empty() && top_type != "error" {
            facts.error_type = top_type;
        }
        if facts.code.is_empty() {
            facts.code = text_of(value.get("code"));
        }
        if let Some(error) = error {
            facts.read_google_details(error);
            facts.read_openrouter_metadata(error);
        }
        facts
    }

    fn read_google_details(&mut self, error: &Value) {
        let Some(details) = error.get("details").and_then(Value::as_array) else { return };
        for detail in details {
            let kind = detail.get("@type").and_then(Value::as_str).unwrap_or("");
            if kind.ends_with("google.rpc.RetryInfo") {
                let delay = detail.get("retryDelay");
                self.retry_delay_ms = self.retry_delay_ms.or_else(|| delay.and_then(protobuf_duration_ms));
            } else if kind.ends_with("google.rpc.QuotaFailure") {
                let violations = detail.get("violations").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
                for violation in violations {
                    let id = text_of(violation.get("quotaId"));
                    if !id.is_empty() {
                        self.quota_ids.push(id);
                    }
                    self.zero_quota |= text_of(violation.get("quotaValue")) == "0";
                }
            }
        }
    }

    fn read_openrouter_metadata(&mut self, error: &Value) {
        let Some(metadata) = error.get("metadata") else { return };
        self.openrouter_metadata = metadata.get("provider_name").is_some();
        let Some(headers) = metadata.get("headers").and_then(Value::as_object) else { return };
        self.openrouter_metadata = true;
        for (name, value) in headers {
            let value = match value {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                _ => continue,
            };
            self.embedded_headers.push((name.clone(), value));
        }
    }

    /// Whether the message contains any of `needles` (lowercase).
    pub fn says(&self, needles: &[&str]) -> bool {
        needles.iter().any(|n| self.message.contains(n))
    }
}

/// A string or number as lowercase text; anything else is empty.
fn text_of(value: Option<&Value>) -> String {
    match value {
        Some(Value::String(s)) => s.to_lowercase(),
        Some(Value::Number(n)) => n.to_string(),
        _ => String::new(),
    }
}

/// A protobuf JSON duration (`"37s"`, `"45.837906927s"`), or the
/// `{"seconds": 37, "nanos": 0}` object form, in milliseconds.
fn protobuf_duration_ms(value: &Value) -> Option<u64> {
    match value {
        Value::String(s) => parse_go_duration(s).or_else(|| parse_seconds(s)),
        Value::Object(o) => {
            let seconds = o.get("seconds").and_then(|s| s.as_u64().or_else(|| s.as_str()?.parse().ok()))?;
            let nanos = o.get("nanos").and_then(Value::as_u64).unwrap_or(0).min(999_999_999);
            Some(seconds.saturating_mul(1000).saturating_add(nanos.div_ceil(1_000_000)))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemini_details() {
        let body = br#"{"error":{"code":429,"status":"RESOURCE_EXHAUSTED","message":"m","details":[
            {"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[
                {"quotaId":"GenerateRequestsPerDayPerProjectPerModel-FreeTier","quotaValue":"0"}]},
            {"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"37s"}]}}"#;
        let facts = BodyFacts::parse(body);
        assert_eq!(facts.retry_delay_ms, Some(37_000));
        assert_eq!(facts.quota_ids, ["generaterequestsperdayperprojectpermodel-freetier"]);
        assert!(facts.zero_quota && facts.google_envelope);
        assert_eq!(facts.code, "429");
    }

    #[test]
    fn protobuf_object_durations() {
        let v: Value = serde_json::json!({"seconds": 2, "nanos": 500_000_000});
        assert_eq!(protobuf_duration_ms(&v), Some(2500));
    }

    #[test]
    fn text_and_garbage_bodies() {
        assert_eq!(BodyFacts::parse(b"Too Many Requests").message, "too many requests");
        assert_eq!(BodyFacts::parse(&[0xff, 0xfe, b'x']).message, "\u{fffd}\u{fffd}x");
        let facts = BodyFacts::parse(br#"{"error":"Rate limit exceeded"}"#);
        assert_eq!(facts.message, "rate limit exceeded");
        assert!(BodyFacts::parse(b"[]").message.is_empty());
    }
}
