//! Loom models of the bucket primitives under every interleaving: the GCRA
//! compare-and-swap, the ring's add-then-check, and the all-or-nothing
//! reservation with rollback that the ledger builds from them.
//!
//! The primitives are generic over `AtomicWord`, so these models run the
//! ledger's own code on loom's atomics, in an ordinary `cargo test`.

use llmgov::ledger::atomic::AtomicWord;
use llmgov::ledger::gcra::GcraParams;
use llmgov::ledger::ring::Ring;
use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;

/// Loom's atomic behind the ledger's atomic-word interface.
struct LoomWord(AtomicU64);

impl AtomicWord for LoomWord {
    fn new(value: u64) -> Self {
        LoomWord(AtomicU64::new(value))
    }
    fn load(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
    fn compare_exchange_weak(&self, current: u64, new: u64) -> Result<u64, u64> {
        self.0.compare_exchange_weak(current, new, Ordering::SeqCst, Ordering::SeqCst)
    }
}

const MINUTE: u64 = 60_000_000_000;

/// Reserves `cost` on each bucket in order, rolling back in reverse on the
/// first refusal: the ledger's all-or-nothing protocol.
fn reserve_all(buckets: &[(GcraParams, LoomWord)], cost: u64, now: u64) -> bool {
    for (i, (params, tat)) in buckets.iter().enumerate() {
        if params.try_reserve(tat, cost, now).is_err() {
            for (params, tat) in buckets[..i].iter().rev() {
                params.rollback(tat, cost);
            }
            return false;
        }
    }
    true
}

#[test]
fn gcra_cas_admits_exactly_the_burst() {
    loom::model(|| {
        let params = GcraParams::new(1, MINUTE, 1);
        let tat = Arc::new(LoomWord::new(0));
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let (params, tat) = (params.clone(), tat.clone());
                thread::spawn(move || params.try_reserve(&*tat, 1, 0).is_ok())
            })
            .collect();
        let admitted = handles.into_iter().map(|h| h.join().unwrap()).filter(|&ok| ok).count();
        assert_eq!(admitted, 1);
        assert_eq!(params.available(&*tat, 0), 0);
    });
}

#[test]
fn all_or_nothing_rollback_never_over_admits_nor_leaks() {
    loom::model(|| {
        // The first bucket fits both requests, the second only one: the loser
        // must give its hold on the first back.
        let buckets = Arc::new([
            (GcraParams::new(2, MINUTE, 2), LoomWord::new(0)),
            (GcraParams::new(1, MINUTE, 1), LoomWord::new(0)),
        ]);
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let buckets = buckets.clone();
                thread::spawn(move || reserve_all(&*buckets, 1, 0))
            })
            .collect();
        let admitted = handles.into_iter().map(|h| h.join().unwrap()).filter(|&ok| ok).count();
        assert_eq!(admitted, 1, "one request fits; a rollback's transient hold may not refuse both here");
        assert_eq!(buckets[0].0.available(&buckets[0].1, 0), 1, "the loser's hold was rolled back");
        assert_eq!(buckets[1].0.available(&buckets[1].1, 0), 0);
    });
}

#[test]
fn refund_racing_a_reservation_keeps_the_books() {
    loom::model(|| {
        let params = GcraParams::new(4, MINUTE, 4);
        let tat = Arc::new(LoomWord::new(0));
        params.try_reserve(&*tat, 3, 0).unwrap();
        let refunder = {
            let (params, tat) = (params.clone(), tat.clone());
            thread::spawn(move || params.adjust(&*tat, 3, 1, 0))
        };
        let reserved = params.try_reserve(&*tat, 2, 0).is_ok();
        refunder.join().unwrap();
        let expected = if reserved { 1 } else { 3 };
        assert_eq!(params.available(&*tat, 0), expected);
    });
}

#[test]
fn ring_add_then_check_never_over_admits() {
    loom::model(|| {
        let ring: Arc<Ring<LoomWord>> = Arc::new(Ring::new(3));
        let amount = 1;
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let ring = ring.clone();
                thread::spawn(move || ring.try_reserve(0, 1, amount, |_| {}).is_ok())
            })
            .collect();
        let admitted = handles.into_iter().map(|h| h.join().unwrap()).filter(|&ok| ok).count() as u64;
        assert!(admitted <= amount, "admitted {admitted} past an amount of {amount}");
        assert_eq!(ring.live_sum(0), admitted, "every refusal took its add back");
    });
}
