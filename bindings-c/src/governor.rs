//! The governor handle: built from TOML, JSON or a preset, on the monotonic
//! clock or a manual one; interns routes, scopes and classes to numbers;
//! answers snapshots as JSON and metrics as Prometheus text.

use std::ffi::c_char;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use llmgov_core::{ClassId, Config, Governor, Route, ScopeId};

use crate::args::{self, Out};
use crate::clock::llmgov_manual_clock;
use crate::errors::{guard, guard_infallible, llmgov_result, Failure, Outcome};
use crate::events::EventHook;
use crate::interned::Interned;
use crate::strings::{write_json, write_text};

/// A rate-limit governor. Every function taking a `const llmgov_governor *`
/// may be called from any thread at once.
#[allow(non_camel_case_types)]
pub struct llmgov_governor {
    pub(crate) governor: Governor,
    /// This governor's number among those the process made (from 1): the
    /// high half of each route and class number it hands out, so another
    /// governor's is refused rather than read as one of this one's.
    tag: u32,
    routes: Interned<Route>,
    scopes: Interned<ScopeId>,
    classes: Interned<ClassId>,
    /// The application's event callback, if it set one.
    pub(crate) events: Arc<EventHook>,
}

impl llmgov_governor {
    fn new(governor: Governor) -> Outcome<Self> {
        let classes = Interned::new();
        // Index 0 is the unnamed default class, and so is the number 0 on
        // every governor, so a zeroed request is in it.
        classes.intern(ClassId::default(), "class")?;
        let events = Arc::new(EventHook::default());
        let tag = next_tag();
        Ok(llmgov_governor { governor, tag, routes: Interned::new(), scopes: Interned::new(), classes, events })
    }

    /// The route a number names, or `invalid_request` naming `field`.
    #[inline]
    pub(crate) fn route(&self, number: u64, field: &'static str) -> Outcome<Route> {
        let (tag, index) = ((number >> 32) as u32, number as u32);
        if tag == self.tag {
            if let Some(route) = self.routes.get(index) {
                return Ok(route);
            }
        }
        Err(self.not_ours(number, field, "route", "llmgov_governor_route"))
    }

    /// The class a number names (0 is the default class), or
    /// `invalid_request` naming `class_id`.
    #[inline]
    pub(crate) fn class(&self, number: u64) -> Outcome<ClassId> {
        let (tag, index) = ((number >> 32) as u32, number as u32);
        if tag == self.tag || number == 0 {
            if let Some(class) = self.classes.get(index) {
                return Ok(class);
            }
        }
        Err(self.not_ours(number, "class_id", "class", "llmgov_governor_class"))
    }

    /// The scope a number names, or `invalid_request` naming `scope`.
    fn scope(&self, number: u64) -> Outcome<ScopeId> {
        let (tag, index) = ((number >> 32) as u32, number as u32);
        if tag == self.tag {
            if let Some(scope) = self.scopes.get(index) {
                return Ok(scope);
            }
        }
        Err(self.not_ours(number, "scope", "scope", "llmgov_governor_scope"))
    }

    /// The number this governor hands out for what it interned at `index`.
    fn tagged(&self, index: u32) -> u64 {
        u64::from(self.tag) << 32 | u64::from(index)
    }

    /// Why `number` names none of this governor's routes (or classes, or scopes).
    #[cold]
    fn not_ours(&self, number: u64, field: &'static str, what: &str, from: &str) -> Failure {
        not_ours(self.tag, number, field, what, from)
    }
}

/// Why `number` names none of the numbers the governor tagged `tag` handed
/// out: another governor's (local or Redis: they share the tags), or none.
#[cold]
pub(crate) fn not_ours(tag: u32, number: u64, field: &'static str, what: &str, from: &str) -> Failure {
    let theirs = (number >> 32) as u32;
    if theirs == tag || theirs == 0 || theirs >= NEXT_TAG.load(Ordering::Relaxed) {
        return unknown_number(field, number, from);
    }
    Failure::Core(llmgov_core::Error::InvalidRequest {
        field,
        value: number.to_string(),
        reason: format!(
            "this {what} belongs to another governor: {what} numbers are valid only with the governor whose \
             {from} returned them"
        ),
    })
}

