//! What a provider's answer says about its limits: `llmgov_response_classify`
//! fills a struct, `llmgov_response_classify_json` returns the JSON of the
//! Rust `Classification`.

use std::collections::BTreeMap;
use std::ffi::c_char;

use llmgov_core::{classify_response, Classification, LimitDimension, LimitKind, ProviderHint};

use crate::args::{self, Out};
use crate::errors::{guard, llmgov_result, Failure, Outcome};
use crate::strings::write_json;

/// One HTTP header: bytes, not necessarily NUL-terminated or UTF-8.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct llmgov_header {
    /// The name (any case); NULL only with `name_len` 0.
    pub name: *const u8,
    /// Its length in bytes.
    pub name_len: usize,
    /// The value; NULL only with `value_len` 0.
    pub value: *const u8,
    /// Its length in bytes.
    pub value_len: usize,
}

/// Why a provider refused, as far as waiting is concerned.
#[allow(non_camel_case_types)]
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum llmgov_limit_kind {
    /// No limit was hit.
    None = 0,
    /// A rate limit refused: waiting for the window helps.
    RateLimited = 1,
    /// Billing or a hard quota: waiting never helps.
    QuotaExhausted = 2,
    /// The provider is overloaded (529, 503): back off, or try elsewhere.
    Overloaded = 3,
    /// The request can never succeed as sent: waiting never helps.
    TooLarge = 4,
}

/// What a provider's limit counts; also the index into the `remaining`,
/// `limit` and `reset_ms` arrays of `llmgov_classification`.
#[allow(non_camel_case_types)]
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum llmgov_limit_dimension {
    /// Requests per minute (or the provider's short window).
    Requests = 0,
    /// Prompt plus completion tokens per minute.
    Tokens = 1,
    /// Prompt tokens per minute.
    InputTokens = 2,
    /// Completion tokens per minute.
    OutputTokens = 3,
    /// Requests in flight at once.
    Concurrency = 4,
    /// Requests per day.
    DailyRequests = 5,
    /// Tokens per day.
    DailyTokens = 6,
    /// The provider did not say.
    Unknown = 7,
}

/// How many `llmgov_limit_dimension` values there are: the length of the
/// per-dimension arrays.
pub const LLMGOV_LIMIT_DIMENSIONS: usize = 8;

/// Which provider answered. As an argument, `LLMGOV_PROVIDER_AUTO` infers
/// it from the headers and body.
#[allow(non_camel_case_types)]
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum llmgov_provider {
    /// Infer from the answer.
    Auto = 0,
    /// OpenAI, or any OpenAI-compatible API not listed here.
    Openai = 1,
    /// Azure OpenAI.
    Azure = 2,
    /// Groq (OpenAI's header names, but requests are per day).
    Groq = 3,
    /// Anthropic.
    Anthropic = 4,
    /// Google Gemini or Vertex AI.
    Gemini = 5,
    /// Amazon Bedrock.
    Bedrock = 6,
    /// Mistral.
    Mistral = 7,
    /// OpenRouter.
    Openrouter = 8,
    /// DeepSeek.
    Deepseek = 9,
    /// Together AI.
    Together = 10,
    /// Cohere.
    Cohere = 11,
}

const PROVIDERS: [(llmgov_provider, ProviderHint); 12] = [
    (llmgov_provider::Auto, ProviderHint::Auto),
    (llmgov_provider::Openai, ProviderHint::OpenAi),
    (llmgov_provider::Azure, ProviderHint::Azure),
    (llmgov_provider::Groq, ProviderHint::Groq),
    (llmgov_provider::Anthropic, ProviderHint::Anthropic),
    (llmgov_provider::Gemini, ProviderHint::Gemini),
    (llmgov_provider::Bedrock, ProviderHint::Bedrock),
    (llmgov_provider::Mistral, ProviderHint::Mistral),
    (llmgov_provider::Openrouter, ProviderHint::OpenRouter),
    (llmgov_provider::Deepseek, ProviderHint::DeepSeek),
    (llmgov_provider::Together, ProviderHint::Together),
    (llmgov_provider::Cohere, ProviderHint::Cohere),
];

const DIMENSIONS: [(llmgov_limit_dimension, LimitDimension); LLMGOV_LIMIT_DIMENSIONS] = [
    (llmgov_limit_dimension::Requests, LimitDimension::Requests),
    (llmgov_limit_dimension::Tokens, LimitDimension::Tokens),
    (llmgov_limit_dimension::InputTokens, LimitDimension::InputTokens),
    (llmgov_limit_dimension::OutputTokens, LimitDimension::OutputTokens),
    (llmgov_limit_dimension::Concurrency, LimitDimension::Concurrency),
    (llmgov_limit_dimension::DailyRequests, LimitDimension::DailyRequests),
    (llmgov_limit_dimension::DailyTokens, LimitDimension::DailyTokens),
    (llmgov_limit_dimension::Unknown, LimitDimension::Unknown),
];

