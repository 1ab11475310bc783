//! A process forked from one that holds a governor (gunicorn `--preload`,
//! Celery's prefork pool, `multiprocessing` with fork) inherits its pooled
//! connections, its process id (so its slot and lease ids), its leases and
//! held slots, and the handle of a keeper thread that was not copied. Used
//! as is, parent and child took one slot for two requests in flight, the
//! child returned the parent's lease at exit while the parent served it on,
//! and the child panicked joining the missing thread. The core's fork
//! count ([`llmgov::fork`]) shows a governor it is in a new process with
//! one atomic load, and it first lets go of what belongs to its parent.

use std::sync::atomic::Ordering;

pub(crate) use llmgov::fork::{generation, watch};

use crate::governor::{random_id, Inner, RedisGovernor};

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
