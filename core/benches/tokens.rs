//! Token counting throughput: exact BPE (tiktoken-rs, through llmgov's robust
//! chunked counter and raw) against the fast estimator, on 100 B, 10 KB and
//! 1 MB of mixed text, in the same run. Criterion reports MB/s.
//!
//! Run: `cargo bench -p llmgov --bench tokens`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use llmgov::tokens::{self, Encoding};

/// Mixed English, Chinese, code and chat text, cycled to `len` bytes (cut on
/// a character boundary).
fn mixed(len: usize) -> String {
    let mut corpus = String::new();
    for file in ["english", "chinese", "code", "chat"] {
        let path = format!("{}/tests/data/tokens/{file}.txt", env!("CARGO_MANIFEST_DIR"));
        corpus.push_str(&std::fs::read_to_string(path).unwrap_or_default().replace("\n%%%\n", "\n"));
    }
    let samples: Vec<&str> = corpus.split('\n').collect();
    let mut out = String::with_capacity(len + 64);
    // Interleave lines from the four kinds so every size sees all of them.
    let mut i = 0;
    while out.len() < len {
        out.push_str(samples[(i * 37) % samples.len()]);
        out.push('\n');
        i += 1;
    }
    let mut cut = len;
    while !out.is_char_boundary(cut) {
        cut -= 1;
    }
    out.truncate(cut);
    out
}

fn counting(c: &mut Criterion) {
    Encoding::O200k.preload();
    let raw = tiktoken_rs::o200k_base_singleton();
    let mut group = c.benchmark_group("tokens");
    for (label, len) in [("100B", 100), ("10KB", 10_000), ("1MB", 1_000_000)] {
        let text = mixed(len);
        group.throughput(Throughput::Bytes(text.len() as u64));
        if len >= 1_000_000 {
            group.sample_size(10);
        }
        group.bench_with_input(BenchmarkId::new("tiktoken_raw", label), &text, |b, t| {
            b.iter(|| raw.encode_ordinary(black_box(t)).len())
        });
        group.bench_with_input(BenchmarkId::new("llmgov_count", label), &text, |b, t| {
            b.iter(|| tokens::count(Encoding::O200k, black_box(t)))
        });
        group.bench_with_input(BenchmarkId::new("llmgov_estimate", label), &text, |b, t| {
            b.iter(|| tokens::estimate(black_box(t)))
        });
    }
    group.finish();
}

criterion_group!(benches, counting);
criterion_main!(benches);
