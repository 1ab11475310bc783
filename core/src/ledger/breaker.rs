//! The circuit breaker of one provider scope: consecutive failures (429s,
//! 5xx, 529) open it for escalating pauses; then one probe goes through,
//! and its success closes it. Answers dated before it last opened (by their
//! permit) are of the outage that opened it: they change nothing.
//!
//! `try_acquire` reads one atomic word (`open_until`, 0 while closed) and,
//! after a pause, races to claim the probe with one compare-and-swap. The
//! rest changes only on feedback, with plain atomics: a breaker is a
//! heuristic, and two failures racing may at worst open it twice.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use crate::config::adaptive::Adaptive;

/// What the breaker says to a request at `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gate {
    /// Closed: go.
    Closed,
    /// Open until this time.
    Open(u64),
    /// The pause that ended at this time is over: the request may go as the
    /// probe, if it claims it first.
    Probe(u64),
}

/// One provider scope's breaker.
#[derive(Debug, Default)]
pub(crate) struct Breaker {
    /// 0 while closed; otherwise when the pause (or the probe's hold) ends.
    open_until: AtomicU64,
    /// When it last opened: failures of requests sent before are old news.
    opened_at: AtomicU64,
    /// Consecutive failures while closed.
    failures: AtomicU32,
    /// Times opened in a row, choosing the next pause.
    level: AtomicU32,
    /// Whether a probe is out.
    probing: AtomicBool,
}

/// The breaker's state, for snapshots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    Closed,
    Open,
    HalfOpen,
}

impl Breaker {
    #[inline]
    pub fn gate(&self, now: u64) -> Gate {
        match self.open_until.load(Ordering::Acquire) {
            0 => Gate::Closed,
            until if now < until => Gate::Open(until),
            until => Gate::Probe(until),
        }
    }

    /// Claims the probe after the pause that ended at `until`, holding the
    /// breaker shut for the others until the probe answers or the current
    /// pause passes again (a probe lost without an answer is replaced).
    pub fn claim_probe(&self, adaptive: &Adaptive, until: u64, now: u64) -> bool {
        let hold = self.hold(adaptive, now);
        let claimed = self.open_until.compare_exchange(until, hold, Ordering::AcqRel, Ordering::Acquire).is_ok();
        if claimed {
            self.probing.store(true, Ordering::Release);
        }
        claimed
    }

    /// Gives back a probe claimed at `now` after the pause that ended at
    /// `until`, whose request another limit refused, so that the next
    /// request may probe.
    pub fn release_probe(&self, adaptive: &Adaptive, until: u64, now: u64) {
        self.give_back(self.hold(adaptive, now), until);
    }

    /// Gives back the probe a permit claimed at `claimed_at` and cancelled
    /// at `now`: its request was never sent, so no answer will come.
    pub fn return_probe(&self, adaptive: &Adaptive, claimed_at: u64, now: u64) {
        self.give_back(self.hold(adaptive, claimed_at), now.max(1));
    }

    /// Until when a probe claimed at `at` holds the breaker shut.
    fn hold(&self, adaptive: &Adaptive, at: u64) -> u64 {
        at.saturating_add(self.pause(adaptive)).max(1)
    }

    /// Reopens the probe if the breaker is still held by the probe that
    /// set `hold` (an answer, or a later probe, has moved it on otherwise).
    fn give_back(&self, hold: u64, to: u64) {
        // An answer clears `probing` as it moves the breaker on. A failure
        // answered at the instant the probe was claimed reopens it until
        // exactly `hold` (the next pause from the same `now`), so the time
        // alone cannot tell that the probe already answered.
        if !self.probing.load(Ordering::Acquire) {
            return;
        }
        if self.open_until.compare_exchange(hold, to, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            self.probing.store(false, Ordering::Release);
        }
    }

    fn pause(&self, adaptive: &Adaptive) -> u64 {
        let level = self.level.load(Ordering::Relaxed) as usize;
        adaptive.pauses_ns[level.min(adaptive.pauses_ns.len() - 1)]
    }

    /// A failure of a request sent at `sent_at` (`None`: unknown). Returns
    /// whether the breaker opened (or reopened after a failed probe).
    pub fn failed(&self, adaptive: &Adaptive, sent_at: Option<u64>, now: u64) -> bool {
        // Sent before it last opened: part of the outage that opening
        // answered, whether the breaker is still open or closed since.
        if sent_at.is_some_and(|sent| sent < self.opened_at.load(Ordering::Acquire)) {
            return false;
        }
        if self.open_until.load(Ordering::Acquire) == 0 {
            let failures = self.failures.fetch_add(1, Ordering::AcqRel) + 1;
            if failures < adaptive.failures {
                return false;
            }
            self.level.store(0, Ordering::Relaxed);
            return self.open(adaptive, now);
        }
        // Open: only the probe's failure is news.
        if !self.probing.swap(false, Ordering::AcqRel) && !self.sent_past_pause(sent_at) {
            return false;
        }
        let level = self.level.load(Ordering::Relaxed).saturating_add(1);
        self.level.store(level, Ordering::Relaxed);
        self.open(adaptive, now)
    }

    fn open(&self, adaptive: &Adaptive, now: u64) -> bool {
        self.opened_at.store(now, Ordering::Release);
        self.failures.store(0, Ordering::Relaxed);
        self.open_until.store(self.hold(adaptive, now), Ordering::Release);
        true
    }

    /// A success of a request sent at `sent_at` (`None`: unknown). Returns
    /// whether it closed the breaker (the probe's answer).
    pub fn succeeded(&self, sent_at: Option<u64>) -> bool {
        // Sent before the breaker last opened: how the provider was then,
        // old news as that request's failure is. The probe decides.
        if sent_at.is_some_and(|sent| sent < self.opened_at.load(Ordering::Acquire)) {
            return false;
        }
        self.failures.store(0, Ordering::Relaxed);
        if !self.probing.swap(false, Ordering::AcqRel) && !self.sent_past_pause(sent_at) {
            return false;
        }
        self.level.store(0, Ordering::Relaxed);
        self.open_until.store(0, Ordering::Release);
        true
    }

    /// Whether a request sent at `sent_at` left once the pause was over,
    /// with no probe out: one admitted past this ledger's gate (a governor
    /// sharing the scope through Redis admits there, and only asks this
    /// breaker whether to hold the scope). Its answer is the probe's.
    fn sent_past_pause(&self, sent_at: Option<u64>) -> bool {
        let until = self.open_until.load(Ordering::Acquire);
        until != 0 && sent_at.is_some_and(|sent| sent >= until)
    }

    /// When the pause (or the probe's hold) ends; `None` while closed.
    pub fn open_until(&self) -> Option<u64> {
        Some(self.open_until.load(Ordering::Acquire)).filter(|&until| until != 0)
    }

    pub fn state(&self, now: u64) -> State {
        match self.gate(now) {
            Gate::Closed => State::Closed,
            Gate::Open(_) if self.probing.load(Ordering::Acquire) => State::HalfOpen,
            Gate::Open(_) => State::Open,
            Gate::Probe(_) => State::HalfOpen,
        }
    }
}
