//! Routing a request across a model profile's deployments: the one with the
//! most normalized headroom first, skipping open breakers, then the
//! profile's fallback chain where the request's class allows it. A profile's
//! budget thresholds pass deployments whose cost budgets run low over for a
//! cheaper profile, or refuse them.

mod wait;

use std::sync::Arc;
use std::time::Duration;

use crate::{Error, Governor, Permit, Request, Result, Route};

pub use wait::{ProfileStep, ProfileWait};

/// One profile of a resolved chain: its deployments' routes (the
/// consumer's paths plus the deployment), and whether each class may leave
/// it for the next profile.
#[derive(Debug)]
struct Link {
    profile: Arc<str>,
    deployments: Vec<(Arc<str>, Route)>,
    /// Classes that may not fall back from this profile (nor degrade).
    no_fallback: Vec<String>,
    /// The profile's budget thresholds, if it has any.
    budget: Option<Thresholds>,
}

/// A profile's budget thresholds, with its degradation resolved.
#[derive(Debug, Clone)]
struct Thresholds {
    degrade: Option<(f64, Box<ProfileRoute>)>,
    refuse_at: Option<f64>,
}

/// Why a profile's deployments all refused.
struct Refusal {
    /// The refusal to report: the roomiest deployment's that could pass later.
    error: Error,
    /// Whether a deployment was passed over for the cheaper profile.
    degrade: bool,
    /// Whether the profile's budget thresholds held every deployment: the
    /// budget closed the profile, so no fallback may spend it elsewhere.
    closed_by_budget: bool,
    /// The deployment to wait for, if one refused for now.
    wait: Option<Box<WaitTarget>>,
}

/// A deployment that refused for now, and may be waited for: its own limits
/// or its breaker refused it, not the profile's budget thresholds.
#[derive(Debug, Clone)]
struct WaitTarget {
    route: Route,
    deployment: Arc<str>,
    /// Its profile, with the thresholds to check again once admitted.
    link: Arc<Link>,
    /// Whether the request's class may leave that profile.
    may_leave: bool,
    fell_back: bool,
    degraded: bool,
    /// When it said to come back; `None` waits on releases.
    retry_after: Option<Duration>,
}

impl WaitTarget {
    /// Of two deployments to wait for, the one that should pass first.
    fn sooner(a: Option<Box<WaitTarget>>, b: Option<Box<WaitTarget>>) -> Option<Box<WaitTarget>> {
        match (a, b) {
            (Some(a), Some(b)) => {
                Some(if b.retry_after.unwrap_or(Duration::MAX) < a.retry_after.unwrap_or(Duration::MAX) {
                    b
                } else {
                    a
                })
            }
            (a, b) => a.or(b),
        }
    }
}

/// A profile and its fallbacks resolved for one consumer, from
/// [`Governor::profile`]. Resolve it once and keep it: acquiring through it
/// interns nothing.
#[derive(Debug, Clone)]
pub struct ProfileRoute {
    /// Shared, so that a refusal can name the profile to wait in cheaply.
    chain: Vec<Arc<Link>>,
}

/// A request admitted through a profile, and where it goes.
#[derive(Debug)]
pub struct Routed {
    /// The permit, on the chosen deployment's route.
    pub permit: Permit,
    /// The profile that served it (a fallback's, if it fell back).
    pub profile: Arc<str>,
    /// The chosen deployment's scope path.
    pub deployment: Arc<str>,
    /// Whether it left the profile asked for through a fallback.
    pub fell_back: bool,
    /// Whether it left the profile asked for because a cost budget passed
    /// the profile's `degrade_at` threshold.
    pub degraded: bool,
}

impl ProfileRoute {
    /// The route of the profile's first deployment, to build a [`Request`]
    /// on (its route is replaced by each candidate's).
    pub fn primary(&self) -> Route {
        self.chain[0].deployments[0].1
    }
}

impl Governor {
    /// Resolves profile `name` and its fallback chain for a consumer's paths
    /// (e.g. `["tenants/acme"]`; may be empty): every deployment's route
    /// charges the consumer's scopes too.
    pub fn profile<S: AsRef<str>>(&self, name: &str, consumer: &[S]) -> Result<ProfileRoute> {
        let consumer: Vec<&str> = consumer.iter().map(AsRef::as_ref).collect();
        self.resolve_profile(name, &consumer)
    }

