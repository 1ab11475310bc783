//! Waiting fairly: traffic classes, deficit round robin across tenants,
//! HTB guarantees and ceilings, deadlines, and the waits built on them.
//!
//! [`Scheduler`] is sans-IO, as the ledger is: [`Scheduler::submit`] queues a
//! request at `now`, [`Scheduler::poll`] says who is admitted (through an
//! `admit` callback, normally [`crate::Ledger::try_acquire`]) and who is
//! refused at `now`, and [`Scheduler::poll_timeout`] says when to poll
//! next (quinn-proto's `poll_timeout` is the model). The simulator and the
//! tests drive it in virtual time. [`crate::Governor::acquire`] (async,
//! runtime-agnostic) and [`crate::Governor::acquire_blocking`] are thin
//! waits over it: a mutex around the scheduler, one parked slot per waiter
//! and one timer thread per governor; nothing spins.
//!
//! # Order of service
//!
//! 1. **HTB phases**, as in Linux HTB: first the tenants under their
//!    guaranteed rate (`[shares."<path>"] guarantee`), in every class, then
//!    everyone under their ceiling (borrowing), each phase its own round
//!    robin. So lending stops while a guaranteed waiter waits, whatever the
//!    borrower's class (guarantees are bounded by what is configured). The
//!    guarantee meter counts what was served under the guarantee, the
//!    ceiling counts everything: a tenant gets its guarantee plus its
//!    weighted share of what is spare, up to its ceiling. The ceiling binds
//!    requests that need not wait too: while nobody waits,
//!    [`crate::Governor::acquire`] and `acquire_blocking` admit under the
//!    ceiling and charge it, and a request over it waits for it (refused at
//!    once if that is past its deadline). [`crate::Governor::try_acquire`]
//!    does not go through the queues: it neither reads nor charges a ceiling.
//! 2. **Classes**, within a phase, strictly by priority: `interactive`
//!    (40), `agent` (30), the unnamed default class (25), `batch` (20),
//!    `eval` (10), `background` (0), or as configured (`[classes.<name>]`).
//!    A lower class is served only from capacity no higher class's head is
//!    waiting for. Classes of equal priority (a class named only in code
//!    has the default's 25) take turns going first, one poll each.
//! 3. **Tenants**, within a phase, by deficit round robin on token cost:
//!    each visit credits `quantum × weight` tokens, and a tenant's head is
//!    admitted while its deficit covers its cost (input plus expected
//!    output). A tenant is the deepest scope on the route with a share
//!    configured, or else the route itself.
//! 4. **Requests**, within a tenant: highest [`crate::Request::priority`]
//!    first, then first come.
//!
//! # Holding the line
//!
//! When a head chosen in this order is refused by a scope, no request after
//! it in the same poll may take capacity from that scope; requests on other
//! scopes go on. So a head waits only for the scope to refill its own cost:
//! small requests behind it cannot take the capacity piecemeal. The same
//! rule stops lending while a guaranteed waiter is waiting on a scope.
//!
//! **Bound for a large request.** Let a request of `C` tokens head tenant
//! `f` (weight `w_f`) in its class, with other backlogged tenants `g`
//! (weights `w_g`, largest request `M_g`), quantum `Q`, and the scope that
//! binds refilling `R` tokens a second. Tenant `f` needs
//! `k = ceil(C / (Q·w_f))` visits; in that time each other tenant is
//! admitted at most `k·Q·w_g + M_g` tokens, after which the head holds the
//! line and waits for `C` more. So it is admitted within
//! `(C + Σ_g (k·Q·w_g + M_g) + D) / R` seconds, with `D` the scope's debt
//! when it arrived (zero when it is not in debt), whatever arrives after it
//! in its own or any lower class (test
//! `a_large_request_behind_a_stream_of_small_ones_is_admitted_within_the_bound`
//! in `core/tests/waiting_goals.rs`: 50k tokens behind three tenants of
//! 500-token requests at 100k TPM, bound 126.7 s, admitted after 125.4 s).
//!
//! # Deadlines
//!
//! A request waits at most the least of its [`crate::Request::deadline`],
//! its class's `max_wait` and a blocking timeout. When it arrives, its wait
//! is predicted (what is queued ahead of it, by the rules above, over each
//! token bucket's refill rate, less what is available; on a sliding window,
//! until enough of its charges age out; and until an open breaker on its
//! route lets a probe through); if that is past its deadline, or its
//! class's queue is full, it is refused at once with a `retry_after`
//! ([`Error::CircuitOpen`] when the breaker alone outlasts the deadline). A waiter still waiting at its deadline is refused then
//! ([`crate::Error::DeadlineExceeded`]); none is admitted after it. The
//! prediction cannot see traffic of a higher class that arrives later, so
//! under overload a lower class's waiter may still expire at its deadline.
//!
//! # Wake-ups
//!
//! [`Scheduler::poll_timeout`] covers refills (a refused head's
//! `retry_after`), HTB meters and deadlines, and says "at once" when a
//! head left the queue (it may have been holding the line). A head refused on concurrency
//! has no time to wait for: it is retried at the next poll, which a
//! settle or cancel triggers (a permit that expires unsettled frees its
//! slot without one; the next poll, at the latest a deadline, sees it).

