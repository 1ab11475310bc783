//! Exact BPE counts through tiktoken-rs, made robust by chunking.
//!
//! tiktoken-rs 0.12.1 unwraps fancy-regex's result, and fancy-regex gives up
//! (a "StackOverflow" runtime error, i.e. a panic in tiktoken-rs) on about
//! 1 MB of spaces or tabs with o200k. So text longer than [`CHUNK_BYTES`] is
//! encoded in chunks.
//!
//! # Where chunks are cut, and what that costs
//!
//! A seam is *exact* when the pre-tokeniser would end a piece there anyway,
//! so the sum over chunks equals the count of the whole. We cut only where
//! the character before the seam is an ASCII letter or a CJK ideograph
//! (U+4E00..=U+9FA5, all `\p{Lo}`) and the byte after it is ASCII, neither a
//! letter nor an apostrophe. Proof sketch, for both o200k and cl100k: the
//! regex match that covers the letter comes from a letter alternative, which
//! can continue only with letters, marks or an apostrophe contraction, so it
//! ends at the seam; the regexes have no look-behind, so the match from the
//! seam onward is the same whether or not the prefix is there; and since the
//! prefix ends in a letter, `\s+(?!\S)` and `\s++$` cannot match differently
//! at its end.
//!
//! When no such seam exists in the last half of a chunk (runs of one
//! character, emoji, spaces), the chunk is cut at the last character
//! boundary: an *inexact* seam. An inexact seam splits one pre-tokeniser
//! piece (and may move one whitespace character between its neighbours), so
//! the total may differ from the unchunked BPE count by at most
//! [`SEAM_BOUND`] tokens per inexact seam. The unit tests check that bound on
//! every seam of a set of pathological and mixed inputs.

use std::panic::{catch_unwind, AssertUnwindSafe};

use tiktoken_rs::CoreBPE;

use super::{estimate, Encoding};

/// Text up to this many bytes is encoded whole: its count is exactly
/// tiktoken-rs's. Longer text is chunked (see the module docs).
///
/// 64 KiB stays far below the run length at which fancy-regex gives up
/// (about 800 KB of spaces) and keeps every chunk's backtracking short.
pub const CHUNK_BYTES: usize = 64 * 1024;

/// The most an inexact seam can move the count, in tokens (see the module docs).
pub const SEAM_BOUND: u64 = 3;

/// A count together with the number of inexact seams behind it.
///
/// `tokens` is within `SEAM_BOUND * inexact_seams` of the unchunked BPE count;
/// with no inexact seam it is identical.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChunkedCount {
    /// Tokens counted.
    pub tokens: u64,
    /// Seams cut where the pre-tokeniser would not have cut.
    pub inexact_seams: u64,
}

/// Counts the tokens of `text` in `encoding`, exactly as tiktoken-rs's
/// `encode_ordinary` (special tokens such as `<|endoftext|>` count as text).
///
/// Never panics. Long inputs are chunked; see [`count_detailed`] for the
/// bound that applies when a seam could not be placed exactly.
pub fn count(encoding: Encoding, text: &str) -> u64 {
    count_detailed(encoding, text).tokens
}

/// Like [`count`], and also reports how many inexact seams were cut.
pub fn count_detailed(encoding: Encoding, text: &str) -> ChunkedCount {
    count_chunked(encoding, text, CHUNK_BYTES)
}

pub(crate) fn count_chunked(encoding: Encoding, text: &str, chunk_bytes: usize) -> ChunkedCount {
    let Some(bpe) = encoding.bpe() else {
        // The embedded tables failed to load (cannot happen with a sound
        // build); an estimate beats a panic on the hot path.
        return ChunkedCount { tokens: estimate(text), inexact_seams: 0 };
    };
    let mut result = ChunkedCount::default();
    let mut rest = text;
    while !rest.is_empty() {
        let (cut, exact) = split_point(rest, chunk_bytes);
        let (chunk, tail) = rest.split_at(cut);
        result.tokens += encode_len(bpe, chunk);
        if !exact {
            result.inexact_seams += 1;
        }
        rest = tail;
    }
    result
}

