//! [`classify_response`]: one provider answer in, one [`Classification`] out.

use std::collections::BTreeMap;

use super::body::BodyFacts;
use super::durations::wait_in_text;
use super::headers::{
    amzn_error_type, header_wait, infer_provider, read_limits, rename_dimension, should_retry, HeaderView,
};
use super::{Classification, LimitDimension, LimitKind, ProviderHint};

impl Classification {
    /// Nothing limited, nothing known.
    pub(crate) fn empty(provider: ProviderHint) -> Self {
        Classification {
            limited: false,
            kind: LimitKind::None,
            dimension: LimitDimension::Unknown,
            retry_after_ms: None,
            remaining: BTreeMap::new(),
            limit: BTreeMap::new(),
            reset_ms: BTreeMap::new(),
            retryable: false,
            provider,
            status: 0,
        }
    }
}

/// Classifies one provider answer: whether a limit refused it, which, for how
/// long, whether a retry can succeed, and what the rate-limit headers say.
///
/// - `status`: the HTTP status (any value; 2xx answers are classified too).
/// - `headers`: name/value pairs in any case, as bytes or text; values that
///   are not UTF-8 are ignored.
/// - `body`: the raw body, JSON or not (only the first 8 KiB of a non-JSON
///   body is read). The body of a 2xx answer is read only for an `error`
///   object (OpenRouter reports some errors with a 200).
/// - `hint`: the provider, or [`ProviderHint::Auto`] to infer it.
/// - `now_unix_ms`: the wall-clock time of the answer, in milliseconds since
///   the Unix epoch; HTTP-dates, RFC 3339 and epoch resets become waits from
///   it, and a time already past is a wait of 0.
///
/// Pure: reads no clock, allocates only small maps, never panics.
pub fn classify_response<K: AsRef<[u8]>, V: AsRef<[u8]>>(
    status: u16,
    headers: &[(K, V)],
    body: &[u8],
    hint: ProviderHint,
    now_unix_ms: u64,
) -> Classification {
    let mut view = HeaderView::new(headers);
    let mut facts = BodyFacts::parse(body);
    let provider = resolve_provider(hint, &view, &facts);
    let status = effective_status(status, &mut facts);
    // OpenRouter repeats its limit headers inside the body; real headers win.
    for (name, value) in &facts.embedded_headers {
        view.push(name, value);
    }

    let mut c = Classification { status, ..Classification::empty(provider) };
    read_limits(&view, provider, now_unix_ms, &mut c);
    c.kind = decide_kind(status, &view, &facts);
    c.limited = c.kind != LimitKind::None;
    if c.limited {
        c.dimension = decide_dimension(c.kind, &facts, &c);
    }
    if provider == ProviderHint::OpenRouter && c.dimension == LimitDimension::DailyRequests {
        // Its generic X-RateLimit-* then describe the daily free-model limit.
        rename_dimension(&mut c, LimitDimension::Requests, LimitDimension::DailyRequests);
    }
    c.retry_after_ms = decide_wait(status, &view, &facts, &c, now_unix_ms);
    c.retryable = decide_retryable(status, c.kind, &view);
    c
}

/// The hint, or what the answer itself points to.
fn resolve_provider(hint: ProviderHint, headers: &HeaderView, facts: &BodyFacts) -> ProviderHint {
    if hint != ProviderHint::Auto {
        return hint;
    }
    if let Some(provider) = infer_provider(headers) {
        return provider;
    }
    if facts.google_envelope {
        ProviderHint::Gemini
    } else if facts.openrouter_metadata {
        ProviderHint::OpenRouter
    } else if facts.groq_field {
        ProviderHint::Groq
    } else {
        ProviderHint::OpenAi
    }
}

/// The status that counts. A 2xx body is content, not an error, unless it
/// carries an `error` object with a 4xx/5xx code (OpenRouter's late errors);
/// otherwise its facts are dropped, so model output never reads as a refusal.
fn effective_status(status: u16, facts: &mut BodyFacts) -> u16 {
    if !(200..300).contains(&status) {
        return status;
    }
    match facts.code.parse::<u16>() {
        Ok(code) if (400..600).contains(&code) => code,
        _ => {
            *facts = BodyFacts { groq_field: facts.groq_field, ..BodyFacts::default() };
            status
        }
    }
}