/// The tag of the next governor made; 0 is never one, so a zeroed route
/// number is no route.
static NEXT_TAG: AtomicU32 = AtomicU32::new(1);

/// A tag for a new governor. After 2^32 - 1 governors the tags wrap (and
/// skip 0); only two governors that far apart could share one.
pub(crate) fn next_tag() -> u32 {
    loop {
        let tag = NEXT_TAG.fetch_add(1, Ordering::Relaxed);
        if tag != 0 {
            return tag;
        }
    }
}

/// A number this governor never handed out: the same code the core gives a
/// handle from another governor.
#[cold]
fn unknown_number(field: &'static str, number: impl ToString, from: &str) -> Failure {
    Failure::Core(llmgov_core::Error::InvalidRequest {
        field,
        value: number.to_string(),
        reason: format!("not a number this governor's {from} returned"),
    })
}

/// Builds the governor and hands the caller its reference.
///
/// # Safety
/// `clock` NULL or a live clock; `out` checked by the caller.
unsafe fn build(
    config: impl FnOnce() -> llmgov_core::Result<Config>,
    clock: *const llmgov_manual_clock,
    out: Out<*const llmgov_governor>,
) -> Outcome {
    let config = config()?;
    // SAFETY: the caller's contract; NULL means the monotonic clock.
    let governor = match unsafe { clock.as_ref() } {
        Some(manual) => Governor::with_clock(&config, manual.clock.clone())?,
        None => Governor::new(&config)?,
    };
    out.write(Arc::into_raw(Arc::new(llmgov_governor::new(governor)?)));
    Ok(())
}

/// A governor from a TOML configuration (the format of the README's
/// "Configuration" section). A bad config is `LLMGOV_RESULT_INVALID_CONFIG`,
/// and `llmgov_last_error` names the field and the value.
///
/// `clock` is NULL for the real monotonic clock, or a manual clock the
/// governor reads instead (it keeps its own reference to it).
///
/// # Ownership
/// On success `*out_governor` is the caller's: free it with
/// `llmgov_governor_free`. On failure it is not written.
///
/// # Safety
/// `toml` must be NULL (an error) or a NUL-terminated string; `clock` NULL
/// or a live manual clock; `out_governor` NULL (an error) or writable.
#[no_mangle]
pub unsafe extern "C" fn llmgov_governor_from_toml(
    toml: *const c_char,
    clock: *const llmgov_manual_clock,
    out_governor: *mut *const llmgov_governor,
) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let (text, out) = unsafe { (args::text(toml, "toml")?, Out::new(out_governor, "out_governor")?) };
        // SAFETY: the caller's contract.
        unsafe { build(|| Config::from_toml(text), clock, out) }
    })
}

/// A governor from a JSON configuration (the same fields as TOML, as the
/// conformance scenarios in `tests/scenarios` write them). As
/// `llmgov_governor_from_toml`.
///
/// # Ownership
/// As `llmgov_governor_from_toml`.
///
/// # Safety
/// As `llmgov_governor_from_toml`, with `json` for `toml`.
#[no_mangle]
pub unsafe extern "C" fn llmgov_governor_from_json(
    json: *const c_char,
    clock: *const llmgov_manual_clock,
    out_governor: *mut *const llmgov_governor,
) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let (text, out) = unsafe { (args::text(json, "json")?, Out::new(out_governor, "out_governor")?) };
        // SAFETY: the caller's contract.
        unsafe { build(|| Config::from_json(text), clock, out) }
    })
}

