//! Acquiring by model profile. The core's [`llmgov::Governor::try_acquire_profile`]
//! chooses the deployment (the most normalized headroom, open breakers
//! skipped, failover on refusal, the fallback chain where the class may,
//! the cheaper profile past a cost budget's threshold);
//! this file keeps each resolved profile behind a number, as routes are, and
//! hands back the permit with where it went. Waiting by profile
//! ([`acquire_profile_start`]) goes through `waiting.rs` as `acquire` does.

use llmgov::{Permit, ProfileRoute, Request, Routed};
use napi::{Env, Result};
use napi_derive::napi;

use crate::errors::{invalid, OrThrow};
use crate::governor::{with, Counts, NativeGovernor, State};
use crate::tagged;
use crate::waiting::{start_wait, waiting, Grant, Started, WaitArgs};

/// A request to admit through a resolved profile.
#[napi(object)]
pub struct ProfileArgs {
    /// The profile number from `profile` (`tagged.rs`).
    pub profile: f64,
    /// Estimated prompt tokens.
    pub input_tokens: f64,
    /// Part of them expected from the prompt cache.
    pub cached_input_tokens: f64,
    /// The request's `max_tokens`.
    pub max_output_tokens: f64,
    /// The output expected, if known.
    pub expected_output_tokens: Option<f64>,
    /// Class number (0 is the default class); the class also decides
    /// whether the request may fall back.
    pub class_number: u32,
}

/// A permit granted through a profile, and where it was placed.
#[napi(object)]
pub struct ProfileGrant {
    /// The permit's handle.
    pub handle: f64,
    /// The route number of the chosen deployment plus the consumer's scopes
    /// (the route the permit is charged on, and reports go to).
    pub route: f64,
    /// The profile that served it: the one asked for, or a fallback's.
    pub profile: String,
    /// The chosen deployment's scope path.
    pub deployment: String,
    /// Whether it left the profile asked for because every deployment
    /// refused (the fallback chain).
    pub fell_back: bool,
    /// Whether it left the profile asked for because a cost budget passed
    /// the profile's `degrade_at` threshold (its cheaper `degrade_to`).
    pub degraded: bool,
}

#[napi]
impl NativeGovernor {
    /// Resolves profile `name` and its fallback chain for the consumer's
    /// scope paths (charged on every deployment too) into a profile number.
    #[napi(catch_unwind)]
    pub fn profile(&self, env: Env, name: String, consumer: Vec<String>) -> Result<f64> {
        self.with(&env, |s| {
            let profile = s.gov.profile(&name, &consumer)?;
            s.profiles.push(profile);
            Ok(tagged::number(s.tag, s.profiles.len() - 1))
        })
    }

    /// Admits the request on the profile's roomiest deployment that takes
    /// it, or throws the refusal (that of the profile asked for).
    #[napi(catch_unwind)]
    pub fn try_acquire_profile(&self, env: Env, request: ProfileArgs) -> Result<ProfileGrant> {
        self.with(&env, |s| {
            let (profile, core) = profile_request(s, &request)?;
            let routed = s.gov.try_acquire_profile(profile, &core)?;
            Ok(routed.deliver(s))
        })
    }
}

/// Waits for the request to be admitted through its profile: at once as
/// `tryAcquireProfile`, else in the queue of the deployment that should pass
/// first among those its class may use. Its grant at once, or a Promise of
/// it, or of `null` (see `waiting.rs`).
#[napi(catch_unwind, ts_return_type = "ProfileGrant | Promise<ProfileGrant | null>")]
pub fn acquire_profile_start(env: &Env, wait: WaitArgs, request: ProfileArgs) -> Result<Started<'_, ProfileGrant>> {
    let (gov, profile, core) = with(wait.governor, |s| {
        let (profile, core) = profile_request(s, &request)?;
        Ok((s.gov.clone(), profile.clone(), waiting(core, wait.priority, wait.deadline_ms)?))
    })
    .or_throw(env)?;
    let acquiring = gov.clone();
    let routed = Box::pin(async move { acquiring.acquire_profile(&profile, &core).await });
    start_wait(env, wait.governor, wait.ticket, gov, routed)
}

/// The profile `args` names and the request it describes, on the profile's
/// first deployment (the core moves it to the one chosen).
fn profile_request<'s>(s: &'s State, args: &ProfileArgs) -> llmgov::Result<(&'s ProfileRoute, Request)> {
    let index = tagged::index("profile", s.tag, args.profile)?;
    let profile =
        s.profiles.get(index).ok_or_else(|| invalid("profile", args.profile, "not a profile of this governor"))?;
    let counts = Counts {
        input: args.input_tokens,
        cached_input: args.cached_input_tokens,
        max_output: args.max_output_tokens,
        expected_output: args.expected_output_tokens,
        class_number: args.class_number,
    };
    Ok((profile, s.request(profile.primary(), counts)?))
}

impl Grant for Routed {
    type Js = ProfileGrant;

    fn permit(&mut self) -> &mut Permit {
        &mut self.permit
    }

    fn deliver(self, s: &mut State) -> ProfileGrant {
        let route = s.route_number(self.permit.route());
        let now = self.permit.acquired_at();
        ProfileGrant {
            handle: s.permits.insert(self.permit, now),
            route,
            profile: self.profile.to_string(),
            deployment: self.deployment.to_string(),
            fell_back: self.fell_back,
            degraded: self.degraded,
        }
    }
}
