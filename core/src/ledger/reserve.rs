//! Reserving: every limit of every scope on a request's route at once, or
//! nothing, and the refusal that says which limit refused and until when.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use super::breaker::{Breaker, Gate};
use super::gcra::RetryAt;
use super::limit::{Limit, PacedCharges};
use super::pending::Booked;
use super::permit::{Permit, PermitState, Request};
use super::registry::{self, RouteEntry, Scope};
use super::unit_plan::UnitCharge;
use super::Ledger;
use crate::dimension::{CostParts, Costs};
use crate::{Error, Result};

/// A request's reservation, made: the permit-TTL slot it was booked in,
/// and whether it goes as its breakers' probe.
#[derive(Debug, Clone, Copy)]
struct Admitted {
    slot: u64,
    probe: bool,
}

impl Ledger {
    /// [`Self::try_acquire`], counting its refusal if `COUNTED`.
    ///
    /// Always inlined, and the permit made here, in the caller's frame,
    /// rather than by the reserving functions: returned through memory,
    /// the permit was copied by the caller at once, in 16-byte loads of
    /// what had just been written in 8-byte stores (which the CPU cannot
    /// forward, and must wait out). Made in place, a 1 × 1 `try_acquire`
    /// takes 9.3 ns where it took 16.8 (criterion, BENCHMARKS.md).
    #[inline(always)]
    pub(super) fn acquire<const COUNTED: bool>(&self, request: &Request, now: u64) -> Result<Permit> {
        self.check_route(request.route)?;
        request.validate()?;
        let route = self.registry.route_entry(request.route.id);
        let admitted = match route.scopes.unit_plan() {
            Some(plan) => self.reserve_requests::<COUNTED>(request, route, plan, now)?,
            None => self.reserve_tokens::<COUNTED>(request, route, now)?,
        };
        Ok(self.permit(request, admitted, now))
    }

    /// [`Self::acquire`]'s reservation on a route that charges tokens or a
    /// price, or adapts to a provider: each limit charges its kind of cost,
    /// provider scopes at their pace and behind their breaker.
    #[inline(always)]
    fn reserve_tokens<const COUNTED: bool>(&self, request: &Request, route: &RouteEntry, now: u64) -> Result<Admitted> {
        let estimate = request.estimate();
        let expected_output = request.expected_output();
        let costs = Costs::of(&estimate, expected_output, route.price.as_ref());
        let scopes = &route.scopes[..];
        let mut paced = PacedCharges::new();
        let mut probes = false;
        for (s, scope) in scopes.iter().enumerate() {
            let reserved = match scope.adaptation.as_deref() {
                // llmgov's own budgets: the plain loop, written out here so
                // that it stays as tight as before provider scopes learned to
                // adapt (as a function returning the refusing limit, an
                // acquire on 6 scopes × 4 limits took 5% more instructions).
                None => {
                    for (l, (limit, bucket)) in scope.limits.iter().zip(scope.buckets.iter()).enumerate() {
                        let cost = limit.cost(&costs);
                        let refused =
                            if cost > limit.burst { Err(None) } else { limit.try_reserve(bucket, cost, now, self.ttl) };
                        if let Err(retry_at) = refused {
                            self.rollback(scopes, s, l, &costs, now, &mut paced);
                            let error = self.refusal(scopes, &costs, scope, limit, retry_at, now);
                            return Err(self.counted::<COUNTED>(error));
                        }
                    }
                    continue;
                }
                Some(adaptation) => match adaptation.breaker.gate(now) {
                    Gate::Open(until) => {
                        self.rollback(scopes, s, 0, &costs, now, &mut paced);
                        return Err(self.counted::<COUNTED>(self.circuit_open(scope, until, now)));
                    }
                    gate => {
                        probes |= matches!(gate, Gate::Probe(_));
                        self.reserve_provider_scope(scope, adaptation, &costs, now, &mut paced)
                    }
                },
            };
            if let Err((l, retry_at)) = reserved {
                self.rollback(scopes, s, l, &costs, now, &mut paced);
                let error = self.refusal(scopes, &costs, scope, &scope.limits[l], retry_at, now);
                return Err(self.counted::<COUNTED>(error));
            }
        }
        let probe =
            probes && self.claim_probes(scopes, &costs, now, &mut paced).map_err(|e| self.counted::<COUNTED>(e))?;
        let slot = self.ttl.index(now);
        let (id, parts) = (request.route.id, &CostParts::of(&costs));
        self.pending.admitted(id, slot, parts, route.booked);
        Ok(Admitted { slot, probe })
    }