mod acquire;
mod flow;
mod meter;
mod metrics;
mod predict;
mod serve;
mod waiting;

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

pub use acquire::Acquire;
pub(crate) use acquire::{Admitted, Guard};
pub use flow::WaiterId;
pub use metrics::{ClassMetrics, QueueMetrics, WaitHistogram, WAIT_BUCKETS_S};
pub use serve::Outcome;
pub(crate) use waiting::{Entry, Waiting};

use flow::{ClassQueue, Cost, FlowKey, Order, RouteInfo, Waiter};
use meter::{Meters, Phase};
use serve::{Held, Pass};

use crate::config::classes::{self, WaitingSettings, DEFAULT_CLASS};
use crate::{Config, Error, Ledger, Permit, Request, Result, Route};

/// Where a waiter is, to withdraw or expire it.
#[derive(Debug)]
struct Location {
    class: usize,
    flow: FlowKey,
    order: Order,
    deadline: u64,
}

/// The sans-IO waiting queues of one ledger: see the [module](self) docs.
#[derive(Debug)]
pub struct Scheduler {
    settings: WaitingSettings,
    classes: Vec<ClassQueue>,
    class_index: HashMap<Box<str>, usize>,
    routes: HashMap<Route, Arc<RouteInfo>>,
    located: HashMap<WaiterId, Location>,
    deadlines: BTreeSet<(u64, WaiterId)>,
    meters: HashMap<FlowKey, Meters>,
    guarantees: bool,
    next_id: u64,
    seq: u64,
    /// The earliest time the last poll's refusals or meters may change.
    wake: Option<u64>,
    /// Polls made: classes of equal priority take turns going first by it.
    polls: usize,
}

impl Scheduler {
    /// A scheduler for the `classes` and `shares` of `config`.
    pub fn new(config: &Config) -> Result<Self> {
        let settings = classes::compile(&config.classes, &config.shares)?;
        Ok(Scheduler {
            guarantees: settings.shares.values().any(|s| s.guarantee > 0),
            settings,
            classes: Vec::new(),
            class_index: HashMap::new(),
            routes: HashMap::new(),
            located: HashMap::new(),
            deadlines: BTreeSet::new(),
            meters: HashMap::new(),
            next_id: 0,
            seq: 0,
            wake: None,
            polls: 0,
        })
    }

    /// Requests waiting now, every class together.
    pub fn depth(&self) -> usize {
        self.located.len()
    }

