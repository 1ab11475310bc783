//! Reserving a request on its local, shared and fallback parts at once,
//! and reconciling the permit with the provider's usage on each of them.

use std::sync::atomic::Ordering;
use std::time::Duration;

use llmgov::{Permit, Request, Route, Usage};

use super::{HeldSlot, Hold, Inner, SharedPermit, SharedRoute};
use crate::errors::{Error, Result};
use crate::settings::Mode;
use crate::shared::{Charge, Kind};
use crate::store::{Admission, Ask, Reconcile};

fn request(route: Route, estimate: Usage) -> Request {
    Request::new(route)
        .input_tokens(estimate.input_tokens)
        .cached_input_tokens(estimate.cached_input_tokens)
        .max_output_tokens(estimate.output_tokens)
}

impl Inner {
    pub(super) fn try_acquire(&self, route: &SharedRoute, estimate: Usage) -> Result<SharedPermit> {
        self.check_owner("route", route.owner)?;
        // The local engine checks its part; the shared scopes' costs are summed here.
        estimate.validate()?;
        let charge = self.charge(route.catalog, estimate)?;
        self.check_fits(route, &charge)?;
        let local = match route.local {
            Some(r) => Some(self.local.try_acquire(&request(r, estimate)).map_err(Error::from_core)?),
            None => None,
        };
        let acquired_at = local.as_ref().map_or_else(|| self.clock.now(), Permit::acquired_at);
        let expires_at = local.as_ref().map_or(acquired_at.saturating_add(self.permit_ttl_ns), Permit::expires_at);
        let mut permit = SharedPermit {
            owner: self.owner,
            local,
            fallback: None,
            outage: None,
            catalog: route.catalog,
            holds: Vec::new(),
            providers: route.providers.clone(),
            fallback_route: route.fallback,
            reconciled: false,
            acquired_at,
            expires_at,
        };
        let Some(fallback_route) = route.fallback else { return Ok(permit) };
        let now = self.clock.now();
        if self.health.redis_usable(now, self.settings.retry_interval) {
            match self.acquire_shared(&route.shared, &charge) {
                Ok(Ok(holds)) => {
                    // A probe served from leases alone never reached Redis.
                    if holds.iter().any(|hold| hold.from_redis) {
                        self.health.on_success();
                    }
                    permit.holds = holds;
                    self.repay_outage(&route.shared, now);
                    return Ok(permit);
                }
                Ok(Err(denial)) => {
                    self.health.on_success();
                    self.release_local(&mut permit);
                    return Err(denial);
                }
                Err(e) => {
                    self.health.on_error(&e, now, self.settings.retry_interval);
                    self.store.drop_idle();
                }
            }
        }
        match self.fallback.try_acquire(&request(fallback_route, estimate)) {
            Ok(granted) => {
                self.health.on_fallback_admission();
                for &i in route.shared.iter() {
                    self.outage.charge(&self.scopes[i], i, &charge);
                }
                permit.fallback = Some(granted);
                permit.outage = Some((route.shared.clone(), charge));
                Ok(permit)
            }
            Err(e) => {
                self.release_local(&mut permit);
                Err(Error::from_core(e))
            }
        }
    }

    /// A route or permit of another governor names scopes by its indices:
    /// refused, as the core refuses another governor's.
    pub(super) fn check_owner(&self, field: &'static str, owner: u64) -> Result<()> {
        if owner == self.owner {
            return Ok(());
        }
        let reason = format!("this {field} belongs to another RedisGovernor");
        Err(llmgov::Error::InvalidRequest { field, value: format!("{owner:016x}"), reason }.into())
    }

    /// `usage` with its price on `route` (of the whole config).
    fn charge(&self, route: Route, usage: Usage) -> Result<Charge> {
        Ok(Charge { usage, price: self.catalog.price_of(route, &usage)? })
    }

    fn check_fits(&self, route: &SharedRoute, charge: &Charge) -> Result<()> {
        for &i in route.shared.iter() {
            let scope = &self.scopes[i];
            for limit in &scope.limits {
                let cost = limit.cost(charge);
                if cost > limit.burst() {
                    let (scope, dimension, burst) = (scope.path.clone(), limit.dimension, limit.burst());
                    return Err(Error::NeverFits { scope, dimension, cost, burst });
                }
            }
        }
        Ok(())
    }

