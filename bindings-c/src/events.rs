//! The event hook: the core's events (denials, provider rejections, breaker
//! changes) handed to a C callback as JSON. The callback can be replaced
//! or removed at any time, and once removal returns it is never called
//! again, so the caller may then free what `userdata` points to.

use std::any::Any;
use std::cell::RefCell;
use std::ffi::{c_char, c_void, CString};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Once, PoisonError};

use llmgov_core::events::Event;
use llmgov_core::Governor;

use crate::args;
use crate::errors::{guard, llmgov_result, Failure, Outcome};
use crate::governor::llmgov_governor;

/// The event callback: `event_json` is one event as a JSON object of
/// `len` bytes (also NUL-terminated), valid only during the call; copy it
/// to keep it. `userdata` is what was given to
/// `llmgov_governor_set_event_hook`.
///
/// The events are `{"event": "denied", "code", "scope", "dimension",
/// "retry_after_ms", "class"}` (a refusal before the request left: code
/// `rate_limited`, `never_fits`, `circuit_open`, `queue_full` or
/// `deadline_exceeded`), `{"event": "provider_rejected", "scopes", "kind",
/// "dimension", "retry_after_ms"}` (the provider refused a request llmgov
/// had admitted) and `{"event": "breaker_changed", "scope", "state"}`
/// (`"open"` or `"closed"`). Absent values are `null`.
///
/// It runs on the thread where the event happened (any thread that calls
/// llmgov), possibly on several at once; it must not unwind (no C++
/// exception, no longjmp) out of the call.
#[allow(non_camel_case_types)]
pub type llmgov_event_callback =
    Option<unsafe extern "C" fn(userdata: *mut c_void, event_json: *const c_char, len: usize)>;

/// A callback and its userdata, as set.
struct Callback {
    function: unsafe extern "C" fn(*mut c_void, *const c_char, usize),
    userdata: *mut c_void,
}

// SAFETY: the caller of `llmgov_governor_set_event_hook` promises that the
// callback may be called with `userdata` from any thread, at once.
unsafe impl Send for Callback {}
// SAFETY: as above.
unsafe impl Sync for Callback {}

/// This thread's calls of event callbacks, and what was freed inside them.
struct Frames {
    /// The hooks whose callbacks this thread is inside, innermost last
    /// (they nest: a callback that calls llmgov may cause another event).
    running: RefCell<Vec<*const EventHook>>,
    /// Handles freed from inside a callback. The llmgov call that raised
    /// the event is still running on them, so they are dropped when the
    /// outermost llmgov call on this thread returns.
    freed: RefCell<Vec<Box<dyn Any>>>,
}

thread_local! {
    static FRAMES: Frames = const { Frames { running: RefCell::new(Vec::new()), freed: RefCell::new(Vec::new()) } };
}

/// Callbacks running now, on every thread, and handles kept in every
/// thread's `freed`: while both are 0, as nearly always, the entry points
/// and frees need not look at the thread-local (which a shared library
/// reaches through `__tls_get_addr`: looking on every call cost the C
/// round trip 188 instructions, 12%, by callgrind). A thread always sees
/// its own increments, which is all each check needs.
static RUNNING: AtomicUsize = AtomicUsize::new(0);
static KEPT: AtomicUsize = AtomicUsize::new(0);

/// Whether this thread is inside a call of `hook`'s callback.
fn running_here(hook: &EventHook) -> bool {
    FRAMES.try_with(|f| f.running.borrow().contains(&(hook as *const EventHook))).unwrap_or(false)
}

/// For the `llmgov_*_free` functions: drops `handle` now, or, from inside
/// an event callback, once the llmgov call that raised the event returns
/// (freeing what that call runs on would leave it on freed memory).
#[inline]
pub(crate) fn free_handle<T: 'static>(handle: T) {
    if RUNNING.load(Relaxed) > 0 {
        keep_if_inside_callback(Box::new(handle));
    }
    // Otherwise `handle` is dropped here, now.
}

#[cold]
fn keep_if_inside_callback(handle: Box<dyn Any>) {
    let _ = FRAMES.try_with(|f| {
        if !f.running.borrow().is_empty() {
            f.freed.borrow_mut().push(handle);
            KEPT.fetch_add(1, Relaxed);
        }
    });
}

/// Drops the handles freed inside callbacks once none runs on this thread:
/// every entry point calls it on returning.
#[inline]
pub(crate) fn drop_freed() {
    if KEPT.load(Relaxed) > 0 {
        drop_freed_here();
    }
}

#[cold]
fn drop_freed_here() {
    let freed = FRAMES.try_with(|f| match f.freed.borrow().is_empty() || !f.running.borrow().is_empty() {
        true => Vec::new(),
        false => std::mem::take(&mut *f.freed.borrow_mut()),
    });
    if let Ok(freed) = freed {
        KEPT.fetch_sub(freed.len(), Relaxed);
        drop(freed);
    }
}

