//! What the waiting layer shows: per class, its depth, the age of its
//! oldest waiter, and what was admitted, expired and refused.

use std::time::Duration;

use serde::Serialize;

/// Every class's queue at one moment.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct QueueMetrics {
    /// Requests waiting, all classes together.
    pub depth: usize,
    /// One entry per class that has had a waiter, highest priority first.
    pub classes: Vec<ClassMetrics>,
}

/// One traffic class's queue at one moment. Counts are since the governor
/// was made.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClassMetrics {
    /// The class's name (empty for the unnamed default class).
    pub class: String,
    /// Its priority.
    pub priority: i32,
    /// Requests waiting now.
    pub depth: usize,
    /// Its queue bound.
    pub queue_bound: usize,
    /// How long its oldest waiter has waited, in milliseconds (0 if none).
    pub oldest_wait_ms: u64,
    /// Its maximum wait, in milliseconds.
    pub max_wait_ms: u64,
    /// The longest wait of a request admitted so far, in milliseconds.
    pub longest_admitted_wait_ms: u64,
    /// Waiters admitted. A request admitted at once while nobody waits
    /// never queues and is not counted here (the snapshot counts it).
    pub admitted: u64,
    /// Waiters whose deadline passed while they waited.
    pub expired: u64,
    /// Requests refused at once because the queue was full.
    pub refused_queue_full: u64,
    /// Requests refused at once because their predicted wait was past their deadline.
    pub refused_deadline: u64,
    /// Waiters refused because they can never be admitted (or another error).
    pub refused_other: u64,
    /// Waiters that left before an answer (a dropped future, a cancel).
    pub withdrawn: u64,
    /// Tenants (flows) with waiters now.
    pub tenants: usize,
    /// How long admitted waiters waited.
    pub wait: WaitHistogram,
    /// Tokens admitted to flows with a guaranteed share beyond it, borrowed
    /// from the capacity others left unused (the HTB borrowing phase).
    pub borrowed_tokens: u64,
}

/// Upper bounds of the wait histogram's buckets, in seconds: from a
/// millisecond (a wake-up) to ten minutes (past any class's maximum wait).
pub const WAIT_BUCKETS_S: [f64; 14] =
    [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0, 600.0];

/// A histogram of waits: how many fell in each bucket, and their sum.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct WaitHistogram {
    /// Waits at most `WAIT_BUCKETS_S[i]` seconds, and above that bucket's
    /// predecessor; the last entry counts waits past every bound.
    pub counts: [u64; WAIT_BUCKETS_S.len() + 1],
    /// All waits together, in nanoseconds.
    pub sum_ns: u64,
}

impl WaitHistogram {
    /// Counts one wait of `ns` nanoseconds.
    pub(crate) fn record(&mut self, ns: u64) {
        let seconds = ns as f64 / 1e9;
        let bucket = WAIT_BUCKETS_S.iter().position(|&bound| seconds <= bound).unwrap_or(WAIT_BUCKETS_S.len());
        self.counts[bucket] += 1;
        self.sum_ns = self.sum_ns.saturating_add(ns);
    }

    /// Waits counted.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// `(upper bound in seconds, waits in that bucket)`, the last bound
    /// infinite.
    pub fn buckets(&self) -> Vec<(f64, u64)> {
        WAIT_BUCKETS_S.iter().chain([&f64::INFINITY]).copied().zip(self.counts).collect()
    }
}

impl QueueMetrics {
    /// The metrics of the class named `name`, if it has had a waiter.
    pub fn class(&self, name: &str) -> Option<&ClassMetrics> {
        self.classes.iter().find(|c| c.class == name)
    }
}

impl ClassMetrics {
    /// The oldest waiter's age as a duration.
    pub fn oldest_wait(&self) -> Duration {
        Duration::from_millis(self.oldest_wait_ms)
    }
}
