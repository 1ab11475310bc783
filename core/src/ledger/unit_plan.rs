//! A route's scopes, and for a route that charges only requests on token
//! buckets, its plan: each bucket's word beside what one request costs
//! there, laid out flat. An acquire on such a route goes from the plan
//! straight to the words it compare-and-swaps, rather than through each
//! scope, then its limits and buckets: a 1 × 1 `try_acquire` took 240
//! instructions that way and takes 206 so, a 6 × 1 one 481 and 321
//! (callgrind, BENCHMARKS.md).

use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use smallvec::SmallVec;

use super::gcra::OneUnit;
use super::limit::{Bucket, Rule};
use super::registry::Scope;

/// One token bucket of a route: what a request costs there, and its word.
#[derive(Debug)]
pub(crate) struct UnitCharge {
    pub unit: OneUnit,
    /// Points into the buckets of a scope of the [`RouteScopes`] holding
    /// this charge.
    tat: NonNull<AtomicU64>,
}

// SAFETY: a `UnitCharge` only reads through `tat`, an atomic (which is
// Sync), and what it points at lives as long as the charge (see `tat`).
unsafe impl Send for UnitCharge {}
unsafe impl Sync for UnitCharge {}

impl UnitCharge {
    /// The bucket's word.
    #[inline(always)]
    pub fn tat(&self) -> &AtomicU64 {
        // SAFETY: `tat` was made from a `&AtomicU64` inside a scope's
        // `buckets`, a boxed slice that never moves while the scope lives,
        // and the `RouteScopes` holding this charge holds that scope's
        // `Arc` (its fields are private, and set only by `RouteScopes::new`).
        unsafe { self.tat.as_ref() }
    }
}

/// The scopes of a route, sorted by index, held rather than looked up (a
/// lookup in the registry's vector per scope took a twentieth of an
/// acquire + settle on 6 scopes, callgrind); up to two live inline, one
/// pointer fewer to follow.
#[derive(Debug)]
pub(crate) struct RouteScopes {
    scopes: SmallVec<[Arc<Scope>; 2]>,
    /// Where every limit on the route is a token bucket charging one per
    /// request: those buckets, in the order of the scopes and their limits
    /// (the order reservations are made and rolled back in).
    unit_plan: Option<Box<[UnitCharge]>>,
}

impl RouteScopes {
    /// The scopes of a route, and its plan if `counts_only` (every limit on
    /// it charges one per request) and each limit is a token bucket.
    pub fn new(scopes: SmallVec<[Arc<Scope>; 2]>, counts_only: bool) -> Self {
        let buckets = scopes.iter().flat_map(|scope| scope.limits.iter().zip(scope.buckets.iter()));
        let charges = buckets.map(|(limit, bucket)| match (&limit.rule, bucket) {
            (Rule::TokenBucket(params), Bucket::Tat(tat)) => {
                Some(UnitCharge { unit: params.one_unit(), tat: NonNull::from(tat) })
            }
            _ => None,
        });
        let unit_plan = if counts_only { charges.collect() } else { None };
        RouteScopes { scopes, unit_plan }
    }

    /// The route's plan, if it charges only requests on token buckets.
    #[inline(always)]
    pub fn unit_plan(&self) -> Option<&[UnitCharge]> {
        self.unit_plan.as_deref()
    }
}

impl Deref for RouteScopes {
    type Target = [Arc<Scope>];

    #[inline(always)]
    fn deref(&self) -> &[Arc<Scope>] {
        &self.scopes
    }
}