    /// Queues `request` at `now` in the class named `class_name` (the
    /// request's own `class` id is not read here: the
    /// [`crate::Governor`] passes the name it interned). It waits at most
    /// until `deadline` (absolute nanoseconds, if given), its own
    /// [`Request::deadline`] and its class's maximum wait, whichever is
    /// first. Refused at once with [`Error::QueueFull`] when its class's
    /// queue is full, [`Error::DeadlineExceeded`] when its predicted wait
    /// is past that, and [`Error::NeverFits`] when no wait can help. A
    /// request the ledger would refuse as invalid (a token count above
    /// [`crate::MAX_TOKENS`], more cached input than input) is refused with
    /// the same [`Error::InvalidRequest`], naming the field and its value,
    /// before it is queued.
    /// Call [`Self::poll`] next: a request that can pass now is admitted there.
    pub fn submit(
        &mut self,
        ledger: &Ledger,
        request: Request,
        class_name: &str,
        deadline: Option<u64>,
        now: u64,
    ) -> Result<WaiterId> {
        let Prediction { route, class, cost, breaker, wait: predicted } =
            self.prediction(ledger, &request, class_name, now)?;
        let queue = &mut self.classes[class];
        let retry_after = Some(Duration::from_nanos(predicted));
        if queue.depth() >= queue.settings.queue_bound {
            queue.counts.refused_queue_full += 1;
            let (class, bound) = (queue.name.clone(), queue.settings.queue_bound);
            return Err(Error::QueueFull { class, bound, retry_after });
        }
        let mut wait = queue.settings.max_wait_ns;
        if let Some(own) = request.deadline {
            wait = wait.min(crate::time::duration_ns(own));
        }
        let deadline = deadline.unwrap_or(u64::MAX).min(now.saturating_add(wait));
        if predicted > deadline.saturating_sub(now) {
            queue.counts.refused_deadline += 1;
            // A breaker that stays open past the deadline is the failure to
            // report, as when nobody waits: the caller learns which scope.
            if let Some((scope, until)) = breaker.filter(|(_, until)| *until > deadline) {
                return Err(Error::CircuitOpen { scope, retry_after: Duration::from_nanos(until - now) });
            }
            return Err(Error::DeadlineExceeded { waited: Duration::ZERO, retry_after });
        }
        let id = WaiterId(self.next_id);
        self.next_id += 1;
        self.seq += 1;
        let order = (Reverse(request.priority), self.seq);
        let flow = route.flow.clone();
        queue.push(order, Waiter { id, request, cost, route, enqueued_at: now, deadline });
        self.located.insert(id, Location { class, flow, order, deadline });
        self.deadlines.insert((deadline, id));
        self.wake = Some(now);
        Ok(id)
    }

    /// How long `request` would wait, in nanoseconds, if it were queued in
    /// the class named `class_name` at `now` (what [`Self::submit`] judges
    /// it by): for choosing where to wait, beside the ledger's own
    /// `retry_after`, which knows nothing of the line already waiting.
    pub fn predicted_wait(&mut self, ledger: &Ledger, request: &Request, class_name: &str, now: u64) -> Result<u64> {
        Ok(self.prediction(ledger, request, class_name, now)?.wait)
    }

    fn prediction(&mut self, ledger: &Ledger, request: &Request, class_name: &str, now: u64) -> Result<Prediction> {
        // The ledger validates only at admission: a request queued unchecked
        // would weigh on predictions and backlogs with impossible counts.
        request.validate()?;
        ledger.check_fits(request)?;
        let route = self.route_info(ledger, request.route)?;
        let class = self.class(class_name);
        let cost = Cost::of(request);
        let breaker = predict::open_breaker(ledger, request.route, now)?;
        let wait = predict::predicted_wait(ledger, &self.classes, class, &route, &cost, request.priority, now)?
            .max(self.ceiling_wait(&route, class, &cost, request.priority, now))
            .max(breaker.as_ref().map_or(0, |(_, until)| until.saturating_sub(now)));
        Ok(Prediction { route, class, cost, breaker, wait })
    }

    /// Whether any share has a ceiling: only then is a request admitted
    /// without waiting metered ([`Self::admit_unqueued`]).
    pub(crate) fn has_ceilings(&self) -> bool {
        self.settings.shares.values().any(|share| share.ceiling.is_some())
    }

    /// Admits `request` at `now` through `admit` without queueing it (for
    /// when nobody waits), charging its tenant's ceiling as a waiter's
    /// admission is charged: a ceiling binds every request, waiting or not.
    /// `Ok(None)` when the ceiling does not let it through now: queue it
    /// with [`Self::submit`] to wait for the ceiling. Errors are `admit`'s.
    pub(crate) fn admit_unqueued(
        &mut self,
        ledger: &Ledger,
        request: &Request,
        now: u64,
        admit: &mut dyn FnMut(&Request) -> Result<Permit>,
    ) -> Result<Option<Permit>> {
        let route = self.route_info(ledger, request.route)?;
        if route.share.ceiling.is_none() {
            return admit(request).map(Some);
        }
        let cost = Cost::of(request).tokens();
        if !self.meters.contains_key(&route.flow) {
            self.meters.insert(route.flow.clone(), Meters::new(&route.share));
            // Without waiters no poll forgets them: a new tenant does.
            self.forget_idle_meters(now);
        }
        let meter = self.meters.get_mut(&route.flow).expect("inserted above");
        if meter.eligible(Phase::Borrowing, cost, now).is_err() {
            return Ok(None);
        }
        let permit = admit(request)?;
        meter.charge(Phase::Borrowing, cost, now);
        Ok(Some(permit))
    }

