//! The Redis governor handle (`llmgov_redis_governor`): scopes shared
//! across processes through Redis, the others local, as the Rust
//! `llmgov_redis::RedisGovernor`. Built from TOML or JSON with a `[redis]`
//! section; routes are numbers tagged with their governor, as the local
//! governor's are; its permits are `llmgov_redis_permit` (see [`permit`]).

mod permit;

use std::collections::HashMap;
use std::ffi::c_char;
use std::sync::{Arc, Mutex, PoisonError};

use llmgov_core::Clock;
use llmgov_redis::{RedisGovernor, SharedRoute};

use crate::args::{self, Out};
use crate::clock::llmgov_manual_clock;
use crate::errors::{guard, guard_infallible, llmgov_result, Failure, Outcome};
use crate::governor::{next_tag, not_ours};
use crate::strings::write_json;

/// A governor whose shared scopes are enforced across processes through
/// Redis (the `[redis]` section names them), the others in this process.
/// Every function taking a `const llmgov_redis_governor *` may be called
/// from any number of threads at once.
#[allow(non_camel_case_types)]
pub struct llmgov_redis_governor {
    pub(crate) governor: RedisGovernor,
    /// This governor's number among all governors the process made, local
    /// ones included: the high half of each route number it hands out.
    tag: u32,
    routes: Routes,
}

/// The routes resolved so far, numbered by the paths they were asked with.
struct Routes {
    /// What each number stands for; read without a lock.
    items: boxcar::Vec<SharedRoute>,
    /// The number of each list of paths; only resolving takes the lock.
    numbers: Mutex<HashMap<Vec<String>, u32>>,
}

impl llmgov_redis_governor {
    /// The route a number names, or `invalid_request` naming `route`.
    #[inline]
    pub(crate) fn route(&self, number: u64) -> Outcome<&SharedRoute> {
        let (tag, index) = ((number >> 32) as u32, number as u32);
        if tag == self.tag {
            if let Some(route) = self.routes.items.get(index as usize) {
                return Ok(route);
            }
        }
        Err(not_ours(self.tag, number, "route", "route", "llmgov_redis_governor_route"))
    }

    /// The number of the route of `paths`, resolving it the first time.
    fn intern(&self, paths: &[&str]) -> Outcome<u64> {
        let key: Vec<String> = paths.iter().map(|&p| p.to_owned()).collect();
        // A panic under the lock leaves no entry without its route (the
        // insert follows the push), so a poisoned lock is still good.
        let mut numbers = self.routes.numbers.lock().unwrap_or_else(PoisonError::into_inner);
        let index = match numbers.get(&key) {
            Some(&n) => n,
            None => {
                let route = self.governor.route(paths)?;
                let count = self.routes.items.count();
                let n = u32::try_from(count)
                    .map_err(|_| Failure::argument("route", count, "more than 4 billion interned"))?;
                self.routes.items.push(route);
                numbers.insert(key, n);
                n
            }
        };
        Ok(u64::from(self.tag) << 32 | u64::from(index))
    }
}

/// Builds the governor from `text` with `from` and hands the caller its reference.
///
/// # Safety
/// `clock` NULL or a live clock; `out` checked by the caller.
unsafe fn build(
    from: impl FnOnce(Arc<dyn Clock>) -> llmgov_redis::Result<RedisGovernor>,
    clock: *const llmgov_manual_clock,
    out: Out<*const llmgov_redis_governor>,
) -> Outcome {
    // SAFETY: the caller's contract; NULL means the monotonic clock.
    let clock: Arc<dyn Clock> = match unsafe { clock.as_ref() } {
        Some(manual) => manual.clock.clone(),
        None => Arc::new(llmgov_core::MonotonicClock::new()),
    };
    let governor = from(clock)?;
    let routes = Routes { items: boxcar::Vec::new(), numbers: Mutex::new(HashMap::new()) };
    let handle = llmgov_redis_governor { governor, tag: next_tag(), routes };
    out.write(Arc::into_raw(Arc::new(handle)));
    Ok(())
}

