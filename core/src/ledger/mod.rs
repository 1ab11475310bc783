//! The ledger: every limit of every scope, reserved all-or-nothing, settled,
//! refunded or expired. Sans-IO: each call takes `now` in nanoseconds and
//! nothing here reads a clock, sleeps or takes a lock.

pub mod atomic;
pub(crate) mod breaker;
mod budget;
pub(crate) mod feedback;
pub mod gcra;
mod headroom;
pub(crate) mod limit;
pub(crate) mod pace;
mod pending;
pub(crate) mod permit;
pub(crate) mod registry;
mod reserve;
pub mod ring;
mod unit_plan;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use limit::{Limit, TtlSlots};
use pending::Pending;
use permit::{Permit, PermitState, Request, Route};
use registry::{Registry, Scope, ScopeId, ScopeIndex, ScopeList};

use crate::config::{compile, Config};
use crate::dimension::{CostParts, Costs, MAX_TOKENS};
use crate::{Error, Result, Usage};

/// Refusal counters. Admissions are counted in [`Pending`], off the
/// shared cache lines.
#[derive(Debug, Default)]
struct Refusals {
    rate_limited: AtomicU64,
    never_fits: AtomicU64,
    /// Admitted here, then refused by the provider (see [`Ledger::observe`]).
    provider_rejected: AtomicU64,
    /// Refused because a provider scope's breaker was open.
    circuit_open: AtomicU64,
}

/// Tags told apart the routes, scopes and permits of different ledgers.
static NEXT_TAG: AtomicU32 = AtomicU32::new(1);

/// The lock-free ledger. Most users want [`crate::Governor`], which owns a
/// clock and calls this with its time.
#[derive(Debug)]
pub struct Ledger {
    /// Stamped on every route, scope id and permit this ledger hands out.
    tag: u32,
    registry: Registry,
    /// Whether any limit reserves the expected output (so that learning it
    /// is worth a lookup per acquire).
    reserves_expected_output: bool,
    ttl: TtlSlots,
    /// Unsettled permits per TTL slot: what stays in a slot past its life expired.
    pending: Pending,
    refusals: Refusals,
}

impl Ledger {
    /// Builds a ledger from a config, validating it.
    pub fn new(config: &Config) -> Result<Self> {
        let compiled = compile(config)?;
        let specs = compiled.configured.iter().map(|(_, spec)| spec).chain(compiled.templates.iter().map(|t| &t.spec));
        let limits = specs.map(|spec| &spec.limits);
        let reserves_expected_output =
            limits.flat_map(|limits| limits.iter()).any(|l| l.reserves_output() == Some("expected"));
        Ok(Ledger {
            reserves_expected_output,
            tag: NEXT_TAG.fetch_add(1, Ordering::Relaxed),
            registry: Registry::new(compiled.configured, compiled.templates, compiled.adaptive),
            ttl: TtlSlots::new(compiled.permit_ttl_ns),
            pending: Pending::default(),
            refusals: Refusals::default(),
        })
    }

    /// Interns `path` and returns the id of the deepest scope on it (the
    /// scope at `path` itself when one is configured or templated there),
    /// instantiating template scopes met for the first time.
    pub fn scope_id(&self, path: &str) -> Result<ScopeId> {
        let chain = self.registry.resolve(path)?;
        let index = *chain.last().expect("resolve never returns an empty chain");
        Ok(ScopeId { ledger: self.tag, index })
    }

    /// The scope an id names, if it is one of this ledger's.
    fn scope(&self, id: ScopeId) -> Result<&Scope> {
        Some(id)
            .filter(|id| id.ledger == self.tag)
            .and_then(|id| self.registry.try_get(id.index))
            .ok_or_else(|| foreign("scope", format!("{id:?}")))
    }

    /// The path of a scope.
    pub fn scope_path(&self, id: ScopeId) -> Result<&str> {
        Ok(&self.scope(id)?.path)
    }

