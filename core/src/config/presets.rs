//! Shipped presets: the limits of common provider tiers, as config files
//! under `core/presets/`. Values are the seed table of June 2026; check the
//! provider's console for your account's current figures.

use super::Config;
use crate::{Error, Result};

/// Every shipped preset: `(name, TOML text)`.
pub const PRESETS: &[(&str, &str)] = &[
    ("openai-gpt-4o-tier1", include_str!("../../presets/openai-gpt-4o-tier1.toml")),
    ("openai-gpt-4o-mini-tier1", include_str!("../../presets/openai-gpt-4o-mini-tier1.toml")),
    ("openai-o1-tier1", include_str!("../../presets/openai-o1-tier1.toml")),
    ("deepseek-v4-pro", include_str!("../../presets/deepseek-v4-pro.toml")),
    ("deepseek-v4-flash", include_str!("../../presets/deepseek-v4-flash.toml")),
    ("qwen-max", include_str!("../../presets/qwen-max.toml")),
    ("volcengine-deepseek-v3", include_str!("../../presets/volcengine-deepseek-v3.toml")),
];

pub(super) fn load(name: &str) -> Result<Config> {
    let (_, text) = PRESETS.iter().find(|(n, _)| *n == name).ok_or_else(|| Error::UnknownPreset {
        name: name.to_owned(),
        known: PRESETS.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", "),
    })?;
    Config::from_toml(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_is_valid() {
        for (name, _) in PRESETS {
            let config = Config::preset(name).unwrap();
            config.validate().unwrap_or_else(|e| panic!("preset {name}: {e}"));
            assert!(!config.scopes.is_empty(), "preset {name} has no scopes");
        }
    }

    #[test]
    fn unknown_preset_lists_the_known_ones() {
        let err = Config::preset("openai-gpt-9").unwrap_err();
        assert_eq!(err.code(), "unknown_preset");
        assert!(err.to_string().contains("openai-gpt-4o-tier1"));
    }
}
