//! Waiting for admission by profile. When no deployment the request's class
//! may use admits it now, it waits in the queue of the one that should pass
//! first (the shortest `retry_after`; one that waits on releases last), as
//! [`Governor::acquire`] waits on a route. Deployments refused by the
//! profile's budget thresholds are not waited for: a threshold falls with
//! the spend, not with a queue. Once admitted, the thresholds are checked
//! again, since the spend may have crossed one while the request waited:
//! past `degrade_at` it goes to the cheaper profile if that admits it now.

use super::{Routed, Verdict, WaitTarget};
use crate::{Governor, Permit, ProfileRoute, Request, Result};

/// The first step of an acquire by profile, for callers that wait with
/// their own machinery (the bindings): admitted now, or where to wait.
#[derive(Debug)]
pub enum ProfileStep {
    /// A deployment admitted it.
    Admitted(Routed),
    /// None admits it now: wait for [`ProfileWait::request`] with
    /// [`Governor::acquire`] (or [`Governor::acquire_blocking`]), then hand
    /// the permit to [`Governor::admit_waited`].
    Wait(ProfileWait),
}

/// A request by profile waiting on one deployment.
#[derive(Debug)]
pub struct ProfileWait {
    /// The request, on the deployment's route: what to wait for.
    pub request: Request,
    target: Box<WaitTarget>,
}

impl ProfileWait {
    /// The deployment waited on.
    pub fn deployment(&self) -> &str {
        &self.target.deployment
    }
}

impl Governor {
    /// Routes `request` as [`Self::try_acquire_profile`] does; where it is
    /// refused for now, says which deployment to wait on instead of
    /// refusing. A request that can never pass (it never fits, every
    /// deployment is past a budget threshold, …) is refused, counted and
    /// told to the event hook once.
    pub fn step_profile(&self, profile: &ProfileRoute, request: &Request) -> Result<ProfileStep> {
        match self.route_request(profile, request, true) {
            Ok(routed) => Ok(ProfileStep::Admitted(routed)),
            Err((_, Some(target))) => {
                Ok(ProfileStep::Wait(ProfileWait { request: Request { route: target.route, ..*request }, target }))
            }
            Err((error, None)) => {
                self.refused(&error, request);
                Err(error)
            }
        }
    }

    /// The routed request once `wait`'s deployment admitted `permit`. If a
    /// budget threshold of its profile was crossed meanwhile, the permit is
    /// cancelled: past `degrade_at` the cheaper profile is tried at once (as
    /// for a request arriving now); otherwise, or if it refuses too, the
    /// threshold's refusal is returned.
    pub fn admit_waited(&self, wait: ProfileWait, mut permit: Permit) -> Result<Routed> {
        let target = *wait.target;
        let now = self.clock().now();
        // Judged as the spend stood before this request, as an admission
        // without waiting judges it: its own reservation crosses nothing.
        let verdict = self.budget_verdict(&target.link, target.route, target.may_leave, Some(&permit), now);
        let degrade = matches!(verdict, Ok(Verdict::Degrade(_)));
        if let Ok(Verdict::Degrade(error) | Verdict::Refuse(error)) | Err(error) = verdict {
            self.cancel(&mut permit)?;
            if let Some(routed) = degrade.then(|| self.degrade_now(&target, &wait.request)).flatten() {
                return Ok(routed);
            }
            // When to come back, now that its reservation is gone.
            let error = match self.budget_verdict(&target.link, target.route, target.may_leave, None, now) {
                Ok(Verdict::Degrade(later) | Verdict::Refuse(later)) => later,
                _ => error,
            };
            self.refused(&error, &wait.request);
            return Err(error);
        }
        Ok(Routed {
            permit,
            profile: target.link.profile.clone(),
            deployment: target.deployment,
            fell_back: target.fell_back,
            degraded: target.degraded,
        })
    }

    /// The cheaper profile's admission, at once, of a waiter whose profile
    /// passed `degrade_at` while it waited: as it would have gone had it
    /// arrived then. `None` if that profile refuses it now too.
    fn degrade_now(&self, target: &WaitTarget, request: &Request) -> Option<Routed> {
        let (_, cheaper) = target.link.budget.as_ref()?.degrade.as_ref()?;
        let routed = self.route_request(cheaper, request, false).ok()?;
        Some(Routed { degraded: true, fell_back: routed.fell_back || target.fell_back, ..routed })
    }

    /// Waits for `request` to be admitted through `profile`: at once on the
    /// roomiest deployment that admits it, as [`Self::try_acquire_profile`];
    /// otherwise in the queue of the deployment that should pass first
    /// (see [`Self::step_profile`]), within the request's deadline and its
    /// class's maximum wait.
    pub async fn acquire_profile(&self, profile: &ProfileRoute, request: &Request) -> Result<Routed> {
        match self.step_profile(profile, request)? {
            ProfileStep::Admitted(routed) => Ok(routed),
            ProfileStep::Wait(wait) => {
                let permit = self.acquire(&wait.request).await?;
                self.admit_waited(wait, permit)
            }
        }
    }

    /// [`Self::acquire_profile`], parking the calling thread for at most
    /// `timeout` (and the request's deadline and class's maximum wait).
    pub fn acquire_profile_blocking(
        &self,
        profile: &ProfileRoute,
        request: &Request,
        timeout: Option<std::time::Duration>,
    ) -> Result<Routed> {
        match self.step_profile(profile, request)? {
            ProfileStep::Admitted(routed) => Ok(routed),
            ProfileStep::Wait(wait) => {
                let permit = self.acquire_blocking(&wait.request, timeout)?;
                self.admit_waited(wait, permit)
            }
        }
    }
}
