//! Provider answers: `classifyResponse` and the `RetryPolicy` class.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use llmgov::feedback::{self, BudgetConfig, LimitDimension, Outcome, ProviderHint, RetryConfig};
use llmgov::{Clock, MonotonicClock};
use napi::{Env, Result};
use napi_derive::napi;
use serde_json::Value;

use crate::errors::{invalid, OrThrow};
use crate::numbers::{count, js, millis, MAX_SAFE};

/// What one provider answer says about limits (the core's
/// `Classification`, camelCased).
#[napi(object)]
pub struct Classification {
    /// Whether a limit, quota, overload or size cap refused the request.
    pub limited: bool,
    /// `rate_limited`, `quota_exhausted`, `overloaded`, `too_large` or `none`.
    pub kind: String,
    /// The limit that refused: `requests`, `tokens`, `input_tokens`,
    /// `output_tokens`, `concurrency`, `daily_requests`, `daily_tokens` or
    /// `unknown`.
    pub dimension: String,
    /// How long to wait before retrying, in milliseconds.
    pub retry_after_ms: Option<f64>,
    /// What is left of each reported limit, by dimension.
    pub remaining: HashMap<String, f64>,
    /// The size of each reported limit, by dimension.
    pub limit: HashMap<String, f64>,
    /// Milliseconds until each reported limit resets, by dimension.
    pub reset_ms: HashMap<String, f64>,
    /// Whether retrying (after `retryAfterMs`) can succeed.
    pub retryable: bool,
    /// The provider the answer was read as.
    pub provider: String,
    /// The status that counted: the HTTP status, or the error code a 2xx
    /// body carried (OpenRouter's late errors).
    pub status: u32,
}

/// Provider names as the bindings spell them, with the core's hint.
const PROVIDERS: [(&str, ProviderHint); 12] = [
    ("auto", ProviderHint::Auto),
    ("openai", ProviderHint::OpenAi),
    ("azure", ProviderHint::Azure),
    ("groq", ProviderHint::Groq),
    ("anthropic", ProviderHint::Anthropic),
    ("gemini", ProviderHint::Gemini),
    ("bedrock", ProviderHint::Bedrock),
    ("mistral", ProviderHint::Mistral),
    ("openrouter", ProviderHint::OpenRouter),
    ("deepseek", ProviderHint::DeepSeek),
    ("together", ProviderHint::Together),
    ("cohere", ProviderHint::Cohere),
];

fn provider_hint(name: Option<&str>) -> llmgov::Result<ProviderHint> {
    let Some(name) = name else { return Ok(ProviderHint::Auto) };
    PROVIDERS.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, hint)| *hint).ok_or_else(|| {
        let known: Vec<&str> = PROVIDERS.iter().map(|(n, _)| *n).collect();
        invalid("provider", name, format!("not a provider; known: {}", known.join(", ")))
    })
}

fn provider_name(hint: ProviderHint) -> &'static str {
    PROVIDERS.iter().find(|(_, h)| *h == hint).map_or("auto", |(n, _)| n)
}

/// The serde name of a core enum value (`rate_limited`, `none`, …).
fn serde_name<T: serde::Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(Value::String(s)) => s,
        _ => String::from("unknown"),
    }
}

fn by_dimension(map: &std::collections::BTreeMap<LimitDimension, u64>) -> HashMap<String, f64> {
    map.iter().map(|(d, v)| (d.as_str().to_owned(), *v as f64)).collect()
}

/// Headers arrive flattened, `[name, value, name, value, …]`: one array of
/// strings is the cheapest shape to cross N-API.
fn header_pairs(flat: &[String]) -> llmgov::Result<Vec<(&str, &str)>> {
    if flat.len() % 2 != 0 {
        return Err(invalid("headers", flat.len(), "must flatten to [name, value, …] pairs"));
    }
    Ok(flat.chunks_exact(2).map(|pair| (pair[0].as_str(), pair[1].as_str())).collect())
}

/// An HTTP status as JavaScript gives it: a whole number from 100 to 999
/// (never wrapped nor truncated into that range).
fn status_code(status: f64) -> llmgov::Result<u16> {
    if (100.0..=999.0).contains(&status) && status.fract() == 0.0 {
        Ok(status as u16)
    } else {
        Err(invalid("status", js(status), "must be an HTTP status code (100 to 999)"))
    }
}

