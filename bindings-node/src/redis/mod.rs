//! `RedisGovernor`: limits shared by many processes through Redis (the
//! `llmgov-redis` crate), with the local governor's argument names.
//!
//! Every call that may reach Redis (an acquire, a settle, a cancel, giving
//! leases back) runs as a task on libuv's thread pool and returns a Promise,
//! so the event loop never waits on the network; `route` and `health` do no
//! I/O and answer at once. Errors reject with the package's `LlmgovError`
//! subclasses (`errors.rs`).

mod permit;
mod waiting;

use std::sync::Arc;

use llmgov::{Clock, ManualClock, MonotonicClock, Usage};
use llmgov_redis::{RedisGovernor, SharedPermit, SharedRoute};
use napi::bindgen_prelude::AsyncTask;
use napi::{Env, Result, Task};
use napi_derive::napi;

use crate::errors::{invalid, reject_redis, throw, throw_redis, OrThrow};
use crate::metrics::{metrics, Metrics};
use crate::numbers::{clock_step, count, millis};
use crate::snapshot::{snapshot, Snapshot};

pub use permit::NativeRedisPermit;
pub use waiting::NativeRedisAttempt;

/// The governor, shared by its class, its permits and the tasks in flight.
/// The last holder drops it on a thread of its own: dropping gives the
/// leases back to Redis, which must not block the event loop (a permit or
/// governor collected by the garbage collector drops there).
pub(crate) struct SharedGovernor(Option<Arc<RedisGovernor>>);

impl SharedGovernor {
    fn new(gov: RedisGovernor) -> Self {
        SharedGovernor(Some(Arc::new(gov)))
    }

    pub(crate) fn get(&self) -> &RedisGovernor {
        self.0.as_deref().expect("present until dropped")
    }
}

impl Clone for SharedGovernor {
    fn clone(&self) -> Self {
        SharedGovernor(self.0.clone())
    }
}

impl Drop for SharedGovernor {
    fn drop(&mut self) {
        if let Some(last) = self.0.take().and_then(Arc::into_inner) {
            // At process exit the thread may not finish: the leases then
            // return to the other processes after `lease_ttl`, as a crash's do.
            let _ = std::thread::Builder::new().name("llmgov-redis-drop".into()).spawn(move || drop(last));
        }
    }
}

/// A request's scopes split into local and shared parts, resolved once by
/// `RedisGovernor.route`; valid only with the governor that made it.
#[napi]
pub struct NativeRedisRoute {
    route: SharedRoute,
    paths: Vec<String>,
}

#[napi]
impl NativeRedisRoute {
    /// The paths it was resolved from.
    #[napi(getter)]
    pub fn paths(&self) -> Vec<String> {
        self.paths.clone()
    }
}

/// The link to Redis and what the governor did without it.
#[napi(object)]
pub struct RedisHealth {
    /// Redis failed and the shared scopes admit from the safe local share.
    pub degraded: bool,
    /// Requests admitted from the safe local share.
    pub fallback_admissions: f64,
    /// Redis calls that failed (connect, I/O, timeout, script error).
    pub redis_errors: f64,
    /// Times Redis answered again after an outage.
    pub recoveries: f64,
    /// Times a shared scope's state was found lost (a Redis restart without
    /// persistence) and restarted at the safe share.
    pub state_resets: f64,
    /// Redis calls made (one script each).
    pub redis_calls: f64,
    /// The last Redis error, for the log.
    pub last_error: Option<String>,
}

/// A governor whose `[redis.scopes]` are enforced across processes through
/// Redis. Use the package's `RedisGovernor`; this class is its engine.
#[napi]
pub struct NativeRedisGovernor {
    gov: SharedGovernor,
    manual: Option<Arc<ManualClock>>,
}

