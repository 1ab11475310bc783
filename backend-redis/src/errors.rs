//! The crate's one error type, and its mapping from the core's.

use std::sync::Arc;
use std::time::Duration;

use llmgov::Dimension;

/// Everything the distributed governor can answer instead of a permit.
///
/// Denials ([`Error::RateLimited`], [`Error::NeverFits`]) are ordinary
/// outcomes, as in the core. Redis being unreachable is *not* an error: the
/// governor falls back to its safe local share (see
/// [`crate::RedisGovernor::health`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// A limit refuses now; nothing was reserved anywhere.
    #[error("rate limited on scope `{scope}`, dimension {dimension}")]
    RateLimited {
        /// Path of the scope whose limit refused.
        scope: Arc<str>,
        /// Dimension of the limit that refused.
        dimension: Dimension,
        /// Earliest time from now this limit could admit the request, if
        /// nobody else takes the capacity; `None` for concurrency.
        retry_after: Option<Duration>,
    },
    /// The request costs more than a shared limit can ever hold.
    #[error("request can never fit scope `{scope}`: {dimension} cost {cost} exceeds the limit's burst of {burst}")]
    NeverFits {
        /// Path of the scope.
        scope: Arc<str>,
        /// Dimension of the limit.
        dimension: Dimension,
        /// What the request costs on it.
        cost: u64,
        /// The most the limit holds.
        burst: u64,
    },
    /// A field of the `[redis]` section (or of a shared scope) is wrong.
    #[error("invalid config: `{field}` = `{value}`: {reason}")]
    InvalidConfig {
        /// Dotted path of the field, e.g. `redis.expected_processes`.
        field: String,
        /// The offending value as written.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// [`crate::RedisGovernor::acquire_blocking`] was not admitted within
    /// its timeout: refused at once when the refusing limit's predicted
    /// wait was already longer, or when the timeout came. Nothing is reserved.
    #[error("deadline exceeded after waiting {} ms{}", llmgov::ceil_ms(*.waited), fmt_retry(.retry_after))]
    DeadlineExceeded {
        /// How long it waited; zero when refused at once.
        waited: Duration,
        /// The refusing limit's predicted wait from now, if it named one.
        retry_after: Option<Duration>,
    },
    /// The permit was already settled or cancelled.
    #[error("permit already reconciled")]
    AlreadyReconciled,
    /// Any error of the local engine (`llmgov::Error`), unchanged.
    #[error(transparent)]
    Core(#[from] llmgov::Error),
}

impl Error {
    /// A stable, machine-readable code; the core's codes pass through.
    pub fn code(&self) -> &'static str {
        match self {
            Error::RateLimited { .. } => "rate_limited",
            Error::NeverFits { .. } => "never_fits",
            Error::InvalidConfig { .. } => "invalid_config",
            Error::DeadlineExceeded { .. } => "deadline_exceeded",
            Error::AlreadyReconciled => "already_reconciled",
            Error::Core(core) => core.code(),
        }
    }

    pub(crate) fn config(field: impl Into<String>, value: impl ToString, reason: impl Into<String>) -> Self {
        Error::InvalidConfig { field: field.into(), value: value.to_string(), reason: reason.into() }
    }

    /// The core's denials, restated so callers match one set of variants.
    pub(crate) fn from_core(error: llmgov::Error) -> Self {
        match error {
            llmgov::Error::RateLimited { scope, dimension, retry_after, .. } => {
                Error::RateLimited { scope, dimension, retry_after }
            }
            llmgov::Error::NeverFits { scope, dimension, cost, burst, .. } => {
                Error::NeverFits { scope, dimension, cost, burst }
            }
            other => Error::Core(other),
        }
    }
}

/// The core's wording for when to retry a request that waited in vain.
fn fmt_retry(retry_after: &Option<Duration>) -> String {
    match retry_after {
        Some(d) => format!("; retry after {} ms", llmgov::ceil_ms(*d)),
        None => "; retry when an in-flight request finishes".to_owned(),
    }
}

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
