//! The core's plausibility checks on a usage, for the shared scopes whose
//! counts never pass through the core's ledger.

use llmgov::{Usage, MAX_TOKENS};

use crate::errors::{Error, Result};

/// Refuses what the core's ledger refuses: a count above
/// [`MAX_TOKENS`], or more cached input than input. Checked before
/// anything is reserved, charged or marked reconciled, so a refused usage
/// changes nothing. (It restates the core's `Usage::validate`, which is
/// crate-private.)
#[inline]
pub(crate) fn check(usage: &Usage) -> Result<()> {
    if usage.input_tokens.max(usage.output_tokens) > MAX_TOKENS || usage.cached_input_tokens > usage.input_tokens {
        return Err(implausible(usage));
    }
    Ok(())
}

#[cold]
fn implausible(usage: &Usage) -> Error {
    for (field, value) in [("input_tokens", usage.input_tokens), ("output_tokens", usage.output_tokens)] {
        if value > MAX_TOKENS {
            return invalid(field, value, format!("more than {MAX_TOKENS} tokens; no request is that large"));
        }
    }
    let reason = format!("exceeds input_tokens ({})", usage.input_tokens);
    invalid("cached_input_tokens", usage.cached_input_tokens, reason)
}

fn invalid(field: &'static str, value: u64, reason: String) -> Error {
    Error::Core(llmgov::Error::InvalidRequest { field, value: value.to_string(), reason })
}
