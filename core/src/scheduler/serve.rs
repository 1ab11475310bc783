//! One pass of deficit round robin over a class's flows, in one HTB phase,
//! holding the line: once a chosen head is refused by a scope, nobody after
//! it in this poll may take capacity from that scope, so the head is
//! admitted as soon as the scope has refilled enough for it, however small
//! the requests behind it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::flow::{ClassQueue, FlowKey, RouteInfo, WaiterId};
use super::meter::{Meters, Phase};
use crate::{Error, Permit, Request, Result};

/// What a poll hands back for a waiter.
#[derive(Debug)]
pub enum Outcome {
    /// Admitted: the waiter's permit.
    Admitted {
        /// Whose.
        waiter: WaiterId,
        /// The reservation, as [`crate::Ledger::try_acquire`] made it.
        permit: Permit,
        /// How long it waited, in nanoseconds.
        waited: u64,
    },
    /// Refused: its deadline passed, or it can never be admitted.
    Refused {
        /// Whose.
        waiter: WaiterId,
        /// Why; nothing is reserved.
        error: Error,
    },
}

impl Outcome {
    /// The waiter it is for.
    pub fn waiter(&self) -> WaiterId {
        match self {
            Outcome::Admitted { waiter, .. } | Outcome::Refused { waiter, .. } => *waiter,
        }
    }
}

/// The scopes heads are waiting on in this poll.
#[derive(Debug, Default)]
pub(crate) struct Held(Vec<Arc<str>>);

impl Held {
    pub fn touches(&self, route: &RouteInfo) -> bool {
        !self.0.is_empty() && route.scopes.iter().any(|s| self.0.iter().any(|h| h == s))
    }

    fn hold(&mut self, scope: Arc<str>) {
        if !self.0.contains(&scope) {
            self.0.push(scope);
        }
    }
}

/// The state of one poll, shared by every class and phase it serves.
pub(crate) struct Pass<'a> {
    pub now: u64,
    pub admit: &'a mut dyn FnMut(&Request) -> Result<Permit>,
    pub held: Held,
    /// The earliest time a refusal or a meter may change its mind.
    pub wake: Option<u64>,
    pub out: &'a mut Vec<Outcome>,
}

impl Pass<'_> {
    fn wake_at(&mut self, at: u64) {
        self.wake = Some(self.wake.map_or(at, |w| w.min(at)));
    }
}

/// What one visit to a flow did.
#[derive(PartialEq)]
enum Visit {
    /// Skipped: its head is held or not eligible in this phase.
    Skipped,
    /// Credited a quantum but sent nothing.
    Credited,
    /// Admitted or refused at least one waiter.
    Served,
}

/// Serves `queue` in `phase` until every flow is held, ineligible or empty.
pub(crate) fn serve(queue: &mut ClassQueue, meters: &mut HashMap<FlowKey, Meters>, phase: Phase, pass: &mut Pass) {
    let cursor = phase as usize;
    let (mut stalled, mut quiet) = (0, 0);
    let mut resume: Option<FlowKey> = None;
    while !queue.order.is_empty() && stalled < queue.order.len() {
        if queue.cursor[cursor] >= queue.order.len() {
            queue.cursor[cursor] = 0;
        }
        let position = queue.cursor[cursor];
        let key = queue.order[position].clone();
        if queue.flows[&key].head().is_none() {
            queue.drop_flow(position);
            continue;
        }
        let (visit, blocked) = visit(queue, &key, meters, phase, pass);
        if blocked {
            resume.get_or_insert(key);
        }
        queue.cursor[cursor] += 1;
        match visit {
            Visit::Skipped => (stalled, quiet) = (stalled + 1, quiet + 1),
            Visit::Credited => (stalled, quiet) = (0, quiet + 1),
            Visit::Served => (stalled, quiet) = (0, 0),
        }
        if quiet >= queue.order.len() {
            fast_forward(queue, meters, phase, pass);
            quiet = 0;
        }
    }
    if let Some(key) = resume {
        if let Some(position) = queue.order.iter().position(|k| *k == key) {
            queue.cursor[cursor] = position;
        }
    }
}

/// Whether a request of `cost` on `route` may be served in `phase` now; if
/// not, books when it may.
fn eligible(
    meters: &mut HashMap<FlowKey, Meters>,
    route: &RouteInfo,
    cost: u64,
    phase: Phase,
    pass: &mut Pass,
) -> bool {
    let meter = meters.entry(route.flow.clone()).or_insert_with(|| Meters::new(&route.share));
    match meter.eligible(phase, cost, pass.now) {
        Ok(()) => true,
        Err(at) => {
            if let Some(at) = at {
                pass.wake_at(at);
            }
            false
        }
    }
}