/// Why the answer refused, first match wins: a request that can never fit and
/// an exhausted quota are final whatever else the answer says.
fn decide_kind(status: u16, headers: &HeaderView, facts: &BodyFacts) -> LimitKind {
    if status < 400 {
        return LimitKind::None;
    }
    let amzn = amzn_error_type(headers).unwrap_or("");
    if is_too_large(status, amzn, facts) {
        LimitKind::TooLarge
    } else if is_quota_exhausted(status, facts) {
        LimitKind::QuotaExhausted
    } else if is_overloaded(status, amzn, facts) {
        LimitKind::Overloaded
    } else if is_rate_limited(status, amzn, facts) {
        LimitKind::RateLimited
    } else {
        LimitKind::None
    }
}

fn is_too_large(status: u16, amzn: &str, facts: &BodyFacts) -> bool {
    if status == 413 || [&facts.error_type, &facts.code].iter().any(|t| *t == "request_too_large") {
        return true;
    }
    if !matches!(status, 400 | 422 | 429) {
        return false;
    }
    facts.code == "context_length_exceeded"
        || facts.says(&["request too large", "prompt is too long", "input is too long"])
        || (amzn == "ValidationException" && facts.says(&["too long", "too large"]))
        || requested_exceeds_limit(&facts.message)
}

/// OpenAI and Groq write `Limit 30000, Requested 30601`: a request above the
/// limit itself can never be admitted, however long one waits.
fn requested_exceeds_limit(message: &str) -> bool {
    let limit = number_after(message, "limit ");
    let requested = number_after(message, "requested ");
    matches!((limit, requested), (Some(l), Some(r)) if r > l)
}

/// The integer (commas allowed) right after the first `cue` in `text` that
/// a number follows (`rate limit reached … limit 30000`: not the first).
fn number_after(text: &str, cue: &str) -> Option<u64> {
    text.match_indices(cue).find_map(|(at, _)| {
        let rest = text.get(at + cue.len()..)?;
        let digits: String = rest.chars().take_while(|c| c.is_ascii_digit() || *c == ',').collect();
        let digits: String = digits.chars().filter(char::is_ascii_digit).collect();
        super::durations::parse_count(&digits)
    })
}

fn is_quota_exhausted(status: u16, facts: &BodyFacts) -> bool {
    const BILLING: [&str; 3] = ["insufficient_quota", "billing_hard_limit_reached", "insufficient_balance"];
    if status == 402 || BILLING.iter().any(|b| facts.code == *b || facts.error_type == *b) {
        return true;
    }
    if !matches!(status, 400 | 403 | 429) {
        return false;
    }
    if facts.google_envelope || facts.status == "resource_exhausted" {
        // Gemini words every 429 as "exceeded your current quota"; only a
        // quota of 0 is exhaustion.
        return facts.zero_quota || zero_limit_in(&facts.message);
    }
    facts.says(&[
        "exceeded your current quota",
        "specified api usage limits",
        "spend limit",
        "spending limit",
        "credit balance is too low",
        "insufficient balance",
        "insufficient credits",
        "/ month",
        "per month",
    ])
}

/// Gemini's message names a limit of 0 (`limit: 0`), not `limit: 0` followed
/// by more digits.
fn zero_limit_in(message: &str) -> bool {
    message
        .match_indices("limit: 0")
        .any(|(i, m)| message.get(i + m.len()..).is_some_and(|rest| !rest.starts_with(|c: char| c.is_ascii_digit())))
}

fn is_overloaded(status: u16, amzn: &str, facts: &BodyFacts) -> bool {
    if facts.says(&["too many connections"]) {
        return false; // Bedrock's connection cap is a concurrency limit: see `is_rate_limited`.
    }
    if status == 529 || status == 503 || matches!(amzn, "ServiceUnavailableException" | "ModelNotReadyException") {
        return true;
    }
    let typed = ["overloaded_error", "overloaded"].iter().any(|t| facts.error_type == *t || facts.code == *t);
    (status == 429 || status >= 500)
        && (typed || facts.status == "unavailable" || facts.says(&["overloaded", "capacity exceeded", "high demand"]))
}

