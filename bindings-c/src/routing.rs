//! Model profiles: a profile handle resolved once for a consumer, and an
//! acquire by profile that picks the deployment with the most headroom,
//! fails over, falls back where the request's class allows, and degrades to
//! a cheaper profile past a cost budget's threshold; and one that waits,
//! cancellably, in the queue of the deployment that should pass first.

use std::ffi::{c_char, CString};
use std::sync::{Arc, Mutex, PoisonError};

use llmgov_core::{Error, ProfileRoute, Routed};

use crate::args::{self, Out};
use crate::cancel::{block_on, llmgov_cancel_token, with_timeout};
use crate::errors::{c_string, guard, guard_infallible, llmgov_result, Failure, Outcome};
use crate::governor::llmgov_governor;
use crate::permit::{hand_out, llmgov_permit, llmgov_request};

/// A model profile and its fallback chain, resolved for one consumer's
/// scope paths by `llmgov_profile_new`. Resolve it once and keep it:
/// acquiring through it interns nothing. May be used from any thread at
/// once.
#[allow(non_camel_case_types)]
pub struct llmgov_profile {
    /// Keeps the governor alive (and tells which governor it belongs to).
    governor: Arc<llmgov_governor>,
    route: ProfileRoute,
    /// C copies of the profile and deployment names met so far, for
    /// `llmgov_routed`; they live as long as the profile.
    names: Names,
}

/// Where `llmgov_governor_try_acquire_profile` or
/// `llmgov_governor_acquire_profile` sent a request.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct llmgov_routed {
    /// The profile that served it (a fallback's, if it fell back).
    pub profile: *const c_char,
    /// The chosen deployment's scope path.
    pub deployment: *const c_char,
    /// Whether it left the profile asked for through a fallback.
    pub fell_back: bool,
    /// Whether it left the profile asked for because a cost budget passed
    /// the profile's `degrade_at` threshold (to its `degrade_to` profile).
    pub degraded: bool,
}

/// An append-only set of names as C strings: read without a lock (a
/// profile has a handful), added to under one. A name's pointer never
/// moves.
#[derive(Default)]
struct Names {
    items: boxcar::Vec<CString>,
    adding: Mutex<()>,
}

impl Names {
    fn get(&self, name: &str) -> *const c_char {
        let find = || self.items.iter().find(|(_, c)| c.as_bytes() == name.as_bytes()).map(|(_, c)| c.as_ptr());
        if let Some(found) = find() {
            return found;
        }
        let _adding = self.adding.lock().unwrap_or_else(PoisonError::into_inner);
        find().unwrap_or_else(|| {
            let index = self.items.push(c_string(name));
            self.items[index].as_ptr()
        })
    }
}

/// Resolves profile `name` (a `[profiles.<name>]` of the configuration) and
/// its fallback chain for a consumer's scope paths (e.g. `"tenants/acme"`;
/// none at all is fine): every deployment's route charges the consumer's
/// scopes too.
///
/// Errors: `LLMGOV_RESULT_INVALID_REQUEST` naming the field `profile` for
/// an unknown name (the message lists the known ones), and as
/// `llmgov_governor_route` for the paths.
///
/// # Ownership
/// On success `*out_profile` is the caller's: free it with
/// `llmgov_profile_free`. It holds a reference to the governor.
///
/// # Safety
/// `governor` NULL or a live governor; `name` NULL or NUL-terminated;
/// `consumer_paths` NULL (only with `consumer_paths_len` 0) or that many
/// pointers, each NULL or NUL-terminated; `out_profile` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn llmgov_profile_new(
    governor: *const llmgov_governor,
    name: *const c_char,
    consumer_paths: *const *const c_char,
    consumer_paths_len: usize,
    out_profile: *mut *mut llmgov_profile,
) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let (gov, name, list, out) = unsafe {
            (
                args::reference(governor, "governor")?,
                args::text(name, "name")?,
                args::slice(consumer_paths, consumer_paths_len, "consumer_paths")?,
                Out::new(out_profile, "out_profile")?,
            )
        };
        let paths = list
            .iter()
            .enumerate()
            // SAFETY: each is NULL or NUL-terminated by the caller's contract.
            .map(|(i, &path)| unsafe { args::text(path, &format!("consumer_paths[{i}]")) })
            .collect::<Outcome<Vec<&str>>>()?;
        let route = gov.governor.profile(name, &paths)?;
        // SAFETY: `governor` is live, from Arc::into_raw; the profile takes
        // a reference of its own.
        let governor = unsafe {
            Arc::increment_strong_count(governor);
            Arc::from_raw(governor)
        };
        out.write(Box::into_raw(Box::new(llmgov_profile { governor, route, names: Names::default() })));
        Ok(())
    })
}

