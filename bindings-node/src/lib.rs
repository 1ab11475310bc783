//! Node.js bindings for llmgov, the rate-limit governor for LLM APIs.
//!
//! This crate is the native half of the `llmgov` npm package: a napi-rs
//! addon whose hot path takes and returns numbers. The public API (the
//! `Governor` class, permits, error classes and `governedFetch`) is the
//! TypeScript layer in `ts/`, which drives the classes and functions here.

mod errors;
mod events;
mod feedback;
mod governor;
mod hot;
mod metrics;
mod numbers;
mod permits;
mod plan;
mod redis;
mod routing;
mod snapshot;
mod tagged;
mod tokens;
mod waiting;

pub use errors::register_error_factory;
pub use feedback::{classify_response, Advice, AdviceReason, Classification, RetryOptions, RetryPolicy};
pub use governor::{NativeGovernor, PermitInfo};
pub use hot::{hot_add_output, hot_cancel, hot_settle, hot_try_acquire, register_args, throw_last_error};
pub use metrics::{EstimateErrorSummary, Metrics, RefusalCount};
pub use plan::{plan_capacity, CapacityPlan, PlanCeiling, PlanOptions};
pub use redis::{NativeRedisAttempt, NativeRedisGovernor, NativeRedisPermit, NativeRedisRoute, RedisHealth};
pub use routing::{acquire_profile_start, ProfileArgs, ProfileGrant};
pub use snapshot::{ClassMetrics, LimitSnapshot, QueueMetrics, ScopeSnapshot, Snapshot, WaitHistogram};
pub use tokens::{count_chat_tokens, count_tokens, estimate_request, estimate_tokens, RequestEstimate};
pub use waiting::{acquire_abort, acquire_error, acquire_start, AcquireArgs, WaitArgs};

/// The version of the addon (the crate's), to check the JavaScript layer
/// loaded the addon it was built with.
#[napi_derive::napi(catch_unwind)]
pub fn native_version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}
