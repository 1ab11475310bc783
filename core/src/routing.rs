//! Routing a request across a model profile's deployments: the one with the
//! most normalized headroom first, skipping open breakers, then the
//! profile's fallback chain where the request's class allows it.

use std::sync::Arc;

use crate::{Error, Governor, Permit, Request, Result, Route};

/// One profile of a resolved chain: its deployments' routes (the
/// consumer's paths plus the deployment), and whether each class may leave
/// it for the next profile.
#[derive(Debug, Clone)]
struct Link {
    profile: Arc<str>,
    deployments: Vec<(Arc<str>, Route)>,
    /// Classes that may not fall back from this profile.
    no_fallback: Vec<String>,
}

/// A profile and its fallbacks resolved for one consumer, from
/// [`Governor::profile`]. Resolve it once and keep it: acquiring through it
/// interns nothing.
#[derive(Debug, Clone)]
pub struct ProfileRoute {
    chain: Vec<Link>,
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
    /// Whether it left the profile asked for.
    pub fell_back: bool,
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
                let mut paths: Vec<&str> = consumer.iter().map(AsRef::as_ref).collect();
                paths.push(deployment);
                deployments.push((Arc::from(deployment.as_str()), self.route(&paths)?));
            }
            let no_fallback = config.fallback_allowed.iter().filter(|(_, &ok)| !ok).map(|(c, _)| c.clone()).collect();
            chain.push(Link { profile: Arc::from(profile.as_str()), deployments, no_fallback });
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
    pub fn try_acquire_profile(&self, profile: &ProfileRoute, request: &Request) -> Result<Routed> {
        let class = self.class_name(request.class).to_owned();
        let mut first_refusal = None;
        for (depth, link) in profile.chain.iter().enumerate() {
            match self.try_link(link, request) {
                Ok((deployment, permit)) => {
                    let profile = link.profile.clone();
                    return Ok(Routed { permit, profile, deployment, fell_back: depth > 0 });
                }
                Err(error) => {
                    first_refusal.get_or_insert(error);
                }
            }
            if link.no_fallback.contains(&class) {
                break;
            }
        }
        Err(first_refusal.expect("a profile has at least one deployment"))
    }

    /// The deployments of one profile, roomiest first.
    fn try_link(&self, link: &Link, request: &Request) -> Result<(Arc<str>, Permit)> {
        let now = self.clock().now();
        let mut ranked: Vec<(f64, usize)> = Vec::with_capacity(link.deployments.len());
        for (i, (_, route)) in link.deployments.iter().enumerate() {
            // An open breaker is skipped, but still answers if all are open.
            let room = self.ledger().headroom(*route, now)?.unwrap_or(-1.0);
            ranked.push((room, i));
        }
        ranked.sort_by(|a, b| b.0.total_cmp(&a.0));
        let mut refusal: Option<Error> = None;
        for (_, i) in ranked {
            let (deployment, route) = &link.deployments[i];
            match self.try_acquire(&Request { route: *route, ..*request }) {
                Ok(permit) => return Ok((deployment.clone(), permit)),
                // A deployment that could admit it later says more than one
                // that never can.
                Err(error) if refusal.as_ref().is_none_or(|r| matches!(r, Error::NeverFits { .. })) => {
                    refusal = Some(error)
                }
                Err(_) => {}
            }
        }
        Err(refusal.expect("a profile has at least one deployment"))
    }
}
