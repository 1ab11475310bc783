//! The unsettled permits, per route and permit-TTL slot: how many there are
//! and what they reserve. A snapshot tells from them what live permits hold
//! on each limit (`reserved`) apart from what settled requests took, and
//! counts those left in a slot past its life as expired.
//!
//! Every permit passes through here twice, so the books are kept per thread:
//! a thread only ever writes its own table, with plain loads and stores
//! rather than locked read-modify-writes (which cost as much as the whole
//! reservation on one bucket: see BENCHMARKS.md). A permit settled on
//! another thread than the one that acquired it leaves its charge in one
//! table and its refund in the other; sums across threads are exact.
//! Readers (snapshots) may see an update half done and be off by the
//! permits it moves.
//!
//! A thread's books are open-addressed tables on `(route, slot)`: a first
//! one, then any it overflowed into, each twice the size of the one before
//! (kept until the ledger is dropped: a reader may be in one). Entries whose
//! slot has aged out are swept once per slot.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering::Relaxed, Ordering::Release};

use thread_local::ThreadLocal;

use super::limit::TTL_SLOTS;
use super::registry::RouteId;
use crate::dimension::CostParts;

/// Entries in a thread's first table: routes × live slots it can book
/// before growing.
const FIRST_CAPACITY: usize = 32;

/// Part of [`CostParts`] that counts permits: the first, so that
/// [`Booked::Count`] books the parts up to it.
const COUNT: usize = 0;

/// Which parts of [`CostParts`] a route's permits book; a route books the
/// same at every call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Booked {
    /// The count alone: every limit on the route counts requests.
    Count,
    /// Every part: the route has token or cost limits.
    All,
}

/// What the permits of one route admitted in one TTL slot reserve, as booked
/// by one thread: one cache line.
#[derive(Debug, Default)]
#[repr(align(64))]
struct Entry {
    /// `(route + 1) << 32 | slot as u32`; 0 while empty.
    key: AtomicU64,
    parts: [AtomicI64; CostParts::LEN],
}

impl Entry {
    fn parts(&self) -> CostParts {
        CostParts(std::array::from_fn(|i| self.parts[i].load(Relaxed)))
    }

    /// Adds the `booked` parts of `parts` (takes them off if `TAKE_OFF`).
    #[inline(always)]
    fn add<const TAKE_OFF: bool>(&self, parts: &CostParts, booked: Booked) {
        match booked {
            Booked::Count => self.add_first::<TAKE_OFF, { COUNT + 1 }>(parts),
            Booked::All => self.add_first::<TAKE_OFF, { CostParts::LEN }>(parts),
        }
    }

    /// [`Self::add`] of the first `PARTS` parts, unrolled.
    #[inline(always)]
    fn add_first<const TAKE_OFF: bool, const PARTS: usize>(&self, parts: &CostParts) {
        for (sum, part) in self.parts[..PARTS].iter().zip(parts.0) {
            let part = if TAKE_OFF { part.wrapping_neg() } else { part };
            sum.store(sum.load(Relaxed).wrapping_add(part), Relaxed);
        }
    }

    /// Empties the entry, returning its key and parts.
    fn take(&self) -> (u64, CostParts) {
        let taken = (self.key.load(Relaxed), self.parts());
        self.key.store(0, Relaxed);
        taken
    }
}

/// An open-addressed table of a power-of-two length, at most 3/4 full so
/// that a probe always ends. The first table of a thread is an array inside
/// its books, which saves booking a dependent load (a pointer to follow).
#[derive(Debug)]
struct Table<Entries> {
    entries: Entries,
    /// Entries taken.
    occupied: AtomicUsize,
}

impl Table<Box<[Entry]>> {
    fn new(capacity: usize) -> Self {
        Table { entries: (0..capacity).map(|_| Entry::default()).collect(), occupied: AtomicUsize::new(0) }
    }
}

