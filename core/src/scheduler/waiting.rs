//! The waits over the sans-IO [`Scheduler`]: a mutex around it, a slot per
//! waiter that its answer is put in (waking its task or thread), and one
//! timer thread per governor that polls at the scheduler's next timeout.
//!
//! Who polls: the caller that queues a request; a waiter that leaves from
//! the head of its line (it may have held others back); `settle`, `cancel`
//! and `observe` while anyone waits (capacity came back); the timer thread at
//! the next refill, meter or deadline; and [`crate::Governor::wake_waiters`],
//! which a caller moving a [`crate::ManualClock`] (or changing limits)
//! calls. The timer sleeps on a condition variable for the clock's
//! nanoseconds until the timeout, so on a manual clock it only re-checks
//! now and then: there, `wake_waiters` is what moves waiters.

use std::collections::HashMap;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::task::Waker;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use super::{Outcome, QueueMetrics, Scheduler, WaiterId};
use crate::{Clock, Config, Ledger, Permit, Request, Result};

/// The shortest the timer thread sleeps between two polls of its own.
const MIN_TIMER_NS: u64 = 100_000;

/// Where a waiter's answer is put.
#[derive(Debug, Default)]
pub(crate) struct Slot {
    inner: Mutex<SlotInner>,
    ready: Condvar,
}

#[derive(Debug, Default)]
struct SlotInner {
    outcome: Option<Result<Permit>>,
    waker: Option<Waker>,
}

impl Slot {
    /// Puts the answer in and unparks a waiting thread. Returns the waiting
    /// task's waker, to wake once the queue lock is released: a wake may run
    /// anything, including dropping another waiter, which takes that lock.
    fn complete(&self, outcome: Result<Permit>) -> Option<Waker> {
        let waker = {
            let mut inner = self.inner.lock();
            inner.outcome = Some(outcome);
            inner.waker.take()
        };
        self.ready.notify_one();
        waker
    }

    /// The answer if there is one; otherwise `waker` is woken when there is.
    pub fn poll(&self, waker: &Waker) -> Option<Result<Permit>> {
        let mut inner = self.inner.lock();
        if let Some(outcome) = inner.outcome.take() {
            return Some(outcome);
        }
        if inner.waker.as_ref().is_some_and(|w| w.will_wake(waker)) {
            return None;
        }
        let replaced = inner.waker.replace(waker.clone());
        // Dropped unlocked: dropping a waker may drop another waiter, which
        // takes the queue lock, and a poll holding that takes this one.
        drop(inner);
        drop(replaced);
        None
    }

    /// Parks the thread until the answer comes.
    pub fn wait(&self) -> Result<Permit> {
        let mut inner = self.inner.lock();
        loop {
            if let Some(outcome) = inner.outcome.take() {
                return outcome;
            }
            self.ready.wait(&mut inner);
        }
    }

    fn take(&self) -> Option<Result<Permit>> {
        self.inner.lock().outcome.take()
    }
}

#[derive(Debug)]
struct State {
    scheduler: Scheduler,
    slots: HashMap<WaiterId, Arc<Slot>>,
    outcomes: Vec<Outcome>,
}

/// When the timer thread polls next (`at`: `None` when nothing waits on time).
#[derive(Debug, Default)]
struct Timer {
    state: Mutex<TimerState>,
    changed: Condvar,
}

impl Timer {
    /// Wakes the timer thread to read its state again; called with the
    /// state's lock released. In a process forked while the parent's timer
    /// thread slept here, the condition variable still queues that thread,
    /// which does not exist here: woken under the lock, it would be handed
    /// the lock for good, and woken by `notify_one`, it would take the
    /// wake-up meant for this process's own timer thread.
    fn wake(&self) {
        self.changed.notify_all();
    }
}

#[derive(Debug, Default)]
struct TimerState {
    at: Option<u64>,
    shutdown: bool,
}

