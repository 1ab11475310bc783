//! One JSON error object for every refusal, local or remote: [`ErrorObject`].
//!
//! A gateway answers its clients the same way whether llmgov refused a
//! request before it left ([`crate::Error::RateLimited`],
//! [`crate::Error::NeverFits`]) or the provider rejected it after llmgov
//! admitted it (a [`Classification`]). Clients then need one parser, and
//! `gateway_decision` tells them which side refused.
//!
//! ```
//! use llmgov::feedback::{classify_response, ErrorContext, ErrorObject, GatewayDecision, ProviderHint};
//!
//! let context = ErrorContext::new()
//!     .route(["tenants/acme", "openai/org/gpt-4o"])
//!     .provider_scope("openai/org/gpt-4o")
//!     .tenant("tenants/acme")
//!     .estimates(3000, 1000)
//!     .trace_id("4bf92f3577b34da6");
//! let c = classify_response(429, &[("retry-after", "20")], b"", ProviderHint::OpenAi, 0);
//! let object = ErrorObject::from_provider(&c, &context);
//! assert_eq!(object.gateway_decision, GatewayDecision::AdmittedThenProviderRejected);
//! assert_eq!(object.retry_after_ms, Some(20_000));
//! ```

use serde::{Deserialize, Serialize};

use super::{Classification, LimitDimension, LimitKind};
use crate::time::ceil_ms;
use crate::Error;

/// What kind of refusal an [`ErrorObject`] reports (its `type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorType {
    /// A rate limit refused: waiting for its window helps.
    RateLimited,
    /// Billing or a hard quota refused: waiting never helps.
    QuotaExhausted,
    /// The provider is overloaded: back off, or try elsewhere.
    Overloaded,
    /// The request can never pass this limit or model as sent (a local
    /// [`Error::NeverFits`], or a provider's 413 or oversize refusal).
    TooLarge,
    /// The provider failed or refused for a reason unrelated to limits (a
    /// 5xx, a 400, a 401, ...).
    ProviderError,
}

/// Which side refused the request (the object's `gateway_decision`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GatewayDecision {
    /// llmgov refused it before it left: the provider never saw it.
    RejectedLocally,
    /// llmgov admitted it and the provider rejected it.
    AdmittedThenProviderRejected,
}

/// What the caller knows about the refused request, beyond the refusal
/// itself. Every field may be left empty; it is then `null` in the object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ErrorContext {
    /// The scope paths the request was routed through, as given to
    /// `Governor::route`.
    pub route: Vec<String>,
    /// The provider scope the request was (or would have been) sent
    /// through, e.g. `openai/org/gpt-4o`.
    pub provider_scope: Option<String>,
    /// The tenant's scope path, e.g. `tenants/acme`.
    pub tenant: Option<String>,
    /// The request's scheduling class, e.g. `interactive` or `batch`.
    pub request_class: Option<String>,
    /// The input tokens the request was estimated (or counted) at.
    pub estimated_input_tokens: Option<u64>,
    /// The output tokens reserved for the request.
    pub estimated_output_tokens: Option<u64>,
    /// The caller's trace id, to join the refusal with its trace.
    pub trace_id: Option<String>,
    /// The request must not move to another route (a pinned model or
    /// deployment): the object then never allows a fallback.
    pub pinned: bool,
}

impl ErrorContext {
    /// An empty context.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the route's scope paths.
    pub fn route<S: Into<String>>(mut self, paths: impl IntoIterator<Item = S>) -> Self {
        self.route = paths.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the provider scope.
    pub fn provider_scope(mut self, path: impl Into<String>) -> Self {
        self.provider_scope = Some(path.into());
        self
    }

    /// Sets the tenant's scope path.
    pub fn tenant(mut self, path: impl Into<String>) -> Self {
        self.tenant = Some(path.into());
        self
    }

    /// Sets the request class.
    pub fn request_class(mut self, class: impl Into<String>) -> Self {
        self.request_class = Some(class.into());
        self
    }

    /// Sets the estimated input and output tokens.
    pub fn estimates(mut self, input_tokens: u64, output_tokens: u64) -> Self {
        self.estimated_input_tokens = Some(input_tokens);
        self.estimated_output_tokens = Some(output_tokens);
        self
    }

    /// Sets the trace id.
    pub fn trace_id(mut self, id: impl Into<String>) -> Self {
        self.trace_id = Some(id.into());
        self
    }

    /// Marks the request as pinned to its route (see [`ErrorContext::pinned`]).
    pub fn pinned(mut self, pinned: bool) -> Self {
        self.pinned = pinned;
        self
    }
}

/// The normalized error object: the same fields, always all present (`null`
/// when unknown), for a local denial and for a provider rejection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorObject {
    /// What kind of refusal it is (`type` in JSON).
    #[serde(rename = "type")]
    pub error_type: ErrorType,
    /// The dimension of the limit that refused (`requests`, `tokens`,
    /// `input_tokens`, `output_tokens`, `concurrency`, and from providers
    /// `daily_requests`, `daily_tokens`); `null` when no limit is known to
    /// have refused.
    pub limiter: Option<String>,
    /// The scope whose limit refused: for a local denial the scope the error
    /// names (which may be a tenant's), for a provider rejection the
    /// provider scope of the context.
    pub scope: Option<String>,
    /// The provider scope of the route, from the context.
    pub provider_scope: Option<String>,
    /// The scope paths of the route, from the context.
    pub route: Vec<String>,
    /// How long to wait before a retry can succeed, in milliseconds rounded
    /// up; `null` when unknown or when waiting cannot help.
    pub retry_after_ms: Option<u64>,
    /// The tenant's scope path, from the context.
    pub tenant: Option<String>,
    /// The request's class, from the context.
    pub request_class: Option<String>,
    /// Estimated input tokens of the request, from the context.
    pub estimated_input_tokens: Option<u64>,
    /// Estimated (reserved) output tokens of the request, from the context.
    pub estimated_output_tokens: Option<u64>,
    /// Which side refused.
    pub gateway_decision: GatewayDecision,
    /// Whether sending the same request by another route (deployment,
    /// account, provider) may succeed now: the refusal belongs to this route
    /// rather than to the tenant or to the request itself, and the request
    /// is not pinned.
    pub fallback_allowed: bool,
    /// The caller's trace id, from the context.
    pub trace_id: Option<String>,
}

