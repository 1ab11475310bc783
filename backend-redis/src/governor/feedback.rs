//! A provider's answer to a shared permit's request: the local scopes of
//! its route learn from it as the core's do, and a 429 holds its shared
//! provider scopes empty in Redis, so that every process holds back.

use std::time::{SystemTime, UNIX_EPOCH};

use llmgov::feedback::{cooldown, LimitShape};
use llmgov::{classify_response, Classification, LimitKind, ProviderHint, Route};

use super::{Inner, RedisGovernor, SharedPermit};
use crate::errors::Result;
use crate::settings::Mode;
use crate::shared::{Kind, SharedLimit};

/// Where provider feedback on a permit's request goes, taken from the
/// permit with [`SharedPermit::feedback_target`]: for bindings that keep the
/// permit behind a lock they must not hold while reporting.
#[derive(Debug, Clone)]
pub struct FeedbackTarget {
    /// The governor that granted the permit: `providers` are its indices.
    pub(super) owner: u64,
    /// The route of the permit's local part and when it was granted.
    pub(super) local: Option<(Route, u64)>,
    /// The shared provider scopes on its route.
    pub(super) providers: Box<[usize]>,
    /// Its route's shared part in the fallback governor.
    pub(super) fallback: Option<Route>,
}

impl FeedbackTarget {
    /// Whether the permit's route has local scopes, which learn from the
    /// answer as the core's [`llmgov::Governor::report`] teaches them.
    pub fn has_local_scopes(&self) -> bool {
        self.local.is_some()
    }

    /// How many shared provider scopes on its route a 429 holds in Redis.
    pub fn shared_provider_scopes(&self) -> usize {
        self.providers.len()
    }

    /// Whether [`RedisGovernor::hold_providers`] reaches Redis for this
    /// answer: for bindings that must not block their caller on Redis.
    pub fn holds_in_redis(&self, classification: &Classification) -> bool {
        !self.providers.is_empty() && classification.kind == LimitKind::RateLimited
    }
}

impl RedisGovernor {
    /// Feeds a provider's answer to the permit's request back, and says how
    /// it was classified. Any time before or after settling.
    /// - The local scopes of its route learn as [`llmgov::Governor::report`]
    ///   teaches them: a 429's `retry-after` holds them, AIMD and the
    ///   breaker learn, headers discover limits.
    /// - A 429 holds the limits it names on each shared provider scope
    ///   (`provider = true`) empty in Redis until its retry-after (the same
    ///   limits and wait as a local provider scope's; one window at most),
    ///   for every process sharing the scope: refunds and returned leases
    ///   never shorten the hold. In leased mode this process ends its lease
    ///   on the scope; other processes spend at most what their leases
    ///   still hold. In Redis, shared scopes learn nothing else (no AIMD,
    ///   no breaker, no discovery).
    /// - The safe share's copies of the shared provider scopes (what this
    ///   process enforces while Redis is away) learn as local provider
    ///   scopes do, so a process that loses Redis, or reports while it is
    ///   away, keeps holding back (a hold that cannot reach Redis counts in
    ///   [`RedisGovernor::health`]).
    pub fn report<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        &self,
        permit: &SharedPermit,
        status: u16,
        headers: &[(K, V)],
        body: &[u8],
    ) -> Result<Classification> {
        self.report_sent(&permit.feedback_target(), status, headers, body)
    }

    /// As [`Self::report`], for a permit's [`SharedPermit::feedback_target`]:
    /// [`Self::report_local`], then [`Self::hold_providers`].
    pub fn report_sent<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        &self,
        target: &FeedbackTarget,
        status: u16,
        headers: &[(K, V)],
        body: &[u8],
    ) -> Result<Classification> {
        let classification = self.report_local(target, status, headers, body)?;
        self.hold_providers(target, &classification);
        Ok(classification)
    }

    /// The part of [`Self::report_sent`] that does no I/O: the answer
    /// classified, and fed to the local scopes of the target's route. A
    /// target of another governor is an `InvalidRequest`.
    pub fn report_local<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        &self,
        target: &FeedbackTarget,
        status: u16,
        headers: &[(K, V)],
        body: &[u8],
    ) -> Result<Classification> {
        self.inner.check_owner("permit", target.owner)?;
        let classification = match target.local {
            Some((route, acquired_at)) => self.inner.local.report_sent(route, acquired_at, status, headers, body)?,
            None => {
                let wall_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
                classify_response(status, headers, body, ProviderHint::Auto, wall_ms)
            }
        };
        // The safe share's copies of the shared provider scopes learn too
        // (a 429 holds them, AIMD and the breaker learn), so that a process
        // that loses Redis keeps holding back; they enforce nothing until then.
        if let (Some(route), false) = (target.fallback, target.providers.is_empty()) {
            self.inner.fallback.observe(route, &classification)?;
        }
        Ok(classification)
    }

    /// The part of [`Self::report_sent`] that reaches Redis: what a 429
    /// (`classification`, from [`Self::report_local`]) holds on each of the
    /// target's shared provider scopes, one call per scope. Nothing for an
    /// answer that is no rate limit, nor for a target of another governor.
    pub fn hold_providers(&self, target: &FeedbackTarget, classification: &Classification) {
        if target.owner == self.inner.owner && target.holds_in_redis(classification) {
            self.adopt_if_forked();
            self.inner.hold_providers(&target.providers, classification);
        }
    }
}

impl Inner {
    /// Holds in Redis what a 429 holds on each shared provider scope of
    /// `scopes`; an answer that is no rate limit holds nothing.
    fn hold_providers(&self, scopes: &[usize], feedback: &Classification) {
        let now = self.clock.now();
        for &i in scopes {
            let scope = &self.scopes[i];
            let shapes: Vec<LimitShape> = scope.limits.iter().map(SharedLimit::shape).collect();
            let holds: Vec<(usize, u64)> = cooldown(feedback, &shapes, now)
                .into_iter()
                .enumerate()
                .filter(|&(l, _)| matches!(scope.limits[l].kind, Kind::Rate { .. }))
                .filter_map(|(l, until)| Some((l, until?.saturating_sub(now) / 1_000)))
                .collect();
            if holds.is_empty() {
                continue;
            }
            if scope.mode == Mode::Leased {
                self.leases[i].end_now();
            }
            if !self.health.redis_usable(now, self.settings.retry_interval) {
                continue;
            }
            match self.store.hold(scope, &holds) {
                Ok(()) => self.health.on_success(),
                Err(e) => {
                    self.health.on_error(&e, now, self.settings.retry_interval);
                    self.store.drop_idle();
                }
            }
        }
    }
}
