//! The mock server's config file: which providers it plays, and how long
//! the answers the model "wants" to give are.

use std::path::Path;

use serde::Deserialize;

use crate::error::{duration_ns, parse_toml, CliError};
use crate::provider::{ApiShape, ProviderConfig};

/// The whole config file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MockConfig {
    /// Settings of the server itself.
    #[serde(default)]
    pub server: ServerSettings,
    /// The provider behind `/v1/chat/completions`, if any.
    #[serde(default)]
    pub openai: Option<ProviderConfig>,
    /// The provider behind `/v1/messages`, if any.
    #[serde(default)]
    pub anthropic: Option<ProviderConfig>,
}

/// The `[server]` table.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSettings {
    /// Seeds the answer lengths and the providers' chaos, so that a run can
    /// be repeated.
    #[serde(default)]
    pub seed: u64,
    /// How many tokens the model wants to answer with, before `max_tokens`
    /// cuts it short.
    #[serde(default)]
    pub output_tokens: OutputTokens,
    /// `max_tokens` of an OpenAI request that sets neither `max_tokens` nor
    /// `max_completion_tokens`. Anthropic requires the field, so it has no
    /// default.
    #[serde(default = "default_max_tokens")]
    pub default_max_tokens: u64,
}

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings { seed: 0, output_tokens: OutputTokens::default(), default_max_tokens: default_max_tokens() }
    }
}

fn default_max_tokens() -> u64 {
    1024
}

/// A uniform distribution of answer lengths, in tokens, both ends included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputTokens {
    /// The shortest answer.
    pub min: u64,
    /// The longest answer.
    pub max: u64,
}

impl Default for OutputTokens {
    fn default() -> Self {
        OutputTokens { min: 20, max: 200 }
    }
}

/// The longest answer the model may want, in tokens: far past any real
/// model's, and a plain answer of that many filler words still fits in a
/// few megabytes.
const MAX_ANSWER_TOKENS: u64 = 1_000_000;

impl MockConfig {
    /// Reads and checks the config at `path`; errors name the file, the
    /// field and its value.
    pub fn load(path: &Path) -> Result<Self, CliError> {
        let text = std::fs::read_to_string(path).map_err(|e| CliError::from(e).in_file(path))?;
        Self::parse(&text).map_err(|e| e.in_file(path))
    }

    /// Parses and checks a config's text.
    pub fn parse(text: &str) -> Result<Self, CliError> {
        let config: MockConfig = parse_toml(text)?;
        config.validate()?;
        Ok(config)
    }

    /// The providers it plays, each with the table it came from.
    pub fn providers(&self) -> impl Iterator<Item = (ApiShape, &ProviderConfig)> {
        let openai = self.openai.as_ref().map(|c| (ApiShape::Openai, c));
        let anthropic = self.anthropic.as_ref().map(|c| (ApiShape::Anthropic, c));
        openai.into_iter().chain(anthropic)
    }

    fn validate(&self) -> Result<(), CliError> {
        let OutputTokens { min, max } = self.server.output_tokens;
        if min == 0 {
            return Err(CliError::field("server.output_tokens.min", min, "must be at least 1"));
        }
        if max < min {
            return Err(CliError::field("server.output_tokens.max", max, format!("must be at least min ({min})")));
        }
        if max > MAX_ANSWER_TOKENS {
            let reason = format!("must be at most {MAX_ANSWER_TOKENS}: every answer is built in memory");
            return Err(CliError::field("server.output_tokens.max", max, reason));
        }
        if self.server.default_max_tokens == 0 {
            return Err(CliError::field("server.default_max_tokens", 0, "must be at least 1"));
        }
        if self.openai.is_none() && self.anthropic.is_none() {
            return Err(CliError::field("[openai] / [anthropic]", "missing", "configure at least one provider"));
        }
        for (shape, provider) in self.providers() {
            let table = table_name(shape);
            if provider.shape != shape {
                let value = table_name(provider.shape);
                return Err(CliError::field(
                    format!("{table}.shape"),
                    value,
                    format!("must be \"{table}\" in [{table}]"),
                ));
            }
            // Checked here too so that errors name the table rather than
            // the generic `provider` prefix of `Provider::new`.
            provider.compile(table)?;
            if let Some(at) = &provider.chaos.tighten_at {
                duration_ns(&format!("{table}.chaos.tighten_at"), at)?;
            }
        }
        Ok(())
    }
}

/// The config table (and `shape` value) of an API shape.
pub(crate) fn table_name(shape: ApiShape) -> &'static str {
    match shape {
        ApiShape::Openai => "openai",
        ApiShape::Anthropic => "anthropic",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fill_the_server_table() {
        let config = MockConfig::parse("[openai]\nshape = \"openai\"\n").unwrap();
        assert_eq!(config.server, ServerSettings::default());
        assert_eq!(config.providers().count(), 1);
    }

    #[test]
    fn a_shape_that_does_not_match_its_table_names_the_field() {
        let err = MockConfig::parse("[anthropic]\nshape = \"openai\"\n").unwrap_err().to_string();
        assert!(err.contains("anthropic.shape") && err.contains("openai"), "{err}");
    }

    #[test]
    fn limit_errors_name_the_table() {
        let text =
            "[openai]\nshape = \"openai\"\nlimits = [{ dimension = \"requests\", amount = 0, window = \"1m\" }]\n";
        let err = MockConfig::parse(text).unwrap_err().to_string();
        assert!(err.contains("openai.limits[0].amount"), "{err}");
    }

    #[test]
    fn the_example_configs_load() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("mock");
        let mut loaded = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                MockConfig::load(&path).unwrap_or_else(|e| panic!("{e}"));
                loaded += 1;
            }
        }
        assert!(loaded >= 3, "cli/mock/ has openai-tier1, anthropic and test");
    }

    #[test]
    fn bad_output_ranges_and_empty_configs_are_refused() {
        let text = "[server]\noutput_tokens = { min = 50, max = 10 }\n[openai]\nshape = \"openai\"\n";
        assert!(MockConfig::parse(text).unwrap_err().to_string().contains("server.output_tokens.max"));
        assert!(MockConfig::parse("[server]\nseed = 1\n").unwrap_err().to_string().contains("at least one provider"));
        let err = MockConfig::parse("[server]\nsede = 1\n[openai]\nshape = \"openai\"\n").unwrap_err().to_string();
        assert!(err.contains("sede"), "{err}");
    }
}