impl ErrorObject {
    /// The object for a local denial: [`Error::RateLimited`] or
    /// [`Error::NeverFits`]. `None` for any other error, which is a fault of
    /// the caller or the config, not a refusal, and must not be reported as
    /// one.
    pub fn from_local_denial(error: &Error, context: &ErrorContext) -> Option<Self> {
        let (error_type, scope, dimension, retry_after_ms) = match error {
            Error::RateLimited { scope, dimension, retry_after, .. } => {
                (ErrorType::RateLimited, scope, dimension, retry_after.map(ceil_ms))
            }
            Error::NeverFits { scope, dimension, .. } => (ErrorType::TooLarge, scope, dimension, None),
            _ => return None,
        };
        // A tenant's budget follows the tenant onto every route; any other
        // scope's limit is the route's own.
        let fallback = !tied_to_tenant(scope, context.tenant.as_deref());
        Some(Self::with_context(
            context,
            error_type,
            Some(dimension.as_str().to_owned()),
            Some(scope.to_string()),
            retry_after_ms,
            GatewayDecision::RejectedLocally,
            fallback,
        ))
    }

    /// The object for a provider rejection, classified as `classification`.
    pub fn from_provider(classification: &Classification, context: &ErrorContext) -> Self {
        let c = classification;
        let error_type = match c.kind {
            LimitKind::RateLimited => ErrorType::RateLimited,
            LimitKind::QuotaExhausted => ErrorType::QuotaExhausted,
            LimitKind::Overloaded => ErrorType::Overloaded,
            LimitKind::TooLarge => ErrorType::TooLarge,
            LimitKind::None => ErrorType::ProviderError,
        };
        let limiter = (c.limited && c.dimension != LimitDimension::Unknown).then(|| c.dimension.as_str().to_owned());
        let fallback = match c.kind {
            // Limits, quotas and load belong to this account or deployment.
            LimitKind::RateLimited | LimitKind::QuotaExhausted | LimitKind::Overloaded => true,
            // Too large for this model, and likely for any: the request must change.
            LimitKind::TooLarge => false,
            // A server failure (retryable) may spare another route; a 4xx
            // is about the request itself.
            LimitKind::None => c.retryable,
        };
        Self::with_context(
            context,
            error_type,
            limiter,
            context.provider_scope.clone(),
            c.retry_after_ms,
            GatewayDecision::AdmittedThenProviderRejected,
            fallback,
        )
    }

    /// The fields both constructors share, so that they cannot drift apart.
    fn with_context(
        context: &ErrorContext,
        error_type: ErrorType,
        limiter: Option<String>,
        scope: Option<String>,
        retry_after_ms: Option<u64>,
        gateway_decision: GatewayDecision,
        fallback: bool,
    ) -> Self {
        ErrorObject {
            error_type,
            limiter,
            scope,
            provider_scope: context.provider_scope.clone(),
            route: context.route.clone(),
            retry_after_ms,
            tenant: context.tenant.clone(),
            request_class: context.request_class.clone(),
            estimated_input_tokens: context.estimated_input_tokens,
            estimated_output_tokens: context.estimated_output_tokens,
            gateway_decision,
            fallback_allowed: fallback && !context.pinned,
            trace_id: context.trace_id.clone(),
        }
    }
}

/// Whether `scope` is the tenant's scope or one of its ancestors.
fn tied_to_tenant(scope: &str, tenant: Option<&str>) -> bool {
    tenant.is_some_and(|tenant| tenant == scope || tenant.strip_prefix(scope).is_some_and(|rest| rest.starts_with('/')))
}

#[cfg(test)]
mod tests {
    use super::tied_to_tenant;

    #[test]
    fn tenant_ancestry() {
        assert!(tied_to_tenant("tenants/acme", Some("tenants/acme")));
        assert!(tied_to_tenant("tenants", Some("tenants/acme")));
        assert!(!tied_to_tenant("tenants/ac", Some("tenants/acme")));
        assert!(!tied_to_tenant("openai/org", Some("tenants/acme")));
        assert!(!tied_to_tenant("tenants/acme", None));
    }
}
