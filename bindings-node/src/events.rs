//! The event hook: the core's events (local denials, provider rejections,
//! breaker changes) delivered to one JavaScript listener as plain objects.
//!
//! The core calls its hook on whichever thread the event happened on: the
//! JavaScript thread for a refused `tryAcquire` or a reported 429, another
//! one for anything the core's own threads (the scheduler's timer) decide.
//! So the listener is reached through a napi `ThreadsafeFunction`, called in
//! non-blocking mode: the event is queued for the JavaScript thread and the
//! core's thread never waits on JavaScript. Events raised on the JavaScript
//! thread travel the same way, so the listener runs after the call that
//! raised the event has returned, and may use the governor (a call back into
//! it from inside the core's hook would find the governor busy).
//!
//! Choices, documented for the user in the README:
//! - the function is *weak* (unref'd): a listener never keeps the process
//!   alive. Only while events raised by the JavaScript thread's own calls
//!   are queued is it referenced, so that they are delivered before the
//!   process exits (a script's last refusal is not lost); events from other
//!   threads never hold the process;
//! - the queue holds at most [`QUEUE`] events; past that (a JavaScript
//!   thread that does not get to run) events are dropped and counted
//!   ([`NativeGovernor::dropped_events`]) rather than grow memory without
//!   bound or block the core;
//! - the core takes one hook per governor, set with the first listener; the
//!   listener behind it can be replaced or removed. Removing it releases the
//!   JavaScript function, so a listener that closes over its governor does
//!   not keep the governor alive once removed.
//!
//! The JavaScript layer's listener (`ts/events.ts`) catches what the user's
//! callbacks throw: an exception escaping a threadsafe function's call is a
//! fatal exception in Node.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::thread::{self, ThreadId};

use llmgov::events::Event;
use napi::bindgen_prelude::{Function, JsObjectValue, Object, ToNapiValue, Unknown};
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::{sys, Env, Result, Status};
use napi_derive::napi;
use serde_json::Value;

use crate::errors::to_camel;
use crate::governor::NativeGovernor;

/// Events queued for the JavaScript thread at most, per governor.
pub const QUEUE: usize = 4096;

/// An event on its way, with the serial of the listener that holds the
/// event loop for it (raised on the JavaScript thread), if one does.
type Queued = (PlainEvent, Option<u64>);

/// The listener as the core's threads call it: weak, not callee-handled,
/// bounded; it turns a [`Queued`] into the listener's one argument.
type Listener = ThreadsafeFunction<Queued, Unknown<'static>, PlainEvent, Status, false, true, QUEUE>;

/// The current listener, and the JavaScript-thread events it still owes.
struct Slot {
    listener: Listener,
    /// Tells this listener's deliveries from those of one it replaced.
    serial: u64,
    /// Events raised on the JavaScript thread and not yet delivered: while
    /// any are, the listener holds the event loop.
    owed: usize,
}

/// Where a governor's hook sends its events.
pub struct EventSink {
    slot: Mutex<Option<Slot>>,
    /// The thread of the JavaScript environment that owns the governor.
    js_thread: ThreadId,
    /// That environment, used only on that thread.
    js_env: RawEnv,
    serials: AtomicU64,
    dropped: AtomicU64,
}

/// A `napi_env`, which only [`EventSink::js_thread`] ever uses.
struct RawEnv(sys::napi_env);
// SAFETY: the pointer is only dereferenced (by N-API) on the JavaScript
// thread that created the sink, checked against `js_thread` at each use.
unsafe impl Send for RawEnv {}
// SAFETY: as above.
unsafe impl Sync for RawEnv {}

impl EventSink {
    fn new(env: &Env) -> Self {
        EventSink {
            slot: Mutex::new(None),
            js_thread: thread::current().id(),
            js_env: RawEnv(env.raw()),
            serials: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        }
    }

