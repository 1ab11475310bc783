//! What a limit counts, and what a request costs on it.

use serde::{Deserialize, Serialize};

/// The quantity a limit counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dimension {
    /// Requests started in the window.
    Requests,
    /// Prompt tokens in the window.
    InputTokens,
    /// Completion tokens in the window.
    OutputTokens,
    /// Prompt plus completion tokens in the window.
    Tokens,
    /// Requests in flight at once; has no window.
    Concurrency,
}

impl Dimension {
    /// The name used in configs, scenarios, errors and every binding.
    pub fn as_str(self) -> &'static str {
        match self {
            Dimension::Requests => "requests",
            Dimension::InputTokens => "input_tokens",
            Dimension::OutputTokens => "output_tokens",
            Dimension::Tokens => "tokens",
            Dimension::Concurrency => "concurrency",
        }
    }

    /// Whether output tokens count on this dimension (and so streamed output
    /// or an overrun of the reservation must be charged to it).
    pub(crate) fn counts_output(self) -> bool {
        matches!(self, Dimension::OutputTokens | Dimension::Tokens)
    }
}

impl std::fmt::Display for Dimension {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Token counts of one request: the estimate at admission, or the actual
/// usage at settlement.
///
/// `input_tokens` includes `cached_input_tokens` (as OpenAI reports
/// `prompt_tokens`); limits that do not count cache reads (Anthropic's input
/// limit) subtract them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Usage {
    /// All prompt tokens, cached ones included.
    #[serde(default)]
    pub input_tokens: u64,
    /// The part of `input_tokens` read from the provider's prompt cache.
    #[serde(default)]
    pub cached_input_tokens: u64,
    /// Completion tokens: reserved (the estimate) or produced (the actual).
    #[serde(default)]
    pub output_tokens: u64,
}

impl Usage {
    /// Usage of `input_tokens` prompt and `output_tokens` completion tokens, none cached.
    pub fn new(input_tokens: u64, output_tokens: u64) -> Self {
        Usage { input_tokens, cached_input_tokens: 0, output_tokens }
    }

    /// The same usage with `cached` of its input tokens read from cache.
    pub fn with_cached_input(mut self, cached: u64) -> Self {
        self.cached_input_tokens = cached;
        self
    }

    /// Checks that the cached part does not exceed the whole.
    pub(crate) fn validate(&self) -> crate::Result<()> {
        if self.cached_input_tokens > self.input_tokens {
            return Err(crate::Error::InvalidRequest {
                field: "cached_input_tokens",
                value: self.cached_input_tokens.to_string(),
                reason: format!("exceeds input_tokens ({})", self.input_tokens),
            });
        }
        Ok(())
    }

    /// What this usage costs on a windowed limit of `dimension`.
    /// Concurrency is handled by the caller (one slot per request).
    pub(crate) fn cost(&self, dimension: Dimension, count_cached_input: bool) -> u64 {
        let input = if count_cached_input { self.input_tokens } else { self.input_tokens - self.cached_input_tokens };
        match dimension {
            Dimension::Requests | Dimension::Concurrency => 1,
            Dimension::InputTokens => input,
            Dimension::OutputTokens => self.output_tokens,
            Dimension::Tokens => input.saturating_add(self.output_tokens),
        }
    }
}