impl NativeRedisGovernor {
    fn build(
        env: &Env,
        manual_clock: bool,
        make: impl FnOnce(Arc<dyn Clock>) -> llmgov_redis::Result<RedisGovernor>,
    ) -> Result<Self> {
        let manual = manual_clock.then(|| Arc::new(ManualClock::new(0)));
        let clock: Arc<dyn Clock> = match &manual {
            Some(clock) => clock.clone(),
            None => Arc::new(MonotonicClock::new()),
        };
        let gov = make(clock).map_err(|e| throw_redis(env, e))?;
        Ok(NativeRedisGovernor { gov: SharedGovernor::new(gov), manual })
    }
}

/// The estimate a request reserves: `maxOutputTokens` as the output.
fn estimate(input: f64, cached_input: f64, max_output: f64) -> llmgov::Result<Usage> {
    Ok(Usage {
        input_tokens: count("input_tokens", input)?,
        cached_input_tokens: count("cached_input_tokens", cached_input)?,
        output_tokens: count("max_output_tokens", max_output)?,
    })
}

#[napi]
impl NativeRedisGovernor {
    /// A governor from TOML text: the core's sections plus `[redis]` (a
    /// missing `redis.url` is read from `LLMGOV_REDIS_URL`). Building opens
    /// no connection.
    #[napi(factory, catch_unwind)]
    pub fn from_toml(env: Env, text: String, manual_clock: bool) -> Result<Self> {
        Self::build(&env, manual_clock, |clock| RedisGovernor::from_toml_with_clock(&text, clock))
    }

    /// A governor from JSON text: the TOML config's JSON form, the `[redis]`
    /// section under `redis`.
    #[napi(factory, catch_unwind)]
    pub fn from_json(env: Env, text: String, manual_clock: bool) -> Result<Self> {
        let value = serde_json::from_str(&text).map_err(|e| {
            throw(
                &env,
                llmgov::Error::InvalidConfig { field: "<json>".into(), value: String::new(), reason: e.to_string() },
            )
        })?;
        Self::build(&env, manual_clock, |clock| RedisGovernor::from_value_with_clock(value, clock))
    }

    /// Resolves paths (and their configured ancestors) into local and shared parts.
    #[napi(catch_unwind)]
    pub fn route(&self, env: Env, paths: Vec<String>) -> Result<NativeRedisRoute> {
        let route = self.gov.get().route(&paths).map_err(|e| throw_redis(&env, e))?;
        Ok(NativeRedisRoute { route, paths })
    }

    /// Reserves the estimate on every scope of the route, or nothing, on
    /// the thread pool: a Promise of the permit, rejected with the refusal.
    #[napi(catch_unwind, ts_return_type = "Promise<NativeRedisPermit>")]
    pub fn try_acquire(
        &self,
        env: Env,
        route: &NativeRedisRoute,
        input_tokens: f64,
        cached_input_tokens: f64,
        max_output_tokens: f64,
    ) -> Result<AsyncTask<Acquire>> {
        let estimate = estimate(input_tokens, cached_input_tokens, max_output_tokens).or_throw(&env)?;
        Ok(AsyncTask::new(Acquire { gov: self.gov.clone(), route: route.route.clone(), estimate }))
    }

    /// A waiting acquire of the estimate on `route`, for at most
    /// `deadlineMs` (on the governor's clock; none: until admitted); the
    /// JavaScript layer calls its `step` until it grants a permit.
    #[napi(catch_unwind)]
    pub fn attempt(
        &self,
        env: Env,
        route: &NativeRedisRoute,
        input_tokens: f64,
        cached_input_tokens: f64,
        max_output_tokens: f64,
        deadline_ms: Option<f64>,
    ) -> Result<NativeRedisAttempt> {
        let estimate = estimate(input_tokens, cached_input_tokens, max_output_tokens).or_throw(&env)?;
        let limit = deadline_ms.map(|ms| millis("deadline_ms", ms)).transpose().or_throw(&env)?;
        Ok(NativeRedisAttempt::new(self.gov.clone(), route.route.clone(), estimate, limit))
    }

