//! The ledger: every limit of every scope, reserved all-or-nothing, settled,
//! refunded or expired. Sans-IO: each call takes `now` in nanoseconds and
//! nothing here reads a clock, sleeps or takes a lock.

pub mod atomic;
pub mod gcra;
pub(crate) mod limit;
pub(crate) mod permit;
pub(crate) mod registry;
pub mod ring;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use limit::{Limit, TtlSlots};
use permit::{Permit, PermitState, Request, Route};
use registry::{Registry, Scope, ScopeId, ScopeList};
use ring::{Added, Ring};

use crate::config::{compile, Config};
use crate::{Error, Result, Usage};

/// Admission counters, as of a snapshot.
#[derive(Debug, Default)]
struct Counters {
    admitted: AtomicU64,
    rate_limited: AtomicU64,
    never_fits: AtomicU64,
    /// Permits whose TTL slot was reset while they were still unsettled.
    expired: AtomicU64,
}

/// The lock-free ledger. Most users want [`crate::Governor`], which owns a
/// clock and calls this with its time.
#[derive(Debug)]
pub struct Ledger {
    registry: Registry,
    ttl: TtlSlots,
    /// Unsettled permits per TTL slot: what stays in a slot past its life expired.
    pending: Ring<AtomicU64>,
    counters: Counters,
}

impl Ledger {
    /// Builds a ledger from a config, validating it.
    pub fn new(config: &Config) -> Result<Self> {
        let compiled = compile(config)?;
        Ok(Ledger {
            registry: Registry::new(compiled.configured, compiled.templates),
            ttl: TtlSlots::new(compiled.permit_ttl_ns),
            pending: TtlSlots::ring(),
            counters: Counters::default(),
        })
    }

    /// Interns `path` and returns the id of the deepest scope on it (the
    /// scope at `path` itself when one is configured or templated there),
    /// instantiating template scopes met for the first time.
    pub fn scope_id(&self, path: &str) -> Result<ScopeId> {
        let chain = self.registry.resolve(path)?;
        Ok(*chain.last().expect("resolve never returns an empty chain"))
    }

    /// The path of a scope.
    pub fn scope_path(&self, id: ScopeId) -> &str {
        &self.registry.get(id).path
    }

    /// Number of scopes instantiated, configured and from templates.
    pub fn scope_count(&self) -> usize {
        self.registry.len()
    }

    /// Resolves request paths to the route of every scope they charge.
    pub fn route<S: AsRef<str>>(&self, paths: &[S]) -> Result<Route> {
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
        Ok(Route::from_scopes(scopes))
    }

    /// Reserves every limit of every scope on the request's route at `now`,
    /// or nothing.
    pub fn try_acquire(&self, request: &Request<'_>, now: u64) -> Result<Permit> {
        let estimate = request.estimate();
        estimate.validate()?;
        let scopes = &request.route.scopes;
        if let Err(e) = self.check_fits(scopes, &estimate) {
            self.counters.never_fits.fetch_add(1, Ordering::Relaxed);
            return Err(e);
        }
        for (s, &id) in scopes.iter().enumerate() {
            let scope = self.registry.get(id);
            for (l, limit) in scope.limits.iter().enumerate() {
                let cost = limit.cost(&estimate);
                if let Err(retry_at) = limit.try_reserve(&scope.buckets[l], cost, now, self.ttl) {
                    self.rollback(scopes, s, l, &estimate, now);
                    self.counters.rate_limited.fetch_add(1, Ordering::Relaxed);
                    return Err(Error::RateLimited {
                        scope: scope.path.clone(),
                        dimension: limit.dimension,
                        retry_after: retry_at.map(|at| Duration::from_nanos(at.saturating_sub(now))),
                    });
                }
            }
        }
        if let Added::Landed { evicted } = self.pending.add(self.ttl.index(now), 1) {
            self.counters.expired.fetch_add(evicted, Ordering::Relaxed);
        }
        self.counters.admitted.fetch_add(1, Ordering::Relaxed);
        Ok(Permit {
            scopes: scopes.clone(),
            charged: estimate,
            streamed_output: 0,
            acquired_at: now,
            expires_at: self.ttl.expires_at(now),
            state: PermitState::Pending,
        })
    }

