//! Rate-limit headers of every documented shape, read into the three maps of
//! a [`Classification`](super::Classification), and the waits headers carry.

use super::durations::{
    parse_any_reset, parse_count, parse_millis, parse_relative_reset, parse_retry_after, parse_rfc3339_wait,
};
use super::{Classification, LimitDimension, ProviderHint};

/// Headers with lowercase names and trimmed UTF-8 values. Values that are not
/// UTF-8 are dropped: no documented limit header uses other bytes.
#[derive(Debug, Default)]
pub(crate) struct HeaderView {
    entries: Vec<(String, String)>,
}

impl HeaderView {
    pub fn new<K: AsRef<[u8]>, V: AsRef<[u8]>>(headers: &[(K, V)]) -> Self {
        let mut view = HeaderView::default();
        for (name, value) in headers {
            let (Ok(name), Ok(value)) = (std::str::from_utf8(name.as_ref()), std::str::from_utf8(value.as_ref()))
            else {
                continue;
            };
            view.push(name, value);
        }
        view
    }

    pub fn push(&mut self, name: &str, value: &str) {
        self.entries.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }

    /// The first value of `name` (lowercase).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.entries.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    pub fn has_prefix(&self, prefix: &str) -> bool {
        self.entries.iter().any(|(n, _)| n.starts_with(prefix))
    }
}

/// The provider the headers point to, if any (see [`ProviderHint`]).
pub(crate) fn infer_provider(headers: &HeaderView) -> Option<ProviderHint> {
    if headers.has_prefix("anthropic-") {
        Some(ProviderHint::Anthropic)
    } else if headers.has_prefix("x-amzn-") {
        Some(ProviderHint::Bedrock)
    } else if headers.has_prefix("x-ms-") || headers.get("apim-request-id").is_some() {
        Some(ProviderHint::Azure)
    } else if headers.has_prefix("x-groq-") {
        Some(ProviderHint::Groq)
    } else if headers.get("x-ratelimit-limit-req-minute").is_some()
        || headers.get("x-ratelimit-limit-tokens-minute").is_some()
    {
        Some(ProviderHint::Mistral)
    } else if headers.has_prefix("x-tokenlimit-") {
        Some(ProviderHint::Together)
    } else {
        None
    }
}

/// How a family of headers writes its resets.
#[derive(Clone, Copy)]
enum ResetForm {
    /// Go duration or bare seconds (OpenAI, Groq, Azure).
    Relative,
    /// RFC 3339 timestamp (Anthropic).
    Rfc3339,
    /// Epoch ms, epoch s, seconds, Go duration or RFC 3339 (OpenRouter, Together).
    Any,
}

/// Reads one limit's `limit`, `remaining` and `reset` headers into `out`.
fn read_triple(
    headers: &HeaderView,
    names: [&str; 3],
    dimension: LimitDimension,
    form: ResetForm,
    now_unix_ms: u64,
    out: &mut Classification,
) {
    let [limit, remaining, reset] = names;
    if let Some(v) = headers.get(limit).and_then(parse_count) {
        out.limit.insert(dimension, v);
    }
    if let Some(v) = headers.get(remaining).and_then(parse_count) {
        out.remaining.insert(dimension, v);
    }
    let reset = headers.get(reset).and_then(|text| match form {
        ResetForm::Relative => parse_relative_reset(text),
        ResetForm::Rfc3339 => parse_rfc3339_wait(text, now_unix_ms),
        ResetForm::Any => parse_any_reset(text, now_unix_ms),
    });
    if let Some(v) = reset {
        out.reset_ms.insert(dimension, v);
    }
}

/// Fills `out.limit`, `out.remaining` and `out.reset_ms` from every header
/// family present. Specific families are read before generic ones, and a
/// dimension already filled is kept.
pub(crate) fn read_limits(headers: &HeaderView, provider: ProviderHint, now_unix_ms: u64, out: &mut Classification) {
    read_anthropic(headers, now_unix_ms, out);
    read_openai(headers, provider, now_unix_ms, out);
    read_mistral(headers, now_unix_ms, out);
    read_generic(headers, now_unix_ms, out);
}

fn read_anthropic(headers: &HeaderView, now_unix_ms: u64, out: &mut Classification) {
    const FAMILIES: [(&str, LimitDimension); 4] = [
        ("requests", LimitDimension::Requests),
        ("tokens", LimitDimension::Tokens),
        ("input-tokens", LimitDimension::InputTokens),
        ("output-tokens", LimitDimension::OutputTokens),
    ];
    for (name, dimension) in FAMILIES {
        let names = [
            &format!("anthropic-ratelimit-{name}-limit"),
            &format!("anthropic-ratelimit-{name}-remaining"),
            &format!("anthropic-ratelimit-{name}-reset"),
        ];
        read_triple(headers, names.map(String::as_str), dimension, ResetForm::Rfc3339, now_unix_ms, out);
    }
}

