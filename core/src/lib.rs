//! # llmgov
//!
//! A rate-limit governor for LLM APIs. Before a request leaves, llmgov
//! reserves every limit (requests, input, output and total tokens,
//! concurrency) on every scope the request touches (organisation, project,
//! deployment, key, tenant) all at once, or nothing; afterwards it reconciles
//! the reservation with the provider's actual usage.
//!
//! The engine is a sans-IO [`Ledger`] of lock-free buckets driven by a time
//! passed in; [`Governor`] pairs it with a [`Clock`].
//!
//! ```
//! use llmgov::{Error, Governor, Request, Usage};
//!
//! let gov = Governor::from_toml(r#"
//!     [scopes."openai/org/gpt-4o"]
//!     limits = [
//!       { dimension = "requests", amount = 500, window = "1m" },
//!       { dimension = "tokens", amount = 30000, window = "1m" },
//!     ]
//!     [scopes."tenants/*"]
//!     limits = [{ dimension = "tokens", amount = 5000, window = "1m" }]
//! "#)?;
//! let route = gov.route(&["tenants/acme", "openai/org/gpt-4o"])?;
//! let request = Request::new(route).input_tokens(3000).max_output_tokens(1000);
//! let mut permit = gov.try_acquire(&request)?;
//! gov.settle(&mut permit, Usage::new(3000, 400))?;
//!
//! // The tenant's 5000-token budget now holds 1600 tokens.
//! match gov.try_acquire(&request) {
//!     Err(Error::RateLimited { scope, dimension, retry_after, .. }) => {
//!         assert_eq!(&*scope, "tenants/acme");
//!         assert_eq!(dimension.as_str(), "tokens");
//!         assert!(retry_after.is_some());
//!     }
//!     other => panic!("expected a denial, got {other:?}"),
//! }
//! # Ok::<(), Error>(())
//! ```

#![warn(missing_docs)]

mod clock;
pub mod config;
mod dimension;
mod error;
pub mod events;
pub mod feedback;
pub mod fork;
mod governor;
pub mod ledger;
mod metrics;
pub mod plan;
mod pricing;
mod prometheus;
mod routing;
pub mod scheduler;
mod snapshot;
mod time;
pub mod tokens;

pub use clock::{Clock, ManualClock, MonotonicClock};
pub use config::Config;
pub use dimension::{Dimension, Usage, MAX_TOKENS};
pub use error::{Error, Result};
pub use feedback::{classify_response, Classification, LimitDimension, LimitKind, ProviderHint};
pub use governor::Governor;
pub use ledger::permit::{ClassId, Permit, PermitState, Request, Route};
pub use ledger::registry::ScopeId;
pub use ledger::Ledger;
pub use metrics::{EstimateError, Metrics, RefusalCount};
pub use plan::{Plan, PlanInput};
pub use pricing::COST_UNITS_PER_CURRENCY;
pub use routing::{ProfileRoute, ProfileStep, ProfileWait, Routed};
pub use scheduler::{Acquire, QueueMetrics};
pub use snapshot::{LimitSnapshot, ScopeSnapshot, Snapshot};
pub use time::{ceil_ms, NS_PER_MS};

/// The README's Rust examples, compiled and run as doc tests.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