/// A Redis governor from a TOML configuration: the local governor's
/// sections plus `[redis]` (`url`, else the `LLMGOV_REDIS_URL` environment
/// variable; `prefix`; `expected_processes`; `[redis.scopes."<path>"]` with
/// `mode = "exact"` or `"leased"`; see backend-redis/README.md). A bad
/// config is `LLMGOV_RESULT_INVALID_CONFIG`, and `llmgov_last_error` names
/// the field (`redis.lease_ttl`) and the value. Redis need not answer yet:
/// while it does not, shared scopes admit from each limit ÷
/// `expected_processes` (see `llmgov_redis_governor_health_json`).
///
/// `clock` is NULL for the monotonic clock, or a manual clock for local
/// limits, permit expiry, reconnection pacing and the acquire timeout
/// (shared limits run on Redis's own time).
///
/// # Ownership
/// On success `*out_governor` is the caller's: free it with
/// `llmgov_redis_governor_free`. On failure it is not written.
///
/// # Safety
/// `toml` NULL (an error) or NUL-terminated; `clock` NULL or a live manual
/// clock; `out_governor` NULL (an error) or writable.
#[no_mangle]
pub unsafe extern "C" fn llmgov_redis_governor_from_toml(
    toml: *const c_char,
    clock: *const llmgov_manual_clock,
    out_governor: *mut *const llmgov_redis_governor,
) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let (text, out) = unsafe { (args::text(toml, "toml")?, Out::new(out_governor, "out_governor")?) };
        // SAFETY: the caller's contract.
        unsafe { build(|clock| RedisGovernor::from_toml_with_clock(text, clock), clock, out) }
    })
}

/// A Redis governor from a JSON configuration: the fields of the TOML form,
/// with a `"redis"` object. As `llmgov_redis_governor_from_toml`; JSON that
/// does not parse is `LLMGOV_RESULT_INVALID_CONFIG` naming `json`.
///
/// # Ownership
/// As `llmgov_redis_governor_from_toml`.
///
/// # Safety
/// As `llmgov_redis_governor_from_toml`, with `json` for `toml`.
#[no_mangle]
pub unsafe extern "C" fn llmgov_redis_governor_from_json(
    json: *const c_char,
    clock: *const llmgov_manual_clock,
    out_governor: *mut *const llmgov_redis_governor,
) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let (text, out) = unsafe { (args::text(json, "json")?, Out::new(out_governor, "out_governor")?) };
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| {
            Failure::Core(llmgov_core::Error::InvalidConfig {
                field: "json".into(),
                value: String::new(),
                reason: e.to_string(),
            })
        })?;
        // SAFETY: the caller's contract.
        unsafe { build(|clock| RedisGovernor::from_value_with_clock(value, clock), clock, out) }
    })
}

/// Releases the caller's reference to a Redis governor. NULL does nothing.
///
/// Permits not yet freed keep it alive, so they can still be settled; it
/// goes with the last of them: its background heartbeat stops and every
/// lease's unused part goes back to Redis. Called from inside a local
/// governor's event callback, it lets the governor go once the llmgov call
/// that raised the event returns.
///
/// # Safety
/// `governor` must be NULL or a governor from `llmgov_redis_governor_from_*`
/// not freed yet, and not used after.
#[no_mangle]
pub unsafe extern "C" fn llmgov_redis_governor_free(governor: *const llmgov_redis_governor) {
    guard_infallible(|| {
        if !governor.is_null() {
            // SAFETY: made by Arc::into_raw in `build`; this is the caller's reference.
            crate::events::free_handle(unsafe { Arc::from_raw(governor) });
        }
    })
}

