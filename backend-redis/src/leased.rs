//! Leased mode's Redis side: taking, renewing and returning a process's
//! lease on a shared scope (the local side is [`crate::lease`]).

use std::time::Duration;

use crate::errors::{Error, Result};
use crate::governor::{Hold, Inner};
use crate::lease::lease_size;
use crate::settings::Mode;
use crate::store::LeaseAsk;

impl Inner {
    /// Leased mode: from the local lease without a round trip, or after
    /// renewing it (returning what is unused) when it is spent or late.
    pub(crate) fn acquire_leased(&self, i: usize, costs: Vec<u64>) -> redis::RedisResult<Result<Hold>> {
        let lease = &self.leases[i];
        let hold = |generation, from_redis| Hold {
            scope: i,
            lease: Some(generation),
            epoch: String::new(),
            slot: None,
            reserved: costs.clone(),
            from_redis,
        };
        if let Some(generation) = lease.try_take(&costs, self.clock.now()) {
            return Ok(Ok(hold(generation, false)));
        }
        let _renewing = lease.renewing.lock();
        let now = self.clock.now();
        if let Some(generation) = lease.try_take(&costs, now) {
            return Ok(Ok(hold(generation, false)));
        }
        let waits_us = self.renew(i, Some(&costs), now)?;
        Ok(match lease.try_take(&costs, now) {
            Some(generation) => Ok(hold(generation, true)),
            None => Err(self.lease_refusal(i, &costs, &waits_us)),
        })
    }

    /// The refusal of a request on scope `i` that its renewed lease cannot
    /// serve. It names the limit Redis says the request waits longest for,
    /// and that wait; or, when Redis granted it all and another thread took
    /// the lease first, the limit now short, with no time (it is polled).
    fn lease_refusal(&self, i: usize, costs: &[u64], waits_us: &[u64]) -> Error {
        let scope = &self.scopes[i];
        // Reversed, as `max_by_key` keeps the last of equals: ties name the first limit.
        let longest = waits_us.iter().enumerate().rev().max_by_key(|&(_, wait)| wait).filter(|&(_, &wait)| wait > 0);
        let (refusing, retry_after) = match longest {
            Some((limit, &wait)) => (limit, Some(Duration::from_micros(wait))),
            None => (self.leases[i].short_limit(costs).unwrap_or(0), None),
        };
        Error::RateLimited { scope: scope.path.clone(), dimension: scope.limits[refusing].dimension, retry_after }
    }

    /// Returns scope `i`'s lease and, for `costs`, takes a new one sized
    /// from recent demand (`None`: take nothing). Call holding `renewing`.
    /// Per limit, how long Redis says `costs` waits to fit (see `lease.lua`).
    fn renew(&self, i: usize, costs: Option<&[u64]>, now: u64) -> redis::RedisResult<Vec<u64>> {
        let (scope, lease) = (&self.scopes[i], &self.leases[i]);
        let returned = lease.take_all();
        let processes = u64::from(self.settings.expected_processes);
        let want: Vec<u64> = match costs {
            Some(costs) => scope
                .limits
                .iter()
                .zip(costs)
                .zip(lease.demand(&returned.used))
                .map(|((limit, &cost), used)| lease_size(used, cost, (limit.burst() / processes).max(1)))
                .collect(),
            None => {
                lease.remember_demand(&returned.used);
                vec![0; scope.limits.len()]
            }
        };
        let no_costs = vec![0; scope.limits.len()];
        let returned_epoch = lease.epoch.lock().clone();
        let returned_token = lease.token.lock().clone();
        let token = format!("{:016x}", rand::random::<u64>());
        let process_id = self.process_id();
        let seen = self.epochs[i].lock().clone();
        let fresh = format!("{:016x}", rand::random::<u64>());
        let ttl = self.settings.lease_ttl;
        let ask = LeaseAsk {
            seen_epoch: seen.as_deref(),
            fresh_epoch: &fresh,
            safe_share: self.settings.safe_share(),
            lease_id: &process_id,
            ttl_us: ttl.as_micros() as u64,
            returned_epoch: returned_epoch.as_deref(),
            returned_token: returned_token.as_deref(),
            token: &token,
            give_back: &returned.give_back,
            want: &want,
            cost: costs.unwrap_or(&no_costs),
        };
        match self.store.lease(scope, &ask) {
            Ok(grant) => {
                self.saw_epoch(i, &grant.epoch, grant.reset);
                *lease.epoch.lock() = Some(grant.epoch);
                // Redis records only a lease that granted something.
                *lease.token.lock() = grant.grants.iter().any(|&g| g > 0).then_some(token);
                // Counted from before the call, so it ends before Redis's expiry.
                let usable = ttl.as_nanos() as u64 / 10 * 9;
                lease.install(&grant.grants, now.saturating_add(usable));
                Ok(grant.waits_us)
            }
            Err(e) => {
                lease.restore_after_failure(&returned);
                Err(e)
            }
        }
    }

    /// Returns every lease whose local deadline falls before `horizon`:
    /// what it holds or owes, and its record in Redis even if used up (but
    /// not while Redis is away: the requests' probes find out when it is back).
    pub(crate) fn return_leases(&self, horizon: u64) {
        for (i, lease) in self.leases.iter().enumerate() {
            let due = lease.holds_anything() || (lease.has_record() && !self.health.degraded());
            if self.scopes[i].mode != Mode::Leased || !due || lease.deadline() > horizon {
                continue;
            }
            let _renewing = lease.renewing.lock();
            let now = self.clock.now();
            match self.renew(i, None, now) {
                Ok(_) => self.health.on_success(),
                Err(e) => {
                    self.health.on_error(&e, now, self.settings.retry_interval);
                    self.store.drop_idle();
                }
            }
        }
    }
}
