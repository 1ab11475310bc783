//! What a provider's answers look like on the wire: rate-limit headers and
//! error bodies, in OpenAI's and Anthropic's own shapes.

use std::time::{Duration, SystemTime};

use serde_json::json;

use super::config::{ApiShape, ProviderDimension};

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectionKind {
    /// A rate limit refused it; `None` when no limit is named (a chaos 429).
    RateLimited(Option<ProviderDimension>),
    /// The provider's cap on requests in flight refused it.
    Concurrency,
    /// It costs more on this limit than the limit ever holds: waiting never
    /// helps (OpenAI's 429 "Request too large … The input or output tokens
    /// must be reduced").
    TooLarge(ProviderDimension),
    /// Billing: waiting never helps.
    QuotaExhausted,
    /// The provider is overloaded (529, or 503 in the OpenAI shape).
    Overloaded,
    /// The provider failed (500).
    ServerError,
    /// The request itself is malformed (400).
    BadRequest,
}

impl RejectionKind {
    /// The HTTP status the provider answers with.
    pub fn status(self, shape: ApiShape) -> u16 {
        match (self, shape) {
            (
                RejectionKind::RateLimited(_)
                | RejectionKind::Concurrency
                | RejectionKind::TooLarge(_)
                | RejectionKind::QuotaExhausted,
                _,
            ) => 429,
            (RejectionKind::Overloaded, ApiShape::Openai) => 503,
            (RejectionKind::Overloaded, ApiShape::Anthropic) => 529,
            (RejectionKind::ServerError, _) => 500,
            (RejectionKind::BadRequest, _) => 400,
        }
    }
}

/// One limit's state, as a provider reports it in headers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LimitState {
    /// What it counts.
    pub dimension: ProviderDimension,
    /// Its size.
    pub limit: u64,
    /// What is left now.
    pub remaining: u64,
    /// Time until it is whole again.
    pub reset_ns: u64,
}

/// A duration as Go prints it, as OpenAI's reset headers do: `12ms`, `1s`,
/// `6m0s`, `1m51.535s`, `24h6m34s`.
pub fn go_duration(ns: u64) -> String {
    let ms = ns.div_ceil(1_000_000);
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let (h, rest) = (ms / 3_600_000, ms % 3_600_000);
    let (m, rest) = (rest / 60_000, rest % 60_000);
    let seconds = format!("{}.{:03}", rest / 1000, rest % 1000);
    let seconds = seconds.trim_end_matches('0').trim_end_matches('.');
    match (h, m) {
        (0, 0) => format!("{seconds}s"),
        (0, m) => format!("{m}m{seconds}s"),
        (h, m) => format!("{h}h{m}m{seconds}s"),
    }
}

/// Rate-limit headers for `limits`, in the provider's shape. `wall_now` is
/// the wall-clock time of `now`, for Anthropic's RFC 3339 resets.
pub fn limit_headers(shape: ApiShape, limits: &[LimitState], wall_now: SystemTime) -> Vec<(String, String)> {
    let mut headers = Vec::new();
    for state in limits {
        match shape {
            ApiShape::Openai => {
                // OpenAI reports requests and (total) tokens only.
                let name = match state.dimension {
                    ProviderDimension::Requests => "requests",
                    ProviderDimension::Tokens => "tokens",
                    _ => continue,
                };
                headers.push((format!("x-ratelimit-limit-{name}"), state.limit.to_string()));
                headers.push((format!("x-ratelimit-remaining-{name}"), state.remaining.to_string()));
                headers.push((format!("x-ratelimit-reset-{name}"), go_duration(state.reset_ns)));
            }
            ApiShape::Anthropic => {
                let name = state.dimension.as_str().replace('_', "-");
                let reset = wall_now + Duration::from_nanos(state.reset_ns);
                headers.push((format!("anthropic-ratelimit-{name}-limit"), state.limit.to_string()));
                headers.push((format!("anthropic-ratelimit-{name}-remaining"), state.remaining.to_string()));
                headers.push((
                    format!("anthropic-ratelimit-{name}-reset"),
                    humantime::format_rfc3339_seconds(ceil_to_second(reset)).to_string(),
                ));
            }
        }
    }
    headers
}

/// `time` rounded up to a whole second: Anthropic's resets are whole
/// seconds, and one truncated would come before the true reset (even
/// before now), so a client waiting for it would be refused again.
fn ceil_to_second(time: SystemTime) -> SystemTime {
    let since_epoch = time.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let seconds = since_epoch.as_secs() + u64::from(since_epoch.subsec_nanos() > 0);
    SystemTime::UNIX_EPOCH + Duration::from_secs(seconds)
}