impl<Entries: AsRef<[Entry]>> Table<Entries> {
    /// The entry of `key`, claimed (empty) if it has none yet; `None` if
    /// it has none and the table is as full as it may be: it is then in a
    /// later table, or belongs there.
    #[inline(always)]
    fn entry(&self, key: u64) -> Option<&Entry> {
        let entries = self.entries.as_ref();
        let mask = entries.len() - 1;
        let mut i = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - entries.len().trailing_zeros())) as usize;
        let entry = loop {
            let entry = &entries[i];
            match entry.key.load(Relaxed) {
                found if found == key => return Some(entry),
                0 => break entry,
                _ => i = (i + 1) & mask,
            }
        };
        let occupied = self.occupied.load(Relaxed);
        if (occupied + 1) * 4 > entries.len() * 3 {
            return None;
        }
        entry.parts.iter().for_each(|sum| sum.store(0, Relaxed));
        entry.key.store(key, Release);
        self.occupied.store(occupied + 1, Relaxed);
        Some(entry)
    }

    /// Empties the table, returning its entries still live at slot `now`
    /// and adding the count of the others to `expired`.
    fn take_live(&self, now: u64, live: &mut Vec<(u64, CostParts)>, expired: &mut i64) {
        for entry in self.entries.as_ref().iter().filter(|e| e.key.load(Relaxed) != 0) {
            let (key, parts) = entry.take();
            match aged_out(key as u32, now) {
                true => *expired += parts.0[COUNT],
                false => live.push((key, parts)),
            }
        }
        self.occupied.store(0, Relaxed);
    }

    /// Every taken entry, for readers.
    fn taken(&self) -> impl Iterator<Item = (u64, &Entry)> {
        self.entries.as_ref().iter().map(|e| (e.key.load(Relaxed), e)).filter(|(key, _)| *key != 0)
    }
}

#[inline]
fn key(route: RouteId, slot: u64) -> u64 {
    ((route.0 as u64 + 1) << 32) | (slot as u32 as u64)
}

fn route_of(key: u64) -> RouteId {
    RouteId((key >> 32) as u32 - 1)
}

/// Whether a permit admitted in slot `slot` (as `u32`) is past its TTL at
/// slot `now`. Slots compare modulo 2³²: one seen from an earlier `now`
/// (another thread's clock ran ahead) is live.
#[inline]
fn aged_out(slot: u32, now: u64) -> bool {
    let age = (now as u32).wrapping_sub(slot);
    age > TTL_SLOTS as u32 && age <= u32::MAX / 2
}

/// One thread's books.
#[derive(Debug)]
struct ThreadBooks {
    /// The table every booking tries first.
    first: Table<[Entry; FIRST_CAPACITY]>,
    /// Tables `first` overflowed into, each twice the size of the one
    /// before; a key is in the first table that had room for it.
    more: boxcar::Vec<Table<Box<[Entry]>>>,
    /// The slot of the last sweep: books for slots aged out by then are gone.
    swept_at: AtomicU64,
    /// Counts folded out of entries swept while unsettled.
    expired: AtomicI64,
    admitted: AtomicU64,
}

impl Default for ThreadBooks {
    fn default() -> Self {
        ThreadBooks {
            first: Table { entries: std::array::from_fn(|_| Entry::default()), occupied: AtomicUsize::new(0) },
            more: boxcar::Vec::new(),
            swept_at: AtomicU64::new(0),
            expired: AtomicI64::new(0),
            admitted: AtomicU64::new(0),
        }
    }
}

impl ThreadBooks {
    /// The entry of the permits of `route` admitted in `slot`, as of slot
    /// `now`, made if need be; `None` if they are past their TTL.
    // Always inlined: a call, with its saved registers, cost a third of
    // what booking does (callgrind).
    #[inline(always)]
    fn entry(&self, route: RouteId, slot: u64, now: u64) -> Option<&Entry> {
        let swept_at = self.swept_at.load(Relaxed);
        if now > swept_at {
            self.sweep(now);
        } else if aged_out(slot as u32, swept_at) {
            return None;
        }
        let key = key(route, slot);
        Some(match self.first.entry(key) {
            Some(entry) => entry,
            None => self.entry_beyond_first(key),
        })
    }

    /// [`Self::entry`] once the first table is full.
    #[cold]
    fn entry_beyond_first(&self, key: u64) -> &Entry {
        if let Some(entry) = self.more.iter().find_map(|(_, table)| table.entry(key)) {
            return entry;
        }
        let last = self.more.iter().last().map_or(FIRST_CAPACITY, |(_, table)| table.entries.len());
        let index = self.more.push(Table::new(last * 2));
        self.more[index].entry(key).expect("a new table has room")
    }