fn wall_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// An answer's status and flattened headers as JavaScript gives them,
/// checked.
pub(crate) fn answer(status: f64, headers: &[String]) -> llmgov::Result<(u16, Vec<(&str, &str)>)> {
    Ok((status_code(status)?, header_pairs(headers)?))
}

/// The core's classification, camelCased for JavaScript.
pub(crate) fn to_js(c: &feedback::Classification) -> Classification {
    Classification {
        limited: c.limited,
        kind: serde_name(&c.kind),
        dimension: c.dimension.as_str().to_owned(),
        retry_after_ms: c.retry_after_ms.map(|ms| ms as f64),
        remaining: by_dimension(&c.remaining),
        limit: by_dimension(&c.limit),
        reset_ms: by_dimension(&c.reset_ms),
        retryable: c.retryable,
        provider: provider_name(c.provider).to_owned(),
        status: u32::from(c.status),
    }
}

/// Classifies an answer; returns it for JavaScript and for the core.
pub fn classify(
    env: &Env,
    status: f64,
    headers: &[String],
    body: &str,
    provider: Option<&str>,
    now_ms: Option<f64>,
) -> Result<(Classification, feedback::Classification)> {
    let inputs = (|| {
        let now = match now_ms {
            Some(ms) => count("now_ms", ms)?,
            None => wall_ms(),
        };
        let (status, pairs) = answer(status, headers)?;
        Ok::<_, llmgov::Error>((status, pairs, provider_hint(provider)?, now))
    })();
    let (status, pairs, hint, now) = inputs.or_throw(env)?;
    let c = feedback::classify_response(status, &pairs, body.as_bytes(), hint, now);
    Ok((to_js(&c), c))
}

/// Reads what a provider's answer says about its limits. `headers` are
/// flattened `[name, value, …]`; `nowMs` is the wall clock in Unix
/// milliseconds (for resets given as dates), now by default.
#[napi(js_name = "nativeClassifyResponse", catch_unwind)]
pub fn classify_response(
    env: Env,
    status: f64,
    headers: Vec<String>,
    body: String,
    provider: Option<String>,
    now_ms: Option<f64>,
) -> Result<Classification> {
    Ok(classify(&env, status, &headers, &body, provider.as_deref(), now_ms)?.0)
}

/// How a `RetryPolicy` advises; every field has the core's default.
#[napi(object)]
pub struct RetryOptions {
    /// Retries per request at most (default 2).
    pub max_retries: Option<f64>,
    /// Base of the exponential backoff in ms (default 500).
    pub base_delay_ms: Option<f64>,
    /// Cap of the exponential backoff in ms (default 8000).
    pub max_delay_ms: Option<f64>,
    /// Window of the retry budget in ms (default 60000).
    pub budget_window_ms: Option<f64>,
    /// Share of the window's requests that may be retried, in [0, 1] (default 0.1).
    pub budget_ratio: Option<f64>,
    /// Retries allowed per window however few requests it saw (default 10).
    pub budget_min_retries: Option<f64>,
}

/// Why a retry can succeed or why to give up.
#[napi(object)]
pub struct AdviceReason {
    /// `rate_limited`, `overloaded`, `transient`, `connection_error`;
    /// or `not_retryable`, `attempts_exhausted`, `deadline_exceeded`,
    /// `budget_exhausted`.
    pub code: String,
    /// `rate_limited`: the limit that refused.
    pub dimension: Option<String>,
    /// `transient`, `not_retryable`: the HTTP status.
    pub status: Option<u32>,
    /// `not_retryable`: the classifier's kind.
    pub kind: Option<String>,
    /// `attempts_exhausted`: retries already made.
    pub retries: Option<u32>,
}

/// The advice for one failed attempt.
#[napi(object)]
pub struct Advice {
    /// `retry_after` or `give_up`.
    pub advice: String,
    /// With `retry_after`: how long to wait first, in whole milliseconds
    /// rounded up.
    pub delay_ms: Option<f64>,
    /// Why.
    pub reason: AdviceReason,
}

/// Decides whether and when to retry a failed request: the provider's
/// retry-after or full-jitter backoff, whichever is longer, within a retry
/// budget shared by every request that uses this policy and the deadline.
#[napi]
pub struct RetryPolicy {
    policy: feedback::RetryPolicy,
    clock: MonotonicClock,
    random: AtomicU64,
}