/// Resolves a request's scope paths, once, to a route number for
/// `llmgov_redis_governor_try_acquire` and `_acquire`: every configured or
/// template scope on every prefix of every path, the shared ones in Redis,
/// the others local. The same paths, in the same order, give the same number.
///
/// Errors as `llmgov_governor_route`.
///
/// # Ownership
/// As `llmgov_governor_route`: the number carries this governor's tag, so
/// another governor's route (local or Redis) is refused
/// (`LLMGOV_RESULT_INVALID_REQUEST` naming `route`). It is never 0.
///
/// # Safety
/// As `llmgov_governor_route`.
#[no_mangle]
pub unsafe extern "C" fn llmgov_redis_governor_route(
    governor: *const llmgov_redis_governor,
    paths: *const *const c_char,
    paths_len: usize,
    out_route: *mut u64,
) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let (gov, paths, out) = unsafe {
            (args::reference(governor, "governor")?, args::paths(paths, paths_len)?, Out::new(out_route, "out_route")?)
        };
        out.write(gov.intern(&paths)?);
        Ok(())
    })
}

/// The governor's link to Redis, as JSON: `{"degraded", "fallback_admissions",
/// "redis_errors", "recoveries", "state_resets", "redis_calls",
/// "last_error"}` (`last_error` is a string or `null`). `degraded` is true
/// while Redis fails and shared scopes admit from the safe local share.
///
/// # Ownership
/// On success `*out_json` is the caller's: free it with `llmgov_string_free`.
///
/// # Safety
/// `governor` NULL or live; `out_json` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn llmgov_redis_governor_health_json(
    governor: *const llmgov_redis_governor,
    out_json: *mut *mut c_char,
) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let (gov, out) = unsafe { (args::reference(governor, "governor")?, Out::new(out_json, "out_json")?) };
        let h = gov.governor.health();
        let health = serde_json::json!({
            "degraded": h.degraded,
            "fallback_admissions": h.fallback_admissions,
            "redis_errors": h.redis_errors,
            "recoveries": h.recoveries,
            "state_resets": h.state_resets,
            "redis_calls": h.redis_calls,
            "last_error": h.last_error,
        });
        write_json(out, &health)
    })
}

/// Gives every lease's unused part back to Redis now (leased mode), as
/// freeing the governor does: call it before the process exits if the
/// governor is never freed.
///
/// # Safety
/// `governor` NULL (an error) or live.
#[no_mangle]
pub unsafe extern "C" fn llmgov_redis_governor_return_leases(governor: *const llmgov_redis_governor) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        unsafe { args::reference(governor, "governor") }?.governor.return_leases();
        Ok(())
    })
}

/// Refreshes every concurrency slot this process holds in Redis now. A
/// background thread already does it every third of `redis.slot_ttl`; call
/// it only to test slot expiry.
///
/// # Safety
/// `governor` NULL (an error) or live.
#[no_mangle]
pub unsafe extern "C" fn llmgov_redis_governor_heartbeat(governor: *const llmgov_redis_governor) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        unsafe { args::reference(governor, "governor") }?.governor.heartbeat();
        Ok(())
    })
}

/// The local scopes (those not shared) and their counters now, as JSON, in
/// the form of `llmgov_governor_snapshot_json`. Shared scopes live in Redis
/// and are not in it.
///
/// # Ownership
/// On success `*out_json` is the caller's: free it with `llmgov_string_free`.
///
/// # Safety
/// `governor` NULL or live; `out_json` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn llmgov_redis_governor_snapshot_json(
    governor: *const llmgov_redis_governor,
    out_json: *mut *mut c_char,
) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let (gov, out) = unsafe { (args::reference(governor, "governor")?, Out::new(out_json, "out_json")?) };
        write_json(out, &gov.governor.local().snapshot())
    })
}

/// The local engine's metrics as JSON, in the form of
/// `llmgov_governor_metrics_json` (what `llmgov top` draws): the scopes not
/// shared, their refusals and estimate errors. Refusals by shared scopes
/// are Redis's and are not counted here.
///
/// # Ownership
/// As `llmgov_redis_governor_snapshot_json`.
///
/// # Safety
/// As `llmgov_redis_governor_snapshot_json`.
#[no_mangle]
pub unsafe extern "C" fn llmgov_redis_governor_metrics_json(
    governor: *const llmgov_redis_governor,
    out_json: *mut *mut c_char,
) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let (gov, out) = unsafe { (args::reference(governor, "governor")?, Out::new(out_json, "out_json")?) };
        write_json(out, &gov.governor.local().metrics())
    })
}