/// One visit: credit the flow's quantum if its last visit ended, then admit
/// heads while its deficit covers them. Returns what happened and whether
/// its head was refused (so the next poll resumes here).
fn visit(
    queue: &mut ClassQueue,
    key: &FlowKey,
    meters: &mut HashMap<FlowKey, Meters>,
    phase: Phase,
    pass: &mut Pass,
) -> (Visit, bool) {
    let (quantum, p) = (queue.settings.quantum, phase as usize);
    let mut result = Visit::Skipped;
    loop {
        let flow = queue.flows.get_mut(key).expect("visited flows exist");
        let Some((&order, head)) = flow.waiters.iter().next() else {
            flow.credited[p] = false;
            return (result, false);
        };
        let (cost, request, route, deadline) = (head.cost.tokens(), head.request, head.route.clone(), head.deadline);
        if pass.held.touches(&route) || !eligible(meters, &route, cost, phase, pass) {
            return (result, false);
        }
        if !flow.credited[p] {
            flow.deficit[p] = flow.deficit[p].saturating_add(quantum.saturating_mul(flow.weight));
            flow.credited[p] = true;
            if result == Visit::Skipped {
                result = Visit::Credited;
            }
        }
        if cost > flow.deficit[p] {
            flow.credited[p] = false;
            return (result, false);
        }
        let decision = (pass.admit)(&request);
        if let Some((scope, retry_after)) = holding_scope(&decision) {
            if deadline <= pass.now {
                // Refused at its deadline, it leaves now: it holds no line
                // for a refill it will not be here for.
                expire_head(queue, key, order, pass);
                result = Visit::Served;
                continue;
            }
            if let Some(after) = retry_after {
                pass.wake_at(pass.now.saturating_add(crate::time::duration_ns(after)));
            }
            pass.held.hold(scope);
            return (result, true);
        }
        result = Visit::Served;
        let waiter = queue.take(key, &order).expect("the head is in its flow");
        match decision {
            Ok(permit) => {
                let meter = meters.get_mut(key).expect("eligible made it");
                let waited = charge_admission(queue, key, meter, phase, cost, waiter.enqueued_at, pass.now);
                pass.out.push(Outcome::Admitted { waiter: waiter.id, permit, waited });
            }
            Err(error) => {
                queue.counts.refused_other += 1;
                pass.out.push(Outcome::Refused { waiter: waiter.id, error });
            }
        }
    }
}

/// The scope that refused `decision` for now (or whose breaker is open),
/// and when it could pass: it holds the line until then, and the waiter
/// keeps waiting.
fn holding_scope(decision: &Result<Permit>) -> Option<(Arc<str>, Option<Duration>)> {
    match decision {
        Err(Error::RateLimited { scope, retry_after, .. }) => Some((scope.clone(), *retry_after)),
        Err(Error::CircuitOpen { scope, retry_after, .. }) => Some((scope.clone(), Some(*retry_after))),
        _ => None,
    }
}

/// Refuses the head at `order`, whose deadline is now, as
/// [`super::Scheduler::expire`] would at the end of the poll.
fn expire_head(queue: &mut ClassQueue, key: &FlowKey, order: super::flow::Order, pass: &mut Pass) {
    let waiter = queue.take(key, &order).expect("the head is in its flow");
    queue.counts.expired += 1;
    let waited = Duration::from_nanos(pass.now.saturating_sub(waiter.enqueued_at));
    let error = Error::DeadlineExceeded { waited, retry_after: None };
    pass.out.push(Outcome::Refused { waiter: waiter.id, error });
}

/// Charges an admitted head of `cost` to its flow's deficit and meter, and
/// counts it; returns how long it waited.
fn charge_admission(
    queue: &mut ClassQueue,
    key: &FlowKey,
    meter: &mut Meters,
    phase: Phase,
    cost: u64,
    enqueued_at: u64,
    now: u64,
) -> u64 {
    // Taking its last waiter already reset an emptied flow's deficit.
    let deficit = &mut queue.flows.get_mut(key).expect("visited flows exist").deficit[phase as usize];
    *deficit = deficit.saturating_sub(cost);
    meter.charge(phase, cost, now);
    let waited = now.saturating_sub(enqueued_at);
    let counts = &mut queue.counts;
    counts.admitted += 1;
    counts.max_wait_ns = counts.max_wait_ns.max(waited);
    counts.wait.record(waited);
    if phase == Phase::Borrowing && meter.has_guarantee() {
        counts.borrowed_tokens = counts.borrowed_tokens.saturating_add(cost);
    }
    waited
}

/// A full cycle credited quanta and sent nothing: every flow that could
/// send needs more rounds. Credit all of them the rounds the nearest needs,
/// less the one its next visit gives, as that many idle rounds would.
fn fast_forward(queue: &mut ClassQueue, meters: &mut HashMap<FlowKey, Meters>, phase: Phase, pass: &mut Pass) {
    let (quantum, p) = (queue.settings.quantum, phase as usize);
    let mut waiting: Vec<(FlowKey, u64)> = Vec::new();
    for key in &queue.order {
        let flow = &queue.flows[key];
        let Some(head) = flow.head() else { continue };
        let cost = head.cost.tokens();
        if pass.held.touches(&head.route) || !eligible(meters, &head.route, cost, phase, pass) {
            continue;
        }
        let short = cost.saturating_sub(flow.deficit[p]);
        let per_round = quantum.saturating_mul(flow.weight);
        waiting.push((key.clone(), short.div_ceil(per_round)));
    }
    let Some(rounds) = waiting.iter().map(|(_, r)| *r).min() else { return };
    if rounds > 1 {
        for (key, _) in waiting {
            let flow = queue.flows.get_mut(&key).expect("listed flows exist");
            let credit = (rounds - 1).saturating_mul(quantum.saturating_mul(flow.weight));
            flow.deficit[p] = flow.deficit[p].saturating_add(credit);
        }
    }
}