/// A governor from a shipped preset (`"openai-gpt-4o-tier1"`, …). An
/// unknown name is `LLMGOV_RESULT_UNKNOWN_PRESET`, and the message lists the
/// known ones.
///
/// # Ownership
/// As `llmgov_governor_from_toml`.
///
/// # Safety
/// As `llmgov_governor_from_toml`, with `name` for `toml`.
#[no_mangle]
pub unsafe extern "C" fn llmgov_governor_from_preset(
    name: *const c_char,
    clock: *const llmgov_manual_clock,
    out_governor: *mut *const llmgov_governor,
) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let (name, out) = unsafe { (args::text(name, "name")?, Out::new(out_governor, "out_governor")?) };
        // SAFETY: the caller's contract.
        unsafe { build(|| Config::preset(name), clock, out) }
    })
}

/// Releases the caller's reference to a governor. NULL does nothing.
///
/// Permits and profiles not yet freed keep the governor alive, so permits
/// can still be settled; it is freed with the last of them. The event
/// callback, if any, is removed first: once this returns it is never called
/// again (calls under way on other threads are waited for, unless this is
/// called from inside the callback itself). Called from inside an event
/// callback, it lets the governor go once the llmgov call that raised the
/// event returns, so that call does not run on after it.
///
/// # Safety
/// `governor` must be NULL or a governor from `llmgov_governor_from_*` not
/// freed yet, and not used after. Freeing it twice is undefined behaviour.
#[no_mangle]
pub unsafe extern "C" fn llmgov_governor_free(governor: *const llmgov_governor) {
    guard_infallible(|| {
        if !governor.is_null() {
            // SAFETY: made by Arc::into_raw in `build`; this is the caller's reference.
            let governor = unsafe { Arc::from_raw(governor) };
            governor.events.clear();
            crate::events::free_handle(governor);
        }
    })
}

/// Resolves a request's scope paths, once, to a route number to put in
/// `llmgov_request.route`. The same paths give the same number. Every
/// configured or template scope on every prefix of every path is charged,
/// each once.
///
/// Errors: `LLMGOV_RESULT_INVALID_PATH` (an empty segment, a `*`),
/// `LLMGOV_RESULT_UNKNOWN_SCOPE` (no scope covers a path),
/// `LLMGOV_RESULT_INVALID_REQUEST` (no paths), `LLMGOV_RESULT_INVALID_UTF8`
/// and `LLMGOV_RESULT_NULL_ARGUMENT` naming the path (`"paths[2]"`).
///
/// # Ownership
/// The paths are only read; `*out_route` is a plain number, valid with
/// this governor only: it carries the governor's tag in its high 32 bits,
/// so a request on another governor's route is refused
/// (`LLMGOV_RESULT_INVALID_REQUEST` naming `route`), never charged to
/// whichever of this governor's routes has the same index. It is never 0.
///
/// # Safety
/// `governor` NULL or live; `paths` NULL (only with `paths_len` 0) or
/// `paths_len` pointers, each NULL or NUL-terminated; `out_route` NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn llmgov_governor_route(
    governor: *const llmgov_governor,
    paths: *const *const c_char,
    paths_len: usize,
    out_route: *mut u64,
) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let (gov, paths, out) = unsafe {
            (args::reference(governor, "governor")?, args::paths(paths, paths_len)?, Out::new(out_route, "out_route")?)
        };
        let route = gov.governor.route(&paths)?;
        out.write(gov.tagged(gov.routes.intern(route, "route")?));
        Ok(())
    })
}

/// Interns one scope path (creating a template scope met for the first
/// time) and gives the number of the deepest scope on it, for
/// `llmgov_governor_scope_snapshot_json`.
///
/// # Ownership
/// `*out_scope` is a plain number, valid with this governor only: like a
/// route number it carries the governor's tag, so another governor's scope
/// is refused (`LLMGOV_RESULT_INVALID_REQUEST` naming `scope`) rather than
/// read as this governor's scope of the same index.
///
/// # Safety
/// `governor` NULL or live; `path` NULL or NUL-terminated; `out_scope` NULL
/// or writable.
#[no_mangle]
pub unsafe extern "C" fn llmgov_governor_scope(
    governor: *const llmgov_governor,
    path: *const c_char,
    out_scope: *mut u64,
) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let (gov, path, out) = unsafe {
            (args::reference(governor, "governor")?, args::text(path, "path")?, Out::new(out_scope, "out_scope")?)
        };
        let scope = gov.governor.scope_id(path)?;
        out.write(gov.tagged(gov.scopes.intern(scope, "scope")?));
        Ok(())
    })
}