    /// Takes a waiter out of its queue: it left (its future was dropped, it
    /// was cancelled). False if it is not waiting (already answered).
    ///
    /// A waiter that headed its tenant's line may have been holding others
    /// back (holding the line on a scope, or waiting for its meters): then
    /// [`Self::poll_timeout`] says to poll at once, as anyone may now go.
    pub fn withdraw(&mut self, waiter: WaiterId) -> bool {
        let Some(location) = self.located.remove(&waiter) else { return false };
        self.deadlines.remove(&(location.deadline, waiter));
        let queue = &mut self.classes[location.class];
        let flow = queue.flows.get(&location.flow);
        let headed = flow.and_then(|f| f.waiters.keys().next()) == Some(&location.order);
        queue.take(&location.flow, &location.order);
        queue.counts.withdrawn += 1;
        if headed && !self.located.is_empty() {
            self.wake = Some(0);
        }
        true
    }

    /// Admits, in the order of the [module](self) docs, every waiter that
    /// `admit` accepts at `now`, refuses those whose deadline has come, and
    /// appends what happened to `out`. `admit` reserves (normally
    /// [`Ledger::try_acquire`] at `now`); a
    /// [`Error::RateLimited`] from it holds the line on the scope it names.
    pub fn poll(&mut self, now: u64, admit: &mut dyn FnMut(&Request) -> Result<Permit>, out: &mut Vec<Outcome>) {
        let first = out.len();
        // Nobody is admitted after their deadline, however late this poll.
        self.expire(now, false, out);
        let mut pass = Pass { now, admit, held: Held::default(), wake: None, out };
        // Classes of equal priority take turns going first, a poll each: in
        // the order they were made, the first would starve the others under
        // overload (classes named only in code all have the default's 25).
        let count = self.classes.len();
        let leader = self.polls % count.max(1);
        self.polls = self.polls.wrapping_add(1);
        let mut order: Vec<usize> = (0..count).collect();
        order.sort_by_key(|&c| (Reverse(self.classes[c].settings.priority), (c + count - leader) % count));
        // As in HTB, traffic under its guarantee goes before any borrowing,
        // whatever its class: a guaranteed head refused holds the line for
        // every class's borrowers after it, so lending stops while it waits.
        let phases: &[Phase] =
            if self.guarantees { &[Phase::Guaranteed, Phase::Borrowing] } else { &[Phase::Borrowing] };
        for &phase in phases {
            for &class in &order {
                let queue = &mut self.classes[class];
                if queue.depth() > 0 {
                    serve::serve(queue, &mut self.meters, phase, &mut pass);
                }
            }
        }
        self.wake = pass.wake;
        for outcome in &out[first..] {
            if let Some(location) = self.located.remove(&outcome.waiter()) {
                self.deadlines.remove(&(location.deadline, outcome.waiter()));
            }
        }
        // A head skipped in this poll (held back, or waiting for its meters)
        // may leave now at its deadline: those behind it may go at once.
        if self.expire(now, true, out) && !self.located.is_empty() {
            self.wake = Some(now);
        }
        self.forget_idle_meters(now);
    }