    /// The part of `route` that is a provider's: the route of its scopes
    /// configured with `provider = true`, or `route` itself when it has no
    /// other scopes, or none. What is learned from a provider's answers is
    /// kept per provider part, shared by every tenant's route to it.
    pub fn provider_route(&self, route: Route) -> Route {
        Route { ledger: route.ledger, id: self.registry.provider_part(route.id) }
    }

    /// Whether any limit reserves the expected output rather than `max_tokens`.
    pub fn reserves_expected_output(&self) -> bool {
        self.reserves_expected_output
    }

    /// The scopes a route charges, in reservation order.
    pub fn route_scopes(&self, route: Route) -> Result<Vec<ScopeId>> {
        self.check_route(route)?;
        Ok(self.registry.route(route.id).iter().map(|scope| ScopeId { ledger: self.tag, index: scope.index }).collect())
    }

    #[inline]
    fn check_route(&self, route: Route) -> Result<()> {
        if route.ledger != self.tag {
            return Err(foreign("route", format!("{route:?}")));
        }
        Ok(())
    }

    /// What `usage` costs on `route`, in cost units (millionths of the
    /// config's currency), its output taken as `usage.output_tokens`; 0
    /// where no scope on the route is priced. For engines that keep some of
    /// a route's budgets elsewhere (the Redis backend's shared scopes).
    pub fn price_of(&self, route: Route, usage: &Usage) -> Result<u64> {
        self.check_route(route)?;
        let price = self.registry.route_entry(route.id).price.as_ref();
        Ok(price.map_or(0, |p| p.cost(usage, usage.output_tokens)))
    }

    /// Number of scopes instantiated, configured and from templates.
    pub fn scope_count(&self) -> usize {
        self.registry.len()
    }

    /// Resolves request paths to the route of every scope they charge.
    pub fn route<S: AsRef<str>>(&self, paths: &[S]) -> Result<Route> {
        for path in paths {
            self.registry.check(path.as_ref())?;
        }
        let mut scopes = ScopeList::new();
        for path in paths {
            scopes.extend(self.registry.resolve(path.as_ref())?);
        }
        if scopes.is_empty() {
            return Err(Error::InvalidRequest {
                field: "paths",
                value: "[]".into(),
                reason: "a request names at least one path".into(),
            });
        }
        Ok(Route { ledger: self.tag, id: self.registry.intern_route(scopes)? })
    }

    /// Reserves every limit of every scope on the request's route at `now`,
    /// or nothing. A provider scope whose breaker is open refuses with
    /// [`Error::CircuitOpen`]; after its pause, one request goes as the probe.
    #[inline]
    pub fn try_acquire(&self, request: &Request, now: u64) -> Result<Permit> {
        self.acquire::<true>(request, now)
    }

    /// [`Self::try_acquire`], counting no refusal: for routing, which tries
    /// several deployments and counts only the request's final refusal
    /// (with [`Self::count_refusal`]).
    #[inline]
    pub(crate) fn try_acquire_uncounted(&self, request: &Request, now: u64) -> Result<Permit> {
        self.acquire::<false>(request, now)
    }

    /// `error`, counted if `COUNTED`.
    #[inline]
    fn counted<const COUNTED: bool>(&self, error: Error) -> Error {
        if COUNTED {
            self.count_refusal(&error);
        }
        error
    }

