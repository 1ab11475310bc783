//! Pathological inputs: long runs of one character class must neither panic
//! nor overflow the stack, and the work must grow linearly. tiktoken-rs 0.12.1
//! alone panics on about 1 MB of spaces or tabs with o200k.
//!
//! Linearity is checked by structure, not by the clock (time is measured in
//! `benches/tokens.rs`): every chunk is at most `CHUNK_BYTES`, the number of
//! chunks is linear in the length, and the counts scale 10x per 10x of input.

use llmgov::tokens::{self, Encoding, CHUNK_BYTES, SEAM_BOUND};

/// Deterministic base64 of pseudo-random bytes (no dependency needed).
fn base64(len: usize) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|_| {
            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            ALPHABET[(state >> 58) as usize] as char
        })
        .collect()
}

fn run(unit: &str, len: usize) -> String {
    match unit {
        "base64" => base64(len),
        _ => unit.repeat(len / unit.len()),
    }
}

const UNITS: [&str; 9] = ["a", " ", "\t", "\n", "-", "_", "中", "😀", "base64"];
const SIZES: [usize; 3] = [10_000, 100_000, 1_000_000];

#[test]
fn long_runs_do_not_panic_and_scale_linearly() {
    // Run on a thread with a small stack: callers' threads may have one.
    std::thread::Builder::new()
        .stack_size(512 * 1024)
        .spawn(|| {
            for unit in UNITS {
                let counts: Vec<_> = SIZES
                    .iter()
                    .map(|&len| {
                        let text = run(unit, len);
                        let detailed = tokens::count_detailed(Encoding::O200k, &text);
                        let max_chunks = (text.len() / (CHUNK_BYTES / 2) + 1) as u64;
                        assert!(detailed.inexact_seams <= max_chunks, "{unit:?} {len}: {detailed:?}");
                        (text.len(), detailed, tokens::estimate(&text))
                    })
                    .collect();
                for pair in counts.windows(2) {
                    let ((small_len, small, small_est), (big_len, big, big_est)) = (pair[0], pair[1]);
                    let ratio = big_len as f64 / small_len as f64;
                    let slack = SEAM_BOUND * (small.inexact_seams + big.inexact_seams) + ratio as u64 * 2;
                    let expected = (small.tokens as f64 * ratio) as u64;
                    assert!(big.tokens.abs_diff(expected) <= slack + expected / 100, "{unit:?}: {small:?} -> {big:?}");
                    let expected_est = (small_est as f64 * ratio) as u64;
                    assert!(
                        big_est.abs_diff(expected_est) <= 2 + expected_est / 100,
                        "{unit:?}: {small_est} -> {big_est}"
                    );
                }
            }
        })
        .expect("spawn")
        .join()
        .expect("no panic on pathological input");
}

#[test]
fn chunked_counts_stay_within_the_seam_bound() {
    // Where tiktoken-rs can count the whole run itself (100 KB), compare.
    let raw = tiktoken_rs::o200k_base_singleton();
    for unit in UNITS {
        let text = run(unit, 100_000);
        let detailed = tokens::count_detailed(Encoding::O200k, &text);
        let exact = raw.encode_ordinary(&text).len() as u64;
        assert!(
            detailed.tokens.abs_diff(exact) <= SEAM_BOUND * detailed.inexact_seams,
            "{unit:?}: {detailed:?} vs {exact}"
        );
    }
}

#[test]
fn cl100k_survives_the_same_runs() {
    for unit in UNITS {
        let text = run(unit, 1_000_000);
        assert!(tokens::count(Encoding::Cl100k, &text) > 0, "{unit:?}");
    }
}
