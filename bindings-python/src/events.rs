//! `gov.set_event_hook(callable)`: the governor's events (denials, provider
//! rejections, breaker changes) as dicts to a Python callable.
//!
//! The core calls its hook on whatever thread the event happened on: a
//! Python thread holding the GIL (`try_acquire`), one that released it
//! (`acquire_blocking`), or a thread Python never saw. So the hook attaches
//! to the interpreter itself, and not at all once the interpreter is
//! finalizing (the event is dropped then). What the callable raises goes to
//! `sys.unraisablehook`: it never reaches the call that caused the event,
//! and the governor goes on as if nothing happened.

use std::sync::{Arc, Mutex, OnceLock};

use llmgov::events::Event;
use llmgov::Governor;
use pyo3::prelude::*;
use pyo3::{PyTraverseError, PyVisit};

use crate::args::type_name;
use crate::convert::value_to_python;
use crate::errors::{invalid, IntoPyResult};

/// A governor's Python hook: replaceable, and removable with None. The core
/// takes one hook for good; it is installed on the first `set_event_hook`
/// and calls whatever callable the slot holds then.
#[derive(Default)]
pub struct Hook {
    /// Only touched with the GIL held, so the lock is never contended by a
    /// thread waiting for the GIL.
    callable: Mutex<Option<Py<PyAny>>>,
    installed: OnceLock<()>,
}

impl Hook {
    /// Sets (or with None removes) the callable, installing the core's hook
    /// the first time.
    pub fn set(self: &Arc<Self>, gov: &Governor, callable: &Bound<'_, PyAny>) -> PyResult<()> {
        let new = if callable.is_none() {
            None
        } else if callable.is_callable() {
            Some(callable.clone().unbind())
        } else {
            let reason = format!("must be a callable taking one dict, or None, not {}", type_name(callable));
            return Err(invalid("hook", callable, reason));
        };
        if new.is_some() && self.installed.get().is_none() {
            let slot = Arc::downgrade(self);
            gov.set_event_hook(Arc::new(move |event: &Event| {
                if let Some(hook) = slot.upgrade() {
                    hook.deliver(event);
                }
            }))
            .py_err()?;
            let _ = self.installed.set(());
        }
        let old = std::mem::replace(&mut *self.lock(), new);
        // Dropped after the lock is released: its finalizer may run Python.
        drop(old);
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Py<PyAny>>> {
        self.callable.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Calls the callable with the event as a dict, on any thread.
    fn deliver(&self, event: &Event) {
        let Ok(value) = serde_json::to_value(event) else { return };
        // None while the interpreter is finalizing: the event is dropped.
        let _ = Python::try_attach(|py| {
            let Some(callable) = self.lock().as_ref().map(|c| c.clone_ref(py)) else { return };
            let called = value_to_python(py, &value).and_then(|dict| callable.call1(py, (dict,)));
            if let Err(error) = called {
                error.write_unraisable(py, Some(callable.bind(py)));
            }
        });
    }

    /// The callable, for the garbage collector (a hook closing over its
    /// governor makes a cycle through the core).
    pub fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        match self.lock().as_ref() {
            Some(callable) => visit.call(callable),
            None => Ok(()),
        }
    }

    /// Drops the callable (breaking such a cycle).
    pub fn clear(&self) {
        let old = self.lock().take();
        drop(old);
    }
}
