//! How much room a route's provider scopes have, for routing among
//! deployments: the minimum over their limits of available ÷ limit.

use super::breaker::Gate;
use super::permit::Route;
use super::Ledger;
use crate::Result;

impl Ledger {
    /// The normalized headroom of `route`'s provider scopes at `now`: the
    /// least, over their limits, of what is available ÷ what the limit
    /// holds (its effective amount after AIMD), from 0 (full, or in debt) to
    /// 1 (idle). A route with no provider scope reads its own scopes.
    /// `None` when a provider scope's breaker is open (and no probe is due).
    pub fn headroom(&self, route: Route, now: u64) -> Result<Option<f64>> {
        self.check_route(route)?;
        let scopes = || self.registry.route(route.id).iter();
        let any_provider = scopes().any(|s| s.provider);
        let mut least: f64 = 1.0;
        for scope in scopes().filter(|s| s.provider || !any_provider) {
            if let Some(adaptation) = scope.adaptation.as_deref() {
                if matches!(adaptation.breaker.gate(now), Gate::Open(_)) {
                    return Ok(None);
                }
            }
            for (l, (limit, bucket)) in scope.limits.iter().zip(scope.buckets.iter()).enumerate() {
                let (available, in_use) = limit.usage_at(bucket, now, self.ttl, scope.pace(l));
                let size = (available.max(0) as f64) + in_use as f64;
                let share = if size > 0.0 { available.max(0) as f64 / size } else { 0.0 };
                least = least.min(share);
            }
        }
        Ok(Some(least))
    }
}