/// `retry-after` (whole seconds, rounded up) and `retry-after-ms`.
pub fn retry_headers(retry_after_ns: u64) -> Vec<(String, String)> {
    vec![
        ("retry-after".to_owned(), retry_after_ns.div_ceil(1_000_000_000).max(1).to_string()),
        ("retry-after-ms".to_owned(), retry_after_ns.div_ceil(1_000_000).to_string()),
    ]
}

/// The error body the provider sends with a refusal.
pub fn error_body(shape: ApiShape, kind: RejectionKind, message: &str) -> String {
    match shape {
        ApiShape::Openai => {
            let (kind_type, code) = match kind {
                RejectionKind::RateLimited(Some(ProviderDimension::Requests))
                | RejectionKind::TooLarge(ProviderDimension::Requests) => ("requests", "rate_limit_exceeded"),
                RejectionKind::RateLimited(Some(_)) | RejectionKind::TooLarge(_) => ("tokens", "rate_limit_exceeded"),
                RejectionKind::RateLimited(None) => ("requests", "rate_limit_exceeded"),
                // Not `requests`, which classifiers read as the requests-per-minute limit.
                RejectionKind::Concurrency => ("concurrency", "rate_limit_exceeded"),
                RejectionKind::QuotaExhausted => ("insufficient_quota", "insufficient_quota"),
                RejectionKind::Overloaded => ("server_error", "overloaded"),
                RejectionKind::ServerError => ("server_error", "server_error"),
                RejectionKind::BadRequest => ("invalid_request_error", "invalid_request"),
            };
            json!({"error": {"message": message, "type": kind_type, "param": null, "code": code}}).to_string()
        }
        ApiShape::Anthropic => {
            let kind_type = match kind {
                RejectionKind::RateLimited(_)
                | RejectionKind::Concurrency
                | RejectionKind::TooLarge(_)
                | RejectionKind::QuotaExhausted => "rate_limit_error",
                RejectionKind::Overloaded => "overloaded_error",
                RejectionKind::ServerError => "api_error",
                RejectionKind::BadRequest => "invalid_request_error",
            };
            json!({"type": "error", "error": {"type": kind_type, "message": message}}).to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_match_openai_headers() {
        assert_eq!(go_duration(12_000_000), "12ms");
        assert_eq!(go_duration(1_000_000_000), "1s");
        assert_eq!(go_duration(360_000_000_000), "6m0s");
        assert_eq!(go_duration(111_535_000_000), "1m51.535s");
        assert_eq!(go_duration(86_794_000_000_000), "24h6m34s");
    }

    #[test]
    fn anthropic_resets_are_rfc3339() {
        let origin = SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600); // 2026-01-01
        let state =
            LimitState { dimension: ProviderDimension::InputTokens, limit: 10, remaining: 3, reset_ns: 30_000_000_000 };
        let headers = limit_headers(ApiShape::Anthropic, &[state], origin);
        assert!(headers.contains(&("anthropic-ratelimit-input-tokens-reset".into(), "2026-01-01T00:00:30Z".into())));
        assert!(headers.contains(&("anthropic-ratelimit-input-tokens-remaining".into(), "3".into())));
    }

    #[test]
    fn anthropic_resets_round_up_to_the_second_never_before_the_true_reset() {
        let origin = SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600); // 2026-01-01
        let wall_now = origin + Duration::from_millis(400);
        let state = LimitState { dimension: ProviderDimension::Tokens, limit: 10, remaining: 0, reset_ns: 200_000_000 };
        // The true reset is at 00:00:00.6: "00:00:00Z" would be before it, and before now.
        let headers = limit_headers(ApiShape::Anthropic, &[state], wall_now);
        assert!(headers.contains(&("anthropic-ratelimit-tokens-reset".into(), "2026-01-01T00:00:01Z".into())));
    }

    #[test]
    fn error_bodies_use_each_shape() {
        let body =
            error_body(ApiShape::Openai, RejectionKind::RateLimited(Some(ProviderDimension::Tokens)), "slow down");
        assert!(body.contains("\"code\":\"rate_limit_exceeded\"") && body.contains("\"type\":\"tokens\""));
        let body = error_body(ApiShape::Anthropic, RejectionKind::Overloaded, "Overloaded");
        assert!(body.contains("overloaded_error"));
        assert_eq!(RejectionKind::Overloaded.status(ApiShape::Anthropic), 529);
    }
}
