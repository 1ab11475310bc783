//! The provider's own enforcement, written independently of the core's
//! ledger (floating-point buckets, exact event windows) so that the
//! simulator measures llmgov against something other than itself.

use std::collections::VecDeque;

use super::config::{CompiledLimit, Enforcement};

/// One limit's state in one pool.
#[derive(Debug, Clone)]
pub(crate) enum Meter {
    /// Level of a bucket that refills continuously; may go negative (debt).
    Bucket { level: f64, capacity: f64, per_ns: f64, last: u64 },
    /// Charges in the trailing window, oldest first.
    Window { events: VecDeque<(u64, f64)>, amount: f64, window_ns: u64 },
}

impl Meter {
    pub fn new(limit: &CompiledLimit) -> Self {
        match limit.algorithm {
            Enforcement::TokenBucket => Meter::Bucket {
                level: limit.amount,
                capacity: limit.amount,
                per_ns: limit.amount / limit.window_ns as f64,
                last: 0,
            },
            Enforcement::SlidingWindow => {
                Meter::Window { events: VecDeque::new(), amount: limit.amount, window_ns: limit.window_ns }
            }
        }
    }

    fn advance(&mut self, now: u64) {
        match self {
            Meter::Bucket { level, capacity, per_ns, last } => {
                if now > *last {
                    *level = (*level + (now - *last) as f64 * *per_ns).min(*capacity);
                    *last = now;
                }
            }
            Meter::Window { events, window_ns, .. } => {
                while events.front().is_some_and(|&(t, _)| t + *window_ns <= now) {
                    events.pop_front();
                }
            }
        }
    }

    /// What could be charged now.
    pub fn available(&mut self, now: u64) -> f64 {
        self.advance(now);
        match self {
            Meter::Bucket { level, .. } => *level,
            Meter::Window { events, amount, .. } => *amount - events.iter().map(|&(_, a)| a).sum::<f64>(),
        }
    }

    /// The limit's size.
    pub fn limit(&self) -> f64 {
        match self {
            Meter::Bucket { capacity, .. } => *capacity,
            Meter::Window { amount, .. } => *amount,
        }
    }

    /// Charges `amount` now, even into debt (admission checked before).
    pub fn charge(&mut self, now: u64, amount: f64) {
        self.advance(now);
        match self {
            Meter::Bucket { level, .. } => *level -= amount,
            Meter::Window { events, .. } => events.push_back((now, amount)),
        }
    }

    /// Gives back `amount` charged at `charged_at`, never past full.
    pub fn refund(&mut self, now: u64, charged_at: u64, amount: f64) {
        self.advance(now);
        match self {
            Meter::Bucket { level, capacity, .. } => *level = (*level + amount).min(*capacity),
            Meter::Window { events, .. } => {
                // Take it back from that charge, if it is still in the window.
                if let Some(event) = events.iter_mut().find(|(t, a)| *t == charged_at && *a >= amount) {
                    event.1 -= amount;
                }
            }
        }
    }

    /// Nanoseconds until `amount` could be charged, if nothing else is.
    pub fn wait_for(&mut self, now: u64, amount: f64) -> u64 {
        let available = self.available(now);
        if available >= amount {
            return 0;
        }
        match self {
            Meter::Bucket { per_ns, .. } => ((amount - available) / *per_ns).ceil() as u64,
            Meter::Window { events, window_ns, .. } => {
                let mut missing = amount - available;
                for &(t, a) in events.iter() {
                    missing -= a;
                    if missing <= 0.0 {
                        return (t + *window_ns).saturating_sub(now);
                    }
                }
                *window_ns
            }
        }
    }

    /// Nanoseconds until the limit is whole again.
    pub fn until_full(&mut self, now: u64) -> u64 {
        let limit = self.limit();
        self.wait_for(now, limit)
    }

    /// Scales the limit by `factor` (the provider tightens).
    pub fn scale(&mut self, now: u64, factor: f64) {
        self.advance(now);
        match self {
            Meter::Bucket { level, capacity, per_ns, .. } => {
                *capacity *= factor;
                *per_ns *= factor;
                *level = level.min(*capacity);
            }
            Meter::Window { amount, .. } => *amount *= factor,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::config::ProviderDimension;

    const SECOND: u64 = 1_000_000_000;

    fn limit(algorithm: Enforcement) -> CompiledLimit {
        CompiledLimit { dimension: ProviderDimension::Tokens, amount: 600.0, window_ns: 60 * SECOND, algorithm }
    }

    #[test]
    fn bucket_refills_continuously_and_carries_debt() {
        let mut m = Meter::new(&limit(Enforcement::TokenBucket));
        m.charge(0, 700.0);
        assert_eq!(m.available(0), -100.0);
        assert_eq!(m.wait_for(0, 10.0), 11 * SECOND);
        assert!((m.available(11 * SECOND) - 10.0).abs() < 1e-6);
    }

    #[test]
    fn window_forgets_exactly_after_the_window() {
        let mut m = Meter::new(&limit(Enforcement::SlidingWindow));
        m.charge(5, 600.0);
        assert_eq!(m.available(60 * SECOND + 4), 0.0);
        assert_eq!(m.wait_for(60 * SECOND, 1.0), 5);
        assert_eq!(m.available(60 * SECOND + 5), 600.0);
    }
}
