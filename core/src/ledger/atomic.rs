//! The one atomic word the bucket primitives are written against.
//!
//! The primitives are generic over it so that the loom model checker
//! (`core/tests/loom.rs`) drives exactly the code the ledger runs, without a
//! `--cfg loom` rebuild of the whole dependency tree.

use std::sync::atomic::{AtomicU64, Ordering};

/// A 64-bit atomic cell with sequentially consistent operations.
///
/// Sequential consistency is what the add-then-check reservations need (a
/// Dekker-style handshake between two reservers); on x86-64 it costs nothing
/// over acquire/release for loads and read-modify-writes.
pub trait AtomicWord: Send + Sync {
    /// A cell holding `value`.
    fn new(value: u64) -> Self;
    /// Reads the value.
    fn load(&self) -> u64;
    /// Replaces `current` with `new` if the cell still holds `current`;
    /// otherwise returns what it holds. May fail spuriously.
    fn compare_exchange_weak(&self, current: u64, new: u64) -> Result<u64, u64>;
}

impl AtomicWord for AtomicU64 {
    #[inline]
    fn new(value: u64) -> Self {
        AtomicU64::new(value)
    }
    #[inline]
    fn load(&self) -> u64 {
        AtomicU64::load(self, Ordering::SeqCst)
    }
    #[inline]
    fn compare_exchange_weak(&self, current: u64, new: u64) -> Result<u64, u64> {
        AtomicU64::compare_exchange_weak(self, current, new, Ordering::SeqCst, Ordering::SeqCst)
    }
}

/// Applies `f` to the cell's value until the compare-and-swap succeeds, or
/// until `f` declines by returning `Err`. Returns the previous value.
#[inline]
pub fn update<A: AtomicWord, E>(cell: &A, mut f: impl FnMut(u64) -> Result<u64, E>) -> Result<u64, E> {
    let mut current = cell.load();
    loop {
        let next = f(current)?;
        match cell.compare_exchange_weak(current, next) {
            Ok(previous) => return Ok(previous),
            Err(actual) => current = actual,
        }
    }
}
