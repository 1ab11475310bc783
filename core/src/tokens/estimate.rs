//! The fast estimator: a token count from character classes, without BPE.
//!
//! One pass over the bytes splits the text into runs the way the o200k
//! pre-tokeniser does (letters, digits, punctuation, whitespace, CJK, other
//! non-ASCII) and charges each run a weight fitted by least squares on the
//! corpus in `core/tests/data/tokens/` (relative error, o200k exact counts as
//! the target). Weights are in milli-tokens so the hot loop stays integer.
//!
//! Why these features: o200k gives most ASCII words one token (with the space
//! before them folded in), splits camelCase at the case change, cuts digit
//! runs into groups of three, and merges short punctuation runs. CJK text has
//! no spaces, so it is charged per character. Long runs of one whitespace
//! character merge into long tokens (16 tabs or newlines, 128 spaces).

/// Weights in milli-tokens, fitted on the shipped corpus (see the module docs).
mod w {
    /// One ASCII word (a camelCase part counts as a word).
    pub const WORD: u64 = 1035;
    /// Each letter of a word beyond `SHORT_WORD`. The fit alone would take
    /// less; 125 keeps a run of one repeated letter at o200k's 8 per token.
    pub const LONG_LETTER: u64 = 125;
    /// Word length covered by the first token.
    pub const SHORT_WORD: u64 = 7;
    /// One run of ASCII punctuation.
    pub const PUNCT_RUN: u64 = 725;
    /// Each punctuation character beyond the first in a run.
    pub const PUNCT_EXTRA: u64 = 360;
    /// A group of up to three digits.
    pub const DIGIT_GROUP: u64 = 1000;
    /// A whitespace run holding a line break.
    pub const NEWLINE_RUN: u64 = 560;
    /// A whitespace run of two or more blanks or tabs (indentation).
    pub const BLANK_RUN: u64 = 1030;
    /// One CJK character (ideographs, kana, hangul, full-width forms).
    pub const CJK: u64 = 700;
    /// One other non-ASCII character from the BMP (accents, Cyrillic, curly quotes).
    pub const OTHER: u64 = 1000;
    /// One character outside the BMP (emoji, rare ideographs).
    pub const ASTRAL: u64 = 1000;
}

/// Estimates the o200k token count of `text` without BPE.
///
/// Never panics, runs in one linear pass and allocates nothing. The result is
/// 0 only for the empty string.
pub fn estimate(text: &str) -> u64 {
    let bytes = text.as_bytes();
    let mut milli: u64 = 0;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let (next, cost) = match b {
            b'a'..=b'z' | b'A'..=b'Z' => letters(bytes, i),
            b'0'..=b'9' => digits(bytes, i),
            _ if is_space(b) => whitespace(bytes, i),
            0x80.. => non_ascii(bytes, i),
            _ => punctuation(bytes, i),
        };
        milli += cost;
        i = next;
    }
    if bytes.is_empty() {
        0
    } else {
        // Round to nearest: the weights are fitted means, not upper bounds.
        milli.saturating_add(500).div_euclid(1000).max(1)
    }
}

/// A run of ASCII letters, split at lower-to-upper case changes.
fn letters(bytes: &[u8], start: usize) -> (usize, u64) {
    let mut i = start;
    let mut cost = 0;
    let mut word_len: u64 = 0;
    let mut prev_lower = false;
    while let Some(&b) = bytes.get(i) {
        if !b.is_ascii_alphabetic() {
            break;
        }
        let upper = b.is_ascii_uppercase();
        if upper && prev_lower {
            cost += word_cost(word_len);
            word_len = 0;
        }
        word_len += 1;
        prev_lower = !upper;
        i += 1;
    }
    (i, cost + word_cost(word_len))
}

fn word_cost(len: u64) -> u64 {
    w::WORD + len.saturating_sub(w::SHORT_WORD) * w::LONG_LETTER
}

/// A run of ASCII digits: o200k cuts them into groups of at most three.
fn digits(bytes: &[u8], start: usize) -> (usize, u64) {
    let end = run_end(bytes, start, |b| b.is_ascii_digit());
    let groups = ((end - start) as u64).div_ceil(3);
    (end, groups * w::DIGIT_GROUP)
}

/// A run of ASCII punctuation and control characters.
fn punctuation(bytes: &[u8], start: usize) -> (usize, u64) {
    let end = run_end(bytes, start, |b| b.is_ascii() && !b.is_ascii_alphanumeric() && !is_space(b));
    let len = (end - start) as u64;
    (end, w::PUNCT_RUN + (len - 1) * w::PUNCT_EXTRA)
}

/// A run of ASCII whitespace. A lone space is folded into the next word.
fn whitespace(bytes: &[u8], start: usize) -> (usize, u64) {
    let end = run_end(bytes, start, is_space);
    let run = &bytes[start..end];
    let len = run.len() as u64;
    if run == b" " {
        return (end, 0);
    }
    let newlines = run.iter().any(|&b| b == b'\n' || b == b'\r');
    let blanks = run.iter().filter(|&&b| b == b' ' || b == b'\t').count() as u64;
    let mut cost = 0;
    if newlines {
        cost += w::NEWLINE_RUN;
    }
    if blanks >= 2 {
        cost += w::BLANK_RUN;
    }
    // Long runs: tabs and newlines merge about 16 to a token, spaces 128.
    if cost == 0 {
        // A lone tab or carriage return: a token of its own, or merged like punctuation.
        cost = w::PUNCT_RUN;
    }
    let per_token = if run.iter().all(|&b| b == b' ') { 128 } else { 16 };
    (end, cost + (len / per_token) * 1000)
}

/// A run of non-ASCII characters, charged per character by class.
fn non_ascii(bytes: &[u8], start: usize) -> (usize, u64) {
    let mut i = start;
    let mut cost = 0;
    while let Some(&lead) = bytes.get(i) {
        let (width, weight) = match lead {
            0x00..=0x7f => break,
            // A stray continuation byte cannot start a char in valid UTF-8; skip it.
            0x80..=0xbf => (1, 0),
            0xc0..=0xdf => (2, w::OTHER),
            // U+3000..=U+DFFF (CJK, kana, hangul) and U+F000..=U+FFFF (full-width forms).
            0xe3..=0xed | 0xef => (3, w::CJK),
            0xe0..=0xef => (3, w::OTHER),
            _ => (4, w::ASTRAL),
        };
        cost += weight;
        i += width;
    }
    (i.min(bytes.len()), cost)
}

/// The whitespace of the estimator: ASCII blanks, line breaks, VT and FF.
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

fn run_end(bytes: &[u8], start: usize, keep: impl Fn(u8) -> bool) -> usize {
    let mut i = start;
    while i < bytes.len() && keep(bytes[i]) {
        i += 1;
    }
    i
}