    fn resolve_profile(&self, name: &str, consumer: &[&str]) -> Result<ProfileRoute> {
        let profiles = &self.profiles;
        let unknown = || Error::InvalidRequest {
            field: "profile",
            value: name.to_owned(),
            reason: format!("no such profile; known: {}", profiles.keys().cloned().collect::<Vec<_>>().join(", ")),
        };
        let mut chain = Vec::new();
        let mut next = Some(profiles.get_key_value(name).ok_or_else(unknown)?);
        while let Some((profile, config)) = next {
            let mut deployments = Vec::new();
            for deployment in &config.deployments {
                let mut paths = consumer.to_vec();
                paths.push(deployment);
                deployments.push((Arc::from(deployment.as_str()), self.route(&paths)?));
            }
            let no_fallback = config.fallback_allowed.iter().filter(|(_, &ok)| !ok).map(|(c, _)| c.clone()).collect();
            let budget = match &config.budget {
                None => None,
                Some(b) => Some(Thresholds {
                    // The config has no cycles, so this recursion ends.
                    degrade: match (b.degrade_at, &b.degrade_to) {
                        (Some(at), Some(to)) => Some((at, Box::new(self.resolve_profile(to, consumer)?))),
                        _ => None,
                    },
                    refuse_at: b.refuse_at,
                }),
            };
            chain.push(Arc::new(Link { profile: Arc::from(profile.as_str()), deployments, no_fallback, budget }));
            next = config.fallback.as_ref().and_then(|f| profiles.get_key_value(f));
        }
        Ok(ProfileRoute { chain })
    }

    /// Admits `request` on the deployment of `profile` with the most
    /// normalized headroom (the least over its provider limits of available
    /// ÷ limit), skipping deployments whose breaker is open and trying the
    /// next when one refuses. When every deployment refuses, it falls back
    /// along the chain if the request's class may; otherwise, or at the end
    /// of the chain, the first profile's refusal is returned: that of its
    /// roomiest deployment that could admit the request later (which scope
    /// and dimension refused, and when to retry), else why it never fits.
    ///
    /// Where the profile has budget thresholds, a deployment whose route's
    /// `cost` budgets are spent past `degrade_at` is passed over for the
    /// `degrade_to` profile ([`Routed::degraded`]), or refused if the class
    /// may not leave the profile; past `refuse_at`, it is refused. However
    /// many deployments it tried, a refused request is counted and told to
    /// the event hook once.
    pub fn try_acquire_profile(&self, profile: &ProfileRoute, request: &Request) -> Result<Routed> {
        // One request, one refusal: however many deployments it tried.
        self.route_request(profile, request, false).map_err(|(error, _)| {
            self.refused(&error, request);
            error
        })
    }

    /// [`Self::try_acquire_profile`], counting and telling of no refusal; a
    /// refusal comes with the deployment to wait for, if any may be, chosen
    /// counting the line already waiting on each if `waits` (the caller
    /// will wait; else the bare retry-after ranks them, at no cost). Traced
    /// as `llmgov.route`, with the deployment chosen or the refusal.
    fn route_request(
        &self,
        profile: &ProfileRoute,
        request: &Request,
        waits: bool,
    ) -> std::result::Result<Routed, (Error, Option<Box<WaitTarget>>)> {
        let class = self.class_name(request.class);
        let span = tracing::debug_span!(
            "llmgov.route",
            profile = &*profile.chain[0].profile,
            class,
            deployment = tracing::field::Empty,
            fell_back = tracing::field::Empty,
            degraded = tracing::field::Empty,
            refused = tracing::field::Empty,
        );
        let _entered = span.enter();
        let routed = self.route_in_chain(profile, request, class, waits);
        match &routed {
            Ok(r) => {
                span.record("deployment", &*r.deployment);
                span.record("fell_back", r.fell_back);
                span.record("degraded", r.degraded)
            }
            Err((error, _)) => span.record("refused", error.code()),
        };
        routed
    }

    /// The chain of `profile` tried in order, as far as `class` may go.
    fn route_in_chain(
        &self,
        profile: &ProfileRoute,
        request: &Request,
        class: &str,
        waits: bool,
    ) -> std::result::Result<Routed, (Error, Option<Box<WaitTarget>>)> {
        let (mut first_refusal, mut wait) = (None, None);
        for (depth, link) in profile.chain.iter().enumerate() {
            let may_leave = !link.no_fallback.iter().any(|c| c == class);
            let refusal = match self.try_link(link, request, may_leave, waits) {
                Ok((deployment, permit)) => {
                    let profile = link.profile.clone();
                    return Ok(Routed { permit, profile, deployment, fell_back: depth > 0, degraded: false });
                }
                Err(refusal) => refusal,
            };
            first_refusal.get_or_insert(refusal.error);
            let fallen = refusal.wait.map(|target| Box::new(WaitTarget { fell_back: depth > 0, ..*target }));
            wait = WaitTarget::sooner(wait, fallen);
            if let (true, Some((_, cheaper))) = (refusal.degrade, link.budget.as_ref().and_then(|b| b.degrade.as_ref()))
            {
                match self.route_request(cheaper, request, waits) {
                    Ok(routed) => {
                        return Ok(Routed { degraded: true, fell_back: routed.fell_back || depth > 0, ..routed })
                    }
                    Err((error, cheaper_wait)) => {
                        tracing::debug!(%error, "the degraded profile refused too");
                        let degraded = cheaper_wait.map(|t| {
                            Box::new(WaitTarget { degraded: true, fell_back: t.fell_back || depth > 0, ..*t })
                        });
                        wait = WaitTarget::sooner(wait, degraded);
                    }
                }
            }
            // Past its thresholds a profile refuses, or degrades to the
            // cheaper one alone: its fallbacks would spend the budget anyway,
            // on dearer models as likely as not.
            if !may_leave || refusal.closed_by_budget {
                break;
            }
        }
        Err((first_refusal.expect("a profile has at least one deployment"), wait))
    }

