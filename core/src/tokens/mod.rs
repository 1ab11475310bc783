//! Token counting: exact BPE counts, a fast estimate, and chat overheads.
//!
//! Everything here is sans-IO and panic-free on any input:
//!
//! - [`count`] gives the exact count of a text in an [`Encoding`], as
//!   tiktoken-rs computes it, robust to pathological input (see [`exact`]).
//! - [`estimate`] gives an o200k estimate from character classes, with no BPE:
//!   within 15% median error on the shipped corpus and well over 20 times
//!   faster (see `benches/tokens.rs`).
//! - [`count_chat`] adds OpenAI's per-message, name, reply-priming, tool and
//!   image costs (see [`chat`]).
//! - [`InputCounting`] picks exact or fast counting per route.
//! - [`estimate_request`] reads a whole request body as it goes on the wire
//!   (see [`request`]), for every binding's governed HTTP client.
//! - [`OutputModel`] reserves `min(max_tokens, pN)` of the outputs seen per
//!   route and class, from a lock-free [`Histogram`] (see [`output`]).
//! - [`InputCoefficients`] scales o200k counts for other providers'
//!   tokenizers, learned from settled usage; [`Accuracy`] measures every
//!   estimate against the actual usage.
//!
//! The BPE tables are compiled into tiktoken-rs (no network, no files at run
//! time). Each encoding is built once, on first use, and shared by all
//! threads; [`Encoding::preload`] builds it ahead of the hot path.
//!
//! ```
//! use llmgov::tokens::{self, ChatMessage, Encoding, InputCounting};
//!
//! assert_eq!(tokens::encoding_for_model("gpt-4o-mini"), Encoding::O200k);
//! assert_eq!(tokens::count(Encoding::O200k, "tiktoken is great!"), 6);
//! let messages = [ChatMessage::text("user", "Hello!")];
//! // 3 per message + "user" (1) + "Hello!" (2) + 3 to prime the reply.
//! assert_eq!(tokens::count_chat("gpt-4o", &messages, &[]), 9);
//! assert!(InputCounting::Fast.count_chat("gpt-4o", &messages, &[]) > 0);
//! ```

pub mod chat;
mod coefficient;
mod estimate;
pub mod exact;
mod image;
pub mod output;
pub mod request;

use std::sync::LazyLock;

use tiktoken_rs::CoreBPE;

pub use chat::{count_chat, ChatMessage, ImageDetail, Part};
pub use coefficient::{Accuracy, CoefficientConfig, ErrorSummary, InputCoefficients, Side};
pub use estimate::estimate;
pub use exact::{count, count_detailed, ChunkedCount, CHUNK_BYTES, SEAM_BOUND};
pub use image::image_tokens;
pub use output::{Histogram, OutputConfig, OutputModel};
pub use request::{estimate_request, Api, RequestEstimate};

/// A BPE encoding used by OpenAI models.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// `o200k_base`: GPT-4o, GPT-4.1, GPT-4.5, GPT-5 and the o-series.
    O200k,
    /// `cl100k_base`: GPT-4 (before 4o), GPT-3.5 Turbo and the v2/v3 embeddings.
    Cl100k,
}

impl Encoding {
    /// The encoding's name as tiktoken spells it.
    pub fn name(self) -> &'static str {
        match self {
            Encoding::O200k => "o200k_base",
            Encoding::Cl100k => "cl100k_base",
        }
    }

    /// Builds the encoder now (about 0.1 to 0.3 s for o200k) rather than on
    /// the first count, so that cost lands outside the request path.
    pub fn preload(self) {
        let _ = self.bpe();
    }

    /// The shared encoder: built once, lazily, from the tables compiled into
    /// tiktoken-rs. `None` only if those tables failed to parse, which a sound
    /// build cannot produce; callers fall back to the estimate then.
    pub(crate) fn bpe(self) -> Option<&'static CoreBPE> {
        static O200K: LazyLock<Option<CoreBPE>> = LazyLock::new(|| tiktoken_rs::o200k_base().ok());
        static CL100K: LazyLock<Option<CoreBPE>> = LazyLock::new(|| tiktoken_rs::cl100k_base().ok());
        match self {
            Encoding::O200k => O200K.as_ref(),
            Encoding::Cl100k => CL100K.as_ref(),
        }
    }
}