    /// [`Self::acquire`]'s reservation on a route whose limits are all
    /// token buckets of requests, none adapting to a provider: each takes
    /// one unit's refill time, no token counts are worked out (until a
    /// refusal needs them), and only the count is booked.
    #[inline(always)]
    fn reserve_requests<const COUNTED: bool>(
        &self,
        request: &Request,
        route: &RouteEntry,
        plan: &[UnitCharge],
        now: u64,
    ) -> Result<Admitted> {
        for charge in plan {
            if let Err(RetryAt(at)) = charge.unit.try_reserve(charge.tat(), now) {
                return Err(self.counted::<COUNTED>(self.refuse_requests(request, route, charge.tat(), at, now)));
            }
        }
        let slot = self.ttl.index(now);
        self.pending.admitted(request.route.id, slot, &CostParts::ONE, Booked::Count);
        Ok(Admitted { slot, probe: false })
    }

    /// Rolls back what [`Self::reserve_requests`] reserved before the limit
    /// of bucket `refused` refused (until `at`), and says why it refused.
    /// (The bucket says which scope refused: scopes made from one template
    /// share their limits but not their buckets. Searched for here rather
    /// than counted in the loop, which cost 23 instructions an acquire on 6
    /// scopes, callgrind.)
    #[cold]
    fn refuse_requests(&self, request: &Request, route: &RouteEntry, refused: &AtomicU64, at: u64, now: u64) -> Error {
        let costs = Costs::of(&request.estimate(), request.expected_output(), route.price.as_ref());
        let scopes = &route.scopes[..];
        let (s, l) = scopes
            .iter()
            .enumerate()
            .find_map(|(s, scope)| Some((s, scope.buckets.iter().position(|b| b.is_tat(refused))?)))
            .expect("the refusing bucket is on the route");
        self.rollback(scopes, s, l, &costs, now, &mut PacedCharges::new());
        self.refusal(scopes, &costs, &scopes[s], &scopes[s].limits[l], Some(at), now)
    }

    /// The permit for `request`, admitted at `now`.
    #[inline(always)]
    fn permit(&self, request: &Request, admitted: Admitted, now: u64) -> Permit {
        Permit {
            route: request.route,
            class: request.class,
            estimate: request.estimate(),
            expected_output: request.expected_output(),
            streamed_output: 0,
            acquired_at: now,
            ttl_slot: admitted.slot,
            expires_at: self.ttl.expires_at(admitted.slot),
            state: PermitState::Pending,
            probe: admitted.probe,
        }
    }

    /// Reserves every limit of a provider scope at its limits' paces, or
    /// says which limit refused (and when it could pass).
    fn reserve_provider_scope(
        &self,
        scope: &Scope,
        adaptation: &registry::Adaptation,
        costs: &Costs,
        now: u64,
        paced: &mut PacedCharges,
    ) -> Result<(), (usize, Option<u64>)> {
        let limits = scope.limits.iter().zip(scope.buckets.iter()).zip(adaptation.paces.iter());
        for (l, ((limit, bucket), pace)) in limits.enumerate() {
            let cost = limit.cost(costs);
            let refused = if cost > limit.burst {
                Err(None)
            } else {
                limit.try_reserve_paced(bucket, cost, now, self.ttl, pace, paced)
            };
            refused.map_err(|retry_at| (l, retry_at))?;
        }
        Ok(())
    }