/// A governor's waiting layer: the queues, and the timer thread that polls
/// them, joined when the layer goes.
#[derive(Debug)]
pub(crate) struct Waiting {
    queues: Arc<Queues>,
    /// The fork generation (see [`crate::fork`]) the timer thread was
    /// started in, plus one (0 before it is). A process forked from it has
    /// no such thread (threads do not survive fork): it starts its own, and
    /// never joins its parent's.
    timer_generation: AtomicU64,
    /// The timer thread. It holds the queues, never this: so the last
    /// reference to this is dropped on a caller's thread, which joins it,
    /// and nothing of the timer outlives the governor (a C program exiting
    /// right after `llmgov_governor_free` finds no thread still freeing it).
    timer_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// The queues and what polls them, shared with the timer thread.
#[derive(Debug)]
struct Queues {
    state: Mutex<State>,
    /// Waiters, readable without the lock: hooks skip polling when zero.
    depth: AtomicUsize,
    /// Set by a hook that could not take the lock: its holder polls again.
    dirty: AtomicBool,
    /// Whether a share has a ceiling: then even a request that need not
    /// wait is admitted under the lock, charging its tenant's ceiling.
    ceilings: bool,
    timer: Timer,
}

/// What queueing a request gave.
pub(crate) enum Entry {
    /// Admitted at once.
    Admitted(Permit),
    /// Waiting: its id and the slot its answer will be put in.
    Waiting(WaiterId, Arc<Slot>),
}

impl Waiting {
    pub fn new(config: &Config) -> Result<Self> {
        crate::fork::watch();
        let state = State { scheduler: Scheduler::new(config)?, slots: HashMap::new(), outcomes: Vec::new() };
        let queues = Queues {
            ceilings: state.scheduler.has_ceilings(),
            state: Mutex::new(state),
            depth: AtomicUsize::new(0),
            dirty: AtomicBool::new(false),
            timer: Timer::default(),
        };
        Ok(Waiting { queues: Arc::new(queues), timer_generation: AtomicU64::new(0), timer_thread: Mutex::new(None) })
    }

    /// Queues `request` and polls: see [`Scheduler::submit`].
    pub fn enter(
        &self,
        ledger: &Arc<Ledger>,
        clock: &Arc<dyn Clock>,
        request: Request,
        class_name: &str,
        timeout: Option<Duration>,
    ) -> Result<Entry> {
        let entry = self.queues.enter(ledger, &**clock, request, class_name, timeout)?;
        if matches!(entry, Entry::Waiting(..)) {
            self.start_timer(ledger, clock);
        }
        Ok(entry)
    }

    /// The wait predicted for `request` were it queued now in the class
    /// named `class_name`, in nanoseconds: see [`Scheduler::predicted_wait`].
    /// `None` while nobody waits (then the ledger's own retry-after says it).
    pub fn predicted_wait(
        &self,
        ledger: &Ledger,
        clock: &dyn Clock,
        request: &Request,
        class_name: &str,
    ) -> Result<Option<u64>> {
        if self.queues.depth.load(Ordering::SeqCst) == 0 {
            return Ok(None);
        }
        self.queues.with_lock(ledger, clock, |state| {
            state.scheduler.predicted_wait(ledger, request, class_name, clock.now()).map(Some)
        })
    }

    /// A waiter leaves before taking its answer. A permit granted to it in
    /// the meantime is cancelled, so nothing leaks; a refusal given to it in
    /// the meantime is returned, for the caller to tell.
    pub fn leave(&self, id: WaiterId, slot: &Slot, ledger: &Ledger, clock: &dyn Clock) -> Option<crate::Error> {
        self.queues.leave(id, slot, ledger, clock)
    }

    /// Polls if anyone waits: capacity may have come back.
    pub fn kick(&self, ledger: &Ledger, clock: &dyn Clock) {
        self.queues.kick(ledger, clock)
    }

    /// Polls now, waiting for the lock; returns the next timeout.
    pub fn poll_now(&self, ledger: &Ledger, clock: &dyn Clock) -> Option<u64> {
        self.queues.poll_now(ledger, clock)
    }

    pub fn metrics(&self, ledger: &Ledger, clock: &dyn Clock) -> QueueMetrics {
        let now = clock.now();
        self.queues.with_lock(ledger, clock, |state| state.scheduler.metrics(now))
    }