/// Model-name prefixes that use o200k. Checked before [`CL100K_PREFIXES`], so
/// `gpt-4o…` and `gpt-4.1…` never fall through to `gpt-4`.
const O200K_PREFIXES: &[&str] =
    &["gpt-4o", "chatgpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "gpt-oss", "o1", "o3", "o4", "codex-", "computer-use"];

/// Model-name prefixes that use cl100k.
const CL100K_PREFIXES: &[&str] = &["gpt-4", "gpt-3.5", "gpt-35", "text-embedding-3", "text-embedding-ada-002"];

/// The encoding an OpenAI model uses, by prefix of its name.
///
/// Matching is case-insensitive, ignores anything up to the last `/` (so
/// `openai/gpt-4o` and `azure/gpt-35-turbo` work) and uses prefixes, so dated
/// snapshots (`gpt-4o-2024-08-06`, `gpt-4-0613`) map like their family:
///
/// - `gpt-4o*`, `chatgpt-4o*`, `gpt-4.1*`, `gpt-4.5*`, `gpt-5*`, `gpt-oss*`,
///   `o1*`, `o3*`, `o4*`, `codex-*`, `computer-use*` → [`Encoding::O200k`];
/// - `gpt-4*` (other), `gpt-3.5*`, `gpt-35*` (Azure), `text-embedding-3*`,
///   `text-embedding-ada-002` → [`Encoding::Cl100k`];
/// - anything else → [`Encoding::O200k`], the encoding of every current
///   OpenAI model, and a fair proxy for other providers' modern tokenizers.
pub fn encoding_for_model(model: &str) -> Encoding {
    let name = model.rsplit('/').next().unwrap_or(model);
    let starts = |prefix: &&str| name.get(..prefix.len()).is_some_and(|head| head.eq_ignore_ascii_case(prefix));
    if O200K_PREFIXES.iter().any(starts) {
        Encoding::O200k
    } else if CL100K_PREFIXES.iter().any(starts) {
        Encoding::Cl100k
    } else {
        Encoding::O200k
    }
}

/// How a route counts input tokens before admission.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum InputCounting {
    /// BPE counts in the model's encoding: exact for OpenAI models, costs
    /// about a microsecond per 10 to 50 bytes.
    #[default]
    Exact,
    /// The character-class [`estimate`]: no BPE, many times faster, within
    /// about 15% of o200k on typical text.
    Fast,
}

impl InputCounting {
    /// Counts `text` as a request to `model` would.
    pub fn count_text(self, model: &str, text: &str) -> u64 {
        match self {
            InputCounting::Exact => count(encoding_for_model(model), text),
            InputCounting::Fast => estimate(text),
        }
    }

    /// Counts a chat request's prompt tokens, as [`count_chat`] does but with
    /// this mode's text counter.
    pub fn count_chat(self, model: &str, messages: &[ChatMessage], tools: &[serde_json::Value]) -> u64 {
        chat::count_chat_with(model, messages, tools, |text| self.count_text(model, text))
    }
}

/// The map the learning keeps per route (and class): lock-free reads, and
/// a fast hash, as its keys are the governor's own ids.
pub(crate) type LearningMap<K, V> = papaya::HashMap<K, V, foldhash::fast::RandomState>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_table() {
        for model in ["gpt-4o", "gpt-4o-mini-2024-07-18", "GPT-4.1-nano", "gpt-5", "o1-mini", "o3", "o4-mini"] {
            assert_eq!(encoding_for_model(model), Encoding::O200k, "{model}");
        }
        for model in ["gpt-4", "gpt-4-0613", "gpt-4-turbo", "gpt-3.5-turbo-0125", "azure/gpt-35-turbo"] {
            assert_eq!(encoding_for_model(model), Encoding::Cl100k, "{model}");
        }
        for model in ["claude-3-5-sonnet", "", "é", "/", "deepseek-chat"] {
            assert_eq!(encoding_for_model(model), Encoding::O200k, "{model}");
        }
    }
}