/// A governor's hook slot. Each call of a callback holds a clone of its
/// `Arc`, so a setter knows the old callback is idle once the count is 1.
pub(crate) struct EventHook {
    current: Mutex<Option<Arc<Callback>>>,
    /// Signalled whenever a call of a callback returns.
    finished: Condvar,
    /// The core takes one hook for the governor's life; it is installed at
    /// the first set, so a governor without a callback builds no events.
    installed: Once,
}

impl Default for EventHook {
    fn default() -> Self {
        EventHook { current: Mutex::new(None), finished: Condvar::new(), installed: Once::new() }
    }
}

impl EventHook {
    fn lock(&self) -> MutexGuard<'_, Option<Arc<Callback>>> {
        // Only Arc clones happen under the lock: poisoning leaves it sound.
        self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Hands `event` to the callback, if one is set.
    fn emit(&self, event: &Event) {
        let Some(callback) = self.lock().clone() else {
            return;
        };
        // Serializing a plain enum of strings and numbers cannot fail.
        if let Ok(json) = serde_json::to_string(event) {
            let len = json.len();
            // JSON escapes NUL, so the text has none.
            if let Ok(json) = CString::new(json) {
                RUNNING.fetch_add(1, Relaxed);
                let _ = FRAMES.try_with(|f| f.running.borrow_mut().push(self));
                // SAFETY: the caller's promise at set time: callable from
                // any thread with this userdata until it is unset.
                unsafe { (callback.function)(callback.userdata, json.as_ptr(), len) };
                let _ = FRAMES.try_with(|f| f.running.borrow_mut().pop());
                RUNNING.fetch_sub(1, Relaxed);
            }
        }
        // Dropped under the lock, so a setter waiting on the count cannot
        // miss the wake-up.
        let slot = self.lock();
        drop(callback);
        drop(slot);
        self.finished.notify_all();
    }

    /// Replaces the callback, and returns once no call of the old one is
    /// under way (except on this very thread, when called from inside this
    /// hook's callback: then it cannot wait for itself).
    fn replace(&self, new: Option<Callback>) {
        let mut slot = self.lock();
        let Some(old) = std::mem::replace(&mut *slot, new.map(Arc::new)) else {
            return;
        };
        if running_here(self) {
            return;
        }
        while Arc::strong_count(&old) > 1 {
            slot = self.finished.wait(slot).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Routes the core's events to this slot, once per governor.
    fn install(self: &Arc<Self>, governor: &Governor) -> Outcome {
        let mut result = Ok(());
        self.installed.call_once(|| {
            let slot = Arc::clone(self);
            result = governor.set_event_hook(Arc::new(move |event: &Event| slot.emit(event))).map_err(Failure::from);
        });
        result
    }

    /// For `llmgov_governor_free`: after the caller's reference goes, its
    /// callback is never called again (permits that outlive it may still
    /// cause events; they go nowhere).
    pub(crate) fn clear(&self) {
        self.replace(None);
    }
}

/// Sets the callback told of this governor's events (see
/// `llmgov_event_callback` for their JSON), replacing any set before; NULL
/// `callback` removes it. A governor that never had a callback builds no
/// events; once one was set, an event with none set costs only its
/// construction (no JSON).
///
/// When this returns, the previous callback is no longer running and will
/// never be called again, so its userdata may be freed. It may not be
/// called from inside this governor's own event callback
/// (`LLMGOV_RESULT_INVALID_ARGUMENT` naming `callback`): it would wait for
/// itself. From inside another governor's callback it may, and waits as
/// from anywhere else.
///
/// # Lifetime
/// The callback may be called, from any thread, from this call until it is
/// replaced, removed, or `llmgov_governor_free` returns (which removes it;
/// permits that outlive the governor then cause no callbacks). Keep
/// `userdata` valid until then.
///
/// # Safety
/// `governor` NULL or live; `callback` NULL or a function safe to call
/// with `userdata` from any thread, concurrently, until it is removed.
#[no_mangle]
pub unsafe extern "C" fn llmgov_governor_set_event_hook(
    governor: *const llmgov_governor,
    callback: llmgov_event_callback,
    userdata: *mut c_void,
) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let gov = unsafe { args::reference(governor, "governor") }?;
        if running_here(&gov.events) {
            let value = if callback.is_some() { "a callback" } else { "NULL" };
            return Err(Failure::argument(
                "callback",
                value,
                "llmgov_governor_set_event_hook may not be called from inside this governor's own event callback \
                 (it would wait for itself to return)",
            ));
        }
        if let Some(function) = callback {
            gov.events.install(&gov.governor)?;
            gov.events.replace(Some(Callback { function, userdata }));
        } else {
            gov.events.replace(None);
        }
        Ok(())
    })
}
