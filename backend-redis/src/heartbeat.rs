//! The background thread that keeps a live process's concurrency slots.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::governor::Inner;
use crate::settings::Mode;

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

impl Inner {
    /// The keeper thread, if a scope holds slots or leases.
    pub(crate) fn start_keeper(self: &Arc<Self>) -> Option<Heartbeat> {
        let needed = self.scopes.iter().any(|s| s.has_slots() || s.mode == Mode::Leased);
        needed.then(|| Heartbeat::start(self.clone()))
    }

    /// How often the background keeper runs: a third of the shorter TTL.
    pub(crate) fn keeper_period(&self) -> Duration {
        self.settings.slot_ttl.min(self.settings.lease_ttl) / 3
    }

    /// Refreshes held slots (forgetting those whose permit expired
    /// unsettled) and returns leases about to lapse.
    pub(crate) fn heartbeat(&self) {
        let now = self.clock.now();
        self.return_leases(now.saturating_add(self.keeper_period().as_nanos() as u64));
        for i in 0..self.scopes.len() {
            self.keep_slots(i, now);
        }
    }

    /// Refreshes the slots held on scope `i`, and adds again those taken
    /// under a state since lost.
    pub(crate) fn keep_slots(&self, i: usize, now: u64) {
        let slots: Vec<(String, String)> = {
            let mut held = self.held[i].lock();
            held.retain(|_, slot| slot.expires > now);
            held.iter().map(|(id, slot)| (id.clone(), slot.epoch.clone())).collect()
        };
        if slots.is_empty() {
            return;
        }
        let ttl_us = self.settings.slot_ttl.as_micros() as u64;
        match self.store.heartbeat(&self.scopes[i], &slots, ttl_us) {
            Ok(epoch) => {
                self.health.on_success();
                if epoch.is_empty() {
                    return;
                }
                let mut held = self.held[i].lock();
                for (id, _) in &slots {
                    if let Some(slot) = held.get_mut(id) {
                        slot.epoch.clone_from(&epoch);
                    }
                }
            }
            Err(e) => {
                self.health.on_error(&e, now, self.settings.retry_interval);
                self.store.drop_idle();
            }
        }
    }
}