    /// The link to Redis and the fallback counters (no I/O).
    #[napi(catch_unwind)]
    pub fn health(&self) -> RedisHealth {
        let h = self.gov.get().health();
        RedisHealth {
            degraded: h.degraded,
            fallback_admissions: h.fallback_admissions as f64,
            redis_errors: h.redis_errors as f64,
            recoveries: h.recoveries as f64,
            state_resets: h.state_resets as f64,
            redis_calls: h.redis_calls as f64,
            last_error: h.last_error,
        }
    }

    /// Gives every lease's unused part back to Redis, on the thread pool.
    #[napi(catch_unwind, ts_return_type = "Promise<void>")]
    pub fn return_leases(&self) -> AsyncTask<Housekeeping> {
        AsyncTask::new(Housekeeping { gov: self.gov.clone(), heartbeat: false })
    }

    /// Refreshes every concurrency slot this process holds, on the thread
    /// pool (a background thread also does, every third of `slot_ttl`).
    #[napi(catch_unwind, ts_return_type = "Promise<void>")]
    pub fn heartbeat(&self) -> AsyncTask<Housekeeping> {
        AsyncTask::new(Housekeeping { gov: self.gov.clone(), heartbeat: true })
    }

    /// The local scopes (those not shared) and their counters.
    #[napi(catch_unwind)]
    pub fn snapshot(&self) -> Snapshot {
        snapshot(&self.gov.get().local().snapshot())
    }

    /// The local engine's metrics: the scopes not shared, their refusals
    /// and estimate errors (refusals by shared scopes are Redis's).
    #[napi(catch_unwind)]
    pub fn metrics(&self) -> Metrics {
        metrics(&self.gov.get().local().metrics())
    }

    /// Moves a manual clock forward by `ms` milliseconds (local limits,
    /// permit and lease expiry, reconnection pacing; Redis keeps its own time).
    #[napi(catch_unwind)]
    pub fn advance(&self, env: Env, ms: f64) -> Result<()> {
        millis("ms", ms).or_throw(&env)?;
        match &self.manual {
            Some(clock) => {
                clock.advance(clock_step("ms", ms, clock.now()).or_throw(&env)?);
                Ok(())
            }
            None => Err(throw(
                &env,
                invalid("clock", "monotonic", "advance() needs a governor made with { clock: 'manual' }"),
            )),
        }
    }

    /// The governor clock's reading, in milliseconds.
    #[napi(catch_unwind)]
    pub fn now_ms(&self) -> f64 {
        self.gov.get().local().clock().now() as f64 / 1e6
    }

    /// The prefix of its Redis keys.
    #[napi(getter)]
    pub fn prefix(&self) -> String {
        self.gov.get().settings().prefix.to_string()
    }
}

/// `tryAcquire` on the thread pool.
pub struct Acquire {
    gov: SharedGovernor,
    route: SharedRoute,
    estimate: Usage,
}

impl Task for Acquire {
    type Output = llmgov_redis::Result<SharedPermit>;
    type JsValue = NativeRedisPermit;

    fn compute(&mut self) -> Result<Self::Output> {
        Ok(self.gov.get().try_acquire(&self.route, self.estimate))
    }

    fn resolve(&mut self, env: Env, output: Self::Output) -> Result<NativeRedisPermit> {
        let permit = output.map_err(|e| reject_redis(&env, e))?;
        Ok(NativeRedisPermit::new(self.gov.clone(), permit, self.estimate))
    }
}

/// `returnLeases` or `heartbeat` on the thread pool.
pub struct Housekeeping {
    gov: SharedGovernor,
    heartbeat: bool,
}

impl Task for Housekeeping {
    type Output = ();
    type JsValue = ();

    fn compute(&mut self) -> Result<()> {
        match self.heartbeat {
            true => self.gov.get().heartbeat(),
            false => self.gov.get().return_leases(),
        }
        Ok(())
    }

    fn resolve(&mut self, _env: Env, _output: ()) -> Result<()> {
        Ok(())
    }
}
