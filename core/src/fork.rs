//! Telling a forked process from its parent. A process forked from one
//! that runs a governor's threads (gunicorn `--preload`, Celery's prefork
//! pool, `multiprocessing` with fork) inherits their handles and the state
//! they kept, but not the threads: whatever holds threads must notice, and
//! start its own. A `pthread_atfork` hook counts forks, so noticing costs
//! one atomic load (`getpid`, a system call, cost a queued request 14%).

use std::sync::atomic::{AtomicU64, Ordering};

/// Forks this process has gone through, counted in each child.
static GENERATION: AtomicU64 = AtomicU64::new(0);

#[cfg(unix)]
extern "C" fn in_child() {
    // Runs in the child right after fork: only async-signal-safe work.
    GENERATION.fetch_add(1, Ordering::Release);
}

/// Starts counting forks, once per process; call it before the first
/// [`generation`] that must see one.
pub fn watch() {
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

/// How many forks lie between the process [`watch`] was first called in
/// and this one: it changes in a child, and only there.
#[inline]
pub fn generation() -> u64 {
    GENERATION.load(Ordering::Acquire)
}
