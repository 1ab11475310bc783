//! What a provider's answer says about its limits: [`classify_response`].
//!
//! Sans-IO like the ledger: the classifier reads a status, headers and a body
//! that the caller already has, and the wall-clock time the caller passes in
//! (for HTTP-dates, RFC 3339 and epoch resets). It never reads a clock and
//! never panics, whatever the bytes.
//!
//! ```
//! use llmgov::feedback::{classify_response, LimitDimension, LimitKind, ProviderHint};
//!
//! let headers = [("retry-after", "20"), ("x-ratelimit-remaining-tokens", "0"), ("x-ratelimit-reset-tokens", "20s")];
//! let body = br#"{"error":{"message":"Rate limit reached","type":"tokens","code":"rate_limit_exceeded"}}"#;
//! let c = classify_response(429, &headers, body, ProviderHint::OpenAi, 1_767_225_600_000);
//! assert!(c.limited && c.retryable);
//! assert_eq!((c.kind, c.dimension), (LimitKind::RateLimited, LimitDimension::Tokens));
//! assert_eq!(c.retry_after_ms, Some(20_000));
//! assert_eq!(c.remaining.get(&LimitDimension::Tokens), Some(&0));
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

mod body;
mod classify;
mod cooldown;
mod durations;
mod headers;

mod error_object;
mod retry;

pub use classify::classify_response;
pub use cooldown::{cooldown, LimitShape};
pub use error_object::{ErrorContext, ErrorObject, ErrorType, GatewayDecision};
pub use retry::{
    Advice, BudgetConfig, GiveUpReason, Outcome, RetryBudget, RetryConfig, RetryPolicy, RetryReason,
    DEFAULT_BASE_DELAY, DEFAULT_BUDGET_MIN_RETRIES, DEFAULT_BUDGET_RATIO, DEFAULT_BUDGET_WINDOW, DEFAULT_MAX_DELAY,
    DEFAULT_MAX_RETRIES,
};

/// Why a provider refused, as far as waiting is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitKind {
    /// A rate limit refused: waiting for the window helps.
    RateLimited,
    /// Billing or a hard quota (no credit, a spend cap, a quota of 0):
    /// waiting never helps.
    QuotaExhausted,
    /// The provider is overloaded (529, 503): back off, or try elsewhere.
    Overloaded,
    /// The request can never succeed as sent (413, or larger than the limit
    /// itself): waiting never helps.
    TooLarge,
    /// No limit was hit (success, or an error unrelated to limits).
    None,
}

/// What a limit counts, as providers report it.
///
/// Wider than [`crate::Dimension`]: providers also report daily limits, and
/// sometimes refuse without saying which limit refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitDimension {
    /// Requests per minute (or the provider's short window).
    Requests,
    /// Prompt plus completion tokens per minute.
    Tokens,
    /// Prompt tokens per minute.
    InputTokens,
    /// Completion tokens per minute.
    OutputTokens,
    /// Requests in flight at once.
    Concurrency,
    /// Requests per day.
    DailyRequests,
    /// Tokens per day.
    DailyTokens,
    /// The provider did not say.
    Unknown,
}

impl LimitDimension {
    /// The name used in JSON and every binding.
    pub fn as_str(self) -> &'static str {
        match self {
            LimitDimension::Requests => "requests",
            LimitDimension::Tokens => "tokens",
            LimitDimension::InputTokens => "input_tokens",
            LimitDimension::OutputTokens => "output_tokens",
            LimitDimension::Concurrency => "concurrency",
            LimitDimension::DailyRequests => "daily_requests",
            LimitDimension::DailyTokens => "daily_tokens",
            LimitDimension::Unknown => "unknown",
        }
    }

    /// The ledger dimension this maps to; `None` for daily and unknown limits,
    /// which a per-minute ledger limit cannot mirror.
    pub fn ledger_dimension(self) -> Option<crate::Dimension> {
        match self {
            LimitDimension::Requests => Some(crate::Dimension::Requests),
            LimitDimension::Tokens => Some(crate::Dimension::Tokens),
            LimitDimension::InputTokens => Some(crate::Dimension::InputTokens),
            LimitDimension::OutputTokens => Some(crate::Dimension::OutputTokens),
            LimitDimension::Concurrency => Some(crate::Dimension::Concurrency),
            LimitDimension::DailyRequests | LimitDimension::DailyTokens | LimitDimension::Unknown => None,
        }
    }
}

