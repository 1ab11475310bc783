//! # llmgov-redis
//!
//! One budget shared by many processes: the scopes named under `[redis.scopes]`
//! are enforced in Redis, every other scope stays in each process's
//! lock-free [`llmgov::Governor`].
//!
//! - **exact mode:** every acquire and every settle of a shared scope is one
//!   Lua script that reserves every limit of that scope all or nothing, with
//!   Redis `TIME` as the clock (GCRA per rate limit, a sorted set of slots
//!   per concurrency limit).
//! - **leased mode:** each process leases slices of a scope's rate limits,
//!   sized from its recent demand, and admits from them lock-free; unused
//!   slices go back, and a crashed process's lease returns within
//!   `lease_ttl`. Over-admission is at most the leases held by processes
//!   that die, each at most limit ÷ `expected_processes`.
//! - **Keys** are `{llmgov:<prefix>:<scope path>}:state|slots`: one hash tag
//!   per scope, so each script touches one Redis Cluster slot. A request on
//!   several shared scopes runs one script per scope in route order and gives
//!   back the ones already reserved if a later one refuses: all or nothing,
//!   never over-admitting (a concurrent request may be refused by a
//!   reservation about to be given back).
//! - **Concurrency slots** carry a TTL that a background heartbeat extends;
//!   a killed worker's slots come back within the TTL.
//! - **Redis unavailable:** each process admits from a safe local share,
//!   every shared limit ÷ `expected_processes`, counts it
//!   ([`Health::fallback_admissions`]) and tries Redis again every
//!   `retry_interval`. A scope whose state vanished (a restart without
//!   persistence) after this process saw it restarts at the safe share, not
//!   at a full bucket or with every concurrency slot free; live processes
//!   add the slots they have in flight back at their next heartbeat.
//! - Only ids are stored: scope paths, random process and slot ids, GCRA
//!   times. No request content and no API key material.
//!
//! ```no_run
//! use llmgov::Usage;
//! use llmgov_redis::RedisGovernor;
//!
//! let gov = RedisGovernor::from_toml(r#"
//!     [scopes."openai/org/gpt-4o"]
//!     limits = [
//!       { dimension = "requests", amount = 500, window = "1m" },
//!       { dimension = "tokens", amount = 30000, window = "1m" },
//!       { dimension = "concurrency", amount = 50 },
//!     ]
//!     [scopes."tenants/*"]
//!     limits = [{ dimension = "tokens", amount = 5000, window = "1m" }]
//!
//!     [redis]
//!     url = "redis://127.0.0.1:6379"
//!     prefix = "prod-eu"
//!     expected_processes = 8
//!     [redis.scopes."openai/org/gpt-4o"]
//!     mode = "exact"
//! "#)?;
//! let route = gov.route(&["tenants/acme", "openai/org/gpt-4o"])?;
//! let mut permit = gov.try_acquire(&route, Usage::new(1200, 300))?;
//! // … call the provider …
//! gov.settle(&mut permit, Usage::new(1200, 112))?;
//! # Ok::<(), llmgov_redis::Error>(())
//! ```

#![warn(missing_docs)]

mod errors;
mod fork;
mod governor;
mod health;
mod heartbeat;
mod lease;
mod leased;
mod outage;
mod sentinel;
mod server;
pub mod settings;
mod shared;
mod store;
mod waiting;

pub use errors::{Error, Result};
pub use governor::{FeedbackTarget, RedisGovernor, SharedPermit, SharedRoute};
pub use health::Health;
pub use settings::{Mode, Settings};
pub use waiting::{Wait, FIRST_POLL, MAX_POLL};

/// The README's examples, compiled and run as doc tests (they return early
/// without `LLMGOV_REDIS_URL`).
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