    fn release_local(&self, permit: &mut SharedPermit) {
        if let Some(local) = permit.local.as_mut() {
            // A permit just granted is live: cancelling it cannot fail.
            let _ = self.local.cancel(local);
        }
    }

    /// One script per shared scope, in route order; a refusal (or an error)
    /// gives back the scopes already reserved, so the request holds all or nothing.
    fn acquire_shared(&self, shared: &[usize], charge: &Charge) -> redis::RedisResult<Result<Vec<Hold>>> {
        let mut holds: Vec<Hold> = Vec::with_capacity(shared.len());
        for &i in shared {
            match self.acquire_scope(i, charge) {
                Ok(Ok(hold)) => holds.push(hold),
                other => {
                    for hold in &holds {
                        // Best effort: a failed give-back leaves capacity charged, never over-admits.
                        let _ = self.reconcile_hold(hold, None);
                    }
                    return other.map(|denial| denial.map(|_| Vec::new()));
                }
            }
        }
        Ok(Ok(holds))
    }

    fn acquire_scope(&self, i: usize, charge: &Charge) -> redis::RedisResult<Result<Hold>> {
        let scope = &self.scopes[i];
        let costs: Vec<u64> = scope.limits.iter().map(|l| l.cost(charge)).collect();
        if scope.mode == Mode::Leased {
            return self.acquire_leased(i, costs);
        }
        let slot = scope
            .has_slots()
            .then(|| format!("{}:{}", self.process_id(), self.next_slot.fetch_add(1, Ordering::Relaxed)));
        let seen = self.epochs[i].lock().clone();
        let fresh = format!("{:016x}", rand::random::<u64>());
        let ask = Ask {
            costs: &costs,
            seen_epoch: seen.as_deref(),
            fresh_epoch: &fresh,
            safe_share: self.settings.safe_share(),
            slot: slot.as_deref().unwrap_or(""),
            slot_ttl_us: self.settings.slot_ttl.as_micros() as u64,
        };
        let answer = self.store.acquire(scope, &ask)?;
        let (epoch, reset) = match &answer {
            Admission::Admitted { epoch, reset } | Admission::Refused { epoch, reset, .. } => (epoch.clone(), *reset),
        };
        self.saw_epoch(i, &epoch, reset);
        if let (Admission::Admitted { .. }, Some(slot)) = (&answer, &slot) {
            let expires = self.clock.now().saturating_add(self.permit_ttl_ns);
            self.held[i].lock().insert(slot.clone(), HeldSlot { expires, epoch: epoch.clone() });
        }
        if reset {
            // This process's slots in flight were lost with the state: counted
            // again now, not at the next heartbeat.
            self.keep_slots(i, self.clock.now());
        }
        match answer {
            Admission::Admitted { .. } => {
                Ok(Ok(Hold { scope: i, lease: None, epoch, slot, reserved: costs, from_redis: true }))
            }
            Admission::Refused { limit, retry_us, .. } => Ok(Err(Error::RateLimited {
                scope: scope.path.clone(),
                dimension: scope.limits[limit].dimension,
                retry_after: retry_us.map(Duration::from_micros),
            })),
        }
    }