/// Encodes one chunk. A panic inside tiktoken-rs (none is known at this chunk
/// size) is caught and answered with the estimate rather than taking the
/// caller's thread down.
fn encode_len(bpe: &CoreBPE, chunk: &str) -> u64 {
    catch_unwind(AssertUnwindSafe(|| bpe.encode_ordinary(chunk).len() as u64)).unwrap_or_else(|_| estimate(chunk))
}

/// Where to end the next chunk of `text`, and whether that seam is exact.
fn split_point(text: &str, chunk_bytes: usize) -> (usize, bool) {
    if text.len() <= chunk_bytes {
        return (text.len(), true);
    }
    let bytes = text.as_bytes();
    let low = (chunk_bytes / 2).max(1);
    if let Some(cut) = (low..=chunk_bytes).rev().find(|&i| is_exact_seam(bytes, i)) {
        return (cut, true);
    }
    // No exact seam in the window: cut at the last character boundary.
    let first_char = text.chars().next().map_or(text.len(), char::len_utf8);
    let cut = (1..=chunk_bytes).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(first_char);
    (cut, cut == text.len())
}

/// True if a pre-tokeniser piece provably ends at byte `i` (module docs).
fn is_exact_seam(bytes: &[u8], i: usize) -> bool {
    let Some(&after) = bytes.get(i) else { return false };
    if !after.is_ascii() || after.is_ascii_alphabetic() || after == b'\'' {
        return false;
    }
    match i.checked_sub(1).and_then(|j| bytes.get(j)) {
        Some(b) if b.is_ascii_alphabetic() => true,
        Some(_) => ends_with_ideograph(&bytes[..i]),
        None => false,
    }
}

/// True if `prefix` ends with a character in U+4E00..=U+9FA5.
fn ends_with_ideograph(prefix: &[u8]) -> bool {
    match prefix {
        [.., a, b, c] if (0xe4..=0xe9).contains(a) && (b & 0xc0) == 0x80 && (c & 0xc0) == 0x80 => {
            let cp = (u32::from(a & 0x0f) << 12) | (u32::from(b & 0x3f) << 6) | u32::from(c & 0x3f);
            (0x4e00..=0x9fa5).contains(&cp)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(encoding: Encoding, text: &str) -> u64 {
        encoding.bpe().map(|bpe| bpe.encode_ordinary(text).len() as u64).unwrap_or(0)
    }

    fn mixed() -> String {
        let parts = [
            "The quick brown fox, 42 times; ",
            "速率限制是常见的问题。",
            "fn main() { let x = 1_000; }\n",
            "  indented\tline\r\n",
            "don't stop 😀🎉 ",
            "QUJDRGVmZ2gxMjM0NTY3OCsvPT0=",
        ];
        parts.iter().cycle().take(90).copied().collect()
    }

    #[test]
    fn exact_seams_give_identical_counts() {
        let text = mixed();
        for encoding in [Encoding::O200k, Encoding::Cl100k] {
            for chunk in [100, 257, 1000, 4096] {
                let got = count_chunked(encoding, &text, chunk);
                assert_eq!(got.inexact_seams, 0, "chunk {chunk}");
                assert_eq!(got.tokens, whole(encoding, &text), "chunk {chunk} {encoding:?}");
            }
        }
    }

    #[test]
    fn inexact_seams_stay_within_the_bound() {
        let units = ["a", " ", "\t", "\n", "-", "_", "中", "😀", "QUJD+/", "ab  ", "。", "1"];
        for encoding in [Encoding::O200k, Encoding::Cl100k] {
            for unit in units {
                let text = unit.repeat(3000 / unit.len());
                for chunk in [37, 64, 101, 500] {
                    let got = count_chunked(encoding, &text, chunk);
                    let exact = whole(encoding, &text);
                    let bound = SEAM_BOUND * got.inexact_seams;
                    assert!(got.tokens.abs_diff(exact) <= bound, "{unit:?} chunk {chunk}: {got:?} vs {exact}");
                }
            }
        }
    }

    #[test]
    fn seams_fall_on_char_boundaries() {
        for text in ["😀".repeat(100), "中".repeat(100), "é".repeat(100)] {
            let mut rest = text.as_str();
            while !rest.is_empty() {
                let (cut, _) = split_point(rest, 7);
                assert!(cut > 0 && rest.is_char_boundary(cut));
                rest = &rest[cut..];
            }
        }
    }
}