impl std::fmt::Display for LimitDimension {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which provider answered, when the caller knows.
///
/// Only a few readings depend on it: on Groq `x-ratelimit-*-requests` is a
/// daily limit, where on OpenAI and Azure it is per minute.
///
/// [`ProviderHint::Auto`] infers the provider from the answer itself:
/// `anthropic-*` headers mean Anthropic; `x-amzn-*` headers Bedrock; `x-ms-*`
/// or `apim-request-id` headers Azure; `x-groq-*` headers or an `x_groq` body
/// field Groq; `x-ratelimit-*-req-minute` headers Mistral; `x-tokenlimit-*`
/// headers Together; a body with `error.status` and `error.details` Gemini;
/// a body with `error.metadata.headers` or `error.metadata.provider_name`
/// OpenRouter. Anything else reads as OpenAI-compatible. Groq cannot always be
/// told from OpenAI (a proxy may drop `x-groq-*`), so pass the hint when the
/// caller knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
// Named as the providers write themselves (`openai`, not `open_ai`), in
// every language; the snake_case names of the first releases still parse.
#[serde(rename_all = "snake_case")]
pub enum ProviderHint {
    /// Infer from the headers and body (see the type's docs).
    #[default]
    Auto,
    /// OpenAI, or any OpenAI-compatible API not listed here.
    #[serde(rename = "openai", alias = "open_ai")]
    OpenAi,
    /// Azure OpenAI.
    Azure,
    /// Groq: OpenAI's header names, but requests are per day.
    Groq,
    /// Anthropic.
    Anthropic,
    /// Google Gemini API or Vertex AI.
    Gemini,
    /// Amazon Bedrock.
    Bedrock,
    /// Mistral.
    Mistral,
    /// OpenRouter.
    #[serde(rename = "openrouter", alias = "open_router")]
    OpenRouter,
    /// DeepSeek.
    #[serde(rename = "deepseek", alias = "deep_seek")]
    DeepSeek,
    /// Together AI.
    Together,
    /// Cohere.
    Cohere,
}

/// Everything one provider answer says about limits.
///
/// Success answers are classified too (`limited` false, kind
/// [`LimitKind::None`]): their `remaining`, `limit` and `reset_ms` feed the
/// governor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Classification {
    /// Whether a limit, quota, overload or size cap refused the request
    /// (exactly when `kind` is not [`LimitKind::None`]).
    pub limited: bool,
    /// Why it was refused.
    pub kind: LimitKind,
    /// Which limit refused; [`LimitDimension::Unknown`] when not limited or
    /// not said.
    pub dimension: LimitDimension,
    /// How long to wait before retrying, in milliseconds: the provider's own
    /// word (`retry-after-ms`, `x-ms-retry-after-ms`, `retry-after`, Gemini's
    /// `RetryInfo`, a wait in the message), or else, for a rate limit, the
    /// reset of the refusing dimension when its `remaining` is 0 (an upper
    /// bound: resets count to a full window).
    pub retry_after_ms: Option<u64>,
    /// What is left of each reported limit.
    pub remaining: BTreeMap<LimitDimension, u64>,
    /// The size of each reported limit.
    pub limit: BTreeMap<LimitDimension, u64>,
    /// Milliseconds from now until each reported limit resets (0 if past).
    pub reset_ms: BTreeMap<LimitDimension, u64>,
    /// Whether retrying (after `retry_after_ms`) can succeed: 408, 409, 429
    /// rate limits, 5xx and 529, unless `x-should-retry` says otherwise.
    /// Never for [`LimitKind::QuotaExhausted`] or [`LimitKind::TooLarge`],
    /// whatever the headers say, since waiting cannot fix them.
    pub retryable: bool,
    /// The provider the answer was read as ([`ProviderHint::Auto`] resolved).
    pub provider: ProviderHint,
    /// The HTTP status the answer was read as: its own, or the code of an
    /// `error` object a 2xx body carries (OpenRouter's late errors). Unlike
    /// `retryable`, which `x-should-retry` overrides, it tells a provider
    /// failure (5xx) from the request's own fault (4xx). 0 when unknown
    /// (a classification built by hand, or JSON without it).
    #[serde(default)]
    pub status: u16,
}