    /// Counts a refusal in the snapshot's counters.
    #[cold]
    pub(crate) fn count_refusal(&self, error: &Error) {
        let counter = match error {
            Error::RateLimited { .. } => &self.refusals.rate_limited,
            Error::NeverFits { .. } => &self.refusals.never_fits,
            Error::CircuitOpen { .. } => &self.refusals.circuit_open,
            _ => return,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Reconciles a permit with the request's actual usage at `now`: refunds
    /// what was over-reserved, debits any overage (as debt if need be) and
    /// frees its concurrency slots.
    pub fn settle(&self, permit: &mut Permit, actual: Usage, now: u64) -> Result<()> {
        actual.validate()?;
        self.finish(permit, Some(&actual), PermitState::Settled, now)
    }

    /// Refunds everything a permit reserved: its request was never sent.
    pub fn cancel(&self, permit: &mut Permit, now: u64) -> Result<()> {
        self.finish(permit, None, PermitState::Cancelled, now)?;
        if permit.probe {
            self.return_probes(permit, now);
        }
        Ok(())
    }

    /// Gives back the probes a cancelled permit held: its request was never
    /// sent, so no answer will close or reopen those breakers.
    #[cold]
    fn return_probes(&self, permit: &Permit, now: u64) {
        let adaptations = self.registry.route(permit.route.id).iter().filter_map(|s| s.adaptation.as_deref());
        for adaptation in adaptations {
            adaptation.breaker.return_probe(&self.registry.adaptive, permit.acquired_at, now);
        }
    }

    /// Charges `tokens` more streamed output as it arrives. Output within the
    /// reservation is already paid for; beyond it, it is charged at once.
    pub fn add_output(&self, permit: &mut Permit, tokens: u64, now: u64) -> Result<()> {
        self.check_pending(permit, now)?;
        let streamed = permit.streamed_output.saturating_add(tokens);
        if streamed > MAX_TOKENS {
            return Err(Error::InvalidRequest {
                field: "tokens",
                value: tokens.to_string(),
                reason: format!(
                    "brings the output streamed to {}, more than {MAX_TOKENS} tokens; no request is that large",
                    permit.streamed_output as u128 + tokens as u128
                ),
            });
        }
        let (charged, expected) = (permit.charged(), permit.charged_expected_output());
        permit.streamed_output = streamed;
        if streamed <= charged.output_tokens.min(expected) {
            return Ok(());
        }
        let price = self.registry.route_entry(permit.route.id).price.as_ref();
        let was = Costs::of(&charged, expected, price);
        let is = Costs::of(&permit.charged(), permit.charged_expected_output(), price);
        self.for_each_limit(permit, |limit, bucket, pace| {
            if limit.cost_kind.counts_output() && limit.cost(&was) != limit.cost(&is) {
                adjust(limit, bucket, limit.cost(&was), limit.cost(&is), permit.acquired_at, now, pace);
            }
        });
        let raised_by = CostParts::of(&is).minus(&CostParts::of(&was));
        let (booked, slot) = (self.registry.route_entry(permit.route.id).booked, permit.ttl_slot);
        self.pending.changed(permit.route.id, slot, self.ttl.index(now), &raised_by, booked);
        Ok(())
    }

    fn check_pending(&self, permit: &mut Permit, now: u64) -> Result<()> {
        if permit.route.ledger != self.tag {
            return Err(foreign("permit", format!("{:?}", permit.route)));
        }
        match permit.state {
            PermitState::Pending if now >= permit.expires_at => {
                permit.state = PermitState::Expired;
                Err(Error::PermitExpired)
            }
            PermitState::Pending => Ok(()),
            PermitState::Expired => Err(Error::PermitExpired),
            state => Err(Error::PermitFinished { state }),
        }
    }

    /// Settles a pending permit at `actual` (cancels it, if `None`) and
    /// marks it `state`.
    fn finish(&self, permit: &mut Permit, actual: Option<&Usage>, state: PermitState, now: u64) -> Result<()> {
        self.check_pending(permit, now)?;
        let route = self.registry.route_entry(permit.route.id);
        let parts = match (route.scopes.unit_plan(), actual) {
            // A request sent on a route that counts only requests took what
            // it was charged, one on each bucket: only its books change.
            (Some(_), Some(_)) => CostParts::ONE,
            _ => self.move_charges(permit, route, actual, now),
        };
        let (id, slot, at) = (permit.route.id, permit.ttl_slot, self.ttl.index(now));
        self.pending.finished(id, slot, at, &parts, route.booked);
        permit.state = state;
        Ok(())
    }

    /// Moves every charge of a pending permit on `route` to `actual`
    /// (nothing, if `None`) and frees its slots; returns what its books
    /// held of it.
    #[inline(always)]
    fn move_charges(
        &self,
        permit: &Permit,
        route: &registry::RouteEntry,
        actual: Option<&Usage>,
        now: u64,
    ) -> CostParts {
        let price = route.price.as_ref();
        let charged = Costs::of(&permit.charged(), permit.charged_expected_output(), price);
        let sent = actual.is_some();
        let actual = actual.map_or(Costs::NONE, |usage| Costs::actual(usage, price));
        self.for_each_limit(permit, |limit, bucket, pace| {
            let (cost, at) = (limit.cost(&charged), permit.acquired_at);
            match pace {
                _ if limit.dimension == crate::Dimension::Concurrency => limit.release(bucket, permit.ttl_slot),
                _ if cost == limit.cost(&actual) => {}
                Some(pace) if !sent => limit.cancel_paced(bucket, cost, at, now, pace),
                _ => adjust(limit, bucket, cost, limit.cost(&actual), at, now, pace),
            }
        });
        CostParts::of(&charged)
    }

    #[inline]
    fn for_each_limit(&self, permit: &Permit, mut f: impl FnMut(&Limit, &limit::Bucket, Option<&pace::Pace>)) {
        for scope in self.registry.route(permit.route.id) {
            let limits = scope.limits.iter().zip(scope.buckets.iter());
            match scope.adaptation.as_deref() {
                None => limits.for_each(|(limit, bucket)| f(limit, bucket, None)),
                Some(a) => limits.zip(a.paces.iter()).for_each(|((limit, bucket), pace)| f(limit, bucket, Some(pace))),
            }
        }
    }

    /// Every scope and counter at `now`. Each value is read atomically; the
    /// whole is not one atomic picture while other threads run.
    pub fn snapshot(&self, now: u64) -> crate::Snapshot {
        crate::snapshot::build(self, now)
    }

    /// One scope's limits at `now`.
    pub fn scope_snapshot(&self, id: ScopeId, now: u64) -> Result<crate::ScopeSnapshot> {
        let reserved = self.reserved(now).remove(&id.index).unwrap_or_default();
        Ok(crate::snapshot::scope(self.scope(id)?, &reserved, now, self.ttl))
    }

    pub(crate) fn registry(&self) -> &Registry {
        &self.registry
    }

    pub(crate) fn ttl(&self) -> TtlSlots {
        self.ttl
    }

    /// What the permits pending at `now` reserve, per scope.
    pub(crate) fn reserved(&self, now: u64) -> HashMap<ScopeIndex, CostParts> {
        let mut by_scope: HashMap<ScopeIndex, CostParts> = HashMap::new();
        for (route, parts) in self.pending.reserved(self.ttl.index(now)) {
            for scope in self.registry.route(route) {
                by_scope.entry(scope.index).or_default().add(&parts);
            }
        }
        by_scope
    }

    /// The admission counters as of `now`.
    pub(crate) fn counts(&self, now: u64) -> Counts {
        Counts {
            admitted: self.pending.admitted_count(),
            rate_limited: self.refusals.rate_limited.load(Ordering::Relaxed),
            never_fits: self.refusals.never_fits.load(Ordering::Relaxed),
            circuit_open: self.refusals.circuit_open.load(Ordering::Relaxed),
            expired: self.pending.expired_count(self.ttl.index(now)),
            provider_rejected: self.refusals.provider_rejected.load(Ordering::Relaxed),
        }
    }
}

/// [`Limit::adjust`], or [`Limit::adjust_paced`] on a provider scope.
#[inline]
fn adjust(
    limit: &Limit,
    bucket: &limit::Bucket,
    charged: u64,
    actual: u64,
    at: u64,
    now: u64,
    pace: Option<&pace::Pace>,
) {
    match pace {
        None => limit.adjust(bucket, charged, actual, at, now),
        Some(pace) => limit.adjust_paced(bucket, charged, actual, at, now, pace),
    }
}

/// The admission counters, for snapshots.
pub(crate) struct Counts {
    pub admitted: u64,
    pub rate_limited: u64,
    pub never_fits: u64,
    pub circuit_open: u64,
    pub expired: u64,
    pub provider_rejected: u64,
}

/// The error for a handle made by another ledger.
#[cold]
fn foreign(field: &'static str, value: String) -> Error {
    Error::InvalidRequest { field, value, reason: format!("this {field} belongs to another governor") }
}