fn is_rate_limited(status: u16, amzn: &str, facts: &BodyFacts) -> bool {
    const TYPES: [&str; 4] = ["rate_limit_error", "rate_limited", "rate_limit_exceeded", "throttling_error"];
    status == 429
        || amzn == "ThrottlingException"
        || facts.status == "resource_exhausted"
        || TYPES.iter().any(|t| facts.error_type == *t || facts.code == *t)
        || facts.says(&["too many connections"])
}

/// Which limit refused, from the most specific evidence to the least: Gemini
/// quota ids, the message, the error type, then the headers (the reported
/// limit with nothing left).
fn decide_dimension(kind: LimitKind, facts: &BodyFacts, c: &Classification) -> LimitDimension {
    let from_quota = gemini_dimension(&facts.quota_ids);
    match kind {
        LimitKind::None | LimitKind::Overloaded => LimitDimension::Unknown,
        LimitKind::QuotaExhausted => from_quota.unwrap_or(LimitDimension::Unknown),
        LimitKind::TooLarge => message_dimension(&facts.message).unwrap_or(LimitDimension::Unknown),
        LimitKind::RateLimited => from_quota
            .or_else(|| message_dimension(&facts.message))
            .or_else(|| type_dimension(&facts.error_type))
            .or_else(|| exhausted_dimension(c))
            .unwrap_or(LimitDimension::Unknown),
    }
}

/// OpenAI and Groq put the refusing dimension in `error.type` of a 429.
fn type_dimension(error_type: &str) -> Option<LimitDimension> {
    match error_type {
        "requests" => Some(LimitDimension::Requests),
        "tokens" => Some(LimitDimension::Tokens),
        _ => None,
    }
}

/// The dimension of Gemini's violated quotas. A per-day violation wins over
/// per-minute ones reported beside it: waiting out the minute cannot help.
fn gemini_dimension(quota_ids: &[String]) -> Option<LimitDimension> {
    let of = |id: &String| {
        let daily = id.contains("perday");
        Some(match () {
            _ if daily && id.contains("token") => LimitDimension::DailyTokens,
            _ if daily => LimitDimension::DailyRequests,
            _ if id.contains("inputtoken") => LimitDimension::InputTokens,
            _ if id.contains("outputtoken") => LimitDimension::OutputTokens,
            _ if id.contains("token") => LimitDimension::Tokens,
            _ if id.contains("request") => LimitDimension::Requests,
            _ => return None,
        })
    };
    let dimensions: Vec<LimitDimension> = quota_ids.iter().filter_map(of).collect();
    let daily = dimensions.iter().find(|d| matches!(d, LimitDimension::DailyRequests | LimitDimension::DailyTokens));
    daily.or(dimensions.first()).copied()
}

/// The dimension an error message names (OpenAI and Groq's `(TPM)`, `(RPD)`,
/// Anthropic's `input tokens per minute`, Azure's `token rate limit`,
/// Bedrock's `Too many tokens`, OpenRouter's `free-models-per-day`).
fn message_dimension(message: &str) -> Option<LimitDimension> {
    const TABLE: [(&[&str], LimitDimension); 7] = [
        (&["requests per day", "(rpd)", "per-day"], LimitDimension::DailyRequests),
        (&["tokens per day", "(tpd)"], LimitDimension::DailyTokens),
        // Before "tokens per min": Anthropic writes "input tokens per minute",
        // and OpenAI's "input or output tokens must be reduced" names neither.
        (&["input tokens per", "(itpm)", "input_tokens"], LimitDimension::InputTokens),
        (&["output tokens per", "(otpm)", "output_tokens"], LimitDimension::OutputTokens),
        // Before requests' "per-min": Anthropic writes "number of request
        // tokens has exceeded your per-minute rate limit".
        (
            &[
                "tokens per min",
                "(tpm)",
                "tokens_per_min",
                "too many tokens",
                "token rate limit",
                "tokens rate limit",
                "request tokens",
            ],
            LimitDimension::Tokens,
        ),
        (
            &[
                "requests per min",
                "(rpm)",
                "requests_per_min",
                "calls / minute",
                // Bedrock's request throttle. Not the bare "too many
                // requests": that is the 429's reason phrase, which any
                // proxy or error page says whichever limit refused.
                "too many requests, please wait",
                "call rate limit",
                "requests rate limit",
                "per-min",
            ],
            LimitDimension::Requests,
        ),
        (&["too many connections", "concurren"], LimitDimension::Concurrency),
    ];
    TABLE.iter().find(|(cues, _)| cues.iter().any(|cue| message.contains(cue))).map(|(_, d)| *d)
}

