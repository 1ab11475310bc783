//! Token findings of the rev-sched review.

use llmgov::tokens::{self, Encoding};

/// The estimator's docs: "Long runs of one whitespace character merge into
/// long tokens (16 tabs or newlines, 128 spaces)". A run of tabs was charged
/// as spaces (128 to a token): 1000 tabs estimated 8 tokens, o200k says 63.
#[test]
fn a_run_of_tabs_is_estimated_at_16_to_a_token() {
    for len in [100, 1000, 10_000] {
        let text = "\t".repeat(len);
        let (estimate, exact) = (tokens::estimate(&text), tokens::count(Encoding::O200k, &text));
        assert!(estimate as f64 >= 0.85 * exact as f64, "{len} tabs: estimate {estimate}, o200k {exact}");
    }
}
