//! HTB meters: a flow's guaranteed rate and its ceiling, each a GCRA over
//! the tokens the flow was admitted, read and charged only by the scheduler.

use crate::config::classes::ShareSettings;

/// One rate as a GCRA: the theoretical arrival time of the next token.
#[derive(Debug, Clone, Copy)]
struct Gcra {
    /// Tokens per window.
    amount: u64,
    window_ns: u64,
    /// When the meter is back to empty; `<= now` means it holds a full window.
    tat: u64,
}

impl Gcra {
    fn new(amount: u64, window_ns: u64) -> Self {
        Gcra { amount, window_ns, tat: 0 }
    }

    /// Nanoseconds `cost` tokens take at this rate.
    fn interval(&self, cost: u64) -> u64 {
        let ns = (cost as u128 * self.window_ns as u128).div_ceil(self.amount as u128);
        ns.min(u64::MAX as u128) as u64
    }

    /// The earliest time `cost` conforms: a whole window may be taken at
    /// once, and a cost above it conforms once the meter is empty.
    fn conforms_at(&self, cost: u64) -> u64 {
        let interval = self.interval(cost);
        self.tat.saturating_add(interval).saturating_sub(self.window_ns.max(interval))
    }

    /// The earliest time `cost` conforms once `ahead` tokens, queued
    /// before it, have been charged, each as soon as it conforms.
    fn conforms_after(&self, ahead: u64, cost: u64, now: u64) -> u64 {
        let through = self.tat.max(now).saturating_add(self.interval(ahead.saturating_add(cost)));
        through.saturating_sub(self.window_ns.max(self.interval(cost)))
    }

    /// Books `cost` at `now`, all of it: a cost above the window (let
    /// through once the meter is empty) keeps the flow out for as many
    /// windows as it took, or the rate would not hold over time. A charge
    /// that conforms leaves at most a window of debt anyway.
    fn charge(&mut self, cost: u64, now: u64) {
        self.tat = self.tat.max(now).saturating_add(self.interval(cost));
    }
}

/// Which pass of the scheduler a flow is served in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Flows under their guaranteed rate, served first.
    Guaranteed,
    /// Everyone under their ceiling, sharing what is left by weight.
    Borrowing,
}

/// A flow's guarantee and ceiling meters.
#[derive(Debug, Clone)]
pub(crate) struct Meters {
    guarantee: Option<Gcra>,
    ceiling: Option<Gcra>,
}

impl Meters {
    pub fn new(share: &ShareSettings) -> Self {
        Meters {
            guarantee: (share.guarantee > 0).then(|| Gcra::new(share.guarantee, share.window_ns)),
            ceiling: share.ceiling.map(|c| Gcra::new(c, share.window_ns)),
        }
    }

    /// Whether the flow has a guaranteed share to borrow beyond.
    pub fn has_guarantee(&self) -> bool {
        self.guarantee.is_some()
    }

    /// `Ok` when a request of `cost` may be served in `phase` at `now`;
    /// otherwise the time it may be (`None`: never in this phase).
    pub fn eligible(&self, phase: Phase, cost: u64, now: u64) -> Result<(), Option<u64>> {
        let ceiling_at = self.ceiling_at(cost);
        let at = match phase {
            Phase::Guaranteed => match &self.guarantee {
                None => return Err(None),
                Some(g) => g.conforms_at(cost).max(ceiling_at),
            },
            Phase::Borrowing => ceiling_at,
        };
        if at <= now {
            Ok(())
        } else {
            Err(Some(at))
        }
    }

    /// The earliest time the ceiling lets `cost` through (0 without one).
    pub fn ceiling_at(&self, cost: u64) -> u64 {
        self.ceiling.map_or(0, |c| c.conforms_at(cost))
    }

    /// The earliest time the ceiling lets `cost` through after `ahead`
    /// tokens of the flow's waiting before it (0 without one).
    pub fn ceiling_after(&self, ahead: u64, cost: u64, now: u64) -> u64 {
        self.ceiling.map_or(0, |c| c.conforms_after(ahead, cost, now))
    }

    /// Books an admission of `cost` at `now` in `phase`. The ceiling counts
    /// everything; the guarantee counts only what was served under it, so
    /// a tenant gets its guaranteed rate plus its share of what is spare.
    pub fn charge(&mut self, phase: Phase, cost: u64, now: u64) {
        if phase == Phase::Guaranteed {
            if let Some(g) = &mut self.guarantee {
                g.charge(cost, now);
            }
        }
        if let Some(c) = &mut self.ceiling {
            c.charge(cost, now);
        }
    }

    /// Whether forgetting these meters loses nothing: both are full.
    pub fn idle(&self, now: u64) -> bool {
        [&self.guarantee, &self.ceiling].into_iter().flatten().all(|m| m.tat <= now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_is_taken_at_once_then_the_rate() {
        let mut g = Gcra::new(600, 60_000_000_000);
        assert_eq!(g.conforms_at(600), 0);
        g.charge(600, 0);
        // 10 tokens per second from now on.
        assert_eq!(g.conforms_at(10), 1_000_000_000);
        // More than a window conforms once the meter is empty.
        assert_eq!(g.conforms_at(601), 60_000_000_000);
    }

    #[test]
    fn a_cost_above_the_window_is_paid_in_full() {
        let mut g = Gcra::new(10, 1_000);
        assert_eq!(g.conforms_at(50), 0, "let through on an empty meter");
        g.charge(50, 0);
        assert_eq!(g.conforms_at(50), 5_000, "and nothing more for five windows");
        assert_eq!(g.conforms_at(1), 4_100, "a small cost, a window before");
    }
}
