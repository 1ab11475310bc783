//! Numbers for the handles C passes on the hot path (routes, scopes,
//! classes): each is interned once into a dense `uint32_t`, and looked up
//! without a lock on every call after.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, PoisonError};

use crate::errors::{Failure, Outcome};

/// An append-only table of `T`, each stored once.
#[derive(Debug)]
pub(crate) struct Interned<T> {
    /// What each number stands for; read without a lock.
    items: boxcar::Vec<T>,
    /// The number of each item; only interning takes the lock.
    numbers: Mutex<HashMap<T, u32>>,
}

impl<T: Copy + Eq + Hash> Interned<T> {
    pub(crate) fn new() -> Self {
        Interned { items: boxcar::Vec::new(), numbers: Mutex::new(HashMap::new()) }
    }

    /// The number of `item`, the same every time it is interned.
    pub(crate) fn intern(&self, item: T, what: &str) -> Outcome<u32> {
        // A panic while holding the lock cannot leave the map inconsistent
        // with `items` (an insert follows its push), so a poisoned lock is
        // still good.
        let mut numbers = self.numbers.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(&n) = numbers.get(&item) {
            return Ok(n);
        }
        let n = u32::try_from(self.items.count())
            .map_err(|_| Failure::argument(what, self.items.count(), "more than 4 billion interned"))?;
        let index = self.items.push(item);
        debug_assert_eq!(index, n as usize, "pushes happen under the lock");
        numbers.insert(item, n);
        Ok(n)
    }

    /// What `number` stands for, if it was handed out.
    #[inline]
    pub(crate) fn get(&self, number: u32) -> Option<T> {
        self.items.get(number as usize).copied()
    }
}
