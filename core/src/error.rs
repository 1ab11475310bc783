//! The one error type of the engine. Bindings map it in a single file each.

use std::sync::Arc;
use std::time::Duration;

use crate::Dimension;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in llmgov.
///
/// Denials ([`Error::RateLimited`], [`Error::NeverFits`]) are ordinary outcomes
/// of admission, not faults; they carry what a caller needs to decide what to do.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The request fits the limit in principle but not now; nothing was reserved.
    #[error("rate limited on scope `{scope}`, dimension {dimension}{}", fmt_retry(.retry_after))]
    #[non_exhaustive]
    RateLimited {
        /// Path of the scope whose limit refused.
        scope: Arc<str>,
        /// Dimension of the limit that refused.
        dimension: Dimension,
        /// Earliest time from now at which this limit could admit the request,
        /// if no one else takes the capacity first. `None` when it depends on
        /// other requests finishing (concurrency).
        retry_after: Option<Duration>,
    },
    /// A provider scope's circuit breaker is open after consecutive
    /// failures; nothing was reserved. After `retry_after` one request goes
    /// through as a probe, and its success closes the breaker.
    #[error("circuit open on provider scope `{scope}`; retry after {} ms", crate::time::ceil_ms(*.retry_after))]
    #[non_exhaustive]
    CircuitOpen {
        /// Path of the provider scope whose breaker is open.
        scope: Arc<str>,
        /// When the breaker lets the next probe through, from now.
        retry_after: Duration,
    },
    /// The request costs more than the limit's burst: waiting can never help.
    #[error("request can never fit scope `{scope}`: {dimension} cost {cost} exceeds the limit's burst of {burst}")]
    #[non_exhaustive]
    NeverFits {
        /// Path of the scope whose limit is too small.
        scope: Arc<str>,
        /// Dimension of that limit.
        dimension: Dimension,
        /// What the request would cost on that limit.
        cost: u64,
        /// The most that limit can ever hold at once.
        burst: u64,
    },
    /// A configuration field is wrong; nothing was built.
    #[error("invalid config: `{field}` = `{value}`: {reason}")]
    InvalidConfig {
        /// Dotted path of the field, e.g. `scopes.openai/gpt-4o.limits[0].amount`.
        field: String,
        /// The offending value as written.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A scope path is malformed.
    #[error("invalid scope path `{}`: {reason}", path.escape_debug())]
    InvalidPath {
        /// The path as given.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No configured scope or template matches the path or any of its ancestors,
    /// so a request on it would be limited by nothing.
    #[error("unknown scope `{path}`: no configured scope or template matches it or any ancestor")]
    UnknownScope {
        /// The path as given.
        path: String,
    },
    /// No preset has this name.
    #[error("unknown preset `{name}`; known presets: {known}")]
    UnknownPreset {
        /// The name asked for.
        name: String,
        /// Comma-separated list of the shipped presets.
        known: String,
    },
    /// A request field is out of range.
    #[error("invalid request: `{field}` = `{value}`: {reason}")]
    InvalidRequest {
        /// The field name, e.g. `input_tokens`.
        field: &'static str,
        /// The offending value.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The permit was already settled or cancelled; a second reconciliation
    /// would refund twice. (An expired permit is [`Error::PermitExpired`].)
    #[error("permit already {state}")]
    PermitFinished {
        /// The state the permit is in.
        state: crate::PermitState,
    },
    /// The permit outlived its TTL: it was charged as estimated and its
    /// concurrency freed, so it can no longer be settled.
    #[error("permit expired: it was not settled within its TTL and was charged as estimated")]
    PermitExpired,
    /// A waiting request was not admitted within its deadline (the
    /// request's own, the class's maximum wait, or the blocking timeout):
    /// refused at once when its predicted wait was already longer, or when
    /// the deadline passed. Nothing is reserved.
    #[error("deadline exceeded after waiting {} ms{}", crate::time::ceil_ms(*.waited), fmt_retry(.retry_after))]
    #[non_exhaustive]
    DeadlineExceeded {
        /// How long it waited; zero when refused at once.
        waited: Duration,
        /// The predicted wait from now, if known: retrying sooner is futile.
        retry_after: Option<Duration>,
    },
    /// The request's traffic class already has as many waiters as its
    /// queue bound allows; refused at once, nothing reserved.
    #[error("queue of class `{class}` is full ({bound} waiting){}", fmt_retry(.retry_after))]
    #[non_exhaustive]
    QueueFull {
        /// The class's name (empty for the unnamed default class).
        class: Arc<str>,
        /// Its queue bound.
        bound: usize,
        /// The predicted time until the queue drains below its bound, if known.
        retry_after: Option<Duration>,
    },
}

fn fmt_retry(retry_after: &Option<Duration>) -> String {
    match retry_after {
        Some(d) => format!("; retry after {} ms", crate::time::ceil_ms(*d)),
        None => "; retry when an in-flight request finishes".to_owned(),
    }
}

impl Error {
    /// A stable machine-readable code, the same in every binding.
    pub fn code(&self) -> &'static str {
        match self {
            Error::RateLimited { .. } => "rate_limited",
            Error::NeverFits { .. } => "never_fits",
            Error::CircuitOpen { .. } => "circuit_open",
            Error::InvalidConfig { .. } => "invalid_config",
            Error::InvalidPath { .. } => "invalid_path",
            Error::UnknownScope { .. } => "unknown_scope",
            Error::UnknownPreset { .. } => "unknown_preset",
            Error::InvalidRequest { .. } => "invalid_request",
            Error::PermitFinished { .. } => "permit_finished",
            Error::PermitExpired => "permit_expired",
            Error::DeadlineExceeded { .. } => "deadline_exceeded",
            Error::QueueFull { .. } => "queue_full",
        }
    }

    pub(crate) fn config(field: impl Into<String>, value: impl ToString, reason: impl Into<String>) -> Self {
        Error::InvalidConfig { field: field.into(), value: value.to_string(), reason: reason.into() }
    }
}
