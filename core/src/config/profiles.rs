//! Model profiles: the deployments that can serve a model, and where to
//! fall back when none can.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::ScopeConfig;
use crate::{Error, Result};

/// A model profile: deployments (provider scopes, perhaps in different
/// organisations, keys or regions) that serve the same model.
///
/// ```toml
/// [profiles.gpt-4o]
/// deployments = ["openai/org-main/gpt-4o", "azure/eastus/gpt-4o"]
/// fallback = "gpt-4o-mini"               # when every deployment refuses
/// fallback_allowed = { eval = false }    # per traffic class; default true
/// # when a cost budget on the route is 60% spent, use the cheaper profile;
/// # at 85%, refuse
/// budget = { degrade_at = 0.6, degrade_to = "gpt-4o-mini", refuse_at = 0.85 }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileConfig {
    /// Scope paths of the deployments, each covered by the config.
    pub deployments: Vec<String>,
    /// The profile to try when every deployment of this one refuses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
    /// Per traffic class, whether its requests may go to the fallback
    /// (default true). A class that may not is refused with the reason.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty", deserialize_with = "super::unique_keys")]
    pub fallback_allowed: BTreeMap<String, bool>,
    /// What to do as the `cost` budgets on a deployment's route run low.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetThresholds>,
}

/// Thresholds on the spent fraction of the `cost` budgets on a request's
/// route (the most spent of them, reservations included), checked before
/// each deployment is tried.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetThresholds {
    /// From this fraction on, the deployment is passed over for the
    /// profile `degrade_to`, typically a cheaper model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub degrade_at: Option<f64>,
    /// The profile to degrade to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub degrade_to: Option<String>,
    /// From this fraction on, the deployment refuses, as a rate limit on
    /// the `cost` dimension that lasts until enough of the budget's window
    /// has passed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refuse_at: Option<f64>,
}

/// Checks every profile: deployments given, each a configured scope or a
/// template's match, fallbacks known, no cycles.
pub(crate) fn validate(
    profiles: &BTreeMap<String, ProfileConfig>,
    scopes: &BTreeMap<String, ScopeConfig>,
) -> Result<()> {
    for (name, profile) in profiles {
        let field = |f: &str| format!("profiles.{name}.{f}");
        if profile.deployments.is_empty() {
            return Err(Error::config(field("deployments"), "[]", "a profile needs at least one deployment"));
        }
        for (i, deployment) in profile.deployments.iter().enumerate() {
            check_deployment(deployment, scopes)
                .map_err(|reason| Error::config(field(&format!("deployments[{i}]")), deployment, reason))?;
        }
        if let Some(fallback) = &profile.fallback {
            if !profiles.contains_key(fallback) {
                return Err(Error::config(field("fallback"), fallback, "names no profile"));
            }
        }
        if let Some(budget) = &profile.budget {
            validate_budget(budget, profiles, &field)?;
        }
    }
    // Only once every name is known to exist.
    for name in profiles.keys() {
        check_acyclic(name, profiles, &|f: &str| format!("profiles.{name}.{f}"))?;
    }
    Ok(())
}

/// A deployment is the scope of its own limits: a path that only passes
/// through configured scopes (a typo in its model's segment, say) would be
/// routed with the model's limits skipped.
fn check_deployment(deployment: &str, scopes: &BTreeMap<String, ScopeConfig>) -> std::result::Result<(), String> {
    let segments: Vec<&str> = deployment.split('/').collect();
    let matches = |template: &str| {
        let pattern: Vec<&str> = template.split('/').collect();
        pattern.len() == segments.len() && pattern.iter().zip(&segments).all(|(p, s)| p == s || *p == "*")
    };
    if scopes.contains_key(deployment) || scopes.keys().any(|path| path.contains('*') && matches(path)) {
        return Ok(());
    }
    let nearest = scopes.keys().rfind(|path| deployment.starts_with(&format!("{path}/")));
    Err(match nearest {
        Some(parent) => format!(
            "no scope is configured at this path, only above it at `{parent}`: the deployment's own limits \
             would be skipped; configure `scopes.\"{deployment}\"`, or name a configured scope"
        ),
        None => {
            "no scope or template is configured at this path; a deployment names the scope of its limits".to_owned()
        }
    })
}

fn validate_budget(
    budget: &BudgetThresholds,
    profiles: &BTreeMap<String, ProfileConfig>,
    field: &dyn Fn(&str) -> String,
) -> Result<()> {
    for (name, value) in [("degrade_at", budget.degrade_at), ("refuse_at", budget.refuse_at)] {
        if let Some(v) = value.filter(|v| !(*v > 0.0 && *v <= 1.0)) {
            return Err(Error::config(field(&format!("budget.{name}")), v, "a fraction of the budget, in (0, 1]"));
        }
    }
    match (budget.degrade_at, &budget.degrade_to) {
        (Some(_), None) => {
            return Err(Error::config(field("budget.degrade_to"), "", "degrade_at needs the profile to degrade to"))
        }
        (None, Some(to)) => {
            return Err(Error::config(field("budget.degrade_at"), to, "degrade_to needs the fraction to degrade at"))
        }
        (_, Some(to)) if !profiles.contains_key(to) => {
            return Err(Error::config(field("budget.degrade_to"), to, "names no profile"))
        }
        _ => {}
    }
    if let (Some(degrade), Some(refuse)) = (budget.degrade_at, budget.refuse_at) {
        if degrade >= refuse {
            return Err(Error::config(
                field("budget.degrade_at"),
                degrade,
                format!("must be below refuse_at ({refuse})"),
            ));
        }
    }
    Ok(())
}

/// Fallbacks and degradations never lead back to where they started.
fn check_acyclic(name: &str, profiles: &BTreeMap<String, ProfileConfig>, field: &dyn Fn(&str) -> String) -> Result<()> {
    match cycle_from(name, profiles, &mut Vec::new(), &mut BTreeSet::new()) {
        Some((step, walk)) => Err(Error::config(field("fallback"), step, format!("leads back in a cycle: {walk}"))),
        None => Ok(()),
    }
}

/// Depth first over both kinds of edge from `profile`, with the `path`
/// walked to it; a profile `done` has no cycle below it, so each is walked
/// once (walking every path took time exponential in the profiles). The
/// step that closes a cycle, and the cycle.
fn cycle_from<'a>(
    profile: &'a str,
    profiles: &'a BTreeMap<String, ProfileConfig>,
    path: &mut Vec<&'a str>,
    done: &mut BTreeSet<&'a str>,
) -> Option<(&'a str, String)> {
    let config = &profiles[profile];
    let degrade = config.budget.as_ref().and_then(|b| b.degrade_to.as_deref());
    path.push(profile);
    for step in [config.fallback.as_deref(), degrade].into_iter().flatten() {
        if path.contains(&step) {
            return Some((step, path.iter().chain([&step]).copied().collect::<Vec<_>>().join(" → ")));
        }
        if !done.contains(step) {
            if let Some(cycle) = cycle_from(step, profiles, path, done) {
                return Some(cycle);
            }
        }
    }
    path.pop();
    done.insert(profile);
    None
}
