//! What waits: waiters, grouped into flows (one per tenant) within a class.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use crate::config::classes::{ClassSettings, ShareSettings};
use crate::dimension::CostKind;
use crate::{Dimension, Request};

/// A waiter's handle in a [`super::Scheduler`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WaiterId(pub(crate) u64);

/// A flow is named by the scope its share is configured on (or by its route).
pub(crate) type FlowKey = Arc<str>;

/// What one request will take of each kind of limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Cost {
    pub requests: u64,
    pub input: u64,
    /// The part of `input` read from cache, which some limits do not count.
    pub cached_input: u64,
    pub max_output: u64,
    pub expected_output: u64,
}

impl Cost {
    pub fn of(request: &Request) -> Self {
        Cost {
            requests: 1,
            input: request.input_tokens,
            cached_input: request.cached_input_tokens,
            max_output: request.max_output_tokens,
            expected_output: request.expected_output(),
        }
    }

    /// The token cost deficit round robin and the HTB meters count: what the
    /// request is expected to use, at least 1 so token-free requests rotate too.
    pub fn tokens(&self) -> u64 {
        self.input.saturating_add(self.expected_output).max(1)
    }

    /// What a limit charging `kind` is charged.
    pub fn on(&self, kind: CostKind) -> u64 {
        let uncached = self.input.saturating_sub(self.cached_input);
        match kind {
            CostKind::One => self.requests,
            CostKind::Input => self.input,
            CostKind::UncachedInput => uncached,
            CostKind::Output => self.max_output,
            CostKind::ExpectedOutput => self.expected_output,
            CostKind::Tokens => self.input.saturating_add(self.max_output),
            CostKind::UncachedTokens => uncached.saturating_add(self.max_output),
            CostKind::ExpectedTokens => self.input.saturating_add(self.expected_output),
            CostKind::UncachedExpectedTokens => uncached.saturating_add(self.expected_output),
            // A budget's price is the ledger's to know; see `predicted_wait`.
            CostKind::Cost | CostKind::ExpectedCost => 0,
        }
    }

    /// Adds `other`, saturating: a backlog never wraps.
    pub fn add(&mut self, other: &Cost) {
        self.requests = self.requests.saturating_add(other.requests);
        self.input = self.input.saturating_add(other.input);
        self.cached_input = self.cached_input.saturating_add(other.cached_input);
        self.max_output = self.max_output.saturating_add(other.max_output);
        self.expected_output = self.expected_output.saturating_add(other.expected_output);
    }

    /// Takes `other` back out, saturating at zero as [`Self::add`] does at
    /// the top: a backlog that saturated comes back down without wrapping.
    pub fn sub(&mut self, other: &Cost) {
        self.requests = self.requests.saturating_sub(other.requests);
        self.input = self.input.saturating_sub(other.input);
        self.cached_input = self.cached_input.saturating_sub(other.cached_input);
        self.max_output = self.max_output.saturating_sub(other.max_output);
        self.expected_output = self.expected_output.saturating_sub(other.expected_output);
    }

    /// `fraction` (in [0, 1]) of this cost, rounded down.
    pub fn scaled(&self, fraction: f64) -> Cost {
        let f = |v: u64| (v as f64 * fraction) as u64;
        Cost {
            requests: f(self.requests),
            input: f(self.input),
            cached_input: f(self.cached_input),
            max_output: f(self.max_output),
            expected_output: f(self.expected_output),
        }
    }
}

/// One limit on a route, as prediction needs it.
#[derive(Debug, Clone)]
pub(crate) struct RouteLimit {
    pub scope: crate::ScopeId,
    pub index: usize,
    pub dimension: Dimension,
    /// Which of a request's quantities it charges.
    pub kind: CostKind,
}

/// What the scheduler keeps about a route: its scopes, its flow and share.
#[derive(Debug)]
pub(crate) struct RouteInfo {
    /// Every scope path the route charges.
    pub scopes: Vec<Arc<str>>,
    /// The same scopes' ids, in the same order.
    pub ids: Vec<crate::ScopeId>,
    pub flow: FlowKey,
    pub share: ShareSettings,
    pub limits: Vec<RouteLimit>,
}

/// One waiting request.
#[derive(Debug)]
pub(crate) struct Waiter {
    pub id: WaiterId,
    pub request: Request,
    pub cost: Cost,
    pub route: Arc<RouteInfo>,
    pub enqueued_at: u64,
    /// The latest it may be admitted (absolute nanoseconds).
    pub deadline: u64,
}

/// Waiters of one flow are served highest priority first, then first come.
pub(crate) type Order = (Reverse<i32>, u64);

