//! Token counting: exact BPE counts (o200k, cl100k) and the fast estimate.

use std::ffi::c_char;

use llmgov_core::tokens::{self, Encoding};

use crate::args::{self, Out};
use crate::errors::{guard, llmgov_result, Failure, Outcome};

/// A BPE encoding used by OpenAI models.
#[allow(non_camel_case_types)]
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum llmgov_encoding {
    /// `o200k_base`: GPT-4o, GPT-4.1, GPT-5, the o-series.
    O200k = 0,
    /// `cl100k_base`: GPT-4 (before 4o), GPT-3.5 Turbo.
    Cl100k = 1,
}

const ENCODINGS: [(llmgov_encoding, Encoding); 2] =
    [(llmgov_encoding::O200k, Encoding::O200k), (llmgov_encoding::Cl100k, Encoding::Cl100k)];

fn encoding_of(number: u32) -> Outcome<Encoding> {
    ENCODINGS
        .iter()
        .find(|(c, _)| *c as u32 == number)
        .map(|(_, core)| *core)
        .ok_or_else(|| Failure::argument("encoding", number, "not an llmgov_encoding (0 or 1)"))
}

/// The exact token count of `text_len` bytes of UTF-8 `text` in `encoding`
/// (an `llmgov_encoding`). Safe on any text, however long or repetitive.
/// The first count in an encoding builds its tables (0.1 to 0.3 s).
///
/// # Ownership
/// The text is only read, during the call.
///
/// # Safety
/// `text` NULL (only with `text_len` 0) or readable for `text_len` bytes;
/// `out_tokens` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn llmgov_tokens_count(
    encoding: u32,
    text: *const c_char,
    text_len: usize,
    out_tokens: *mut u64,
) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let (text, out) = unsafe { (args::utf8(text, text_len, "text")?, Out::new(out_tokens, "out_tokens")?) };
        out.write(tokens::count(encoding_of(encoding)?, text));
        Ok(())
    })
}

/// As `llmgov_tokens_count`, in the encoding of OpenAI model `model`
/// (`"gpt-4o"`, `"openai/gpt-4-0613"`; unknown models count as o200k).
///
/// # Safety
/// As `llmgov_tokens_count`; `model` NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn llmgov_tokens_count_for_model(
    model: *const c_char,
    text: *const c_char,
    text_len: usize,
    out_tokens: *mut u64,
) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let (model, text, out) = unsafe {
            (args::text(model, "model")?, args::utf8(text, text_len, "text")?, Out::new(out_tokens, "out_tokens")?)
        };
        out.write(tokens::count(tokens::encoding_for_model(model), text));
        Ok(())
    })
}

/// A fast o200k estimate of the tokens in `text` (no BPE: tens of times
/// faster than counting, a few percent median error).
///
/// # Safety
/// As `llmgov_tokens_count`.
#[no_mangle]
pub unsafe extern "C" fn llmgov_tokens_estimate(
    text: *const c_char,
    text_len: usize,
    out_tokens: *mut u64,
) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let (text, out) = unsafe { (args::utf8(text, text_len, "text")?, Out::new(out_tokens, "out_tokens")?) };
        out.write(tokens::estimate(text));
        Ok(())
    })
}