fn retry_config(options: Option<RetryOptions>) -> llmgov::Result<RetryConfig> {
    let mut config = RetryConfig::default();
    let Some(o) = options else { return Ok(config) };
    let mut budget = BudgetConfig::default();
    if let Some(n) = o.max_retries {
        config.max_retries = retries("max_retries", n)?;
    }
    if let Some(ms) = o.base_delay_ms {
        config.base_delay = millis("base_delay_ms", ms)?;
    }
    if let Some(ms) = o.max_delay_ms {
        config.max_delay = millis("max_delay_ms", ms)?;
    }
    if let Some(ms) = o.budget_window_ms {
        budget.window = millis("budget_window_ms", ms)?;
    }
    if let Some(ratio) = o.budget_ratio {
        budget.ratio = ratio;
    }
    if let Some(n) = o.budget_min_retries {
        budget.min_retries = retries("budget_min_retries", n)?;
    }
    config.budget = budget;
    Ok(config)
}

/// A number of retries: a whole number from 0 to 2^32 − 1 (never wrapped).
fn retries(field: &'static str, value: f64) -> llmgov::Result<u32> {
    let n = count(field, value)?;
    u32::try_from(n).map_err(|_| invalid(field, n, "must be at most 2^32 - 1"))
}

#[napi]
impl RetryPolicy {
    /// A policy with the given options (the core's defaults otherwise).
    #[napi(constructor, catch_unwind)]
    pub fn new(env: Env, options: Option<RetryOptions>) -> Result<Self> {
        let config = retry_config(options).or_throw(&env)?;
        let policy = feedback::RetryPolicy::new(config).or_throw(&env)?;
        let seed = std::hash::BuildHasher::hash_one(&std::collections::hash_map::RandomState::new(), 0u8) | 1;
        Ok(RetryPolicy { policy, clock: MonotonicClock::new(), random: AtomicU64::new(seed) })
    }

    /// Counts one first attempt in the retry budget (retries are not counted).
    #[napi(catch_unwind)]
    pub fn record_request(&self) {
        self.policy.record_request(self.clock.now());
    }

    /// Advises on a failed attempt: `attempt` retries already made (0 after
    /// the first attempt failed); `status` with `headers` (flattened) and
    /// `body` for an answer, or no status for a connection error;
    /// `deadlineInMs`, the time left until the request's deadline.
    #[napi(catch_unwind)]
    pub fn advise(
        &self,
        env: Env,
        attempt: u32,
        status: Option<f64>,
        headers: Vec<String>,
        body: String,
        deadline_in_ms: Option<f64>,
    ) -> Result<Advice> {
        let now = self.clock.now();
        let deadline = match deadline_in_ms {
            // Far deadlines are capped; NaN stays NaN, refused by `millis`.
            Some(ms) => {
                let capped = if ms > MAX_SAFE { MAX_SAFE } else { ms };
                Some(now.saturating_add(duration_ns(millis("deadline_in_ms", capped).or_throw(&env)?)))
            }
            None => None,
        };
        let random = self.next_random();
        let advice = match status {
            Some(status) => {
                let (_, c) = classify(&env, status, &headers, &body, None, None)?;
                let code = status_code(status).or_throw(&env)?;
                self.policy.advise(Outcome::response(code, &c), attempt, deadline, now, random)
            }
            None => self.policy.advise(Outcome::ConnectionError, attempt, deadline, now, random),
        };
        Ok(advice_js(&advice))
    }
}

impl RetryPolicy {
    /// xorshift64*: the jitter needs a uniform draw, not a secure one.
    fn next_random(&self) -> u64 {
        let mut x = self.random.load(Ordering::Relaxed);
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.random.store(x, Ordering::Relaxed);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The advice through its serde form (the core's JSON), camelCased, so that
/// reasons the core adds later arrive with their fields.
fn advice_js(advice: &feedback::Advice) -> Advice {
    let value = serde_json::to_value(advice).unwrap_or(Value::Null);
    let reason = value.get("reason").cloned().unwrap_or(Value::Null);
    let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    let number = |v: &Value, k: &str| v.get(k).and_then(Value::as_u64).and_then(|n| u32::try_from(n).ok());
    Advice {
        advice: text(&value, "advice").unwrap_or_else(|| "give_up".into()),
        delay_ms: advice.delay().map(|d| llmgov::ceil_ms(d) as f64),
        reason: AdviceReason {
            code: text(&reason, "code").unwrap_or_else(|| "unknown".into()),
            dimension: text(&reason, "dimension"),
            status: number(&reason, "status"),
            kind: text(&reason, "kind"),
            retries: number(&reason, "retries"),
        },
    }
}
