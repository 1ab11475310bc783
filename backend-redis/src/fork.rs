//! A process forked from one that holds a governor (gunicorn `--preload`,
//! Celery's prefork pool, `multiprocessing` with fork) inherits its pooled
//! connections, its process id (so its slot and lease ids), its leases and
//! held slots, and the handle of a keeper thread that was not copied. Used
//! as is, parent and child took one slot for two requests in flight, the
//! child returned the parent's lease at exit while the parent served it on,
//! and the child panicked joining the missing thread. A `pthread_atfork`
//! hook counts forks, so a governor sees it is in a new process with one
//! atomic load, and first lets go of what belongs to its parent.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::governor::{random_id, Inner, RedisGovernor};

/// Forks this process has gone through, counted in each child.
static GENERATION: AtomicU64 = AtomicU64::new(0);

#[cfg(unix)]
extern "C" fn in_child() {
    // Runs in the child right after fork: only async-signal-safe work.
    GENERATION.fetch_add(1, Ordering::Release);
}

/// Installs the hook, once per process.
pub(crate) fn watch() {
    #[cfg(unix)]
    {
        static HOOK: std::sync::Once = std::sync::Once::new();
        // SAFETY: the handler only increments an atomic, which is
        // async-signal-safe, as code run in a child after fork must be.
        HOOK.call_once(|| unsafe {
            libc::pthread_atfork(None, None, Some(in_child));
        });
    }
}

/// How many forks lie between the process that started and this one.
#[inline]
pub(crate) fn generation() -> u64 {
    GENERATION.load(Ordering::Acquire)
}

impl RedisGovernor {
    /// In a process forked since this governor last ran: lets go of what
    /// belongs to the parent (connections, ids, leases, slots, what the
    /// outage owes) and starts a keeper thread of this process's own (none
    /// when `keeper_wanted` is false: the governor is being dropped).
    #[inline]
    pub(crate) fn adopt_if_forked_with(&self, keeper_wanted: bool) {
        if self.generation.load(Ordering::Acquire) != generation() {
            self.adopt(keeper_wanted);
        }
    }

    /// The rare path, kept out of every call's way.
    #[cold]
    #[inline(never)]
    fn adopt(&self, keeper_wanted: bool) {
        let now = generation();
        let mut keeper = self.keeper.lock();
        if self.generation.load(Ordering::Acquire) == now {
            return; // another thread of this process adopted it meanwhile
        }
        if let Some(parents) = keeper.take() {
            parents.abandon();
        }
        self.inner.leave_to_parent();
        *keeper = if keeper_wanted { self.inner.start_keeper() } else { None };
        self.generation.store(now, Ordering::Release);
    }

    #[inline]
    pub(crate) fn adopt_if_forked(&self) {
        self.adopt_if_forked_with(true);
    }
}

impl Inner {
    /// In a forked child: what the parent holds stays the parent's.
    fn leave_to_parent(&self) {
        self.store.leave_idle_to_parent();
        *self.process_id.lock() = random_id();
        for (i, lease) in self.leases.iter().enumerate() {
            self.held[i].lock().clear();
            lease.leave_to_parent();
            self.outage.take(i);
        }
    }
}
