//! Exact counts: llmgov's robust counter agrees with tiktoken-rs.

use llmgov::tokens::{self, Encoding, CHUNK_BYTES};

/// The shipped corpus, one string per sample.
fn corpus() -> Vec<String> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/tokens");
    let mut samples = Vec::new();
    for file in ["english", "chinese", "code", "chat"] {
        let text = std::fs::read_to_string(format!("{dir}/{file}.txt")).expect("corpus file");
        samples.extend(text.split("\n%%%\n").map(|s| s.trim_end_matches('\n').to_owned()));
    }
    samples
}

fn raw(encoding: Encoding, text: &str) -> u64 {
    let bpe = match encoding {
        Encoding::O200k => tiktoken_rs::o200k_base_singleton(),
        Encoding::Cl100k => tiktoken_rs::cl100k_base_singleton(),
    };
    bpe.encode_ordinary(text).len() as u64
}

#[test]
fn corpus_counts_match_tiktoken() {
    let samples = corpus();
    assert!(samples.len() >= 60, "corpus has {} samples", samples.len());
    for encoding in [Encoding::O200k, Encoding::Cl100k] {
        for sample in &samples {
            assert_eq!(tokens::count(encoding, sample), raw(encoding, sample), "{encoding:?}: {sample:?}");
        }
    }
}

#[test]
fn known_counts() {
    // tiktoken's README example: ["t", "ik", "token", " is", " great", "!"] in cl100k.
    assert_eq!(tokens::count(Encoding::Cl100k, "tiktoken is great!"), 6);
    assert_eq!(tokens::count(Encoding::O200k, ""), 0);
    assert_eq!(tokens::count(Encoding::Cl100k, ""), 0);
    // Special tokens in user text are counted as ordinary text, never as one special token.
    assert!(tokens::count(Encoding::O200k, "<|endoftext|>") > 1);
    assert_eq!(Encoding::O200k.name(), "o200k_base");
    assert_eq!(Encoding::Cl100k.name(), "cl100k_base");
}

#[test]
fn long_mixed_text_is_chunked_without_error() {
    // Well past the chunk threshold, but mixed text always offers exact seams.
    let text: String = corpus().join("\n").repeat(20);
    assert!(text.len() > 3 * CHUNK_BYTES, "only {} bytes", text.len());
    for encoding in [Encoding::O200k, Encoding::Cl100k] {
        let detailed = tokens::count_detailed(encoding, &text);
        assert_eq!(detailed.inexact_seams, 0);
        assert_eq!(detailed.tokens, raw(encoding, &text), "{encoding:?}");
    }
}

#[test]
fn encoders_are_shared_across_threads() {
    let samples = corpus();
    let expected: u64 = samples.iter().map(|s| tokens::count(Encoding::O200k, s)).sum();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4)
            .map(|_| scope.spawn(|| samples.iter().map(|s| tokens::count(Encoding::O200k, s)).sum::<u64>()))
            .collect();
        for handle in handles {
            assert_eq!(handle.join().expect("counting thread"), expected);
        }
    });
}

#[test]
fn input_counting_modes() {
    use llmgov::tokens::InputCounting;
    let text = "Rate limits exist for good reasons.";
    assert_eq!(InputCounting::default(), InputCounting::Exact);
    assert_eq!(InputCounting::Exact.count_text("gpt-4o", text), raw(Encoding::O200k, text));
    assert_eq!(InputCounting::Exact.count_text("gpt-4", text), raw(Encoding::Cl100k, text));
    assert_eq!(InputCounting::Fast.count_text("gpt-4o", text), tokens::estimate(text));
}
