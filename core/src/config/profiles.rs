//! Model profiles: the deployments that can serve a model, and where to
//! fall back when none can.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// A model profile: deployments (provider scopes, perhaps in different
/// organisations, keys or regions) that serve the same model.
///
/// ```toml
/// [profiles.gpt-4o]
/// deployments = ["openai/org-main/gpt-4o", "azure/eastus/gpt-4o"]
/// fallback = "gpt-4o-mini"               # when every deployment refuses
/// fallback_allowed = { eval = false }    # per traffic class; default true
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
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub fallback_allowed: BTreeMap<String, bool>,
}

/// Checks every profile: deployments given, fallbacks known, no cycles.
pub(crate) fn validate(profiles: &BTreeMap<String, ProfileConfig>) -> Result<()> {
    for (name, profile) in profiles {
        let field = |f: &str| format!("profiles.{name}.{f}");
        if profile.deployments.is_empty() {
            return Err(Error::config(field("deployments"), "[]", "a profile needs at least one deployment"));
        }
        if let Some(fallback) = &profile.fallback {
            if !profiles.contains_key(fallback) {
                return Err(Error::config(field("fallback"), fallback, "names no profile"));
            }
        }
        let mut seen = vec![name.as_str()];
        let mut next = profile.fallback.as_deref();
        while let Some(step) = next {
            if seen.contains(&step) {
                return Err(Error::config(
                    field("fallback"),
                    step,
                    format!("falls back in a cycle: {}", seen.join(" → ")),
                ));
            }
            seen.push(step);
            next = profiles[step].fallback.as_deref();
        }
    }
    Ok(())
}
