//! `classify_response` against real provider answers, and against anything.
//!
//! The table lives in `feedback_cases/*.json`: each case names its `source`
//! (provider documentation or a published real response), gives the status,
//! headers and body, and the whole expected [`Classification`]; every field
//! is compared, the maps included (an absent map means "must be empty").

use std::collections::BTreeMap;

use llmgov::feedback::{classify_response, Classification, LimitDimension, LimitKind, ProviderHint};
use proptest::prelude::*;
use serde::Deserialize;
use serde_json::Value;

/// 2026-01-01T00:00:00Z: the wall clock every case is classified at.
const NOW: u64 = 1_767_225_600_000;

const CASE_FILES: [(&str, &str); 4] = [
    ("openai.json", include_str!("feedback_cases/openai.json")),
    ("groq_anthropic.json", include_str!("feedback_cases/groq_anthropic.json")),
    ("gemini_azure_bedrock.json", include_str!("feedback_cases/gemini_azure_bedrock.json")),
    ("others_mock.json", include_str!("feedback_cases/others_mock.json")),
];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    source: String,
    hint: ProviderHint,
    status: u16,
    headers: Vec<(String, String)>,
    /// A JSON body, or a string sent as is.
    body: Value,
    expect: Expected,
}

/// A [`Classification`] whose maps may be left out when empty.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Expected {
    limited: bool,
    kind: LimitKind,
    dimension: LimitDimension,
    retry_after_ms: Option<u64>,
    retryable: bool,
    provider: ProviderHint,
    #[serde(default)]
    remaining: BTreeMap<LimitDimension, u64>,
    #[serde(default)]
    limit: BTreeMap<LimitDimension, u64>,
    #[serde(default)]
    reset_ms: BTreeMap<LimitDimension, u64>,
}

impl From<Expected> for Classification {
    fn from(e: Expected) -> Self {
        Classification {
            limited: e.limited,
            kind: e.kind,
            dimension: e.dimension,
            retry_after_ms: e.retry_after_ms,
            remaining: e.remaining,
            limit: e.limit,
            reset_ms: e.reset_ms,
            retryable: e.retryable,
            provider: e.provider,
            status: 0,
        }
    }
}

fn load_cases() -> Vec<(String, Case)> {
    let mut cases = Vec::new();
    for (file, text) in CASE_FILES {
        let parsed: Vec<Case> = serde_json::from_str(text).unwrap_or_else(|e| panic!("{file}: {e}"));
        cases.extend(parsed.into_iter().map(|case| (file.to_owned(), case)));
    }
    cases
}

fn body_bytes(body: &Value) -> Vec<u8> {
    match body {
        Value::String(text) => text.clone().into_bytes(),
        other => other.to_string().into_bytes(),
    }
}