    /// Drops the entries aged out at slot `now`, counting their permits as
    /// expired, and books the rest again from the first table on.
    #[cold]
    fn sweep(&self, now: u64) {
        self.swept_at.store(now, Relaxed);
        let (mut live, mut expired) = (Vec::new(), 0);
        self.first.take_live(now, &mut live, &mut expired);
        self.more.iter().for_each(|(_, table)| table.take_live(now, &mut live, &mut expired));
        self.expired.store(self.expired.load(Relaxed) + expired, Relaxed);
        for (key, parts) in live {
            let entry = self.first.entry(key).unwrap_or_else(|| self.entry_beyond_first(key));
            entry.add::<false>(&parts, Booked::All);
        }
    }

    /// Every taken entry, for readers.
    fn entries(&self) -> impl Iterator<Item = (u64, &Entry)> {
        self.first.taken().chain(self.more.iter().flat_map(|(_, table)| table.taken()))
    }
}

/// Unsettled permits and admissions, kept per thread.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    threads: ThreadLocal<ThreadBooks>,
}

impl Pending {
    /// This thread's books.
    #[inline(always)]
    fn books(&self) -> &ThreadBooks {
        match self.threads.get() {
            Some(books) => books,
            None => self.first_books(),
        }
    }

    /// This thread's books, made on its first booking: out of line, since
    /// inlined, building their 2 KiB table set up a stack frame that large
    /// on every acquire (callgrind).
    #[cold]
    #[inline(never)]
    fn first_books(&self) -> &ThreadBooks {
        self.threads.get_or_default()
    }

    /// Books a permit of `route` admitted in TTL slot `slot`, reserving
    /// the `booked` parts of `parts`.
    #[inline(always)]
    pub fn admitted(&self, route: RouteId, slot: u64, parts: &CostParts, booked: Booked) {
        // Chosen before the lookup, each case inlined whole: chosen after
        // it, an acquire + settle on 6 scopes × 4 limits took 30 more
        // instructions (callgrind).
        match booked {
            Booked::Count => self.admit(route, slot, parts, Booked::Count),
            Booked::All => self.admit(route, slot, parts, Booked::All),
        }
    }

    #[inline(always)]
    fn admit(&self, route: RouteId, slot: u64, parts: &CostParts, booked: Booked) {
        let books = self.books();
        books.admitted.store(books.admitted.load(Relaxed) + 1, Relaxed);
        match books.entry(route, slot, slot) {
            Some(entry) => entry.add::<false>(parts, booked),
            // Admitted in a slot this thread has already swept (its clock
            // ran more than a TTL ahead): it is as good as expired.
            None => books.expired.store(books.expired.load(Relaxed) + 1, Relaxed),
        }
    }

    /// Books a change of what a pending permit reserves: `parts` more.
    #[inline]
    pub fn changed(&self, route: RouteId, slot: u64, now: u64, parts: &CostParts, booked: Booked) {
        // Past its TTL, the permit no longer counts as reserved anyway.
        if let Some(entry) = self.books().entry(route, slot, now) {
            entry.add::<false>(parts, booked);
        }
    }

    /// Books the settlement of a permit admitted in TTL slot `slot` that
    /// reserved `parts` (the `booked` ones), at slot `now`.
    #[inline]
    pub fn finished(&self, route: RouteId, slot: u64, now: u64, parts: &CostParts, booked: Booked) {
        // Where this thread has already swept the slot, dropping the
        // settlement leaves the permit counted as expired: the safe side.
        if let Some(entry) = self.books().entry(route, slot, now) {
            entry.add::<true>(parts, booked);
        }
    }

    /// Permits admitted so far.
    pub fn admitted_count(&self) -> u64 {
        self.threads.iter().map(|b| b.admitted.load(Relaxed)).sum()
    }

