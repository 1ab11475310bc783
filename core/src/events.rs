//! Events a governor tells its application about as they happen: local
//! denials, provider rejections and breaker changes. One hook per
//! governor, called on the thread where the event happened; the paths that
//! admit never call it, so it may log, count or export at leisure.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use serde::Serialize;

use crate::feedback::{Classification, LimitDimension, LimitKind};
use crate::metrics::RefusalCount;
use crate::{Error, Result};

/// Something a governor did or learned that an application may want to see.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Event {
    /// A request was refused before it left: rate limited, never fits,
    /// breaker open, queue full or deadline.
    Denied {
        /// The error's stable code (`rate_limited`, `never_fits`, …).
        code: &'static str,
        /// The scope that refused, where one did.
        scope: Option<String>,
        /// The dimension that refused, where one did.
        dimension: Option<&'static str>,
        /// When it could pass, in milliseconds, where that is known.
        retry_after_ms: Option<u64>,
        /// The request's traffic class (empty for the default class).
        class: String,
    },
    /// The provider refused a request that llmgov had admitted.
    ProviderRejected {
        /// The provider scopes of its route.
        scopes: Vec<String>,
        /// Why: `rate_limited`, `quota_exhausted`, `overloaded` or `too_large`.
        kind: LimitKind,
        /// The limit the provider named, if it named one.
        dimension: LimitDimension,
        /// The provider's own wait, in milliseconds.
        retry_after_ms: Option<u64>,
    },
    /// A provider scope's circuit breaker opened or closed.
    BreakerChanged {
        /// The provider scope.
        scope: String,
        /// `open` or `closed`.
        state: &'static str,
    },
}

/// The callback type of [`crate::Governor::set_event_hook`].
pub type EventHook = Arc<dyn Fn(&Event) + Send + Sync>;

/// A governor's hook, set at most once, and its refusals by dimension.
#[derive(Default)]
pub(crate) struct Events {
    hook: OnceLock<EventHook>,
    pub tally: RefusalTally,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events").field("hooked", &self.hook.get().is_some()).finish()
    }
}

/// Dimensions a local refusal names; `none` for refusals that name none
/// (an open breaker, a full queue, a deadline).
const LOCAL_DIMENSIONS: [&str; 7] =
    ["requests", "input_tokens", "output_tokens", "tokens", "concurrency", "cost", "none"];

/// Limits a provider's refusal names.
const PROVIDER_DIMENSIONS: [LimitDimension; 8] = [
    LimitDimension::Requests,
    LimitDimension::Tokens,
    LimitDimension::InputTokens,
    LimitDimension::OutputTokens,
    LimitDimension::Concurrency,
    LimitDimension::DailyRequests,
    LimitDimension::DailyTokens,
    LimitDimension::Unknown,
];

/// Refusals counted by the dimension they name and by who refused (the
/// error object's `gateway_decision`): llmgov before sending, or the
/// provider after llmgov admitted.
#[derive(Debug, Default)]
pub(crate) struct RefusalTally {
    local: [AtomicU64; LOCAL_DIMENSIONS.len()],
    provider: [AtomicU64; PROVIDER_DIMENSIONS.len()],
}

impl RefusalTally {
    /// Counts a local refusal (errors that are not refusals are not counted).
    pub fn denied(&self, error: &Error) {
        let dimension = match error {
            Error::RateLimited { dimension, .. } | Error::NeverFits { dimension, .. } => dimension.as_str(),
            Error::CircuitOpen { .. } | Error::QueueFull { .. } | Error::DeadlineExceeded { .. } => "none",
            _ => return,
        };
        let index = LOCAL_DIMENSIONS.iter().position(|&d| d == dimension).expect("every dimension is listed");
        self.local[index].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a provider's refusal of an admitted request.
    pub fn rejected(&self, feedback: &Classification) {
        if feedback.limited {
            let index = PROVIDER_DIMENSIONS.iter().position(|&d| d == feedback.dimension).expect("listed");
            self.provider[index].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The count of every (dimension, gateway_decision) pair.
    pub fn counts(&self) -> Vec<RefusalCount> {
        let local = LOCAL_DIMENSIONS.iter().zip(&self.local).map(|(d, n)| (*d, "rejected_locally", n));
        let provider = PROVIDER_DIMENSIONS.iter().map(|d| d.as_str()).zip(&self.provider);
        let provider = provider.map(|(d, n)| (d, "admitted_then_provider_rejected", n));
        local
            .chain(provider)
            .map(|(dimension, gateway_decision, n)| RefusalCount {
                dimension,
                gateway_decision,
                count: n.load(Ordering::Relaxed),
            })
            .collect()
    }
}

impl Events {
    pub fn set(&self, hook: EventHook) -> Result<()> {
        self.hook.set(hook).map_err(|_| Error::InvalidRequest {
            field: "event_hook",
            value: "a second hook".to_owned(),
            reason: "a governor takes one event hook; dispatch to several from it".to_owned(),
        })
    }

    /// Whether anyone listens: events are built only then.
    #[inline]
    pub fn hooked(&self) -> bool {
        self.hook.get().is_some()
    }

    pub fn emit(&self, event: Event) {
        tracing::debug!(?event, "llmgov event");
        if let Some(hook) = self.hook.get() {
            hook(&event);
        }
    }

    /// Counts a refusal, if `error` is one, and tells `tracing` and the hook.
    #[cold]
    pub fn denied(&self, error: &Error, class: &str) {
        tracing::debug!(%error, class, "llmgov refused a request");
        self.tally.denied(error);
        if !self.hooked() {
            return;
        }
        let (scope, dimension, retry_after) = match error {
            Error::RateLimited { scope, dimension, retry_after, .. } => {
                (Some(scope), Some(dimension.as_str()), *retry_after)
            }
            Error::NeverFits { scope, dimension, .. } => (Some(scope), Some(dimension.as_str()), None),
            Error::CircuitOpen { scope, retry_after, .. } => (Some(scope), None, Some(*retry_after)),
            Error::QueueFull { retry_after, .. } | Error::DeadlineExceeded { retry_after, .. } => {
                (None, None, *retry_after)
            }
            _ => return,
        };
        self.emit(Event::Denied {
            code: error.code(),
            scope: scope.map(|s| s.to_string()),
            dimension,
            retry_after_ms: retry_after.map(crate::time::ceil_ms),
            class: class.to_owned(),
        });
    }

    /// Tells of a provider's refusal.
    pub fn rejected(&self, feedback: &Classification, scopes: Vec<String>) {
        if feedback.limited {
            self.emit(Event::ProviderRejected {
                scopes,
                kind: feedback.kind,
                dimension: feedback.dimension,
                retry_after_ms: feedback.retry_after_ms,
            });
        }
    }
}