    /// Starts the timer thread in this process, if it has none yet.
    fn start_timer(&self, ledger: &Arc<Ledger>, clock: &Arc<dyn Clock>) {
        let generation = crate::fork::generation() + 1;
        if self.timer_generation.load(Ordering::Acquire) == generation {
            return;
        }
        let mut thread = self.timer_thread.lock();
        if self.timer_generation.load(Ordering::Acquire) == generation {
            return;
        }
        // A handle copied from the process this one was forked from names
        // a thread that is not here: it is never joined, nor detached.
        std::mem::forget(thread.take());
        let (queues, ledger, clock) = (self.queues.clone(), Arc::downgrade(ledger), clock.clone());
        let handle = std::thread::Builder::new()
            .name("llmgov-waiting".into())
            .spawn(move || run_timer(&queues, &ledger, &*clock))
            .expect("spawning the waiting timer thread");
        *thread = Some(handle);
        self.timer_generation.store(generation, Ordering::Release);
    }
}

impl Queues {
    fn enter(
        &self,
        ledger: &Ledger,
        clock: &dyn Clock,
        request: Request,
        class_name: &str,
        timeout: Option<Duration>,
    ) -> Result<Entry> {
        let now = clock.now();
        if self.depth.load(Ordering::SeqCst) == 0 {
            // Nobody waits, so nobody holds a line: the ledger decides (and
            // a share's ceiling, read under the lock), and only a request
            // that must wait, or is under a ceiling, takes the lock. (A waiter queued
            // meanwhile by another thread is passed as by `try_acquire`.)
            // A request that waits is not refused: only a refusal that
            // reaches the caller is counted.
            let admitted = if self.ceilings {
                self.admit_unqueued(ledger, clock, &request, now)
            } else {
                ledger.try_acquire_uncounted(&request, now).map(Some)
            };
            match admitted {
                Ok(Some(permit)) => return Ok(Entry::Admitted(permit)),
                // Its tenant's ceiling (or a waiter queued meanwhile): wait.
                Ok(None) => {}
                Err(crate::Error::RateLimited { .. }) => {}
                // A breaker that stays open past the caller's patience is a
                // failure to report now, not to wait for.
                Err(crate::Error::CircuitOpen { retry_after, .. })
                    if [timeout, request.deadline].into_iter().flatten().all(|limit| retry_after <= limit) => {}
                Err(error) => {
                    ledger.count_refusal(&error);
                    return Err(error);
                }
            }
        }
        let deadline = timeout.map(|t| now.saturating_add(crate::time::duration_ns(t)));
        let mut state = self.state.lock();
        let id = match state.scheduler.submit(ledger, request, class_name, deadline, now) {
            Ok(id) => id,
            Err(error) => {
                drop(state);
                self.after_poll(ledger, clock);
                ledger.count_refusal(&error);
                return Err(error);
            }
        };
        let slot = Arc::new(Slot::default());
        state.slots.insert(id, slot.clone());
        // Published before the poll reads the ledger, fenced as `kick` is: a
        // release the poll misses then sees a waiter and asks for a poll
        // again (else, on a concurrency limit, nothing ever would).
        self.depth.store(state.scheduler.depth(), Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let answered = self.poll_locked(&mut state, ledger, now);
        drop(state);
        wake(answered);
        self.after_poll(ledger, clock);
        match slot.take() {
            Some(Ok(permit)) => Ok(Entry::Admitted(permit)),
            Some(Err(error)) => Err(error),
            None => Ok(Entry::Waiting(id, slot)),
        }
    }

    /// Admits a request nobody waits before, charging its tenant's
    /// ceiling, under the lock the meters are kept under. `Ok(None)` if it
    /// must wait: for its ceiling, or behind a waiter queued meanwhile.
    fn admit_unqueued(
        &self,
        ledger: &Ledger,
        clock: &dyn Clock,
        request: &Request,
        now: u64,
    ) -> Result<Option<Permit>> {
        self.with_lock(ledger, clock, |state| match state.scheduler.depth() {
            0 => state.scheduler.admit_unqueued(ledger, request, now, &mut |r| ledger.try_acquire_uncounted(r, now)),
            _ => Ok(None),
        })
    }

    /// Runs `f` under the queue lock, then polls if a hook asked meanwhile.
    /// Every holder of the lock must look on releasing it (see
    /// [`Self::after_poll`]), or a settle that found it taken goes unseen
    /// and, on a concurrency limit, its waiter waits for ever.
    fn with_lock<T>(&self, ledger: &Ledger, clock: &dyn Clock, f: impl FnOnce(&mut State) -> T) -> T {
        let result = f(&mut self.state.lock());
        self.after_poll(ledger, clock);
        result
    }

    fn leave(&self, id: WaiterId, slot: &Slot, ledger: &Ledger, clock: &dyn Clock) -> Option<crate::Error> {
        let mut state = self.state.lock();
        if state.scheduler.withdraw(id) {
            state.slots.remove(&id);
            let now = clock.now();
            // A head that leaves may free the line it held: the waiters
            // behind it go now, not at the timer for its refill.
            let answered = if state.scheduler.poll_timeout().is_some_and(|at| at <= now) {
                self.poll_locked(&mut state, ledger, now)
            } else {
                self.depth.store(state.scheduler.depth(), Ordering::SeqCst);
                Vec::new()
            };
            drop(state);
            wake(answered);
            self.after_poll(ledger, clock);
            return None;
        }
        drop(state);
        self.after_poll(ledger, clock);
        match slot.take()? {
            Ok(mut permit) => {
                // Pending and ours: cancelling cannot fail.
                let _ = ledger.cancel(&mut permit, clock.now());
                self.kick(ledger, clock);
                None
            }
            Err(refusal) => Some(refusal),
        }
    }

    fn kick(&self, ledger: &Ledger, clock: &dyn Clock) {
        // Orders the caller's release in the ledger before the depth is
        // read, against `enter`'s store of it before its poll reads the
        // ledger: one of the two sees the other.
        fence(Ordering::SeqCst);
        if self.depth.load(Ordering::SeqCst) == 0 {
            return;
        }
        self.dirty.store(true, Ordering::SeqCst);
        self.after_poll(ledger, clock);
    }

    fn poll_now(&self, ledger: &Ledger, clock: &dyn Clock) -> Option<u64> {
        let mut state = self.state.lock();
        let answered = self.poll_locked(&mut state, ledger, clock.now());
        let next = state.scheduler.poll_timeout();
        drop(state);
        wake(answered);
        self.after_poll(ledger, clock);
        next
    }

    /// Polls again while a hook asked for it and the lock is free. A hook
    /// that finds the lock taken leaves `dirty` set; whoever holds it
    /// checks after unlocking, so no release goes unseen.
    fn after_poll(&self, ledger: &Ledger, clock: &dyn Clock) {
        while self.dirty.load(Ordering::SeqCst) {
            let Some(mut state) = self.state.try_lock() else { return };
            self.dirty.store(false, Ordering::SeqCst);
            let answered = self.poll_locked(&mut state, ledger, clock.now());
            drop(state);
            wake(answered);
        }
    }

    /// Polls the queues and answers the waiters it settled; returns their
    /// tasks' wakers, for the caller to [`wake`] once it has let go of `state`.
    #[must_use = "the answered tasks sleep until their wakers are woken"]
    fn poll_locked(&self, state: &mut State, ledger: &Ledger, now: u64) -> Vec<Waker> {
        let State { scheduler, slots, outcomes } = state;
        // A waiter's tries are not refusals; the refusal that ends a wait is.
        scheduler.poll(now, &mut |request| ledger.try_acquire_uncounted(request, now), outcomes);
        let mut answered = Vec::new();
        for outcome in outcomes.drain(..) {
            let slot = slots.remove(&outcome.waiter()).expect("every waiter has a slot");
            answered.extend(slot.complete(match outcome {
                Outcome::Admitted { permit, .. } => Ok(permit),
                Outcome::Refused { error, .. } => {
                    ledger.count_refusal(&error);
                    Err(error)
                }
            }));
        }
        self.depth.store(scheduler.depth(), Ordering::SeqCst);
        let mut timer = self.timer.state.lock();
        // A refusal that says "now" (a racing rollback) must not spin the timer.
        let at = scheduler.poll_timeout().map(|at| at.max(now.saturating_add(MIN_TIMER_NS)));
        // The timer sleeps until its old time at the latest and then reads
        // the new one: only an earlier time must wake it (a futex call each
        // poll was most of the cost of a poll that changed nothing).
        let sooner = at.is_some_and(|at| timer.at.is_none_or(|old| at < old));
        timer.at = at;
        drop(timer);
        if sooner {
            self.timer.wake();
        }
        answered
    }
}

/// Wakes the tasks of answered waiters; called with no lock held.
fn wake(answered: Vec<Waker>) {
    answered.into_iter().for_each(Waker::wake);
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let Some(handle) = self.timer_thread.get_mut().take() else { return };
        if *self.timer_generation.get_mut() != crate::fork::generation() + 1 {
            // Forked since the thread started: it, and any lock it held
            // then, are the parent's; there is nothing here to stop.
            std::mem::forget(handle);
            return;
        }
        self.queues.timer.state.lock().shutdown = true;
        self.queues.timer.wake();
        // The timer thread holds no reference to this; only a waker that
        // dropped its task inside `wake` could drop the last one there, and
        // that thread is returning anyway.
        if handle.thread().id() != std::thread::current().id() {
            let _ = handle.join();
        }
    }
}

/// Sleeps until the scheduler's next timeout, polls, and again, until the
/// governor is gone.
fn run_timer(queues: &Queues, ledger: &Weak<Ledger>, clock: &dyn Clock) {
    let timer = &queues.timer;
    loop {
        {
            let mut state = timer.state.lock();
            loop {
                if state.shutdown {
                    return;
                }
                let now = clock.now();
                match state.at {
                    Some(at) if at <= now => {
                        state.at = None;
                        break;
                    }
                    Some(at) => {
                        timer.changed.wait_for(&mut state, Duration::from_nanos(at - now));
                    }
                    None => timer.changed.wait(&mut state),
                }
            }
        }
        // The ledger's last reference may go here, while the governor is
        // dropped: its `Waiting` joins this thread, so that ends first.
        let Some(ledger) = ledger.upgrade() else { return };
        queues.poll_now(&ledger, clock);
    }
}