    fn slot(&self) -> MutexGuard<'_, Option<Slot>> {
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `event` for the listener, if there is one; never waits on
    /// JavaScript.
    fn deliver(&self, event: &Event) {
        let mut slot = self.slot();
        let Some(slot) = slot.as_mut() else { return };
        let on_js_thread = thread::current().id() == self.js_thread;
        let holder = on_js_thread.then_some(slot.serial);
        match slot.listener.call((plain(event), holder), ThreadsafeFunctionCallMode::NonBlocking) {
            Status::Ok if on_js_thread => {
                slot.owed += 1;
                if slot.owed == 1 {
                    // SAFETY: on the JavaScript thread, its environment alive
                    // (it is running this call).
                    unsafe { sys::napi_ref_threadsafe_function(self.js_env.0, slot.listener.raw()) };
                }
            }
            Status::Ok => {}
            // QueueFull, or Closing while the environment is torn down.
            _ => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// On the JavaScript thread, as an event reaches the listener: releases
    /// the event loop once the listener owes nothing more.
    fn delivered(&self, env: &Env, holder: u64) {
        let mut slot = self.slot();
        let Some(slot) = slot.as_mut().filter(|s| s.serial == holder) else {
            // Owed by a listener since replaced: released, it holds nothing.
            return;
        };
        slot.owed -= 1;
        if slot.owed == 0 {
            // SAFETY: called by N-API on the JavaScript thread.
            unsafe { sys::napi_unref_threadsafe_function(env.raw(), slot.listener.raw()) };
        }
    }

    /// Sets (or with `None` removes) the listener; the one it replaces is
    /// released.
    fn replace(self: &Arc<Self>, listener: Option<Function<'_, PlainEvent, Unknown<'static>>>) -> Result<()> {
        let slot = match listener {
            None => None,
            Some(f) => {
                // Weak: the listener does not keep the sink (and so the
                // governor's hook) alive, which would make a cycle.
                let sink: Weak<EventSink> = Arc::downgrade(self);
                let listener = f.build_threadsafe_function().weak::<true>().max_queue_size::<QUEUE>().build_callback(
                    move |ctx: napi::threadsafe_function::ThreadsafeCallContext<Queued>| {
                        let (event, holder) = ctx.value;
                        if let (Some(holder), Some(sink)) = (holder, sink.upgrade()) {
                            sink.delivered(&ctx.env, holder);
                        }
                        Ok(event)
                    },
                )?;
                Some(Slot { listener, serial: self.serials.fetch_add(1, Ordering::Relaxed), owed: 0 })
            }
        };
        *self.slot() = slot;
        Ok(())
    }
}

/// An event as a JavaScript user reads it: the core's JSON form
/// (`{ event: "denied", code, scope, … }`) with camelCase keys, and `klass`
/// for `class` as everywhere else in this package; `event` first, then the
/// fields by name. Built on the core's thread, made an object on the
/// JavaScript thread.
pub struct PlainEvent(Vec<(String, Value)>);

fn plain(event: &Event) -> PlainEvent {
    let Ok(Value::Object(fields)) = serde_json::to_value(event) else {
        // Every event serializes to an object; should one not, the listener
        // still hears that something happened.
        return PlainEvent(vec![("event".to_owned(), Value::from("unknown"))]);
    };
    let mut fields: Vec<(String, Value)> = fields
        .into_iter()
        .map(|(key, value)| (if key == "class" { "klass".to_owned() } else { to_camel(&key) }, value))
        .collect();
    fields.sort_by(|(a, _), (b, _)| (a != "event", a).cmp(&(b != "event", b)));
    PlainEvent(fields)
}

impl ToNapiValue for PlainEvent {
    unsafe fn to_napi_value(env: sys::napi_env, event: Self) -> Result<sys::napi_value> {
        let mut object = Object::new(&Env::from_raw(env))?;
        for (key, value) in event.0 {
            object.set_named_property(&key, value)?;
        }
        // SAFETY: `env` is the environment N-API is calling us in.
        unsafe { Object::to_napi_value(env, object) }
    }
}

#[napi]
impl NativeGovernor {
    /// Sends every event to `listener` from now on, replacing the previous
    /// one; `null` removes it (and releases the function).
    #[napi(catch_unwind, ts_args_type = "listener: ((event: Record<string, unknown>) => void) | null")]
    pub fn set_event_listener(
        &self,
        env: Env,
        listener: Option<Function<'_, PlainEvent, Unknown<'static>>>,
    ) -> Result<()> {
        let sink = self.with(&env, |s| {
            if let Some(sink) = &s.events {
                return Ok(sink.clone());
            }
            let sink = Arc::new(EventSink::new(&env));
            let hooked = sink.clone();
            s.gov.set_event_hook(Arc::new(move |event: &Event| hooked.deliver(event)))?;
            s.events = Some(sink.clone());
            Ok(sink)
        })?;
        sink.replace(listener)
    }

    /// Events dropped because the listener's queue was full (or the
    /// environment was closing).
    #[napi(catch_unwind)]
    pub fn dropped_events(&self, env: Env) -> Result<f64> {
        self.with(&env, |s| Ok(s.events.as_ref().map_or(0, |sink| sink.dropped.load(Ordering::Relaxed)) as f64))
    }
}
