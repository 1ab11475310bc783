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
