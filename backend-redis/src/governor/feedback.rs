//! A provider's answer to a shared permit's request: the local scopes of
//! its route learn from it as the core's do, and a 429, or a circuit
//! breaker it opens, holds its shared provider scopes empty in Redis, so
//! that every process holds back.

use std::sync::atomic::Ordering;
use std::time::{SystemTime, UNIX_EPOCH};

use llmgov::feedback::{cooldown, LimitShape};
use llmgov::{classify_response, Classification, Dimension, LimitKind, ProviderHint, Route};

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
    /// When the permit was granted, on the governor's clock.
    pub(super) sent_at: u64,
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
    ///   still hold.
    /// - Consecutive failures (429s, 5xx, 529) that this process sees open
    ///   the breaker of a shared provider scope as they open a local one's
    ///   (`[adaptive.breaker]`), and the breaker holds the scope's rate
    ///   limits empty in Redis for its pause, for every process, as a 429
    ///   does. The answer to the first request sent after the pause is the
    ///   probe's: a failure opens it for the next pause, a success closes it.
    ///   In Redis, shared scopes learn nothing else (no AIMD, no discovery).
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
    /// classified, fed to the local scopes of the target's route and to
    /// the safe share's copies of its shared provider scopes (whose
    /// breakers may open). A target of another governor is an `InvalidRequest`.
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
        // that loses Redis keeps holding back; they enforce nothing until
        // then, but their breakers' openings are held in Redis.
        if let (Some(route), false) = (target.fallback, target.providers.is_empty()) {
            self.inner.learn_on_fallback(route, target, &classification)?;
        }
        Ok(classification)
    }

    /// Whether [`Self::hold_providers`] reaches Redis for this answer (from
    /// [`Self::report_local`]): for bindings that must not block their
    /// caller on Redis.
    pub fn holds_in_redis(&self, target: &FeedbackTarget, classification: &Classification) -> bool {
        let breaker_opened = target.providers.iter().any(|&i| self.inner.breaker_holds[i].load(Ordering::Acquire) != 0);
        let rate_limited = !target.providers.is_empty() && classification.kind == LimitKind::RateLimited;
        target.owner == self.inner.owner && (rate_limited || breaker_opened)
    }

    /// The part of [`Self::report_sent`] that reaches Redis: what a 429
    /// (`classification`, from [`Self::report_local`]) or a breaker it
    /// opened holds on each of the target's shared provider scopes, one
    /// call per scope held. Nothing for a target of another governor.
    pub fn hold_providers(&self, target: &FeedbackTarget, classification: &Classification) {
        if self.holds_in_redis(target, classification) {
            self.adopt_if_forked();
            self.inner.hold_providers(&target.providers, classification);
        }
    }
}

impl Inner {
    /// Feeds the answer to the safe share's copies of the target's shared
    /// provider scopes (its route there: `route`), noting in
    /// `breaker_holds` every breaker that opened, or opened again after its
    /// probe failed, until its pause ends.
    fn learn_on_fallback(&self, route: Route, target: &FeedbackTarget, feedback: &Classification) -> Result<()> {
        let open_until = |i: usize| self.fallback.breaker_open_until(&self.scopes[i].path);
        let before: Vec<Option<u64>> = target.providers.iter().map(|&i| open_until(i)).collect();
        self.fallback.observe_sent(route, target.sent_at, feedback)?;
        for (&i, before) in target.providers.iter().zip(before) {
            if let Some(until) = open_until(i).filter(|&until| Some(until) != before) {
                self.breaker_holds[i].fetch_max(until, Ordering::AcqRel);
            }
        }
        Ok(())
    }

    /// Holds in Redis what a 429 holds on each shared provider scope of
    /// `scopes`, and every rate limit of those whose breaker opened, until
    /// its pause ends; an answer that is no rate limit holds nothing more.
    fn hold_providers(&self, scopes: &[usize], feedback: &Classification) {
        let now = self.clock.now();
        for &i in scopes {
            let scope = &self.scopes[i];
            let shapes: Vec<LimitShape> = scope.limits.iter().map(SharedLimit::shape).collect();
            let cooled = cooldown(feedback, &shapes, now);
            let breaker_until = Some(self.breaker_holds[i].swap(0, Ordering::AcqRel)).filter(|&until| until > now);
            let holds: Vec<(usize, u64)> = (scope.limits.iter().enumerate())
                .filter(|(_, limit)| matches!(limit.kind, Kind::Rate { .. }))
                .filter_map(|(l, limit)| {
                    // A breaker holds rates, as a 429 naming no limit does:
                    // neither daily quotas (drained, they would take a day to
                    // refill) nor budgets (the user's, not the provider's).
                    let broken =
                        breaker_until.filter(|_| !limit.shape().is_daily() && limit.dimension != Dimension::Cost);
                    let until = cooled.get(l).copied().flatten().max(broken)?;
                    Some((l, until.saturating_sub(now) / 1_000))
                })
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