    /// When to poll next if nothing else happens (no settle, cancel, new
    /// request): the earliest refill a refused head waits for, a meter, or
    /// a deadline; at once (0, or the time of the poll it left in) after a
    /// head left. `None` when nothing waits
    /// on time (only on releases).
    pub fn poll_timeout(&self) -> Option<u64> {
        let deadline = self.deadlines.first().map(|(at, _)| *at);
        match (self.wake, deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Each class's queue at `now`.
    pub fn metrics(&self, now: u64) -> QueueMetrics {
        let mut classes: Vec<ClassMetrics> = self.classes.iter().map(|q| class_metrics(q, now)).collect();
        classes.sort_by_key(|c| Reverse(c.priority));
        QueueMetrics { depth: self.depth(), classes }
    }

    /// Refuses every waiter whose deadline is before `now` (or at it, with
    /// `inclusive`). True if one of them headed its tenant's line.
    fn expire(&mut self, now: u64, inclusive: bool, out: &mut Vec<Outcome>) -> bool {
        let mut headed = false;
        while let Some(&(deadline, id)) = self.deadlines.first() {
            if deadline > now || (deadline == now && !inclusive) {
                break;
            }
            self.deadlines.pop_first();
            let location = self.located.remove(&id).expect("deadlines and locations agree");
            let queue = &mut self.classes[location.class];
            let flow = queue.flows.get(&location.flow);
            headed |= flow.and_then(|f| f.waiters.keys().next()) == Some(&location.order);
            let waiter = queue.take(&location.flow, &location.order).expect("located waiters are queued");
            queue.counts.expired += 1;
            let waited = Duration::from_nanos(now.saturating_sub(waiter.enqueued_at));
            out.push(Outcome::Refused { waiter: id, error: Error::DeadlineExceeded { waited, retry_after: None } });
        }
        headed
    }

    /// Meters of tenants with no waiters that hold a full window remember
    /// nothing: dropping them keeps memory bounded by recent tenants.
    fn forget_idle_meters(&mut self, now: u64) {
        if self.meters.len() > 1024 && self.meters.len() > 2 * self.located.len() {
            let active: BTreeSet<&FlowKey> = self.classes.iter().flat_map(|q| q.flows.keys()).collect();
            self.meters.retain(|key, meter| active.contains(key) || !meter.idle(now));
        }
    }

    /// How long the tenant's ceiling keeps a new request of `cost` in
    /// `class` waiting, behind what its tenant already has waiting there
    /// and in every class served before it (the meter is the tenant's,
    /// whatever the class).
    fn ceiling_wait(&self, route: &RouteInfo, class: usize, cost: &Cost, priority: i32, now: u64) -> u64 {
        let Some(meter) = self.meters.get(&route.flow) else { return 0 };
        let class_priority = self.classes[class].settings.priority;
        // Of its own class, only what its priority puts ahead of it.
        let queued = (self.classes.iter().enumerate())
            .filter(|(_, queue)| queue.settings.priority >= class_priority)
            .filter_map(|(i, queue)| Some((i, queue.flows.get(&route.flow).filter(|f| !f.waiters.is_empty())?)))
            .map(|(i, flow)| if i == class { flow.ahead_of(priority) } else { flow.backlog })
            .filter(|ahead| ahead.requests > 0)
            .fold(0u64, |sum, ahead| sum.saturating_add(ahead.tokens()));
        meter.ceiling_after(queued, cost.tokens(), now).saturating_sub(now)
    }

    fn route_info(&mut self, ledger: &Ledger, route: Route) -> Result<Arc<RouteInfo>> {
        if let Some(info) = self.routes.get(&route) {
            return Ok(info.clone());
        }
        let info = Arc::new(predict::route_info(ledger, &self.settings, route)?);
        self.routes.insert(route, info.clone());
        Ok(info)
    }

    fn class(&mut self, name: &str) -> usize {
        if let Some(&index) = self.class_index.get(name) {
            return index;
        }
        let settings = self.settings.classes.get(name).cloned().unwrap_or(DEFAULT_CLASS);
        self.classes.push(ClassQueue::new(name, settings));
        self.class_index.insert(name.into(), self.classes.len() - 1);
        self.classes.len() - 1
    }
}

fn class_metrics(queue: &ClassQueue, now: u64) -> ClassMetrics {
    let ms = |ns: u64| ns / crate::NS_PER_MS;
    let oldest = queue.arrivals.first().map_or(0, |(at, _)| now.saturating_sub(*at));
    ClassMetrics {
        class: queue.name.to_string(),
        priority: queue.settings.priority,
        depth: queue.depth(),
        queue_bound: queue.settings.queue_bound,
        oldest_wait_ms: ms(oldest),
        max_wait_ms: ms(queue.settings.max_wait_ns),
        longest_admitted_wait_ms: ms(queue.counts.max_wait_ns),
        admitted: queue.counts.admitted,
        expired: queue.counts.expired,
        refused_queue_full: queue.counts.refused_queue_full,
        refused_deadline: queue.counts.refused_deadline,
        refused_other: queue.counts.refused_other,
        withdrawn: queue.counts.withdrawn,
        tenants: queue.flows.values().filter(|f| !f.waiters.is_empty()).count(),
        wait: queue.counts.wait,
        borrowed_tokens: queue.counts.borrowed_tokens,
    }
}

/// What a request queued now would be: its route, class and cost, the
/// breaker it would wait for (its scope and until when), and its predicted
/// wait in nanoseconds.
struct Prediction {
    route: Arc<RouteInfo>,
    class: usize,
    cost: Cost,
    breaker: Option<(Arc<str>, u64)>,
    wait: u64,
}