/// Everything one provider answer says about limits. Success answers are
/// classified too (`limited` false): their `remaining`, `limit` and
/// `reset_ms` keep the governor honest.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct llmgov_classification {
    /// Whether a limit, quota, overload or size cap refused the request.
    pub limited: bool,
    /// Why it was refused (`LLMGOV_LIMIT_KIND_NONE` when not).
    pub kind: llmgov_limit_kind,
    /// Which limit refused; `LLMGOV_LIMIT_DIMENSION_UNKNOWN` when not said.
    pub dimension: llmgov_limit_dimension,
    /// Whether `retry_after_ms` holds a wait.
    pub has_retry_after: bool,
    /// How long to wait before retrying, in milliseconds.
    pub retry_after_ms: u64,
    /// Whether retrying (after `retry_after_ms`) can succeed.
    pub retryable: bool,
    /// The provider the answer was read as.
    pub provider: llmgov_provider,
    /// `has_remaining[d]`: whether the answer reported what is left of the
    /// limit of dimension `d` (an `llmgov_limit_dimension`).
    pub has_remaining: [bool; LLMGOV_LIMIT_DIMENSIONS],
    /// What is left of each reported limit.
    pub remaining: [u64; LLMGOV_LIMIT_DIMENSIONS],
    /// Whether the answer reported each limit's size.
    pub has_limit: [bool; LLMGOV_LIMIT_DIMENSIONS],
    /// The size of each reported limit.
    pub limit: [u64; LLMGOV_LIMIT_DIMENSIONS],
    /// Whether the answer reported when each limit resets.
    pub has_reset: [bool; LLMGOV_LIMIT_DIMENSIONS],
    /// Milliseconds from now until each reported limit resets.
    pub reset_ms: [u64; LLMGOV_LIMIT_DIMENSIONS],
}

fn per_dimension(
    map: &BTreeMap<LimitDimension, u64>,
) -> ([bool; LLMGOV_LIMIT_DIMENSIONS], [u64; LLMGOV_LIMIT_DIMENSIONS]) {
    let (mut has, mut values) = ([false; LLMGOV_LIMIT_DIMENSIONS], [0; LLMGOV_LIMIT_DIMENSIONS]);
    for (i, (_, dimension)) in DIMENSIONS.iter().enumerate() {
        if let Some(&v) = map.get(dimension) {
            (has[i], values[i]) = (true, v);
        }
    }
    (has, values)
}

/// The C form of a classification.
pub(crate) fn fill(c: &Classification) -> llmgov_classification {
    let kind = match c.kind {
        LimitKind::None => llmgov_limit_kind::None,
        LimitKind::RateLimited => llmgov_limit_kind::RateLimited,
        LimitKind::QuotaExhausted => llmgov_limit_kind::QuotaExhausted,
        LimitKind::Overloaded => llmgov_limit_kind::Overloaded,
        LimitKind::TooLarge => llmgov_limit_kind::TooLarge,
    };
    let find = |d| DIMENSIONS.iter().find(|(_, core)| *core == d).map_or(llmgov_limit_dimension::Unknown, |(c, _)| *c);
    let provider = PROVIDERS.iter().find(|(_, core)| *core == c.provider).map_or(llmgov_provider::Auto, |(c, _)| *c);
    let ((has_remaining, remaining), (has_limit, limit), (has_reset, reset_ms)) =
        (per_dimension(&c.remaining), per_dimension(&c.limit), per_dimension(&c.reset_ms));
    llmgov_classification {
        limited: c.limited,
        kind,
        dimension: find(c.dimension),
        has_retry_after: c.retry_after_ms.is_some(),
        retry_after_ms: c.retry_after_ms.unwrap_or(0),
        retryable: c.retryable,
        provider,
        has_remaining,
        remaining,
        has_limit,
        limit,
        has_reset,
        reset_ms,
    }
}

/// The header array as the core reads it.
///
/// # Safety
/// As `llmgov_permit_report`'s headers.
pub(crate) unsafe fn headers<'a>(ptr: *const llmgov_header, len: usize) -> Outcome<Vec<(&'a [u8], &'a [u8])>> {
    // SAFETY: the caller's contract.
    let list = unsafe { args::slice(ptr, len, "headers") }?;
    list.iter()
        .enumerate()
        .map(|(i, h)| {
            // SAFETY: the caller's contract.
            unsafe {
                Ok((
                    args::slice(h.name, h.name_len, &format!("headers[{i}].name"))?,
                    args::slice(h.value, h.value_len, &format!("headers[{i}].value"))?,
                ))
            }
        })
        .collect()
}