    /// Permits that outlived their TTL unsettled, as of TTL slot `now`.
    pub fn expired_count(&self, now: u64) -> u64 {
        let mut total = 0i64;
        for books in self.threads.iter() {
            total += books.expired.load(Relaxed);
            let stale = books.entries().filter(|(key, _)| aged_out(*key as u32, now));
            total += stale.map(|(_, e)| e.parts[COUNT].load(Relaxed)).sum::<i64>();
        }
        total.max(0) as u64
    }

    /// What the permits pending at TTL slot `now` reserve, per route.
    pub fn reserved(&self, now: u64) -> HashMap<RouteId, CostParts> {
        let mut by_route: HashMap<RouteId, CostParts> = HashMap::new();
        for books in self.threads.iter() {
            for (key, entry) in books.entries().filter(|(key, _)| !aged_out(*key as u32, now)) {
                by_route.entry(route_of(key)).or_default().add(&entry.parts());
            }
        }
        by_route
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(count: i64, input: i64) -> CostParts {
        CostParts([count, input, input, 0, 0, 0, 0])
    }

    const A: RouteId = RouteId(0);
    const B: RouteId = RouteId(7);

    #[test]
    fn settled_permits_never_expire_and_unsettled_ones_do() {
        let pending = Pending::default();
        pending.admitted(A, 3, &parts(1, 10), Booked::All);
        pending.admitted(A, 3, &parts(1, 20), Booked::All);
        pending.finished(A, 3, 3, &parts(1, 10), Booked::All);
        assert_eq!(pending.expired_count(3 + TTL_SLOTS), 0, "still live");
        assert_eq!(pending.reserved(3 + TTL_SLOTS)[&A], parts(1, 20));
        assert_eq!(pending.expired_count(4 + TTL_SLOTS), 1);
        assert!(pending.reserved(4 + TTL_SLOTS).is_empty());
        // Sweeping folds the aged-out count in rather than losing it.
        pending.admitted(A, 40, &parts(1, 5), Booked::All);
        assert_eq!(pending.expired_count(40), 1);
        assert_eq!(pending.expired_count(40 + TTL_SLOTS + 1), 2);
        assert_eq!(pending.admitted_count(), 3);
    }

    #[test]
    fn a_permit_settled_on_another_thread_balances() {
        let pending = Pending::default();
        pending.admitted(B, 0, &parts(1, 9), Booked::All);
        std::thread::scope(|s| {
            s.spawn(|| pending.finished(B, 0, 1, &parts(1, 9), Booked::All));
        });
        assert_eq!(pending.reserved(1).get(&B).copied().unwrap_or_default(), CostParts::default());
        assert_eq!(pending.expired_count(100), 0);
    }

    #[test]
    fn books_grow_past_their_first_table_and_keep_every_route() {
        let pending = Pending::default();
        let routes = 10 * FIRST_CAPACITY as u32;
        for r in 0..routes {
            pending.admitted(RouteId(r), 5, &parts(1, r as i64), Booked::All);
            pending.changed(RouteId(r), 5, 5, &parts(0, 1), Booked::All);
        }
        let reserved = pending.reserved(5);
        assert_eq!(reserved.len(), routes as usize);
        assert!((0..routes).all(|r| reserved[&RouteId(r)] == parts(1, r as i64 + 1)));
        // A sweep books the live entries again; each is still found.
        pending.admitted(RouteId(routes), 6, &parts(1, 1), Booked::All);
        for r in 0..routes {
            pending.finished(RouteId(r), 5, 6, &parts(1, r as i64 + 1), Booked::All);
        }
        let reserved = pending.reserved(6);
        assert_eq!(reserved.values().filter(|p| **p != CostParts::default()).count(), 1);
        assert_eq!(reserved[&RouteId(routes)], parts(1, 1));
        assert_eq!(pending.expired_count(6 + TTL_SLOTS + 1), 1);
    }

    #[test]
    fn a_settlement_after_this_thread_swept_the_slot_leaves_the_permit_expired() {
        let pending = Pending::default();
        pending.admitted(A, 0, &parts(1, 1), Booked::All);
        pending.admitted(A, 30, &parts(1, 1), Booked::All);
        pending.finished(A, 0, 30, &parts(1, 1), Booked::All);
        assert_eq!(pending.expired_count(30), 1);
        assert_eq!(pending.reserved(30)[&A], parts(1, 1));
    }
}