/// Interns a traffic class by name, for `llmgov_request.class_id`. Output
/// lengths are learned per route and class. Class 0 is the unnamed default
/// class, the one a zeroed request is in, on every governor.
///
/// # Ownership
/// `*out_class` is a plain number, valid with this governor only: like a
/// route number it carries the governor's tag, so another governor's class
/// is refused (`LLMGOV_RESULT_INVALID_REQUEST` naming `class_id`) rather
/// than read as this governor's class of the same index.
///
/// # Safety
/// As `llmgov_governor_scope`, with `name` and `out_class`.
#[no_mangle]
pub unsafe extern "C" fn llmgov_governor_class(
    governor: *const llmgov_governor,
    name: *const c_char,
    out_class: *mut u64,
) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let (gov, name, out) = unsafe {
            (args::reference(governor, "governor")?, args::text(name, "name")?, Out::new(out_class, "out_class")?)
        };
        out.write(gov.tagged(gov.classes.intern(gov.governor.class(name), "class")?));
        Ok(())
    })
}

/// Every scope and counter now, as JSON: `{"now_ms", "admitted",
/// "rate_limited", "never_fits", "circuit_open",
/// "admitted_then_provider_rejected", "expired_permits", "scopes": [{"path",
/// "breaker", "limits": [{"dimension", "algorithm", "configured_amount",
/// "amount", "effective_amount", "burst", "window_ms", "available",
/// "in_use", "reserved", "used", "reserves_output", "expired"}]}]}` (the
/// Rust `Snapshot`; `in_use` is `reserved`, what pending permits hold, plus
/// `used`).
///
/// # Ownership
/// On success `*out_json` is the caller's: free it with `llmgov_string_free`.
///
/// # Safety
/// `governor` NULL or live; `out_json` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn llmgov_governor_snapshot_json(
    governor: *const llmgov_governor,
    out_json: *mut *mut c_char,
) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let (gov, out) = unsafe { (args::reference(governor, "governor")?, Out::new(out_json, "out_json")?) };
        write_json(out, &gov.governor.snapshot())
    })
}

/// One scope's limits now, as JSON: `{"path", "limits": [...]}` as in
/// `llmgov_governor_snapshot_json`.
///
/// # Ownership
/// As `llmgov_governor_snapshot_json`.
///
/// # Safety
/// As `llmgov_governor_snapshot_json`.
#[no_mangle]
pub unsafe extern "C" fn llmgov_governor_scope_snapshot_json(
    governor: *const llmgov_governor,
    scope: u64,
    out_json: *mut *mut c_char,
) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let (gov, out) = unsafe { (args::reference(governor, "governor")?, Out::new(out_json, "out_json")?) };
        let id = gov.scope(scope)?;
        write_json(out, &gov.governor.scope_snapshot(id)?)
    })
}

/// The governor's clock reading, in nanoseconds (the manual clock's, or
/// the monotonic clock's since the governor was built).
///
/// # Safety
/// `governor` NULL or live; `out_ns` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn llmgov_governor_now(governor: *const llmgov_governor, out_ns: *mut u64) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let (gov, out) = unsafe { (args::reference(governor, "governor")?, Out::new(out_ns, "out_ns")?) };
        out.write(gov.governor.clock().now());
        Ok(())
    })
}

