//! Provider answers the classifier once misread: each test names the
//! provider text it reads and what it must make of it.

use llmgov::feedback::{LimitDimension, LimitKind};
use llmgov::{classify_response, ProviderHint};

const NOW_UNIX_MS: u64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z

/// Anthropic's token-limit 429 says "request tokens ... per-minute rate
/// limit": a token limit, though "per-min" is also in request-limit messages.
#[test]
fn anthropic_request_tokens_per_minute_is_a_token_limit() {
    let body = br#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit (https://docs.anthropic.com/en/api/rate-limits); see the response headers for current usage."}}"#;
    let headers = [("anthropic-ratelimit-tokens-remaining", "0"), ("anthropic-ratelimit-requests-remaining", "49")];
    let c = classify_response(429, &headers, body, ProviderHint::Anthropic, NOW_UNIX_MS);
    assert_eq!((c.kind, c.dimension), (LimitKind::RateLimited, LimitDimension::Tokens));
    // Its request-limit twin still names requests.
    let body = br#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of requests has exceeded your per-minute rate limit"}}"#;
    let c = classify_response(429, &headers, body, ProviderHint::Anthropic, NOW_UNIX_MS);
    assert_eq!(c.dimension, LimitDimension::Requests);
}

/// A bare "Too Many Requests" is the 429's reason phrase (proxies, gateways,
/// plain-text error pages): it names no limit. The headers say the tokens
/// ran out, and when they come back.
#[test]
fn a_bare_reason_phrase_does_not_name_the_requests_limit() {
    let headers = [
        ("x-ratelimit-remaining-requests", "499"),
        ("x-ratelimit-remaining-tokens", "0"),
        ("x-ratelimit-reset-tokens", "20s"),
    ];
    let c = classify_response(429, &headers, b"Too Many Requests", ProviderHint::OpenAi, NOW_UNIX_MS);
    assert_eq!(c.dimension, LimitDimension::Tokens);
    assert_eq!(c.retry_after_ms, Some(20_000), "the exhausted tokens' reset is the wait");
}

/// An epoch-seconds reset with a fraction is waited out whole, never cut short.
#[test]
fn a_fractional_epoch_seconds_reset_is_not_cut_short() {
    let headers = [("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "1767225630.5")];
    let c = classify_response(429, &headers, b"", ProviderHint::Together, NOW_UNIX_MS);
    assert_eq!(c.reset_ms.get(&LimitDimension::Requests), Some(&30_500));
    let headers = [("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "1767225660000.5")];
    let c = classify_response(429, &headers, b"", ProviderHint::OpenRouter, NOW_UNIX_MS);
    assert_eq!(c.reset_ms.get(&LimitDimension::Requests), Some(&60_001), "epoch ms, rounded up");
}