    /// A cost above a limit's burst can never be admitted: say so at once.
    fn check_fits(&self, scopes: &[ScopeId], estimate: &Usage) -> Result<()> {
        for &id in scopes {
            let scope = self.registry.get(id);
            for limit in scope.limits.iter() {
                let cost = limit.cost(estimate);
                if cost > limit.burst() {
                    return Err(Error::NeverFits {
                        scope: scope.path.clone(),
                        dimension: limit.dimension,
                        cost,
                        burst: limit.burst(),
                    });
                }
            }
        }
        Ok(())
    }

    /// Undoes, in reverse order, every reservation made before limit `l` of scope `s`.
    fn rollback(&self, scopes: &[ScopeId], s: usize, l: usize, estimate: &Usage, now: u64) {
        for (i, &id) in scopes[..=s].iter().enumerate().rev() {
            let scope = self.registry.get(id);
            let reserved = if i == s { l } else { scope.limits.len() };
            for (limit, bucket) in scope.limits[..reserved].iter().zip(&scope.buckets[..reserved]).rev() {
                limit.rollback(bucket, limit.cost(estimate), now, self.ttl);
            }
        }
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
        self.finish(permit, None, PermitState::Cancelled, now)
    }

    /// Charges `tokens` more streamed output as it arrives. Output within the
    /// reservation is already paid for; beyond it, it is charged at once.
    pub fn add_output(&self, permit: &mut Permit, tokens: u64, now: u64) -> Result<()> {
        self.check_pending(permit, now)?;
        permit.streamed_output = permit.streamed_output.saturating_add(tokens);
        if permit.streamed_output <= permit.charged.output_tokens {
            return Ok(());
        }
        let raised = Usage { output_tokens: permit.streamed_output, ..permit.charged };
        self.for_each_limit(permit, |limit, bucket| {
            if limit.dimension.counts_output() {
                limit.adjust(bucket, limit.cost(&permit.charged), limit.cost(&raised), permit.acquired_at, now);
            }
        });
        permit.charged = raised;
        Ok(())
    }

    fn check_pending(&self, permit: &mut Permit, now: u64) -> Result<()> {
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

    /// Moves every charge of a pending permit to `actual` (nothing, if
    /// `None`), frees its slots and marks it `state`.
    fn finish(&self, permit: &mut Permit, actual: Option<&Usage>, state: PermitState, now: u64) -> Result<()> {
        self.check_pending(permit, now)?;
        let ttl = self.ttl;
        self.for_each_limit(permit, |limit, bucket| {
            if limit.dimension == crate::Dimension::Concurrency {
                limit.release(bucket, permit.acquired_at, ttl);
            } else {
                let actual_cost = actual.map_or(0, |a| limit.cost(a));
                limit.adjust(bucket, limit.cost(&permit.charged), actual_cost, permit.acquired_at, now);
            }
        });
        self.pending.sub(self.ttl.index(permit.acquired_at), 1);
        permit.state = state;
        Ok(())
    }

    #[inline]
    fn for_each_limit(&self, permit: &Permit, mut f: impl FnMut(&Limit, &limit::Bucket)) {
        for &id in &permit.scopes {
            let scope: &Scope = self.registry.get(id);
            for (limit, bucket) in scope.limits.iter().zip(scope.buckets.iter()) {
                f(limit, bucket);
            }
        }
    }

    /// Every scope and counter at `now`. Each value is read atomically; the
    /// whole is not one atomic picture while other threads run.
    pub fn snapshot(&self, now: u64) -> crate::Snapshot {
        crate::snapshot::build(self, now)
    }

    /// One scope's limits at `now`.
    pub fn scope_snapshot(&self, id: ScopeId, now: u64) -> crate::ScopeSnapshot {
        crate::snapshot::scope(self.registry.get(id), now, self.ttl)
    }

    pub(crate) fn registry(&self) -> &Registry {
        &self.registry
    }

    pub(crate) fn ttl(&self) -> TtlSlots {
        self.ttl
    }

    /// `(admitted, rate_limited, never_fits, expired)` as of `now`.
    pub(crate) fn counts(&self, now: u64) -> (u64, u64, u64, u64) {
        let c = &self.counters;
        let expired = c.expired.load(Ordering::Relaxed) + self.pending.stale_sum(self.ttl.index(now));
        (
            c.admitted.load(Ordering::Relaxed),
            c.rate_limited.load(Ordering::Relaxed),
            c.never_fits.load(Ordering::Relaxed),
            expired,
        )
    }
}