/// One tenant's waiters in one class.
#[derive(Debug)]
pub(crate) struct Flow {
    pub weight: u64,
    pub waiters: BTreeMap<Order, Waiter>,
    /// Tokens this flow may still be admitted in its current round, per
    /// HTB phase (guaranteed, borrowing): each phase is its own round robin.
    pub deficit: [u64; 2],
    /// Whether it got its quantum for the visit in progress, per phase.
    pub credited: [bool; 2],
    /// The sum of its waiters' costs.
    pub backlog: Cost,
}

impl Flow {
    pub fn new(weight: u32) -> Self {
        Flow {
            weight: weight as u64,
            waiters: BTreeMap::new(),
            deficit: [0; 2],
            credited: [false; 2],
            backlog: Cost::default(),
        }
    }

    pub fn head(&self) -> Option<&Waiter> {
        self.waiters.values().next()
    }

    /// What a new request at `priority` waits behind in this flow: its
    /// waiters of at least that priority (equal ones came first). Counted
    /// from the back, so the usual case (no waiter of lower priority) is free.
    pub fn ahead_of(&self, priority: i32) -> Cost {
        let mut ahead = self.backlog;
        for waiter in self.waiters.iter().rev().map_while(|((p, _), w)| (p.0 < priority).then_some(w)) {
            ahead.sub(&waiter.cost);
        }
        ahead
    }

    pub fn remove(&mut self, order: &Order) -> Option<Waiter> {
        let waiter = self.waiters.remove(order)?;
        self.backlog.sub(&waiter.cost);
        Some(waiter)
    }
}

/// Counters of one class.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ClassCounts {
    pub admitted: u64,
    pub wait: super::metrics::WaitHistogram,
    pub borrowed_tokens: u64,
    pub expired: u64,
    pub refused_queue_full: u64,
    pub refused_deadline: u64,
    pub refused_other: u64,
    pub withdrawn: u64,
    pub max_wait_ns: u64,
}

/// One traffic class's queue: flows in round-robin order.
#[derive(Debug)]
pub(crate) struct ClassQueue {
    pub name: Arc<str>,
    pub settings: ClassSettings,
    pub flows: HashMap<FlowKey, Flow>,
    /// Round-robin order of flows with waiters.
    pub order: Vec<FlowKey>,
    /// Where each HTB phase's round robin resumes.
    pub cursor: [usize; 2],
    /// Waiters by arrival, for the oldest one's age.
    pub arrivals: BTreeSet<(u64, WaiterId)>,
    pub counts: ClassCounts,
}

impl ClassQueue {
    pub fn new(name: &str, settings: ClassSettings) -> Self {
        ClassQueue {
            name: name.into(),
            settings,
            flows: HashMap::new(),
            order: Vec::new(),
            cursor: [0; 2],
            arrivals: BTreeSet::new(),
            counts: ClassCounts::default(),
        }
    }

    pub fn depth(&self) -> usize {
        self.arrivals.len()
    }

    pub fn push(&mut self, order: Order, waiter: Waiter) {
        self.arrivals.insert((waiter.enqueued_at, waiter.id));
        let flow = waiter.route.flow.clone();
        let entry = self.flows.entry(flow.clone()).or_insert_with(|| {
            self.order.push(flow);
            Flow::new(waiter.route.share.weight)
        });
        entry.backlog.add(&waiter.cost);
        entry.waiters.insert(order, waiter);
    }

    /// Takes a waiter out of the queue (the flow stays until it is visited
    /// empty, so the round-robin order is kept). A flow left empty loses
    /// its deficit, as in deficit round robin: credit earned for a request
    /// that left is not spent by the next ones.
    pub fn take(&mut self, flow: &FlowKey, order: &Order) -> Option<Waiter> {
        let flow = self.flows.get_mut(flow)?;
        let waiter = flow.remove(order)?;
        if flow.waiters.is_empty() {
            flow.deficit = [0; 2];
            flow.credited = [false; 2];
        }
        self.arrivals.remove(&(waiter.enqueued_at, waiter.id));
        Some(waiter)
    }

    /// Drops the flow at `position` in the round robin, forgetting its deficit.
    pub fn drop_flow(&mut self, position: usize) {
        let key = self.order.remove(position);
        self.flows.remove(&key);
        for cursor in &mut self.cursor {
            if *cursor > position {
                *cursor -= 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saturated_backlog_comes_back_down_without_wrapping() {
        let huge =
            Cost { requests: 1, input: u64::MAX, cached_input: 0, max_output: u64::MAX, expected_output: u64::MAX };
        let mut backlog = Cost::default();
        backlog.add(&huge);
        backlog.add(&huge);
        backlog.sub(&huge);
        backlog.sub(&huge);
        assert_eq!(backlog, Cost::default());
    }
}