/// The reported limit with nothing left; of several, the one resetting last
/// (it binds longest).
fn exhausted_dimension(c: &Classification) -> Option<LimitDimension> {
    c.remaining
        .iter()
        .filter(|(_, left)| **left == 0)
        .max_by_key(|(d, _)| c.reset_ms.get(d).copied().unwrap_or(0))
        .map(|(d, _)| *d)
}

/// The wait: headers, then Gemini's `RetryInfo`, then a wait in the message;
/// for a rate limit without one, the reset of the exhausted refusing limit.
/// Nothing for refusals that waiting cannot fix.
fn decide_wait(
    status: u16,
    headers: &HeaderView,
    facts: &BodyFacts,
    c: &Classification,
    now_unix_ms: u64,
) -> Option<u64> {
    if matches!(c.kind, LimitKind::QuotaExhausted | LimitKind::TooLarge) {
        return None;
    }
    let explicit = header_wait(headers, now_unix_ms).or(facts.retry_delay_ms).or_else(|| {
        if status >= 400 {
            wait_in_text(&facts.message)
        } else {
            None
        }
    });
    explicit.or_else(|| {
        let refusing = (c.kind == LimitKind::RateLimited).then_some(c.dimension)?;
        (c.remaining.get(&refusing) == Some(&0)).then(|| c.reset_ms.get(&refusing).copied())?
    })
}

/// Retry only what waiting can fix; `x-should-retry` overrides, except that
/// no header makes a quota or a size cap retryable.
fn decide_retryable(status: u16, kind: LimitKind, headers: &HeaderView) -> bool {
    let by_status = match kind {
        LimitKind::QuotaExhausted | LimitKind::TooLarge => return false,
        LimitKind::RateLimited | LimitKind::Overloaded => true,
        LimitKind::None => matches!(status, 408 | 409 | 429) || (500..600).contains(&status),
    };
    if status < 400 {
        return false;
    }
    should_retry(headers).unwrap_or(by_status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_and_requests_in_messages() {
        assert!(requested_exceeds_limit("on tokens per min (tpm): limit 30000, requested 30601."));
        assert!(!requested_exceeds_limit("limit 30000, used 29000, requested 1500."));
        assert!(requested_exceeds_limit("limit 30,000, requested 30,601"));
        assert!(!requested_exceeds_limit("rate limit reached"));
    }

    /// OpenAI's and Groq's messages say "rate limit" before "Limit N": the
    /// numbers are read where they are, not after the first cue.
    #[test]
    fn limits_and_requests_after_the_words_rate_limit() {
        let message = "rate limit reached for gpt-4o in organization org-abc on tokens per min (tpm): \
                       limit 30000, used 0, requested 30601.";
        assert!(requested_exceeds_limit(message));
        let fits = "rate limit reached for gpt-4o on tokens per min (tpm): limit 30000, used 29000, requested 1500.";
        assert!(!requested_exceeds_limit(fits));
    }

    #[test]
    fn zero_limits() {
        assert!(zero_limit_in("quota exceeded for metric: x, limit: 0\nplease retry in 3s"));
        assert!(zero_limit_in("limit: 0"));
        assert!(!zero_limit_in("limit: 4000000"));
    }

    #[test]
    fn gemini_quota_ids() {
        let ids = |v: &[&str]| v.iter().map(|s| s.to_lowercase()).collect::<Vec<_>>();
        let per_minute = ids(&["GenerateContentInputTokensPerModelPerMinute-FreeTier"]);
        assert_eq!(gemini_dimension(&per_minute), Some(LimitDimension::InputTokens));
        let mixed = ids(&["GenerateRequestsPerMinutePerProjectPerModel", "GenerateRequestsPerDayPerProjectPerModel"]);
        assert_eq!(gemini_dimension(&mixed), Some(LimitDimension::DailyRequests));
        assert_eq!(gemini_dimension(&ids(&["Something"])), None);
    }
}