/// Frees a profile. NULL does nothing. Strings an `llmgov_routed` pointed
/// into it go with it.
///
/// # Safety
/// `profile` must be NULL or a profile from `llmgov_profile_new` not freed
/// yet, and not used after (nor the strings of its `llmgov_routed`).
#[no_mangle]
pub unsafe extern "C" fn llmgov_profile_free(profile: *mut llmgov_profile) {
    guard_infallible(|| {
        if !profile.is_null() {
            // SAFETY: made by Box::into_raw in `llmgov_profile_new`.
            crate::events::free_handle(unsafe { Box::from_raw(profile) });
        }
    })
}

/// Admits `request` on the deployment of `profile` with the most
/// normalized headroom (the least, over its provider limits, of available
/// ÷ limit; keys of one organisation share its pool), skipping deployments
/// whose breaker is open and trying the next when one refuses. When all
/// refuse, it falls back along the profile's chain if the request's class
/// may (`fallback_allowed`); otherwise, or at the chain's end, it returns
/// the first profile's refusal (`LLMGOV_RESULT_RATE_LIMITED` with the
/// scope, dimension and retry time; `LLMGOV_RESULT_CIRCUIT_OPEN`;
/// `LLMGOV_RESULT_NEVER_FITS`), never switching silently. Where the profile
/// has cost budget thresholds (`[profiles.X.budget]`), past `degrade_at`
/// it serves from the cheaper `degrade_to` profile (`degraded` is set) if
/// the class may leave, and past `refuse_at` it refuses on the cost
/// dimension (`LLMGOV_DIMENSION_COST`).
///
/// `request->route` is not read: each deployment's route is used. The
/// profile must be this governor's (else `LLMGOV_RESULT_INVALID_REQUEST`
/// naming `profile`).
///
/// # Ownership
/// On success `*out_permit` is the caller's, as from
/// `llmgov_governor_try_acquire`, and `*out_routed` says where it goes; its
/// strings belong to the profile and stay valid until `llmgov_profile_free`.
/// On failure neither is written.
///
/// # Safety
/// `governor` NULL or live; `profile` NULL or a live profile; `request`
/// NULL or readable; `out_permit` and `out_routed` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn llmgov_governor_try_acquire_profile(
    governor: *const llmgov_governor,
    profile: *const llmgov_profile,
    request: *const llmgov_request,
    out_permit: *mut *mut llmgov_permit,
    out_routed: *mut llmgov_routed,
) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let (gov, profile, request, out_permit, out_routed) = unsafe {
            (
                args::reference(governor, "governor")?,
                args::reference(profile, "profile")?,
                args::reference(request, "request")?,
                Out::new(out_permit, "out_permit")?,
                Out::new(out_routed, "out_routed")?,
            )
        };
        profile.check_owner(governor)?;
        let request = gov.request_on(profile.route.primary(), request)?;
        let routed = gov.governor.try_acquire_profile(&profile.route, &request)?;
        // SAFETY: `governor` is live, from Arc::into_raw.
        unsafe { profile.hand_out(governor, routed, out_permit, out_routed) };
        Ok(())
    })
}

