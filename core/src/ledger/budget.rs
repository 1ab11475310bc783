//! How much of the `cost` budgets on a route is spent, and when it will
//! have fallen below a threshold again: what a profile's budget thresholds
//! (degrade, refuse) are checked against.

use std::time::Duration;

use super::permit::{Permit, PermitState, Route};
use super::registry::ScopeIndex;
use super::Ledger;
use crate::dimension::Costs;
use crate::{Dimension, Error, Result};

/// The most spent `cost` budget on a route.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Spent {
    /// Spent and reserved ÷ budget, from 0 up (past 1 in debt).
    pub fraction: f64,
    scope: ScopeIndex,
    limit: usize,
}

impl Ledger {
    /// The most spent of the `cost` budgets on `route` at `now`, or `None`
    /// when it has none. With `own`, a permit pending on `route`, what it
    /// reserved is left out: the spend as it stood before its request, as
    /// a threshold is checked for a request not yet admitted.
    pub(crate) fn budget_spent(&self, route: Route, own: Option<&Permit>, now: u64) -> Result<Option<Spent>> {
        self.check_route(route)?;
        let entry = self.registry.route_entry(route.id);
        let pending = |p: &&Permit| p.route == route && p.state == PermitState::Pending;
        let own_costs =
            own.filter(pending).map(|p| Costs::of(&p.charged(), p.charged_expected_output(), entry.price.as_ref()));
        let mut most: Option<Spent> = None;
        for scope in self.registry.route(route.id) {
            for (l, (limit, bucket)) in scope.limits.iter().zip(scope.buckets.iter()).enumerate() {
                if limit.dimension != Dimension::Cost {
                    continue;
                }
                let (available, _) = limit.usage_at(bucket, now, self.ttl, scope.pace(l));
                let reserved = own_costs.as_ref().map_or(0, |costs| limit.cost(costs));
                let spent = limit.amount as f64 - available as f64 - reserved as f64;
                let fraction = spent / limit.amount as f64;
                if most.is_none_or(|m| fraction > m.fraction) {
                    most = Some(Spent { fraction, scope: scope.index, limit: l });
                }
            }
        }
        Ok(most)
    }

    /// The refusal of a request because `spent` is at or past `threshold`
    /// of its budget: a rate limit on the budget's scope and the `cost`
    /// dimension, until the spend has fallen below the threshold.
    #[cold]
    pub(crate) fn budget_refusal(&self, spent: &Spent, threshold: f64, now: u64) -> Error {
        let scope = self.registry.get(spent.scope);
        let (limit, bucket) = (&scope.limits[spent.limit], &scope.buckets[spent.limit]);
        let below = ((threshold * limit.amount as f64).ceil() as u64).saturating_sub(1);
        let at = limit.spent_at_most_at(bucket, below, now);
        Error::RateLimited {
            scope: scope.path.clone(),
            dimension: Dimension::Cost,
            retry_after: Some(Duration::from_nanos(at.saturating_sub(now))),
        }
    }
}