    /// Settles (`Some(actual)`) or cancels (`None`) every part of a permit.
    pub(super) fn reconcile(&self, permit: &mut SharedPermit, actual: Option<Usage>) -> Result<()> {
        self.check_owner("permit", permit.owner)?;
        if permit.reconciled {
            return Err(Error::AlreadyReconciled);
        }
        // Before anything changes: a refused usage leaves the permit pending,
        // to be settled again or cancelled (its slots still held).
        if let Some(usage) = &actual {
            usage.validate()?;
        }
        let spent = actual.map(|usage| self.charge(permit.catalog, usage)).transpose()?;
        permit.reconciled = true;
        if self.clock.now() >= permit.expires_at {
            // As the core's permits: charged as estimated, and what it held
            // lapses on its own (slots are no longer heart-beaten).
            return Err(llmgov::Error::PermitExpired.into());
        }
        for (governor, part) in [(&self.local, &mut permit.local), (&self.fallback, &mut permit.fallback)] {
            if let Some(p) = part.as_mut() {
                match actual {
                    Some(usage) => governor.settle(p, usage)?,
                    None => governor.cancel(p)?,
                }
            }
        }
        if let Some((shared, estimate)) = &permit.outage {
            for &i in shared.iter() {
                self.outage.reconcile(&self.scopes[i], i, estimate, spent.as_ref());
            }
        }
        let now = self.clock.now();
        for hold in &permit.holds {
            if let Err(e) = self.reconcile_hold(hold, spent.as_ref()) {
                // Refunds are lost (capacity stays charged); a slot comes back after its TTL.
                self.health.on_error(&e, now, self.settings.retry_interval);
                self.store.drop_idle();
            }
        }
        Ok(())
    }

    pub(super) fn add_output(&self, permit: &mut SharedPermit, tokens: u64) -> Result<()> {
        self.check_owner("permit", permit.owner)?;
        if permit.reconciled {
            return Err(Error::AlreadyReconciled);
        }
        if self.clock.now() >= permit.expires_at {
            return Err(llmgov::Error::PermitExpired.into());
        }
        // Checked here too for a permit with no local part to check it.
        if tokens > llmgov::MAX_TOKENS {
            let reason = format!("is more than {} tokens; no request is that large", llmgov::MAX_TOKENS);
            return Err(llmgov::Error::InvalidRequest { field: "tokens", value: tokens.to_string(), reason }.into());
        }
        // Both parts have streamed the same so far: a count the core refuses
        // (past `MAX_TOKENS`) is refused by the first, before any change.
        for (governor, part) in [(&self.local, &mut permit.local), (&self.fallback, &mut permit.fallback)] {
            if let Some(p) = part.as_mut() {
                governor.add_output(p, tokens)?;
            }
        }
        Ok(())
    }

    /// Charges the shared scopes what the safe share admitted on them
    /// while Redis was away (nothing to do, and no call, when nothing is owed).
    fn repay_outage(&self, shared: &[usize], now: u64) {
        for &i in shared {
            let owed = self.outage.take(i);
            if owed.is_empty() {
                continue;
            }
            let reconcile = Reconcile { epoch: "", slot: None, deltas: &owed };
            if let Err(e) = self.store.settle(&self.scopes[i], &reconcile) {
                self.outage.restore(i, &owed);
                self.health.on_error(&e, now, self.settings.retry_interval);
                self.store.drop_idle();
            }
        }
    }

    pub(crate) fn saw_epoch(&self, i: usize, epoch: &str, reset: bool) {
        if reset {
            self.health.on_state_reset();
            // The safe-share restart already stands for the unknown past,
            // this process's outage admissions included: not charged twice.
            self.outage.take(i);
        }
        *self.epochs[i].lock() = Some(epoch.to_owned());
    }

    fn reconcile_hold(&self, hold: &Hold, actual: Option<&Charge>) -> redis::RedisResult<()> {
        let scope = &self.scopes[hold.scope];
        if let Some(slot) = &hold.slot {
            self.held[hold.scope].lock().remove(slot);
        }
        let deltas: Vec<(usize, i64)> = scope
            .limits
            .iter()
            .zip(&hold.reserved)
            .enumerate()
            .filter(|(_, (limit, _))| matches!(limit.kind, Kind::Rate { .. }))
            .map(|(i, (limit, &reserved))| {
                let spent = actual.map_or(0, |charge| limit.cost(charge));
                (i, spent as i64 - reserved as i64)
            })
            .filter(|&(_, delta)| delta != 0)
            .collect();
        if let Some(generation) = hold.lease {
            self.leases[hold.scope].reconcile(generation, &deltas, self.clock.now());
            return Ok(());
        }
        let reconcile = Reconcile { epoch: &hold.epoch, slot: hold.slot.as_deref(), deltas: &deltas };
        self.store.settle(scope, &reconcile)
    }
}