#[test]
fn documented_and_published_responses() {
    let cases = load_cases();
    assert!(cases.len() >= 40, "the table needs at least 40 cases, has {}", cases.len());
    let mut failures = Vec::new();
    for (file, case) in cases {
        assert!(!case.source.trim().is_empty(), "{file}: every case names its source");
        let got = classify_response(case.status, &case.headers, &body_bytes(&case.body), case.hint, NOW);
        // The status read is the answer's own, but for a 2xx carrying an
        // error (OpenRouter), read as that error's code.
        let late_error = (200..300).contains(&case.status) && got.limited;
        let status = if late_error { got.status } else { case.status };
        let want = Classification { status, ..Classification::from(case.expect) };
        assert_eq!(want.limited, want.kind != LimitKind::None, "{file}: inconsistent case {}", case.source);
        if got != want {
            failures.push(format!("{file}: {}\n  want {want:?}\n  got  {got:?}", case.source));
        }
    }
    assert!(failures.is_empty(), "{} case(s) failed:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn classification_serializes_with_snake_case_names() {
    let headers = [("x-ratelimit-remaining-tokens", "0"), ("x-ratelimit-reset-tokens", "1s"), ("retry-after", "1")];
    let c = classify_response(429, &headers, b"", ProviderHint::OpenAi, NOW);
    let json = serde_json::to_value(&c).expect("serializes");
    assert_eq!(json["kind"], "rate_limited");
    assert_eq!(json["dimension"], "tokens");
    assert_eq!(json["remaining"]["tokens"], 0);
    assert_eq!(json["reset_ms"]["tokens"], 1000);
    assert_eq!(json["provider"], "openai");
    let back: Classification = serde_json::from_value(json).expect("round-trips");
    assert_eq!(back, c);
}

#[test]
fn providers_are_named_as_they_write_themselves_and_the_old_names_still_parse() {
    for (hint, name, old) in [
        (ProviderHint::OpenAi, "openai", "open_ai"),
        (ProviderHint::OpenRouter, "openrouter", "open_router"),
        (ProviderHint::DeepSeek, "deepseek", "deep_seek"),
    ] {
        assert_eq!(serde_json::to_value(hint).unwrap(), name, "as Node names it");
        for given in [name, old] {
            assert_eq!(serde_json::from_value::<ProviderHint>(given.into()).unwrap(), hint, "{given}");
        }
    }
}

#[test]
fn byte_headers_non_utf8_values_are_ignored() {
    let headers: Vec<(Vec<u8>, Vec<u8>)> = vec![
        (b"retry-after".to_vec(), vec![0xff, 0x31]),
        (b"x-ratelimit-remaining-requests".to_vec(), b"7".to_vec()),
        (vec![0xc3, 0x28], b"1".to_vec()),
    ];
    let c = classify_response(429, &headers, &[0xff, 0x00, 0xfe], ProviderHint::Auto, NOW);
    assert_eq!(c.kind, LimitKind::RateLimited);
    assert_eq!(c.retry_after_ms, None);
    assert_eq!(c.remaining.get(&LimitDimension::Requests), Some(&7));
}

#[test]
fn explicit_hint_wins_over_inference() {
    // OpenAI header names under a Groq hint: the request limit is daily.
    let headers = [("x-ratelimit-limit-requests", "14400"), ("anthropic-ratelimit-requests-limit", "50")];
    let c = classify_response(200, &headers, b"", ProviderHint::Groq, NOW);
    assert_eq!(c.provider, ProviderHint::Groq);
    assert_eq!(c.limit.get(&LimitDimension::DailyRequests), Some(&14400));
    // Anthropic's own family is still read, under its own names.
    assert_eq!(c.limit.get(&LimitDimension::Requests), Some(&50));
}

#[test]
fn rfc3339_resets_with_offsets_or_lowercase_are_read() {
    // RFC 3339 allows any offset and a lowercase `t` and `z`; only UTC in
    // uppercase was read, and the rest dropped.
    for reset in
        ["2026-01-01T00:00:30Z", "2026-01-01T01:00:30+01:00", "2025-12-31T19:00:30-05:00", "2026-01-01t00:00:30z"]
    {
        let headers = [("anthropic-ratelimit-tokens-remaining", "0"), ("anthropic-ratelimit-tokens-reset", reset)];
        let c = classify_response(429, &headers, b"", ProviderHint::Anthropic, NOW);
        assert_eq!(c.reset_ms.get(&LimitDimension::Tokens), Some(&30_000), "{reset}");
        assert_eq!(c.retry_after_ms, Some(30_000), "{reset}");
    }
}

/// Header names worth hitting: every name the parser reads, and a few it doesn't.
const NAMES: [&str; 24] = [
    "retry-after",
    "retry-after-ms",
    "x-ms-retry-after-ms",
    "x-should-retry",
    "x-amzn-errortype",
    "x-ratelimit-limit-requests",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
    "x-ratelimit-limit-tokens",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
    "anthropic-ratelimit-requests-limit",
    "anthropic-ratelimit-tokens-remaining",
    "anthropic-ratelimit-input-tokens-reset",
    "anthropic-ratelimit-output-tokens-reset",
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
    "x-tokenlimit-limit",
    "x-ratelimit-limit-req-minute",
    "x-ratelimit-remaining-tokens-minute",
    "x-groq-region",
    "X-RateLimit-Reset",
    "content-type",
];

/// Values that stress the small parsers: huge, negative, NaN, dates, durations.
fn header_value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        any::<u64>().prop_map(|n| n.to_string().into_bytes()),
        "[0-9]{15,60}(\\.[0-9]{0,30})?".prop_map(String::into_bytes),
        "-?[0-9]{1,6}(\\.[0-9]{1,6})?(ns|us|µs|ms|s|m|h){0,3}".prop_map(String::into_bytes),
        "([0-9]{1,25}[hms]){1,6}".prop_map(String::into_bytes),
        Just(b"NaN".to_vec()),
        Just(b"inf".to_vec()),
        Just(b"-1".to_vec()),
        "[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{1,9})?Z?".prop_map(String::into_bytes),
        "(Mon|Thu), [0-9]{2} (Jan|Feb) [0-9]{4} [0-9]{2}:[0-9]{2}:[0-9]{2} GMT".prop_map(String::into_bytes),
        "(true|false|TRUE|ThrottlingException|ServiceUnavailableException:x)".prop_map(String::into_bytes),
        "\\PC{0,40}".prop_map(String::into_bytes),
        proptest::collection::vec(any::<u8>(), 0..40),
    ]
}

fn header_name() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::sample::select(&NAMES[..]).prop_map(|n| n.as_bytes().to_vec()),
        "\\PC{0,30}".prop_map(String::into_bytes),
        proptest::collection::vec(any::<u8>(), 0..30),
    ]
}