fn read_openai(headers: &HeaderView, provider: ProviderHint, now_unix_ms: u64, out: &mut Classification) {
    // Groq reuses OpenAI's names, but its request limit is per day.
    let requests =
        if provider == ProviderHint::Groq { LimitDimension::DailyRequests } else { LimitDimension::Requests };
    let families = [
        ("requests", requests),
        ("tokens", LimitDimension::Tokens),
        ("input-tokens", LimitDimension::InputTokens),
        ("output-tokens", LimitDimension::OutputTokens),
    ];
    read_x_ratelimit(headers, &families, now_unix_ms, out);
}

fn read_mistral(headers: &HeaderView, now_unix_ms: u64, out: &mut Classification) {
    const FAMILIES: [(&str, LimitDimension); 3] = [
        ("req-minute", LimitDimension::Requests),
        ("tokens-minute", LimitDimension::Tokens),
        ("tokens-day", LimitDimension::DailyTokens),
    ];
    read_x_ratelimit(headers, &FAMILIES, now_unix_ms, out);
}

/// `x-ratelimit-{limit,remaining,reset}-{name}` for each `(name, dimension)`,
/// resets relative (Go durations or seconds).
fn read_x_ratelimit(
    headers: &HeaderView,
    families: &[(&str, LimitDimension)],
    now_unix_ms: u64,
    out: &mut Classification,
) {
    for &(name, dimension) in families {
        let names = [
            &format!("x-ratelimit-limit-{name}"),
            &format!("x-ratelimit-remaining-{name}"),
            &format!("x-ratelimit-reset-{name}"),
        ];
        read_triple(headers, names.map(String::as_str), dimension, ResetForm::Relative, now_unix_ms, out);
    }
}

/// `X-RateLimit-{Limit,Remaining,Reset}` without a dimension (OpenRouter,
/// Together) count requests; Together's `x-tokenlimit-*` count tokens.
fn read_generic(headers: &HeaderView, now_unix_ms: u64, out: &mut Classification) {
    let mut generic = Classification::empty(out.provider);
    let names = ["x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"];
    read_triple(headers, names, LimitDimension::Requests, ResetForm::Any, now_unix_ms, &mut generic);
    let names = ["x-tokenlimit-limit", "x-tokenlimit-remaining", "x-tokenlimit-reset"];
    read_triple(headers, names, LimitDimension::Tokens, ResetForm::Any, now_unix_ms, &mut generic);
    merge_missing(out, generic);
}

/// Moves `from`'s entries into `into` where `into` has none for the dimension.
pub(crate) fn merge_missing(into: &mut Classification, from: Classification) {
    for (dimension, v) in from.limit {
        into.limit.entry(dimension).or_insert(v);
    }
    for (dimension, v) in from.remaining {
        into.remaining.entry(dimension).or_insert(v);
    }
    for (dimension, v) in from.reset_ms {
        into.reset_ms.entry(dimension).or_insert(v);
    }
}

/// Moves every entry of `from` under dimension `old` to `new` (OpenRouter's
/// generic request limit is daily on its free-model tier).
pub(crate) fn rename_dimension(c: &mut Classification, old: LimitDimension, new: LimitDimension) {
    for map in [&mut c.limit, &mut c.remaining, &mut c.reset_ms] {
        if let Some(v) = map.remove(&old) {
            map.entry(new).or_insert(v);
        }
    }
}

/// The wait the headers ask for, most precise first, as the OpenAI SDKs read
/// them: `retry-after-ms`, Azure's `x-ms-retry-after-ms`, then `retry-after`.
pub(crate) fn header_wait(headers: &HeaderView, now_unix_ms: u64) -> Option<u64> {
    headers
        .get("retry-after-ms")
        .and_then(parse_millis)
        .or_else(|| headers.get("x-ms-retry-after-ms").and_then(parse_millis))
        .or_else(|| headers.get("retry-after").and_then(|v| parse_retry_after(v, now_unix_ms)))
}

/// `x-should-retry: true|false`, when present and well formed.
pub(crate) fn should_retry(headers: &HeaderView) -> Option<bool> {
    match headers.get("x-should-retry")?.to_ascii_lowercase().as_str() {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

/// Bedrock's `x-amzn-ErrorType`, without the `:http://internal...` suffix.
pub(crate) fn amzn_error_type(headers: &HeaderView) -> Option<&str> {
    let value = headers.get("x-amzn-errortype")?;
    Some(value.split(':').next().unwrap_or(value).trim())
}