    /// The deployments of one profile, roomiest first; those past a budget
    /// threshold are passed over (to degrade, when the class may leave the
    /// profile) or refused.
    fn try_link(
        &self,
        link: &Arc<Link>,
        request: &Request,
        may_leave: bool,
        waits: bool,
    ) -> Result<(Arc<str>, Permit), Refusal> {
        let now = self.clock().now();
        let mut ranked: Vec<(f64, usize)> = Vec::with_capacity(link.deployments.len());
        for (i, (_, route)) in link.deployments.iter().enumerate() {
            // An open breaker is skipped, but still answers if all are open.
            let room = self.ledger().headroom(*route, now).map_err(|error| Refusal {
                error,
                degrade: false,
                closed_by_budget: false,
                wait: None,
            })?;
            ranked.push((room.unwrap_or(-1.0), i));
        }
        ranked.sort_by(|a, b| b.0.total_cmp(&a.0));
        let mut refusal: Option<Error> = None;
        let (mut degrade, mut held_by_budget, mut wait) = (false, 0, None);
        for (_, i) in ranked {
            let (deployment, route) = &link.deployments[i];
            let outcome = match self.budget_verdict(link, *route, may_leave, None, now) {
                Ok(Verdict::Degrade(error)) => {
                    (degrade, held_by_budget) = (true, held_by_budget + 1);
                    Err(error)
                }
                Ok(Verdict::Refuse(error)) => {
                    held_by_budget += 1;
                    Err(error)
                }
                Err(error) => Err(error),
                Ok(Verdict::Go) => {
                    let on_route = Request { route: *route, ..*request };
                    let outcome = self.try_acquire_quietly(&on_route);
                    let retry_after = match &outcome {
                        Err(Error::RateLimited { retry_after, .. }) => Some(*retry_after),
                        Err(Error::CircuitOpen { retry_after, .. }) => Some(Some(*retry_after)),
                        _ => None,
                    };
                    // The ledger knows nothing of the line already waiting
                    // on the deployment: the scheduler's prediction does. (A
                    // wait on releases stays one: those are not predicted.)
                    let retry_after = retry_after.map(|ledger_says| {
                        let line = waits.then(|| self.predicted_wait(&on_route).ok().flatten()).flatten();
                        ledger_says.map(|wait| line.map_or(wait, |line| wait.max(line)))
                    });
                    let target = retry_after.map(|retry_after| {
                        Box::new(WaitTarget {
                            route: *route,
                            deployment: deployment.clone(),
                            link: link.clone(),
                            may_leave,
                            fell_back: false,
                            degraded: false,
                            retry_after,
                        })
                    });
                    wait = WaitTarget::sooner(wait, target);
                    outcome
                }
            };
            match outcome {
                Ok(permit) => return Ok((deployment.clone(), permit)),
                // A deployment that could admit it later says more than one
                // that never can.
                Err(error) if refusal.as_ref().is_none_or(|r| matches!(r, Error::NeverFits { .. })) => {
                    refusal = Some(error)
                }
                Err(_) => {}
            }
        }
        let closed_by_budget = held_by_budget == link.deployments.len();
        Err(Refusal { error: refusal.expect("a profile has at least one deployment"), degrade, closed_by_budget, wait })
    }

    /// What the profile's budget thresholds say of a deployment's route,
    /// leaving out what `own` (a permit admitted on it) reserved.
    fn budget_verdict(
        &self,
        link: &Link,
        route: Route,
        may_leave: bool,
        own: Option<&Permit>,
        now: u64,
    ) -> Result<Verdict> {
        let Some(thresholds) = &link.budget else { return Ok(Verdict::Go) };
        let Some(spent) = self.ledger().budget_spent(route, own, now)? else { return Ok(Verdict::Go) };
        let refusal = |at: f64| self.ledger().budget_refusal(&spent, at, now);
        if let Some(at) = thresholds.refuse_at.filter(|&at| spent.fraction >= at) {
            return Ok(Verdict::Refuse(refusal(at)));
        }
        match &thresholds.degrade {
            // A class that may not leave the profile is refused instead.
            Some((at, _)) if spent.fraction >= *at && !may_leave => Ok(Verdict::Refuse(refusal(*at))),
            Some((at, _)) if spent.fraction >= *at => Ok(Verdict::Degrade(refusal(*at))),
            _ => Ok(Verdict::Go),
        }
    }
}

/// A budget threshold's verdict on a deployment.
enum Verdict {
    Go,
    /// Past `degrade_at`: passed over for the cheaper profile; the error is
    /// the refusal to report if that one refuses too.
    Degrade(Error),
    Refuse(Error),
}