/// Lets waiting requests see the clock's time now: admits whoever can pass
/// and refuses whoever's deadline came. Call it after advancing a manual
/// clock (settles, cancels and the governor's timer do it otherwise).
/// Writes how long until the next time-driven change (a refill, a
/// deadline) to `*out_next_ns`, or `UINT64_MAX` when nothing waits on time.
///
/// # Safety
/// `governor` NULL or live; `out_next_ns` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn llmgov_governor_wake_waiters(
    governor: *const llmgov_governor,
    out_next_ns: *mut u64,
) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let (gov, out) = unsafe { (args::reference(governor, "governor")?, Out::new(out_next_ns, "out_next_ns")?) };
        let next = gov.governor.wake_waiters();
        out.write(next.map_or(u64::MAX, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX - 1)));
        Ok(())
    })
}

/// The waiting queues now, as JSON: `{"depth", "classes": [{"class",
/// "priority", "depth", "queue_bound", "oldest_wait_ms", "max_wait_ms",
/// "longest_admitted_wait_ms", "admitted", "expired", "refused_queue_full",
/// …}]}`.
///
/// # Ownership
/// As `llmgov_governor_snapshot_json`.
///
/// # Safety
/// As `llmgov_governor_snapshot_json`.
#[no_mangle]
pub unsafe extern "C" fn llmgov_governor_queue_metrics_json(
    governor: *const llmgov_governor,
    out_json: *mut *mut c_char,
) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let (gov, out) = unsafe { (args::reference(governor, "governor")?, Out::new(out_json, "out_json")?) };
        write_json(out, &gov.governor.queue_metrics())
    })
}

/// Everything observable now, in one JSON value (the Rust `Metrics`, which
/// the Prometheus text is drawn from and `llmgov top` reads): `{"snapshot"`
/// as in `llmgov_governor_snapshot_json`, `"queues"` as in
/// `llmgov_governor_queue_metrics_json`, `"refusals": [{"dimension",
/// "gateway_decision", "count"}]` (`gateway_decision` is `rejected_locally`
/// or `admitted_then_provider_rejected`; every pair, zeros included),
/// `"estimate_errors": [{"scopes", "side", "samples", "p05", "p50",
/// "p95"}]` (per provider route and side, actual ÷ estimated − 1), and
/// `"retry_amplification"` (admitted ÷ admitted the provider did not
/// refuse)`}`. Write it to a file or serve it, and `llmgov top FILE_OR_URL`
/// draws it.
///
/// # Ownership
/// As `llmgov_governor_snapshot_json`.
///
/// # Safety
/// As `llmgov_governor_snapshot_json`.
#[no_mangle]
pub unsafe extern "C" fn llmgov_governor_metrics_json(
    governor: *const llmgov_governor,
    out_json: *mut *mut c_char,
) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let (gov, out) = unsafe { (args::reference(governor, "governor")?, Out::new(out_json, "out_json")?) };
        write_json(out, &gov.governor.metrics())
    })
}

/// Every limit, counter, breaker and queue now, in the Prometheus text
/// format (OpenMetrics, ending in `# EOF`), for an application's `/metrics`
/// endpoint, drawn from `llmgov_governor_metrics_json`'s value:
/// `llmgov_limit`, `llmgov_limit_effective`, `llmgov_in_use`,
/// `llmgov_reserved`, `llmgov_used`, `llmgov_available`,
/// `llmgov_utilisation` per scope, dimension and window; `llmgov_breaker`
/// per provider scope; the admitted, refused, expired and
/// provider-rejected counters; `llmgov_refusals_total` by dimension and
/// gateway_decision; the queues (depth, oldest waiter, wait histogram,
/// borrowed tokens) per traffic class; `llmgov_estimate_error` per provider
/// route and side; `llmgov_retry_amplification`.
///
/// # Ownership
/// On success `*out_text` is the caller's: free it with
/// `llmgov_string_free`.
///
/// # Safety
/// `governor` NULL or live; `out_text` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn llmgov_governor_prometheus(
    governor: *const llmgov_governor,
    out_text: *mut *mut c_char,
) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let (gov, out) = unsafe { (args::reference(governor, "governor")?, Out::new(out_text, "out_text")?) };
        write_text(out, &gov.governor.prometheus())
    })
}