/// Waits fairly for admission through `profile`. It is admitted at once
/// where `llmgov_governor_try_acquire_profile` would admit it. Otherwise
/// it waits in the queue of the deployment that should pass first (the
/// shortest retry) among those the request's class may use: a class whose
/// `fallback_allowed` is false waits on its own profile's deployments,
/// never on a fallback's. Deployments refused by the profile's cost budget
/// thresholds are not waited on; once admitted, the thresholds are checked
/// again: past `degrade_at` the cheaper profile is tried at once, as for a
/// request arriving then; past `refuse_at` the request is refused
/// (`LLMGOV_RESULT_RATE_LIMITED` on `LLMGOV_DIMENSION_COST`), giving its
/// permit back.
///
/// The wait is bounded as `llmgov_governor_acquire`'s: by `timeout_ns`
/// (`LLMGOV_NO_TIMEOUT` for none of its own), the request's deadline and
/// its class's maximum wait (`LLMGOV_RESULT_DEADLINE_EXCEEDED`, at once when
/// the predicted wait is already longer), and its class's queue bound
/// (`LLMGOV_RESULT_QUEUE_FULL`). A request that can never pass
/// (`LLMGOV_RESULT_NEVER_FITS`, every deployment past a budget threshold,
/// …) is refused at once. `cancel`, if not NULL, ends the wait as in
/// `llmgov_governor_acquire_cancellable`: `LLMGOV_RESULT_CANCELLED` as soon
/// as another thread cancels it; the request has left its queue and holds
/// nothing. A refused or timed-out wait holds nothing either.
///
/// `request->route` is not read. The profile must be this governor's (else
/// `LLMGOV_RESULT_INVALID_REQUEST` naming `profile`). On a manual clock,
/// call `llmgov_governor_wake_waiters` after advancing it. Its refusals
/// reach the event hook, at once or after a wait.
///
/// # Ownership
/// As `llmgov_governor_try_acquire_profile`. The token stays the caller's.
///
/// # Safety
/// As `llmgov_governor_try_acquire_profile`; `cancel` NULL or a token live
/// for the whole call.
#[no_mangle]
pub unsafe extern "C" fn llmgov_governor_acquire_profile(
    governor: *const llmgov_governor,
    profile: *const llmgov_profile,
    request: *const llmgov_request,
    timeout_ns: u64,
    cancel: *const llmgov_cancel_token,
    out_permit: *mut *mut llmgov_permit,
    out_routed: *mut llmgov_routed,
) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let (gov, profile, request, out_permit, out_routed) = unsafe {
            (
                args::reference(governor, "governor")?,
                args::reference(profile, "profile")?,
                args::reference(request, "request")?,
                Out::new(out_permit, "out_permit")?,
                Out::new(out_routed, "out_routed")?,
            )
        };
        let uncancellable;
        // SAFETY: NULL or a live token, by the caller's contract.
        let token = match unsafe { cancel.as_ref() } {
            Some(token) => token,
            None => {
                uncancellable = llmgov_cancel_token::uncancelled();
                &uncancellable
            }
        };
        token.check()?;
        profile.check_owner(governor)?;
        let request = with_timeout(gov.request_on(profile.route.primary(), request)?, timeout_ns);
        let routed = block_on(gov.governor.acquire_profile(&profile.route, &request), token)?;
        // SAFETY: `governor` is live, from Arc::into_raw.
        unsafe { profile.hand_out(governor, routed, out_permit, out_routed) };
        Ok(())
    })
}

impl llmgov_profile {
    /// Fails unless the profile was made on `governor`.
    fn check_owner(&self, governor: *const llmgov_governor) -> Outcome {
        if std::ptr::eq(Arc::as_ptr(&self.governor), governor) {
            return Ok(());
        }
        Err(Failure::Core(Error::InvalidRequest {
            field: "profile",
            value: "a profile of another governor".to_owned(),
            reason: "make profiles with llmgov_profile_new on the governor that acquires through them".to_owned(),
        }))
    }

    /// Hands `routed`'s permit to the caller and says where it goes.
    ///
    /// # Safety
    /// `governor` must be live and come from `Arc::into_raw`.
    unsafe fn hand_out(
        &self,
        governor: *const llmgov_governor,
        routed: Routed,
        out_permit: Out<*mut llmgov_permit>,
        out_routed: Out<llmgov_routed>,
    ) {
        out_routed.write(llmgov_routed {
            profile: self.names.get(&routed.profile),
            deployment: self.names.get(&routed.deployment),
            fell_back: routed.fell_back,
            degraded: routed.degraded,
        });
        // SAFETY: the caller's contract.
        out_permit.write(unsafe { hand_out(governor, routed.permit) });
    }
}