/// Bodies: raw bytes, and JSON in each provider's shape with arbitrary fields.
fn body() -> impl Strategy<Value = Vec<u8>> {
    let text = "\\PC{0,80}";
    let json = (text, text, text, "[A-Za-z0-9:. -]{0,40}", any::<i64>(), "\\PC{0,20}").prop_map(
        |(message, kind, code, quota, number, delay)| {
            serde_json::json!({
                "error": {
                    "message": message, "type": kind, "code": code, "status": "RESOURCE_EXHAUSTED",
                    "details": [
                        {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay},
                        {"@type": "type.googleapis.com/google.rpc.QuotaFailure",
                         "violations": [{"quotaId": quota, "quotaValue": number.to_string()}]},
                        {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": {"seconds": number, "nanos": number}}
                    ],
                    "metadata": {"headers": {"X-RateLimit-Reset": number, "X-RateLimit-Remaining": quota}}
                }
            })
            .to_string()
            .into_bytes()
        },
    );
    prop_oneof![proptest::collection::vec(any::<u8>(), 0..256), json, "\\PC{0,200}".prop_map(String::into_bytes)]
}

fn hint() -> impl Strategy<Value = ProviderHint> {
    proptest::sample::select(vec![
        ProviderHint::Auto,
        ProviderHint::OpenAi,
        ProviderHint::Azure,
        ProviderHint::Groq,
        ProviderHint::Anthropic,
        ProviderHint::Gemini,
        ProviderHint::Bedrock,
        ProviderHint::Mistral,
        ProviderHint::OpenRouter,
        ProviderHint::DeepSeek,
        ProviderHint::Together,
        ProviderHint::Cohere,
    ])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn never_panics_and_keeps_invariants(
        status in 100u16..=599,
        headers in proptest::collection::vec((header_name(), header_value()), 0..12),
        body in body(),
        hint in hint(),
        now in prop_oneof![Just(NOW), any::<u64>()],
    ) {
        let c = classify_response(status, &headers, &body, hint, now);
        prop_assert_eq!(c.limited, c.kind != LimitKind::None);
        if matches!(c.kind, LimitKind::QuotaExhausted | LimitKind::TooLarge) {
            prop_assert!(!c.retryable);
            prop_assert_eq!(c.retry_after_ms, None);
        }
        if !c.limited {
            prop_assert_eq!(c.dimension, LimitDimension::Unknown);
        }
        if status < 400 && !(200..300).contains(&status) {
            prop_assert!(!c.limited && !c.retryable);
        }
        if hint != ProviderHint::Auto {
            prop_assert_eq!(c.provider, hint);
        }
        prop_assert!(serde_json::to_string(&c).is_ok());
    }

    #[test]
    fn any_429_is_a_refusal(headers in proptest::collection::vec((header_name(), header_value()), 0..6), body in body()) {
        let c = classify_response(429, &headers, &body, ProviderHint::Auto, NOW);
        prop_assert!(c.limited);
    }
}

/// Anthropic's token-limit 429 says "request tokens ... per-minute rate
/// limit": a token limit, though "per-min" is also in request-limit messages.
#[test]
fn anthropic_request_tokens_per_minute_is_a_token_limit() {
    let body = br#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit (https://docs.anthropic.com/en/api/rate-limits); see the response headers for current usage."}}"#;
    let headers = [("anthropic-ratelimit-tokens-remaining", "0"), ("anthropic-ratelimit-requests-remaining", "49")];
    let c = classify_response(429, &headers, body, ProviderHint::Anthropic, NOW);
    assert_eq!((c.kind, c.dimension), (LimitKind::RateLimited, LimitDimension::Tokens));
    // Its request-limit twin still names requests.
    let body = br#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of requests has exceeded your per-minute rate limit"}}"#;
    let c = classify_response(429, &headers, body, ProviderHint::Anthropic, NOW);
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
    let c = classify_response(429, &headers, b"Too Many Requests", ProviderHint::OpenAi, NOW);
    assert_eq!(c.dimension, LimitDimension::Tokens);
    assert_eq!(c.retry_after_ms, Some(20_000), "the exhausted tokens' reset is the wait");
}

/// An epoch-seconds reset with a fraction is waited out whole, never cut short.
#[test]
fn a_fractional_epoch_seconds_reset_is_not_cut_short() {
    let headers = [("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "1767225630.5")];
    let c = classify_response(429, &headers, b"", ProviderHint::Together, NOW);
    assert_eq!(c.reset_ms.get(&LimitDimension::Requests), Some(&30_500));
    let headers = [("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "1767225660000.5")];
    let c = classify_response(429, &headers, b"", ProviderHint::OpenRouter, NOW);
    assert_eq!(c.reset_ms.get(&LimitDimension::Requests), Some(&60_001), "epoch ms, rounded up");
}