    /// A fully reserved request on a route with breakers whose pause is
    /// over goes as their probe, if it claims every one first; otherwise it
    /// takes nothing and waits for the probes out. True if it claimed any
    /// (an answer may have closed them all meanwhile).
    #[cold]
    fn claim_probes(&self, scopes: &[Arc<Scope>], costs: &Costs, now: u64, paced: &mut PacedCharges) -> Result<bool> {
        let adaptive = &self.registry.adaptive;
        // Each claimed breaker with the end of its own pause, to give back.
        let mut claimed: Vec<(&Breaker, u64)> = Vec::new();
        for scope in scopes {
            let Some(adaptation) = scope.adaptation.as_deref() else { continue };
            let breaker = &adaptation.breaker;
            match breaker.gate(now) {
                Gate::Closed => continue,
                Gate::Probe(until) if breaker.claim_probe(adaptive, until, now) => claimed.push((breaker, until)),
                Gate::Probe(_) | Gate::Open(_) => {
                    for (taken, until) in &claimed {
                        taken.release_probe(adaptive, *until, now);
                    }
                    let last = scopes.len() - 1;
                    self.rollback(scopes, last, scopes[last].limits.len(), costs, now, paced);
                    let until = match adaptation.breaker.gate(now) {
                        Gate::Open(until) => until,
                        _ => now,
                    };
                    return Err(self.circuit_open(scope, until, now));
                }
            }
        }
        Ok(!claimed.is_empty())
    }

    #[cold]
    fn circuit_open(&self, scope: &Scope, until: u64, now: u64) -> Error {
        Error::CircuitOpen { scope: scope.path.clone(), retry_after: Duration::from_nanos(until.saturating_sub(now)) }
    }

    /// The error for a refused request. A cost above any limit's burst can
    /// never be admitted, so that is reported first, even when another limit
    /// refused before the reservation reached it.
    #[cold]
    fn refusal(
        &self,
        scopes: &[Arc<Scope>],
        costs: &Costs,
        scope: &Scope,
        limit: &Limit,
        retry_at: Option<u64>,
        now: u64,
    ) -> Error {
        if let Some(error) = never_fits(scopes, costs) {
            return error;
        }
        Error::RateLimited {
            scope: scope.path.clone(),
            dimension: limit.dimension,
            retry_after: retry_at.map(|at| Duration::from_nanos(at.saturating_sub(now))),
        }
    }

    /// [`Error::NeverFits`] if `request` costs more than a limit on its
    /// route holds at once; reserves nothing. For a request about to wait,
    /// which may not reach the ledger before its deadline.
    pub(crate) fn check_fits(&self, request: &Request) -> Result<()> {
        self.check_route(request.route)?;
        let route = self.registry.route_entry(request.route.id);
        let costs = Costs::of(&request.estimate(), request.expected_output(), route.price.as_ref());
        never_fits(&route.scopes, &costs).map_or(Ok(()), Err)
    }

    /// Undoes, in reverse order, every reservation made before limit `l` of scope `s`.
    #[cold]
    fn rollback(&self, scopes: &[Arc<Scope>], s: usize, l: usize, costs: &Costs, now: u64, paced: &mut PacedCharges) {
        for (i, scope) in scopes[..=s].iter().enumerate().rev() {
            let reserved = if i == s { l } else { scope.limits.len() };
            for (j, (limit, bucket)) in
                scope.limits[..reserved].iter().zip(&scope.buckets[..reserved]).enumerate().rev()
            {
                match scope.pace(j) {
                    None => limit.rollback(bucket, limit.cost(costs), now, self.ttl),
                    Some(_) => limit.rollback_paced(bucket, limit.cost(costs), now, self.ttl, paced),
                }
            }
        }
    }
}

/// [`Error::NeverFits`] for the first limit on `scopes` that `costs` exceed
/// the whole burst of, if any.
fn never_fits(scopes: &[Arc<Scope>], costs: &Costs) -> Option<Error> {
    scopes.iter().find_map(|scope| {
        let limit = scope.limits.iter().find(|l| l.cost(costs) > l.burst)?;
        let (cost, burst) = (limit.cost(costs), limit.burst);
        Some(Error::NeverFits { scope: scope.path.clone(), dimension: limit.dimension, cost, burst })
    })
}