fn provider(hint: u32) -> Outcome<ProviderHint> {
    PROVIDERS
        .iter()
        .find(|(c, _)| *c as u32 == hint)
        .map(|(_, core)| *core)
        .ok_or_else(|| Failure::argument("provider", hint, "not an llmgov_provider (0 to 11)"))
}

/// `status`, if it is an HTTP status (100 to 999, as Python and Node
/// check), else `invalid_request` naming `status`.
pub(crate) fn http_status(status: u16) -> Outcome<u16> {
    if (100..=999).contains(&status) {
        return Ok(status);
    }
    Err(Failure::Core(llmgov_core::Error::InvalidRequest {
        field: "status",
        value: status.to_string(),
        reason: "must be an HTTP status from 100 to 999".to_owned(),
    }))
}

/// A provider's answer as `llmgov_permit_report` and
/// `llmgov_redis_permit_report` take it: read, handed to `feed` (which
/// feeds it into a governor and classifies it), and the classification
/// written to `*out`.
///
/// # Safety
/// As `llmgov_permit_report`'s headers, body and `out`.
pub(crate) unsafe fn report_answer<E>(
    status: u16,
    headers_ptr: *const llmgov_header,
    headers_len: usize,
    body: *const u8,
    body_len: usize,
    out: *mut llmgov_classification,
    feed: impl FnOnce(u16, &[(&[u8], &[u8])], &[u8]) -> Result<Classification, E>,
) -> Outcome
where
    Failure: From<E>,
{
    // SAFETY: the caller's contract.
    let (headers, body, out) =
        unsafe { (headers(headers_ptr, headers_len)?, args::slice(body, body_len, "body")?, Out::new(out, "out")?) };
    let classification = feed(http_status(status)?, &headers, body)?;
    out.write(fill(&classification));
    Ok(())
}

/// Reads a status, headers and body as the classifier does.
///
/// # Safety
/// As `llmgov_response_classify`.
unsafe fn classify(
    status: u16,
    headers_ptr: *const llmgov_header,
    headers_len: usize,
    body: *const u8,
    body_len: usize,
    hint: u32,
    now_unix_ms: u64,
) -> Outcome<Classification> {
    let status = http_status(status)?;
    // SAFETY: the caller's contract.
    let (headers, body) = unsafe { (headers(headers_ptr, headers_len)?, args::slice(body, body_len, "body")?) };
    Ok(classify_response(status, &headers, body, provider(hint)?, now_unix_ms))
}

/// Classifies a provider's answer without touching any governor (to feed
/// one, use `llmgov_permit_report`). `provider` is an `llmgov_provider`
/// (`LLMGOV_PROVIDER_AUTO` to infer it); `now_unix_ms` is the wall-clock
/// time, for resets given as dates. Never fails on any bytes; a `status`
/// outside 100 to 999 is `LLMGOV_RESULT_INVALID_REQUEST` naming `status`.
///
/// # Ownership
/// Headers and body are only read, during the call.
///
/// # Safety
/// `headers` NULL (only with `headers_len` 0) or `headers_len` readable
/// headers, each name and value readable for its length (NULL only with
/// length 0); `body` likewise for `body_len` bytes; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn llmgov_response_classify(
    status: u16,
    headers: *const llmgov_header,
    headers_len: usize,
    body: *const u8,
    body_len: usize,
    provider: u32,
    now_unix_ms: u64,
    out: *mut llmgov_classification,
) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let out = unsafe { Out::new(out, "out") }?;
        // SAFETY: the caller's contract.
        let c = unsafe { classify(status, headers, headers_len, body, body_len, provider, now_unix_ms) }?;
        out.write(fill(&c));
        Ok(())
    })
}

/// As `llmgov_response_classify`, written as JSON: `{"limited", "kind",
/// "dimension", "retry_after_ms", "remaining": {"tokens": 0, …}, "limit",
/// "reset_ms", "retryable", "provider", "status"}` with names as text (`"rate_limited"`,
/// `"openai"`).
///
/// # Ownership
/// On success `*out_json` is the caller's: free it with `llmgov_string_free`.
///
/// # Safety
/// As `llmgov_response_classify`, with `out_json` for `out`.
#[no_mangle]
pub unsafe extern "C" fn llmgov_response_classify_json(
    status: u16,
    headers: *const llmgov_header,
    headers_len: usize,
    body: *const u8,
    body_len: usize,
    provider: u32,
    now_unix_ms: u64,
    out_json: *mut *mut c_char,
) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let out = unsafe { Out::new(out_json, "out_json") }?;
        // SAFETY: the caller's contract.
        let c = unsafe { classify(status, headers, headers_len, body, body_len, provider, now_unix_ms) }?;
        write_json(out, &c)
    })
}
