//! The background thread that keeps a live process's concurrency slots.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::governor::Inner;

/// Refreshes held slots and returns lapsing leases every third of the
/// shorter TTL until dropped, so a slot outlives its TTL only while its
/// process lives, and an idle process's lease goes back before it expires.
pub(crate) struct Heartbeat {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Heartbeat {
    pub fn start(inner: Arc<Inner>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let period = inner.keeper_period();
        let thread = std::thread::Builder::new()
            .name("llmgov-redis-heartbeat".into())
            .spawn(move || {
                while !flag.load(Ordering::Acquire) {
                    std::thread::park_timeout(period);
                    if !flag.load(Ordering::Acquire) {
                        inner.heartbeat();
                    }
                }
            })
            .expect("spawning the heartbeat thread");
        Heartbeat { stop, thread: Some(thread) }
    }
}

impl Heartbeat {
    /// In a forked child: the thread stayed in the parent, so its handle
    /// is let go of without a join (which would panic) or a stop.
    pub fn abandon(self) {
        std::mem::forget(self);
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}
